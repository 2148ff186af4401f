/* dfm: DFM's cross-attention DiT (research/dfm.md §1.1–1.4), with the parameter names of
 * reference/model_torch.py. nemo-adaln (arch_nemo_adaln.c) is the same list of layers with a
 * full-rank modulation and a norm on the conditioning.
 *
 *   h = x_embedder(tokens) + sincos3d(t, h, w)
 *   c = t_embedder(c_noise) + pad(fps_embedder(fps)) [+ y_embedder(class)]
 *   every block: adaLN-LoRA (9 chunks; 6 without cross-attention), then
 *     self-attention (q, k, v; per-head RMSNorm on q and k), cross-attention to the text, MLP
 *     (erf-GELU), each on LN(h)·(1 + scale) + shift and added through its gate
 *   out = final_linear(h)
 * No biases in the blocks; Megatron's initialisation: N(0, std²) for input projections,
 * N(0, std²/2L) for output projections; modulation up-projections zero. */
#include <math.h>

#include "model/arch.h"
#include "model/block.h"

void dit_dfm_features(DiTConfig *c) {
    DiTFeatures *f = &c->f;
    f->mlp_act = ACT_GELU_ERF;
    f->self_qk_norm = f->cross_qk_norm = c->qk_norm;
    f->block_ln_eps = c->ln_eps;
    f->t_freq_dim = c->hidden;
    f->fps_embedder = 1;
    f->cross_attn = dit_cross_attention(c, 1);
    f->n_chunks = f->cross_attn ? 9 : 6;
    f->pos = dit_pos_embedding(c, DIT_POS_SINCOS_3D);
}

static void features(DiTConfig *c) { dit_dfm_features(c); }

void dit_dfm_conditioning(DiT *m) {
    const DiTConfig *c = &m->cfg;
    ParamTable *t = &m->table;
    int64_t D = c->hidden;
    ConditioningLayer *cl = &m->cond;
    timestep_embedder_add(&cl->t, t, "t_embedder.linear_1", "t_embedder.linear_2", c->f.t_freq_dim, D, 0, 0.0f, NULL);
    if (c->num_classes > 0)
        class_table_add(cl, t, "y_embedder.embedding_table.weight", c->num_classes + (c->class_dropout_prob > 0), D,
                        c->init_std);
    cl->has_fps = 1; /* diffusers' Timesteps(F, flip_sin_to_cos=False, downscale_freq_shift=1) */
    timestep_embedder_add(&cl->fps, t, "fps_embedder.linear_1", "fps_embedder.linear_2", c->fps_dim, c->fps_dim, 0,
                          1.0f, NULL);
    if (c->f.cond_norm) cond_norm_add(cl, t, "cond_norm.weight", D);
}

void dit_dfm_build(DiT *m) {
    const DiTConfig *c = &m->cfg;
    const DiTFeatures *f = &c->f;
    ParamTable *t = &m->table;
    int64_t D = c->hidden;
    float std = c->init_std, out_std = c->init_std / sqrtf(2.0f * (float)c->layers);

    patch_embed_add_linear(&m->patch, t, "x_embedder", D, dit_token_dim(c));
    m->patch.pos = f->pos;
    dit_dfm_conditioning(m);

    AttentionSpec self = {.self = 1, .kv_in = D, .kv_heads = c->kv_heads, .qk_norm = f->self_qk_norm,
                          .norm_eps = c->ln_eps, .in = linear_normal(std, 0), .out = linear_normal(out_std, 0)};
    AttentionSpec cross = self;
    cross.self = 0, cross.kv_in = c->d_text, cross.kv_heads = c->heads, cross.qk_norm = f->cross_qk_norm;
    MlpSpec mlp = {.ffn = c->ffn, .act = f->mlp_act, .in = linear_normal(std, 0), .out = linear_normal(out_std, 0)};
    mlp.moe = c->moe;
    float eps = f->block_ln_eps;
    for (int l = 0; l < c->layers; l++) {
        DiTBlock *b = &m->blocks[l];
        block_begin(b, t);
        if (f->adaln_full)
            modulation_add_full(&b->mod, t, block_name(l, "adaln.linear"), D, f->n_chunks, 0);
        else
            modulation_add_lora(&b->mod, t, block_name(l, "adaln.linear_1"), block_name(l, "adaln.linear_2"), D,
                                f->n_chunks, c->adaln_lora);
        attention_add(&block_add(b, MIXER_SELF_ATTENTION, eps)->attn, t, block_name(l, "self_attn"), D, c->head_dim,
                      &self);
        if (f->cross_attn)
            attention_add(&block_add(b, MIXER_CROSS_ATTENTION, eps)->attn, t, block_name(l, "cross_attn"), D,
                          c->head_dim, &cross);
        mlp_add(&block_add(b, MIXER_MLP, eps)->mlp, t, block_name(l, "mlp"), D, &mlp);
    }

    m->head_first = t->count;
    head_add_linear(&m->head, t, "final_linear", D, dit_out_dim(c));
}

const DiTArch dit_arch_dfm = {"dfm", DIT_VARIANT_DFM, features, dit_dfm_build};
