/* The per-op time table of ops_profile.h: CPU wall clock per call, GPU event pairs gathered at
 * ops_profile_collect. */
#include "ops_profile.h"

#include <stdlib.h>
#include <string.h>

#include "core/timer.h"
#ifdef VFM_CUDA
#include "cuda/ops_cuda.h"
#endif

#define MAX_ENTRIES 160

int g_ops_profile_on;
static _Thread_local int t_profiler_thread, t_depth;
static OpsProfileEntry g_entries[MAX_ENTRIES];
static int g_n_entries;
static int g_n_pending;
#ifdef VFM_CUDA
typedef struct Pending { /* a GPU op's event pair, read at ops_profile_collect */
    int entry, ev0, ev1;
} Pending;
static Pending *g_pending;
static int g_cap_pending;
#endif

void ops_profile_enable(int on) {
    g_n_entries = 0;
    g_n_pending = 0;
#ifdef VFM_CUDA
    cuda_profile_reset();
#endif
    t_profiler_thread = on;
    t_depth = 0;
    g_ops_profile_on = on;
}

int ops_profile_enabled(void) { return g_ops_profile_on; }

void ops_profile_pause(int paused) {
    if (t_profiler_thread) g_ops_profile_on = !paused;
}

static int entry_of(const char *name, Device dev) {
    for (int i = 0; i < g_n_entries; i++)
        if (g_entries[i].device == dev && (g_entries[i].name == name || strcmp(g_entries[i].name, name) == 0)) return i;
    if (g_n_entries == MAX_ENTRIES) return -1;
    g_entries[g_n_entries] = (OpsProfileEntry){name, dev, 0, 0.0};
    return g_n_entries++;
}

void ops_profile_begin(OpsProfileMark *m, const char *name, Device dev) {
    m->active = 0;
    if (!t_profiler_thread || t_depth++ > 0) return;
    m->entry = entry_of(name, dev);
    if (m->entry < 0) return;
    m->ev0 = -1;
#ifdef VFM_CUDA
    if (dev == DEV_CUDA && cuda_profile_record(&m->ev0) != VFM_OK) return; /* not timed */
#endif
    m->active = 1;
    m->t0 = time_now();
}

void ops_profile_end(OpsProfileMark *m) {
    if (!t_profiler_thread) return;
    t_depth--;
    if (!m->active) return;
    OpsProfileEntry *e = &g_entries[m->entry];
    e->calls++;
    if (m->ev0 < 0) {
        e->seconds += time_now() - m->t0;
        return;
    }
#ifdef VFM_CUDA
    int ev1;
    if (cuda_profile_record(&ev1) != VFM_OK) return;
    if (g_n_pending == g_cap_pending) {
        int cap = g_cap_pending ? 2 * g_cap_pending : 1024;
        Pending *p = realloc(g_pending, (size_t)cap * sizeof *p);
        if (!p) return;
        g_pending = p;
        g_cap_pending = cap;
    }
    g_pending[g_n_pending++] = (Pending){m->entry, m->ev0, ev1};
#endif
}

vfm_status ops_profile_collect(void) {
#ifdef VFM_CUDA
    for (int i = 0; i < g_n_pending; i++) {
        float ms = 0;
        VFM_TRY(cuda_profile_elapsed(g_pending[i].ev0, g_pending[i].ev1, &ms));
        g_entries[g_pending[i].entry].seconds += ms * 1e-3;
    }
    g_n_pending = 0;
    cuda_profile_reset();
#endif
    return VFM_OK;
}

static int by_time(const void *a, const void *b) {
    double x = ((const OpsProfileEntry *)a)->seconds, y = ((const OpsProfileEntry *)b)->seconds;
    return x < y ? 1 : x > y ? -1 : 0;
}

int ops_profile_entries(OpsProfileEntry *out, int max) {
    OpsProfileEntry all[MAX_ENTRIES];
    memcpy(all, g_entries, (size_t)g_n_entries * sizeof *all);
    qsort(all, (size_t)g_n_entries, sizeof *all, by_time);
    int n = g_n_entries < max ? g_n_entries : max;
    memcpy(out, all, (size_t)n * sizeof *out);
    return n;
}
