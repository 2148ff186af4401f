/* CPU backend: LayerNorm fused with adaLN modulate, the gated residual, RMSNorm; forward and
 * backward. Row statistics are summed in double. Per-sample parameter gradients are summed over
 * column blocks in parallel with the rows in ascending order inside a block; the RMSNorm weight
 * gradient over CPU_REDUCE_CHUNKS fixed row chunks. Neither depends on the thread count. */
#include <stdlib.h>
#include <string.h>

#include "real.h"
#include "sample_sums.h"

static inline int64_t column_blocks(int64_t D) { return (D + SAMPLE_GRAD_COLS - 1) / SAMPLE_GRAD_COLS; }

vfm_status CPU_FN(layernorm_modulate_forward)(Tensor *y, Tensor *mean, Tensor *rstd, const Tensor *x,
                                              const Tensor *shift, const Tensor *scale, const Tensor *tok2sample,
                                              float eps) {
    int64_t S = tensor_rows(x), D = tensor_dim(x, -1);
    real *Y = RDATA(y), *M = RDATA(mean), *R = RDATA(rstd);
    const real *X = CRDATA(x), *SH = shift ? CRDATA(shift) : NULL, *SC = scale ? CRDATA(scale) : NULL;
    const int32_t *T2S = I32DATA(tok2sample);
#pragma omp parallel for schedule(static)
    for (int64_t s = 0; s < S; s++) {
        real *yr = Y + s * D;
        int64_t b = T2S[s];
        if (b < 0) {
            memset(yr, 0, (size_t)D * sizeof(real));
            M[s] = R[s] = 0;
            continue;
        }
        const real *xr = X + s * D;
        double sum = 0, sq = 0;
        for (int64_t d = 0; d < D; d++) sum += (double)xr[d];
        double mu = sum / (double)D;
        for (int64_t d = 0; d < D; d++) sq += ((double)xr[d] - mu) * ((double)xr[d] - mu);
        /* the saved (rounded) statistics are what both passes normalise with */
        M[s] = (real)mu;
        R[s] = (real)(1.0 / sqrt(sq / (double)D + (double)eps));
        real m = M[s], rs = R[s];
        const real *sh = SH ? SH + b * D : NULL, *sc = SC ? SC + b * D : NULL;
        for (int64_t d = 0; d < D; d++) {
            real v = (xr[d] - m) * rs;
            if (sc) v = v * ((real)1 + sc[d]);
            if (sh) v = v + sh[d];
            yr[d] = v;
        }
    }
    return VFM_OK;
}

/* dshift's term dy, dscale's dy·x̂ */
typedef struct {
    const real *X, *DY, *M, *R;
    int64_t D;
} LnTerms;
static void ln_terms(const void *ctx, int64_t s, int64_t d0, int64_t d1, double *acc0, double *acc1) {
    const LnTerms *c = ctx;
    const real *xr = c->X + s * c->D, *g = c->DY + s * c->D;
    real m = c->M[s], rs = c->R[s];
    for (int64_t d = d0; d < d1; d++) {
        acc0[d] += (double)g[d];
        acc1[d] += (double)g[d] * (double)((xr[d] - m) * rs);
    }
}

vfm_status CPU_FN(layernorm_modulate_backward)(Tensor *dx, Tensor *dshift, Tensor *dscale, const Tensor *dy,
                                               const Tensor *x, const Tensor *mean, const Tensor *rstd,
                                               const Tensor *scale, const Tensor *tok2sample) {
    int64_t S = tensor_rows(x), D = tensor_dim(x, -1);
    const real *X = CRDATA(x), *DY = CRDATA(dy), *M = CRDATA(mean), *R = CRDATA(rstd);
    const real *SC = scale ? CRDATA(scale) : NULL;
    const int32_t *T2S = I32DATA(tok2sample);

    if (dx) {
        real *DX = RDATA(dx);
#pragma omp parallel for schedule(static)
        for (int64_t s = 0; s < S; s++) {
            int64_t b = T2S[s];
            if (b < 0) continue;
            const real *xr = X + s * D, *g = DY + s * D, *sc = SC ? SC + b * D : NULL;
            real m = M[s], rs = R[s];
            /* dx = rstd·(g - mean(g) - x̂·mean(g⊙x̂)), g = dy⊙(1+scale) the gradient of x̂ */
            double sum_g = 0, sum_gx = 0;
            for (int64_t d = 0; d < D; d++) {
                real gd = sc ? g[d] * ((real)1 + sc[d]) : g[d];
                sum_g += (double)gd;
                sum_gx += (double)gd * (double)((xr[d] - m) * rs);
            }
            real mean_g = (real)(sum_g / (double)D), mean_gx = (real)(sum_gx / (double)D);
            real *dxr = DX + s * D;
            for (int64_t d = 0; d < D; d++) {
                real gd = sc ? g[d] * ((real)1 + sc[d]) : g[d];
                dxr[d] += rs * (gd - mean_g - (xr[d] - m) * rs * mean_gx);
            }
        }
    }

    if (!dshift && !dscale) return VFM_OK;
    LnTerms c = {X, DY, M, R, D};
    return sample_column_sums("layernorm_modulate_backward", dshift ? RDATA(dshift) : NULL,
                              dscale ? RDATA(dscale) : NULL, tensor_rows(dshift ? dshift : dscale), S, D, T2S,
                              ln_terms, &c);
}

vfm_status CPU_FN(gated_residual_forward)(Tensor *out, const Tensor *x, const Tensor *y, const Tensor *gate,
                                          const Tensor *tok2sample) {
    int64_t S = tensor_rows(x), D = tensor_dim(x, -1);
    real *O = RDATA(out);
    const real *X = CRDATA(x), *Y = CRDATA(y), *GT = gate ? CRDATA(gate) : NULL;
    const int32_t *T2S = I32DATA(tok2sample);
#pragma omp parallel for schedule(static)
    for (int64_t s = 0; s < S; s++) {
        int64_t b = T2S[s];
        real *o = O + s * D;
        const real *xr = X + s * D, *yr = Y + s * D;
        if (b < 0) {
            if (o != xr) memcpy(o, xr, (size_t)D * sizeof(real));
            continue;
        }
        if (GT) {
            const real *g = GT + b * D;
            for (int64_t d = 0; d < D; d++) o[d] = xr[d] + g[d] * yr[d];
        } else {
            for (int64_t d = 0; d < D; d++) o[d] = xr[d] + yr[d];
        }
    }
    return VFM_OK;
}

/* Order matters when dy aliases dout: dgate and dx read dout before dy overwrites it. */
vfm_status CPU_FN(gated_residual_backward)(Tensor *dx, Tensor *dy, Tensor *dgate, const Tensor *dout,
                                           const Tensor *y, const Tensor *gate, const Tensor *tok2sample) {
    int64_t S = tensor_rows(dout), D = tensor_dim(dout, -1);
    const real *DO = CRDATA(dout), *Y = CRDATA(y), *GT = gate ? CRDATA(gate) : NULL;
    const int32_t *T2S = I32DATA(tok2sample);

    if (dgate) {
        int64_t B = tensor_rows(dgate);
        double *acc = calloc((size_t)(B * D) + 1, sizeof(double));
        if (!acc)
            return vfm_fail(VFM_ERR_NOMEM, "gated_residual_backward: no memory for %lld x %lld sums", (long long)B,
                            (long long)D);
        int64_t blocks = column_blocks(D);
#pragma omp parallel for schedule(static)
        for (int64_t blk = 0; blk < blocks; blk++) {
            int64_t d0 = blk * SAMPLE_GRAD_COLS, d1 = d0 + SAMPLE_GRAD_COLS < D ? d0 + SAMPLE_GRAD_COLS : D;
            for (int64_t s = 0; s < S; s++) {
                int64_t b = T2S[s];
                if (b < 0) continue;
                const real *g = DO + s * D, *yr = Y + s * D;
                for (int64_t d = d0; d < d1; d++) acc[b * D + d] += (double)g[d] * (double)yr[d];
            }
        }
        real *DG = RDATA(dgate);
        for (int64_t i = 0; i < B * D; i++) DG[i] += (real)acc[i];
        free(acc);
    }

    if (dx && dx->data != dout->data) {
        real *DX = RDATA(dx);
        int64_t n = S * D;
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n; i++) DX[i] += DO[i];
    }

    if (dy) {
        real *DY = RDATA(dy);
#pragma omp parallel for schedule(static)
        for (int64_t s = 0; s < S; s++) {
            int64_t b = T2S[s];
            real *dyr = DY + s * D;
            const real *g = DO + s * D;
            if (b < 0) {
                memset(dyr, 0, (size_t)D * sizeof(real));
            } else if (GT) {
                const real *gt = GT + b * D;
                for (int64_t d = 0; d < D; d++) dyr[d] = gt[d] * g[d];
            } else if (dyr != g) {
                memcpy(dyr, g, (size_t)D * sizeof(real));
            }
        }
    }
    return VFM_OK;
}

vfm_status CPU_FN(rmsnorm_forward)(Tensor *y, Tensor *rstd, const Tensor *x, const Tensor *w, float eps) {
    int64_t N = tensor_rows(x), d = tensor_dim(x, -1);
    real *Y = RDATA(y), *R = RDATA(rstd);
    const real *X = CRDATA(x), *W = w ? CRDATA(w) : NULL;
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++) {
        const real *xr = X + n * d;
        real *yr = Y + n * d;
        double sq = 0;
        for (int64_t j = 0; j < d; j++) sq += (double)xr[j] * (double)xr[j];
        real rs = (real)(1.0 / sqrt(sq / (double)d + (double)eps));
        R[n] = rs;
        for (int64_t j = 0; j < d; j++) yr[j] = W ? xr[j] * rs * W[j] : xr[j] * rs;
    }
    return VFM_OK;
}

vfm_status CPU_FN(rmsnorm_backward)(Tensor *dx, Tensor *dw, const Tensor *dy, const Tensor *x, const Tensor *rstd,
                                    const Tensor *w) {
    int64_t N = tensor_rows(x), d = tensor_dim(x, -1);
    const real *X = CRDATA(x), *DY = CRDATA(dy), *R = CRDATA(rstd), *W = w ? CRDATA(w) : NULL;

    if (dx) {
        real *DX = RDATA(dx);
#pragma omp parallel for schedule(static)
        for (int64_t n = 0; n < N; n++) {
            const real *xr = X + n * d, *g = DY + n * d;
            real rs = R[n];
            /* dx = rstd·(g - x̂·mean(g⊙x̂)), g = dy⊙w the gradient of x̂ */
            double sum_gx = 0;
            for (int64_t j = 0; j < d; j++) sum_gx += (double)(W ? g[j] * W[j] : g[j]) * (double)(xr[j] * rs);
            real mean_gx = (real)(sum_gx / (double)d);
            real *dxr = DX + n * d;
            for (int64_t j = 0; j < d; j++) dxr[j] = rs * ((W ? g[j] * W[j] : g[j]) - xr[j] * rs * mean_gx);
        }
    }

    if (dw) {
        double *partial = calloc((size_t)(CPU_REDUCE_CHUNKS * d) + 1, sizeof(double));
        if (!partial)
            return vfm_fail(VFM_ERR_NOMEM, "rmsnorm_backward: no memory for %d x %lld sums", CPU_REDUCE_CHUNKS,
                            (long long)d);
#pragma omp parallel for schedule(static)
        for (int c = 0; c < CPU_REDUCE_CHUNKS; c++) {
            int64_t lo = N * c / CPU_REDUCE_CHUNKS, hi = N * (c + 1) / CPU_REDUCE_CHUNKS;
            double *p = partial + (int64_t)c * d;
            for (int64_t n = lo; n < hi; n++) {
                const real *xr = X + n * d, *g = DY + n * d;
                real rs = R[n];
                for (int64_t j = 0; j < d; j++) p[j] += (double)g[j] * (double)(xr[j] * rs);
            }
        }
        real *DW = RDATA(dw);
        for (int64_t j = 0; j < d; j++) {
            double total = 0;
            for (int c = 0; c < CPU_REDUCE_CHUNKS; c++) total += partial[(int64_t)c * d + j];
            DW[j] += (real)total;
        }
        free(partial);
    }
    return VFM_OK;
}
