/* The attention layer (attention.h): its table entries, forward, backward, activations and cost. */
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
    if (at->self) return dit_self_attention_forward(m, a, &ov, lse, &qv, &kv, &vv);
    return op_attention_forward(&ov, lse, &qv, &kv, &vv, &a->pl.cross);
}

static vfm_status mix_backward(const DiT *m, const AttentionLayer *at, const Acts *a, Tensor *dq, Tensor *dk,
                               Tensor *dv, const Tensor *dout, const AttnActs *b, int64_t Sq, int64_t Skv) {
    int hd = m->cfg.head_dim, H = m->heads_local, Hkv = local_heads(m, at->kv_heads);
    Tensor dqv = V3(dq, Sq, H, hd), dkv = V3(dk, Skv, Hkv, hd), dvv = V3(dv, Skv, Hkv, hd);
    Tensor dov = V3(dout, Sq, H, hd), qv = V3(&b->qn, Sq, H, hd), kv = V3(&b->kn, Skv, Hkv, hd);
    Tensor vv = V3(&b->v, Skv, Hkv, hd), ov = V3(&b->o, Sq, H, hd);
    if (at->self) return dit_self_attention_backward(m, a, &dqv, &dkv, &dvv, &dov, &qv, &kv, &vv, &ov, &b->lse);
    return op_attention_backward(&dqv, &dkv, &dvv, &dov, &qv, &kv, &vv, &ov, &b->lse, &a->pl.cross);
}

/* ---- forward and backward ------------------------------------------------------------------------ */

vfm_status attention_forward(const DiT *m, const AttentionLayer *at, AttnActs *b, Acts *a, const DiTInputs *in,
                             const Tensor *xm, Tensor *out, int skip) {
    int64_t R = a->R, Rkv = at->self ? a->R : a->L;
    Tensor xf;
    VFM_TRY(region_enter(m, a, xm, &xf));
    const Tensor *kv_in = at->self ? &xf : at->text_embedded ? &a->cond.text_emb : in->text;
    int64_t hd = m->cfg.head_dim;
    int Hkv = local_heads(m, at->kv_heads);
    VFM_TRY(linear_forward(m, &b->q, NULL, &xf, &at->q, ACT_NONE));
    VFM_TRY(linear_forward(m, &b->k, NULL, kv_in, &at->k, ACT_NONE));
    VFM_TRY(linear_forward(m, &b->v, NULL, kv_in, &at->v, ACT_NONE));
    VFM_TRY(qk_norm_forward(m, at, &b->qn, &b->q_rstd, &b->q, R, m->heads_local, at->q_norm, m->cfg.heads * hd));
    VFM_TRY(qk_norm_forward(m, at, &b->kn, &b->k_rstd, &b->k, Rkv, Hkv, at->k_norm, at->kv_heads * hd));
    VFM_TRY(rope(m, at, a, &b->qn, R, m->heads_local, 0));
    VFM_TRY(rope(m, at, a, &b->kn, Rkv, Hkv, 0));
    VFM_TRY(mix_forward(m, at, a, &b->o, &b->lse, &b->qn, &b->kn, &b->v, R, Rkv));
    return region_exit(m, a, out, &b->o, &at->proj, skip);
}

vfm_status attention_backward(const DiT *m, const AttentionLayer *at, const AttnActs *b, Acts *a, const DiTInputs *in,
                              const Tensor *xm) {
    AttnScratch *s = &a->attn;
    int H = m->heads_local, Hkv = local_heads(m, at->kv_heads);
    int64_t R = a->R, Rkv = at->self ? a->R : a->L, hd = m->cfg.head_dim, Dq = H * hd, Dkv = Hkv * hd;
    Tensor dq = V2(&s->d_q, R, Dq), dqn = V2(&s->d_qn, R, Dq);
    Tensor dk = V2(at->self ? &s->d_k : &s->d_tk, Rkv, Dkv), dkn = V2(at->self ? &s->d_kn : &s->d_tkn, Rkv, Dkv);
    Tensor dv = V2(at->self ? &s->d_v : &s->d_tv, Rkv, Dkv), dpart, xf;
    if (m->recompute.granularity == RECOMPUTE_SELECTIVE) { /* o and lse again, into the shared scratch */
        Tensor o = b->o, lse = b->lse;
        VFM_TRY(mix_forward(m, at, a, &o, &lse, &b->qn, &b->kn, &b->v, R, Rkv));
    }
    VFM_TRY(region_exit_backward(m, a, &dpart));
    VFM_TRY(linear_backward(m, &s->d_o, 0, &dpart, &b->o, &at->proj, NULL, ACT_NONE));
    VFM_TRY(mix_backward(m, at, a, &dqn, &dkn, &dv, &s->d_o, b, R, Rkv));
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
    VFM_TRY(region_enter(m, a, xm, &xf));
    VFM_TRY(linear_backward(m, &a->d_xm_full, 0, &dq, &xf, &at->q, NULL, ACT_NONE));
    if (at->self) {
        VFM_TRY(linear_backward(m, &a->d_xm_full, 1, &dk, &xf, &at->k, NULL, ACT_NONE));
        VFM_TRY(linear_backward(m, &a->d_xm_full, 1, &dv, &xf, &at->v, NULL, ACT_NONE));
    }
    return region_enter_backward(m, a);
}

/* ---- activations --------------------------------------------------------------------------------- */

vfm_status attention_carve(const DiT *m, const AttentionLayer *at, ActCarver *cv, AttnActs *b, const Acts *a,
                           int selective) {
    int64_t hd = m->cfg.head_dim, H = m->heads_local, Hkv = local_heads(m, at->kv_heads);
    int64_t Dq = H * hd, Dkv = Hkv * hd, R = a->R, Rkv = at->self ? a->R : a->L;
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
    return selective ? VFM_OK : attention_carve_recomputed(m, cv, b, a);
}

vfm_status attention_carve_recomputed(const DiT *m, ActCarver *cv, AttnActs *b, const Acts *a) {
    VFM_TRY(carve_attn(cv, &b->o, a->R, (int64_t)m->heads_local * m->cfg.head_dim));
    return carve_f32(cv, &b->lse, a->R, m->heads_local);
}

vfm_status attention_carve_scratch(const DiT *m, ActCarver *cv, AttnScratch *s, const Acts *a, int cross) {
    int64_t hd = m->cfg.head_dim, Dq = (int64_t)m->heads_local * hd, Dkv = (int64_t)m->kv_heads_local * hd;
    int64_t Dk = Dkv > Dq ? Dkv : Dq, R = a->R;
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

/* ---- cost ---------------------------------------------------------------------------------------- */

double attention_flops(const DiT *m, const AttentionLayer *at, const FlopShape *s) {
    double kv_rows = at->self ? s->tokens : s->text, pairs = at->self ? s->self_pairs : s->cross_pairs;
    return linear_flops(m, &at->q, s->tokens) + linear_flops(m, &at->k, kv_rows) + linear_flops(m, &at->v, kv_rows) +
           4 * pairs * (double)at->q.out /* scores and values over every head */ + linear_flops(m, &at->proj, s->tokens);
}

/* Per layer and rank, with P CP ranks of r rows, h q heads and g kv heads per TP rank of d values. */
void attention_cp_bytes(const DiT *m, const AttentionLayer *at, double r, double b, double *fwd, double *bwd) {
    const CpAttention *cpa = &m->par.cpa;
    int P = m->par.cp;
    double h = m->heads_local, g = local_heads(m, at->kv_heads), d = m->cfg.head_dim;
    *fwd = *bwd = 0;
    if (P <= 1 || !at->self) return; /* cross-attention sees the whole text on every rank */
    if (cpa->type == CP_COMM_ALL_GATHER) { /* K, V gathered; backward: again, and dK, dV reduce-scattered */
        *fwd = 2.0 * (P - 1) * r * g * d * b;
        *bwd = 4.0 * (P - 1) * r * g * d * b;
        return;
    }
    int A = cpa->type == CP_COMM_P2P ? 1 : cpa->type == CP_COMM_A2A ? P : (cpa->A > 0 ? cpa->A : 1);
    int R = P / A;
    double ph = A > 1 ? h / A : h, pg = A > 1 ? (g >= A ? g / A : 1) : g, lse = 4;
    if (A > 1) { /* all-to-all (A-1)/A of each buffer of A·r rows: q, k, v, o back, lse back */
        *fwd += (A - 1) * r * ((2 * ph + 2 * pg) * d * b + ph * lse);
        /* backward: q, k, v, o, lse, dO again, then dq, dk, dv back */
        *bwd += (A - 1) * r * ((3 * ph + 2 * pg) * d * b + ph * lse + (ph + 2 * pg) * d * b);
    }
    if (R > 1) { /* the ring over super-chunks of A·r rows: K, V hops; backward also dK, dV every step */
        double rows = A * r;
        *fwd += 2.0 * (R - 1) * rows * pg * d * b;
        *bwd += (2.0 * (R - 1) + 2.0 * R) * rows * pg * d * b;
    }
}
