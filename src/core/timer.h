/* Wall-clock timers (monotonic). */
#ifndef VFM_TIMER_H
#define VFM_TIMER_H

/* Seconds since an arbitrary fixed point, monotonic. */
double time_now(void);

typedef struct {
    double start;
    double total; /* accumulated seconds over start/stop pairs */
    long count;
} Timer;

void timer_start(Timer *t);
double timer_stop(Timer *t); /* returns this interval's seconds */

#endif
