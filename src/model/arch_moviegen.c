/* moviegen: MovieGen as NeMo builds it (nemo/collections/diffusion/models/dit_llama: MoviegGenLayer,
 * DiTLlama30BConfig; research/pp-fsdp-moe-moviegen.md §4), with vfm's parameter names:
 *
 *   h = x_embedder(tokens)                                 (no position here)
 *   c = RMSNorm(t_embedder(c_noise) + pad(fps_embedder(fps)) [+ y_embedder(class)])   (eps 1e-6)
 *   every block: h = h + pos_embedder(t, h, w)             (E_t[t] + E_h[h] + E_w[w], learned)
 *     six chunks = adaln.linear(silu(c))                   (one Linear(D → 6D), no bias, zero)
 *     h = h + gate_sa ⊙ self_attn(N(h)·(1 + scale_sa) + shift_sa)      (GQA, no QK-norm)
 *     a = cross_attn(h, text)                              (no norm, modulation or residual)
 *     h = h + gate_mlp ⊙ mlp(N(a)·(1 + scale_mlp) + shift_mlp)         (SwiGLU)
 *   N = RMSNorm with one learnable weight per block (adaln.norm.weight, eps model.layernorm_epsilon
 *   1e-5), shared by both norms as NeMo's AdaLN.ln; out = final_linear(h).
 * Biases as NeMo's spec: the x- and t-embedders and the final Linear have them, attention and MLP
 * do not. Megatron's initialisation with model.init_method_std (MovieGen: 0.01): N(0, std²) for
 * q, k, v, fc1 and the position tables, N(0, std²/2L) for proj and fc2; nn.Linear's for the
 * embedders and the final Linear. The cross-attention is multi-head (NeMo's mcore CrossAttention has
 * no GQA); its k and v read the text rows (model.crossattn_emb_size wide; the presets make it D, as
 * NeMo, whose context must be D wide, and as Movie Gen, which projects its text encoders to D).
 * With model.cross_attention=false the MLP normalises h. */
#include <math.h>

#include "model/arch.h"
#include "model/block.h"

static void features(DiTConfig *c) {
    DiTFeatures *f = &c->f;
    f->adaln_full = 1;
    f->cond_norm = 1;
    f->fps_embedder = 1;
    f->t_freq_dim = c->hidden;
    f->block_ln_eps = c->ln_eps;
    f->swiglu = 1;
    f->block_rms = 1;
    f->cross_attn = dit_cross_attention(c, 1);
    f->cross_feeds_mlp = f->cross_attn;
    f->n_chunks = 6;
    f->pos = dit_pos_embedding(c, DIT_POS_LEARNED_3D);
}

static void build(DiT *m) {
    const DiTConfig *c = &m->cfg;
    const DiTFeatures *f = &c->f;
    ParamTable *t = &m->table;
    int64_t D = c->hidden;
    float std = c->init_std, out_std = c->init_std / sqrtf(2.0f * (float)c->layers);

    patch_embed_add_linear(&m->patch, t, "x_embedder", D, dit_token_dim(c));
    m->patch.pos = f->pos;
    if (f->pos == DIT_POS_LEARNED_3D) pos_learned_add(&m->pos, t, "pos_embedder", c->pos_rows, D, std);
    dit_dfm_conditioning(m);

    AttentionSpec self = {.self = 1, .kv_in = D, .kv_heads = c->kv_heads, .norm_eps = c->ln_eps,
                          .in = linear_normal(std, 0), .out = linear_normal(out_std, 0)};
    AttentionSpec cross = self;
    cross.self = 0, cross.kv_in = c->d_text, cross.kv_heads = c->heads;
    MlpSpec mlp = {.ffn = c->ffn, .swiglu = 1, .in = linear_normal(std, 0), .out = linear_normal(out_std, 0)};
    mlp.moe = c->moe; /* model.num_moe_experts: SwiGLU experts in the MLP slot (ECDiT, the ecdit-1b preset) */
    float eps = f->block_ln_eps;
    for (int l = 0; l < c->layers; l++) {
        DiTBlock *b = &m->blocks[l];
        block_begin(b, t);
        b->add_pos = m->pos.on;
        modulation_add_full(&b->mod, t, block_name(l, "adaln.linear"), D, f->n_chunks, 0);
        block_norm_add(b, t, block_name(l, "adaln.norm.weight"), D);
        attention_add(&block_add_rms(b, MIXER_SELF_ATTENTION, eps)->attn, t, block_name(l, "self_attn"), D,
                      c->head_dim, &self);
        if (f->cross_attn)
            attention_add(&block_add_feeding(b, MIXER_CROSS_ATTENTION)->attn, t, block_name(l, "cross_attn"), D,
                          c->head_dim, &cross);
        mlp_add(&block_add_rms(b, MIXER_MLP, eps)->mlp, t, block_name(l, "mlp"), D, &mlp);
    }

    m->head_first = t->count;
    head_add_linear(&m->head, t, "final_linear", D, dit_out_dim(c));
}

const DiTArch dit_arch_moviegen = {"moviegen", DIT_VARIANT_MOVIEGEN, features, build};
