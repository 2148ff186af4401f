/* Generation with a trained DiT: EDM Heun sampling of one or more latents at once, with
 * classifier-free guidance. Conditional and unconditional evaluations of every sample run in one
 * pack (the null prompt is one all-zero text row), so a step costs one forward of 2n samples. */
#ifndef VFM_GENERATE_H
#define VFM_GENERATE_H

#include <stdint.h>

#include "diffusion/sampler.h"
#include "model/dit.h"

typedef struct GenerateSample {
    int32_t latent_shape[4]; /* C, T, H, W */
    const float *text;       /* [text_rows, d_text]; NULL or 0 rows: the null prompt */
    int text_rows;
    float fps;
    uint64_t uid;            /* identity of the initial noise */
} GenerateSample;

typedef struct GenerateOptions {
    SamplerConfig sampler;
    /* DFM's guidance g: D = D_c + g·(D_c − D_u), i.e. w = 1 + g in the usual D_u + w·(D_c − D_u);
     * DFM samples with g = 7 (w = 8). g = 0 evaluates the conditional model only. */
    double guidance;
    float sigma_data;
    uint64_t seed;
    SamplerProgress progress;
    void *progress_ctx;
} GenerateOptions;

/* latents[i] (caller-allocated, C·T·H·W floats each) receives sample i in the data's latent
 * units (x0 / sigma_data). */
vfm_status generate_latents(DiT *model, const GenerateOptions *opt, const GenerateSample *samples, int n,
                            float **latents);

#endif
