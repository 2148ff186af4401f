/* CPU backend of the flow-matching and DDPM ops: per-sample noise mixing, the learned-sigma
 * channel halves, the DDPM variational-bound term (KL, or the decoder NLL at t = 0) with its
 * gradient, and the elementwise reverse step. Per-token ops never read padding rows. */
#include "real.h"
#include "row_sums.h"
#include "ops/ddpm_vb_element.h"

vfm_status CPU_FN(noise_mix)(Tensor *x_t, const Tensor *x0, const Tensor *noise, const Tensor *a, const Tensor *s,
                             const Tensor *tok2sample) {
    int64_t S = tensor_dim(x0, 0), C = tensor_dim(x0, 1);
    const real *X0 = CRDATA(x0), *N = CRDATA(noise), *A = CRDATA(a), *SS = CRDATA(s);
    const int32_t *map = I32DATA(tok2sample);
    real *XT = RDATA(x_t);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < S; r++) {
        int32_t b = map[r];
        for (int64_t c = 0; c < C; c++) XT[r * C + c] = b < 0 ? 0 : A[b] * X0[r * C + c] + SS[b] * N[r * C + c];
    }
    return VFM_OK;
}

vfm_status CPU_FN(channel_halves_split)(Tensor *first, Tensor *second, const Tensor *x, int64_t group) {
    int64_t S = tensor_dim(x, 0), W = tensor_dim(x, 1), n = W / (2 * group);
    const real *X = CRDATA(x);
    real *F = RDATA(first), *Sd = second ? RDATA(second) : NULL;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < S; r++)
        for (int64_t j = 0; j < n; j++)
            for (int64_t c = 0; c < group; c++) {
                F[r * (W / 2) + j * group + c] = X[r * W + j * 2 * group + c];
                if (Sd) Sd[r * (W / 2) + j * group + c] = X[r * W + j * 2 * group + group + c];
            }
    return VFM_OK;
}

vfm_status CPU_FN(channel_halves_merge)(Tensor *x, const Tensor *first, const Tensor *second, int64_t group) {
    int64_t S = tensor_dim(x, 0), W = tensor_dim(x, 1), n = W / (2 * group);
    const real *F = CRDATA(first), *Sd = second ? CRDATA(second) : NULL;
    real *X = RDATA(x);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < S; r++)
        for (int64_t j = 0; j < n; j++)
            for (int64_t c = 0; c < group; c++) {
                X[r * W + j * 2 * group + c] = F[r * (W / 2) + j * group + c];
                X[r * W + j * 2 * group + group + c] = Sd ? Sd[r * (W / 2) + j * group + c] : 0;
            }
    return VFM_OK;
}

/* ---- the variational bound ------------------------------------------------------------- */

/* The rows' data for vb_term. */
typedef struct VbRows {
    const real *V, *E, *XT, *X0, *K, *M;
    int64_t C;
} VbRows;

/* mask·mean_c vb of row s (0 without reading it when the mask is 0) */
static double vb_term(const void *ctx, int64_t s, int32_t b) {
    const VbRows *r = ctx;
    if (r->M[s] == 0) return 0;
    int64_t C = r->C;
    double sum = 0;
    DdpmVbCoef k = DDPM_VB_COEF(r->K + b * DDPM_VB_NCOEF);
    for (int64_t c = 0; c < C; c++)
        sum += ddpm_vb_element(r->V[s * C + c], r->E[s * C + c], r->XT[s * C + c], r->X0[s * C + c], &k, NULL);
    return (double)r->M[s] * (sum / (double)C);
}

static VbRows vb_rows(const Tensor *v, const Tensor *eps, const Tensor *x_t, const Tensor *x0, const Tensor *coef,
                      const Tensor *mask) {
    return (VbRows){CRDATA(v), CRDATA(eps), CRDATA(x_t), CRDATA(x0), CRDATA(coef), CRDATA(mask), tensor_dim(v, 1)};
}

vfm_status CPU_FN(ddpm_vb_forward)(Tensor *loss, Tensor *sample_sum, const Tensor *v, const Tensor *eps,
                                   const Tensor *x_t, const Tensor *x0, const Tensor *coef, const Tensor *mask,
                                   const Tensor *tok2sample) {
    double terms, masks;
    VbRows rows = vb_rows(v, eps, x_t, x0, coef, mask);
    int64_t S = tensor_dim(v, 0), B = tensor_dim(coef, 0);
    masked_row_sums(&terms, &masks, S, I32DATA(tok2sample), CRDATA(mask), vb_term, &rows);
    RDATA(loss)[0] = masks != 0 ? (real)(terms / masks) : 0;
    if (sample_sum) masked_sample_sums(RDATA(sample_sum), NULL, B, S, I32DATA(tok2sample), CRDATA(mask), vb_term, &rows);
    return VFM_OK;
}

vfm_status CPU_FN(ddpm_vb_backward)(Tensor *dv, double dloss, const Tensor *v, const Tensor *eps, const Tensor *x_t,
                                    const Tensor *x0, const Tensor *coef, const Tensor *mask, const Tensor *tok2sample) {
    double unused, masks;
    int64_t S = tensor_dim(v, 0), C = tensor_dim(v, 1);
    masked_row_sums(&unused, &masks, S, I32DATA(tok2sample), CRDATA(mask), NULL, NULL);
    const real *V = CRDATA(v), *E = CRDATA(eps), *XT = CRDATA(x_t), *X0 = CRDATA(x0), *K = CRDATA(coef), *M = CRDATA(mask);
    const int32_t *map = I32DATA(tok2sample);
    real *dV = RDATA(dv);
#pragma omp parallel for schedule(static)
    for (int64_t s = 0; s < S; s++) {
        int32_t b = map[s];
        double m = b < 0 ? 0 : (double)M[s];
        double coefficient = (m == 0 || masks == 0) ? 0 : dloss * m / ((double)C * masks);
        DdpmVbCoef k = DDPM_VB_COEF(K + (b < 0 ? 0 : b) * DDPM_VB_NCOEF);
        for (int64_t c = 0; c < C; c++) {
            int64_t i = s * C + c;
            double g = 0;
            if (coefficient != 0) ddpm_vb_element(V[i], E[i], XT[i], X0[i], &k, &g);
            dV[i] = (real)(coefficient * g);
        }
    }
    return VFM_OK;
}

vfm_status CPU_FN(ddpm_step)(Tensor *out, const Tensor *x, const Tensor *eps, const Tensor *v, const Tensor *z,
                             const DdpmStepCoef *c) {
    int64_t n = tensor_numel(x);
    const real *X = CRDATA(x), *E = CRDATA(eps), *V = v ? CRDATA(v) : NULL, *Z = z ? CRDATA(z) : NULL;
    real *O = RDATA(out);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
        double xi = X[i], ei = E[i];
        double pred_x0 = c->recip_ac * xi - c->recipm1_ac * ei;
        double mean = c->c_x0 * pred_x0 + c->c_xt * xi + c->c_eps * ei;
        if (Z) {
            double logvar = c->fixed_logvar;
            if (V) {
                double f = 0.5 * ((double)V[i] + 1.0);
                logvar = f * c->max_log + (1.0 - f) * c->min_log;
            }
            mean += exp(0.5 * logvar) * (double)Z[i];
        }
        O[i] = (real)mean;
    }
    return VFM_OK;
}
