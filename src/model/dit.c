/* DiT forward and backward over one pack, for every variant (see dit.h): one block function
 * reads the variant's features (modulation form and chunks, biases, GELU kind, QK-norm,
 * cross-attention, final layer, embedders). Written against the op API only. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/dit_internal.h"

/* adaLN chunk slots: (shift, scale, gate) of self-attention, cross-attention (9 chunks only),
 * then the MLP — dfm.md §1.2 and the DiT reference's order. */
enum { SHIFT = 0, SCALE = 1, GATE = 2 };
static int chunk_sa(int k) { return k; }
static int chunk_ca(int k) { return 3 + k; }
static int chunk_mlp(const DiTConfig *c, int k) { return c->f.n_chunks - 3 + k; }

/* ---- parameter views ----------------------------------------------------------------- */

/* Weights and gradients are read through dit_weight_ptr / dit_grad_ptr (dit_fsdp.c): the model's
 * own buffers, or under ZeRO-2/3 its FSDP units. grad = 1: the fp32 gradient instead. */
static Tensor entry_rows(const DiT *m, int id, int64_t at, int grad, int ndim, const int64_t *shape) {
    DType dt = DT_F32;
    void *p = grad ? (void *)dit_grad_ptr(m, id, at) : dit_weight_ptr(m, id, at, &dt);
    return tensor_make(p, dt, m->device, ndim, shape);
}

/* Rows [row0, row0 + out) of a linear's weight (any entry rank, viewed [rows, numel/rows]). */
static Tensor lin_weight(const DiT *m, const DiTLinear *l, int grad) {
    const ParamEntry *e = &m->table.entries[l->w];
    int64_t in = e->numel / e->shape[0];
    return entry_rows(m, l->w, l->row0 * in, grad, 2, (int64_t[]){l->out, in});
}

static Tensor lin_bias(const DiT *m, const DiTLinear *l, int grad) {
    return entry_rows(m, l->b, l->row0, grad, 1, (int64_t[]){l->out});
}

/* A row-parallel layer's (replicated) bias is added by TP rank 0 only, so the sum that closes the
 * region counts it once; its gradient lives on rank 0 and is summed over TP (REDUCE_TP_HEADS). */
static int bias_here(const DiT *m, const DiTLinear *l) {
    if (l->b < 0) return 0;
    return !(m->par.tp > 1 && m->table.entries[l->w].tp_split_dim == 1 && m->par.tp_rank != 0);
}

static Tensor P(const DiT *m, int id) {
    const ParamEntry *e = &m->table.entries[id];
    return entry_rows(m, id, 0, 0, e->ndim, e->shape);
}
static Tensor G(const DiT *m, int id) {
    const ParamEntry *e = &m->table.entries[id];
    return entry_rows(m, id, 0, 1, e->ndim, e->shape);
}
/* [rows, cols] view of a tensor's data. */
static Tensor V2(const Tensor *t, int64_t rows, int64_t cols) { return TENSOR(t->data, t->dtype, t->device, rows, cols); }
static Tensor V3(const Tensor *t, int64_t d0, int64_t d1, int64_t d2) {
    return TENSOR(t->data, t->dtype, t->device, d0, d1, d2);
}

/* y[N,out] = act(x·Wᵀ + b) */
static vfm_status lin_fwd(const DiT *m, Tensor *y, Tensor *pre, const Tensor *x, const DiTLinear *l, Activation act) {
    Tensor w = lin_weight(m, l, 0), b;
    int with_bias = bias_here(m, l);
    if (with_bias) b = lin_bias(m, l, 0);
    return op_linear_forward(y, pre, x, &w, with_bias ? &b : NULL, act);
}

/* dW += dpreᵀ·x, db += Σ dpre, dx = (or += when accumulate) dpre·W; dx may be NULL. */
static vfm_status lin_bwd(const DiT *m, Tensor *dx, int accumulate, Tensor *dy, const Tensor *x, const DiTLinear *l,
                          const Tensor *pre, Activation act) {
    Tensor w = lin_weight(m, l, 0), dw = lin_weight(m, l, 1), db;
    int with_bias = bias_here(m, l);
    if (with_bias) db = lin_bias(m, l, 1);
    return op_linear_backward(dx, &dw, with_bias ? &db : NULL, dy, x, &w, pre, act, accumulate);
}

/* ---- tensor-parallel regions ------------------------------------------------------------ */

/* full: the rows a region's column-parallel linears read: xm itself, or (SP) all TP ranks' rows
 * gathered into the region scratch. The backward calls it again (Megatron's re-gather under SP:
 * the gathered rows are not kept). */
static vfm_status enter_region(const DiT *m, const Acts *a, const Tensor *xm, Tensor *full) {
    TpContext tpc = dit_tp_context(m);
    *full = tpc.sequence_parallel ? a->xm_full : *xm;
    return tp_region_enter_forward(&tpc, full, xm);
}

/* local[Rl, D] = the row-parallel linear l of x[R, in] summed over TP (all-reduce, or SP:
 * reduce-scatter to this rank's rows). skip: the broken variant of the tests. */
static vfm_status row_parallel_forward(const DiT *m, const Acts *a, Tensor *local, const Tensor *x, const DiTLinear *l,
                                       int skip) {
    TpContext tpc = dit_tp_context(m);
    Tensor partial = tpc.sequence_parallel ? a->partial : *local;
    VFM_TRY(lin_fwd(m, &partial, NULL, x, l, ACT_NONE));
    if (skip) return tp_sp_scatter(&tpc, local, &partial);
    return tp_region_exit_forward(&tpc, local, &partial);
}

/* d_xm[Rl, D] = the local rows' gradient from the region's summed column-parallel input gradient
 * a->d_xm_full (all-reduce, or SP: reduce-scatter). */
static vfm_status leave_region_backward(const DiT *m, Acts *a) {
    TpContext tpc = dit_tp_context(m);
    return tp_region_enter_backward(&tpc, &a->d_xm, &a->d_xm_full);
}

/* The gradient rows of a row-parallel linear's output: d_branch itself, or (SP) all ranks' rows. */
static vfm_status row_parallel_dout(const DiT *m, Acts *a, Tensor *dpartial) {
    TpContext tpc = dit_tp_context(m);
    *dpartial = tpc.sequence_parallel ? a->d_partial : a->d_branch;
    return tp_region_exit_backward(&tpc, dpartial, &a->d_branch);
}

static void probe(const DiT *m, const char *site, int layer, const Tensor *rows) {
    if (m->probe) m->probe(m->probe_ctx, site, layer, rows);
}

/* ---- attention pieces ----------------------------------------------------------------- */

/* y = RMSNorm over each head of x[rows, heads·hd]; nothing when QK-norm is off (y is x). */
static vfm_status head_norm_forward(const DiT *m, Tensor *y, Tensor *rstd, const Tensor *x, int64_t rows, int heads,
                                    int w_id) {
    if (w_id < 0) return VFM_OK;
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

/* Cross-attention (the text whole on every rank) or, with self = 1, self-attention through CP. */
static vfm_status attention_forward(const DiT *m, const Acts *a, int self, Tensor *o, Tensor *lse, const Tensor *q,
                                    const Tensor *k, const Tensor *v, int64_t Sq, int64_t Skv, int kv_heads) {
    int hd = m->cfg.head_dim, H = m->heads_local;
    Tensor qv = V3(q, Sq, H, hd), kv = V3(k, Skv, kv_heads, hd), vv = V3(v, Skv, kv_heads, hd), ov = V3(o, Sq, H, hd);
    if (self) return dit_self_attention_forward(m, a, &ov, lse, &qv, &kv, &vv);
    return op_attention_forward(&ov, lse, &qv, &kv, &vv, &a->pl.cross);
}

static vfm_status attention_backward(const DiT *m, const Acts *a, int self, Tensor *dq, Tensor *dk, Tensor *dv,
                                     const Tensor *dout, const Tensor *q, const Tensor *k, const Tensor *v,
                                     const Tensor *o, const Tensor *lse, int64_t Sq, int64_t Skv, int kv_heads) {
    int hd = m->cfg.head_dim, H = m->heads_local;
    Tensor dqv = V3(dq, Sq, H, hd), dkv = V3(dk, Skv, kv_heads, hd), dvv = V3(dv, Skv, kv_heads, hd);
    Tensor dov = V3(dout, Sq, H, hd), qv = V3(q, Sq, H, hd), kv = V3(k, Skv, kv_heads, hd);
    Tensor vv = V3(v, Skv, kv_heads, hd), ov = V3(o, Sq, H, hd);
    if (self) return dit_self_attention_backward(m, a, &dqv, &dkv, &dvv, &dov, &qv, &kv, &vv, &ov, lse);
    return op_attention_backward(&dqv, &dkv, &dvv, &dov, &qv, &kv, &vv, &ov, lse, &a->pl.cross);
}

/* ---- forward -------------------------------------------------------------------------- */

/* mod[B, n·D] = W·silu(c) (+ b), or W2·W1·silu(c) through the LoRA rank; then its chunks. */
static vfm_status modulation_forward(const DiT *m, const DiTBlockParams *p, BlockActs *b, const Acts *a) {
    const DiTConfig *c = &m->cfg;
    if (p->ada_down.w >= 0) {
        VFM_TRY(lin_fwd(m, &b->u, NULL, &a->cond_silu, &p->ada_down, ACT_NONE));
        VFM_TRY(lin_fwd(m, &b->mod, NULL, &b->u, &p->ada_up, ACT_NONE));
    } else {
        VFM_TRY(lin_fwd(m, &b->mod, NULL, &a->cond_silu, &p->ada_up, ACT_NONE));
    }
    for (int k = 0; k < c->f.n_chunks; k++) VFM_TRY(op_columns_get(&b->chunk[k], &b->mod, (int64_t)k * c->hidden));
    return VFM_OK;
}

static vfm_status block_forward(const DiT *m, int l, const DiTBlockParams *p, BlockActs *b, Acts *a,
                                const DiTInputs *in, Tensor *h_out) {
    const DiTConfig *c = &m->cfg;
    int64_t R = a->R, L = a->L;
    const Tensor *t2s = &a->pl.t2s;
    int Hl = m->heads_local, Hkvl = m->kv_heads_local;
    float eps = c->f.block_ln_eps;
    Activation act = c->f.mlp_act;
    Tensor xf;
    VFM_TRY(modulation_forward(m, p, b, a));

    /* self-attention: LN+modulate on this rank's rows, q/k/v column-parallel on the region's rows */
    VFM_TRY(op_layernorm_modulate_forward(&b->xm[0], &b->mean[0], &b->rstd[0], &b->h0, &b->chunk[chunk_sa(SHIFT)],
                                          &b->chunk[chunk_sa(SCALE)], t2s, eps));
    VFM_TRY(enter_region(m, a, &b->xm[0], &xf));
    VFM_TRY(lin_fwd(m, &b->q, NULL, &xf, &p->sa_q, ACT_NONE));
    VFM_TRY(lin_fwd(m, &b->k, NULL, &xf, &p->sa_k, ACT_NONE));
    VFM_TRY(lin_fwd(m, &b->v, NULL, &xf, &p->sa_v, ACT_NONE));
    VFM_TRY(head_norm_forward(m, &b->qn, &b->q_rstd, &b->q, R, Hl, p->sa_qn));
    VFM_TRY(head_norm_forward(m, &b->kn, &b->k_rstd, &b->k, R, Hkvl, p->sa_kn));
    VFM_TRY(attention_forward(m, a, 1, &b->o, &b->lse, &b->qn, &b->kn, &b->v, R, R, Hkvl));
    VFM_TRY(row_parallel_forward(m, a, &b->a, &b->o, &p->sa_proj, m->par.test_skip_tp_reduce == l + 1));
    VFM_TRY(op_gated_residual_forward(&b->h1, &b->h0, &b->a, &b->chunk[chunk_sa(GATE)], t2s));
    probe(m, "self_attn", l, &b->h1);

    /* cross-attention to the whole text */
    if (c->f.cross_attn) {
        VFM_TRY(op_layernorm_modulate_forward(&b->xm[1], &b->mean[1], &b->rstd[1], &b->h1, &b->chunk[chunk_ca(SHIFT)],
                                              &b->chunk[chunk_ca(SCALE)], t2s, eps));
        VFM_TRY(enter_region(m, a, &b->xm[1], &xf));
        VFM_TRY(lin_fwd(m, &b->cq, NULL, &xf, &p->ca_q, ACT_NONE));
        VFM_TRY(lin_fwd(m, &b->ck, NULL, in->text, &p->ca_k, ACT_NONE));
        VFM_TRY(lin_fwd(m, &b->cv, NULL, in->text, &p->ca_v, ACT_NONE));
        VFM_TRY(head_norm_forward(m, &b->cqn, &b->cq_rstd, &b->cq, R, Hl, p->ca_qn));
        VFM_TRY(head_norm_forward(m, &b->ckn, &b->ck_rstd, &b->ck, L, Hl, p->ca_kn));
        VFM_TRY(attention_forward(m, a, 0, &b->co, &b->clse, &b->cqn, &b->ckn, &b->cv, R, L, Hl));
        VFM_TRY(row_parallel_forward(m, a, &b->c, &b->co, &p->ca_proj, 0));
        VFM_TRY(op_gated_residual_forward(&b->h2, &b->h1, &b->c, &b->chunk[chunk_ca(GATE)], t2s));
        probe(m, "cross_attn", l, &b->h2);
    }

    /* MLP: fc1 column-parallel, fc2 row-parallel */
    VFM_TRY(op_layernorm_modulate_forward(&b->xm[2], &b->mean[2], &b->rstd[2], &b->h2, &b->chunk[chunk_mlp(c, SHIFT)],
                                          &b->chunk[chunk_mlp(c, SCALE)], t2s, eps));
    VFM_TRY(enter_region(m, a, &b->xm[2], &xf));
    VFM_TRY(lin_fwd(m, &b->f, &b->f_pre, &xf, &p->fc1, act));
    VFM_TRY(row_parallel_forward(m, a, &b->mo, &b->f, &p->fc2, 0));
    VFM_TRY(op_gated_residual_forward(h_out, &b->h2, &b->mo, &b->chunk[chunk_mlp(c, GATE)], t2s));
    probe(m, "mlp", l, h_out);
    return VFM_OK;
}

/* c = norm?(t_embedder(sincos(c_noise)) + pad(fps_embedder(sincos(fps))) + y_embedder(class)),
 * then silu(c) for every modulation. */
static vfm_status conditioning_forward(const DiT *m, Acts *a, const DiTInputs *in) {
    const DiTConfig *c = &m->cfg;
    VFM_TRY(op_timestep_embedding_forward(&a->t_in, in->c_noise, c->f.t_flip, 0.0f, 10000.0f));
    VFM_TRY(lin_fwd(m, &a->t1_pre, NULL, &a->t_in, &m->t_l1, ACT_NONE));
    VFM_TRY(op_silu_forward(&a->t1, &a->t1_pre));
    VFM_TRY(lin_fwd(m, &a->t_emb, NULL, &a->t1, &m->t_l2, ACT_NONE));
    VFM_TRY(op_copy(&a->cond_raw, &a->t_emb));
    if (c->f.fps_embedder) {
        VFM_TRY(op_timestep_embedding_forward(&a->f_in, in->fps, 0, 1.0f, 10000.0f));
        VFM_TRY(lin_fwd(m, &a->f1_pre, NULL, &a->f_in, &m->f_l1, ACT_NONE));
        VFM_TRY(op_silu_forward(&a->f1, &a->f1_pre));
        VFM_TRY(lin_fwd(m, &a->f_emb, NULL, &a->f1, &m->f_l2, ACT_NONE));
        VFM_TRY(op_columns_add(&a->cond_raw, &a->f_emb, 0));
    }
    if (m->y_table >= 0) {
        Tensor table = P(m, m->y_table);
        VFM_TRY(op_embedding_forward(&a->y_emb, &table, in->class_labels));
        VFM_TRY(op_add(&a->cond_raw, &a->cond_raw, &a->y_emb));
    }
    if (m->cond_norm_w >= 0) {
        Tensor w = P(m, m->cond_norm_w);
        VFM_TRY(op_rmsnorm_forward(&a->cond, &a->cond_rstd, &a->cond_raw, &w, 1e-6f));
    }
    return op_silu_forward(&a->cond_silu, &a->cond);
}

/* h0 = x_embedder(x) + fixed position embedding. */
static vfm_status patch_embedding_forward(const DiT *m, Acts *a, Tensor *h0) {
    const DiTConfig *c = &m->cfg;
    const Tensor *x = &a->pl.x;
    if (c->f.conv_patch) {
        Tensor perm = TENSOR(m->patch_perm, DT_I32, m->device, dit_token_dim(c));
        VFM_TRY(op_gather_columns(&a->x_perm, x, &perm));
        x = &a->x_perm;
    }
    VFM_TRY(lin_fwd(m, h0, NULL, x, &m->x_embed, ACT_NONE));
    if (c->f.pos == DIT_POS_SINCOS_2D) return op_pos_embed_2d_add(h0, &a->pl.pos, &a->pl.t2s);
    return op_pos_embed_3d_add(h0, &a->pl.pos, &a->pl.t2s);
}

/* out = Linear(h), or Linear(LN(h)·(1+scale) + shift) with (shift, scale) = Linear(silu(c)). */
static vfm_status final_layer_forward(const DiT *m, Acts *a, Tensor *out) {
    const DiTConfig *c = &m->cfg;
    if (!c->f.final_adaln) return lin_fwd(m, out, NULL, &a->h_final, &m->final_out, ACT_NONE);
    VFM_TRY(lin_fwd(m, &a->fmod, NULL, &a->cond_silu, &m->final_ada, ACT_NONE));
    VFM_TRY(op_columns_get(&a->fshift, &a->fmod, 0));
    VFM_TRY(op_columns_get(&a->fscale, &a->fmod, c->hidden));
    VFM_TRY(op_layernorm_modulate_forward(&a->fxm, &a->fmean, &a->frstd, &a->h_final, &a->fshift, &a->fscale,
                                          &a->pl.t2s, c->f.block_ln_eps));
    return lin_fwd(m, out, NULL, &a->fxm, &m->final_out, ACT_NONE);
}

static vfm_status check_inputs(const DiT *m, const DiTInputs *in, int64_t *S, int64_t *L, int *B) {
    const DiTConfig *c = &m->cfg;
    *S = tensor_dim(in->x, 0);
    *L = c->f.cross_attn ? tensor_dim(in->text, 0) : 0;
    *B = (int)tensor_dim(in->c_noise, 0);
    if (tensor_dim(in->x, -1) != dit_token_dim(c))
        return vfm_fail(VFM_ERR_SHAPE, "dit_forward: tokens have %lld values, the model expects %d (C·p²·pt)",
                        (long long)tensor_dim(in->x, -1), dit_token_dim(c));
    if (c->f.cross_attn && tensor_dim(in->text, -1) != c->d_text)
        return vfm_fail(VFM_ERR_SHAPE, "dit_forward: text rows have %lld values, the model expects %d",
                        (long long)tensor_dim(in->text, -1), c->d_text);
    if (c->num_classes > 0 && (!in->class_labels || tensor_numel(in->class_labels) != *B))
        return vfm_fail(VFM_ERR_SHAPE, "dit_forward: the model is class-conditional (%d classes): it needs a class "
                        "label per sample", c->num_classes);
    if (!m->saved) return vfm_fail(VFM_ERR_INTERNAL, "dit_forward: call dit_reserve first");
    return VFM_OK;
}

/* The chunk's ends: [b0, b1) inside [0, L), an input hidden state exactly when it is not the
 * first chunk, an output one exactly when it is not the last; `h` names them (x/y or dy/dx). */
static vfm_status check_chunk(const DiT *m, int b0, int b1, const Tensor *h_in, const Tensor *h_out, const char *h) {
    int L = m->cfg.layers;
    if (b0 < 0 || b1 > L || b0 >= b1)
        return vfm_fail(VFM_ERR_INTERNAL, "dit chunk: blocks [%d, %d) of a %d-block model", b0, b1, L);
    for (int l = b0; l < b1; l++)
        if (m->block_local[l] < 0)
            return vfm_fail(VFM_ERR_INTERNAL, "dit chunk [%d, %d): block %d is on another pipeline stage", b0, b1, l);
    if ((b0 == 0) != (h_in == NULL) || (b1 == L) != (h_out == NULL))
        return vfm_fail(VFM_ERR_INTERNAL, "dit chunk [%d, %d): %s must be given exactly for an inner end", b0, b1, h);
    return VFM_OK;
}

vfm_status dit_hidden_rows(const DiT *m, const DiTInputs *in, int64_t *rows) {
    Placement pl;
    memset(&pl, 0, sizeof pl);
    vfm_status s = dit_place_plan(m, in, &pl);
    *rows = pl.Rl;
    dit_place_free(&pl);
    return s;
}

vfm_status dit_chunk_forward(DiT *m, DiTSaved *sv, const DiTInputs *in, int b0, int b1, const Tensor *x, Tensor *y,
                             Tensor *out) {
    int64_t S, L;
    int B;
    VFM_TRY(check_inputs(m, in, &S, &L, &B));
    VFM_TRY(check_chunk(m, b0, b1, x, y, "x/y"));
    if (!sv) sv = m->saved;
    Acts *a = &sv->a;
    int last = b1 == m->cfg.layers;
    sv->b1 = 0;
    dit_place_free(&a->pl);
    VFM_TRY(dit_place_plan(m, in, &a->pl));
    VFM_TRY(dit_saved_fit(m, sv));
    arena_rewind(&sv->arena, 0);
    size_t bytes;
    VFM_TRY(dit_carve_acts(m, &sv->arena, &bytes, a, L, B, b0, b1));
    VFM_TRY(dit_stage_inputs(m, a, &in, last ? out : NULL)); /* host inputs of a GPU model: their device copies */
    VFM_TRY(dit_place_inputs(m, a, in));
    m->running = sv;
    VFM_TRY(conditioning_forward(m, a, in));
    if (b0 == 0) VFM_TRY(patch_embedding_forward(m, a, &a->blocks[0].h0));
    else VFM_TRY(op_copy(&a->blocks[b0].h0, x));
    for (int l = b0; l < b1; l++) {
        Tensor *h_out = l + 1 < b1 ? &a->blocks[l + 1].h0 : last ? &a->h_final : y;
        VFM_TRY(dit_fsdp_forward_begin(m, l, l + 1 < b1 ? l + 1 : -1));
        VFM_TRY(block_forward(m, l, dit_block(m, l), &a->blocks[l], a, in, h_out));
        VFM_TRY(dit_fsdp_forward_end(m, l));
    }
    if (last) {
        VFM_TRY(final_layer_forward(m, a, a->pl.identity ? dit_stage_out(a, out) : &a->out_local));
        VFM_TRY(dit_stage_output(m, a, out));
        VFM_TRY(dit_gather_output(m, a, out));
    }
    m->running = NULL;
    sv->b0 = b0, sv->b1 = b1;
    return VFM_OK;
}

vfm_status dit_forward(DiT *m, const DiTInputs *in, Tensor *out) {
    return dit_chunk_forward(m, NULL, in, 0, m->cfg.layers, NULL, NULL, out);
}

/* ---- backward ------------------------------------------------------------------------- */

/* Gathers d(chunks) into d(mod) and runs the modulation backward; d(silu(c)) accumulates. */
static vfm_status modulation_backward(const DiT *m, const DiTBlockParams *p, const BlockActs *b, Acts *a) {
    const DiTConfig *c = &m->cfg;
    Tensor d_mod = V2(&a->d_mod, a->B, (int64_t)c->f.n_chunks * c->hidden);
    VFM_TRY(op_fill(&d_mod, 0.0));
    for (int k = 0; k < c->f.n_chunks; k++) VFM_TRY(op_columns_add(&d_mod, &a->d_chunk[k], (int64_t)k * c->hidden));
    if (p->ada_down.w < 0) return lin_bwd(m, &a->d_cond_silu, 1, &d_mod, &a->cond_silu, &p->ada_up, NULL, ACT_NONE);
    VFM_TRY(lin_bwd(m, &a->d_u, 0, &d_mod, &b->u, &p->ada_up, NULL, ACT_NONE));
    return lin_bwd(m, &a->d_cond_silu, 1, &a->d_u, &a->cond_silu, &p->ada_down, NULL, ACT_NONE);
}

/* Takes a->d_res = dL/d(block output) (this rank's rows) and leaves dL/d(block input) in it. */
static vfm_status block_backward(const DiT *m, int l, const DiTBlockParams *p, const BlockActs *b, Acts *a,
                                 const DiTInputs *in) {
    const DiTConfig *c = &m->cfg;
    int64_t R = a->R, L = a->L, hd = c->head_dim;
    const Tensor *t2s = &a->pl.t2s;
    int Hl = m->heads_local, Hkvl = m->kv_heads_local;
    Tensor dq = V2(&a->d_q, R, Hl * hd), dqn = V2(&a->d_qn, R, Hl * hd);
    int64_t Dkv = (int64_t)Hkvl * hd;
    Tensor dk = V2(&a->d_k, R, Dkv), dkn = V2(&a->d_kn, R, Dkv), dv = V2(&a->d_v, R, Dkv);
    Tensor xf, dpart;
    for (int k = 0; k < c->f.n_chunks; k++) VFM_TRY(op_fill(&a->d_chunk[k], 0.0));

    /* MLP */
    VFM_TRY(op_gated_residual_backward(NULL, &a->d_branch, &a->d_chunk[chunk_mlp(c, GATE)], &a->d_res, &b->mo,
                                       &b->chunk[chunk_mlp(c, GATE)], t2s));
    VFM_TRY(row_parallel_dout(m, a, &dpart));
    VFM_TRY(lin_bwd(m, &a->d_ffn, 0, &dpart, &b->f, &p->fc2, NULL, ACT_NONE));
    VFM_TRY(enter_region(m, a, &b->xm[2], &xf));
    VFM_TRY(lin_bwd(m, &a->d_xm_full, 0, &a->d_ffn, &xf, &p->fc1, &b->f_pre, c->f.mlp_act));
    VFM_TRY(leave_region_backward(m, a));
    VFM_TRY(op_layernorm_modulate_backward(&a->d_res, &a->d_chunk[chunk_mlp(c, SHIFT)],
                                           &a->d_chunk[chunk_mlp(c, SCALE)], &a->d_xm, &b->h2, &b->mean[2],
                                           &b->rstd[2], &b->chunk[chunk_mlp(c, SCALE)], t2s));
    probe(m, "d.mlp", l, &a->d_res);

    /* cross-attention (the text gets no gradient) */
    if (c->f.cross_attn) {
        VFM_TRY(op_gated_residual_backward(NULL, &a->d_branch, &a->d_chunk[chunk_ca(GATE)], &a->d_res, &b->c,
                                           &b->chunk[chunk_ca(GATE)], t2s));
        VFM_TRY(row_parallel_dout(m, a, &dpart));
        VFM_TRY(lin_bwd(m, &a->d_attn_o, 0, &dpart, &b->co, &p->ca_proj, NULL, ACT_NONE));
        VFM_TRY(attention_backward(m, a, 0, &dqn, &a->d_ckn, &a->d_cv, &a->d_attn_o, &b->cqn, &b->ckn, &b->cv, &b->co,
                                   &b->clse, R, L, Hl));
        VFM_TRY(head_norm_backward(m, &dq, &dqn, &b->cq, &b->cq_rstd, R, Hl, p->ca_qn));
        VFM_TRY(head_norm_backward(m, &a->d_ck, &a->d_ckn, &b->ck, &b->ck_rstd, L, Hl, p->ca_kn));
        VFM_TRY(lin_bwd(m, NULL, 0, &a->d_ck, in->text, &p->ca_k, NULL, ACT_NONE));
        VFM_TRY(lin_bwd(m, NULL, 0, &a->d_cv, in->text, &p->ca_v, NULL, ACT_NONE));
        VFM_TRY(enter_region(m, a, &b->xm[1], &xf));
        VFM_TRY(lin_bwd(m, &a->d_xm_full, 0, &dq, &xf, &p->ca_q, NULL, ACT_NONE));
        VFM_TRY(leave_region_backward(m, a));
        VFM_TRY(op_layernorm_modulate_backward(&a->d_res, &a->d_chunk[chunk_ca(SHIFT)], &a->d_chunk[chunk_ca(SCALE)],
                                               &a->d_xm, &b->h1, &b->mean[1], &b->rstd[1], &b->chunk[chunk_ca(SCALE)],
                                               t2s));
        probe(m, "d.cross_attn", l, &a->d_res);
    }

    /* self-attention */
    VFM_TRY(op_gated_residual_backward(NULL, &a->d_branch, &a->d_chunk[chunk_sa(GATE)], &a->d_res, &b->a,
                                       &b->chunk[chunk_sa(GATE)], t2s));
    VFM_TRY(row_parallel_dout(m, a, &dpart));
    VFM_TRY(lin_bwd(m, &a->d_attn_o, 0, &dpart, &b->o, &p->sa_proj, NULL, ACT_NONE));
    VFM_TRY(attention_backward(m, a, 1, &dqn, &dkn, &dv, &a->d_attn_o, &b->qn, &b->kn, &b->v, &b->o, &b->lse, R, R,
                               Hkvl));
    VFM_TRY(head_norm_backward(m, &dq, &dqn, &b->q, &b->q_rstd, R, Hl, p->sa_qn));
    VFM_TRY(head_norm_backward(m, &dk, &dkn, &b->k, &b->k_rstd, R, Hkvl, p->sa_kn));
    VFM_TRY(enter_region(m, a, &b->xm[0], &xf));
    VFM_TRY(lin_bwd(m, &a->d_xm_full, 0, &dq, &xf, &p->sa_q, NULL, ACT_NONE));
    VFM_TRY(lin_bwd(m, &a->d_xm_full, 1, &dk, &xf, &p->sa_k, NULL, ACT_NONE));
    VFM_TRY(lin_bwd(m, &a->d_xm_full, 1, &dv, &xf, &p->sa_v, NULL, ACT_NONE));
    VFM_TRY(leave_region_backward(m, a));
    VFM_TRY(op_layernorm_modulate_backward(&a->d_res, &a->d_chunk[chunk_sa(SHIFT)], &a->d_chunk[chunk_sa(SCALE)],
                                           &a->d_xm, &b->h0, &b->mean[0], &b->rstd[0], &b->chunk[chunk_sa(SCALE)], t2s));
    probe(m, "d.self_attn", l, &a->d_res);
    return modulation_backward(m, p, b, a);
}

/* From dout: d_res = dL/d(last block output); d(silu(c)) starts with the final layer's share. */
static vfm_status final_layer_backward(const DiT *m, Acts *a, const Tensor *dout) {
    const DiTConfig *c = &m->cfg;
    Tensor dy = *dout; /* linear_backward with ACT_NONE leaves dy untouched */
    if (!c->f.final_adaln) {
        VFM_TRY(lin_bwd(m, &a->d_res, 0, &dy, &a->h_final, &m->final_out, NULL, ACT_NONE));
        return op_fill(&a->d_cond_silu, 0.0);
    }
    Tensor d_fmod = V2(&a->d_mod, a->B, 2 * (int64_t)c->hidden);
    VFM_TRY(lin_bwd(m, &a->d_xm, 0, &dy, &a->fxm, &m->final_out, NULL, ACT_NONE));
    VFM_TRY(op_fill(&a->d_res, 0.0));
    VFM_TRY(op_fill(&a->d_chunk[SHIFT], 0.0));
    VFM_TRY(op_fill(&a->d_chunk[SCALE], 0.0));
    VFM_TRY(op_layernorm_modulate_backward(&a->d_res, &a->d_chunk[SHIFT], &a->d_chunk[SCALE], &a->d_xm, &a->h_final,
                                           &a->fmean, &a->frstd, &a->fscale, &a->pl.t2s));
    VFM_TRY(op_fill(&d_fmod, 0.0));
    VFM_TRY(op_columns_add(&d_fmod, &a->d_chunk[SHIFT], 0));
    VFM_TRY(op_columns_add(&d_fmod, &a->d_chunk[SCALE], c->hidden));
    return lin_bwd(m, &a->d_cond_silu, 0, &d_fmod, &a->cond_silu, &m->final_ada, NULL, ACT_NONE);
}

/* Patch embedding (the position embedding is fixed; the input gets no gradient). */
static vfm_status patch_embedding_backward(const DiT *m, Acts *a) {
    const Tensor *x = m->cfg.f.conv_patch ? &a->x_perm : &a->pl.x;
    return lin_bwd(m, NULL, 0, &a->d_res, x, &m->x_embed, NULL, ACT_NONE);
}

static vfm_status conditioning_backward(const DiT *m, Acts *a, const DiTInputs *in) {
    const DiTConfig *c = &m->cfg;
    VFM_TRY(op_silu_backward(&a->d_cond, &a->d_cond_silu, &a->cond));
    if (m->cond_norm_w >= 0) {
        Tensor w = P(m, m->cond_norm_w), dw = G(m, m->cond_norm_w);
        VFM_TRY(op_rmsnorm_backward(&a->d_cond_raw, &dw, &a->d_cond, &a->cond_raw, &a->cond_rstd, &w));
    }
    VFM_TRY(lin_bwd(m, &a->d_t1, 0, &a->d_cond_raw, &a->t1, &m->t_l2, NULL, ACT_NONE));
    VFM_TRY(op_silu_backward(&a->d_t1, &a->d_t1, &a->t1_pre));
    VFM_TRY(lin_bwd(m, NULL, 0, &a->d_t1, &a->t_in, &m->t_l1, NULL, ACT_NONE));
    if (c->f.fps_embedder) {
        VFM_TRY(op_columns_get(&a->d_f_emb, &a->d_cond_raw, 0));
        VFM_TRY(lin_bwd(m, &a->d_f1, 0, &a->d_f_emb, &a->f1, &m->f_l2, NULL, ACT_NONE));
        VFM_TRY(op_silu_backward(&a->d_f1, &a->d_f1, &a->f1_pre));
        VFM_TRY(lin_bwd(m, NULL, 0, &a->d_f1, &a->f_in, &m->f_l1, NULL, ACT_NONE));
    }
    if (m->y_table >= 0) {
        Tensor dtable = G(m, m->y_table);
        VFM_TRY(op_embedding_backward(&dtable, &a->d_cond_raw, in->class_labels));
    }
    return VFM_OK;
}

vfm_status dit_chunk_backward(DiT *m, DiTSaved *sv, const DiTInputs *in, int b0, int b1, const Tensor *dy,
                              Tensor *dx, const Tensor *dout) {
    VFM_TRY(check_chunk(m, b0, b1, dx, dy, "dx/dy"));
    if (!sv) sv = m->saved;
    Acts *a = sv ? &sv->a : NULL;
    if (!a || sv->b0 != b0 || sv->b1 != b1 || a->S != tensor_dim(in->x, 0))
        return vfm_fail(VFM_ERR_INTERNAL, "dit_backward without a matching forward");
    int last = b1 == m->cfg.layers;
    if (a->stage.on) { /* the forward staged these inputs: use its device copies */
        in = &a->stage.in;
        if (last) VFM_TRY(dit_stage_dout(m, a, &dout));
    }
    m->running = sv;
    if (last) {
        VFM_TRY(dit_scatter_dout(m, a, dout));
        VFM_TRY(dit_fsdp_grads_begin(m, m->head_first));
        VFM_TRY(final_layer_backward(m, a, a->pl.identity ? dout : &a->dout_local));
        VFM_TRY(dit_fsdp_grads_end(m, m->head_first));
        if (m->on_grads_final) m->on_grads_final(m->on_grads_final_ctx, m->head_first);
    } else {
        VFM_TRY(op_copy(&a->d_res, dy));
        VFM_TRY(op_fill(&a->d_cond_silu, 0.0));
    }
    for (int l = b1 - 1; l >= b0; l--) {
        const DiTBlockParams *p = dit_block(m, l);
        VFM_TRY(dit_fsdp_backward_begin(m, l, l > b0 ? l - 1 : -1));
        VFM_TRY(block_backward(m, l, p, &a->blocks[l], a, in));
        VFM_TRY(dit_fsdp_backward_end(m, l));
        if (m->on_grads_final) m->on_grads_final(m->on_grads_final_ctx, p->first_entry);
    }
    VFM_TRY(dit_fsdp_grads_begin(m, 0)); /* the embedders: every chunk adds its conditioning's share */
    if (b0 == 0) VFM_TRY(patch_embedding_backward(m, a));
    else VFM_TRY(op_copy(dx, &a->d_res));
    VFM_TRY(conditioning_backward(m, a, in));
    if (b0 == 0) VFM_TRY(dit_fsdp_grads_end(m, 0)); /* the first chunk's backward comes last */
    if (m->on_grads_final && b0 == 0) m->on_grads_final(m->on_grads_final_ctx, 0);
    m->running = NULL;
    return VFM_OK;
}

vfm_status dit_backward(DiT *m, const DiTInputs *in, const Tensor *dout) {
    return dit_chunk_backward(m, NULL, in, 0, m->cfg.layers, NULL, NULL, dout);
}
