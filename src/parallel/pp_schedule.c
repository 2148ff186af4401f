/* Pipeline schedules (1F1B, interleaved 1F1B), their checker, and the split of blocks over chunks
 * (see pp_schedule.h). */
#include "pp_schedule.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- building ------------------------------------------------------------------------------- */

static vfm_status push(PpSchedule *s, const PpAction *a) {
    if (s->n_actions == s->capacity) {
        int cap = s->capacity ? 2 * s->capacity : 32;
        PpAction *p = realloc(s->actions, (size_t)cap * sizeof *p);
        if (!p) return vfm_fail(VFM_ERR_NOMEM, "pipeline schedule: %d actions", cap);
        s->actions = p;
        s->capacity = cap;
    }
    s->actions[s->n_actions++] = *a;
    return VFM_OK;
}

static vfm_status compute(PpSchedule *s, PpActionKind kind, int mb, int chunk) {
    PpAction a = {.kind = kind, .mb = mb, .chunk = chunk};
    return push(s, &a);
}

/* A communication step under construction: messages are added, empty steps are dropped. */
typedef struct {
    PpAction a;
} Step;

static void step_init(Step *st) {
    memset(st, 0, sizeof *st);
    st->a.kind = PP_COMM;
}

static void step_add(Step *st, PpMsgKind kind, int mb, int chunk, int peer) {
    st->a.msgs[st->a.n_msgs++] = (PpMsg){kind, mb, chunk, peer};
}

static vfm_status step_emit(PpSchedule *s, const Step *st) { return st->a.n_msgs ? push(s, &st->a) : VFM_OK; }

static void schedule_init(PpSchedule *s, int stages, int microbatches, int chunks, int stage) {
    memset(s, 0, sizeof *s);
    s->stages = stages;
    s->microbatches = microbatches;
    s->chunks = chunks;
    s->stage = stage;
}

static vfm_status check_args(int stages, int microbatches, int chunks, int stage) {
    if (stages < 1 || microbatches < 1 || chunks < 1 || stage < 0 || stage >= stages)
        return vfm_fail(VFM_ERR_INTERNAL, "pipeline schedule: stage %d of %d, %d micro-batches, %d chunks", stage, stages,
                        microbatches, chunks);
    return VFM_OK;
}

vfm_status pp_schedule_1f1b(PpSchedule *s, int P, int M, int p) {
    VFM_TRY(check_args(P, M, 1, p));
    schedule_init(s, P, M, 1, p);
    int first = p == 0, last = p == P - 1, next = (p + 1) % P, prev = (p + P - 1) % P;
    int W = P - p - 1 < M ? P - p - 1 : M, R = M - W;
    s->warmup = W;
    vfm_status st = VFM_OK;
    Step c;
    for (int i = 0; i < W && st == VFM_OK; i++) {
        step_init(&c);
        if (!first) step_add(&c, PP_RECV_ACT, i, 0, prev);
        st = step_emit(s, &c);
        if (st == VFM_OK) st = compute(s, PP_FORWARD, i, 0);
        step_init(&c);
        if (!last) step_add(&c, PP_SEND_ACT, i, 0, next);
        if (st == VFM_OK) st = step_emit(s, &c);
    }
    if (R > 0 && !first && st == VFM_OK) {
        step_init(&c);
        step_add(&c, PP_RECV_ACT, W, 0, prev);
        st = step_emit(s, &c);
    }
    for (int i = 0; i < R && st == VFM_OK; i++) {
        st = compute(s, PP_FORWARD, W + i, 0);
        step_init(&c); /* send_forward_recv_backward */
        if (!last) {
            step_add(&c, PP_SEND_ACT, W + i, 0, next);
            step_add(&c, PP_RECV_GRAD, i, 0, next);
        }
        if (st == VFM_OK) st = step_emit(s, &c);
        if (st == VFM_OK) st = compute(s, PP_BACKWARD, i, 0);
        step_init(&c); /* send_backward_recv_forward (the last step only sends) */
        if (!first) {
            step_add(&c, PP_SEND_GRAD, i, 0, prev);
            if (i < R - 1) step_add(&c, PP_RECV_ACT, W + i + 1, 0, prev);
        }
        if (st == VFM_OK) st = step_emit(s, &c);
    }
    for (int i = 0; i < W && st == VFM_OK; i++) {
        step_init(&c);
        if (!last) step_add(&c, PP_RECV_GRAD, R + i, 0, next);
        st = step_emit(s, &c);
        if (st == VFM_OK) st = compute(s, PP_BACKWARD, R + i, 0);
        step_init(&c);
        if (!first) step_add(&c, PP_SEND_GRAD, R + i, 0, prev);
        if (st == VFM_OK) st = step_emit(s, &c);
    }
    if (st != VFM_OK) pp_schedule_free(s);
    return st;
}

static vfm_status forward_only_1f1b(PpSchedule *s, int P, int M, int p) {
    VFM_TRY(check_args(P, M, 1, p));
    schedule_init(s, P, M, 1, p);
    s->forward_only = 1;
    s->warmup = M;
    vfm_status st = VFM_OK;
    Step c;
    for (int i = 0; i < M && st == VFM_OK; i++) {
        step_init(&c);
        if (p > 0) step_add(&c, PP_RECV_ACT, i, 0, p - 1);
        st = step_emit(s, &c);
        if (st == VFM_OK) st = compute(s, PP_FORWARD, i, 0);
        step_init(&c);
        if (p < P - 1) step_add(&c, PP_SEND_ACT, i, 0, p + 1);
        if (st == VFM_OK) st = step_emit(s, &c);
    }
    if (st != VFM_OK) pp_schedule_free(s);
    return st;
}

vfm_status pp_interleave_group(int P, int M, int *group) {
    if (M < P)
        return vfm_fail(VFM_ERR_USAGE, "the interleaved pipeline schedule (model.virtual_pipeline_model_parallel_size > 1) "
                        "needs at least model.pipeline_model_parallel_size = %d micro-batches per step and data-parallel "
                        "replica, got %d (raise train.global_batch_size or use virtual_pipeline_model_parallel_size = 1)", P, M);
    for (int g = P; g <= M; g++)
        if (M % g == 0 || M % g >= P) {
            *group = g;
            return VFM_OK;
        }
    *group = M; /* not reached: g = M always qualifies */
    return VFM_OK;
}

/* Megatron's schedule table: virtual step k → (micro-batch, forward chunk). */
typedef struct {
    int P, M, V, G, p, total;
    int *mb, *ch;
} Table;

static int table_chunk(const Table *t, int k, int forward) {
    int c = t->ch[k % t->total];
    return forward ? c : t->V - 1 - c;
}

/* Whether the communication after virtual step k receives a tensor for a later step, and for
 * which local chunk (Megatron's recv_tensor_from_previous_stage): the leading stage (stage 0
 * forward, stage P−1 backward) receives what the ending stage produced P−1 steps earlier. */
static int recv_chunk(const Table *t, int k, int forward, int *chunk) {
    int leading = forward ? t->p == 0 : t->p == t->P - 1;
    int recv = 1, next;
    if (leading) {
        if (k < t->P - 1) {
            recv = 0;
            next = table_chunk(t, k + 1, forward);
        } else {
            next = table_chunk(t, k - (t->P - 1), forward);
        }
        if (next == (forward ? t->V - 1 : 0)) recv = 0;
        next += forward ? 1 : -1;
    } else {
        next = table_chunk(t, k + 1, forward);
    }
    *chunk = next;
    return recv;
}

static vfm_status interleaved(PpSchedule *s, int P, int M, int V, int G, int p, int forward_only);

vfm_status pp_schedule_interleaved(PpSchedule *s, int P, int M, int V, int G, int p) {
    return interleaved(s, P, M, V, G, p, 0);
}

static vfm_status interleaved(PpSchedule *s, int P, int M, int V, int G, int p, int forward_only) {
    VFM_TRY(check_args(P, M, V, p));
    if (V < 2) return vfm_fail(VFM_ERR_INTERNAL, "interleaved pipeline schedule with %d chunk", V);
    if (P < 2)
        return vfm_fail(VFM_ERR_USAGE, "model.virtual_pipeline_model_parallel_size = %d needs "
                        "model.pipeline_model_parallel_size > 1", V);
    if (G == 0) VFM_TRY(pp_interleave_group(P, M, &G));
    if (G < P || G > M || (M % G != 0 && M % G < P))
        return vfm_fail(VFM_ERR_USAGE, "interleaved pipeline schedule: %d micro-batches per group do not fit %d stages "
                        "and %d micro-batches (need P <= G <= M and M mod G = 0 or >= P)", G, P, M);
    schedule_init(s, P, M, V, p);
    s->group = G;
    Table t = {P, M, V, G, p, M * V, malloc((size_t)(M * V) * sizeof(int)), malloc((size_t)(M * V) * sizeof(int))};
    if (!t.mb || !t.ch) {
        free(t.mb), free(t.ch);
        return vfm_fail(VFM_ERR_NOMEM, "pipeline schedule table");
    }
    for (int lo = 0, k = 0; lo < M; lo += G) {
        int hi = lo + G >= M ? M : lo + G; /* the last group takes what is left */
        for (int v = 0; v < V; v++)
            for (int m = lo; m < hi; m++) t.mb[k] = m, t.ch[k++] = v;
    }
    int total = M * V, W = forward_only ? total : 2 * (P - p - 1) + (V - 1) * G;
    int all_warmup = W >= total;
    if (all_warmup) W = total;
    s->forward_only = forward_only;
    int R = total - W;
    s->warmup = W;
    int next = (p + 1) % P, prev = (p + P - 1) % P, first = p == 0, last = p == P - 1;
    /* per-chunk counters: forwards/backwards run each chunk's micro-batches in increasing order,
     * and received tensors are consumed in order, so the i-th of a kind for chunk v is micro-batch i */
    int *counters[4];
    int *counter_mem = calloc((size_t)(4 * V), sizeof(int));
    if (!counter_mem) {
        free(t.mb), free(t.ch);
        return vfm_fail(VFM_ERR_NOMEM, "pipeline schedule counters");
    }
    for (int i = 0; i < 4; i++) counters[i] = counter_mem + i * V;
    enum { C_FWD, C_BWD, C_RECV_ACT, C_RECV_GRAD };
    vfm_status st = VFM_OK;
    Step c;
    step_init(&c);
    if (!first) step_add(&c, PP_RECV_ACT, counters[C_RECV_ACT][0]++, 0, prev);
    st = step_emit(s, &c);
    for (int k = 0; k < W && st == VFM_OK; k++) {
        int v = table_chunk(&t, k, 1), m = counters[C_FWD][v]++;
        st = compute(s, PP_FORWARD, m, v);
        step_init(&c);
        if (!(last && v == V - 1)) step_add(&c, PP_SEND_ACT, m, v, next);
        int nv, recv = recv_chunk(&t, k, 1, &nv);
        if (k == total - 1) recv = 0;
        if (recv) step_add(&c, PP_RECV_ACT, counters[C_RECV_ACT][nv]++, nv, prev);
        if (k == W - 1 && !all_warmup && !last) step_add(&c, PP_RECV_GRAD, counters[C_RECV_GRAD][V - 1]++, V - 1, next);
        if (st == VFM_OK) st = step_emit(s, &c);
    }
    for (int i = 0; i < R && st == VFM_OK; i++) {
        int fk = W + i, bk = i;
        int fv = table_chunk(&t, fk, 1), fm = counters[C_FWD][fv]++;
        int bv = table_chunk(&t, bk, 0), bm = counters[C_BWD][bv]++;
        st = compute(s, PP_FORWARD, fm, fv);
        if (st == VFM_OK) st = compute(s, PP_BACKWARD, bm, bv);
        step_init(&c);
        if (!(last && fv == V - 1)) step_add(&c, PP_SEND_ACT, fm, fv, next);
        if (!(first && bv == 0)) step_add(&c, PP_SEND_GRAD, bm, bv, prev);
        int nfv, nbv;
        int recv_prev = recv_chunk(&t, fk, 1, &nfv), recv_next = recv_chunk(&t, bk, 0, &nbv);
        if (i == R - 1) recv_prev = 0;
        if (recv_prev) step_add(&c, PP_RECV_ACT, counters[C_RECV_ACT][nfv]++, nfv, prev);
        if (recv_next) step_add(&c, PP_RECV_GRAD, counters[C_RECV_GRAD][nbv]++, nbv, next);
        if (st == VFM_OK) st = step_emit(s, &c);
    }
    if (all_warmup && !last && !forward_only && st == VFM_OK) {
        step_init(&c);
        step_add(&c, PP_RECV_GRAD, counters[C_RECV_GRAD][V - 1]++, V - 1, next);
        st = step_emit(s, &c);
    }
    for (int k = R; k < total && st == VFM_OK && !forward_only; k++) {
        int v = table_chunk(&t, k, 0), m = counters[C_BWD][v]++;
        st = compute(s, PP_BACKWARD, m, v);
        step_init(&c);
        if (!(first && v == 0)) step_add(&c, PP_SEND_GRAD, m, v, prev);
        int nv, recv = recv_chunk(&t, k, 0, &nv);
        if (k == total - 1) recv = 0;
        if (recv) step_add(&c, PP_RECV_GRAD, counters[C_RECV_GRAD][nv]++, nv, next);
        if (st == VFM_OK) st = step_emit(s, &c);
    }
    free(t.mb), free(t.ch), free(counter_mem);
    if (st != VFM_OK) pp_schedule_free(s);
    return st;
}

vfm_status pp_schedule_build(PpSchedule *s, int P, int M, int V, int p) {
    return V <= 1 ? pp_schedule_1f1b(s, P, M, p) : pp_schedule_interleaved(s, P, M, V, 0, p);
}

vfm_status pp_schedule_forward_only(PpSchedule *s, int P, int M, int V, int p) {
    return V <= 1 ? forward_only_1f1b(s, P, M, p) : interleaved(s, P, M, V, 0, p, 1);
}

void pp_schedule_free(PpSchedule *s) {
    free(s->actions);
    s->actions = NULL;
    s->n_actions = s->capacity = 0;
}

/* ---- checking ------------------------------------------------------------------------------- */

/* A message's identity across stages: kind (0 activation, 1 gradient), micro-batch, boundary b
 * between global chunks b−1 and b. */
typedef struct {
    int grad, mb, boundary;
} MsgId;

static MsgId msg_id(const PpSchedule *s, const PpMsg *m) {
    int g = m->chunk * s->stages + s->stage;
    switch (m->kind) {
    case PP_SEND_ACT: return (MsgId){0, m->mb, g + 1};
    case PP_RECV_ACT: return (MsgId){0, m->mb, g};
    case PP_SEND_GRAD: return (MsgId){1, m->mb, g};
    default: return (MsgId){1, m->mb, g + 1};
    }
}

static int is_send(const PpMsg *m) { return m->kind == PP_SEND_ACT || m->kind == PP_SEND_GRAD; }

static const char *msg_name(PpMsgKind k) {
    return k == PP_SEND_ACT ? "send_act" : k == PP_RECV_ACT ? "recv_act" : k == PP_SEND_GRAD ? "send_grad" : "recv_grad";
}

typedef struct {
    int pc;               /* next action */
    unsigned char *done;  /* [n_msgs of the current step] */
    int *sent, *recvd;    /* [P] messages matched so far to / from each peer */
    /* per (mb, chunk): 1 forward done, 2 backward done; input / output-gradient received */
    unsigned char *state, *have_in, *have_gout;
    int in_flight, max_seen;
} Sim;

#define CHECK_FAIL(...)                                  \
    do {                                                 \
        snprintf(err, err_size, __VA_ARGS__);            \
        ok = 0;                                          \
        goto out;                                        \
    } while (0)

int pp_schedule_check(const PpSchedule *const *sched, const int *max_in_flight, char *err, size_t err_size) {
    int P = sched[0]->stages, M = sched[0]->microbatches, V = sched[0]->chunks, C = P * V, ok = 1;
    if (err_size) err[0] = 0;
    Sim *sim = calloc((size_t)P, sizeof *sim);
    /* the k-th message p→q, recorded when posted by either side, to compare identities */
    if (!sim) {
        snprintf(err, err_size, "out of memory");
        return 0;
    }
    for (int p = 0; p < P; p++) {
        const PpSchedule *s = sched[p];
        if (s->stages != P || s->microbatches != M || s->chunks != V || s->stage != p) {
            snprintf(err, err_size, "stage %d: schedule for stage %d of %d (%d mb, %d chunks), expected %d of %d (%d, %d)", p,
                     s->stage, s->stages, s->microbatches, s->chunks, p, P, M, V);
            free(sim);
            return 0;
        }
        sim[p].done = calloc(PP_MAX_MSGS, 1);
        sim[p].sent = calloc((size_t)P, sizeof(int));
        sim[p].recvd = calloc((size_t)P, sizeof(int));
        sim[p].state = calloc((size_t)(M * V), 1);
        sim[p].have_in = calloc((size_t)(M * V), 1);
        sim[p].have_gout = calloc((size_t)(M * V), 1);
        if (!sim[p].done || !sim[p].sent || !sim[p].recvd || !sim[p].state || !sim[p].have_in || !sim[p].have_gout)
            CHECK_FAIL("out of memory");
    }
    for (;;) {
        int progress = 0, finished = 1;
        for (int p = 0; p < P; p++) {
            const PpSchedule *s = sched[p];
            Sim *me = &sim[p];
            /* compute actions run as soon as they are at the head */
            while (me->pc < s->n_actions && s->actions[me->pc].kind != PP_COMM) {
                const PpAction *a = &s->actions[me->pc];
                if (a->mb < 0 || a->mb >= M || a->chunk < 0 || a->chunk >= V)
                    CHECK_FAIL("stage %d action %d: micro-batch %d, chunk %d out of range", p, me->pc, a->mb, a->chunk);
                int k = a->mb * V + a->chunk, g = a->chunk * P + p;
                if (a->kind == PP_FORWARD) {
                    if (me->state[k]) CHECK_FAIL("stage %d action %d: forward of micro-batch %d chunk %d runs twice", p, me->pc, a->mb, a->chunk);
                    if (g > 0 && !me->have_in[k])
                        CHECK_FAIL("stage %d action %d: forward of micro-batch %d chunk %d before its input arrived", p,
                                   me->pc, a->mb, a->chunk);
                    me->state[k] = 1;
                    if (!s->forward_only && ++me->in_flight > me->max_seen) me->max_seen = me->in_flight;
                    if (max_in_flight && max_in_flight[p] >= 0 && me->in_flight > max_in_flight[p])
                        CHECK_FAIL("stage %d action %d: %d micro-batches in flight, at most %d allowed", p, me->pc,
                                   me->in_flight, max_in_flight[p]);
                } else {
                    if (s->forward_only)
                        CHECK_FAIL("stage %d action %d: a backward in a forward-only schedule", p, me->pc);
                    if (me->state[k] != 1)
                        CHECK_FAIL("stage %d action %d: backward of micro-batch %d chunk %d %s", p, me->pc, a->mb, a->chunk,
                                   me->state[k] ? "runs twice" : "before its forward");
                    if (g < C - 1 && !me->have_gout[k])
                        CHECK_FAIL("stage %d action %d: backward of micro-batch %d chunk %d before its output gradient "
                                   "arrived", p, me->pc, a->mb, a->chunk);
                    me->state[k] = 2;
                    me->in_flight--;
                }
                me->pc++;
                progress = 1;
            }
            if (me->pc < s->n_actions) finished = 0;
        }
        if (finished) break;
        /* match messages between the heads (communication steps) */
        for (int p = 0; p < P; p++) {
            const PpSchedule *s = sched[p];
            Sim *me = &sim[p];
            if (me->pc >= s->n_actions) continue;
            const PpAction *a = &s->actions[me->pc];
            for (int i = 0; i < a->n_msgs; i++) {
                const PpMsg *m = &a->msgs[i];
                if (me->done[i] || !is_send(m)) continue;
                int q = m->peer;
                if (q < 0 || q >= P || q == p) CHECK_FAIL("stage %d action %d: %s to stage %d", p, me->pc, msg_name(m->kind), q);
                const PpSchedule *t = sched[q];
                Sim *peer = &sim[q];
                if (peer->pc >= t->n_actions || t->actions[peer->pc].kind != PP_COMM) continue;
                const PpAction *b = &t->actions[peer->pc];
                /* FIFO: this is send number sent[q] from p; it meets receive number recvd[p] at q */
                if (me->sent[q] != peer->recvd[p]) continue;
                int j = -1;
                for (int jj = 0; jj < b->n_msgs; jj++)
                    if (!peer->done[jj] && !is_send(&b->msgs[jj]) && b->msgs[jj].peer == p) {
                        j = jj;
                        break;
                    }
                if (j < 0) continue;
                /* earlier sends of this step to q must have been matched first (posting order) */
                int earlier = 0;
                for (int ii = 0; ii < i; ii++)
                    if (!me->done[ii] && is_send(&a->msgs[ii]) && a->msgs[ii].peer == q) earlier = 1;
                if (earlier) continue;
                MsgId x = msg_id(s, m), y = msg_id(t, &b->msgs[j]);
                if (x.grad != y.grad || x.mb != y.mb || x.boundary != y.boundary)
                    CHECK_FAIL("message %d from stage %d to stage %d: sent as %s of micro-batch %d at boundary %d, received "
                               "as %s of micro-batch %d at boundary %d", me->sent[q], p, q, x.grad ? "gradient" : "activation",
                               x.mb, x.boundary, y.grad ? "gradient" : "activation", y.mb, y.boundary);
                if (m->kind == PP_SEND_ACT && sim[p].state[m->mb * V + m->chunk] != 1)
                    CHECK_FAIL("stage %d action %d: sends the output of micro-batch %d chunk %d before its forward", p, me->pc,
                               m->mb, m->chunk);
                if (m->kind == PP_SEND_GRAD && sim[p].state[m->mb * V + m->chunk] != 2)
                    CHECK_FAIL("stage %d action %d: sends the input gradient of micro-batch %d chunk %d before its backward",
                               p, me->pc, m->mb, m->chunk);
                const PpMsg *r = &b->msgs[j];
                if (r->kind == PP_RECV_ACT) peer->have_in[r->mb * V + r->chunk] = 1;
                else peer->have_gout[r->mb * V + r->chunk] = 1;
                me->done[i] = peer->done[j] = 1;
                me->sent[q]++;
                peer->recvd[p]++;
                progress = 1;
            }
        }
        for (int p = 0; p < P; p++) { /* a step whose messages all met is complete */
            const PpSchedule *s = sched[p];
            Sim *me = &sim[p];
            if (me->pc >= s->n_actions || s->actions[me->pc].kind != PP_COMM) continue;
            const PpAction *a = &s->actions[me->pc];
            int all = 1;
            for (int i = 0; i < a->n_msgs; i++) all &= me->done[i];
            if (all) {
                memset(me->done, 0, PP_MAX_MSGS);
                me->pc++;
                progress = 1;
            }
        }
        if (!progress) {
            int n = snprintf(err, err_size, "deadlock:");
            for (int p = 0; p < P && n < (int)err_size; p++) {
                const PpSchedule *s = sched[p];
                if (sim[p].pc >= s->n_actions) {
                    n += snprintf(err + n, err_size - (size_t)n, " stage %d done;", p);
                    continue;
                }
                const PpAction *a = &s->actions[sim[p].pc];
                n += snprintf(err + n, err_size - (size_t)n, " stage %d waits at action %d (", p, sim[p].pc);
                for (int i = 0; i < a->n_msgs && n < (int)err_size; i++)
                    n += snprintf(err + n, err_size - (size_t)n, "%s%s m%d c%d %s%d", i ? ", " : "", msg_name(a->msgs[i].kind),
                                  a->msgs[i].mb, a->msgs[i].chunk, is_send(&a->msgs[i]) ? "->" : "<-", a->msgs[i].peer);
                if (n < (int)err_size) n += snprintf(err + n, err_size - (size_t)n, ");");
            }
            ok = 0;
            goto out;
        }
    }
    for (int p = 0; p < P; p++)
        for (int k = 0; k < M * V; k++)
            if (sim[p].state[k] != (sched[p]->forward_only ? 1 : 2))
                CHECK_FAIL("stage %d: micro-batch %d chunk %d %s", p, k / V, k % V,
                           sim[p].state[k] ? "never ran its backward" : "never ran");
out:
    for (int p = 0; p < P; p++) {
        free(sim[p].done), free(sim[p].sent), free(sim[p].recvd);
        free(sim[p].state), free(sim[p].have_in), free(sim[p].have_gout);
    }
    free(sim);
    return ok;
}

void pp_schedule_format(const PpSchedule *s, char *buf, size_t size) {
    size_t n = 0;
    if (size) buf[0] = 0;
    for (int i = 0; i < s->n_actions && n + 1 < size; i++) {
        const PpAction *a = &s->actions[i];
        int w;
        if (a->kind != PP_COMM) {
            w = snprintf(buf + n, size - n, "%c m%d c%d\n", a->kind == PP_FORWARD ? 'F' : 'B', a->mb, a->chunk);
        } else {
            w = snprintf(buf + n, size - n, "C");
            for (int j = 0; j < a->n_msgs && w >= 0 && n + (size_t)w < size; j++)
                w += snprintf(buf + n + w, size - n - (size_t)w, "%s %s m%d c%d %s%d", j ? "," : "", msg_name(a->msgs[j].kind),
                              a->msgs[j].mb, a->msgs[j].chunk, is_send(&a->msgs[j]) ? "->" : "<-", a->msgs[j].peer);
            if (w >= 0 && n + (size_t)w < size) w += snprintf(buf + n + w, size - n - (size_t)w, "\n");
        }
        if (w < 0) break;
        n += (size_t)w;
    }
}

/* ---- blocks over chunks --------------------------------------------------------------------- */

vfm_status pp_check_layers(int L, int P, int V) {
    if (L < P * V)
        return vfm_fail(VFM_ERR_USAGE, "model.num_layers = %d is smaller than model.pipeline_model_parallel_size × "
                        "model.virtual_pipeline_model_parallel_size = %d × %d: every pipeline chunk needs at least one "
                        "block", L, P, V);
    return VFM_OK;
}

void pp_chunk_blocks(int L, int P, int V, int stage, int chunk, int *first, int *count) {
    long long C = (long long)P * V, g = (long long)chunk * P + stage;
    long long a = g * L / C, b = (g + 1) * L / C;
    *first = (int)a;
    *count = (int)(b - a);
}

void pp_block_owner(int L, int P, int V, int block, int *stage, int *chunk) {
    long long C = (long long)P * V;
    /* the largest g with ⌊g·L/C⌋ <= block */
    long long g = ((long long)block + 1) * C / L;
    while (g > 0 && g * L / C > block) g--;
    while (g + 1 < C && (g + 1) * L / C <= block) g++;
    *stage = (int)(g % P);
    *chunk = (int)(g / P);
}

int pp_schedule_in_flight(const PpSchedule *s) {
    int live = 0, most = 0;
    for (int i = 0; i < s->n_actions; i++) {
        if (s->actions[i].kind == PP_FORWARD) live++;
        if (s->actions[i].kind == PP_BACKWARD) live--;
        if (live > most) most = live;
    }
    return most;
}
