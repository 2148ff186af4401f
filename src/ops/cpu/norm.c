/* CPU backend: LayerNorm fused with adaLN modulate, the gated residual, RMSNorm; forward and
 * backward. Each op is one parallel region (the LayerNorm backward two: dx, then the per-sample
 * sums), none below NORM_PARALLEL_MIN elements; rows are processed in groups by vectorised functions
 * (VEC_CLONES). Row statistics are summed in double in fixed lanes (lane_sums.h). Per-sample
 * parameter gradients are summed over column blocks in parallel with the rows in ascending order
 * inside a block (sample_sums.h); the RMSNorm weight gradient over CPU_REDUCE_CHUNKS fixed row
 * chunks. Nothing depends on the thread count. */
#include <stdlib.h>
#include <string.h>

#include "real.h"
#include "lane_sums.h"
#include "vec_math.h"
#include "sample_sums.h"

/* Rows per work item of the row loops. */
#define NORM_ROWS 32

static inline int64_t column_blocks(int64_t D) { return (D + SAMPLE_GRAD_COLS - 1) / SAMPLE_GRAD_COLS; }
static inline int64_t row_groups(int64_t S) { return (S + NORM_ROWS - 1) / NORM_ROWS; }
static inline int64_t group_end(int64_t grp, int64_t S) { return grp * NORM_ROWS + NORM_ROWS < S ? grp * NORM_ROWS + NORM_ROWS : S; }

/* dshift's term dy, dscale's dy·x̂ (x̂ = (x - mean)·rstd), for sample_column_sums */
typedef struct {
    const real *X, *DY, *M, *R;
    int64_t D;
} LnTerms;
VEC_CLONES static void ln_terms(const void *ctx, int64_t s, int64_t d0, int64_t d1, double *acc0, double *acc1) {
    const LnTerms *c = ctx;
    const real *xr = c->X + s * c->D, *g = c->DY + s * c->D;
    real m = c->M[s], rs = c->R[s];
#pragma omp simd
    for (int64_t d = d0; d < d1; d++) {
        acc0[d] += (double)g[d];
        acc1[d] += (double)g[d] * (double)((xr[d] - m) * rs);
    }
}

/* Over the rows s of each sample b, in order: acc[b, d0:d1] += dout[s,d]·y[s,d]. */
VEC_CLONES static void gate_column_sums(double *acc, const real *DO, const real *Y, const int32_t *T2S, int64_t S,
                                        int64_t D, int64_t d0, int64_t d1) {
    for (int64_t s = 0; s < S; s++) {
        int64_t b = T2S[s];
        if (b < 0) continue;
        const real *g = DO + s * D, *yr = Y + s * D;
        double *a = acc + b * D;
#pragma omp simd
        for (int64_t d = d0; d < d1; d++) a[d] += (double)g[d] * (double)yr[d];
    }
}

VEC_CLONES static void layernorm_modulate_rows(real *Y, real *M, real *R, const real *X, const real *SH,
                                               const real *SC, const int32_t *T2S, int64_t s0, int64_t s1, int64_t D,
                                               double eps) {
    for (int64_t s = s0; s < s1; s++) {
        real *yr = Y + s * D;
        int64_t b = T2S[s];
        if (b < 0) {
            memset(yr, 0, (size_t)D * sizeof(real));
            M[s] = R[s] = 0;
            continue;
        }
        const real *xr = X + s * D;
        double mu = lane_sum(xr, D) / (double)D;
        double var = lane_sum_sq_dev(xr, D, mu) / (double)D;
        /* the saved (rounded) statistics are what both passes normalise with */
        M[s] = (real)mu;
        R[s] = (real)(1.0 / sqrt(var + eps));
        real m = M[s], rs = R[s];
        const real *sh = SH ? SH + b * D : NULL, *sc = SC ? SC + b * D : NULL;
        if (sh && sc) {
#pragma omp simd
            for (int64_t d = 0; d < D; d++) yr[d] = (xr[d] - m) * rs * ((real)1 + sc[d]) + sh[d];
        } else {
            for (int64_t d = 0; d < D; d++) {
                real v = (xr[d] - m) * rs;
                if (sc) v = v * ((real)1 + sc[d]);
                if (sh) v = v + sh[d];
                yr[d] = v;
            }
        }
    }
}

vfm_status CPU_FN(layernorm_modulate_forward)(Tensor *y, Tensor *mean, Tensor *rstd, const Tensor *x,
                                              const Tensor *shift, const Tensor *scale, const Tensor *tok2sample,
                                              float eps) {
    int64_t S = tensor_rows(x), D = tensor_dim(x, -1), groups = row_groups(S);
    real *Y = RDATA(y), *M = RDATA(mean), *R = RDATA(rstd);
    const real *X = CRDATA(x), *SH = shift ? CRDATA(shift) : NULL, *SC = scale ? CRDATA(scale) : NULL;
    const int32_t *T2S = I32DATA(tok2sample);
#pragma omp parallel for schedule(static) if (S * D >= NORM_PARALLEL_MIN)
    for (int64_t grp = 0; grp < groups; grp++)
        layernorm_modulate_rows(Y, M, R, X, SH, SC, T2S, grp * NORM_ROWS, group_end(grp, S), D, (double)eps);
    return VFM_OK;
}

/* dx += rstd·(g - mean(g) - x̂·mean(g⊙x̂)), g = dy⊙(1+scale) the gradient of x̂, for rows [s0, s1).
 * Without scale, SC is one row of zeros (g·(1 + 0) is g exactly), read for every sample. */
VEC_CLONES static void layernorm_modulate_dx_rows(real *DX, const real *DY, const real *X, const real *M,
                                                  const real *R, const real *SC, int64_t sc_stride,
                                                  const int32_t *T2S, int64_t s0, int64_t s1, int64_t D) {
    for (int64_t s = s0; s < s1; s++) {
        int64_t b = T2S[s];
        if (b < 0) continue;
        const real *xr = X + s * D, *g = DY + s * D, *sc = SC + b * sc_stride;
        real m = M[s], rs = R[s];
        double acc_g[SUM_LANES] = {0}, acc_gx[SUM_LANES] = {0};
        int64_t j = 0;
        for (; j + SUM_LANES <= D; j += SUM_LANES)
            for (int l = 0; l < SUM_LANES; l++) {
                real gd = g[j + l] * ((real)1 + sc[j + l]);
                acc_g[l] += (double)gd;
                acc_gx[l] += (double)gd * (double)((xr[j + l] - m) * rs);
            }
        for (int l = 0; j < D; j++, l++) {
            real gd = g[j] * ((real)1 + sc[j]);
            acc_g[l] += (double)gd;
            acc_gx[l] += (double)gd * (double)((xr[j] - m) * rs);
        }
        real mean_g = (real)(lanes_total(acc_g) / (double)D), mean_gx = (real)(lanes_total(acc_gx) / (double)D);
        real *dxr = DX + s * D;
#pragma omp simd
        for (int64_t d = 0; d < D; d++) {
            real gd = g[d] * ((real)1 + sc[d]);
            dxr[d] += rs * (gd - mean_g - (xr[d] - m) * rs * mean_gx);
        }
    }
}

/* dst[i] += (real)acc[i] */
static void add_sums(real *dst, const double *acc, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] += (real)acc[i];
}

vfm_status CPU_FN(layernorm_modulate_backward)(Tensor *dx, Tensor *dshift, Tensor *dscale, const Tensor *dy,
                                               const Tensor *x, const Tensor *mean, const Tensor *rstd,
                                               const Tensor *scale, const Tensor *tok2sample) {
    int64_t S = tensor_rows(x), D = tensor_dim(x, -1);
    const real *X = CRDATA(x), *DY = CRDATA(dy), *M = CRDATA(mean), *R = CRDATA(rstd);
    const int32_t *T2S = I32DATA(tok2sample);
    real *DX = dx ? RDATA(dx) : NULL;
    real *zeros = scale || !DX ? NULL : calloc((size_t)D + 1, sizeof(real));
    if (!scale && DX && !zeros)
        return vfm_fail(VFM_ERR_NOMEM, "layernorm_modulate_backward: no memory for a row of %lld", (long long)D);
    if (DX) {
        const real *SC = scale ? CRDATA(scale) : zeros;
        int64_t sc_stride = scale ? D : 0, groups = row_groups(S);
#pragma omp parallel for schedule(static) if (S * D >= NORM_PARALLEL_MIN)
        for (int64_t grp = 0; grp < groups; grp++)
            layernorm_modulate_dx_rows(DX, DY, X, M, R, SC, sc_stride, T2S, grp * NORM_ROWS, group_end(grp, S), D);
    }
    free(zeros);

    if (!dshift && !dscale) return VFM_OK;
    LnTerms c = {X, DY, M, R, D};
    return sample_column_sums("layernorm_modulate_backward", dshift ? RDATA(dshift) : NULL,
                              dscale ? RDATA(dscale) : NULL, tensor_rows(dshift ? dshift : dscale), S, D, T2S,
                              ln_terms, &c);
}

VEC_CLONES static void gated_residual_rows(real *O, const real *X, const real *Y, const real *GT,
                                           const int32_t *T2S, int64_t s0, int64_t s1, int64_t D) {
    for (int64_t s = s0; s < s1; s++) {
        int64_t b = T2S[s];
        real *o = O + s * D;
        const real *xr = X + s * D, *yr = Y + s * D;
        if (b < 0) {
            if (o != xr) memcpy(o, xr, (size_t)D * sizeof(real));
        } else if (GT) {
            const real *g = GT + b * D;
#pragma omp simd
            for (int64_t d = 0; d < D; d++) o[d] = xr[d] + g[d] * yr[d];
        } else {
#pragma omp simd
            for (int64_t d = 0; d < D; d++) o[d] = xr[d] + yr[d];
        }
    }
}

vfm_status CPU_FN(gated_residual_forward)(Tensor *out, const Tensor *x, const Tensor *y, const Tensor *gate,
                                          const Tensor *tok2sample) {
    int64_t S = tensor_rows(x), D = tensor_dim(x, -1), groups = row_groups(S);
    real *O = RDATA(out);
    const real *X = CRDATA(x), *Y = CRDATA(y), *GT = gate ? CRDATA(gate) : NULL;
    const int32_t *T2S = I32DATA(tok2sample);
#pragma omp parallel for schedule(static) if (S * D >= NORM_PARALLEL_MIN)
    for (int64_t grp = 0; grp < groups; grp++)
        gated_residual_rows(O, X, Y, GT, T2S, grp * NORM_ROWS, group_end(grp, S), D);
    return VFM_OK;
}

/* dx += dout (when DX is not NULL); dy = gate⊙dout (dout for no gate, 0 on padding rows), rows [s0, s1). */
VEC_CLONES static void gated_residual_grad_rows(real *DX, real *DY, const real *DO, const real *GT,
                                                const int32_t *T2S, int64_t s0, int64_t s1, int64_t D) {
    for (int64_t s = s0; s < s1; s++) {
        const real *g = DO + s * D;
        if (DX) {
            real *dxr = DX + s * D;
#pragma omp simd
            for (int64_t d = 0; d < D; d++) dxr[d] += g[d];
        }
        if (!DY) continue;
        int64_t b = T2S[s];
        real *dyr = DY + s * D;
        if (b < 0) {
            memset(dyr, 0, (size_t)D * sizeof(real));
        } else if (GT) {
            const real *gt = GT + b * D;
#pragma omp simd
            for (int64_t d = 0; d < D; d++) dyr[d] = gt[d] * g[d];
        } else if (dyr != g) {
            memcpy(dyr, g, (size_t)D * sizeof(real));
        }
    }
}

/* dgate reads dout before dy overwrites it when they alias: the column sums finish (the barrier
 * of their loop) before the row loop starts. */
vfm_status CPU_FN(gated_residual_backward)(Tensor *dx, Tensor *dy, Tensor *dgate, const Tensor *dout,
                                           const Tensor *y, const Tensor *gate, const Tensor *tok2sample) {
    int64_t S = tensor_rows(dout), D = tensor_dim(dout, -1);
    const real *DO = CRDATA(dout), *Y = CRDATA(y), *GT = gate ? CRDATA(gate) : NULL;
    const int32_t *T2S = I32DATA(tok2sample);
    real *DX = dx && dx->data != dout->data ? RDATA(dx) : NULL, *DY = dy ? RDATA(dy) : NULL;
    int64_t B = dgate ? tensor_rows(dgate) : 0;
    double *acc = NULL;
    if (dgate && !(acc = calloc((size_t)(B * D) + 1, sizeof(double))))
        return vfm_fail(VFM_ERR_NOMEM, "gated_residual_backward: no memory for %lld x %lld sums", (long long)B,
                        (long long)D);
    int64_t blocks = dgate ? column_blocks(D) : 0, groups = DX || DY ? row_groups(S) : 0;
#pragma omp parallel if (S * D >= NORM_PARALLEL_MIN)
    {
#pragma omp for schedule(static)
        for (int64_t blk = 0; blk < blocks; blk++) {
            int64_t d0 = blk * SAMPLE_GRAD_COLS, d1 = d0 + SAMPLE_GRAD_COLS < D ? d0 + SAMPLE_GRAD_COLS : D;
            gate_column_sums(acc, DO, Y, T2S, S, D, d0, d1);
        }
#pragma omp for schedule(static)
        for (int64_t grp = 0; grp < groups; grp++)
            gated_residual_grad_rows(DX, DY, DO, GT, T2S, grp * NORM_ROWS, group_end(grp, S), D);
    }
    if (dgate) add_sums(RDATA(dgate), acc, B * D);
    free(acc);
    return VFM_OK;
}

VEC_CLONES static void rmsnorm_rows(real *Y, real *R, const real *X, const real *W, int64_t n0, int64_t n1,
                                    int64_t d, double eps) {
    for (int64_t n = n0; n < n1; n++) {
        const real *xr = X + n * d;
        real *yr = Y + n * d;
        real rs = (real)(1.0 / sqrt(lane_sum_sq_dev(xr, d, 0.0) / (double)d + eps));
        R[n] = rs;
        if (W) {
#pragma omp simd
            for (int64_t j = 0; j < d; j++) yr[j] = xr[j] * rs * W[j];
        } else {
#pragma omp simd
            for (int64_t j = 0; j < d; j++) yr[j] = xr[j] * rs;
        }
    }
}

vfm_status CPU_FN(rmsnorm_forward)(Tensor *y, Tensor *rstd, const Tensor *x, const Tensor *w, float eps) {
    int64_t N = tensor_rows(x), d = tensor_dim(x, -1), groups = row_groups(N);
    real *Y = RDATA(y), *R = RDATA(rstd);
    const real *X = CRDATA(x), *W = w ? CRDATA(w) : NULL;
#pragma omp parallel for schedule(static) if (N * d >= NORM_PARALLEL_MIN)
    for (int64_t grp = 0; grp < groups; grp++) rmsnorm_rows(Y, R, X, W, grp * NORM_ROWS, group_end(grp, N), d, (double)eps);
    return VFM_OK;
}

/* dx = rstd·(g - x̂·mean(g⊙x̂)), g = dy⊙w the gradient of x̂, rows [n0, n1) (without a weight W is
 * a row of ones: g·1 is g exactly). */
VEC_CLONES static void rmsnorm_dx_rows(real *DX, const real *DY, const real *X, const real *R, const real *W,
                                       int64_t n0, int64_t n1, int64_t d) {
    for (int64_t n = n0; n < n1; n++) {
        const real *xr = X + n * d, *g = DY + n * d;
        real rs = R[n];
        double acc[SUM_LANES] = {0};
        int64_t j = 0;
        for (; j + SUM_LANES <= d; j += SUM_LANES)
            for (int l = 0; l < SUM_LANES; l++)
                acc[l] += (double)(g[j + l] * W[j + l]) * (double)(xr[j + l] * rs);
        for (int l = 0; j < d; j++, l++) acc[l] += (double)(g[j] * W[j]) * (double)(xr[j] * rs);
        real mean_gx = (real)(lanes_total(acc) / (double)d);
        real *dxr = DX + n * d;
#pragma omp simd
        for (int64_t j2 = 0; j2 < d; j2++) dxr[j2] = rs * (g[j2] * W[j2] - xr[j2] * rs * mean_gx);
    }
}

/* p[j] += Σ over rows [lo, hi), in order, of dy[n,j]·x̂[n,j] */
VEC_CLONES static void rmsnorm_dw_rows(double *p, const real *DY, const real *X, const real *R, int64_t lo, int64_t hi,
                                       int64_t d) {
    for (int64_t n = lo; n < hi; n++) {
        const real *xr = X + n * d, *g = DY + n * d;
        real rs = R[n];
#pragma omp simd
        for (int64_t j = 0; j < d; j++) p[j] += (double)g[j] * (double)(xr[j] * rs);
    }
}

vfm_status CPU_FN(rmsnorm_backward)(Tensor *dx, Tensor *dw, const Tensor *dy, const Tensor *x, const Tensor *rstd,
                                    const Tensor *w) {
    int64_t N = tensor_rows(x), d = tensor_dim(x, -1);
    const real *X = CRDATA(x), *DY = CRDATA(dy), *R = CRDATA(rstd);
    real *DX = dx ? RDATA(dx) : NULL, *ones = w ? NULL : malloc((size_t)(d + 1) * sizeof(real));
    double *partial = dw ? calloc((size_t)(CPU_REDUCE_CHUNKS * d) + 1, sizeof(double)) : NULL;
    if ((dw && !partial) || (!w && !ones)) {
        free(partial);
        free(ones);
        return vfm_fail(VFM_ERR_NOMEM, "rmsnorm_backward: no memory for %d x %lld sums", CPU_REDUCE_CHUNKS,
                        (long long)d);
    }
    for (int64_t j = 0; ones && j < d; j++) ones[j] = 1;
    const real *W = w ? CRDATA(w) : ones;
    int64_t groups = DX ? row_groups(N) : 0, chunks = dw ? CPU_REDUCE_CHUNKS : 0;
#pragma omp parallel if (N * d >= NORM_PARALLEL_MIN)
    {
#pragma omp for schedule(static)
        for (int64_t grp = 0; grp < groups; grp++) rmsnorm_dx_rows(DX, DY, X, R, W, grp * NORM_ROWS, group_end(grp, N), d);
#pragma omp for schedule(static)
        for (int64_t c = 0; c < chunks; c++)
            rmsnorm_dw_rows(partial + c * d, DY, X, R, N * c / CPU_REDUCE_CHUNKS, N * (c + 1) / CPU_REDUCE_CHUNKS, d);
    }
    if (dw) {
        real *DW = RDATA(dw);
        for (int64_t j = 0; j < d; j++) {
            double total = 0;
            for (int c = 0; c < CPU_REDUCE_CHUNKS; c++) total += partial[(int64_t)c * d + j];
            DW[j] += (real)total;
        }
    }
    free(partial);
    free(ones);
    return VFM_OK;
}
