/* Progress bars and lines on stderr (see progress.h). */
#include "progress.h"

#include <inttypes.h>
#include <stdio.h>
#include <unistd.h>

#include "core/timer.h"

void cli_progress_init(CliProgress *p, const char *label, const char *unit) {
    p->label = label;
    p->unit = unit;
    p->tty = isatty(2);
    p->last_step = 0;
    p->start = time_now();
    p->last_draw = -1;
}

void cli_progress_update(CliProgress *p, int64_t done, int64_t total, const char *extra) {
    if (total <= 0) return;
    if (!p->tty) {
        int step = (int)(done * 20 / total);
        if (step <= p->last_step) return;
        p->last_step = step;
        fprintf(stderr, "%s: %" PRId64 "/%" PRId64 " %s%s%s\n", p->label, done, total, p->unit, extra ? ", " : "", extra ? extra : "");
        return;
    }
    double now = time_now();
    if (done < total && p->last_draw >= 0 && now - p->last_draw < 0.1) return;
    p->last_draw = now;
    const int width = 30, filled = (int)(done * width / total);
    char bar[64];
    for (int i = 0; i < width; i++) bar[i] = i < filled ? '#' : '-';
    bar[width] = 0;
    fprintf(stderr, "\r%s [%s] %" PRId64 "/%" PRId64 " %s%s%s, %.1f s ", p->label, bar, done, total, p->unit, extra ? ", " : "",
            extra ? extra : "", now - p->start);
    if (done >= total) fputc('\n', stderr);
    fflush(stderr);
}
