/* Per-op time breakdown (`vfm bench --profile`): while profiling is on, every op called from the
 * thread that switched it on is timed — by the wall clock around the call on the CPU (the CPU
 * ops are synchronous), by a pair of CUDA events around it on the ops' stream on the GPU (the
 * time the GPU spent on it, not the launch). Nested op calls count once, in the outermost op.
 * Ops called from other threads (the data loader's readers) are not timed. Costs one branch per
 * op call while off. */
#ifndef VFM_OPS_PROFILE_H
#define VFM_OPS_PROFILE_H

#include <stdint.h>

#include "core/error.h"
#include "core/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Starts (clearing what was gathered) or stops profiling; the calling thread is the one timed. */
void ops_profile_enable(int on);
int ops_profile_enabled(void);
/* Stops timing for a while (1) and goes on (0) without clearing what was gathered. */
void ops_profile_pause(int paused);
/* Waits for the GPU events recorded so far and adds their times in; call at the end of a step
 * (a no-op on the CPU). */
vfm_status ops_profile_collect(void);

typedef struct OpsProfileEntry {
    const char *name; /* the op's name, e.g. "linear_backward" */
    Device device;    /* where it ran (an op that ran on both shows as two entries) */
    int64_t calls;
    double seconds;   /* summed over the calls */
} OpsProfileEntry;

/* What was gathered since ops_profile_enable(1), largest time first: fills out[max], returns the
 * number of entries (at most max). */
int ops_profile_entries(OpsProfileEntry *out, int max);

/* ---- used by the op dispatchers (ops_check.h) ---- */
extern int g_ops_profile_on;
typedef struct OpsProfileMark {
    int active, entry, ev0;
    double t0;
} OpsProfileMark;
void ops_profile_begin(OpsProfileMark *m, const char *name, Device dev);
void ops_profile_end(OpsProfileMark *m);

#ifdef __cplusplus
}
#endif
#endif
