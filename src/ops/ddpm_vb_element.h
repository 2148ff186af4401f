/* The DDPM variational-bound term of one element (references.md B6; in bits: the KL between the
 * true and the model posterior, or the decoder NLL at t = 0) and its derivative by the network's
 * variance output v, in double. Written once for the CPU and the GPU backends (ops/cpu/diffusion.c,
 * ops/cuda/diffusion.cu), so both compute the same numbers. Include after ops/ops.h. */
#ifndef VFM_DDPM_VB_ELEMENT_H
#define VFM_DDPM_VB_ELEMENT_H

#include <math.h>

#include "core/host_device.h"

/* One sample's coefficients (ops.h's DDPM_VB_* row of the coefficient tensor) in double. */
typedef struct DdpmVbCoef {
    double recip_ac, recipm1_ac, c1, c2, min_log, max_log;
    int is_t0;
} DdpmVbCoef;

/* The coefficients of row k (float or double elements) */
#define DDPM_VB_COEF(k)                                                                                        \
    {(double)(k)[DDPM_VB_RECIP_AC], (double)(k)[DDPM_VB_RECIPM1_AC], (double)(k)[DDPM_VB_MEAN_C1],             \
     (double)(k)[DDPM_VB_MEAN_C2],  (double)(k)[DDPM_VB_POST_LOGVAR], (double)(k)[DDPM_VB_LOG_BETA],           \
     (k)[DDPM_VB_IS_T0] != 0}

/* The tanh approximation of the standard normal CDF that the DDPM code uses, and its derivative. */
VFM_HD double ddpm_approx_cdf(double z, double *deriv) {
    const double k = 0.7978845608028654; /* √(2/π) */
    double u = k * (z + 0.044715 * z * z * z), th = tanh(u);
    *deriv = 0.5 * (1.0 - th * th) * k * (1.0 + 3.0 * 0.044715 * z * z);
    return 0.5 * (1.0 + th);
}

/* vb of one element in bits; *dvb_dv (when not NULL) its derivative by v. */
VFM_HD double ddpm_vb_element(double v, double eps, double xt, double x0, const DdpmVbCoef *k, double *dvb_dv) {
    double pred_x0 = k->recip_ac * xt - k->recipm1_ac * eps;
    double true_mean = k->c1 * x0 + k->c2 * xt, model_mean = k->c1 * pred_x0 + k->c2 * xt;
    double min_log = k->min_log, max_log = k->max_log;
    double frac = 0.5 * (v + 1.0), logvar = frac * max_log + (1.0 - frac) * min_log;
    double dlogvar_dv = 0.5 * (max_log - min_log);
    const double inv_ln2 = 1.0 / 0.6931471805599453;
    if (!k->is_t0) {
        double d = true_mean - model_mean, e_rel = exp(min_log - logvar), e_inv = exp(-logvar);
        double kl = 0.5 * (-1.0 + logvar - min_log + e_rel + d * d * e_inv);
        if (dvb_dv) *dvb_dv = 0.5 * (1.0 - e_rel - d * d * e_inv) * dlogvar_dv * inv_ln2;
        return kl * inv_ln2;
    }
    /* decoder NLL: −log of the probability of x0's bin under N(model_mean, exp(logvar)) */
    double log_scale = 0.5 * logvar, inv_std = exp(-log_scale), centred = x0 - model_mean;
    double plus_in = inv_std * (centred + 1.0 / 255.0), min_in = inv_std * (centred - 1.0 / 255.0);
    double dplus, dmin;
    double cdf_plus = ddpm_approx_cdf(plus_in, &dplus), cdf_min = ddpm_approx_cdf(min_in, &dmin);
    /* d plus_in / d log_scale = −plus_in (likewise min_in); torch's clamp(min=1e-12) has no gradient below */
    double lp, dlp;
    if (x0 < -0.999) {
        lp = log(fmax(cdf_plus, 1e-12));
        dlp = cdf_plus > 1e-12 ? dplus * -plus_in / cdf_plus : 0.0;
    } else if (x0 > 0.999) {
        lp = log(fmax(1.0 - cdf_min, 1e-12));
        dlp = 1.0 - cdf_min > 1e-12 ? dmin * min_in / (1.0 - cdf_min) : 0.0;
    } else {
        double delta = cdf_plus - cdf_min;
        lp = log(fmax(delta, 1e-12));
        dlp = delta > 1e-12 ? (dplus * -plus_in - dmin * -min_in) / delta : 0.0;
    }
    if (dvb_dv) *dvb_dv = -dlp * 0.5 * dlogvar_dv * inv_ln2;
    return -lp * inv_ln2;
}

#endif
