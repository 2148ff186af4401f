/* The EDM Heun sampler on its own: the ρ = 7 σ schedule and its endpoints, the call pattern of
 * Heun's method (second evaluation at (x_next, t_next), or DFM's (x_hat, t_hat) in parity mode),
 * and the distribution it produces with the exact denoiser of Gaussian data. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "diffusion/sampler.h"
#include "ops/ops.h"
#include "test.h"

TEST(sampler_schedule_rho7_endpoints) {
    SamplerConfig c;
    sampler_config_default(&c);
    c.num_steps = 18;
    double t[19];
    edm_sigma_schedule(&c, t);
    CHECK(fabs(t[0] - 80.0) < 1e-12);
    CHECK(fabs(t[17] - 0.002) < 1e-15);
    CHECK(t[18] == 0.0);
    /* t_i^(1/ρ) is linear in i */
    for (int i = 1; i < 17; i++) {
        double a = pow(t[i - 1], 1 / 7.0), b = pow(t[i], 1 / 7.0), cc = pow(t[i + 1], 1 / 7.0);
        CHECK_MSG(fabs((b - a) - (cc - b)) < 1e-12, "step %d not evenly spaced in sigma^(1/rho)", i);
        CHECK(t[i] < t[i - 1]);
    }
}

#define MAX_CALLS 64
typedef struct Recorder {
    int calls;
    double sigma[MAX_CALLS];
    float x0[MAX_CALLS]; /* first element of x at each call */
} Recorder;

/* D(x; σ) = x / (1 + σ²): simple, known, and σ-dependent. */
static vfm_status recording_denoiser(void *ctx, const Tensor *x, double sigma, Tensor *out) {
    Recorder *r = ctx;
    if (r->calls < MAX_CALLS) {
        r->sigma[r->calls] = sigma;
        r->x0[r->calls] = ((const float *)x->data)[0];
    }
    r->calls++;
    VFM_TRY(op_copy(out, x));
    return op_scale(out, 1.0 / (1.0 + sigma * sigma));
}

static void run_recorded(int parity, Recorder *r, double *t, float *final) {
    SamplerConfig c;
    sampler_config_default(&c);
    c.num_steps = 6;
    c.dfm_heun_parity = parity;
    memset(r, 0, sizeof *r);
    float x[2] = {1.0f, -0.5f};
    Tensor xt = TF32(x, 2);
    edm_sigma_schedule(&c, t);
    vfm_status s = edm_heun_sample(&c, recording_denoiser, r, &xt, NULL, NULL);
    if (s != VFM_OK) test_fail(__FILE__, __LINE__, "%s", vfm_last_error());
    *final = x[0];
}

TEST(sampler_heun_second_evaluation_at_next_point) {
    Recorder r;
    double t[7];
    float final;
    run_recorded(0, &r, t, &final);
    CHECK_MSG(r.calls == 2 * 6 - 1, "%d denoiser calls, expected 2N-1 = 11", r.calls);
    /* replay the method in double: Euler at (x_i, t_i), correction at (x_next, t_next) */
    double x = 1.0 * t[0];
    int k = 0;
    for (int i = 0; i < 6; i++) {
        CHECK_MSG(fabs(r.sigma[k] - t[i]) < 1e-12, "call %d at sigma %g, expected t_%d = %g", k, r.sigma[k], i, t[i]);
        CHECK_MSG(fabs(r.x0[k] - x) <= 1e-5 * fabs(x), "call %d at x %g, expected %g", k, r.x0[k], x);
        k++;
        double d = (x - x / (1 + t[i] * t[i])) / t[i];
        double x_next = x + (t[i + 1] - t[i]) * d;
        if (i < 5) {
            CHECK_MSG(fabs(r.sigma[k] - t[i + 1]) < 1e-12, "correction %d at sigma %g, expected t_next %g", k, r.sigma[k],
                      t[i + 1]);
            CHECK_MSG(fabs(r.x0[k] - x_next) <= 1e-5 * fabs(x_next), "correction %d at x %g, expected x_next %g", k,
                      r.x0[k], x_next);
            k++;
            double d2 = (x_next - x_next / (1 + t[i + 1] * t[i + 1])) / t[i + 1];
            x_next = x + (t[i + 1] - t[i]) * 0.5 * (d + d2);
        }
        x = x_next;
    }
    CHECK_MSG(fabs(final - x) <= 1e-5 * fabs(x) + 1e-7, "final %g vs %g", final, x);
}

TEST(sampler_dfm_parity_reevaluates_at_x_hat) {
    Recorder r;
    double t[7];
    float final;
    run_recorded(1, &r, t, &final);
    CHECK(r.calls == 11);
    for (int k = 1; k < 11; k += 2) /* each correction repeats the Euler call's point */
        CHECK_MSG(r.sigma[k] == r.sigma[k - 1] && r.x0[k] == r.x0[k - 1], "call %d differs from call %d", k, k - 1);
}

typedef struct Gaussian {
    double mu, s;
} Gaussian;

/* Exact denoiser of data ~ N(mu, s²) per element: E[x0 | x] = (s² x + σ² mu)/(s² + σ²). */
static vfm_status gaussian_denoiser(void *ctx, const Tensor *x, double sigma, Tensor *out) {
    const Gaussian *g = ctx;
    double s2 = g->s * g->s, v = sigma * sigma;
    VFM_TRY(op_copy(out, x));
    VFM_TRY(op_scale(out, s2 / (s2 + v)));
    Tensor one = *out;
    float *ones = malloc((size_t)tensor_numel(out) * sizeof(float));
    for (int64_t i = 0; i < tensor_numel(out); i++) ones[i] = 1.0f;
    one.data = ones;
    vfm_status st = op_axpy(out, v * g->mu / (s2 + v), &one);
    free(ones);
    return st;
}

TEST(sampler_exact_gaussian_denoiser_gives_the_data_distribution) {
    const int64_t n = 20000;
    Gaussian g = {0.7, 0.35};
    float *x = malloc((size_t)n * sizeof(float));
    Tensor xt = TF32(x, n);
    REQUIRE_OK(op_randn_fill(&xt, 5, 6, 0, 0, 0, 1.0f));
    SamplerConfig c;
    sampler_config_default(&c);
    c.num_steps = 32;
    REQUIRE_OK(edm_heun_sample(&c, gaussian_denoiser, &g, &xt, NULL, NULL));
    double m = 0, v = 0;
    for (int64_t i = 0; i < n; i++) m += x[i];
    m /= n;
    for (int64_t i = 0; i < n; i++) v += (x[i] - m) * (x[i] - m);
    double sd = sqrt(v / (n - 1));
    /* standard errors at n = 20000: mean 0.0025, sd 0.0018; allow about 5 of them plus the
     * discretisation error of 32 Heun steps */
    CHECK_MSG(fabs(m - g.mu) < 0.015, "mean %.4f, expected %.4f", m, g.mu);
    CHECK_MSG(fabs(sd - g.s) < 0.01, "standard deviation %.4f, expected %.4f", sd, g.s);
    free(x);
}
