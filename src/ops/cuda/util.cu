// CUDA backend: fill, convert (f32 <-> bf16), add, scale, axpy, EMA and column blocks. f32 results
// use the CPU's expressions with explicitly rounded operations (no fused multiply-add), so f32
// tensors get the same bits as the CPU backend; bf16 tensors compute in f32 and round once.
#include "cuda_common.h"

// Pointwise kernels run over chunks (cuda_common.h, "16-byte vector access"); the column blocks
// one warp per row.

template <typename T> __global__ void fill_kernel(T *x, int64_t n, float value, int vec) {
    constexpr int W = VEC(T);
    T v[W];
    for (int k = 0; k < W; k++) v[k] = from_f32<T>(value);
    GRID_STRIDE(c, chunks_of<W>(n)) chunk_write<W>(x, v, c, n, vec);
}

// f32 <-> bf16 in chunks of 8 elements: 16 bytes of bf16, two 16-byte accesses of f32.
template <typename S, typename D> __global__ void convert_kernel(D *dst, const S *src, int64_t n, int vec) {
    GRID_STRIDE(c, chunks_of<8>(n)) {
        S s[8];
        D d[8];
        chunk_read<8>(s, src, c, n, vec);
        for (int k = 0; k < 8; k++) d[k] = from_f32<D>(to_f32(s[k]));
        chunk_write<8>(dst, d, c, n, vec);
    }
}

template <typename T> __global__ void add_kernel(T *out, const T *a, const T *b, int64_t n, int vec) {
    GRID_STRIDE(c, chunks_of<VEC(T)>(n)) map2_chunk(out, a, b, c, n, vec, [](float x, float y) { return __fadd_rn(x, y); });
}

template <typename T> __global__ void scale_kernel(T *x, int64_t n, float alpha, int vec) {
    GRID_STRIDE(c, chunks_of<VEC(T)>(n)) map1_chunk(x, x, c, n, vec, [=](float v) { return __fmul_rn(v, alpha); });
}

// y += alpha·x
template <typename T> __global__ void axpy_kernel(T *y, const T *x, int64_t n, float alpha, int vec) {
    GRID_STRIDE(c, chunks_of<VEC(T)>(n))
        map2_chunk(y, y, x, c, n, vec, [=](float a, float b) { return __fadd_rn(a, __fmul_rn(alpha, b)); });
}

// ema = decay·ema + (1-decay)·param
template <typename T> __global__ void ema_kernel(T *ema, const T *param, int64_t n, float d, float one_minus, int vec) {
    GRID_STRIDE(c, chunks_of<VEC(T)>(n))
        map2_chunk(ema, ema, param, c, n, vec, [=](float e, float p) { return ema_value(e, p, d, one_minus); });
}

// out[R,d] = in[R, col0 : col0+d] (add = 0) or out[R, col0 : col0+d] += in[R,d] (add = 1); wide[R,D].
// One warp per row; vec when both rows and the block's first column are 16-byte aligned.
template <typename T>
__global__ void columns_kernel(T *narrow, T *wide, int64_t rows, int64_t d, int64_t D, int64_t col0, int add, int vec) {
    constexpr int W = VEC(T);
    const int64_t chunks = chunks_of<W>(d);
    ROW_STRIDE(r, rows) {
        T *nr = narrow + r * d, *wr = wide + r * D + col0;
        LANE_CHUNKS(c, chunks) {
            T w[W];
            chunk_read<W>(w, wr, c, d, vec);
            if (add) {
                T v[W];
                chunk_read<W>(v, nr, c, d, vec);
                for (int k = 0; k < W; k++) w[k] = from_f32<T>(__fadd_rn(to_f32(w[k]), to_f32(v[k])));
                chunk_write<W>(wr, w, c, d, vec);
            } else {
                chunk_write<W>(nr, w, c, d, vec);
            }
        }
    }
}

// Whether the column block's rows all start 16-byte aligned, in narrow and in wide.
template <typename T>
static int columns_vec(const Tensor *narrow, const Tensor *wide, int64_t d, int64_t D, int64_t col0) {
    return vec_rows_ok<T>(d, narrow->data) && vec_rows_ok<T>(D, wide->data) && vec_rows_ok<T>(col0, wide->data);
}

// A pointwise kernel over the chunks of n elements of T.
#define LAUNCH_CHUNKS(kernel, T, n, ...) \
    CUDA_LAUNCH(kernel, cuda_blocks(chunks_of<VEC(T)>(n)), CUDA_THREADS, 0, __VA_ARGS__)

extern "C" vfm_status cuda_fill(Tensor *x, double value) {
    int64_t n = tensor_numel(x);
    if (n == 0) return VFM_OK;
    FLOAT_DISPATCH("fill", "x", x, T, LAUNCH_CHUNKS(fill_kernel<T>, T, n, (T *)x->data, n, (float)value, vec_ok(x->data)));
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
        if (n) LAUNCH_CHUNKS((convert_kernel<float, bf16>), bf16, n, (bf16 *)dst->data, (const float *)src->data, n,
                             vec_ok(dst->data, src->data));
    } else if (src->dtype == DT_BF16 && dst->dtype == DT_F32) {
        if (n) LAUNCH_CHUNKS((convert_kernel<bf16, float>), bf16, n, (float *)dst->data, (const bf16 *)src->data, n,
                             vec_ok(dst->data, src->data));
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
                   LAUNCH_CHUNKS(add_kernel<T>, T, n, (T *)out->data, (const T *)a->data, (const T *)b->data, n,
                                 vec_ok(out->data, a->data, b->data)));
    return VFM_OK;
}

extern "C" vfm_status cuda_scale(Tensor *x, double alpha) {
    int64_t n = tensor_numel(x);
    if (n == 0) return VFM_OK;
    FLOAT_DISPATCH("scale", "x", x, T, LAUNCH_CHUNKS(scale_kernel<T>, T, n, (T *)x->data, n, (float)alpha, vec_ok(x->data)));
    return VFM_OK;
}

extern "C" vfm_status cuda_axpy(Tensor *y, double alpha, const Tensor *x) {
    int64_t n = tensor_numel(y);
    if (n == 0) return VFM_OK;
    FLOAT_DISPATCH("axpy", "y", y, T, LAUNCH_CHUNKS(axpy_kernel<T>, T, n, (T *)y->data, (const T *)x->data, n, (float)alpha,
                                                    vec_ok(y->data, x->data)));
    return VFM_OK;
}

extern "C" vfm_status cuda_ema_update(Tensor *ema, const Tensor *param, double decay) {
    int64_t n = tensor_numel(ema);
    if (n == 0) return VFM_OK;
    float d = (float)decay, one_minus = (float)(1.0 - decay);
    FLOAT_DISPATCH("ema_update", "ema", ema, T,
                   LAUNCH_CHUNKS(ema_kernel<T>, T, n, (T *)ema->data, (const T *)param->data, n, d, one_minus,
                                 vec_ok(ema->data, param->data)));
    return VFM_OK;
}

extern "C" vfm_status cuda_columns_get(Tensor *out, const Tensor *in, int64_t col0) {
    int64_t rows = tensor_rows(out), d = tensor_dim(out, -1), D = tensor_dim(in, -1);
    if (rows * d == 0) return VFM_OK;
    FLOAT_DISPATCH("columns_get", "out", out, T,
                   CUDA_LAUNCH(columns_kernel<T>, row_warp_grid(rows), row_warp_block(), 0, (T *)out->data,
                               (T *)in->data, rows, d, D, col0, 0, columns_vec<T>(out, in, d, D, col0)));
    return VFM_OK;
}

extern "C" vfm_status cuda_columns_add(Tensor *out, const Tensor *in, int64_t col0) {
    int64_t rows = tensor_rows(in), d = tensor_dim(in, -1), D = tensor_dim(out, -1);
    if (rows * d == 0) return VFM_OK;
    FLOAT_DISPATCH("columns_add", "out", out, T,
                   CUDA_LAUNCH(columns_kernel<T>, row_warp_grid(rows), row_warp_block(), 0, (T *)in->data,
                               (T *)out->data, rows, d, D, col0, 1, columns_vec<T>(in, out, d, D, col0)));
    return VFM_OK;
}
