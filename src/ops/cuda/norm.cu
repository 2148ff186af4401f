// CUDA backend: LayerNorm fused with adaLN modulate, the gated residual and RMSNorm, forward and
// backward. Row sums in f32 with a fixed butterfly (deterministic), the statistics saved in f32;
// per-sample (dshift, dscale, dgate) and weight (RMSNorm dw) gradients through the deterministic
// column sums of cuda_common.h. Rows move in 16-byte chunks where the data allow (cuda_common.h,
// "16-byte vector access"). Padding rows (tok2sample < 0) are never read; forward outputs write 0
// there (gated residual: out = x), as on the CPU.
#include "cuda_common.h"

// ---- rows read once ------------------------------------------------------------------------
// LayerNorm and RMSNorm keep their row in registers: the n threads of a row take its chunks t,
// t + n, t + 2n, … and keep up to ROW_CHUNKS of them, so a row is read from global memory once
// (and its statistics need no second read). A row of at most 32·ROW_CHUNKS chunks takes one warp
// (ROW_WARPS rows per block, no barrier); a longer one a block of up to 1024 threads (its sums by
// block_sum). The order of every sum depends on the shape only, not on the vector path.
#define ROW_CHUNKS 8

struct RowGeometry {
    dim3 grid, block;
};

template <typename T>
static vfm_status row_geometry(const char *op, const Tensor *t, int64_t rows, int64_t D, RowGeometry *g) {
    int64_t warps = chunks_of<32 * ROW_CHUNKS>(chunks_of<VEC(T)>(D));
    if (warps > 32) {
        char d[128];
        return vfm_fail(VFM_ERR_UNSUPPORTED, "%s: rows of %lld elements (%s): the CUDA kernel keeps a row in "
                        "registers, at most %d elements of %s", op, (long long)D, tensor_describe(t, d, sizeof d),
                        32 * 32 * ROW_CHUNKS * VEC(T), dtype_name(t->dtype));
    }
    if (warps <= 1) {
        g->block = row_warp_block();
        g->grid = dim3((unsigned)((rows + ROW_WARPS - 1) / ROW_WARPS));
    } else {
        g->block = dim3((unsigned)(32 * warps));
        g->grid = dim3((unsigned)rows);
    }
    return VFM_OK;
}

// The row of the calling thread (its threads leave together when it is past the last: a block of
// several rows syncs no barrier), and the sum of v over the row's threads.
__device__ __forceinline__ int64_t row_of_thread(void) { return (int64_t)blockIdx.x * blockDim.y + threadIdx.y; }
__device__ __forceinline__ float row_sum(float v) { return blockDim.x == 32 ? warp_sum(v) : block_sum(v); }

// The thread's j-th chunk of a row of `chunks` (-1: none).
__device__ __forceinline__ int64_t row_chunk(int j, int64_t chunks) {
    int64_t c = threadIdx.x + (int64_t)j * blockDim.x;
    return c < chunks ? c : -1;
}

// ---- LayerNorm + modulate ------------------------------------------------------------------

template <typename T>
__global__ void layernorm_modulate_forward_kernel(T *y, float *mean, float *rstd, const T *x, const T *shift,
                                                  const T *scale, const int32_t *t2s, int64_t S, int64_t D, float eps,
                                                  int vec) {
    constexpr int W = VEC(T);
    int64_t s = row_of_thread();
    if (s >= S) return;
    const int64_t chunks = chunks_of<W>(D);
    T *yr = y + s * D;
    int b = t2s[s];
    if (b < 0) {
        T zero[W];
        for (int k = 0; k < W; k++) zero[k] = from_f32<T>(0.f);
        for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x) chunk_write<W>(yr, zero, c, D, vec);
        if (threadIdx.x == 0) mean[s] = rstd[s] = 0.f;
        return;
    }
    const T *xr = x + s * D;
    T xc[ROW_CHUNKS][W];  // the row's chunks of this thread, read once
    float sum = 0.f;
    UNROLL
    for (int j = 0; j < ROW_CHUNKS; j++) {
        int64_t c = row_chunk(j, chunks);
        if (c < 0) continue;
        chunk_read<W>(xc[j], xr, c, D, vec);
        int len = chunk_len<W>(c, D);
        for (int k = 0; k < W; k++)
            if (k < len) sum += to_f32(xc[j][k]);
    }
    float mu = row_sum(sum) / (float)D;
    float sq = 0.f;
    UNROLL
    for (int j = 0; j < ROW_CHUNKS; j++) {
        int64_t c = row_chunk(j, chunks);
        if (c < 0) continue;
        int len = chunk_len<W>(c, D);
        for (int k = 0; k < W; k++) {
            if (k >= len) continue;  // past the end of the row (a short last chunk)
            float d = to_f32(xc[j][k]) - mu;
            sq += d * d;
        }
    }
    float rs = 1.f / sqrtf(row_sum(sq) / (float)D + eps);
    if (threadIdx.x == 0) {
        mean[s] = mu;
        rstd[s] = rs;
    }
    const T *sh = shift ? shift + (int64_t)b * D : NULL, *sc = scale ? scale + (int64_t)b * D : NULL;
    UNROLL
    for (int j = 0; j < ROW_CHUNKS; j++) {
        int64_t c = row_chunk(j, chunks);
        if (c < 0) continue;
        T shc[W], scc[W];
        if (sc) chunk_read<W>(scc, sc, c, D, vec);
        if (sh) chunk_read<W>(shc, sh, c, D, vec);
        for (int k = 0; k < W; k++) {
            float v = (to_f32(xc[j][k]) - mu) * rs;
            if (sc) v = v * (1.f + to_f32(scc[k]));
            if (sh) v = v + to_f32(shc[k]);
            xc[j][k] = from_f32<T>(v);
        }
        chunk_write<W>(yr, xc[j], c, D, vec);
    }
}

// dx += rstd·(g − mean(g) − x̂·mean(g⊙x̂)), g = dy⊙(1+scale); padding rows untouched. dy and x are
// read once (kept in registers); the sample's scale row twice.
template <typename T>
__global__ void layernorm_modulate_dx_kernel(T *dx, const T *dy, const T *x, const float *mean, const float *rstd,
                                             const T *scale, const int32_t *t2s, int64_t S, int64_t D, int vec) {
    constexpr int W = VEC(T);
    int64_t s = row_of_thread();
    if (s >= S) return;
    int b = t2s[s];
    if (b < 0) return;
    const int64_t chunks = chunks_of<W>(D);
    const T *xr = x + s * D, *gr = dy + s * D, *sc = scale ? scale + (int64_t)b * D : NULL;
    float m = mean[s], rs = rstd[s];
    T gc[ROW_CHUNKS][W], xc[ROW_CHUNKS][W];
    float sum_g = 0.f, sum_gx = 0.f;
    UNROLL
    for (int j = 0; j < ROW_CHUNKS; j++) {
        int64_t c = row_chunk(j, chunks);
        if (c < 0) continue;
        T scc[W];
        chunk_read<W>(gc[j], gr, c, D, vec);
        chunk_read<W>(xc[j], xr, c, D, vec);
        if (sc) chunk_read<W>(scc, sc, c, D, vec);
        int len = chunk_len<W>(c, D);
        for (int k = 0; k < W; k++) {
            if (k >= len) continue;  // past the end of the row (a short last chunk)
            float gd = to_f32(gc[j][k]);
            if (sc) gd *= 1.f + to_f32(scc[k]);
            sum_g += gd;
            sum_gx += gd * ((to_f32(xc[j][k]) - m) * rs);
        }
    }
    float mean_g = row_sum(sum_g) / (float)D, mean_gx = row_sum(sum_gx) / (float)D;
    T *dxr = dx + s * D;
    UNROLL
    for (int j = 0; j < ROW_CHUNKS; j++) {
        int64_t c = row_chunk(j, chunks);
        if (c < 0) continue;
        T scc[W], dc[W];
        if (sc) chunk_read<W>(scc, sc, c, D, vec);
        chunk_read<W>(dc, dxr, c, D, vec);
        for (int k = 0; k < W; k++) {
            float gd = to_f32(gc[j][k]);
            if (sc) gd *= 1.f + to_f32(scc[k]);
            float xh = (to_f32(xc[j][k]) - m) * rs;
            dc[k] = from_f32<T>(to_f32(dc[k]) + rs * (gd - mean_g - xh * mean_gx));
        }
        chunk_write<W>(dxr, dc, c, D, vec);
    }
}

// dshift term dy, dscale term dy·x̂
template <typename T> struct LayerNormModTerms {
    const T *dy, *x;
    const float *mean, *rstd;
    int64_t D;
    __device__ void operator()(int64_t r, int64_t c, float *t) const {
        float g = to_f32(dy[r * D + c]);
        t[0] = g;
        t[1] = g * ((to_f32(x[r * D + c]) - mean[r]) * rstd[r]);
    }
};

extern "C" vfm_status cuda_layernorm_modulate_forward(Tensor *y, Tensor *mean, Tensor *rstd, const Tensor *x,
                                                      const Tensor *shift, const Tensor *scale,
                                                      const Tensor *tok2sample, float eps) {
    const char *op = "layernorm_modulate_forward";
    int64_t S = tensor_rows(x), D = tensor_dim(x, -1);
    if (S == 0) return VFM_OK;
    FLOAT_DISPATCH(op, "x", x, T, {
        RowGeometry g;
        VFM_TRY(row_geometry<T>(op, x, S, D, &g));
        const T *sh = shift ? (const T *)shift->data : NULL, *sc = scale ? (const T *)scale->data : NULL;
        CUDA_LAUNCH(layernorm_modulate_forward_kernel<T>, g.grid, g.block, 0, (T *)y->data, (float *)mean->data,
                    (float *)rstd->data, (const T *)x->data, sh, sc, (const int32_t *)tok2sample->data, S, D, eps,
                    vec_rows_ok<T>(D, y->data, x->data, sh, sc));
    });
    return VFM_OK;
}

extern "C" vfm_status cuda_layernorm_modulate_backward(Tensor *dx, Tensor *dshift, Tensor *dscale, const Tensor *dy,
                                                       const Tensor *x, const Tensor *mean, const Tensor *rstd,
                                                       const Tensor *scale, const Tensor *tok2sample) {
    const char *op = "layernorm_modulate_backward";
    int64_t S = tensor_rows(x), D = tensor_dim(x, -1);
    if (S == 0) return VFM_OK;
    const int32_t *t2s = (const int32_t *)tok2sample->data;
    FLOAT_DISPATCH(op, "x", x, T, {
        if (dx) {
            RowGeometry g;
            VFM_TRY(row_geometry<T>(op, x, S, D, &g));
            const T *sc = scale ? (const T *)scale->data : NULL;
            CUDA_LAUNCH(layernorm_modulate_dx_kernel<T>, g.grid, g.block, 0, (T *)dx->data, (const T *)dy->data,
                        (const T *)x->data, (const float *)mean->data, (const float *)rstd->data, sc, t2s, S, D,
                        vec_rows_ok<T>(D, dx->data, dy->data, x->data, sc));
        }
        if (dshift || dscale) {
            LayerNormModTerms<T> terms = {(const T *)dy->data, (const T *)x->data, (const float *)mean->data,
                                          (const float *)rstd->data, D};
            int B = (int)tensor_rows(dshift ? dshift : dscale);
            VFM_TRY((column_sums<2, LayerNormModTerms<T>, T>(op, x, terms, S, t2s, B, D,
                                                              dshift ? (T *)dshift->data : NULL,
                                                              dscale ? (T *)dscale->data : NULL)));
        }
    });
    return VFM_OK;
}

// ---- gated residual ------------------------------------------------------------------------
// One warp per row (ROW_STRIDE), its lanes over the row's chunks: the sample and the gate row are
// found once per row.

// out = x + gate[b]⊙y (plain sum without gate); padding rows: out = x. out may alias x.
template <typename T>
__global__ void gated_residual_forward_kernel(T *out, const T *x, const T *y, const T *gate, const int32_t *t2s,
                                              int64_t S, int64_t D, int vec) {
    constexpr int W = VEC(T);
    const int64_t chunks = chunks_of<W>(D);
    ROW_STRIDE(s, S) {
        int b = t2s[s];
        const T *xr = x + s * D, *yr = y + s * D, *gr = gate && b >= 0 ? gate + (int64_t)b * D : NULL;
        T *outr = out + s * D;
        LANE_CHUNKS(c, chunks) {
            T xv[W], yv[W], gv[W];
            chunk_read<W>(xv, xr, c, D, vec);
            if (b >= 0) {
                chunk_read<W>(yv, yr, c, D, vec);
                if (gr) chunk_read<W>(gv, gr, c, D, vec);
                for (int k = 0; k < W; k++) {
                    float v = to_f32(yv[k]);
                    if (gr) v = to_f32(gv[k]) * v;
                    xv[k] = from_f32<T>(to_f32(xv[k]) + v);
                }
            }
            chunk_write<W>(outr, xv, c, D, vec);
        }
    }
}

// dx += dout
template <typename T> __global__ void add_into_kernel(T *dx, const T *dout, int64_t n, int vec) {
    GRID_STRIDE(c, chunks_of<VEC(T)>(n)) map2_chunk(dx, dx, dout, c, n, vec, [](float a, float d) { return a + d; });
}

// dy = gate[b]⊙dout (or dout); padding rows 0. dy may alias dout.
template <typename T>
__global__ void gated_residual_dy_kernel(T *dy, const T *dout, const T *gate, const int32_t *t2s, int64_t S, int64_t D,
                                         int vec) {
    constexpr int W = VEC(T);
    const int64_t chunks = chunks_of<W>(D);
    ROW_STRIDE(s, S) {
        int b = t2s[s];
        const T *dr = dout + s * D, *gr = gate && b >= 0 ? gate + (int64_t)b * D : NULL;
        T *dyr = dy + s * D;
        LANE_CHUNKS(c, chunks) {
            T v[W], gv[W];
            if (b < 0) {
                for (int k = 0; k < W; k++) v[k] = from_f32<T>(0.f);
            } else {
                chunk_read<W>(v, dr, c, D, vec);
                if (gr) {
                    chunk_read<W>(gv, gr, c, D, vec);
                    for (int k = 0; k < W; k++) v[k] = from_f32<T>(to_f32(gv[k]) * to_f32(v[k]));
                }
            }
            chunk_write<W>(dyr, v, c, D, vec);
        }
    }
}

template <typename T> struct GateTerms {
    const T *dout, *y;
    int64_t D;
    __device__ void operator()(int64_t r, int64_t c, float *t) const { t[0] = to_f32(dout[r * D + c]) * to_f32(y[r * D + c]); }
};

extern "C" vfm_status cuda_gated_residual_forward(Tensor *out, const Tensor *x, const Tensor *y, const Tensor *gate,
                                                  const Tensor *tok2sample) {
    int64_t S = tensor_rows(x), D = tensor_dim(x, -1);
    if (S * D == 0) return VFM_OK;
    FLOAT_DISPATCH("gated_residual_forward", "x", x, T, {
        const T *g = gate ? (const T *)gate->data : NULL;
        CUDA_LAUNCH(gated_residual_forward_kernel<T>, row_warp_grid(S), row_warp_block(), 0, (T *)out->data,
                    (const T *)x->data, (const T *)y->data, g, (const int32_t *)tok2sample->data, S, D,
                    vec_rows_ok<T>(D, out->data, x->data, y->data, g));
    });
    return VFM_OK;
}

// In stream order: dgate and dx read dout before dy (which may alias dout) is written.
extern "C" vfm_status cuda_gated_residual_backward(Tensor *dx, Tensor *dy, Tensor *dgate, const Tensor *dout,
                                                   const Tensor *y, const Tensor *gate, const Tensor *tok2sample) {
    const char *op = "gated_residual_backward";
    int64_t S = tensor_rows(dout), D = tensor_dim(dout, -1);
    if (S * D == 0) return VFM_OK;
    const int32_t *t2s = (const int32_t *)tok2sample->data;
    FLOAT_DISPATCH(op, "dout", dout, T, {
        if (dgate) {
            GateTerms<T> terms = {(const T *)dout->data, (const T *)y->data, D};
            VFM_TRY((column_sums<1, GateTerms<T>, T>(op, dout, terms, S, t2s, (int)tensor_rows(dgate), D,
                                                      (T *)dgate->data, (T *)NULL)));
        }
        if (dx && dx->data != dout->data) {
            CUDA_LAUNCH(add_into_kernel<T>, cuda_blocks(chunks_of<VEC(T)>(S * D)), CUDA_THREADS, 0, (T *)dx->data,
                        (const T *)dout->data, S * D, vec_ok(dx->data, dout->data));
        }
        if (dy) {
            const T *g = gate ? (const T *)gate->data : NULL;
            CUDA_LAUNCH(gated_residual_dy_kernel<T>, row_warp_grid(S), row_warp_block(), 0, (T *)dy->data,
                        (const T *)dout->data, g, t2s, S, D, vec_rows_ok<T>(D, dy->data, dout->data, g));
        }
    });
    return VFM_OK;
}

// ---- RMSNorm -------------------------------------------------------------------------------

template <typename T>
__global__ void rmsnorm_forward_kernel(T *y, float *rstd, const T *x, const T *w, int64_t N, int64_t d, float eps,
                                       int vec) {
    constexpr int W = VEC(T);
    int64_t n = row_of_thread();
    if (n >= N) return;
    const int64_t chunks = chunks_of<W>(d);
#if VFM_HARNESS_BREAK == BREAK_OFF_BY_ONE  // the must-fail build reads one element past its row (cuda_launch.h)
    const int64_t read_to = d + 1;
#else
    const int64_t read_to = d;
#endif
    const T *xr = x + n * d;
    T xc[ROW_CHUNKS][W];
    float sq = 0.f;
    UNROLL
    for (int j = 0; j < ROW_CHUNKS; j++) {
        int64_t c = row_chunk(j, chunks_of<W>(read_to));
        if (c < 0) continue;
        chunk_read<W>(xc[j], xr, c, read_to, vec);
        int len = chunk_len<W>(c, read_to);
        for (int k = 0; k < W; k++) {
            if (k >= len) continue;  // past the end of the row (a short last chunk)
            float v = to_f32(xc[j][k]);
            sq += v * v;
        }
    }
    float rs = 1.f / sqrtf(row_sum(sq) / (float)d + eps);
    if (threadIdx.x == 0) rstd[n] = rs;
    T *yr = y + n * d;
    UNROLL
    for (int j = 0; j < ROW_CHUNKS; j++) {
        int64_t c = row_chunk(j, chunks);
        if (c < 0) continue;
        T wc[W];
        if (w) chunk_read<W>(wc, w, c, d, vec);
        for (int k = 0; k < W; k++) {
            float v = to_f32(xc[j][k]) * rs;
            xc[j][k] = from_f32<T>(w ? v * to_f32(wc[k]) : v);
        }
        chunk_write<W>(yr, xc[j], c, d, vec);
    }
}

// dx = rstd·(g − x̂·mean(g⊙x̂)), g = dy⊙w; dy and x read once.
template <typename T>
__global__ void rmsnorm_dx_kernel(T *dx, const T *dy, const T *x, const float *rstd, const T *w, int64_t N, int64_t d,
                                  int vec) {
    constexpr int W = VEC(T);
    int64_t n = row_of_thread();
    if (n >= N) return;
    const int64_t chunks = chunks_of<W>(d);
    const T *xr = x + n * d, *gr = dy + n * d;
    float rs = rstd[n], sum_gx = 0.f;
    T gc[ROW_CHUNKS][W], xc[ROW_CHUNKS][W];
    UNROLL
    for (int j = 0; j < ROW_CHUNKS; j++) {
        int64_t c = row_chunk(j, chunks);
        if (c < 0) continue;
        T wc[W];
        chunk_read<W>(gc[j], gr, c, d, vec);
        chunk_read<W>(xc[j], xr, c, d, vec);
        if (w) chunk_read<W>(wc, w, c, d, vec);
        int len = chunk_len<W>(c, d);
        for (int k = 0; k < W; k++) {
            if (k >= len) continue;  // past the end of the row (a short last chunk)
            float gj = w ? to_f32(gc[j][k]) * to_f32(wc[k]) : to_f32(gc[j][k]);
            sum_gx += gj * (to_f32(xc[j][k]) * rs);
        }
    }
    float mean_gx = row_sum(sum_gx) / (float)d;
    T *dxr = dx + n * d;
    UNROLL
    for (int j = 0; j < ROW_CHUNKS; j++) {
        int64_t c = row_chunk(j, chunks);
        if (c < 0) continue;
        T wc[W];
        if (w) chunk_read<W>(wc, w, c, d, vec);
        for (int k = 0; k < W; k++) {
            float gj = w ? to_f32(gc[j][k]) * to_f32(wc[k]) : to_f32(gc[j][k]);
            gc[j][k] = from_f32<T>(rs * (gj - to_f32(xc[j][k]) * rs * mean_gx));
        }
        chunk_write<W>(dxr, gc[j], c, d, vec);
    }
}

template <typename T> struct RmsWeightTerms {
    const T *dy, *x;
    const float *rstd;
    int64_t d;
    __device__ void operator()(int64_t r, int64_t c, float *t) const {
        t[0] = to_f32(dy[r * d + c]) * (to_f32(x[r * d + c]) * rstd[r]);
    }
};

extern "C" vfm_status cuda_rmsnorm_forward(Tensor *y, Tensor *rstd, const Tensor *x, const Tensor *w, float eps) {
    const char *op = "rmsnorm_forward";
    int64_t N = tensor_rows(x), d = tensor_dim(x, -1);
    if (N == 0) return VFM_OK;
    FLOAT_DISPATCH(op, "x", x, T, {
        RowGeometry g;
        VFM_TRY(row_geometry<T>(op, x, N, d, &g));
        const T *wd = w ? (const T *)w->data : NULL;
        CUDA_LAUNCH(rmsnorm_forward_kernel<T>, g.grid, g.block, 0, (T *)y->data, (float *)rstd->data,
                    (const T *)x->data, wd, N, d, eps, vec_rows_ok<T>(d, y->data, x->data, wd));
    });
    return VFM_OK;
}

extern "C" vfm_status cuda_rmsnorm_backward(Tensor *dx, Tensor *dw, const Tensor *dy, const Tensor *x,
                                            const Tensor *rstd, const Tensor *w) {
    const char *op = "rmsnorm_backward";
    int64_t N = tensor_rows(x), d = tensor_dim(x, -1);
    if (N == 0) return VFM_OK;
    FLOAT_DISPATCH(op, "x", x, T, {
        if (dx) {
            RowGeometry g;
            VFM_TRY(row_geometry<T>(op, x, N, d, &g));
            const T *wd = w ? (const T *)w->data : NULL;
            CUDA_LAUNCH(rmsnorm_dx_kernel<T>, g.grid, g.block, 0, (T *)dx->data, (const T *)dy->data,
                        (const T *)x->data, (const float *)rstd->data, wd, N, d,
                        vec_rows_ok<T>(d, dx->data, dy->data, x->data, wd));
        }
        if (dw) {
            RmsWeightTerms<T> terms = {(const T *)dy->data, (const T *)x->data, (const float *)rstd->data, d};
            VFM_TRY((column_sums<1, RmsWeightTerms<T>, float>(op, x, terms, N, (const int32_t *)NULL, 1, d,
                                                               (float *)dw->data, (float *)NULL)));
        }
    });
    return VFM_OK;
}
