// CUDA backend: RMSNorm with a weight fused with adaLN modulate (MovieGen's block norm), forward and
// backward. One warp per row: the row's sum of squares in f32 with a fixed butterfly, rstd saved in
// f32; the per-sample (dshift, dscale) and weight (dw) gradients through the deterministic column
// sums of cuda_common.h. Padding rows (tok2sample < 0) are never read; the forward writes 0 there.
#include "cuda_common.h"

#define RMS_ROWS_PER_BLOCK 8  // warps per block, one row each

static inline unsigned rms_row_blocks(int64_t rows) {
    return (unsigned)((rows + RMS_ROWS_PER_BLOCK - 1) / RMS_ROWS_PER_BLOCK);
}

template <typename T> __device__ __forceinline__ float weight_at(const T *w, int64_t d) { return w ? to_f32(w[d]) : 1.f; }

template <typename T>
__global__ void rmsnorm_modulate_forward_kernel(T *y, float *rstd, const T *x, const T *w, const T *shift,
                                                const T *scale, const int32_t *t2s, int64_t S, int64_t D, float eps) {
    int64_t s = (int64_t)blockIdx.x * RMS_ROWS_PER_BLOCK + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (s >= S) return;
    T *yr = y + s * D;
    int b = t2s[s];
    if (b < 0) {
        for (int64_t d = lane; d < D; d += 32) yr[d] = from_f32<T>(0.f);
        if (lane == 0) rstd[s] = 0.f;
        return;
    }
    const T *xr = x + s * D;
    float sq = 0.f;
    for (int64_t d = lane; d < D; d += 32) {
        float v = to_f32(xr[d]);
        sq += v * v;
    }
    float rs = 1.f / sqrtf(warp_sum(sq) / (float)D + eps);
    if (lane == 0) rstd[s] = rs;
    const T *sh = shift ? shift + (int64_t)b * D : NULL, *sc = scale ? scale + (int64_t)b * D : NULL;
    for (int64_t d = lane; d < D; d += 32) {
        float v = to_f32(xr[d]) * rs * weight_at(w, d);
        if (sc) v = v * (1.f + to_f32(sc[d]));
        if (sh) v = v + to_f32(sh[d]);
        yr[d] = from_f32<T>(v);
    }
}

// g = dy⊙(1+scale): the gradient of n = x̂⊙w
template <typename T> __device__ __forceinline__ float grad_n(const T *dy, const T *sc, int64_t s, int64_t d, int64_t D) {
    float g = to_f32(dy[s * D + d]);
    return sc ? g * (1.f + to_f32(sc[d])) : g;
}

// dx += rstd·(g⊙w − x̂·mean(g⊙w⊙x̂)); padding rows untouched.
template <typename T>
__global__ void rmsnorm_modulate_dx_kernel(T *dx, const T *dy, const T *x, const float *rstd, const T *w,
                                           const T *scale, const int32_t *t2s, int64_t S, int64_t D) {
    int64_t s = (int64_t)blockIdx.x * RMS_ROWS_PER_BLOCK + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (s >= S) return;
    int b = t2s[s];
    if (b < 0) return;
    const T *xr = x + s * D, *sc = scale ? scale + (int64_t)b * D : NULL;
    float rs = rstd[s], sum = 0.f;
    for (int64_t d = lane; d < D; d += 32) sum += grad_n(dy, sc, s, d, D) * weight_at(w, d) * (to_f32(xr[d]) * rs);
    float mean = warp_sum(sum) / (float)D;
    T *dxr = dx + s * D;
    for (int64_t d = lane; d < D; d += 32) {
        float gw = grad_n(dy, sc, s, d, D) * weight_at(w, d);
        dxr[d] = from_f32<T>(to_f32(dxr[d]) + rs * (gw - to_f32(xr[d]) * rs * mean));
    }
}

// dshift term dy, dscale term dy·x̂·w
template <typename T> struct RmsModTerms {
    const T *dy, *x, *w;
    const float *rstd;
    int64_t D;
    __device__ void operator()(int64_t r, int64_t c, float *t) const {
        float g = to_f32(dy[r * D + c]);
        t[0] = g;
        t[1] = g * (to_f32(x[r * D + c]) * rstd[r] * weight_at(w, c));
    }
};

// dw term g·x̂ over the real rows (0 on padding rows: the sum runs over every row)
template <typename T> struct RmsModWeightTerms {
    const T *dy, *x, *scale;
    const float *rstd;
    const int32_t *t2s;
    int64_t D;
    __device__ void operator()(int64_t r, int64_t c, float *t) const {
        int b = t2s[r];
        t[0] = b < 0 ? 0.f : grad_n(dy, scale ? scale + (int64_t)b * D : (const T *)NULL, r, c, D) *
                                 (to_f32(x[r * D + c]) * rstd[r]);
    }
};

extern "C" vfm_status cuda_rmsnorm_modulate_forward(Tensor *y, Tensor *rstd, const Tensor *x, const Tensor *w,
                                                    const Tensor *shift, const Tensor *scale, const Tensor *tok2sample,
                                                    float eps) {
    int64_t S = tensor_rows(x), D = tensor_dim(x, -1);
    if (S == 0) return VFM_OK;
    FLOAT_DISPATCH("rmsnorm_modulate_forward", "x", x, T,
                   CUDA_LAUNCH(rmsnorm_modulate_forward_kernel<T>, rms_row_blocks(S), 32 * RMS_ROWS_PER_BLOCK, 0,
                               (T *)y->data, (float *)rstd->data, (const T *)x->data, w ? (const T *)w->data : NULL,
                               shift ? (const T *)shift->data : NULL, scale ? (const T *)scale->data : NULL,
                               (const int32_t *)tok2sample->data, S, D, eps));
    return VFM_OK;
}

extern "C" vfm_status cuda_rmsnorm_modulate_backward(Tensor *dx, Tensor *dw, Tensor *dshift, Tensor *dscale,
                                                     const Tensor *dy, const Tensor *x, const Tensor *rstd,
                                                     const Tensor *w, const Tensor *scale, const Tensor *tok2sample) {
    const char *op = "rmsnorm_modulate_backward";
    int64_t S = tensor_rows(x), D = tensor_dim(x, -1);
    if (S == 0) return VFM_OK;
    const int32_t *t2s = (const int32_t *)tok2sample->data;
    FLOAT_DISPATCH(op, "x", x, T, {
        const T *W = w ? (const T *)w->data : NULL, *SC = scale ? (const T *)scale->data : NULL;
        if (dx) {
            CUDA_LAUNCH(rmsnorm_modulate_dx_kernel<T>, rms_row_blocks(S), 32 * RMS_ROWS_PER_BLOCK, 0, (T *)dx->data,
                        (const T *)dy->data, (const T *)x->data, (const float *)rstd->data, W, SC, t2s, S, D);
        }
        if (dw) {
            RmsModWeightTerms<T> terms = {(const T *)dy->data, (const T *)x->data, SC, (const float *)rstd->data, t2s, D};
            VFM_TRY((column_sums<1, RmsModWeightTerms<T>, float>(op, x, terms, S, (const int32_t *)NULL, 1, D,
                                                                  (float *)dw->data, (float *)NULL)));
        }
        if (dshift || dscale) {
            RmsModTerms<T> terms = {(const T *)dy->data, (const T *)x->data, W, (const float *)rstd->data, D};
            int B = (int)tensor_rows(dshift ? dshift : dscale);
            VFM_TRY((column_sums<2, RmsModTerms<T>, T>(op, x, terms, S, t2s, B, D, dshift ? (T *)dshift->data : NULL,
                                                        dscale ? (T *)dscale->data : NULL)));
        }
    });
    return VFM_OK;
}
