/* EDM Heun sampler (see sampler.h). */
#include "sampler.h"

#include <math.h>
#include <stdlib.h>

#include "core/philox.h"
#include "ops/ops.h"

void sampler_config_default(SamplerConfig *c) {
    c->num_steps = 35;
    c->sigma_min = 0.002;
    c->sigma_max = 80.0;
    c->rho = 7.0;
    c->s_churn = 0.0;
    c->s_tmin = 0.0;
    c->s_tmax = INFINITY;
    c->s_noise = 1.0;
    c->dfm_heun_parity = 0;
    c->seed = 0;
    c->uid = 0;
}

void edm_sigma_schedule(const SamplerConfig *c, double *t) {
    int n = c->num_steps;
    double a = pow(c->sigma_max, 1.0 / c->rho), b = pow(c->sigma_min, 1.0 / c->rho);
    for (int i = 0; i < n; i++) t[i] = pow(a + (n > 1 ? (double)i / (n - 1) : 0.0) * (b - a), c->rho);
    t[n] = 0.0;
}

/* d = (x − D)/t */
static vfm_status slope(Tensor *d, const Tensor *x, const Tensor *denoised, double t) {
    VFM_TRY(op_copy(d, x));
    VFM_TRY(op_axpy(d, -1.0, denoised));
    return op_scale(d, 1.0 / t);
}

vfm_status edm_heun_sample(const SamplerConfig *c, DenoiseFn denoise, void *ctx, Tensor *x, SamplerProgress progress,
                           void *progress_ctx) {
    int n = c->num_steps;
    if (n < 1) return vfm_fail(VFM_ERR_USAGE, "sampler: num_steps must be at least 1");
    double *t = malloc((size_t)(n + 1) * sizeof *t);
    int64_t numel = tensor_numel(x);
    float *buf = calloc((size_t)numel * 5, sizeof(float));
    if (!t || !buf) {
        free(t);
        free(buf);
        return vfm_fail(VFM_ERR_NOMEM, "sampler: working memory");
    }
    Tensor x_hat = *x, den = *x, d = *x, d2 = *x, eps = *x;
    x_hat.data = buf;
    den.data = buf + numel;
    d.data = buf + 2 * numel;
    d2.data = buf + 3 * numel;
    eps.data = buf + 4 * numel;
    edm_sigma_schedule(c, t);
    vfm_status s = op_scale(x, t[0]);
    for (int i = 0; i < n && s == VFM_OK; i++) {
        double t_cur = t[i], t_next = t[i + 1];
        double gamma = (c->s_churn > 0 && t_cur >= c->s_tmin && t_cur <= c->s_tmax)
                           ? fmin(c->s_churn / n, sqrt(2.0) - 1.0) : 0.0;
        double t_hat = t_cur + gamma * t_cur;
        s = op_copy(&x_hat, x);
        if (s == VFM_OK && gamma > 0) {
            s = op_randn_fill(&eps, c->seed, RNG_STREAM_SAMPLER, (uint32_t)i, c->uid, 0, 1.0f);
            if (s == VFM_OK) s = op_axpy(&x_hat, sqrt(t_hat * t_hat - t_cur * t_cur) * c->s_noise, &eps);
        }
        /* Euler step */
        if (s == VFM_OK) s = denoise(ctx, &x_hat, t_hat, &den);
        if (s == VFM_OK) s = slope(&d, &x_hat, &den, t_hat);
        if (s == VFM_OK) s = op_copy(x, &x_hat);
        if (s == VFM_OK) s = op_axpy(x, t_next - t_hat, &d);
        /* second-order correction */
        if (s == VFM_OK && i < n - 1) {
            if (c->dfm_heun_parity) {
                s = denoise(ctx, &x_hat, t_hat, &den);
            } else {
                s = denoise(ctx, x, t_next, &den);
            }
            if (s == VFM_OK) s = slope(&d2, x, &den, t_next);
            if (s == VFM_OK) s = op_copy(x, &x_hat);
            if (s == VFM_OK) s = op_axpy(x, 0.5 * (t_next - t_hat), &d);
            if (s == VFM_OK) s = op_axpy(x, 0.5 * (t_next - t_hat), &d2);
        }
        if (s == VFM_OK && progress) progress(progress_ctx, i + 1, n);
    }
    free(t);
    free(buf);
    return s;
}
