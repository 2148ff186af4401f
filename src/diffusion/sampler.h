/* EDM's deterministic/stochastic Heun sampler (Karras et al. 2022, Algorithm 2) on a ρ-spaced σ
 * schedule: t_i = (σmax^(1/ρ) + i/(N−1)·(σmin^(1/ρ) − σmax^(1/ρ)))^ρ for i < N, t_N = 0.
 * The second-order correction evaluates the denoiser at (x_next, t_next) — DFM evaluates it at
 * (x_hat, t_hat) again (a bug, research/dfm.md §2.3); `dfm_heun_parity` reproduces that. */
#ifndef VFM_SAMPLER_H
#define VFM_SAMPLER_H

#include <stdint.h>

#include "core/tensor.h"

typedef struct SamplerConfig {
    int num_steps;                 /* N (35 in DFM, 18 in EDM's CIFAR setting) */
    double sigma_min, sigma_max;   /* 0.002, 80 */
    double rho;                    /* 7 */
    double s_churn, s_tmin, s_tmax, s_noise; /* stochasticity: 0, 0, inf, 1 = deterministic */
    int dfm_heun_parity;           /* 1: DFM's second evaluation at (x_hat, t_hat) */
    uint64_t seed;                 /* for churn noise */
    uint64_t uid;                  /* identity of what is sampled (churn noise key) */
} SamplerConfig;

void sampler_config_default(SamplerConfig *c);

/* denoised = D(x; sigma); x and denoised have the same shape. */
typedef vfm_status (*DenoiseFn)(void *ctx, const Tensor *x, double sigma, Tensor *denoised);
/* Called after each step i (1..N) with the total N. */
typedef void (*SamplerProgress)(void *ctx, int step, int total);

/* t[0..N]: the σ schedule, t[N] = 0. */
void edm_sigma_schedule(const SamplerConfig *c, double *t);
/* x (f32 CPU) holds standard-normal noise on entry and the sample on return; it is scaled by t_0
 * first. */
vfm_status edm_heun_sample(const SamplerConfig *c, DenoiseFn denoise, void *ctx, Tensor *x, SamplerProgress progress,
                           void *progress_ctx);

#endif
