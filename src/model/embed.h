/* The patch embedding: each token (a patch of the latent, (ph pw pt C) with C fastest) through a
 * Linear to D, plus a fixed position embedding of its (t, h, w) grid place (docs/models.md):
 *   h0 = x·Wᵀ + b + pos(t, h, w)
 * The DiT reference keeps its weight as a convolution [D, C, (pt,) p, p]: the token's columns are
 * read in that weight's (C pt ph pw) order through a fixed permutation (perm), so the weight moves
 * to and from the reference unchanged. Parallel layout: replicated over TP, token-local (SP and CP
 * give each rank its own rows); under PP only the first stage holds it. */
#ifndef VFM_MODEL_EMBED_H
#define VFM_MODEL_EMBED_H

#include "model/layer.h"

/* LEARNED_3D: no position here; the blocks add the learned one (pos_learned.h).
 * ROPE_3D: nothing is added here; self-attention rotates q and k (Wan 2.1, attention.h). */
typedef enum {
    DIT_POS_AUTO = 0,
    DIT_POS_SINCOS_3D,
    DIT_POS_SINCOS_2D,
    DIT_POS_LEARNED_3D,
    DIT_POS_ROPE_3D
} DiTPosEmbedding;

typedef struct PatchEmbedLayer {
    Linear proj;
    int conv;             /* 1: a conv-layout weight read through perm */
    int32_t *perm;        /* [token_dim] on the model's device (conv): the token column of each weight column */
    DiTPosEmbedding pos;  /* resolved: 3-D or 2-D sin-cos, or learned (added by the blocks) */
} PatchEmbedLayer;

/* "<name>.weight" [D, token_dim] and "<name>.bias" (nn.Linear's initialisation). */
void patch_embed_add_linear(PatchEmbedLayer *pe, ParamTable *t, const char *name, int64_t D, int64_t token_dim);
/* "<name>.weight" [D, C, pt, p, p] ([D, C, p, p] when pt = 1; xavier-uniform) and "<name>.bias" (zero). */
void patch_embed_add_conv(PatchEmbedLayer *pe, ParamTable *t, const char *name, int64_t D, int64_t C, int64_t pt,
                          int64_t p);
/* nn.Conv3d's: "<name>.weight" [D, C, pt, p, p] (always 5-D) and "<name>.bias", U(±1/√(C·pt·p²)) both. */
void patch_embed_add_conv3d(PatchEmbedLayer *pe, ParamTable *t, const char *name, int64_t D, int64_t C, int64_t pt,
                            int64_t p);
void patch_embed_handles(PatchEmbedLayer *pe, const HandleVisitor *v);
/* pe->perm on the model's device (a conv layout; nothing otherwise). */
vfm_status patch_embed_setup(PatchEmbedLayer *pe, const struct DiTConfig *c, Device device);
void patch_embed_free(PatchEmbedLayer *pe, Device device);

/* h0[Rl, D] from this rank's tokens x[Rl, token_dim]; x_perm [Rl, token_dim] is the permuted copy (conv). */
vfm_status patch_embed_forward(const struct DiT *m, const PatchEmbedLayer *pe, Tensor *x_perm, const Tensor *x,
                               const Tensor *pos, const Tensor *t2s, Tensor *h0);
/* The weights' gradients from d(h0) (the input gets none; the position embedding is fixed). */
vfm_status patch_embed_backward(const struct DiT *m, const PatchEmbedLayer *pe, const Tensor *x_perm, const Tensor *x,
                                Tensor *d_h0);
double patch_embed_flops(const struct DiT *m, const PatchEmbedLayer *pe, const FlopShape *s);

#endif
