/* Generation with a trained DiT: sampling of one or more latents at once with classifier-free
 * guidance, by the sampler of the objective the model was trained with: EDM Heun (sampler.h),
 * flow-matching Euler (flow.h), or respaced DDPM / DDIM (ddpm.h). Conditional and unconditional
 * evaluations of every sample run in one pack (the null prompt is one all-zero text row, the null
 * class is num_classes), so a step costs one forward of 2n samples. */
#ifndef VFM_GENERATE_H
#define VFM_GENERATE_H

#include <stdint.h>

#include "diffusion/objective.h"
#include "diffusion/sampler.h"
#include "model/dit.h"

typedef struct GenerateSample {
    int32_t latent_shape[4]; /* C, T, H, W */
    const float *text;       /* [text_rows, d_text]; NULL or 0 rows: the null prompt */
    int text_rows;
    float fps;
    uint64_t uid;            /* identity of the noise */
    int32_t class_label;     /* for class-conditional models: the class (< 0: the null class) */
} GenerateSample;

typedef struct GenerateOptions {
    /* The objective the model was trained with (its kind, σ_data, flow shift, classes); NULL: EDM
     * with sigma_data below. */
    const Objective *objective;
    SamplerConfig sampler;  /* num_steps for every sampler; the σ range, ρ, churn and Heun parity for EDM */
    int ddim;               /* ddpm: deterministic DDIM (η = 0) instead of ancestral DDPM steps */
    int flow_linear;        /* flow: a linear time schedule instead of the linear-quadratic one */
    int flow_unipc;         /* flow: UniPC multistep (unipc.h) of order unipc_order instead of Euler */
    int unipc_order;
    /* DFM's guidance g: pred = pred_c + g·(pred_c − pred_u), i.e. w = 1 + g in the usual
     * pred_u + w·(pred_c − pred_u), applied to D (EDM), the velocity (flow) or ε (ddpm; the
     * learned variance comes from the conditional half, as in DiT). DFM samples with g = 7;
     * DiT's cfg-scale s is g = s − 1. g = 0 evaluates the conditional model only. */
    double guidance;
    float sigma_data;       /* EDM when objective is NULL */
    uint64_t seed;
    SamplerProgress progress;
    void *progress_ctx;
    /* The network's forward (NULL: dit_forward): under pipeline parallelism the trainer's validation
     * passes one that runs the chunks over the stages and gives every stage the output. */
    vfm_status (*forward)(void *ctx, DiT *model, const DiTInputs *in, Tensor *out);
    void *forward_ctx;
} GenerateOptions;

/* latents[i] (caller-allocated, C·T·H·W floats each) receives sample i in the data's latent
 * units (EDM: x0 / sigma_data). */
vfm_status generate_latents(DiT *model, const GenerateOptions *opt, const GenerateSample *samples, int n,
                            float **latents);

#endif
