/* CPU backend: the training step's scalars (ops.h "the training step's scalars"), in host memory,
 * with the arithmetic and order the CUDA kernels of src/ops/cuda/step.cu use. */
#include <math.h>

#include "real.h"

#include "ops/step_decide.h"

vfm_status CPU_FN(f64_accumulate)(Tensor *acc, int64_t at, const Tensor *x, int n) {
    const real *X = CRDATA(x);
    double v = (double)X[0];
    for (int i = 1; i < n; i++) v += (double)X[i];
    ((double *)acc->data)[at] += v;
    return VFM_OK;
}

vfm_status CPU_FN(sum_squares_into)(Tensor *acc, int64_t at, const Tensor *x) {
    double v = 0;
    VFM_TRY(CPU_FN(sum_squares)(&v, x));
    ((double *)acc->data)[at] = v;
    return VFM_OK;
}

vfm_status CPU_FN(f64_sum_into)(Tensor *dst, int64_t at, const Tensor *src, int64_t n) {
    const double *S = src->data;
    double total = 0;
    for (int64_t i = 0; i < n; i++) total += S[i];
    ((double *)dst->data)[at] = total;
    return VFM_OK;
}

vfm_status CPU_FN(f64_div)(Tensor *buf, int64_t at, double divisor) {
    ((double *)buf->data)[at] /= divisor;
    return VFM_OK;
}

vfm_status CPU_FN(step_decide)(Tensor *state, const StepDecideHyper *h) {
    step_decide(state->data, h);
    return VFM_OK;
}

vfm_status CPU_FN(ema_update_if)(Tensor *ema, const Tensor *param, double decay, const Tensor *step_state) {
    if (((const double *)step_state->data)[STEP_OK] == 0) return VFM_OK;
    return CPU_FN(ema_update)(ema, param, decay);
}
