/* CPU backend: EDM preconditioning coefficients, noising, the denoised output D = c_skip·x_t +
 * c_out·F and its backward, and the masked per-sample-weighted MSE with its backward.
 * Per-token ops never read padding rows (tok2sample < 0) and write 0 there. */
#include "real.h"
#include "row_sums.h"

/* c_skip, c_out, c_in, c_noise, weight [B] (each may be NULL) from sigma[B], in double. */
vfm_status CPU_FN(edm_precondition)(Tensor *c_skip, Tensor *c_out, Tensor *c_in, Tensor *c_noise, Tensor *weight,
                                    const Tensor *sigma, float sigma_data) {
    int64_t B = tensor_dim(sigma, 0);
    const real *SG = CRDATA(sigma);
    double sd = sigma_data;
    for (int64_t b = 0; b < B; b++) {
        double s = SG[b], s2 = s * s + sd * sd, root = sqrt(s2);
        if (c_skip) RDATA(c_skip)[b] = (real)(sd * sd / s2);
        if (c_out) RDATA(c_out)[b] = (real)(s * sd / root);
        if (c_in) RDATA(c_in)[b] = (real)(1.0 / root);
        if (c_noise) RDATA(c_noise)[b] = (real)(0.25 * log(s));
        if (weight) RDATA(weight)[b] = (real)(s2 / ((s * sd) * (s * sd)));
    }
    return VFM_OK;
}

/* x_t[S,C] = x0[S,C] + σ[b]·noise[S,C], net_in[S,C] = c_in[b]·x_t (from the rounded x_t, as
 * torch does); σ, c_in [B]. */
vfm_status CPU_FN(edm_add_noise)(Tensor *x_t, Tensor *net_in, const Tensor *x0, const Tensor *noise,
                                 const Tensor *sigma, const Tensor *c_in, const Tensor *tok2sample) {
    int64_t S = tensor_dim(x0, 0), C = tensor_dim(x0, 1);
    const real *X0 = CRDATA(x0), *N = CRDATA(noise), *SG = CRDATA(sigma);
    const real *CI = net_in ? CRDATA(c_in) : NULL;
    const int32_t *map = I32DATA(tok2sample);
    real *XT = x_t ? RDATA(x_t) : NULL, *NI = net_in ? RDATA(net_in) : NULL;
#pragma omp parallel for schedule(static)
    for (int64_t s = 0; s < S; s++) {
        int32_t b = map[s];
        for (int64_t c = 0; c < C; c++) {
            int64_t i = s * C + c;
            real xt = b < 0 ? 0 : X0[i] + SG[b] * N[i];
            if (XT) XT[i] = xt;
            if (NI) NI[i] = b < 0 ? 0 : CI[b] * xt;
        }
    }
    return VFM_OK;
}

/* denoised[S,C] = c_skip[b]·x_t[S,C] + c_out[b]·F[S,C]; c_skip, c_out [B] */
vfm_status CPU_FN(edm_denoise)(Tensor *denoised, const Tensor *x_t, const Tensor *F, const Tensor *c_skip,
                               const Tensor *c_out, const Tensor *tok2sample) {
    int64_t S = tensor_dim(x_t, 0), C = tensor_dim(x_t, 1);
    const real *XT = CRDATA(x_t), *FF = CRDATA(F), *CS = CRDATA(c_skip), *CO = CRDATA(c_out);
    const int32_t *map = I32DATA(tok2sample);
    real *D = RDATA(denoised);
#pragma omp parallel for schedule(static)
    for (int64_t s = 0; s < S; s++) {
        int32_t b = map[s];
        for (int64_t c = 0; c < C; c++) {
            int64_t i = s * C + c;
            D[i] = b < 0 ? 0 : CS[b] * XT[i] + CO[b] * FF[i];
        }
    }
    return VFM_OK;
}

/* dF[S,C] = c_out[b]·ddenoised[S,C]; c_out [B] */
vfm_status CPU_FN(edm_denoise_backward)(Tensor *dF, const Tensor *ddenoised, const Tensor *c_out,
                                        const Tensor *tok2sample) {
    int64_t S = tensor_dim(ddenoised, 0), C = tensor_dim(ddenoised, 1);
    const real *dD = CRDATA(ddenoised), *CO = CRDATA(c_out);
    const int32_t *map = I32DATA(tok2sample);
    real *dFF = RDATA(dF);
#pragma omp parallel for schedule(static)
    for (int64_t s = 0; s < S; s++) {
        int32_t b = map[s];
        for (int64_t c = 0; c < C; c++) dFF[s * C + c] = b < 0 ? 0 : CO[b] * dD[s * C + c];
    }
    return VFM_OK;
}

/* mask[s]·w[b]·mean_c (pred-target)² of one real row, in double. A row with mask 0 contributes
 * exactly 0 (its values are not read, so a masked-out NaN cannot poison the loss). */
static double mse_row_term(const real *pred, const real *target, int64_t C, double mask, double w) {
    if (mask == 0) return 0;
    double sum = 0;
    for (int64_t c = 0; c < C; c++) {
        double d = (double)pred[c] - (double)target[c];
        sum += d * d;
    }
    return mask * w * (sum / (double)C);
}

/* The rows' data for mse_term. */
typedef struct MseRows {
    const real *P, *Tg, *W, *M;
    int64_t C;
} MseRows;

static double mse_term(const void *ctx, int64_t s, int32_t b) {
    const MseRows *r = ctx;
    return mse_row_term(r->P + s * r->C, r->Tg + s * r->C, r->C, (double)r->M[s], (double)r->W[b]);
}

static MseRows mse_rows(const Tensor *pred, const Tensor *target, const Tensor *weight, const Tensor *mask) {
    return (MseRows){CRDATA(pred), CRDATA(target), CRDATA(weight), CRDATA(mask), tensor_dim(pred, 1)};
}

/* loss[1] = Σ_s mask·w·mean_c(err²) / Σ_s mask (0 when Σ mask = 0), err = pred[S,C] − target[S,C],
 * w = weight[b], mask[S]; sample_sum[B], sample_count[B] optional per-sample sums (rows in order). */
vfm_status CPU_FN(weighted_mse_forward)(Tensor *loss, Tensor *sample_sum, Tensor *sample_count, const Tensor *pred,
                                        const Tensor *target, const Tensor *weight, const Tensor *mask,
                                        const Tensor *tok2sample) {
    double terms, masks;
    MseRows rows = mse_rows(pred, target, weight, mask);
    int64_t S = tensor_dim(pred, 0), B = tensor_dim(weight, 0);
    masked_row_sums(&terms, &masks, S, I32DATA(tok2sample), CRDATA(mask), mse_term, &rows);
    RDATA(loss)[0] = masks != 0 ? (real)(terms / masks) : 0;
    if (sample_sum || sample_count)
        masked_sample_sums(sample_sum ? RDATA(sample_sum) : NULL, sample_count ? RDATA(sample_count) : NULL, B, S,
                           I32DATA(tok2sample), CRDATA(mask), mse_term, &rows);
    return VFM_OK;
}

/* dpred[S,C] = dloss·mask·w·2(pred-target)/(C·Σmask); rows with mask 0 and padding rows get 0. */
vfm_status CPU_FN(weighted_mse_backward)(Tensor *dpred, double dloss, const Tensor *pred, const Tensor *target,
                                         const Tensor *weight, const Tensor *mask, const Tensor *tok2sample) {
    double unused, masks;
    int64_t S = tensor_dim(pred, 0), C = tensor_dim(pred, 1);
    masked_row_sums(&unused, &masks, S, I32DATA(tok2sample), CRDATA(mask), NULL, NULL);
    const real *P = CRDATA(pred), *Tg = CRDATA(target), *W = CRDATA(weight), *M = CRDATA(mask);
    const int32_t *map = I32DATA(tok2sample);
    real *dP = RDATA(dpred);
#pragma omp parallel for schedule(static)
    for (int64_t s = 0; s < S; s++) {
        int32_t b = map[s];
        double m = b < 0 ? 0 : (double)M[s];
        double coef = (m == 0 || masks == 0) ? 0 : dloss * m * (double)W[b] * 2.0 / ((double)C * masks);
        for (int64_t c = 0; c < C; c++) {
            int64_t i = s * C + c;
            dP[i] = coef == 0 ? 0 : (real)(coef * ((double)P[i] - (double)Tg[i]));
        }
    }
    return VFM_OK;
}
