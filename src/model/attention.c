/* The attention layer (attention.h): its table entries, forward, backward and activations (its cost:
 * attention_cost.c). */
#include <stdio.h>

#include "model/dit_internal.h"

static const AttentionNames DEFAULT_NAMES = {"q", "k", "v", "qkv", "proj", "q_norm.weight", "k_norm.weight"};

/* A QK-norm weight: per head [hd] shared by the heads TP splits (its gradient sums over TP), or over
 * every head [n·hd], split over TP like q's (or k's) rows. */
static int qk_norm_add(ParamTable *t, const AttentionSpec *s, int64_t width, int head_dim, const char *name) {
    if (!s->qk_norm) return -1;
    if (!s->qk_norm_all) return vector_add(t, INIT_ONE, head_dim, REDUCE_TP_HEADS, name);
    return param_table_add(t, INIT_ONE, 0, 1, (int64_t[]){width}, 0, 0, "%s", name);
}

void attention_add(AttentionLayer *at, ParamTable *t, const char *prefix, int64_t D, int head_dim,
                   const AttentionSpec *s) {
    int64_t Dkv = (int64_t)s->kv_heads * head_dim;
    const AttentionNames *n = s->names ? s->names : &DEFAULT_NAMES;
    LinearSpec in = s->in, out = s->out;
    in.tp_dim = 0, out.tp_dim = 1; /* column-parallel q, k, v; row-parallel proj */
    char name[128];
#define NAME(part) (snprintf(name, sizeof name, "%s.%s", prefix, part), name)
    param_table_set_group(t, s->self ? DIT_GROUP_SELF_ATTN : DIT_GROUP_CROSS_ATTN);
    at->self = s->self;
    at->kv_heads = s->kv_heads;
    at->norm_eps = s->norm_eps;
    at->norm_all = s->qk_norm && s->qk_norm_all;
    at->rope = s->rope && s->self;
    at->text_embedded = s->text_embedded && !s->self;
    if (s->fused_qkv) { /* the DiT reference's self-attention: one qkv [3D, D], split by parts over TP */
        Linear qkv = linear_add(t, NAME(n->qkv), 3 * D, D, in);
        t->entries[qkv.w].tp_parts = 3;
        if (qkv.b >= 0) t->entries[qkv.b].tp_parts = 3;
        at->q = linear_rows(qkv, 0, D), at->k = linear_rows(qkv, D, D), at->v = linear_rows(qkv, 2 * D, D);
    } else {
        at->q = linear_add(t, NAME(n->q), D, D, in);
        at->k = linear_add(t, NAME(n->k), Dkv, s->kv_in, in);
        at->v = linear_add(t, NAME(n->v), Dkv, s->kv_in, in);
    }
    at->proj = linear_add(t, NAME(n->proj), D, D, out);
    at->q_norm = qk_norm_add(t, s, D, head_dim, NAME(n->q_norm));
    at->k_norm = qk_norm_add(t, s, Dkv, head_dim, NAME(n->k_norm));
#undef NAME
}

void attention_handles(AttentionLayer *at, const HandleVisitor *v) {
    visit_linear(v, &at->q), visit_linear(v, &at->k), visit_linear(v, &at->v), visit_linear(v, &at->proj);
    visit_entry(v, &at->q_norm), visit_entry(v, &at->k_norm);
}

/* ---- pieces -------------------------------------------------------------------------------------- */

static int local_heads(const DiT *m, int heads) { return heads / m->par.tp; }

/* [rows, cols] and [d0, d1, d2] views of a tensor's data. */
static Tensor V2(const Tensor *t, int64_t rows, int64_t cols) { return TENSOR(t->data, t->dtype, t->device, rows, cols); }
static Tensor V3(const Tensor *t, int64_t d0, int64_t d1, int64_t d2) {
    return TENSOR(t->data, t->dtype, t->device, d0, d1, d2);
}

/* The QK-norm over every head's values: the row's statistic (sum of squares forward, Σ dy·w·x
 * backward) of this rank's heads, summed over TP. */
static vfm_status sum_over_tp(const DiT *m, Tensor *stat) {
    if (m->par.tp <= 1 || m->par.test_skip_qk_norm_sum) return VFM_OK;
    return comm_all_reduce(m->par.tp_comm, stat->data, tensor_numel(stat), stat->dtype, COMM_SUM_ORDERED);
}

/* y = the QK-norm of x[rows, heads·hd] (RMSNorm over each head, or over every head at once); nothing
 * without QK-norm (y is x). n_all: the whole layer's heads·hd. */
static vfm_status qk_norm_forward(const DiT *m, const AttentionLayer *at, Tensor *y, Tensor *rstd, const Tensor *x,
                                  int64_t rows, int heads, int w_id, int64_t n_all) {
    if (w_id < 0) return VFM_OK;
    int64_t hd = m->cfg.head_dim;
    Tensor w = layer_param(m, w_id);
    if (at->norm_all) {
        Tensor xv = V2(x, rows, heads * hd), yv = V2(y, rows, heads * hd);
        VFM_TRY(op_rmsnorm_sumsq(rstd, &xv));
        VFM_TRY(sum_over_tp(m, rstd));
        return op_rmsnorm_split_forward(&yv, rstd, &xv, &w, rstd, n_all, at->norm_eps);
    }
    Tensor xv = V2(x, rows * heads, hd), yv = V2(y, rows * heads, hd);
    return op_rmsnorm_forward(&yv, rstd, &xv, &w, at->norm_eps);
}

static vfm_status qk_norm_backward(const DiT *m, const AttentionLayer *at, Acts *a, Tensor *dx, const Tensor *dy,
                                   const Tensor *x, const Tensor *rstd, int64_t rows, int heads, int w_id,
                                   int64_t n_all) {
    if (w_id < 0) return op_copy(dx, dy);
    int64_t hd = m->cfg.head_dim;
    Tensor w = layer_param(m, w_id), dw = layer_grad(m, w_id);
    if (at->norm_all) {
        Tensor dxv = V2(dx, rows, heads * hd), dyv = V2(dy, rows, heads * hd), xv = V2(x, rows, heads * hd);
        Tensor dot = TENSOR(a->attn.dot.data, a->attn.dot.dtype, a->attn.dot.device, rows);
        VFM_TRY(op_rmsnorm_dot(&dot, &dyv, &xv, &w));
        VFM_TRY(sum_over_tp(m, &dot));
        return op_rmsnorm_split_backward(&dxv, &dw, &dyv, &xv, rstd, &w, &dot, n_all);
    }
    Tensor dxv = V2(dx, rows * heads, hd), dyv = V2(dy, rows * heads, hd), xv = V2(x, rows * heads, hd);
    return op_rmsnorm_backward(&dxv, &dw, &dyv, &xv, rstd, &w);
}

/* 3-D RoPE on t[rows, heads·hd] in place (inverse: the backward), at the region rows' positions. */
static vfm_status rope(const DiT *m, const AttentionLayer *at, const Acts *a, Tensor *t, int64_t rows, int heads,
                       int inverse) {
    if (!at->rope) return VFM_OK;
    Tensor v = V3(t, rows, heads, m->cfg.head_dim);
    return op_rope_3d(&v, &v, &a->pl.pos_r, DIT_ROPE_THETA, inverse);
}

/* The attention itself: self-attention through CP, or cross-attention to the whole text. */
static vfm_status mix_forward(const DiT *m, const AttentionLayer *at, const Acts *a, Tensor *o, Tensor *lse,
                              const Tensor *q, const Tensor *k, const Tensor *v, int64_t Sq, int64_t Skv) {
    int hd = m->cfg.head_dim, H = m->heads_local, Hkv = local_heads(m, at->kv_heads);
    Tensor qv = V3(q, Sq, H, hd), kv = V3(k, Skv, Hkv, hd), vv = V3(v, Skv, Hkv, hd), ov = V3(o, Sq, H, hd);
    if (at->self) return dit_self_attention_forward(m, a, at->span, &ov, lse, &qv, &kv, &vv);
    return op_attention_forward(&ov, lse, &qv, &kv, &vv, &a->pl.cross);
}

static vfm_status mix_backward(const DiT *m, const AttentionLayer *at, const Acts *a, Tensor *dq, Tensor *dk,
                               Tensor *dv, const Tensor *dout, const AttnActs *b, int64_t Sq, int64_t Skv) {
    int hd = m->cfg.head_dim, H = m->heads_local, Hkv = local_heads(m, at->kv_heads);
    Tensor dqv = V3(dq, Sq, H, hd), dkv = V3(dk, Skv, Hkv, hd), dvv = V3(dv, Skv, Hkv, hd);
    Tensor dov = V3(dout, Sq, H, hd), qv = V3(&b->qn, Sq, H, hd), kv = V3(&b->kn, Skv, Hkv, hd);
    Tensor vv = V3(&b->v, Skv, Hkv, hd), ov = V3(&b->o, Sq, H, hd);
    if (at->self)
        return dit_self_attention_backward(m, a, at->span, &dqv, &dkv, &dvv, &dov, &qv, &kv, &vv, &ov, &b->lse);
    return op_attention_backward(&dqv, &dkv, &dvv, &dov, &qv, &kv, &vv, &ov, &b->lse, &a->pl.cross);
}

/* ---- forward and backward ------------------------------------------------------------------------ */

/* Rows of the layer's queries: the temporal layout's for temporal attention (st_layout.h). */
static int temporal(const AttentionLayer *at) { return at->self && at->span == ATTN_SPAN_TEMPORAL; }
static int64_t q_rows(const Acts *a, const AttentionLayer *at) { return temporal(at) ? a->Rt : a->R; }

/* The CP bytes of a self-attention, by span and direction (dit.h cp_sent). */
static void count_sent(const DiT *m, const AttentionLayer *at, int backward, double before) {
    if (m->cp_sent && at->self) m->cp_sent[at->span][backward] += dit_cp_bytes_sent(m) - before;
}

vfm_status attention_forward(const DiT *m, const AttentionLayer *at, AttnActs *b, Acts *a, const DiTInputs *in,
                             const Tensor *xm, Tensor *out, int skip) {
    int64_t R = q_rows(a, at), Rkv = at->self ? R : a->L;
    double sent = dit_cp_bytes_sent(m);
    Tensor xf;
    VFM_TRY(region_enter(m, a, xm, &xf));
    const Tensor *x = &xf, *o = &b->o;
    if (temporal(at)) { /* the rows of every frame at this rank's positions */
        VFM_TRY(dit_st_to_positions(m, a, &b->xt, &xf, skip & ATTN_SKIP_ST));
        x = &b->xt;
    }
    const Tensor *kv_in = at->self ? x : at->text_embedded ? &a->cond.text_emb : in->text;
    int64_t hd = m->cfg.head_dim;
    int Hkv = local_heads(m, at->kv_heads);
    VFM_TRY(linear_forward(m, &b->q, NULL, x, &at->q, ACT_NONE));
    VFM_TRY(linear_forward(m, &b->k, NULL, kv_in, &at->k, ACT_NONE));
    VFM_TRY(linear_forward(m, &b->v, NULL, kv_in, &at->v, ACT_NONE));
    VFM_TRY(qk_norm_forward(m, at, &b->qn, &b->q_rstd, &b->q, R, m->heads_local, at->q_norm, m->cfg.heads * hd));
    VFM_TRY(qk_norm_forward(m, at, &b->kn, &b->k_rstd, &b->k, Rkv, Hkv, at->k_norm, at->kv_heads * hd));
    VFM_TRY(rope(m, at, a, &b->qn, R, m->heads_local, 0));
    VFM_TRY(rope(m, at, a, &b->kn, Rkv, Hkv, 0));
    VFM_TRY(mix_forward(m, at, a, &b->o, &b->lse, &b->qn, &b->kn, &b->v, R, Rkv));
    if (temporal(at)) { /* back to this rank's frames */
        VFM_TRY(dit_st_to_frames(m, a, &b->o_rows, &b->o));
        o = &b->o_rows;
    }
    count_sent(m, at, 0, sent);
    return region_exit(m, a, out, o, &at->proj, skip & ATTN_SKIP_TP);
}

vfm_status attention_backward(const DiT *m, const AttentionLayer *at, const AttnActs *b, Acts *a, const DiTInputs *in,
                              const Tensor *xm) {
    AttnScratch *s = &a->attn;
    int H = m->heads_local, Hkv = local_heads(m, at->kv_heads);
    int64_t R = q_rows(a, at), Rkv = at->self ? R : a->L, hd = m->cfg.head_dim, Dq = H * hd, Dkv = Hkv * hd;
    int64_t D = m->cfg.hidden;
    double sent = dit_cp_bytes_sent(m);
    Tensor dq = V2(&s->d_q, R, Dq), dqn = V2(&s->d_qn, R, Dq), d_o = V2(&s->d_o, R, Dq);
    Tensor dk = V2(at->self ? &s->d_k : &s->d_tk, Rkv, Dkv), dkn = V2(at->self ? &s->d_kn : &s->d_tkn, Rkv, Dkv);
    Tensor dv = V2(at->self ? &s->d_v : &s->d_tv, Rkv, Dkv), dpart, xf;
    if (m->recompute.granularity == RECOMPUTE_SELECTIVE) { /* o and lse again, into the shared scratch */
        Tensor o = b->o, lse = b->lse;
        VFM_TRY(mix_forward(m, at, a, &o, &lse, &b->qn, &b->kn, &b->v, R, Rkv));
    }
    VFM_TRY(region_exit_backward(m, a, &dpart));
    if (temporal(at)) { /* proj read o in the frame layout; its gradient goes to the positions */
        Tensor d_rows = V2(&s->d_o_rows, a->R, Dq);
        VFM_TRY(linear_backward(m, &d_rows, 0, &dpart, &b->o_rows, &at->proj, NULL, ACT_NONE));
        VFM_TRY(dit_st_to_positions(m, a, &d_o, &d_rows, 0));
    } else {
        VFM_TRY(linear_backward(m, &d_o, 0, &dpart, &b->o, &at->proj, NULL, ACT_NONE));
    }
    VFM_TRY(mix_backward(m, at, a, &dqn, &dkn, &dv, &d_o, b, R, Rkv));
    VFM_TRY(rope(m, at, a, &dqn, R, H, 1));
    VFM_TRY(rope(m, at, a, &dkn, Rkv, Hkv, 1));
    VFM_TRY(qk_norm_backward(m, at, a, &dq, &dqn, &b->q, &b->q_rstd, R, H, at->q_norm, m->cfg.heads * hd));
    VFM_TRY(qk_norm_backward(m, at, a, &dk, &dkn, &b->k, &b->k_rstd, Rkv, Hkv, at->k_norm, at->kv_heads * hd));
    if (!at->self) { /* k and v read the text: the input text gets no gradient, the embedded text sums it */
        const Tensor *text = at->text_embedded ? &a->cond.text_emb : in->text;
        Tensor *dtext = at->text_embedded ? &a->cond.d_text : NULL;
        VFM_TRY(linear_backward(m, dtext, 1, &dk, text, &at->k, NULL, ACT_NONE));
        VFM_TRY(linear_backward(m, dtext, 1, &dv, text, &at->v, NULL, ACT_NONE));
    }
    const Tensor *x = &b->xt;
    Tensor dx = V2(&s->d_xt, R, D), *dxp = &dx;
    if (!temporal(at)) {
        VFM_TRY(region_enter(m, a, xm, &xf));
        x = &xf, dxp = &a->d_xm_full;
    }
    VFM_TRY(linear_backward(m, dxp, 0, &dq, x, &at->q, NULL, ACT_NONE));
    if (at->self) {
        VFM_TRY(linear_backward(m, dxp, 1, &dk, x, &at->k, NULL, ACT_NONE));
        VFM_TRY(linear_backward(m, dxp, 1, &dv, x, &at->v, NULL, ACT_NONE));
    }
    if (temporal(at)) VFM_TRY(dit_st_to_frames(m, a, &a->d_xm_full, &dx));
    count_sent(m, at, 1, sent);
    return region_enter_backward(m, a);
}

/* ---- activations --------------------------------------------------------------------------------- */

vfm_status attention_carve(const DiT *m, const AttentionLayer *at, ActCarver *cv, AttnActs *b, const Acts *a,
                           int selective) {
    int64_t hd = m->cfg.head_dim, H = m->heads_local, Hkv = local_heads(m, at->kv_heads);
    int64_t Dq = H * hd, Dkv = Hkv * hd, R = q_rows(a, at), Rkv = at->self ? R : a->L;
    if (temporal(at)) {
        VFM_TRY(carve_act(cv, &b->xt, R, m->cfg.hidden));
        VFM_TRY(carve_act(cv, &b->o_rows, a->R, Dq));
    }
    VFM_TRY(carve_attn(cv, &b->q, R, Dq));
    VFM_TRY(carve_attn(cv, &b->k, Rkv, Dkv));
    VFM_TRY(carve_attn(cv, &b->v, Rkv, Dkv));
    if (at->q_norm >= 0) {
        VFM_TRY(carve_attn(cv, &b->qn, R, Dq));
        VFM_TRY(carve_attn(cv, &b->kn, Rkv, Dkv));
        VFM_TRY(carve_f32(cv, &b->q_rstd, at->norm_all ? R : R * H, 0));
        VFM_TRY(carve_f32(cv, &b->k_rstd, at->norm_all ? Rkv : Rkv * Hkv, 0));
    } else {
        b->qn = b->q, b->kn = b->k;
    }
    return selective ? VFM_OK : attention_carve_recomputed(m, cv, b, R);
}

vfm_status attention_carve_recomputed(const DiT *m, ActCarver *cv, AttnActs *b, int64_t rows) {
    VFM_TRY(carve_attn(cv, &b->o, rows, (int64_t)m->heads_local * m->cfg.head_dim));
    return carve_f32(cv, &b->lse, rows, m->heads_local);
}

void attention_use_recomputed(const DiT *m, const AttentionLayer *at, AttnActs *b, const AttnActs *rc, const Acts *a) {
    int64_t R = q_rows(a, at);
    b->o = V2(&rc->o, R, (int64_t)m->heads_local * m->cfg.head_dim);
    b->lse = V2(&rc->lse, R, m->heads_local);
}

vfm_status attention_carve_scratch(const DiT *m, ActCarver *cv, AttnScratch *s, const Acts *a, int cross,
                                   int temporal_rows) {
    int64_t hd = m->cfg.head_dim, Dq = (int64_t)m->heads_local * hd, Dkv = (int64_t)m->kv_heads_local * hd;
    int64_t Dk = Dkv > Dq ? Dkv : Dq, R = a->R;
    if (temporal_rows) { /* the temporal layout's rows too, and its frame-layout gradients */
        if (a->Rt > R) R = a->Rt;
        VFM_TRY(carve_act(cv, &s->d_o_rows, a->R, Dq));
        VFM_TRY(carve_act(cv, &s->d_xt, a->Rt, m->cfg.hidden));
    }
    VFM_TRY(carve_attn(cv, &s->d_o, R, Dq));
    VFM_TRY(carve_attn(cv, &s->d_q, R, Dq));
    VFM_TRY(carve_attn(cv, &s->d_qn, R, Dq));
    VFM_TRY(carve_attn(cv, &s->d_k, R, Dk));
    VFM_TRY(carve_attn(cv, &s->d_kn, R, Dk));
    VFM_TRY(carve_attn(cv, &s->d_v, R, Dk));
    VFM_TRY(carve_f32(cv, &s->dot, R > a->L ? R : a->L, 0));
    if (!cross) return VFM_OK;
    VFM_TRY(carve_attn(cv, &s->d_tk, a->L, Dq));
    VFM_TRY(carve_attn(cv, &s->d_tkn, a->L, Dq));
    return carve_attn(cv, &s->d_tv, a->L, Dq);
}
