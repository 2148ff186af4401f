/* Progress of long commands on stderr: on a terminal one bar redrawn in place
 *   "prepare [##########----------] 120/200 samples, 1 shard, 3.2 s"
 * (at most ten times a second, and at the end); otherwise (a log, a pipe) one line per 5% of the
 * work, "prepare: 120/200 samples, 1 shard". */
#ifndef VFM_CLI_PROGRESS_H
#define VFM_CLI_PROGRESS_H

#include <stdint.h>

typedef struct {
    const char *label; /* "prepare" */
    const char *unit;  /* "samples" */
    int tty;           /* stderr is a terminal */
    int last_step;     /* twentieths reported (lines) */
    double start, last_draw;
} CliProgress;

void cli_progress_init(CliProgress *p, const char *label, const char *unit);
/* extra (may be NULL): what follows the count, e.g. "1 shard". */
void cli_progress_update(CliProgress *p, int64_t done, int64_t total, const char *extra);

#endif
