/* Flow matching (research/pp-fsdp-moe-moviegen.md §5, dfm.md §2.4) in DFM's convention: time σ
 * runs from 0 (data) to 1 (noise), x_σ = (1−σ)·x0 + σ·ε, and the network predicts the velocity
 * dx/dσ = ε − x0 with time input 1000·σ; loss = mean over real tokens of mean_c (F − (ε − x0))².
 * Training draws σ = sigmoid(n), n ~ N(p_mean, p_std²) (logit-normal), then the shift
 * σ' = sσ/(1 + (s−1)σ). Sampling integrates from σ = 1 to 0 with Euler steps
 * x ← x + (σ_{i+1} − σ_i)·v on MovieGen's linear-quadratic schedule (or a linear one), shifted the
 * same way. x0 is the data as stored (model.sigma_data is EDM's only). With Movie Gen's σ_min
 * (diffusion.flow_sigma_min, 1e-5 there; 0 by default) the path ends at σ_min·ε instead of 0:
 * x_σ = (1−σ)·x0 + (σ + σ_min(1−σ))·ε, target (1−σ_min)·ε − x0 — Movie Gen's X_t = t·X1 +
 * (1 − (1−σ_min)t)·X0 and V = X1 − (1−σ_min)·X0 with t = 1 − σ, X1 the data, X0 the noise, and the
 * network predicting −V (research/pp-fsdp-moe-moviegen.md §5). */
#ifndef VFM_FLOW_H
#define VFM_FLOW_H

#include "diffusion/objective.h"

/* σ' = sσ/(1 + (s−1)σ) (= s/(s + 1/σ − 1), DFM's form). */
double flow_shift_sigma(double sigma, double shift);
/* The shift of a sample of `tokens` tokens: flow_shift, or flow_shift·√(tokens/flow_shift_base). */
double flow_shift_for(const Objective *o, int64_t tokens);

/* The sampling times σ[0..n] from 1 to 0 before shifting: linear-quadratic (MovieGen: the first
 * n/2 steps linear up to t = τ = 0.025 in t = 1 − σ, then a quadratic reaching t = 1 with a
 * continuous slope; n < 2 falls back to linear) or linear. */
void flow_time_schedule(int n, int linear, double *sigma);

/* v = velocity at x for the per-sample times sigma[b] (b < n_samples). */
typedef vfm_status (*VelocityFn)(void *ctx, const Tensor *x, const double *sigma, Tensor *v);
/* Euler integration of x [S, C] (standard-normal noise on entry, the sample on return) for n
 * samples whose rows are [row_begin[b], row_begin[b+1]); shift[b] per sample; n_steps steps. */
vfm_status flow_euler_sample(int n_steps, int linear_schedule, int n_samples, const int64_t *row_begin,
                             const double *shift, VelocityFn velocity, void *ctx, Tensor *x,
                             void (*progress)(void *, int, int), void *progress_ctx);

#endif
