/* wan: Wan 2.1 text-to-video, tensor for tensor diffusers' WanTransformer3DModel
 * (src/diffusers/models/transformers/transformer_wan.py), with its parameter names:
 *
 *   h = patch_embedding(tokens) (a Conv3d weight [D, C, 1, p, p]); no position is added
 *   c = time_embedder(c_noise) (256 features, [cos | sin]); proj = time_proj(silu(c)) [B, 6D]
 *   text = text_embedder(umT5 rows): Linear → GELU-tanh → Linear, read by every cross-attention
 *   every block: (shift, scale, gate, c_shift, c_scale, c_gate) = scale_shift_table + proj
 *     attn1: self-attention on LN(h)·(1 + scale) + shift through gate; q, k, v, to_out with biases,
 *            RMSNorm over all heads on q and k (norm_q, norm_k [D]), then 3-D RoPE on q and k
 *     attn2: cross-attention to the text on norm2(h) (an affine LayerNorm), plain residual
 *     ffn:   GELU-tanh MLP (net.0.proj, net.2) on LN(h)·(1 + c_scale) + c_shift through c_gate
 *   out = proj_out(LN(h)·(1 + scale) + shift), (shift, scale) = scale_shift_table [1, 2, D] + c
 * LayerNorms and RMSNorms use model.layernorm_epsilon (Wan: 1e-6). Initialisation as diffusers':
 * nn.Linear's and nn.Conv3d's defaults, the tables N(0, 1/D), norm weights 1 and biases 0. */
#include "model/arch.h"
#include "model/block.h"

static void features(DiTConfig *c) {
    DiTFeatures *f = &c->f;
    f->linear_bias = 1;
    f->mlp_act = ACT_GELU_TANH;
    f->self_qk_norm = f->cross_qk_norm = 1;
    f->block_ln_eps = c->ln_eps;
    f->t_freq_dim = 256;
    f->t_flip = 1;
    f->final_adaln = 1;
    f->conv_patch = 1;
    f->cross_attn = 1;
    f->n_chunks = 6;
    f->pos = DIT_POS_ROPE_3D;
    f->mod_table = 1;
}

static const AttentionNames NAMES = {"to_q", "to_k", "to_v", NULL, "to_out.0", "norm_q.weight", "norm_k.weight"};

static void build(DiT *m) {
    const DiTConfig *c = &m->cfg;
    ParamTable *t = &m->table;
    int64_t D = c->hidden;
    float eps = c->f.block_ln_eps;

    patch_embed_add_conv3d(&m->patch, t, "patch_embedding", D, c->in_channels, c->patch_temporal, c->patch_spatial);
    m->patch.pos = DIT_POS_ROPE_3D;

    ConditioningLayer *cl = &m->cond;
    timestep_embedder_add(&cl->t, t, "condition_embedder.time_embedder.linear_1",
                          "condition_embedder.time_embedder.linear_2", 256, D, 1, 0.0f, NULL);
    cond_proj_add(cl, t, "condition_embedder.time_proj", D, 6);
    text_mlp_add(cl, t, "condition_embedder.text_embedder.linear_1", "condition_embedder.text_embedder.linear_2",
                 c->d_text, D);

    AttentionSpec self = {.self = 1, .kv_in = D, .kv_heads = c->heads, .qk_norm = 1, .qk_norm_all = 1, .rope = 1,
                          .names = &NAMES, .norm_eps = eps, .in = linear_torch_default(D, 0),
                          .out = linear_torch_default(D, 0)};
    AttentionSpec cross = self;
    cross.self = 0, cross.rope = 0, cross.text_embedded = 1;
    MlpSpec mlp = {.ffn = c->ffn, .act = ACT_GELU_TANH, .in = linear_torch_default(D, 0),
                   .out = linear_torch_default(c->ffn, 0), .fc1_name = "net.0.proj", .fc2_name = "net.2"};
    mlp.moe = c->moe; /* model.num_moe_experts: experts in the ffn slot (not Wan's own; no diffusers export) */
    for (int l = 0; l < c->layers; l++) {
        DiTBlock *b = &m->blocks[l];
        block_begin(b, t);
        modulation_add_table(&b->mod, t, block_name(l, "scale_shift_table"), D, 6);
        attention_add(&block_add(b, MIXER_SELF_ATTENTION, eps)->attn, t, block_name(l, "attn1"), D, c->head_dim, &self);
        SubLayer *ca = block_add(b, MIXER_CROSS_ATTENTION, eps);
        attention_add(&ca->attn, t, block_name(l, "attn2"), D, c->head_dim, &cross);
        block_affine_norm(ca, t, block_name(l, "norm2"), D);
        SubLayer *ffn = block_add(b, MIXER_MLP, eps);
        ffn->shift = 3, ffn->scale = 4, ffn->gate = 5; /* the cross-attention takes no chunks */
        mlp_add(&ffn->mlp, t, block_name(l, "ffn"), D, &mlp);
    }

    m->head_first = t->count;
    head_add_table(&m->head, t, "proj_out", "scale_shift_table", D, dit_out_dim(c), eps);
}

const DiTArch dit_arch_wan = {"wan", DIT_VARIANT_WAN, features, build};
