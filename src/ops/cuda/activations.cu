// CUDA backend: pointwise activations GELU (erf and tanh forms), SiLU and SwiGLU, forward and
// backward, in f32 arithmetic on f32 or bf16 tensors (rounded once on the store). The GELU
// functions are also the linear op's epilogue where cuBLASLt's is not used (linear.cu).
#include "cuda_common.h"

#define GELU_SQRT_2_OVER_PI 0.79788456080286535588f
#define GELU_TANH_CUBIC 0.044715f
#define GELU_INV_SQRT2 0.70710678118654752440f
#define GELU_INV_SQRT_2PI 0.39894228040143267794f

__device__ __forceinline__ float gelu_value(float x, int kind) {
    if (kind == ACT_GELU_TANH) return 0.5f * x * (1.f + tanhf(GELU_SQRT_2_OVER_PI * (x + GELU_TANH_CUBIC * x * x * x)));
    return 0.5f * x * (1.f + erff(x * GELU_INV_SQRT2));
}

__device__ __forceinline__ float gelu_slope(float x, int kind) {
    if (kind == ACT_GELU_TANH) {
        float x2 = x * x;
        float t = tanhf(GELU_SQRT_2_OVER_PI * (x + GELU_TANH_CUBIC * x2 * x));
        float du = GELU_SQRT_2_OVER_PI * (1.f + 3.f * GELU_TANH_CUBIC * x2);
        return 0.5f * (1.f + t) + 0.5f * x * (1.f - t * t) * du;
    }
    float cdf = 0.5f * (1.f + erff(x * GELU_INV_SQRT2));
    float pdf = GELU_INV_SQRT_2PI * expf(-0.5f * x * x);
    return cdf + x * pdf;
}

__device__ __forceinline__ float sigmoid_f(float x) { return 1.f / (1.f + expf(-x)); }

template <typename T> __global__ void gelu_forward_kernel(T *y, const T *x, int64_t n, int kind) {
    GRID_STRIDE(i, n) y[i] = from_f32<T>(gelu_value(to_f32(x[i]), kind));
}

// dx may alias dy (the linear backward turns dy into dpre in place): same index read then written.
template <typename T> __global__ void gelu_backward_kernel(T *dx, const T *dy, const T *x, int64_t n, int kind) {
    GRID_STRIDE(i, n) dx[i] = from_f32<T>(to_f32(dy[i]) * gelu_slope(to_f32(x[i]), kind));
}

template <typename T> __global__ void silu_forward_kernel(T *y, const T *x, int64_t n) {
    GRID_STRIDE(i, n) {
        float v = to_f32(x[i]);
        y[i] = from_f32<T>(v * sigmoid_f(v));
    }
}

template <typename T> __global__ void silu_backward_kernel(T *dx, const T *dy, const T *x, int64_t n) {
    GRID_STRIDE(i, n) {
        float v = to_f32(x[i]), s = sigmoid_f(v);
        dx[i] = from_f32<T>(to_f32(dy[i]) * s * (1.f + v * (1.f - s)));
    }
}

// y[N,F] = silu(x[:, :F]) · x[:, F:]
template <typename T> __global__ void swiglu_forward_kernel(T *y, const T *x, int64_t rows, int64_t F) {
    GRID_STRIDE(i, rows * F) {
        int64_t r = i / F, j = i % F;
        float a = to_f32(x[r * 2 * F + j]), v = to_f32(x[r * 2 * F + F + j]);
        y[i] = from_f32<T>(a * sigmoid_f(a) * v);
    }
}

template <typename T> __global__ void swiglu_backward_kernel(T *dx, const T *dy, const T *x, int64_t rows, int64_t F) {
    GRID_STRIDE(i, rows * F) {
        int64_t r = i / F, j = i % F;
        float a = to_f32(x[r * 2 * F + j]), v = to_f32(x[r * 2 * F + F + j]), g = to_f32(dy[i]);
        float s = sigmoid_f(a);
        dx[r * 2 * F + j] = from_f32<T>(g * v * s * (1.f + a * (1.f - s)));
        dx[r * 2 * F + F + j] = from_f32<T>(g * a * s);
    }
}

extern "C" vfm_status cuda_gelu_forward(Tensor *y, const Tensor *x, Activation kind) {
    int64_t n = tensor_numel(x);
    if (n == 0) return VFM_OK;
    FLOAT_DISPATCH("gelu_forward", "x", x, T,
                   CUDA_LAUNCH(gelu_forward_kernel<T>, cuda_blocks(n), CUDA_THREADS, 0, (T *)y->data,
                               (const T *)x->data, n, (int)kind));
    return VFM_OK;
}

extern "C" vfm_status cuda_gelu_backward(Tensor *dx, const Tensor *dy, const Tensor *x, Activation kind) {
    int64_t n = tensor_numel(x);
    if (n == 0) return VFM_OK;
    FLOAT_DISPATCH("gelu_backward", "x", x, T,
                   CUDA_LAUNCH(gelu_backward_kernel<T>, cuda_blocks(n), CUDA_THREADS, 0, (T *)dx->data,
                               (const T *)dy->data, (const T *)x->data, n, (int)kind));
    return VFM_OK;
}

extern "C" vfm_status cuda_silu_forward(Tensor *y, const Tensor *x) {
    int64_t n = tensor_numel(x);
    if (n == 0) return VFM_OK;
    FLOAT_DISPATCH("silu_forward", "x", x, T,
                   CUDA_LAUNCH(silu_forward_kernel<T>, cuda_blocks(n), CUDA_THREADS, 0, (T *)y->data,
                               (const T *)x->data, n));
    return VFM_OK;
}

extern "C" vfm_status cuda_silu_backward(Tensor *dx, const Tensor *dy, const Tensor *x) {
    int64_t n = tensor_numel(x);
    if (n == 0) return VFM_OK;
    FLOAT_DISPATCH("silu_backward", "x", x, T,
                   CUDA_LAUNCH(silu_backward_kernel<T>, cuda_blocks(n), CUDA_THREADS, 0, (T *)dx->data,
                               (const T *)dy->data, (const T *)x->data, n));
    return VFM_OK;
}

extern "C" vfm_status cuda_swiglu_forward(Tensor *y, const Tensor *x) {
    int64_t rows = tensor_rows(y), F = tensor_dim(y, -1);
    if (rows * F == 0) return VFM_OK;
    FLOAT_DISPATCH("swiglu_forward", "x", x, T,
                   CUDA_LAUNCH(swiglu_forward_kernel<T>, cuda_blocks(rows * F), CUDA_THREADS, 0, (T *)y->data,
                               (const T *)x->data, rows, F));
    return VFM_OK;
}

extern "C" vfm_status cuda_swiglu_backward(Tensor *dx, const Tensor *dy, const Tensor *x) {
    int64_t rows = tensor_rows(dy), F = tensor_dim(dy, -1);
    if (rows * F == 0) return VFM_OK;
    FLOAT_DISPATCH("swiglu_backward", "x", x, T,
                   CUDA_LAUNCH(swiglu_backward_kernel<T>, cuda_blocks(rows * F), CUDA_THREADS, 0, (T *)dx->data,
                               (const T *)dy->data, (const T *)x->data, rows, F));
    return VFM_OK;
}
