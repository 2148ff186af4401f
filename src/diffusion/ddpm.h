/* DDPM as the DiT paper trains and samples it (research/references.md B6–B7; Nichol & Dhariwal's
 * improved DDPM): β linear from 1e-4 to 0.02 over T = 1000 steps (float64), t ~ U{0…T−1},
 * x_t = √ᾱ_t·x0 + √(1−ᾱ_t)·ε, the network sees x_t and the timestep index t and predicts ε.
 * With a 2×-channel output (model.learn_sigma; channels C..2C−1 of each position hold v) the
 * variance is learned in the range [β̃_t, β_t] (log σ² = f·log β_t + (1−f)·log β̃_t, f = (v+1)/2) and
 * the loss adds the variational-bound term (ops.h op_ddpm_vb_forward) to the ε MSE, unscaled
 * ("MSE" loss type); otherwise the variance is fixed (β_t, "fixed large") and the loss is the MSE.
 * Sampling respaces the chain to N steps (the DiT/iDDPM `space_timesteps` rule) and runs DDPM
 * ancestral steps or deterministic DDIM (η = 0). */
#ifndef VFM_DDPM_H
#define VFM_DDPM_H

#include "diffusion/objective.h"

/* A (possibly respaced) chain of n steps: step i is the original timestep timestep[i]. */
typedef struct DdpmChain {
    int n;
    int timestep[DDPM_NUM_TIMESTEPS];
    double beta[DDPM_NUM_TIMESTEPS];
    double alpha_bar[DDPM_NUM_TIMESTEPS];
} DdpmChain;

/* The full 1000-step chain (steps = 0 or 1000) or the chain respaced to `steps` evenly strided
 * timesteps (round(i·(T−1)/(steps−1)) with Python's accumulation and rounding), β re-derived as
 * 1 − ᾱ_{t_i}/ᾱ_{t_{i−1}} and ᾱ recomputed as the product of 1 − β (as respace.py does). */
vfm_status ddpm_chain_init(DdpmChain *c, int steps);
/* Posterior / VB coefficients of step i (layout: ops.h DDPM_VB_*). */
void ddpm_vb_coef(const DdpmChain *c, int i, double coef[DDPM_VB_NCOEF]);

/* ε (and v when the model learns the variance; v NULL otherwise) at x for original timestep t. */
typedef vfm_status (*EpsFn)(void *ctx, const Tensor *x, int timestep, Tensor *eps, Tensor *v);
/* Noise z for step i (standard normal, keyed by the caller's sample identities). */
typedef vfm_status (*StepNoiseFn)(void *ctx, int step, Tensor *z);
/* Reverse process on x (standard-normal noise on entry, the sample on return) over the chain
 * respaced to n_steps (>= 2). ddim: deterministic DDIM (η = 0); otherwise ancestral DDPM steps
 * with noise from `noise` (no noise at the last step). learned: the model gives v. */
vfm_status ddpm_reverse_sample(int n_steps, int ddim, int learned, EpsFn eps_fn, StepNoiseFn noise, void *ctx,
                               Tensor *x, void (*progress)(void *, int, int), void *progress_ctx);

#endif
