/* The DFM DiT (research/dfm.md §1.1–1.4): patch embedding + fixed 3-D sin-cos position, timestep
 * and fps embeddings summed into a conditioning vector c per sample, L blocks of
 *   self-attention (per-head RMSNorm QK-norm) → cross-attention to the text → GELU MLP,
 * each pre-normed by one non-affine LayerNorm modulated per sample (adaLN-LoRA, 9 chunks) and
 * gated, then a plain final Linear. Built only from the op API; parameters in one named table.
 * One call handles one pack: tokens of several samples of any size, attention never crossing
 * samples, padding rows never read. */
#ifndef VFM_DIT_H
#define VFM_DIT_H

#include "core/arena.h"
#include "model/params.h"
#include "ops/ops.h"

typedef struct Config Config;

typedef struct DiTConfig {
    int hidden;        /* D */
    int layers;        /* L */
    int heads;         /* H */
    int kv_heads;      /* Hkv (grouped-query when < H) */
    int head_dim;      /* D / H */
    int ffn;           /* MLP width (4D by default) */
    int in_channels, out_channels;
    int patch_spatial, patch_temporal;
    int d_text;        /* width of the text embedding rows */
    int adaln_lora;    /* rank of the adaLN-LoRA bottleneck */
    int fps_dim;       /* width of the fps embedding (zero-padded to D) */
    int qk_norm;       /* per-head RMSNorm on q and k */
    float ln_eps;      /* LayerNorm and RMSNorm epsilon */
    float init_std;    /* N(0, std) for input projections; std/√(2L) for output projections */
} DiTConfig;

/* Reads model.* keys (after presets) into a DiTConfig; checks divisibility (heads | hidden, ...). */
vfm_status dit_config_from(DiTConfig *c, const Config *cfg);
int dit_token_dim(const DiTConfig *c);  /* C_in·p²·pt */
int dit_out_dim(const DiTConfig *c);    /* p²·pt·C_out */

/* Per-block parameter indices into the table, resolved by name once. */
typedef struct DiTBlockParams {
    int ada_l1, ada_l2;
    int sa_q, sa_k, sa_v, sa_qn, sa_kn, sa_proj;
    int ca_q, ca_k, ca_v, ca_qn, ca_kn, ca_proj;
    int fc1, fc2;
} DiTBlockParams;

typedef struct DiT {
    DiTConfig cfg;
    ParamTable table;
    Device device;
    float *params; /* [table.total] */
    float *grads;  /* [table.total], accumulated by dit_backward */
    int x_w, x_b, t_l1_w, t_l1_b, t_l2_w, t_l2_b, f_l1_w, f_l1_b, f_l2_w, f_l2_b, out_w, out_b;
    DiTBlockParams *blocks;
    Arena arena;   /* activations of the last forward */
    void *saved;   /* internal: the activation tensors of the last forward */
    /* Optional: called during dit_backward each time the gradients of every table entry with
     * index >= first_entry are complete (after the final layer, after each block, then with 0),
     * so data parallelism can reduce those buckets while backward goes on. */
    void (*on_grads_final)(void *ctx, int first_entry);
    void *on_grads_final_ctx;
} DiT;

/* Builds the table (names as reference/model_torch.py) and allocates params and grads (zero).
 * Call dit_init_weights or load weights next. */
vfm_status dit_create(DiT *m, const DiTConfig *cfg, Device device);
void dit_destroy(DiT *m);
/* Only the parameter table and block indices (no memory for weights): sizes and names of a
 * configuration, e.g. for `vfm model info`. Free with dit_destroy. */
void dit_describe(DiT *m, const DiTConfig *cfg);
/* DFM initialisation (§1.4), Philox-keyed by parameter name and seed. */
vfm_status dit_init_weights(DiT *m, uint64_t seed);
/* Reserves activation memory for packs of up to max_tokens rows, max_text rows and max_samples
 * samples (the trainer passes its pack budget). */
vfm_status dit_reserve(DiT *m, int64_t max_tokens, int64_t max_text, int max_samples);

/* One pack, on the model's device. */
typedef struct DiTInputs {
    const Tensor *x;          /* [S, token_dim] network input (c_in·x_t) */
    const Tensor *c_noise;    /* [B] timestep input per sample (EDM: ¼ ln σ) */
    const Tensor *fps;        /* [B] frames per second per sample */
    const Tensor *text;       /* [L, d_text] text context rows */
    const Tensor *tok2sample; /* [S] i32, -1 on padding rows */
    const Tensor *pos;        /* [S, 3] i32 (t, h, w) token grid position */
    VarlenLayout self_layout; /* tokens vs tokens */
    VarlenLayout cross_layout;/* tokens vs text rows */
    /* [B] i32 class label per sample for class-conditional variants (model.num_classes is the
     * null class: dropped or unlabelled); NULL when the model takes no class. */
    const Tensor *class_labels;
} DiTInputs;

/* out[S, out_dim] = F(x; c_noise, fps, text). Keeps the activations for dit_backward. */
vfm_status dit_forward(DiT *m, const DiTInputs *in, Tensor *out);
/* Accumulates parameter gradients (m->grads +=) for dout[S, out_dim] of the last forward.
 * The inputs must be those of that forward. */
vfm_status dit_backward(DiT *m, const DiTInputs *in, const Tensor *dout);

/* Matmul FLOPs of one forward over a pack (2 per multiply-add; attention included), from the
 * cumulative real token and text lengths cu_q[n+1], cu_text[n+1]. Padding rows are not counted. */
double dit_forward_flops(const DiTConfig *c, int n, const int32_t *cu_q, const int32_t *cu_text);

#endif
