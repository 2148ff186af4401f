// CUDA backend: RMSNorm over a row split across ranks (ops.h op_rmsnorm_sumsq … _split_backward).
// One warp per row: row sums in f32 with a fixed butterfly (deterministic); the weight gradient is
// cuda_rmsnorm_backward's (norm.cu).
#include "cuda_common.h"

#define SPLIT_ROWS_PER_BLOCK 8  // warps per block, one row each

static inline unsigned split_row_blocks(int64_t rows) {
    return (unsigned)((rows + SPLIT_ROWS_PER_BLOCK - 1) / SPLIT_ROWS_PER_BLOCK);
}

// out[n] = Σ_j a[n,j]·b[n,j]·(w ? w[j] : 1) (a = b = x: the sum of squares)
template <typename T>
__global__ void row_dot_kernel(float *out, const T *a, const T *b, const T *w, int64_t N, int64_t d) {
    int64_t n = (int64_t)blockIdx.x * SPLIT_ROWS_PER_BLOCK + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (n >= N) return;
    float s = 0.f;
    for (int64_t j = lane; j < d; j += 32) {
        float v = to_f32(a[n * d + j]) * (w ? to_f32(w[j]) : 1.f);
        s += v * to_f32(b[n * d + j]);
    }
    s = warp_sum(s);
    if (lane == 0) out[n] = s;
}

template <typename T>
__global__ void split_forward_kernel(T *y, float *rstd, const T *x, const T *w, const float *sumsq, int64_t N,
                                     int64_t d, float n_total, float eps) {
    int64_t n = (int64_t)blockIdx.x * SPLIT_ROWS_PER_BLOCK + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (n >= N) return;
    float rs = 1.f / sqrtf(sumsq[n] / n_total + eps);
    __syncwarp();
    if (lane == 0) rstd[n] = rs; // rstd may be sumsq: every lane has read it
    for (int64_t j = lane; j < d; j += 32) y[n * d + j] = from_f32<T>(to_f32(x[n * d + j]) * rs * to_f32(w[j]));
}

template <typename T>
__global__ void split_dx_kernel(T *dx, const T *dy, const T *x, const float *rstd, const T *w, const float *dot,
                                int64_t N, int64_t d, float n_total) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N * d) return;
    int64_t n = i / d, j = i % d;
    float rs = rstd[n], c = rs * rs * dot[n] / n_total;
    dx[i] = from_f32<T>(rs * (to_f32(dy[i]) * to_f32(w[j]) - to_f32(x[i]) * c));
}


extern "C" vfm_status cuda_rmsnorm_sumsq(Tensor *sumsq, const Tensor *x) {
    int64_t N = x->shape[0], d = x->shape[1];
    if (N == 0) return VFM_OK;
    FLOAT_DISPATCH("rmsnorm_sumsq", "x", x, T,
                   CUDA_LAUNCH(row_dot_kernel<T>, split_row_blocks(N), 32 * SPLIT_ROWS_PER_BLOCK, 0,
                               (float *)sumsq->data, (const T *)x->data, (const T *)x->data, (const T *)NULL, N, d));
    return VFM_OK;
}

extern "C" vfm_status cuda_rmsnorm_split_forward(Tensor *y, Tensor *rstd, const Tensor *x, const Tensor *w,
                                                 const Tensor *sumsq, int64_t n, float eps) {
    int64_t N = x->shape[0], d = x->shape[1];
    if (N == 0) return VFM_OK;
    FLOAT_DISPATCH("rmsnorm_split_forward", "x", x, T,
                   CUDA_LAUNCH(split_forward_kernel<T>, split_row_blocks(N), 32 * SPLIT_ROWS_PER_BLOCK, 0,
                               (T *)y->data, (float *)rstd->data, (const T *)x->data, (const T *)w->data,
                               (const float *)sumsq->data, N, d, (float)n, eps));
    return VFM_OK;
}

extern "C" vfm_status cuda_rmsnorm_dot(Tensor *dot, const Tensor *dy, const Tensor *x, const Tensor *w) {
    int64_t N = x->shape[0], d = x->shape[1];
    if (N == 0) return VFM_OK;
    FLOAT_DISPATCH("rmsnorm_dot", "x", x, T,
                   CUDA_LAUNCH(row_dot_kernel<T>, split_row_blocks(N), 32 * SPLIT_ROWS_PER_BLOCK, 0,
                               (float *)dot->data, (const T *)dy->data, (const T *)x->data, (const T *)w->data, N, d));
    return VFM_OK;
}

extern "C" vfm_status cuda_rmsnorm_split_backward(Tensor *dx, Tensor *dw, const Tensor *dy, const Tensor *x,
                                                  const Tensor *rstd, const Tensor *w, const Tensor *dot, int64_t n) {
    const char *op = "rmsnorm_split_backward";
    int64_t N = x->shape[0], d = x->shape[1];
    if (N == 0) return VFM_OK;
    FLOAT_DISPATCH(op, "x", x, T, {
        if (dx)
            CUDA_LAUNCH(split_dx_kernel<T>, cuda_blocks(N * d), CUDA_THREADS, 0, (T *)dx->data, (const T *)dy->data,
                        (const T *)x->data, (const float *)rstd->data, (const T *)w->data, (const float *)dot->data, N,
                        d, (float)n);
    });
    /* dw = Σ_rows dy·x·rstd: op_rmsnorm_backward's weight gradient */
    return dw ? cuda_rmsnorm_backward(NULL, dw, dy, x, rstd, w) : VFM_OK;
}
