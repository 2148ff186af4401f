/* Context-parallel attention: ring (p2p), Ulysses all-to-all (a2a), hierarchical (a2a+p2p) and
 * all-gather, forward and backward (see cp_attention.h). All arithmetic is op calls; this file
 * only moves blocks and orders the steps. */
#include "cp_attention.h"

#include <string.h>

static const char *const TYPE_NAMES[] = {"p2p", "a2a", "a2a+p2p", "all_gather", "hybrid"};

vfm_status cp_comm_type_parse(const char *s, CpCommType *out) {
    for (int t = 0; t < 5; t++)
        if (s && strcmp(s, TYPE_NAMES[t]) == 0) {
            *out = (CpCommType)t;
            return VFM_OK;
        }
    return vfm_fail(VFM_ERR_USAGE, "model.cp_comm_type is '%s'; allowed: p2p, a2a, a2a+p2p, all_gather, hybrid",
                    s ? s : "");
}

const char *cp_comm_type_name(CpCommType t) { return t >= 0 && t < 5 ? TYPE_NAMES[t] : "?"; }

/* The head rules of an all-to-all over n ranks (n = CP for a2a, A for a2a+p2p). */
static vfm_status check_heads(const char *mode, int n, const char *n_key, int heads, int kv_heads) {
    if (heads % n != 0)
        return vfm_fail(VFM_ERR_USAGE, "model.cp_comm_type %s: %d attention heads per TP rank do not divide over %s = %d "
                        "(model.num_attention_heads / model.tensor_model_parallel_size must be a multiple of it)",
                        mode, heads, n_key, n);
    if (kv_heads % n != 0 && n % kv_heads != 0)
        return vfm_fail(VFM_ERR_USAGE, "model.cp_comm_type %s: %d kv heads per TP rank (model.num_query_groups) neither "
                        "divide over %s = %d nor divide it (kv heads are replicated only when they divide it)",
                        mode, kv_heads, n_key, n);
    return VFM_OK;
}

vfm_status cp_check_config(CpCommType type, int cp, int a2a_size, int heads, int kv_heads) {
    if (cp < 1) return vfm_fail(VFM_ERR_USAGE, "model.context_parallel_size is %d; it must be at least 1", cp);
    switch (type) {
    case CP_COMM_A2A: return check_heads("a2a", cp, "model.context_parallel_size", heads, kv_heads);
    case CP_COMM_A2A_P2P:
        if (a2a_size < 1 || cp % a2a_size != 0)
            return vfm_fail(VFM_ERR_USAGE, "model.hierarchical_context_parallel_sizes: the all-to-all size %d does not "
                            "divide model.context_parallel_size = %d", a2a_size, cp);
        return check_heads("a2a+p2p", a2a_size, "the all-to-all size", heads, kv_heads);
    default: return VFM_OK;
    }
}

vfm_status cp_attention_init(CpAttention *a, CpCommType type, Comm *cp, Comm *a2a, Comm *ring) {
    memset(a, 0, sizeof *a);
    if (!cp) return vfm_fail(VFM_ERR_INTERNAL, "cp_attention_init: no CP group");
    a->type = type;
    a->cp = cp;
    a->P = cp->size;
    a->cp_rank = cp->rank;
    switch (type) {
    case CP_COMM_P2P: a->A = 1, a->R = a->P, a->ring = cp, a->ring_rank = cp->rank; break;
    case CP_COMM_A2A: a->A = a->P, a->R = 1, a->a2a = cp, a->a2a_rank = cp->rank; break;
    case CP_COMM_ALL_GATHER: a->A = 1, a->R = 1; break;
    case CP_COMM_HYBRID: return vfm_fail(VFM_ERR_INTERNAL, "cp_attention_init: hybrid is ST-DiT's scheme, not an attention");
    case CP_COMM_A2A_P2P:
        if (!a2a || !ring || a2a->size * ring->size != cp->size || cp->rank != ring->rank * a2a->size + a2a->rank)
            return vfm_fail(VFM_ERR_INTERNAL, "cp_attention_init: a2a+p2p needs an all-to-all group and a ring whose "
                            "sizes multiply to the CP size %d, with CP rank = ring rank · all-to-all size + "
                            "all-to-all rank", cp->size);
        a->a2a = a2a, a->ring = ring;
        a->A = a2a->size, a->R = ring->size;
        a->a2a_rank = a2a->rank, a->ring_rank = ring->rank;
        break;
    }
    return VFM_OK;
}

/* ---- scratch ------------------------------------------------------------------------------ */

#define MAX_SCRATCH 12

typedef struct {
    Tensor t[MAX_SCRATCH];
    int n;
} Scratch;

/* A zero-filled [d0, d1, d2] (d2 = 0: [d0, d1]) tensor of ref's dtype and device. */
static vfm_status scratch_new(Scratch *s, Tensor **out, const Tensor *ref, int64_t d0, int64_t d1, int64_t d2) {
    if (s->n == MAX_SCRATCH) return vfm_fail(VFM_ERR_INTERNAL, "cp_attention: scratch table full");
    Tensor *t = &s->t[s->n];
    int64_t shape[3] = {d0, d1, d2};
    VFM_TRY(tensor_alloc(t, ref->dtype, ref->device, d2 ? 3 : 2, shape));
    s->n++;
    *out = t;
    return VFM_OK;
}

static void scratch_free(Scratch *s) {
    for (int i = 0; i < s->n; i++) tensor_free(&s->t[i]);
    s->n = 0;
}

/* t viewed as [rows, cols] */
static Tensor as2d(const Tensor *t, int64_t rows, int64_t cols) {
    return tensor_make(t->data, t->dtype, t->device, 2, (int64_t[]){rows, cols});
}

/* block b of a buffer of equal blocks of `elems` elements, as [rows, cols] */
static Tensor block2d(const Tensor *t, int b, int64_t rows, int64_t cols) {
    return tensor_make((char *)t->data + (size_t)(b * rows * cols) * dtype_size(t->dtype), t->dtype, t->device, 2,
                       (int64_t[]){rows, cols});
}

/* ---- the ring -------------------------------------------------------------------------------- */

/* Posts "K, V to the next rank, the previous rank's into nk, nv". */
static vfm_status post_shift(Comm *ring, int next, int prev, const Tensor *k, const Tensor *v, Tensor *nk, Tensor *nv,
                             CommRequest *req) {
    int64_t n = tensor_numel(k);
    CommP2P ops[4] = {{1, k->data, n, k->dtype, next}, {1, v->data, n, v->dtype, next},
                      {0, nk->data, n, nk->dtype, prev}, {0, nv->data, n, nv->dtype, prev}};
    return comm_exchange_start(ring, ops, 4, req);
}

/* Ring attention over ch (parts = R): q[rows,H,hd], k,v[rows,Hkv,hd] of chunk ring_rank. */
static vfm_status ring_forward(const CpAttention *a, const CpChunks *ch, Tensor *o, Tensor *lse, const Tensor *q,
                               const Tensor *k, const Tensor *v) {
    int R = a->R, me = a->ring_rank;
    if (R == 1) {
        VarlenLayout l = cp_tile_layout(ch, 0, 0);
        return op_attention_forward(o, lse, q, k, v, &l);
    }
    Scratch s = {0};
    Tensor *kv[2][2] = {{0}}, *o_part = NULL, *lse_part = NULL;
    vfm_status st = VFM_OK;
    for (int b = 0; b < (R > 2 ? 2 : 1) && st == VFM_OK; b++)
        for (int m = 0; m < 2 && st == VFM_OK; m++) st = scratch_new(&s, &kv[b][m], k, k->shape[0], k->shape[1], k->shape[2]);
    if (st == VFM_OK) st = scratch_new(&s, &o_part, o, o->shape[0], o->shape[1], o->shape[2]);
    if (st == VFM_OK) st = scratch_new(&s, &lse_part, lse, lse->shape[0], lse->shape[1], 0);
    const Tensor *ck = k, *cv = v;
    int nb = 0, next = (me + 1) % R, prev = (me + R - 1) % R;
    for (int i = 0; i < R && st == VFM_OK; i++) {
        int j = (me - i + R) % R;
        CommRequest req = {0};
        if (i < R - 1) st = post_shift(a->ring, next, prev, ck, cv, kv[nb][0], kv[nb][1], &req);
        VarlenLayout l = cp_tile_layout(ch, me, j);
        if (st == VFM_OK && i == 0) st = op_attention_forward(o, lse, q, ck, cv, &l);
        else if (st == VFM_OK) {
            st = op_attention_forward(o_part, lse_part, q, ck, cv, &l);
            if (st == VFM_OK && i != a->test_drop_ring_step) st = op_attention_merge(o, lse, o_part, lse_part, &l);
        }
        vfm_status w = comm_wait(&req);
        if (st == VFM_OK) st = w;
        ck = kv[nb][0], cv = kv[nb][1];
        if (R > 2) nb = 1 - nb;
    }
    scratch_free(&s);
    return st;
}

/* Ring backward: dq, dk, dv (=) of chunk ring_rank. The dK/dV accumulator of block j starts on
 * its owner and gains each rank's part in ring order; after R hops it is back with the owner. */
static vfm_status ring_backward(const CpAttention *a, const CpChunks *ch, Tensor *dq, Tensor *dk, Tensor *dv,
                                const Tensor *dout, const Tensor *q, const Tensor *k, const Tensor *v, const Tensor *o,
                                const Tensor *lse) {
    int R = a->R, me = a->ring_rank;
    if (R == 1) {
        VarlenLayout l = cp_tile_layout(ch, 0, 0);
        return op_attention_backward(dq, dk, dv, dout, q, k, v, o, lse, &l);
    }
    Scratch s = {0};
    Tensor *kv[2][2] = {{0}}, *dq_part = NULL, *dkv_part[2] = {0}, *acc[2] = {0}, *in[2] = {0};
    vfm_status st = VFM_OK;
    int64_t kr = k->shape[0], kh = k->shape[1], kd = k->shape[2];
    for (int b = 0; b < (R > 2 ? 2 : 1) && st == VFM_OK; b++)
        for (int m = 0; m < 2 && st == VFM_OK; m++) st = scratch_new(&s, &kv[b][m], k, kr, kh, kd);
    for (int m = 0; m < 2 && st == VFM_OK; m++) {
        st = scratch_new(&s, &dkv_part[m], k, kr, kh, kd);
        if (st == VFM_OK) st = scratch_new(&s, &acc[m], k, kr, kh, kd);
        if (st == VFM_OK) st = scratch_new(&s, &in[m], k, kr, kh, kd);
    }
    if (st == VFM_OK) st = scratch_new(&s, &dq_part, q, q->shape[0], q->shape[1], q->shape[2]);
    const Tensor *ck = k, *cv = v;
    int nb = 0, next = (me + 1) % R, prev = (me + R - 1) % R;
    CommRequest dreq = {0};
    int64_t n = tensor_numel(k);
    for (int i = 0; i < R && st == VFM_OK; i++) {
        int j = (me - i + R) % R;
        CommRequest req = {0};
        if (i < R - 1) st = post_shift(a->ring, next, prev, ck, cv, kv[nb][0], kv[nb][1], &req);
        VarlenLayout l = cp_tile_layout(ch, me, j);
        if (st == VFM_OK && i == 0) st = op_attention_backward(dq, acc[0], acc[1], dout, q, ck, cv, o, lse, &l);
        else if (st == VFM_OK) {
            int keep = i != a->test_drop_ring_step;
            st = op_attention_backward(dq_part, dkv_part[0], dkv_part[1], dout, q, ck, cv, o, lse, &l);
            if (st == VFM_OK && keep) st = op_add(dq, dq, dq_part);
            /* the accumulator of block j from the ranks before, then this rank's part */
            vfm_status w = comm_wait(&dreq);
            if (st == VFM_OK) st = w;
            for (int m = 0; m < 2 && st == VFM_OK; m++)
                st = keep ? op_add(acc[m], in[m], dkv_part[m]) : op_copy(acc[m], in[m]);
        }
        /* block j's accumulator to the next rank; at the last step that is its owner, and this
         * rank's own block arrives from the previous one */
        if (st == VFM_OK) {
            Tensor *to_k = i < R - 1 ? in[0] : dk, *to_v = i < R - 1 ? in[1] : dv;
            CommP2P ops[4] = {{1, acc[0]->data, n, k->dtype, next}, {1, acc[1]->data, n, k->dtype, next},
                              {0, to_k->data, n, k->dtype, prev}, {0, to_v->data, n, k->dtype, prev}};
            st = comm_exchange_start(a->ring, ops, 4, &dreq);
        }
        vfm_status w = comm_wait(&req);
        if (st == VFM_OK) st = w;
        ck = kv[nb][0], cv = kv[nb][1];
        if (R > 2) nb = 1 - nb;
    }
    vfm_status w = comm_wait(&dreq);
    if (st == VFM_OK) st = w;
    scratch_free(&s);
    return st;
}

/* ---- all-to-all over heads ------------------------------------------------------------------- */

/* Heads of Hx that all-to-all rank d works on: [first(d), first(d) + per), per = max(1, Hx/A). */
static int heads_per(int Hx, int A) { return Hx >= A ? Hx / A : 1; }
static int heads_first(int Hx, int A, int d) { return (int)((int64_t)d * Hx / A); }

/* to_tokens: local[rows, Hx, hd] (this rank's chunk, all heads) -> sup[rows·A, per, hd]: heads
 * [first(me), +per) of the A chunks of this rank's super-chunk. Otherwise the inverse, sup ->
 * local (=): a head replicated to several ranks (kv heads < A) comes back from each and the copies
 * are summed in rank order (gradients). */
static vfm_status heads_exchange(const CpAttention *a, const CpChunks *ch, Tensor *sup, Tensor *local, int Hx, int hd,
                                 int to_tokens) {
    int A = a->A, per = heads_per(Hx, A), n = ch->n_samples;
    int64_t rows = ch->rows, w = (int64_t)per * hd;
    Scratch s = {0};
    Tensor *send = NULL, *recv = NULL;
    vfm_status st = scratch_new(&s, &send, local, A * rows, w, 0);
    if (st == VFM_OK) st = scratch_new(&s, &recv, local, A * rows, w, 0);
    Tensor whole = as2d(local, rows, (int64_t)Hx * hd), sup2 = as2d(sup, rows * A, w);
    for (int d = 0; d < A && st == VFM_OK; d++) { /* block d of send goes to all-to-all rank d */
        Tensor blk = block2d(send, d, rows, w);
        st = to_tokens ? op_columns_get(&blk, &whole, (int64_t)heads_first(Hx, A, d) * hd)
                       : cp_take_chunk(&blk, &sup2, ch->cu_padded, n, A, d);
    }
    if (st == VFM_OK) st = comm_all_to_all(a->a2a, send->data, recv->data, rows * w, local->dtype);
    if (st == VFM_OK && !to_tokens) st = op_fill(&whole, 0);
    for (int src = 0; src < A && st == VFM_OK; src++) { /* block src came from all-to-all rank src */
        Tensor blk = block2d(recv, src, rows, w);
        st = to_tokens ? cp_put_chunk(&sup2, &blk, ch->cu_padded, n, A, src)
                       : op_columns_add(&whole, &blk, (int64_t)heads_first(Hx, A, src) * hd);
    }
    scratch_free(&s);
    return st;
}

static vfm_status heads_to_tokens(const CpAttention *a, const CpChunks *ch, Tensor *sup, const Tensor *local, int Hx,
                                  int hd) {
    return heads_exchange(a, ch, sup, (Tensor *)local, Hx, hd, 1);
}

static vfm_status tokens_to_heads(const CpAttention *a, const CpChunks *ch, Tensor *local, const Tensor *sup, int Hx,
                                  int hd) {
    return heads_exchange(a, ch, (Tensor *)sup, local, Hx, hd, 0);
}

/* ---- all-gather ------------------------------------------------------------------------------- */

/* to_whole: whole[rows·P, ...] = every rank's chunk set x[rows, ...] (all-gathered) put in place;
 * otherwise x[rows, ...] (=) = the ordered sum over ranks of chunk cp_rank of their whole. */
static vfm_status whole_exchange(const CpAttention *a, const CpChunks *ch, Tensor *whole, Tensor *x, int to_whole) {
    int P = a->P;
    int64_t rows = ch->rows, w = tensor_numel(x) / (rows > 0 ? rows : 1);
    Scratch s = {0};
    Tensor *all = NULL;
    vfm_status st = scratch_new(&s, &all, x, P * rows, w, 0);
    if (st == VFM_OK && to_whole) st = comm_all_gather(a->cp, x->data, all->data, rows * w, x->dtype);
    Tensor whole2 = as2d(whole, rows * P, w);
    for (int p = 0; p < P && st == VFM_OK; p++) {
        Tensor blk = block2d(all, p, rows, w);
        st = to_whole ? cp_put_chunk(&whole2, &blk, ch->cu_padded, ch->n_samples, P, p)
                      : cp_take_chunk(&blk, &whole2, ch->cu_padded, ch->n_samples, P, p);
    }
    if (st == VFM_OK && !to_whole) st = comm_reduce_scatter(a->cp, all->data, x->data, rows * w, x->dtype, COMM_SUM_ORDERED);
    scratch_free(&s);
    return st;
}

/* ---- entry points ------------------------------------------------------------------------------ */

static vfm_status check_call(const CpAttention *a, const CpChunks *ch, const Tensor *q, const Tensor *k) {
    if (ch->parts != a->P)
        return vfm_fail(VFM_ERR_INTERNAL, "cp_attention: the pack is cut into %d chunks for %d CP ranks", ch->parts, a->P);
    if (q->ndim != 3 || k->ndim != 3 || q->shape[0] != ch->rows || k->shape[0] != ch->rows)
        return vfm_fail(VFM_ERR_SHAPE, "cp_attention: q and k must be [%lld rows, heads, head_dim] (this rank's chunks); "
                        "got %lld and %lld rows", (long long)ch->rows, (long long)q->shape[0], (long long)k->shape[0]);
    if (a->type == CP_COMM_A2A || a->type == CP_COMM_A2A_P2P)
        VFM_TRY(cp_check_config(a->type, a->P, a->A, (int)q->shape[1], (int)k->shape[1]));
    return VFM_OK;
}

/* The super-chunk split for the ring after an all-to-all (parts = R). */
static vfm_status super_chunks(const CpChunks *ch, int R, CpChunks *sup) {
    return cp_chunks_init(sup, ch->n_samples, ch->cu_seqlens, ch->cu_seqlens_padded, R, ch->device);
}

vfm_status cp_attention_forward(const CpAttention *a, const CpChunks *ch, Tensor *o, Tensor *lse, const Tensor *q,
                                const Tensor *k, const Tensor *v) {
    VFM_TRY(check_call(a, ch, q, k));
    if (a->P == 1) {
        VarlenLayout l = cp_tile_layout(ch, 0, 0);
        return op_attention_forward(o, lse, q, k, v, &l);
    }
    Scratch s = {0};
    vfm_status st = VFM_OK;
    if (a->type == CP_COMM_ALL_GATHER) {
        Tensor *kw = NULL, *vw = NULL;
        int64_t W = ch->rows * a->P;
        st = scratch_new(&s, &kw, k, W, k->shape[1], k->shape[2]);
        if (st == VFM_OK) st = scratch_new(&s, &vw, v, W, v->shape[1], v->shape[2]);
        if (st == VFM_OK) st = whole_exchange(a, ch, kw, (Tensor *)k, 1);
        if (st == VFM_OK) st = whole_exchange(a, ch, vw, (Tensor *)v, 1);
        VarlenLayout l = cp_gathered_kv_layout(ch, a->cp_rank);
        if (st == VFM_OK) st = op_attention_forward(o, lse, q, kw, vw, &l);
        scratch_free(&s);
        return st;
    }
    if (a->A == 1) return ring_forward(a, ch, o, lse, q, k, v);
    int H = (int)q->shape[1], Hkv = (int)k->shape[1], hd = (int)q->shape[2], A = a->A;
    int64_t rows = ch->rows * A;
    CpChunks sup;
    VFM_TRY(super_chunks(ch, a->R, &sup));
    Tensor *qs = NULL, *ks = NULL, *vs = NULL, *os = NULL, *ls = NULL;
    st = scratch_new(&s, &qs, q, rows, heads_per(H, A), hd);
    if (st == VFM_OK) st = scratch_new(&s, &ks, k, rows, heads_per(Hkv, A), hd);
    if (st == VFM_OK) st = scratch_new(&s, &vs, v, rows, heads_per(Hkv, A), hd);
    if (st == VFM_OK) st = scratch_new(&s, &os, o, rows, heads_per(H, A), hd);
    if (st == VFM_OK) st = scratch_new(&s, &ls, lse, rows, heads_per(H, A), 0);
    if (st == VFM_OK) st = heads_to_tokens(a, ch, qs, q, H, hd);
    if (st == VFM_OK) st = heads_to_tokens(a, ch, ks, k, Hkv, hd);
    if (st == VFM_OK) st = heads_to_tokens(a, ch, vs, v, Hkv, hd);
    if (st == VFM_OK) st = ring_forward(a, &sup, os, ls, qs, ks, vs);
    if (st == VFM_OK) st = tokens_to_heads(a, ch, o, os, H, hd);
    if (st == VFM_OK) st = tokens_to_heads(a, ch, lse, ls, H, 1);
    scratch_free(&s);
    cp_chunks_free(&sup);
    return st;
}

vfm_status cp_attention_backward(const CpAttention *a, const CpChunks *ch, Tensor *dq, Tensor *dk, Tensor *dv,
                                 const Tensor *dout, const Tensor *q, const Tensor *k, const Tensor *v, const Tensor *o,
                                 const Tensor *lse) {
    VFM_TRY(check_call(a, ch, q, k));
    if (a->P == 1) {
        VarlenLayout l = cp_tile_layout(ch, 0, 0);
        return op_attention_backward(dq, dk, dv, dout, q, k, v, o, lse, &l);
    }
    Scratch s = {0};
    vfm_status st = VFM_OK;
    if (a->type == CP_COMM_ALL_GATHER) {
        Tensor *kw = NULL, *vw = NULL, *dkw = NULL, *dvw = NULL;
        int64_t W = ch->rows * a->P;
        st = scratch_new(&s, &kw, k, W, k->shape[1], k->shape[2]);
        if (st == VFM_OK) st = scratch_new(&s, &vw, v, W, v->shape[1], v->shape[2]);
        if (st == VFM_OK) st = scratch_new(&s, &dkw, k, W, k->shape[1], k->shape[2]);
        if (st == VFM_OK) st = scratch_new(&s, &dvw, v, W, v->shape[1], v->shape[2]);
        if (st == VFM_OK) st = whole_exchange(a, ch, kw, (Tensor *)k, 1);
        if (st == VFM_OK) st = whole_exchange(a, ch, vw, (Tensor *)v, 1);
        VarlenLayout l = cp_gathered_kv_layout(ch, a->cp_rank);
        if (st == VFM_OK) st = op_attention_backward(dq, dkw, dvw, dout, q, kw, vw, o, lse, &l);
        if (st == VFM_OK) st = whole_exchange(a, ch, dkw, dk, 0);
        if (st == VFM_OK) st = whole_exchange(a, ch, dvw, dv, 0);
        scratch_free(&s);
        return st;
    }
    if (a->A == 1) return ring_backward(a, ch, dq, dk, dv, dout, q, k, v, o, lse);
    int H = (int)q->shape[1], Hkv = (int)k->shape[1], hd = (int)q->shape[2], A = a->A;
    int hq = heads_per(H, A), hk = heads_per(Hkv, A);
    int64_t rows = ch->rows * A;
    CpChunks sup;
    VFM_TRY(super_chunks(ch, a->R, &sup));
    Tensor *qs = NULL, *ks = NULL, *vs = NULL, *os = NULL, *ls = NULL, *dos = NULL;
    st = scratch_new(&s, &qs, q, rows, hq, hd);
    if (st == VFM_OK) st = scratch_new(&s, &ks, k, rows, hk, hd);
    if (st == VFM_OK) st = scratch_new(&s, &vs, v, rows, hk, hd);
    if (st == VFM_OK) st = scratch_new(&s, &os, o, rows, hq, hd);
    if (st == VFM_OK) st = scratch_new(&s, &ls, lse, rows, hq, 0);
    if (st == VFM_OK) st = scratch_new(&s, &dos, dout, rows, hq, hd);
    if (st == VFM_OK) st = heads_to_tokens(a, ch, qs, q, H, hd);
    if (st == VFM_OK) st = heads_to_tokens(a, ch, ks, k, Hkv, hd);
    if (st == VFM_OK) st = heads_to_tokens(a, ch, vs, v, Hkv, hd);
    if (st == VFM_OK) st = heads_to_tokens(a, ch, os, o, H, hd);
    if (st == VFM_OK) st = heads_to_tokens(a, ch, ls, lse, H, 1);
    if (st == VFM_OK) st = heads_to_tokens(a, ch, dos, dout, H, hd);
    Tensor *dqs = NULL, *dks = NULL, *dvs = NULL;
    if (st == VFM_OK) st = scratch_new(&s, &dqs, q, rows, hq, hd);
    if (st == VFM_OK) st = scratch_new(&s, &dks, k, rows, hk, hd);
    if (st == VFM_OK) st = scratch_new(&s, &dvs, v, rows, hk, hd);
    if (st == VFM_OK) st = ring_backward(a, &sup, dqs, dks, dvs, dos, qs, ks, vs, os, ls);
    if (st == VFM_OK) st = tokens_to_heads(a, ch, dq, dqs, H, hd);
    if (st == VFM_OK) st = tokens_to_heads(a, ch, dk, dks, Hkv, hd);
    if (st == VFM_OK) st = tokens_to_heads(a, ch, dv, dvs, Hkv, hd);
    scratch_free(&s);
    cp_chunks_free(&sup);
    return st;
}
