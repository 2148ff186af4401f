/* The pipeline-schedule runner (see pp_exec.h). */
#include "pp_exec.h"

#include <stdlib.h>
#include <string.h>

enum { BUF_IN, BUF_OUT, BUF_GOUT, BUF_GIN, BUF_KINDS };

typedef struct {
    void **buf;       /* [M·V·BUF_KINDS] */
    int V, live, max_live;
    size_t bytes;
    Device device;
} Buffers;

static void **slot(Buffers *b, int mb, int chunk, int kind) { return &b->buf[((size_t)mb * b->V + chunk) * BUF_KINDS + kind]; }

static vfm_status take(Buffers *b, int mb, int chunk, int kind, void **out) {
    void **p = slot(b, mb, chunk, kind);
    if (*p) return vfm_fail(VFM_ERR_INTERNAL, "pipeline: buffer %d of micro-batch %d chunk %d is already in use", kind, mb, chunk);
    VFM_TRY(device_malloc(b->device, b->bytes ? b->bytes : 1, p));
    if (++b->live > b->max_live) b->max_live = b->live;
    *out = *p;
    return VFM_OK;
}

static void drop(Buffers *b, int mb, int chunk, int kind) {
    void **p = slot(b, mb, chunk, kind);
    if (!*p) return;
    device_free(b->device, *p);
    *p = NULL;
    b->live--;
}

static vfm_status held(Buffers *b, int mb, int chunk, int kind, const char *what, void **out) {
    *out = *slot(b, mb, chunk, kind);
    if (!*out) return vfm_fail(VFM_ERR_INTERNAL, "pipeline: %s of micro-batch %d chunk %d is missing", what, mb, chunk);
    return VFM_OK;
}

static vfm_status run_comm(const PpSchedule *s, const PpAction *a, Comm *pp, Buffers *b, int64_t count, DType dt) {
    CommP2P ops[PP_MAX_MSGS];
    for (int i = 0; i < a->n_msgs; i++) {
        const PpMsg *m = &a->msgs[i];
        void *buf = NULL;
        switch (m->kind) {
        case PP_SEND_ACT: VFM_TRY(held(b, m->mb, m->chunk, BUF_OUT, "the output to send", &buf)); break;
        case PP_SEND_GRAD: VFM_TRY(held(b, m->mb, m->chunk, BUF_GIN, "the input gradient to send", &buf)); break;
        case PP_RECV_ACT: VFM_TRY(take(b, m->mb, m->chunk, BUF_IN, &buf)); break;
        case PP_RECV_GRAD: VFM_TRY(take(b, m->mb, m->chunk, BUF_GOUT, &buf)); break;
        }
        ops[i] = (CommP2P){m->kind == PP_SEND_ACT || m->kind == PP_SEND_GRAD, buf, count, dt, m->peer};
    }
    if (!pp || pp->size != s->stages)
        return vfm_fail(VFM_ERR_INTERNAL, "pipeline: stage %d of %d has a PP comm of %d ranks", s->stage, s->stages,
                        pp ? pp->size : 1);
    CommRequest req;
    VFM_TRY(comm_exchange_start(pp, ops, a->n_msgs, &req));
    VFM_TRY(comm_wait(&req));
    for (int i = 0; i < a->n_msgs; i++) {
        const PpMsg *m = &a->msgs[i];
        if (m->kind == PP_SEND_ACT) drop(b, m->mb, m->chunk, BUF_OUT);
        if (m->kind == PP_SEND_GRAD) drop(b, m->mb, m->chunk, BUF_GIN);
    }
    return VFM_OK;
}

vfm_status pp_run(const PpSchedule *s, Comm *pp, const PpStage *stage, int64_t act_count, DType dtype, Device device,
                  PpRunStats *stats) {
    int P = s->stages, V = s->chunks, M = s->microbatches, C = P * V;
    Buffers b = {calloc((size_t)M * (size_t)V * BUF_KINDS, sizeof(void *)), V, 0, 0, (size_t)act_count * dtype_size(dtype),
                 device};
    if (!b.buf) return vfm_fail(VFM_ERR_NOMEM, "pipeline: buffer table");
    int exchanges = 0;
    vfm_status st = VFM_OK;
    for (int i = 0; i < s->n_actions && st == VFM_OK; i++) {
        const PpAction *a = &s->actions[i];
        int g = a->chunk * P + s->stage;
        if (a->kind == PP_COMM) {
            st = run_comm(s, a, pp, &b, act_count, dtype);
            exchanges++;
        } else if (a->kind == PP_FORWARD) {
            void *x = NULL, *y = NULL;
            if (g > 0) st = held(&b, a->mb, a->chunk, BUF_IN, "the received input", &x);
            if (st == VFM_OK && g < C - 1) st = take(&b, a->mb, a->chunk, BUF_OUT, &y);
            if (st == VFM_OK) st = stage->forward(stage->ctx, a->mb, a->chunk, x, y);
            if (s->forward_only) drop(&b, a->mb, a->chunk, BUF_IN);
        } else {
            void *dy = NULL, *dx = NULL;
            if (g < C - 1) st = held(&b, a->mb, a->chunk, BUF_GOUT, "the received output gradient", &dy);
            if (st == VFM_OK && g > 0) st = take(&b, a->mb, a->chunk, BUF_GIN, &dx);
            if (st == VFM_OK) st = stage->backward(stage->ctx, a->mb, a->chunk, dy, dx);
            drop(&b, a->mb, a->chunk, BUF_GOUT);
            drop(&b, a->mb, a->chunk, BUF_IN);
        }
    }
    if (st == VFM_OK && b.live != 0) st = vfm_fail(VFM_ERR_INTERNAL, "pipeline: %d buffers still held after the schedule", b.live);
    for (size_t k = 0; k < (size_t)M * (size_t)V * BUF_KINDS; k++)
        if (b.buf[k]) device_free(device, b.buf[k]);
    free(b.buf);
    if (stats) {
        stats->max_live_buffers = b.max_live;
        stats->exchanges = exchanges;
    }
    return st;
}
