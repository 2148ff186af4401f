/* CPU backend: one AdamW step (torch.optim.AdamW semantics) over a flat tensor. */
#include "real.h"

/* param, m, v, grad: flat tensors of the same element count.
 * Scalars are formed in double as torch forms them in Python, then applied in `real`:
 *   g = grad_scale·grad; p ← p·(1 − lr·wd) (only when wd ≠ 0); m ← β1·m + (1−β1)·g;
 *   v ← β2·v + (1−β2)·g²; p ← p − (lr/(1−β1^t))·m / (√v/√(1−β2^t) + eps),
 * evaluated in torch's order (step_size·m first, then the division). With h->step_state the scale,
 * the bias corrections and whether to update at all come from the step's state. */
vfm_status CPU_FN(adamw_step)(Tensor *param, Tensor *m, Tensor *v, const Tensor *grad, const AdamWHyper *h) {
    int64_t n = tensor_numel(param);
    real *P = RDATA(param), *M = RDATA(m), *V = RDATA(v);
    const real *G = CRDATA(grad);
    double lr = h->lr, beta1 = h->beta1, beta2 = h->beta2;
    int decay = h->weight_decay != 0;
    real keep = (real)(1.0 - lr * (double)h->weight_decay);
    real b1 = (real)beta1, one_minus_b1 = (real)(1.0 - beta1);
    real b2 = (real)beta2, one_minus_b2 = (real)(1.0 - beta2);
    real step_size = (real)(lr / (1.0 - pow(beta1, h->step)));
    real bc2_sqrt = (real)sqrt(1.0 - pow(beta2, h->step));
    real eps = (real)h->eps, scale = (real)h->grad_scale;
    if (h->step_state) { /* the step's decision, made on the device (op_step_decide): the same values */
        const double *S = h->step_state->data;
        if (S[STEP_OK] == 0) return VFM_OK;
        step_size = (real)S[STEP_STEP_SIZE];
        bc2_sqrt = (real)S[STEP_BC2_SQRT];
        scale = (real)(float)S[STEP_SCALE];
    }
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
        real g = scale * G[i];
        real p = decay ? P[i] * keep : P[i];
        real mi = b1 * M[i] + one_minus_b1 * g;
        real vi = b2 * V[i] + one_minus_b2 * g * g;
        M[i] = mi;
        V[i] = vi;
        P[i] = p - step_size * mi / (sqrt(vi) / bc2_sqrt + eps);
    }
    return VFM_OK;
}
