// CUDA events for the op profiler (ops_profile.c): a pool of timing events recorded on the ops'
// stream, handed out in order and reused after cuda_profile_reset.
#include <stdlib.h>

#include "cuda_common.h"

static cudaEvent_t *g_events;
static int g_n_events, g_next;

extern "C" vfm_status cuda_profile_record(int *event) {
    if (g_next == g_n_events) {
        int n = g_n_events ? 2 * g_n_events : 2048;
        cudaEvent_t *p = (cudaEvent_t *)realloc(g_events, (size_t)n * sizeof *p);
        if (!p) return vfm_fail(VFM_ERR_NOMEM, "profiler: %d CUDA events", n);
        g_events = p;
        for (int i = g_n_events; i < n; i++) {
            cudaError_t e = cudaEventCreate(&g_events[i]);
            if (e != cudaSuccess) {
                g_n_events = i;
                return cuda_call_fail("profiler", "cudaEventCreate", e, NULL);
            }
        }
        g_n_events = n;
    }
    CUDA_TRY("profiler", NULL, cudaEventRecord(g_events[g_next], cuda_stream()));
    *event = g_next++;
    return VFM_OK;
}

extern "C" vfm_status cuda_profile_elapsed(int event0, int event1, float *ms) {
    if (event0 < 0 || event1 >= g_next || event0 > event1)
        return vfm_fail(VFM_ERR_INTERNAL, "profiler: events %d..%d of %d recorded", event0, event1, g_next);
    CUDA_TRY("profiler", NULL, cudaEventSynchronize(g_events[event1]));
    CUDA_TRY("profiler", NULL, cudaEventElapsedTime(ms, g_events[event0], g_events[event1]));
    return VFM_OK;
}

extern "C" void cuda_profile_reset(void) { g_next = 0; }
