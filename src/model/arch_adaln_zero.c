/* adaln-zero: the original DiT (references.md B1–B4), tensor for tensor the reference's models.py
 * (facebookresearch/DiT), with its parameter names:
 *
 *   h = x_embedder.proj(tokens) (a conv weight [D, C, (pt,) p, p]) + sincos2d(h, w)
 *   c = t_embedder(c_noise) (256 features, [cos | sin]) [+ y_embedder(class), null class for CFG]
 *   every block: adaLN_modulation.1 (6 chunks, with bias), then
 *     attn (one fused qkv, with biases), [cross_attn to the text with QK-norm: 9 chunks,]
 *     mlp (tanh-GELU, with biases), each on LN(h)·(1 + scale) + shift (eps 1e-6) through its gate
 *   out = final_layer.linear(LN(h)·(1 + scale) + shift), (shift, scale) = final_layer.adaLN_modulation.1
 * Initialisation as the reference: xavier-uniform linears with zero biases, N(0, 0.02²) timestep
 * MLP and class table, zero modulation and output head. */
#include "model/arch.h"
#include "model/block.h"

static void features(DiTConfig *c) {
    DiTFeatures *f = &c->f;
    f->adaln_full = f->adaln_bias = 1;
    f->linear_bias = 1;
    f->fused_qkv = 1;
    f->mlp_act = ACT_GELU_TANH;
    f->cross_qk_norm = c->qk_norm;
    f->block_ln_eps = 1e-6f;
    f->t_freq_dim = 256;
    f->t_flip = 1;
    f->final_adaln = 1;
    f->conv_patch = 1;
    f->cross_attn = dit_cross_attention(c, 0);
    f->n_chunks = f->cross_attn ? 9 : 6;
    f->pos = dit_pos_embedding(c, DIT_POS_SINCOS_2D);
}

static void build(DiT *m) {
    const DiTConfig *c = &m->cfg;
    const DiTFeatures *f = &c->f;
    ParamTable *t = &m->table;
    int64_t D = c->hidden;

    patch_embed_add_conv(&m->patch, t, "x_embedder.proj", D, c->in_channels, c->patch_temporal, c->patch_spatial);
    m->patch.pos = f->pos;

    LinearSpec t_init = linear_normal(0.02f, 1);
    timestep_embedder_add(&m->cond.t, t, "t_embedder.mlp.0", "t_embedder.mlp.2", f->t_freq_dim, D, 1, 0.0f, &t_init);
    if (c->num_classes > 0)
        class_table_add(&m->cond, t, "y_embedder.embedding_table.weight", c->num_classes + (c->class_dropout_prob > 0),
                        D, 0.02f);

    AttentionSpec self = {.self = 1, .fused_qkv = 1, .kv_in = D, .kv_heads = c->kv_heads, .norm_eps = c->ln_eps,
                          .in = linear_xavier(1), .out = linear_xavier(1)};
    AttentionSpec cross = self;
    cross.self = 0, cross.fused_qkv = 0, cross.kv_in = c->d_text, cross.kv_heads = c->heads, cross.qk_norm = f->cross_qk_norm;
    MlpSpec mlp = {.ffn = c->ffn, .act = f->mlp_act, .in = linear_xavier(1), .out = linear_xavier(1)};
    mlp.moe = c->moe;
    float eps = f->block_ln_eps;
    for (int l = 0; l < c->layers; l++) {
        DiTBlock *b = &m->blocks[l];
        block_begin(b, t);
        modulation_add_full(&b->mod, t, block_name(l, "adaLN_modulation.1"), D, f->n_chunks, 1);
        attention_add(&block_add(b, MIXER_SELF_ATTENTION, eps)->attn, t, block_name(l, "attn"), D, c->head_dim, &self);
        if (f->cross_attn)
            attention_add(&block_add(b, MIXER_CROSS_ATTENTION, eps)->attn, t, block_name(l, "cross_attn"), D,
                          c->head_dim, &cross);
        mlp_add(&block_add(b, MIXER_MLP, eps)->mlp, t, block_name(l, "mlp"), D, &mlp);
    }

    m->head_first = t->count;
    head_add_adaln(&m->head, t, "final_layer.linear", "final_layer.adaLN_modulation.1", D, dit_out_dim(c), eps);
}

const DiTArch dit_arch_adaln_zero = {"adaln-zero", DIT_VARIANT_ADALN_ZERO, features, build};
