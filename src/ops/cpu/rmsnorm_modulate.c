/* CPU backend: RMSNorm with a weight fused with adaLN modulate (MovieGen's block norm), forward and
 * backward. Row statistics are summed in double; the per-sample (dshift, dscale) sums over column
 * blocks in parallel with the rows in ascending order inside a block, the weight gradient over
 * CPU_REDUCE_CHUNKS fixed row chunks: neither depends on the thread count. */
#include <stdlib.h>
#include <string.h>

#include "real.h"
#include "sample_sums.h"
#include "vec_math.h"

/* ŵ_d: the weight (1 without one) */
static inline real weight_at(const real *W, int64_t d) { return W ? W[d] : (real)1; }

vfm_status CPU_FN(rmsnorm_modulate_forward)(Tensor *y, Tensor *rstd, const Tensor *x, const Tensor *w,
                                            const Tensor *shift, const Tensor *scale, const Tensor *tok2sample,
                                            float eps) {
    int64_t S = tensor_rows(x), D = tensor_dim(x, -1);
    real *Y = RDATA(y), *R = RDATA(rstd);
    const real *X = CRDATA(x), *W = w ? CRDATA(w) : NULL;
    const real *SH = shift ? CRDATA(shift) : NULL, *SC = scale ? CRDATA(scale) : NULL;
    const int32_t *T2S = I32DATA(tok2sample);
#pragma omp parallel for schedule(static)
    for (int64_t s = 0; s < S; s++) {
        real *yr = Y + s * D;
        int64_t b = T2S[s];
        if (b < 0) {
            memset(yr, 0, (size_t)D * sizeof(real));
            R[s] = 0;
            continue;
        }
        const real *xr = X + s * D;
        double sq = 0;
        for (int64_t d = 0; d < D; d++) sq += (double)xr[d] * (double)xr[d];
        R[s] = (real)(1.0 / sqrt(sq / (double)D + (double)eps)); /* the saved (rounded) value both passes use */
        real rs = R[s];
        const real *sh = SH ? SH + b * D : NULL, *sc = SC ? SC + b * D : NULL;
        for (int64_t d = 0; d < D; d++) {
            real v = xr[d] * rs * weight_at(W, d);
            if (sc) v = v * ((real)1 + sc[d]);
            if (sh) v = v + sh[d];
            yr[d] = v;
        }
    }
    return VFM_OK;
}

/* dshift's term dy, dscale's dy·n (n = x̂⊙w) */
typedef struct {
    const real *X, *DY, *R, *W;
    int64_t D;
} RmsTerms;
VEC_CLONES static void rms_terms(const void *ctx, int64_t s, int64_t d0, int64_t d1, double *acc0, double *acc1) {
    const RmsTerms *c = ctx;
    const real *xr = c->X + s * c->D, *g = c->DY + s * c->D, *W = c->W;
    real rs = c->R[s];
#pragma omp simd
    for (int64_t d = d0; d < d1; d++) {
        acc0[d] += (double)g[d];
        acc1[d] += (double)g[d] * (double)(xr[d] * rs * weight_at(W, d));
    }
}

/* With n = x̂⊙w (x̂ = x·rstd) and g = dy⊙(1+scale) the gradient of n:
 *   dx += rstd·(g⊙w − x̂·mean(g⊙w⊙x̂)),  dw += Σ_s g⊙x̂,  dshift += Σ_s dy,  dscale += Σ_s dy⊙n. */
vfm_status CPU_FN(rmsnorm_modulate_backward)(Tensor *dx, Tensor *dw, Tensor *dshift, Tensor *dscale, const Tensor *dy,
                                             const Tensor *x, const Tensor *rstd, const Tensor *w, const Tensor *scale,
                                             const Tensor *tok2sample) {
    int64_t S = tensor_rows(x), D = tensor_dim(x, -1);
    const real *X = CRDATA(x), *DY = CRDATA(dy), *R = CRDATA(rstd), *W = w ? CRDATA(w) : NULL;
    const real *SC = scale ? CRDATA(scale) : NULL;
    const int32_t *T2S = I32DATA(tok2sample);
#define G_AT(s, b, d) (SC ? DY[(s) * D + (d)] * ((real)1 + SC[(b) * D + (d)]) : DY[(s) * D + (d)])

    if (dx) {
        real *DX = RDATA(dx);
#pragma omp parallel for schedule(static)
        for (int64_t s = 0; s < S; s++) {
            int64_t b = T2S[s];
            if (b < 0) continue;
            const real *xr = X + s * D;
            real rs = R[s];
            double sum = 0;
            for (int64_t d = 0; d < D; d++) sum += (double)(G_AT(s, b, d) * weight_at(W, d)) * (double)(xr[d] * rs);
            real mean = (real)(sum / (double)D);
            real *dxr = DX + s * D;
            for (int64_t d = 0; d < D; d++) dxr[d] += rs * (G_AT(s, b, d) * weight_at(W, d) - xr[d] * rs * mean);
        }
    }

    if (dw) {
        double *partial = calloc((size_t)(CPU_REDUCE_CHUNKS * D) + 1, sizeof(double));
        if (!partial)
            return vfm_fail(VFM_ERR_NOMEM, "rmsnorm_modulate_backward: no memory for %d x %lld sums", CPU_REDUCE_CHUNKS,
                            (long long)D);
#pragma omp parallel for schedule(static)
        for (int c = 0; c < CPU_REDUCE_CHUNKS; c++) {
            int64_t lo = S * c / CPU_REDUCE_CHUNKS, hi = S * (c + 1) / CPU_REDUCE_CHUNKS;
            double *p = partial + (int64_t)c * D;
            for (int64_t s = lo; s < hi; s++) {
                int64_t b = T2S[s];
                if (b < 0) continue;
                for (int64_t d = 0; d < D; d++) p[d] += (double)G_AT(s, b, d) * (double)(X[s * D + d] * R[s]);
            }
        }
        real *DW = RDATA(dw);
        for (int64_t d = 0; d < D; d++) {
            double total = 0;
            for (int c = 0; c < CPU_REDUCE_CHUNKS; c++) total += partial[(int64_t)c * D + d];
            DW[d] += (real)total;
        }
        free(partial);
    }
#undef G_AT

    if (!dshift && !dscale) return VFM_OK;
    RmsTerms c = {X, DY, R, W, D};
    return sample_column_sums("rmsnorm_modulate_backward", dshift ? RDATA(dshift) : NULL,
                              dscale ? RDATA(dscale) : NULL, tensor_rows(dshift ? dshift : dscale), S, D, T2S,
                              rms_terms, &c);
}
