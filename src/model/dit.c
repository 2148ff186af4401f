/* DFM DiT forward and backward over one pack, written against the op API (see dit.h). */
#include "dit.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"

/* adaLN chunk order (dfm.md §1.2). */
enum { SHIFT_SA, SCALE_SA, GATE_SA, SHIFT_CA, SCALE_CA, GATE_CA, SHIFT_MLP, SCALE_MLP, GATE_MLP, N_CHUNKS };

typedef struct BlockActs {
    Tensor h0, h1, h2;                    /* [S,D] residual stream before each sub-layer */
    Tensor mean[3], rstd[3];              /* [S] LayerNorm statistics per site */
    Tensor xm[3];                         /* [S,D] modulated LayerNorm outputs */
    Tensor q, k, v, qn, kn, q_rstd, k_rstd; /* q,qn [S,D]; k,v,kn [S,Dkv]; rstd [S·H], [S·Hkv] */
    Tensor o, lse, a;                     /* o,a [S,D]; lse [S,H] */
    Tensor cq, cqn, cq_rstd;              /* [S,D], [S·H] */
    Tensor ck, cv, ckn, ck_rstd;          /* [L,D], [L·H] */
    Tensor co, clse, c;                   /* [S,D], [S,H], [S,D] */
    Tensor f_pre, f, mo;                  /* [S,ffn], [S,ffn], [S,D] */
    Tensor u, mod, chunk[N_CHUNKS];       /* [B,R], [B,9D], [B,D] each */
} BlockActs;

typedef struct Acts {
    int64_t S, L;
    int B;
    Tensor t_in, t1_pre, t1, t_emb;       /* [B,D] */
    Tensor f_in, f1_pre, f1, f_emb;       /* [B,F] */
    Tensor cond, cond_silu;               /* [B,D] */
    Tensor h_final;                       /* [S,D] output of the last block */
    BlockActs *blocks;
    /* backward scratch, reused by every block */
    Tensor d_res, d_branch, d_xm, d_attn_o;             /* [S,D] */
    Tensor d_q, d_qn, d_k, d_kn, d_v;                    /* [S,D] / [S,Dkv] */
    Tensor d_ffn;                                        /* [S,ffn] */
    Tensor d_ck, d_ckn, d_cv;                            /* [L,D] */
    Tensor d_mod, d_chunk[N_CHUNKS], d_u;                /* [B,9D], [B,D], [B,R] */
    Tensor d_cond_silu, d_cond, d_t1, d_f_emb, d_f1;     /* [B,D] / [B,F] */
} Acts;

/* Carves tensors out of the arena, or only counts bytes (dry run for dit_reserve). */
typedef struct Carver {
    Arena *arena;
    size_t bytes;
    int dry;
    Device device;
} Carver;

static vfm_status carve(Carver *cv, Tensor *t, int64_t d0, int64_t d1) {
    int64_t shape[2] = {d0, d1};
    *t = tensor_make(NULL, DT_F32, cv->device, d1 > 0 ? 2 : 1, shape);
    size_t bytes = (tensor_bytes(t) + 255) & ~(size_t)255;
    cv->bytes += bytes;
    if (cv->dry) return VFM_OK;
    return arena_alloc(cv->arena, bytes, &t->data);
}

static vfm_status carve_acts(const DiT *m, Carver *cv, Acts *a, int64_t S, int64_t L, int B) {
    const DiTConfig *c = &m->cfg;
    int64_t D = c->hidden, Dkv = (int64_t)c->kv_heads * c->head_dim, F = c->fps_dim, R = c->adaln_lora;
    a->S = S, a->L = L, a->B = B;
    VFM_TRY(carve(cv, &a->t_in, B, D));
    VFM_TRY(carve(cv, &a->t1_pre, B, D));
    VFM_TRY(carve(cv, &a->t1, B, D));
    VFM_TRY(carve(cv, &a->t_emb, B, D));
    VFM_TRY(carve(cv, &a->f_in, B, F));
    VFM_TRY(carve(cv, &a->f1_pre, B, F));
    VFM_TRY(carve(cv, &a->f1, B, F));
    VFM_TRY(carve(cv, &a->f_emb, B, F));
    VFM_TRY(carve(cv, &a->cond, B, D));
    VFM_TRY(carve(cv, &a->cond_silu, B, D));
    for (int l = 0; l < c->layers; l++) {
        BlockActs *b = &a->blocks[l];
        VFM_TRY(carve(cv, &b->h0, S, D));
        VFM_TRY(carve(cv, &b->h1, S, D));
        VFM_TRY(carve(cv, &b->h2, S, D));
        for (int k = 0; k < 3; k++) {
            VFM_TRY(carve(cv, &b->mean[k], S, 0));
            VFM_TRY(carve(cv, &b->rstd[k], S, 0));
            VFM_TRY(carve(cv, &b->xm[k], S, D));
        }
        VFM_TRY(carve(cv, &b->q, S, D));
        VFM_TRY(carve(cv, &b->qn, S, D));
        VFM_TRY(carve(cv, &b->k, S, Dkv));
        VFM_TRY(carve(cv, &b->kn, S, Dkv));
        VFM_TRY(carve(cv, &b->v, S, Dkv));
        VFM_TRY(carve(cv, &b->q_rstd, S * c->heads, 0));
        VFM_TRY(carve(cv, &b->k_rstd, S * c->kv_heads, 0));
        VFM_TRY(carve(cv, &b->o, S, D));
        VFM_TRY(carve(cv, &b->lse, S, c->heads));
        VFM_TRY(carve(cv, &b->a, S, D));
        VFM_TRY(carve(cv, &b->cq, S, D));
        VFM_TRY(carve(cv, &b->cqn, S, D));
        VFM_TRY(carve(cv, &b->cq_rstd, S * c->heads, 0));
        VFM_TRY(carve(cv, &b->ck, L, D));
        VFM_TRY(carve(cv, &b->cv, L, D));
        VFM_TRY(carve(cv, &b->ckn, L, D));
        VFM_TRY(carve(cv, &b->ck_rstd, L * c->heads, 0));
        VFM_TRY(carve(cv, &b->co, S, D));
        VFM_TRY(carve(cv, &b->clse, S, c->heads));
        VFM_TRY(carve(cv, &b->c, S, D));
        VFM_TRY(carve(cv, &b->f_pre, S, c->ffn));
        VFM_TRY(carve(cv, &b->f, S, c->ffn));
        VFM_TRY(carve(cv, &b->mo, S, D));
        VFM_TRY(carve(cv, &b->u, B, R));
        VFM_TRY(carve(cv, &b->mod, B, N_CHUNKS * D));
        for (int k = 0; k < N_CHUNKS; k++) VFM_TRY(carve(cv, &b->chunk[k], B, D));
    }
    VFM_TRY(carve(cv, &a->h_final, S, D));
    VFM_TRY(carve(cv, &a->d_res, S, D));
    VFM_TRY(carve(cv, &a->d_branch, S, D));
    VFM_TRY(carve(cv, &a->d_xm, S, D));
    VFM_TRY(carve(cv, &a->d_attn_o, S, D));
    VFM_TRY(carve(cv, &a->d_q, S, D));
    VFM_TRY(carve(cv, &a->d_qn, S, D));
    VFM_TRY(carve(cv, &a->d_k, S, Dkv > D ? Dkv : D));
    VFM_TRY(carve(cv, &a->d_kn, S, Dkv > D ? Dkv : D));
    VFM_TRY(carve(cv, &a->d_v, S, Dkv > D ? Dkv : D));
    VFM_TRY(carve(cv, &a->d_ffn, S, c->ffn));
    VFM_TRY(carve(cv, &a->d_ck, L, D));
    VFM_TRY(carve(cv, &a->d_ckn, L, D));
    VFM_TRY(carve(cv, &a->d_cv, L, D));
    VFM_TRY(carve(cv, &a->d_mod, B, N_CHUNKS * D));
    for (int k = 0; k < N_CHUNKS; k++) VFM_TRY(carve(cv, &a->d_chunk[k], B, D));
    VFM_TRY(carve(cv, &a->d_u, B, R));
    VFM_TRY(carve(cv, &a->d_cond_silu, B, D));
    VFM_TRY(carve(cv, &a->d_cond, B, D));
    VFM_TRY(carve(cv, &a->d_t1, B, D));
    VFM_TRY(carve(cv, &a->d_f_emb, B, F));
    VFM_TRY(carve(cv, &a->d_f1, B, F));
    return VFM_OK;
}

/* ---- construction ------------------------------------------------------------------- */

int dit_token_dim(const DiTConfig *c) { return c->in_channels * c->patch_spatial * c->patch_spatial * c->patch_temporal; }
int dit_out_dim(const DiTConfig *c) { return c->out_channels * c->patch_spatial * c->patch_spatial * c->patch_temporal; }

static int add_linear(ParamTable *t, ParamInit init, float scale, int64_t out, int64_t in, unsigned groups, int tp_dim,
                      const char *name) {
    int64_t shape[2] = {out, in};
    return param_table_add(t, init, scale, 2, shape, groups, tp_dim, "%s.weight", name);
}

static int add_bias(ParamTable *t, float fan_in, int64_t n, unsigned groups, const char *name) {
    int64_t shape[1] = {n};
    return param_table_add(t, INIT_UNIFORM_FANIN, fan_in, 1, shape, groups, -1, "%s.bias", name);
}

static void build_table(DiT *m) {
    const DiTConfig *c = &m->cfg;
    ParamTable *t = &m->table;
    int64_t D = c->hidden, Dkv = (int64_t)c->kv_heads * c->head_dim, F = c->fps_dim, R = c->adaln_lora;
    float std = c->init_std, out_std = c->init_std / sqrtf(2.0f * (float)c->layers);
    int64_t tok = dit_token_dim(c);
    m->x_w = add_linear(t, INIT_UNIFORM_FANIN, (float)tok, D, tok, 0, -1, "x_embedder");
    m->x_b = add_bias(t, (float)tok, D, 0, "x_embedder");
    /* Every pipeline stage recomputes the conditioning, so its embedders reduce over PP too. */
    m->t_l1_w = add_linear(t, INIT_UNIFORM_FANIN, (float)D, D, D, REDUCE_PP, -1, "t_embedder.linear_1");
    m->t_l1_b = add_bias(t, (float)D, D, REDUCE_PP, "t_embedder.linear_1");
    m->t_l2_w = add_linear(t, INIT_UNIFORM_FANIN, (float)D, D, D, REDUCE_PP, -1, "t_embedder.linear_2");
    m->t_l2_b = add_bias(t, (float)D, D, REDUCE_PP, "t_embedder.linear_2");
    m->f_l1_w = add_linear(t, INIT_UNIFORM_FANIN, (float)F, F, F, REDUCE_PP, -1, "fps_embedder.linear_1");
    m->f_l1_b = add_bias(t, (float)F, F, REDUCE_PP, "fps_embedder.linear_1");
    m->f_l2_w = add_linear(t, INIT_UNIFORM_FANIN, (float)F, F, F, REDUCE_PP, -1, "fps_embedder.linear_2");
    m->f_l2_b = add_bias(t, (float)F, F, REDUCE_PP, "fps_embedder.linear_2");
    char name[96];
    int64_t hd[1] = {c->head_dim};
    for (int l = 0; l < c->layers; l++) {
        DiTBlockParams *b = &m->blocks[l];
#define NAME(suffix) (snprintf(name, sizeof name, "blocks.%d.%s", l, suffix), name)
        /* adaLN and norm weights see every token of a sample: under SP they reduce over TP. */
        b->ada_l1 = add_linear(t, INIT_UNIFORM_FANIN, (float)D, R, D, REDUCE_TP_SP, -1, NAME("adaln.linear_1"));
        b->ada_l2 = add_linear(t, INIT_ZERO, 0, N_CHUNKS * D, R, REDUCE_TP_SP, -1, NAME("adaln.linear_2"));
        b->sa_q = add_linear(t, INIT_NORMAL, std, D, D, 0, 0, NAME("self_attn.q"));
        b->sa_k = add_linear(t, INIT_NORMAL, std, Dkv, D, 0, 0, NAME("self_attn.k"));
        b->sa_v = add_linear(t, INIT_NORMAL, std, Dkv, D, 0, 0, NAME("self_attn.v"));
        if (c->qk_norm) {
            b->sa_qn = param_table_add(t, INIT_ONE, 0, 1, hd, REDUCE_TP_HEADS, -1, "blocks.%d.self_attn.q_norm.weight", l);
            b->sa_kn = param_table_add(t, INIT_ONE, 0, 1, hd, REDUCE_TP_HEADS, -1, "blocks.%d.self_attn.k_norm.weight", l);
        } else {
            b->sa_qn = b->sa_kn = -1;
        }
        b->sa_proj = add_linear(t, INIT_NORMAL, out_std, D, D, 0, 1, NAME("self_attn.proj"));
        b->ca_q = add_linear(t, INIT_NORMAL, std, D, D, 0, 0, NAME("cross_attn.q"));
        b->ca_k = add_linear(t, INIT_NORMAL, std, D, c->d_text, 0, 0, NAME("cross_attn.k"));
        b->ca_v = add_linear(t, INIT_NORMAL, std, D, c->d_text, 0, 0, NAME("cross_attn.v"));
        if (c->qk_norm) {
            b->ca_qn = param_table_add(t, INIT_ONE, 0, 1, hd, REDUCE_TP_HEADS, -1, "blocks.%d.cross_attn.q_norm.weight", l);
            b->ca_kn = param_table_add(t, INIT_ONE, 0, 1, hd, REDUCE_TP_HEADS, -1, "blocks.%d.cross_attn.k_norm.weight", l);
        } else {
            b->ca_qn = b->ca_kn = -1;
        }
        b->ca_proj = add_linear(t, INIT_NORMAL, out_std, D, D, 0, 1, NAME("cross_attn.proj"));
        b->fc1 = add_linear(t, INIT_NORMAL, std, c->ffn, D, 0, 0, NAME("mlp.fc1"));
        b->fc2 = add_linear(t, INIT_NORMAL, out_std, D, c->ffn, 0, 1, NAME("mlp.fc2"));
#undef NAME
    }
    m->out_w = add_linear(t, INIT_UNIFORM_FANIN, (float)D, dit_out_dim(c), D, 0, -1, "final_linear");
    m->out_b = add_bias(t, (float)D, dit_out_dim(c), 0, "final_linear");
}

void dit_describe(DiT *m, const DiTConfig *cfg) {
    memset(m, 0, sizeof *m);
    m->cfg = *cfg;
    m->blocks = calloc((size_t)cfg->layers, sizeof *m->blocks);
    param_table_init(&m->table);
    build_table(m);
}

vfm_status dit_create(DiT *m, const DiTConfig *cfg, Device device) {
    if (device != DEV_CPU) return vfm_fail(VFM_ERR_UNSUPPORTED, "the DiT runs on the CPU in this version");
    dit_describe(m, cfg);
    m->device = device;
    size_t bytes = (size_t)m->table.total * sizeof(float);
    VFM_TRY(device_malloc(device, bytes, (void **)&m->params));
    VFM_TRY(device_malloc(device, bytes, (void **)&m->grads));
    VFM_TRY(device_memset0(device, m->params, bytes));
    return device_memset0(device, m->grads, bytes);
}

void dit_destroy(DiT *m) {
    device_free(m->device, m->params);
    device_free(m->device, m->grads);
    if (m->arena.base) arena_destroy(&m->arena);
    if (m->saved) free(((Acts *)m->saved)->blocks);
    free(m->saved);
    free(m->blocks);
    param_table_free(&m->table);
    memset(m, 0, sizeof *m);
}

vfm_status dit_init_weights(DiT *m, uint64_t seed) { return param_table_init_values(&m->table, m->params, seed); }

vfm_status dit_reserve(DiT *m, int64_t max_tokens, int64_t max_text, int max_samples) {
    Acts probe;
    memset(&probe, 0, sizeof probe);
    probe.blocks = calloc((size_t)m->cfg.layers, sizeof *probe.blocks);
    Carver cv = {NULL, 0, 1, m->device};
    vfm_status s = carve_acts(m, &cv, &probe, max_tokens, max_text, max_samples);
    free(probe.blocks);
    VFM_TRY(s);
    if (m->arena.base && m->arena.size >= cv.bytes) return VFM_OK;
    if (m->arena.base) arena_destroy(&m->arena);
    VFM_TRY(arena_init(&m->arena, m->device, cv.bytes));
    if (!m->saved) {
        Acts *a = calloc(1, sizeof *a);
        a->blocks = calloc((size_t)m->cfg.layers, sizeof *a->blocks);
        m->saved = a;
    }
    return VFM_OK;
}

/* ---- forward ------------------------------------------------------------------------ */

static Tensor P(const DiT *m, int id) { return param_view(&m->table, id, m->params, DT_F32, m->device); }
static Tensor G(const DiT *m, int id) { return param_view(&m->table, id, m->grads, DT_F32, m->device); }
/* [rows, cols] view of a tensor's data. */
static Tensor V2(const Tensor *t, int64_t rows, int64_t cols) { return TENSOR(t->data, t->dtype, t->device, rows, cols); }
static Tensor V3(const Tensor *t, int64_t d0, int64_t d1, int64_t d2) {
    return TENSOR(t->data, t->dtype, t->device, d0, d1, d2);
}

/* y = RMSNorm over each head of x[rows, heads·hd] (or a copy when QK-norm is off). */
static vfm_status head_norm_forward(const DiT *m, Tensor *y, Tensor *rstd, const Tensor *x, int64_t rows, int heads,
                                    int w_id) {
    if (w_id < 0) return op_copy(y, x);
    Tensor xv = V2(x, rows * heads, m->cfg.head_dim), yv = V2(y, rows * heads, m->cfg.head_dim), w = P(m, w_id);
    return op_rmsnorm_forward(&yv, rstd, &xv, &w, m->cfg.ln_eps);
}

static vfm_status head_norm_backward(const DiT *m, Tensor *dx, const Tensor *dy, const Tensor *x, const Tensor *rstd,
                                     int64_t rows, int heads, int w_id) {
    if (w_id < 0) return op_copy(dx, dy);
    int64_t hd = m->cfg.head_dim;
    Tensor dxv = V2(dx, rows * heads, hd), dyv = V2(dy, rows * heads, hd), xv = V2(x, rows * heads, hd);
    Tensor w = P(m, w_id), dw = G(m, w_id);
    return op_rmsnorm_backward(&dxv, &dw, &dyv, &xv, rstd, &w);
}

static vfm_status attention_forward(const DiT *m, Tensor *o, Tensor *lse, const Tensor *q, const Tensor *k,
                                    const Tensor *v, int64_t Sq, int64_t Skv, int kv_heads,
                                    const VarlenLayout *layout) {
    int hd = m->cfg.head_dim, H = m->cfg.heads;
    Tensor qv = V3(q, Sq, H, hd), kv = V3(k, Skv, kv_heads, hd), vv = V3(v, Skv, kv_heads, hd), ov = V3(o, Sq, H, hd);
    return op_attention_forward(&ov, lse, &qv, &kv, &vv, layout);
}

static vfm_status block_forward(const DiT *m, const DiTBlockParams *p, BlockActs *b, const Acts *a,
                                const DiTInputs *in, Tensor *h_out) {
    const DiTConfig *c = &m->cfg;
    int64_t S = a->S, L = a->L;
    const Tensor *t2s = in->tok2sample;
    float eps = c->ln_eps;
    Tensor w;
    /* modulation: chunk9(W2 · W1 · silu(c)) per sample */
    w = P(m, p->ada_l1);
    VFM_TRY(op_linear_forward(&b->u, NULL, &a->cond_silu, &w, NULL, ACT_NONE));
    w = P(m, p->ada_l2);
    VFM_TRY(op_linear_forward(&b->mod, NULL, &b->u, &w, NULL, ACT_NONE));
    for (int k = 0; k < N_CHUNKS; k++) VFM_TRY(op_columns_get(&b->chunk[k], &b->mod, (int64_t)k * c->hidden));

    /* self-attention */
    VFM_TRY(op_layernorm_modulate_forward(&b->xm[0], &b->mean[0], &b->rstd[0], &b->h0, &b->chunk[SHIFT_SA],
                                          &b->chunk[SCALE_SA], t2s, eps));
    w = P(m, p->sa_q);
    VFM_TRY(op_linear_forward(&b->q, NULL, &b->xm[0], &w, NULL, ACT_NONE));
    w = P(m, p->sa_k);
    VFM_TRY(op_linear_forward(&b->k, NULL, &b->xm[0], &w, NULL, ACT_NONE));
    w = P(m, p->sa_v);
    VFM_TRY(op_linear_forward(&b->v, NULL, &b->xm[0], &w, NULL, ACT_NONE));
    VFM_TRY(head_norm_forward(m, &b->qn, &b->q_rstd, &b->q, S, c->heads, p->sa_qn));
    VFM_TRY(head_norm_forward(m, &b->kn, &b->k_rstd, &b->k, S, c->kv_heads, p->sa_kn));
    VFM_TRY(attention_forward(m, &b->o, &b->lse, &b->qn, &b->kn, &b->v, S, S, c->kv_heads, &in->self_layout));
    w = P(m, p->sa_proj);
    VFM_TRY(op_linear_forward(&b->a, NULL, &b->o, &w, NULL, ACT_NONE));
    VFM_TRY(op_gated_residual_forward(&b->h1, &b->h0, &b->a, &b->chunk[GATE_SA], t2s));

    /* cross-attention to the text */
    VFM_TRY(op_layernorm_modulate_forward(&b->xm[1], &b->mean[1], &b->rstd[1], &b->h1, &b->chunk[SHIFT_CA],
                                          &b->chunk[SCALE_CA], t2s, eps));
    w = P(m, p->ca_q);
    VFM_TRY(op_linear_forward(&b->cq, NULL, &b->xm[1], &w, NULL, ACT_NONE));
    w = P(m, p->ca_k);
    VFM_TRY(op_linear_forward(&b->ck, NULL, in->text, &w, NULL, ACT_NONE));
    w = P(m, p->ca_v);
    VFM_TRY(op_linear_forward(&b->cv, NULL, in->text, &w, NULL, ACT_NONE));
    VFM_TRY(head_norm_forward(m, &b->cqn, &b->cq_rstd, &b->cq, S, c->heads, p->ca_qn));
    VFM_TRY(head_norm_forward(m, &b->ckn, &b->ck_rstd, &b->ck, L, c->heads, p->ca_kn));
    VFM_TRY(attention_forward(m, &b->co, &b->clse, &b->cqn, &b->ckn, &b->cv, S, L, c->heads, &in->cross_layout));
    w = P(m, p->ca_proj);
    VFM_TRY(op_linear_forward(&b->c, NULL, &b->co, &w, NULL, ACT_NONE));
    VFM_TRY(op_gated_residual_forward(&b->h2, &b->h1, &b->c, &b->chunk[GATE_CA], t2s));

    /* MLP */
    VFM_TRY(op_layernorm_modulate_forward(&b->xm[2], &b->mean[2], &b->rstd[2], &b->h2, &b->chunk[SHIFT_MLP],
                                          &b->chunk[SCALE_MLP], t2s, eps));
    w = P(m, p->fc1);
    VFM_TRY(op_linear_forward(&b->f, &b->f_pre, &b->xm[2], &w, NULL, ACT_GELU_ERF));
    w = P(m, p->fc2);
    VFM_TRY(op_linear_forward(&b->mo, NULL, &b->f, &w, NULL, ACT_NONE));
    return op_gated_residual_forward(h_out, &b->h2, &b->mo, &b->chunk[GATE_MLP], t2s);
}

static vfm_status check_inputs(const DiT *m, const DiTInputs *in, int64_t *S, int64_t *L, int *B) {
    *S = tensor_dim(in->x, 0);
    *L = tensor_dim(in->text, 0);
    *B = (int)tensor_dim(in->c_noise, 0);
    if (tensor_dim(in->x, -1) != dit_token_dim(&m->cfg))
        return vfm_fail(VFM_ERR_SHAPE, "dit_forward: tokens have %lld values, the model expects %d (C·p²·pt)",
                        (long long)tensor_dim(in->x, -1), dit_token_dim(&m->cfg));
    if (tensor_dim(in->text, -1) != m->cfg.d_text)
        return vfm_fail(VFM_ERR_SHAPE, "dit_forward: text rows have %lld values, the model expects %d",
                        (long long)tensor_dim(in->text, -1), m->cfg.d_text);
    if (!m->saved) return vfm_fail(VFM_ERR_INTERNAL, "dit_forward: call dit_reserve first");
    return VFM_OK;
}

vfm_status dit_forward(DiT *m, const DiTInputs *in, Tensor *out) {
    const DiTConfig *c = &m->cfg;
    int64_t S, L;
    int B;
    VFM_TRY(check_inputs(m, in, &S, &L, &B));
    Acts *a = m->saved;
    arena_rewind(&m->arena, 0);
    Carver cv = {&m->arena, 0, 0, m->device};
    VFM_TRY(carve_acts(m, &cv, a, S, L, B));
    Tensor w, bias;

    /* conditioning: c = t_embedder(sincos(c_noise)) + pad(fps_embedder(sincos(fps))) */
    VFM_TRY(op_timestep_embedding_forward(&a->t_in, in->c_noise, 0, 0.0f, 10000.0f));
    w = P(m, m->t_l1_w), bias = P(m, m->t_l1_b);
    VFM_TRY(op_linear_forward(&a->t1_pre, NULL, &a->t_in, &w, &bias, ACT_NONE));
    VFM_TRY(op_silu_forward(&a->t1, &a->t1_pre));
    w = P(m, m->t_l2_w), bias = P(m, m->t_l2_b);
    VFM_TRY(op_linear_forward(&a->t_emb, NULL, &a->t1, &w, &bias, ACT_NONE));
    VFM_TRY(op_timestep_embedding_forward(&a->f_in, in->fps, 0, 1.0f, 10000.0f));
    w = P(m, m->f_l1_w), bias = P(m, m->f_l1_b);
    VFM_TRY(op_linear_forward(&a->f1_pre, NULL, &a->f_in, &w, &bias, ACT_NONE));
    VFM_TRY(op_silu_forward(&a->f1, &a->f1_pre));
    w = P(m, m->f_l2_w), bias = P(m, m->f_l2_b);
    VFM_TRY(op_linear_forward(&a->f_emb, NULL, &a->f1, &w, &bias, ACT_NONE));
    VFM_TRY(op_copy(&a->cond, &a->t_emb));
    VFM_TRY(op_columns_add(&a->cond, &a->f_emb, 0));
    VFM_TRY(op_silu_forward(&a->cond_silu, &a->cond));

    /* patch embedding + fixed 3-D position */
    BlockActs *b0 = &a->blocks[0];
    w = P(m, m->x_w), bias = P(m, m->x_b);
    VFM_TRY(op_linear_forward(&b0->h0, NULL, in->x, &w, &bias, ACT_NONE));
    VFM_TRY(op_pos_embed_3d_add(&b0->h0, in->pos, in->tok2sample));

    for (int l = 0; l < c->layers; l++) {
        Tensor *h_out = l + 1 < c->layers ? &a->blocks[l + 1].h0 : &a->h_final;
        VFM_TRY(block_forward(m, &m->blocks[l], &a->blocks[l], a, in, h_out));
    }
    w = P(m, m->out_w), bias = P(m, m->out_b);
    return op_linear_forward(out, NULL, &a->h_final, &w, &bias, ACT_NONE);
}

/* ---- backward ----------------------------------------------------------------------- */

static vfm_status attention_backward(const DiT *m, Tensor *dq, Tensor *dk, Tensor *dv, const Tensor *dout,
                                     const Tensor *q, const Tensor *k, const Tensor *v, const Tensor *o,
                                     const Tensor *lse, int64_t Sq, int64_t Skv, int kv_heads,
                                     const VarlenLayout *layout) {
    int hd = m->cfg.head_dim, H = m->cfg.heads;
    Tensor dqv = V3(dq, Sq, H, hd), dkv = V3(dk, Skv, kv_heads, hd), dvv = V3(dv, Skv, kv_heads, hd);
    Tensor dov = V3(dout, Sq, H, hd), qv = V3(q, Sq, H, hd), kv = V3(k, Skv, kv_heads, hd);
    Tensor vv = V3(v, Skv, kv_heads, hd), ov = V3(o, Sq, H, hd);
    return op_attention_backward(&dqv, &dkv, &dvv, &dov, &qv, &kv, &vv, &ov, lse, layout);
}

/* dx += dy·W for a bias-free linear, and dW += dyᵀ·x. */
static vfm_status linear_back(const DiT *m, Tensor *dx, int accumulate, Tensor *dy, const Tensor *x, int w_id) {
    Tensor w = P(m, w_id), dw = G(m, w_id);
    return op_linear_backward(dx, &dw, NULL, dy, x, &w, NULL, ACT_NONE, accumulate);
}

/* Takes a->d_res = dL/d(block output) and leaves dL/d(block input) in it. */
static vfm_status block_backward(const DiT *m, const DiTBlockParams *p, const BlockActs *b, Acts *a,
                                 const DiTInputs *in) {
    const DiTConfig *c = &m->cfg;
    int64_t S = a->S, L = a->L;
    const Tensor *t2s = in->tok2sample;
    Tensor dq = V2(&a->d_q, S, c->hidden), dqn = V2(&a->d_qn, S, c->hidden);
    int64_t Dkv = (int64_t)c->kv_heads * c->head_dim;
    Tensor dk = V2(&a->d_k, S, Dkv), dkn = V2(&a->d_kn, S, Dkv), dv = V2(&a->d_v, S, Dkv);
    Tensor w, dw;
    for (int k = 0; k < N_CHUNKS; k++) VFM_TRY(op_fill(&a->d_chunk[k], 0.0));

    /* MLP */
    VFM_TRY(op_gated_residual_backward(NULL, &a->d_branch, &a->d_chunk[GATE_MLP], &a->d_res, &b->mo,
                                       &b->chunk[GATE_MLP], t2s));
    VFM_TRY(linear_back(m, &a->d_ffn, 0, &a->d_branch, &b->f, p->fc2));
    w = P(m, p->fc1), dw = G(m, p->fc1);
    VFM_TRY(op_linear_backward(&a->d_xm, &dw, NULL, &a->d_ffn, &b->xm[2], &w, &b->f_pre, ACT_GELU_ERF, 0));
    VFM_TRY(op_layernorm_modulate_backward(&a->d_res, &a->d_chunk[SHIFT_MLP], &a->d_chunk[SCALE_MLP], &a->d_xm,
                                           &b->h2, &b->mean[2], &b->rstd[2], &b->chunk[SCALE_MLP], t2s));

    /* cross-attention */
    VFM_TRY(op_gated_residual_backward(NULL, &a->d_branch, &a->d_chunk[GATE_CA], &a->d_res, &b->c,
                                       &b->chunk[GATE_CA], t2s));
    VFM_TRY(linear_back(m, &a->d_attn_o, 0, &a->d_branch, &b->co, p->ca_proj));
    VFM_TRY(attention_backward(m, &dqn, &a->d_ckn, &a->d_cv, &a->d_attn_o, &b->cqn, &b->ckn, &b->cv, &b->co, &b->clse,
                               S, L, c->heads, &in->cross_layout));
    VFM_TRY(head_norm_backward(m, &dq, &dqn, &b->cq, &b->cq_rstd, S, c->heads, p->ca_qn));
    VFM_TRY(head_norm_backward(m, &a->d_ck, &a->d_ckn, &b->ck, &b->ck_rstd, L, c->heads, p->ca_kn));
    VFM_TRY(linear_back(m, NULL, 0, &a->d_ck, in->text, p->ca_k)); /* the text gets no gradient */
    VFM_TRY(linear_back(m, NULL, 0, &a->d_cv, in->text, p->ca_v));
    VFM_TRY(linear_back(m, &a->d_xm, 0, &dq, &b->xm[1], p->ca_q));
    VFM_TRY(op_layernorm_modulate_backward(&a->d_res, &a->d_chunk[SHIFT_CA], &a->d_chunk[SCALE_CA], &a->d_xm, &b->h1,
                                           &b->mean[1], &b->rstd[1], &b->chunk[SCALE_CA], t2s));

    /* self-attention */
    VFM_TRY(op_gated_residual_backward(NULL, &a->d_branch, &a->d_chunk[GATE_SA], &a->d_res, &b->a,
                                       &b->chunk[GATE_SA], t2s));
    VFM_TRY(linear_back(m, &a->d_attn_o, 0, &a->d_branch, &b->o, p->sa_proj));
    VFM_TRY(attention_backward(m, &dqn, &dkn, &dv, &a->d_attn_o, &b->qn, &b->kn, &b->v, &b->o, &b->lse, S, S,
                               c->kv_heads, &in->self_layout));
    VFM_TRY(head_norm_backward(m, &dq, &dqn, &b->q, &b->q_rstd, S, c->heads, p->sa_qn));
    VFM_TRY(head_norm_backward(m, &dk, &dkn, &b->k, &b->k_rstd, S, c->kv_heads, p->sa_kn));
    VFM_TRY(linear_back(m, &a->d_xm, 0, &dq, &b->xm[0], p->sa_q));
    VFM_TRY(linear_back(m, &a->d_xm, 1, &dk, &b->xm[0], p->sa_k));
    VFM_TRY(linear_back(m, &a->d_xm, 1, &dv, &b->xm[0], p->sa_v));
    VFM_TRY(op_layernorm_modulate_backward(&a->d_res, &a->d_chunk[SHIFT_SA], &a->d_chunk[SCALE_SA], &a->d_xm, &b->h0,
                                           &b->mean[0], &b->rstd[0], &b->chunk[SCALE_SA], t2s));

    /* modulation: d(chunks) → d(mod) → W2, W1 → d(silu(c)) accumulated over blocks */
    VFM_TRY(op_fill(&a->d_mod, 0.0));
    for (int k = 0; k < N_CHUNKS; k++) VFM_TRY(op_columns_add(&a->d_mod, &a->d_chunk[k], (int64_t)k * c->hidden));
    VFM_TRY(linear_back(m, &a->d_u, 0, &a->d_mod, &b->u, p->ada_l2));
    return linear_back(m, &a->d_cond_silu, 1, &a->d_u, &a->cond_silu, p->ada_l1);
}

vfm_status dit_backward(DiT *m, const DiTInputs *in, const Tensor *dout) {
    const DiTConfig *c = &m->cfg;
    Acts *a = m->saved;
    if (!a || a->S != tensor_dim(in->x, 0)) return vfm_fail(VFM_ERR_INTERNAL, "dit_backward without a matching forward");
    Tensor w, dw, db;
    Tensor dout_copy = *dout; /* linear_backward with ACT_NONE leaves dy untouched */

    w = P(m, m->out_w), dw = G(m, m->out_w), db = G(m, m->out_b);
    VFM_TRY(op_linear_backward(&a->d_res, &dw, &db, &dout_copy, &a->h_final, &w, NULL, ACT_NONE, 0));
    if (m->on_grads_final) m->on_grads_final(m->on_grads_final_ctx, m->out_w);
    VFM_TRY(op_fill(&a->d_cond_silu, 0.0));
    for (int l = c->layers - 1; l >= 0; l--) {
        VFM_TRY(block_backward(m, &m->blocks[l], &a->blocks[l], a, in));
        if (m->on_grads_final) m->on_grads_final(m->on_grads_final_ctx, m->blocks[l].ada_l1);
    }

    /* patch embedding (the position embedding is fixed; the input gets no gradient) */
    w = P(m, m->x_w), dw = G(m, m->x_w), db = G(m, m->x_b);
    VFM_TRY(op_linear_backward(NULL, &dw, &db, &a->d_res, in->x, &w, NULL, ACT_NONE, 0));

    /* conditioning */
    VFM_TRY(op_silu_backward(&a->d_cond, &a->d_cond_silu, &a->cond));
    w = P(m, m->t_l2_w), dw = G(m, m->t_l2_w), db = G(m, m->t_l2_b);
    VFM_TRY(op_linear_backward(&a->d_t1, &dw, &db, &a->d_cond, &a->t1, &w, NULL, ACT_NONE, 0));
    VFM_TRY(op_silu_backward(&a->d_t1, &a->d_t1, &a->t1_pre));
    w = P(m, m->t_l1_w), dw = G(m, m->t_l1_w), db = G(m, m->t_l1_b);
    VFM_TRY(op_linear_backward(NULL, &dw, &db, &a->d_t1, &a->t_in, &w, NULL, ACT_NONE, 0));
    VFM_TRY(op_columns_get(&a->d_f_emb, &a->d_cond, 0));
    w = P(m, m->f_l2_w), dw = G(m, m->f_l2_w), db = G(m, m->f_l2_b);
    VFM_TRY(op_linear_backward(&a->d_f1, &dw, &db, &a->d_f_emb, &a->f1, &w, NULL, ACT_NONE, 0));
    VFM_TRY(op_silu_backward(&a->d_f1, &a->d_f1, &a->f1_pre));
    w = P(m, m->f_l1_w), dw = G(m, m->f_l1_w), db = G(m, m->f_l1_b);
    VFM_TRY(op_linear_backward(NULL, &dw, &db, &a->d_f1, &a->f_in, &w, NULL, ACT_NONE, 0));
    if (m->on_grads_final) m->on_grads_final(m->on_grads_final_ctx, 0);
    return VFM_OK;
}

/* ---- FLOPs -------------------------------------------------------------------------- */

double dit_forward_flops(const DiTConfig *c, int n, const int32_t *cu_q, const int32_t *cu_text) {
    double D = c->hidden, Dkv = (double)c->kv_heads * c->head_dim, S = 0, attn_self = 0, attn_cross = 0, L = 0;
    for (int i = 0; i < n; i++) {
        double q = cu_q[i + 1] - cu_q[i], l = cu_text[i + 1] - cu_text[i];
        S += q;
        L += l;
        attn_self += q * q;
        attn_cross += q * l;
    }
    double per_block = 2 * S * D * (D + 2 * Dkv)   /* q, k, v */
                       + 4 * attn_self * D         /* scores and values */
                       + 2 * S * D * D             /* proj */
                       + 2 * S * D * D + 2 * L * c->d_text * 2 * D /* cross q, k, v */
                       + 4 * attn_cross * D + 2 * S * D * D        /* cross attention, proj */
                       + 2 * 2 * S * D * c->ffn;                   /* MLP */
    double embed = 2 * S * dit_token_dim(c) * D + 2 * S * D * dit_out_dim(c);
    return c->layers * per_block + embed;
}
