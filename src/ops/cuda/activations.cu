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

// The pointwise kernels run over chunks of VEC(T) elements (cuda_common.h, "16-byte vector access"):
// 16-byte accesses where the tensors are aligned, the short last chunk element by element.
template <typename T> __global__ void gelu_forward_kernel(T *y, const T *x, int64_t n, int kind, int vec) {
    GRID_STRIDE(c, chunks_of<VEC(T)>(n)) map1_chunk(y, x, c, n, vec, [=](float v) { return gelu_value(v, kind); });
}

// dx may alias dy (the linear backward turns dy into dpre in place): same chunk read then written.
template <typename T> __global__ void gelu_backward_kernel(T *dx, const T *dy, const T *x, int64_t n, int kind, int vec) {
    GRID_STRIDE(c, chunks_of<VEC(T)>(n))
        map2_chunk(dx, dy, x, c, n, vec, [=](float g, float v) { return g * gelu_slope(v, kind); });
}

template <typename T> __global__ void silu_forward_kernel(T *y, const T *x, int64_t n, int vec) {
    GRID_STRIDE(c, chunks_of<VEC(T)>(n)) map1_chunk(y, x, c, n, vec, [](float v) { return v * sigmoid_f(v); });
}

template <typename T> __global__ void silu_backward_kernel(T *dx, const T *dy, const T *x, int64_t n, int vec) {
    GRID_STRIDE(c, chunks_of<VEC(T)>(n)) map2_chunk(dx, dy, x, c, n, vec, [](float g, float v) {
        float s = sigmoid_f(v);
        return g * s * (1.f + v * (1.f - s));
    });
}

// y[N,F] = silu(x[:, :F]) · x[:, F:], one warp per row (no division per element).
template <typename T> __global__ void swiglu_forward_kernel(T *y, const T *x, int64_t rows, int64_t F, int vec) {
    constexpr int W = VEC(T);
    const int64_t chunks = chunks_of<W>(F);
    ROW_STRIDE(r, rows) {
        const T *a_row = x + r * 2 * F, *v_row = a_row + F;
        LANE_CHUNKS(c, chunks) {
            T a[W], v[W];
            chunk_read<W>(a, a_row, c, F, vec);
            chunk_read<W>(v, v_row, c, F, vec);
            for (int k = 0; k < W; k++) {
                float af = to_f32(a[k]);
                a[k] = from_f32<T>(af * sigmoid_f(af) * to_f32(v[k]));
            }
            chunk_write<W>(y + r * F, a, c, F, vec);
        }
    }
}

template <typename T>
__global__ void swiglu_backward_kernel(T *dx, const T *dy, const T *x, int64_t rows, int64_t F, int vec) {
    constexpr int W = VEC(T);
    const int64_t chunks = chunks_of<W>(F);
    ROW_STRIDE(r, rows) {
        const T *a_row = x + r * 2 * F, *v_row = a_row + F;
        LANE_CHUNKS(c, chunks) {
            T a[W], v[W], g[W];
            chunk_read<W>(a, a_row, c, F, vec);
            chunk_read<W>(v, v_row, c, F, vec);
            chunk_read<W>(g, dy + r * F, c, F, vec);
            for (int k = 0; k < W; k++) {
                float af = to_f32(a[k]), vf = to_f32(v[k]), gf = to_f32(g[k]);
                float s = sigmoid_f(af);
                a[k] = from_f32<T>(gf * vf * s * (1.f + af * (1.f - s)));
                v[k] = from_f32<T>(gf * af * s);
            }
            chunk_write<W>(dx + r * 2 * F, a, c, F, vec);
            chunk_write<W>(dx + r * 2 * F + F, v, c, F, vec);
        }
    }
}

// A pointwise kernel over n elements: grid-stride over its chunks.
#define LAUNCH_CHUNKS(kernel, T, n, ...) \
    CUDA_LAUNCH(kernel<T>, cuda_blocks(chunks_of<VEC(T)>(n)), CUDA_THREADS, 0, __VA_ARGS__)

extern "C" vfm_status cuda_gelu_forward(Tensor *y, const Tensor *x, Activation kind) {
    int64_t n = tensor_numel(x);
    if (n == 0) return VFM_OK;
    FLOAT_DISPATCH("gelu_forward", "x", x, T,
                   LAUNCH_CHUNKS(gelu_forward_kernel, T, n, (T *)y->data, (const T *)x->data, n, (int)kind,
                                 vec_ok(y->data, x->data)));
    return VFM_OK;
}

extern "C" vfm_status cuda_gelu_backward(Tensor *dx, const Tensor *dy, const Tensor *x, Activation kind) {
    int64_t n = tensor_numel(x);
    if (n == 0) return VFM_OK;
    FLOAT_DISPATCH("gelu_backward", "x", x, T,
                   LAUNCH_CHUNKS(gelu_backward_kernel, T, n, (T *)dx->data, (const T *)dy->data, (const T *)x->data, n,
                                 (int)kind, vec_ok(dx->data, dy->data, x->data)));
    return VFM_OK;
}

extern "C" vfm_status cuda_silu_forward(Tensor *y, const Tensor *x) {
    int64_t n = tensor_numel(x);
    if (n == 0) return VFM_OK;
    FLOAT_DISPATCH("silu_forward", "x", x, T,
                   LAUNCH_CHUNKS(silu_forward_kernel, T, n, (T *)y->data, (const T *)x->data, n,
                                 vec_ok(y->data, x->data)));
    return VFM_OK;
}

extern "C" vfm_status cuda_silu_backward(Tensor *dx, const Tensor *dy, const Tensor *x) {
    int64_t n = tensor_numel(x);
    if (n == 0) return VFM_OK;
    FLOAT_DISPATCH("silu_backward", "x", x, T,
                   LAUNCH_CHUNKS(silu_backward_kernel, T, n, (T *)dx->data, (const T *)dy->data, (const T *)x->data, n,
                                 vec_ok(dx->data, dy->data, x->data)));
    return VFM_OK;
}

extern "C" vfm_status cuda_swiglu_forward(Tensor *y, const Tensor *x) {
    int64_t rows = tensor_rows(y), F = tensor_dim(y, -1);
    if (rows * F == 0) return VFM_OK;
    FLOAT_DISPATCH("swiglu_forward", "x", x, T,
                   CUDA_LAUNCH(swiglu_forward_kernel<T>, row_warp_grid(rows), row_warp_block(), 0, (T *)y->data,
                               (const T *)x->data, rows, F, vec_rows_ok<T>(F, y->data, x->data)));
    return VFM_OK;
}

extern "C" vfm_status cuda_swiglu_backward(Tensor *dx, const Tensor *dy, const Tensor *x) {
    int64_t rows = tensor_rows(dy), F = tensor_dim(dy, -1);
    if (rows * F == 0) return VFM_OK;
    FLOAT_DISPATCH("swiglu_backward", "x", x, T,
                   CUDA_LAUNCH(swiglu_backward_kernel<T>, row_warp_grid(rows), row_warp_block(), 0, (T *)dx->data,
                               (const T *)dy->data, (const T *)x->data, rows, F,
                               vec_rows_ok<T>(F, dx->data, dy->data, x->data)));
    return VFM_OK;
}
