/* EDM training objective (research/dfm.md §2.1, Karras et al. 2022) over one pack:
 *   x0 = σ_data·latent, ln σ ~ N(P_mean, P_std²) per sample, x_t = x0 + σ·ε,
 *   F = net(c_in·x_t; c_noise = ¼ ln σ, fps, text), D = c_skip·x_t + c_out·F,
 *   loss = mean over real tokens of w(σ)·mean_c (D − x0)², w = (σ²+σ_d²)/(σ·σ_d)².
 * σ, the CFG drop coin and ε are drawn per sample from the keyed Philox streams (design §3): a
 * pure function of (seed, step, sample uid, element), so packing, parallel layout and resume do
 * not change them. A dropped prompt becomes one all-zero text row. */
#ifndef VFM_EDM_H
#define VFM_EDM_H

#include <stdint.h>

#include "data/pack.h"
#include "model/dit.h"

typedef struct EdmConfig {
    float sigma_data;   /* 0.5 */
    float p_mean, p_std;/* DFM (0, 1); EDM paper (-1.2, 1.2) */
    float cfg_dropout;  /* probability the text is dropped for a sample (0.2) */
    int sigma_per_pack; /* DFM parity: one σ and one coin per pack (from its first sample) */
    uint64_t seed;
} EdmConfig;

vfm_status edm_config_from(EdmConfig *e, const Config *cfg);

/* The per-sample draws (exposed for tests). */
float edm_draw_sigma(const EdmConfig *e, uint32_t step, uint64_t uid);
int edm_draw_cfg_drop(const EdmConfig *e, uint32_t step, uint64_t uid);

typedef struct EdmStepResult {
    double loss;         /* the pack's loss (mean over its real tokens) */
    int n_samples;
    double *sample_loss; /* [n] each sample's own loss (mean over its tokens), owned by the caller or NULL */
    float *sigma;        /* [n] σ per sample, or NULL */
    int *dropped;        /* [n] 1 when the sample's text was dropped, or NULL */
    float *F;            /* [S, C] the network output, or NULL */
} EdmStepResult;

/* The random inputs of one step: σ and the CFG coin per sample, ε per element in token layout. */
typedef struct EdmDraws {
    float *sigma;  /* [B] */
    int *drop;     /* [B] */
    float *noise;  /* [S, token_dim], zero on padding rows */
    int32_t *class_row; /* [B] class-table row (dit_class_row: label or null class after the CFG coin),
                         * NULL for models without classes */
} EdmDraws;

/* The loss (and gradient) with given draws instead of the keyed RNG (golden tests, invariance tests). */
vfm_status edm_loss_and_grad_given(DiT *model, float sigma_data, const Pack *pack, const EdmDraws *draws,
                                   double grad_scale, EdmStepResult *res);
vfm_status edm_loss_given(DiT *model, float sigma_data, const Pack *pack, const EdmDraws *draws, EdmStepResult *res);

/* Forward and backward of the EDM loss for one pack at training step `step`: adds
 * grad_scale·∂loss/∂θ into model->grads (grad_scale = 1/micro-batches so accumulated gradients
 * average). res->loss is the unscaled pack loss. */
vfm_status edm_loss_and_grad(DiT *model, const EdmConfig *e, const Pack *pack, uint32_t step, double grad_scale,
                             EdmStepResult *res);
/* The same loss without the backward (evaluation). */
vfm_status edm_loss(DiT *model, const EdmConfig *e, const Pack *pack, uint32_t step, EdmStepResult *res);

/* Standard-normal noise for every real element of a pack, in token layout [S, token_dim] (zero on
 * padding rows): each sample's noise is drawn in its canonical latent layout (C, T, H, W) keyed by
 * its uid, then patchified. */
vfm_status edm_pack_noise(float *noise, const Pack *pack, const DiTConfig *mc, uint64_t seed, uint32_t stream,
                          uint32_t step);

#endif
