/* The objective interface below the model: configuration errors, the keyed per-sample draws
 * (EDM's σ bit for bit as before, flow's logit-normal and shift, DDPM's uniform timesteps, the
 * σ clamp, class labels and their null class), the DDPM chain and its respacing against the
 * reference's numbers, the flow time schedule, and both samplers run with the exact prediction of
 * Gaussian data, which must give back that distribution. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "core/philox.h"
#include "diffusion/ddpm.h"
#include "diffusion/flow.h"
#include "diffusion/objective.h"
#include "ops/ops.h"
#include "test.h"

static vfm_status objective_with(Objective *o, const char *const *ov, int n) {
    Config *cfg;
    VFM_TRY(config_load(&cfg, NULL, ov, n));
    vfm_status s = objective_from_config(o, cfg, NULL);
    config_free(cfg);
    return s;
}

TEST(objective_config_errors_name_the_key) {
    Objective o;
    const char *a[] = {"diffusion.sigma_min=2", "diffusion.sigma_max=1"};
    CHECK(objective_with(&o, a, 2) == VFM_ERR_USAGE);
    CHECK_MSG(strstr(vfm_last_error(), "diffusion.sigma_min (2) must be smaller") != NULL, "%s", vfm_last_error());
    const char *b[] = {"diffusion.objective=ddpm", "diffusion.sigma_max=10"};
    CHECK(objective_with(&o, b, 2) == VFM_ERR_USAGE);
    CHECK_MSG(strstr(vfm_last_error(), "diffusion.sigma_max") != NULL, "%s", vfm_last_error());
    const char *c[] = {"diffusion.objective=flow", "diffusion.sigma_max=2"};
    CHECK(objective_with(&o, c, 2) == VFM_ERR_USAGE);
    const char *d[] = {"diffusion.objective=edm", "diffusion.flow_shift=3"};
    CHECK(objective_with(&o, d, 2) == VFM_ERR_USAGE);
    CHECK_MSG(strstr(vfm_last_error(), "diffusion.flow_shift") != NULL, "%s", vfm_last_error());
    const char *e[] = {"diffusion.objective=flow", "diffusion.flow_shift=3", "diffusion.flow_shift_base_tokens=256"};
    REQUIRE_OK(objective_with(&o, e, 3));
    CHECK(o.kind == OBJECTIVE_FLOW && o.flow_shift == 3 && o.flow_shift_base == 256);
    CHECK(fabs(flow_shift_for(&o, 1024) - 6.0) < 1e-12); /* 4x the tokens: 2x the shift */
    DiTConfig mc = {.in_channels = 4, .out_channels = 8, .patch_spatial = 2, .patch_temporal = 1};
    CHECK(objective_check_model(&o, &mc) == VFM_ERR_USAGE);
    o.kind = OBJECTIVE_DDPM;
    CHECK_OK(objective_check_model(&o, &mc));
}

TEST(objective_edm_draws_are_the_log_normal_of_before) {
    Objective o;
    REQUIRE_OK(objective_with(&o, NULL, 0));
    for (uint64_t uid = 0; uid < 64; uid++) {
        float z = philox_normal_at(o.seed, RNG_STREAM_SIGMA, 7, uid, 0);
        float want = expf(0.0f + 1.0f * z);
        CHECK(objective_draw_time(&o, 7, uid, 100) == want); /* bit for bit */
    }
    /* the clamp */
    const char *ov[] = {"diffusion.sigma_min=0.5", "diffusion.sigma_max=2"};
    REQUIRE_OK(objective_with(&o, ov, 2));
    int low = 0, high = 0;
    for (uint64_t uid = 0; uid < 400; uid++) {
        float s = objective_draw_time(&o, 1, uid, 100);
        CHECK(s >= 0.5f && s <= 2.0f);
        low += s == 0.5f, high += s == 2.0f;
    }
    CHECK_MSG(low > 50 && high > 50, "clamped below %d, above %d of 400", low, high); /* P(ln σ < ln 0.5) = 0.24 */
}

TEST(objective_flow_time_is_logit_normal_then_shifted) {
    Objective o;
    const char *ov[] = {"diffusion.objective=flow", "diffusion.p_mean=0.5", "diffusion.p_std=0.8"};
    REQUIRE_OK(objective_with(&o, ov, 3));
    enum { N = 20000 };
    double m = 0, v = 0;
    for (uint64_t uid = 0; uid < N; uid++) {
        double s = objective_draw_time(&o, 3, uid, 64);
        REQUIRE(s > 0 && s < 1);
        double l = log(s / (1 - s));
        m += l;
        v += l * l;
    }
    m /= N;
    v = v / N - m * m;
    /* standard errors at N = 20000: 0.006 on the mean, 0.004 on the std */
    CHECK_MSG(fabs(m - 0.5) < 0.03 && fabs(sqrt(v) - 0.8) < 0.02, "logit mean %.4f std %.4f", m, sqrt(v));
    Objective shifted = o;
    shifted.flow_shift = 3.0;
    for (uint64_t uid = 0; uid < 32; uid++) {
        double s = objective_draw_time(&o, 3, uid, 64), s3 = objective_draw_time(&shifted, 3, uid, 64);
        CHECK_MSG(fabs(s3 - 3 * s / (1 + 2 * s)) < 1e-6, "shifted %.7f vs %.7f", s3, 3 * s / (1 + 2 * s));
        CHECK(s3 >= s);
    }
}

TEST(objective_ddpm_timesteps_are_uniform_integers) {
    Objective o;
    const char *ov[] = {"diffusion.objective=ddpm"};
    REQUIRE_OK(objective_with(&o, ov, 1));
    enum { N = 30000 };
    int bins[10] = {0};
    for (uint64_t uid = 0; uid < N; uid++) {
        float t = objective_draw_time(&o, 9, uid, 1);
        REQUIRE(t >= 0 && t <= 999 && t == floorf(t));
        bins[(int)t / 100]++;
    }
    for (int b = 0; b < 10; b++) CHECK_MSG(abs(bins[b] - N / 10) < 300, "bin %d holds %d of %d", b, bins[b], N);
}

TEST(objective_class_labels_drop_to_the_null_class) {
    Objective o;
    REQUIRE_OK(objective_with(&o, NULL, 0));
    DiTConfig mc = {.in_channels = 1, .out_channels = 1, .patch_spatial = 1, .patch_temporal = 1, .num_classes = 10,
                    .class_dropout_prob = 0.25f};
    Pack p;
    pack_init(&p, 1, 2, 1, 1);
    float tok[4] = {0}, text[2] = {0};
    enum { N = 400 };
    for (int i = 0; i < N; i++) {
        EncodedSample e;
        memset(&e, 0, sizeof e);
        e.info.latent_shape[0] = e.info.latent_shape[1] = e.info.latent_shape[2] = e.info.latent_shape[3] = 1;
        e.info.grid[0] = e.info.grid[1] = e.info.grid[2] = 1;
        e.info.tokens = 1;
        e.info.text_tokens = 1;
        e.info.uid = (uint64_t)i;
        e.info.class_label = i % 3 == 2 ? -1 : i % 10; /* every third sample has no label */
        e.tokens = tok;
        e.text = text;
        REQUIRE_OK(pack_append(&p, &e));
    }
    DiffusionDraws d;
    REQUIRE_OK(objective_draw(&o, &mc, &p, 5, &d));
    REQUIRE(d.class_row);
    int dropped = 0, labelled = 0;
    for (int i = 0; i < N; i++) {
        if (i % 3 == 2) {
            CHECK(d.class_row[i] == 10);
            continue;
        }
        labelled++;
        CHECK(d.class_row[i] == 10 || d.class_row[i] == i % 10);
        dropped += d.class_row[i] == 10;
        CHECK(d.class_row[i] == (objective_draw_class_drop(&o, &mc, 5, (uint64_t)i) ? 10 : i % 10));
    }
    CHECK_MSG(dropped > labelled / 8 && dropped < labelled * 3 / 8, "%d of %d dropped at p = 0.25", dropped, labelled);
    diffusion_draws_free(&d);
    p.samples[0].class_label = 10; /* not below num_classes */
    CHECK(objective_draw(&o, &mc, &p, 5, &d) == VFM_ERR_USAGE);
    diffusion_draws_free(&d);
    p.samples[0].class_label = -1; /* unlabelled, and the model has no null class */
    mc.class_dropout_prob = 0;
    CHECK(objective_draw(&o, &mc, &p, 5, &d) == VFM_ERR_USAGE);
    CHECK_MSG(strstr(vfm_last_error(), "model.class_dropout_prob") != NULL, "%s", vfm_last_error());
    diffusion_draws_free(&d);
    pack_free(&p);
}

TEST(ddpm_chain_matches_the_reference_respacing) {
    DdpmChain c;
    REQUIRE_OK(ddpm_chain_init(&c, 0));
    /* reference/objectives_torch.py ddpm_chain(1000) (numpy float64) */
    CHECK(c.n == 1000 && c.timestep[999] == 999);
    CHECK(fabs(c.beta[0] - 9.999999999998899e-05) < 1e-18);
    CHECK(fabs(c.beta[500] - 0.010059959959960008) < 1e-16);
    CHECK(fabs(c.alpha_bar[999] - 4.035829765375676e-05) < 1e-17);
    REQUIRE_OK(ddpm_chain_init(&c, 250));
    int64_t sum = 0;
    for (int i = 0; i < c.n; i++) sum += c.timestep[i];
    CHECK(c.n == 250 && sum == 124875);
    CHECK(c.timestep[1] == 4 && c.timestep[124] == 497 && c.timestep[125] == 502 && c.timestep[248] == 995);
    CHECK(fabs(c.beta[1] - 0.0005990655644756426) < 1e-17);
    CHECK(fabs(c.beta[249] - 0.07751934499235003) < 1e-15);
    CHECK(fabs(c.alpha_bar[100] - 0.19200642095422965) < 1e-15);
    REQUIRE_OK(ddpm_chain_init(&c, 7)); /* 999/6 = 166.5: Python rounds half to even */
    const int want[7] = {0, 166, 333, 500, 666, 832, 999};
    for (int i = 0; i < 7; i++) CHECK_MSG(c.timestep[i] == want[i], "step %d: %d vs %d", i, c.timestep[i], want[i]);
}

TEST(flow_schedule_linear_quadratic) {
    double s[51];
    flow_time_schedule(50, 0, s);
    CHECK(s[0] == 1.0 && s[50] == 0.0);
    CHECK(fabs(s[25] - (1 - 0.025)) < 1e-12); /* the first half covers t in [0, 0.025] linearly */
    CHECK(fabs((s[0] - s[1]) - 0.001) < 1e-12);
    for (int i = 1; i <= 50; i++) CHECK(s[i] < s[i - 1]);
    /* the slope is continuous where the quadratic a·i² + b·i + c starts (i = L = 25): its first step
     * is the linear step plus a, a = (L − τN)/(L·Q²) = 23.75/15625 */
    CHECK(fabs((s[25] - s[26]) - (s[24] - s[25]) - 23.75 / 15625) < 1e-12);
    flow_time_schedule(4, 1, s);
    CHECK(s[1] == 0.75 && s[2] == 0.5 && s[4] == 0.0);
}

/* Data ~ N(mu, sd²) per element. */
typedef struct Gauss {
    double mu, sd;
} Gauss;

/* Flow: the exact velocity E[ε − x0 | x_σ] of Gaussian data. */
static vfm_status gauss_velocity(void *ctx, const Tensor *x, const double *sigma, Tensor *v) {
    const Gauss *g = ctx;
    double s = sigma[0], a = 1 - s, var = a * a * g->sd * g->sd + s * s;
    const float *X = x->data;
    float *V = v->data;
    for (int64_t i = 0; i < tensor_numel(x); i++) {
        double r = X[i] - a * g->mu;
        V[i] = (float)(s / var * r - (g->mu + a * g->sd * g->sd / var * r));
    }
    return VFM_OK;
}

/* DDPM: the exact ε at timestep t of Gaussian data. */
static vfm_status gauss_eps(void *ctx, const Tensor *x, int timestep, Tensor *eps, Tensor *v) {
    (void)v;
    const Gauss *g = ctx;
    DdpmChain c;
    ddpm_chain_init(&c, 0);
    double ab = c.alpha_bar[timestep], var = ab * g->sd * g->sd + 1 - ab;
    const float *X = x->data;
    float *E = eps->data;
    for (int64_t i = 0; i < tensor_numel(x); i++) E[i] = (float)(sqrt(1 - ab) / var * (X[i] - sqrt(ab) * g->mu));
    return VFM_OK;
}

static vfm_status gauss_noise(void *ctx, int step, Tensor *z) {
    (void)ctx;
    return op_randn_fill(z, 77, RNG_STREAM_SAMPLER, (uint32_t)step, 0, 0, 1.0f);
}

static void check_moments(const float *x, int64_t n, const Gauss *g, double tol_mean, double tol_sd, const char *what) {
    double m = 0, v = 0;
    for (int64_t i = 0; i < n; i++) m += x[i];
    m /= n;
    for (int64_t i = 0; i < n; i++) v += (x[i] - m) * (x[i] - m);
    double sd = sqrt(v / (n - 1));
    CHECK_MSG(fabs(m - g->mu) < tol_mean && fabs(sd - g->sd) < tol_sd, "%s: mean %.4f sd %.4f, expected %.4f %.4f", what,
              m, sd, g->mu, g->sd);
}

TEST(flow_euler_with_the_exact_velocity_gives_the_data_distribution) {
    enum { N = 20000 };
    Gauss g = {0.7, 0.35};
    float *x = malloc(N * sizeof(float));
    Tensor xt = TF32(x, N, 1);
    int64_t rows[2] = {0, N};
    double shift[1] = {1.0};
    for (int linear = 0; linear < 2; linear++) {
        REQUIRE_OK(op_randn_fill(&xt, 5, 6, 0, 0, 0, 1.0f));
        /* the linear-quadratic schedule's last steps are 4x the linear ones: 4x the steps */
        REQUIRE_OK(flow_euler_sample(linear ? 64 : 256, linear, 1, rows, shift, gauss_velocity, &g, &xt, NULL, NULL));
        /* standard errors 0.0025 (mean), 0.0018 (sd), plus the Euler discretisation */
        check_moments(x, N, &g, 0.015, 0.015, linear ? "flow euler, linear" : "flow euler, linear-quadratic");
    }
    free(x);
}

TEST(ddpm_reverse_with_the_exact_eps_gives_the_data_distribution) {
    enum { N = 20000 };
    Gauss g = {0.7, 0.35};
    float *x = malloc(N * sizeof(float));
    Tensor xt = TF32(x, N);
    for (int ddim = 0; ddim < 2; ddim++) {
        REQUIRE_OK(op_randn_fill(&xt, 5, 6, 0, 0, 0, 1.0f));
        /* the full chain: ancestral steps are exact, DDIM's η = 0 steps of the discrete chain leave
         * ~1% (measured 0.3474 for 0.35; at 50 steps 0.323, so respacing costs accuracy here) */
        REQUIRE_OK(ddpm_reverse_sample(1000, ddim, 0, gauss_eps, gauss_noise, &g, &xt, NULL, NULL));
        check_moments(x, N, &g, 0.01, 0.01, ddim ? "ddim 1000 steps" : "ddpm 1000 steps");
    }
    free(x);
}
