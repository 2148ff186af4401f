/* CPU backend: sinusoidal timestep embedding (diffusers' get_timestep_embedding) and its
 * backward, and the fixed sin-cos position embeddings computed for any position: 3-D (diffusers'
 * get_3d_sincos_pos_embed, DFM) and 2-D (MAE's get_2d_sincos_pos_embed, the DiT reference). Angles and sin/cos are evaluated in double in both builds and
 * rounded once, so the f32 build is within half an ulp of the exact value. */
#include <stdlib.h>

#include "real.h"

/* f_i = exp(-ln(max_period)·i/(half - shift)) */
static double timestep_freq(int64_t i, int64_t half, float shift, float max_period) {
    return exp(-log((double)max_period) * (double)i / ((double)half - (double)shift));
}

/* out[B,dim] = [sin(t·f) | cos(t·f)], or [cos | sin] with flip_sin_to_cos. t[B]. */
vfm_status CPU_FN(timestep_embedding_forward)(Tensor *out, const Tensor *t, int flip_sin_to_cos, float shift,
                                              float max_period) {
    int64_t B = tensor_dim(out, 0), dim = tensor_dim(out, 1), half = dim / 2;
    int64_t sin_at = flip_sin_to_cos ? half : 0, cos_at = flip_sin_to_cos ? 0 : half;
    const real *T = CRDATA(t);
    real *O = RDATA(out);
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < B; b++) {
        real *row = O + b * dim;
        for (int64_t i = 0; i < half; i++) {
            double angle = (double)T[b] * timestep_freq(i, half, shift, max_period);
            row[sin_at + i] = (real)sin(angle);
            row[cos_at + i] = (real)cos(angle);
        }
    }
    return VFM_OK;
}

/* dt[B] = Σ_i f_i·(dout_sin[i]·cos(t·f_i) − dout_cos[i]·sin(t·f_i)), summed in order in double. */
vfm_status CPU_FN(timestep_embedding_backward)(Tensor *dt, const Tensor *dout, const Tensor *t, int flip_sin_to_cos,
                                               float shift, float max_period) {
    int64_t B = tensor_dim(dout, 0), dim = tensor_dim(dout, 1), half = dim / 2;
    int64_t sin_at = flip_sin_to_cos ? half : 0, cos_at = flip_sin_to_cos ? 0 : half;
    const real *T = CRDATA(t), *dO = CRDATA(dout);
    real *dT = RDATA(dt);
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < B; b++) {
        const real *row = dO + b * dim;
        double sum = 0;
        for (int64_t i = 0; i < half; i++) {
            double f = timestep_freq(i, half, shift, max_period), angle = (double)T[b] * f;
            sum += f * ((double)row[sin_at + i] * cos(angle) - (double)row[cos_at + i] * sin(angle));
        }
        dT[b] = (real)sum;
    }
    return VFM_OK;
}

/* One part of width 2·n of a row: [sin(p·ω_k) | cos(p·ω_k)] for k < n, added to dst[0 .. 2n). */
static void sincos_part_add(real *dst, double p, const double *omega, int64_t n) {
    for (int64_t k = 0; k < n; k++) {
        double angle = p * omega[k];
        dst[k] += (real)sin(angle);
        dst[n + k] += (real)cos(angle);
    }
}

/* ω_k = 1/10000^(k/n), k < n, as numpy computes it for a part of width 2n. */
static void sincos_frequencies(double *omega, int64_t n) {
    for (int64_t k = 0; k < n; k++) omega[k] = 1.0 / pow(10000.0, (double)k / (double)n);
}

/* x[S,D] += [temporal D/4 (t) | part A 3D/8 (w) | part B 3D/8 (h)] for rows with
 * tok2sample >= 0; pos[S,3] = (t,h,w). Part A encodes w because diffusers' 2-D grid is
 * meshgrid(w, h) and its first half embeds grid[0] = the w coordinate. */
vfm_status CPU_FN(pos_embed_3d_add)(Tensor *x, const Tensor *pos, const Tensor *tok2sample) {
    int64_t S = tensor_dim(x, 0), D = tensor_dim(x, 1);
    int64_t n_t = D / 8, n_s = 3 * D / 16; /* half widths of the temporal and of each spatial part */
    double *omega = malloc((size_t)(n_t + n_s) * sizeof *omega);
    if (!omega) return vfm_fail(VFM_ERR_NOMEM, "pos_embed_3d_add: no memory for %lld frequencies", (long long)(n_t + n_s));
    double *omega_t = omega, *omega_s = omega + n_t;
    sincos_frequencies(omega_t, n_t);
    sincos_frequencies(omega_s, n_s);
    const int32_t *P = I32DATA(pos), *map = I32DATA(tok2sample);
    real *X = RDATA(x);
#pragma omp parallel for schedule(static)
    for (int64_t s = 0; s < S; s++) {
        if (map[s] < 0) continue;
        real *row = X + s * D;
        sincos_part_add(row, (double)P[3 * s + 0], omega_t, n_t);
        sincos_part_add(row + 2 * n_t, (double)P[3 * s + 2], omega_s, n_s);
        sincos_part_add(row + 2 * n_t + 2 * n_s, (double)P[3 * s + 1], omega_s, n_s);
    }
    free(omega);
    return VFM_OK;
}

/* x[S,D] += [part A D/2 (w) | part B D/2 (h)] for rows with tok2sample >= 0; pos[S,3] = (t,h,w).
 * Part A encodes w because the reference's grid is meshgrid(w, h) and its first half embeds
 * grid[0] = the w coordinate. */
vfm_status CPU_FN(pos_embed_2d_add)(Tensor *x, const Tensor *pos, const Tensor *tok2sample) {
    int64_t S = tensor_dim(x, 0), D = tensor_dim(x, 1), n = D / 4; /* half width of each part */
    double *omega = malloc((size_t)n * sizeof *omega);
    if (!omega) return vfm_fail(VFM_ERR_NOMEM, "pos_embed_2d_add: no memory for %lld frequencies", (long long)n);
    sincos_frequencies(omega, n);
    const int32_t *P = I32DATA(pos), *map = I32DATA(tok2sample);
    real *X = RDATA(x);
#pragma omp parallel for schedule(static)
    for (int64_t s = 0; s < S; s++) {
        if (map[s] < 0) continue;
        real *row = X + s * D;
        sincos_part_add(row, (double)P[3 * s + 2], omega, n);
        sincos_part_add(row + 2 * n, (double)P[3 * s + 1], omega, n);
    }
    free(omega);
    return VFM_OK;
}
