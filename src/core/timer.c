/* Monotonic clock helpers. */
#include "timer.h"

#include <time.h>

double time_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void timer_start(Timer *t) { t->start = time_now(); }

double timer_stop(Timer *t) {
    double dt = time_now() - t->start;
    t->total += dt;
    t->count++;
    return dt;
}
