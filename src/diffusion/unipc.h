/* UniPC multistep for flow matching (Zhao et al. 2023, "UniPC: a unified predictor-corrector
 * framework"), the sampler Wan 2.1 ships (diffusers' UniPCMultistepScheduler with
 * prediction_type=flow_prediction, use_flow_sigmas, solver_type bh2, predict_x0, lower_order_final,
 * final sigma 0; docs/diffusion.md "UniPC"). In the flow convention α = 1 − σ, λ = ln α − ln σ, the
 * network's velocity v gives the data prediction m = x − σ·v; each step corrects the sample just
 * reached with the new m (UniC, order p) and then predicts the next one (UniP, order p) from the last
 * p data predictions, p = min(order, steps taken + 1, steps left).
 * Times: σ_i = shift(1 − i·(1 − 1/1000)/n), i < n, rounded to f32 as diffusers keeps them (σ_0 less
 * 1e-6 when it is 1), then 0; the network is called with σ = ⌊1000·σ_i⌋/1000, the integer timestep
 * Wan's pipeline feeds it. */
#ifndef VFM_UNIPC_H
#define VFM_UNIPC_H

#include "diffusion/flow.h"

enum { UNIPC_MAX_ORDER = 3 };

/* The times σ[0..n] for one shift (as above, unshifted when shift = 1). */
void unipc_sigmas(int n, double shift, double *sigma);
/* UniPC sampling of x [S, C] (standard-normal noise on entry, the sample on return) for n samples
 * whose rows are [row_begin[b], row_begin[b+1]); shift[b] per sample; order 1..3 (Wan: 2); bh2 = 1
 * for B(h) = e^h − 1 (Wan's), 0 for B(h) = h. */
vfm_status flow_unipc_sample(int n_steps, int order, int bh2, int n_samples, const int64_t *row_begin,
                             const double *shift, VelocityFn velocity, void *ctx, Tensor *x,
                             void (*progress)(void *, int, int), void *progress_ctx);

#endif
