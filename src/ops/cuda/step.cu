// CUDA backend: the training step's scalars (ops.h "the training step's scalars"): a pack's loss
// accumulated, the norm's partial sums added, the step's decision (finite? clip factor, AdamW's
// bias corrections) and the EMA that follows it, all on the GPU in single-thread kernels, so the
// host never waits inside a step. The arithmetic and its order are the CPU's (src/ops/cpu/step.c);
// pow in double may differ from glibc's by an ulp, which the f32 bias corrections do not see.
#include "cuda_common.h"
#include "ops/step_decide.h"

template <typename T> __global__ void f64_accumulate_kernel(double *acc, const T *x, int n) {
    double v = (double)to_f32(x[0]);
    for (int i = 1; i < n; i++) v += (double)to_f32(x[i]);
    *acc += v;
}

__global__ void f64_sum_kernel(double *dst, const double *src, int64_t n) {
    double total = 0;
    for (int64_t i = 0; i < n; i++) total += src[i];
    *dst = total;
}

__global__ void f64_div_kernel(double *x, double divisor) { *x = *x / divisor; }

__global__ void step_decide_kernel(double *S, StepDecideHyper h) { step_decide(S, &h); }

template <typename T>
__global__ void ema_if_kernel(T *E, const T *P, int64_t n, float d, float one_minus, const double *state, int vec) {
    if (state[STEP_OK] == 0) return;
    GRID_STRIDE(c, chunks_of<VEC(T)>(n))
        map2_chunk(E, E, P, c, n, vec, [=](float e, float p) { return ema_value(e, p, d, one_minus); });
}

extern "C" vfm_status cuda_f64_accumulate(Tensor *acc, int64_t at, const Tensor *x, int n) {
    FLOAT_DISPATCH("f64_accumulate", "x", x, T,
                   CUDA_LAUNCH(f64_accumulate_kernel<T>, 1, 1, 0, (double *)acc->data + at, (const T *)x->data, n));
    return VFM_OK;
}

extern "C" vfm_status cuda_f64_sum_into(Tensor *dst, int64_t at, const Tensor *src, int64_t n) {
    CUDA_LAUNCH(f64_sum_kernel, 1, 1, 0, (double *)dst->data + at, (const double *)src->data, n);
    return VFM_OK;
}

extern "C" vfm_status cuda_f64_div(Tensor *buf, int64_t at, double divisor) {
    CUDA_LAUNCH(f64_div_kernel, 1, 1, 0, (double *)buf->data + at, divisor);
    return VFM_OK;
}

extern "C" vfm_status cuda_step_decide(Tensor *state, const StepDecideHyper *h) {
    CUDA_LAUNCH(step_decide_kernel, 1, 1, 0, (double *)state->data, *h);
    return VFM_OK;
}

extern "C" vfm_status cuda_ema_update_if(Tensor *ema, const Tensor *param, double decay, const Tensor *step_state) {
    int64_t n = tensor_numel(ema);
    if (n == 0) return VFM_OK;
    float d = (float)decay, one_minus = (float)(1.0 - decay);
    FLOAT_DISPATCH("ema_update_if", "ema", ema, T,
                   CUDA_LAUNCH(ema_if_kernel<T>, cuda_blocks(chunks_of<VEC(T)>(n)), CUDA_THREADS, 0, (T *)ema->data,
                               (const T *)param->data, n, d, one_minus, (const double *)step_state->data,
                               vec_ok(ema->data, param->data)));
    return VFM_OK;
}
