// CUDA backend: fill, convert (f32 <-> bf16), add, scale, axpy, EMA and column blocks. f32 results
// use the CPU's expressions with explicitly rounded operations (no fused multiply-add), so f32
// tensors get the same bits as the CPU backend; bf16 tensors compute in f32 and round once.
#include "cuda_common.h"

template <typename T> __global__ void fill_kernel(T *x, int64_t n, float v) {
    GRID_STRIDE(i, n) x[i] = from_f32<T>(v);
}

__global__ void f32_to_bf16_kernel(bf16 *dst, const float *src, int64_t n) {
    GRID_STRIDE(i, n) dst[i] = __float2bfloat16_rn(src[i]);
}

__global__ void bf16_to_f32_kernel(float *dst, const bf16 *src, int64_t n) {
    GRID_STRIDE(i, n) dst[i] = __bfloat162float(src[i]);
}

template <typename T> __global__ void add_kernel(T *out, const T *a, const T *b, int64_t n) {
    GRID_STRIDE(i, n) out[i] = from_f32<T>(__fadd_rn(to_f32(a[i]), to_f32(b[i])));
}

template <typename T> __global__ void scale_kernel(T *x, int64_t n, float alpha) {
    GRID_STRIDE(i, n) x[i] = from_f32<T>(__fmul_rn(to_f32(x[i]), alpha));
}

// y += alpha·x
template <typename T> __global__ void axpy_kernel(T *y, const T *x, int64_t n, float alpha) {
    GRID_STRIDE(i, n) y[i] = from_f32<T>(__fadd_rn(to_f32(y[i]), __fmul_rn(alpha, to_f32(x[i]))));
}

// ema = decay·ema + (1-decay)·param
template <typename T> __global__ void ema_kernel(T *ema, const T *param, int64_t n, float d, float one_minus) {
    GRID_STRIDE(i, n) ema[i] = from_f32<T>(__fadd_rn(__fmul_rn(d, to_f32(ema[i])), __fmul_rn(one_minus, to_f32(param[i]))));
}

// out[R,d] = in[R, col0 : col0+d] (add = 0) or out[R, col0 : col0+d] += in[R,d] (add = 1); wide[R,D]
template <typename T> __global__ void columns_kernel(T *narrow, T *wide, int64_t rows, int64_t d, int64_t D, int64_t col0, int add) {
    GRID_STRIDE(i, rows * d) {
        int64_t r = i / d, j = i % d;
        T *w = wide + r * D + col0 + j;
        if (add) *w = from_f32<T>(__fadd_rn(to_f32(*w), to_f32(narrow[i])));
        else narrow[i] = *w;
    }
}

// A grid-stride kernel over n items.
#define LAUNCH_N(kernel, n, ...) CUDA_LAUNCH(kernel, cuda_blocks(n), CUDA_THREADS, 0, __VA_ARGS__)

extern "C" vfm_status cuda_fill(Tensor *x, double value) {
    int64_t n = tensor_numel(x);
    if (n == 0) return VFM_OK;
    FLOAT_DISPATCH("fill", "x", x, T, LAUNCH_N(fill_kernel<T>, n, (T *)x->data, n, (float)value));
    return VFM_OK;
}

extern "C" vfm_status cuda_convert(Tensor *dst, const Tensor *src) {
    int64_t n = tensor_numel(src);
    if (src->device != DEV_CUDA || dst->device != DEV_CUDA) {
        char a[96], b[96];
        return vfm_fail(VFM_ERR_SHAPE, "convert: %s from %s: both must be on cuda", tensor_describe(dst, a, sizeof a),
                        tensor_describe(src, b, sizeof b));
    }
    if (src->dtype == DT_F32 && dst->dtype == DT_BF16) {
        if (n) LAUNCH_N(f32_to_bf16_kernel, n, (bf16 *)dst->data, (const float *)src->data, n);
    } else if (src->dtype == DT_BF16 && dst->dtype == DT_F32) {
        if (n) LAUNCH_N(bf16_to_f32_kernel, n, (float *)dst->data, (const bf16 *)src->data, n);
    } else {
        return vfm_fail(VFM_ERR_UNSUPPORTED, "convert on cuda: %s to %s (only f32 <-> bf16)", dtype_name(src->dtype),
                        dtype_name(dst->dtype));
    }
    return VFM_OK;
}

extern "C" vfm_status cuda_add(Tensor *out, const Tensor *a, const Tensor *b) {
    int64_t n = tensor_numel(out);
    if (n == 0) return VFM_OK;
    FLOAT_DISPATCH("add", "out", out, T,
                   LAUNCH_N(add_kernel<T>, n, (T *)out->data, (const T *)a->data, (const T *)b->data, n));
    return VFM_OK;
}

extern "C" vfm_status cuda_scale(Tensor *x, double alpha) {
    int64_t n = tensor_numel(x);
    if (n == 0) return VFM_OK;
    FLOAT_DISPATCH("scale", "x", x, T, LAUNCH_N(scale_kernel<T>, n, (T *)x->data, n, (float)alpha));
    return VFM_OK;
}

extern "C" vfm_status cuda_axpy(Tensor *y, double alpha, const Tensor *x) {
    int64_t n = tensor_numel(y);
    if (n == 0) return VFM_OK;
    FLOAT_DISPATCH("axpy", "y", y, T, LAUNCH_N(axpy_kernel<T>, n, (T *)y->data, (const T *)x->data, n, (float)alpha));
    return VFM_OK;
}

extern "C" vfm_status cuda_ema_update(Tensor *ema, const Tensor *param, double decay) {
    int64_t n = tensor_numel(ema);
    if (n == 0) return VFM_OK;
    float d = (float)decay, one_minus = (float)(1.0 - decay);
    FLOAT_DISPATCH("ema_update", "ema", ema, T,
                   LAUNCH_N(ema_kernel<T>, n, (T *)ema->data, (const T *)param->data, n, d, one_minus));
    return VFM_OK;
}

extern "C" vfm_status cuda_columns_get(Tensor *out, const Tensor *in, int64_t col0) {
    int64_t rows = tensor_rows(out), d = tensor_dim(out, -1), D = tensor_dim(in, -1);
    if (rows * d == 0) return VFM_OK;
    FLOAT_DISPATCH("columns_get", "out", out, T,
                   LAUNCH_N(columns_kernel<T>, rows * d, (T *)out->data, (T *)in->data, rows, d, D, col0, 0));
    return VFM_OK;
}

extern "C" vfm_status cuda_columns_add(Tensor *out, const Tensor *in, int64_t col0) {
    int64_t rows = tensor_rows(in), d = tensor_dim(in, -1), D = tensor_dim(out, -1);
    if (rows * d == 0) return VFM_OK;
    FLOAT_DISPATCH("columns_add", "out", out, T,
                   LAUNCH_N(columns_kernel<T>, rows * d, (T *)in->data, (T *)out->data, rows, d, D, col0, 1));
    return VFM_OK;
}
