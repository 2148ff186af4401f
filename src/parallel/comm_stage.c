/* GPU buffers on the MPI backend (comm.h): MPI here moves host memory only, so a call whose
 * buffers live on the GPU runs on page-locked host copies — the GPU is waited for, the device
 * bytes are copied to the host, MPI runs, the received bytes are copied back. One-rank groups copy
 * device to device. Slow by design (two copies and a device-wide wait per call): it lets two ranks
 * that share one GPU (NCCL refuses that) run the GPU code paths, data-parallel overlap included. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "comm_internal.h"
#include "core/cuda_runtime_shim.h"

static int on_gpu(const void *p) { return p && vfm_cuda_is_device_pointer(p); }

int comm_stage_wanted(const Comm *c, const void *a, const void *b) {
    return c->backend == COMM_BACKEND_MPI && (on_gpu(a) || on_gpu(b));
}

/* Host staging buffer `slot` (0 or 1) of at least bytes, page-locked when possible. */
static vfm_status stage_buffer(Comm *c, int slot, size_t bytes, void **out) {
    CommImpl *m = c->impl;
    if (bytes > m->stage_bytes[slot]) {
        if (m->stage_pinned[slot]) vfm_cuda_host_free(m->stage[slot]);
        else free(m->stage[slot]);
        m->stage[slot] = NULL;
        m->stage_bytes[slot] = 0;
        m->stage_pinned[slot] = vfm_cuda_host_alloc(bytes, &m->stage[slot]) == VFM_OK;
        if (!m->stage_pinned[slot]) m->stage[slot] = malloc(bytes);
        if (!m->stage[slot]) return vfm_fail(VFM_ERR_NOMEM, "comm %s: %zu bytes to stage GPU buffers", c->name, bytes);
        m->stage_bytes[slot] = bytes;
    }
    *out = m->stage[slot];
    return VFM_OK;
}

void comm_stage_free(Comm *c) {
    for (int k = 0; k < 2; k++) {
        if (c->impl->stage_pinned[k]) vfm_cuda_host_free(c->impl->stage[k]);
        else free(c->impl->stage[k]);
        c->impl->stage[k] = NULL;
        c->impl->stage_bytes[k] = 0;
    }
}

static vfm_status to_host(void *dst, const void *src, size_t bytes) {
    return bytes ? vfm_cuda_memcpy(dst, 0, src, 1, bytes) : VFM_OK;
}

vfm_status comm_stage_in(Comm *c, CommStaged *st, const void *send, size_t send_bytes, void *recv,
                         size_t recv_bytes) {
    memset(st, 0, sizeof *st);
    int ds = on_gpu(send), dr = on_gpu(recv);
    st->host_send = (void *)send;
    st->host_recv = recv;
    if (!ds && !dr) return VFM_OK;
    /* the data may still be being written by kernels on any stream */
    VFM_TRY(vfm_cuda_synchronize());
    uintptr_t s0 = (uintptr_t)send, s1 = s0 + send_bytes, r0 = (uintptr_t)recv, r1 = r0 + recv_bytes;
    if (ds && dr && send_bytes && recv_bytes && s0 < r1 && r0 < s1) { /* in place: one copy of both */
        uintptr_t lo = s0 < r0 ? s0 : r0, hi = s1 > r1 ? s1 : r1;
        char *h;
        VFM_TRY(stage_buffer(c, 0, hi - lo, (void **)&h));
        VFM_TRY(to_host(h, (const void *)lo, hi - lo));
        st->host_send = h + (s0 - lo);
        st->host_recv = h + (r0 - lo);
    } else {
        if (ds) {
            VFM_TRY(stage_buffer(c, 0, send_bytes, &st->host_send));
            VFM_TRY(to_host(st->host_send, send, send_bytes));
        }
        if (dr) { /* copied in too: bytes the call does not write must come back unchanged */
            VFM_TRY(stage_buffer(c, 1, recv_bytes, &st->host_recv));
            VFM_TRY(to_host(st->host_recv, recv, recv_bytes));
        }
    }
    if (dr) {
        st->dev_recv = recv;
        st->recv_bytes = recv_bytes;
    }
    return VFM_OK;
}

vfm_status comm_stage_out(CommStaged *st, vfm_status call) {
    if (call != VFM_OK || !st->dev_recv || !st->recv_bytes) return call;
    return vfm_cuda_memcpy(st->dev_recv, 1, st->host_recv, 0, st->recv_bytes);
}

vfm_status comm_local_copy(void *dst, const void *src, size_t bytes) {
    if (dst == src || !bytes) return VFM_OK;
    int dd = on_gpu(dst), ds = on_gpu(src);
    if (!dd && !ds) {
        memmove(dst, src, bytes);
        return VFM_OK;
    }
    return vfm_cuda_memcpy(dst, dd, src, ds, bytes);
}

/* ---- non-blocking exchanges: every GPU buffer gets its own host copy for the exchange's life ---- */

typedef struct StagedExchange {
    void *inner;     /* the MPI exchange on the host copies */
    int n;
    void **host;     /* [n] host copy of op i's buffer, or NULL when it is host memory */
    CommP2P *ops;    /* [n] the caller's ops (device pointers) */
} StagedExchange;

/* The staged exchanges posted and not yet waited for (comm_wait tells them from the backend's). */
static StagedExchange **g_live;
static int g_n_live, g_cap_live;
static pthread_mutex_t g_live_lock = PTHREAD_MUTEX_INITIALIZER;

static int live_add(StagedExchange *x) {
    pthread_mutex_lock(&g_live_lock);
    if (g_n_live == g_cap_live) {
        int cap = g_cap_live ? 2 * g_cap_live : 16;
        StagedExchange **p = realloc(g_live, (size_t)cap * sizeof *p);
        if (!p) {
            pthread_mutex_unlock(&g_live_lock);
            return 0;
        }
        g_live = p;
        g_cap_live = cap;
    }
    g_live[g_n_live++] = x;
    pthread_mutex_unlock(&g_live_lock);
    return 1;
}

static int live_take(const void *x) {
    int found = 0;
    pthread_mutex_lock(&g_live_lock);
    for (int i = 0; i < g_n_live && !found; i++)
        if (g_live[i] == x) {
            g_live[i] = g_live[--g_n_live];
            found = 1;
        }
    pthread_mutex_unlock(&g_live_lock);
    return found;
}

int comm_stage_exchange_owns(const void *pending) {
    int found = 0;
    pthread_mutex_lock(&g_live_lock);
    for (int i = 0; i < g_n_live && !found; i++) found = g_live[i] == pending;
    pthread_mutex_unlock(&g_live_lock);
    return found;
}

static void staged_free(StagedExchange *x) {
    if (!x) return;
    for (int i = 0; x->host && i < x->n; i++) vfm_cuda_host_free(x->host[i]);
    free(x->host);
    free(x->ops);
    free(x);
}

int comm_stage_exchange_wanted(const Comm *c, const CommP2P *ops, int n) {
    if (c->backend != COMM_BACKEND_MPI) return 0;
    for (int i = 0; i < n; i++)
        if (on_gpu(ops[i].buf)) return 1;
    return 0;
}

vfm_status comm_stage_exchange_start(Comm *c, const CommP2P *ops, int n, void **pending) {
    StagedExchange *x = calloc(1, sizeof *x);
    CommP2P *host_ops = calloc((size_t)n, sizeof *host_ops);
    if (x) {
        x->n = n;
        x->host = calloc((size_t)n, sizeof *x->host);
        x->ops = malloc((size_t)n * sizeof *x->ops);
    }
    vfm_status s = x && host_ops && x->host && x->ops ? VFM_OK : vfm_fail(VFM_ERR_NOMEM, "exchange over %s", c->name);
    if (s == VFM_OK) {
        memcpy(x->ops, ops, (size_t)n * sizeof *ops);
        memcpy(host_ops, ops, (size_t)n * sizeof *ops);
        s = vfm_cuda_synchronize();
    }
    for (int i = 0; s == VFM_OK && i < n; i++) {
        if (!on_gpu(ops[i].buf)) continue;
        size_t bytes = (size_t)ops[i].count * dtype_size(ops[i].dtype);
        s = vfm_cuda_host_alloc(bytes, &x->host[i]);
        if (s == VFM_OK && ops[i].is_send) s = to_host(x->host[i], ops[i].buf, bytes);
        host_ops[i].buf = x->host[i];
    }
    if (s == VFM_OK) s = mpi_exchange_start(c, host_ops, n, &x->inner);
    free(host_ops);
    if (s == VFM_OK && !live_add(x)) {
        mpi_wait(c, x->inner); /* nothing may outlive its buffers */
        s = vfm_fail(VFM_ERR_NOMEM, "exchange over %s: bookkeeping", c->name);
    }
    if (s != VFM_OK) {
        staged_free(x);
        return s;
    }
    *pending = x;
    return VFM_OK;
}

vfm_status comm_stage_exchange_wait(Comm *c, void *pending) {
    StagedExchange *x = pending;
    live_take(x);
    vfm_status s = mpi_wait(c, x->inner);
    for (int i = 0; s == VFM_OK && i < x->n; i++)
        if (x->host[i] && !x->ops[i].is_send)
            s = vfm_cuda_memcpy(x->ops[i].buf, 1, x->host[i], 0, (size_t)x->ops[i].count * dtype_size(x->ops[i].dtype));
    staged_free(x);
    return s;
}
