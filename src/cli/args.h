/* Command-line parsing for the subcommands: a table of flags per command, `--flag value` or
 * `--flag=value`, positional arguments (config overrides a.b.c=value) kept in order. An unknown
 * flag is a usage error naming it. */
#ifndef VFM_ARGS_H
#define VFM_ARGS_H

#include <stdint.h>

#include "core/error.h"

typedef struct {
    const char *name;     /* "--config" */
    const char *metavar;  /* "FILE", or NULL for a switch */
    const char *help;
    const char *value;    /* parsed value (last one wins); "1" for a present switch */
    int present;
} ArgFlag;

typedef struct {
    const char *items[256];
    int n;
} ArgList;

/* Parses argv[0..argc) (after the command name). `-h`/`--help` sets *want_help. */
vfm_status args_parse(const char *command, int argc, char **argv, ArgFlag *flags, int nflags, ArgList *positional,
                      int *want_help);
const ArgFlag *args_flag(const ArgFlag *flags, int nflags, const char *name);
const char *args_value(const ArgFlag *flags, int nflags, const char *name, const char *fallback);
/* The flag's value as a decimal integer in [lo, hi], or fallback when the flag is absent. Anything
 * else is VFM_ERR_USAGE naming the flag and what it takes ("vfm sample: --num -3: expected an
 * integer in [1, 100000]"). command: "sample", "prepare images", ... */
vfm_status args_int(const char *command, const ArgFlag *flags, int nflags, const char *name, int64_t fallback,
                    int64_t lo, int64_t hi, int64_t *out);
/* The same for a finite number in [lo, hi]. */
vfm_status args_number(const char *command, const ArgFlag *flags, int nflags, const char *name, double fallback,
                       double lo, double hi, double *out);
/* Prints "usage: vfm <usage>\n\n<description>\n\noptions:\n  --flag VAL  help ..." */
void args_print_help(const char *usage, const char *description, const ArgFlag *flags, int nflags);

#endif
