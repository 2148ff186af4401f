/* The UniPC sampler (diffusion/unipc.h) against diffusers' UniPCMultistepScheduler as Wan configures
 * it (reference/make_wan_fixtures.py, tests/fixtures/wan/unipc.safetensors): the same times and,
 * fed the same sequence of model outputs, the same sample after every one of 12 steps. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "data/formats/safetensors.h"
#include "diffusion/unipc.h"
#include "test.h"

enum { STEPS = 12, ROWS = 3, COLS = 5 };

typedef struct Trace {
    SafetensorsFile *f;
    int step, bad_step;
    double worst;
} Trace;

static void read_named(SafetensorsFile *f, const char *name, float *out, int64_t n) {
    int i = safetensors_find(f, name);
    if (i < 0 || safetensors_read_f32(f, i, out, n) != VFM_OK) memset(out, 0, (size_t)n * sizeof *out);
}

/* Hands out the fixture's model output of this step; checks that x is diffusers' sample after the
 * previous one (the predictor's, before this step corrects it). */
static vfm_status replay(void *ctx, const Tensor *x, const double *sigma, Tensor *v) {
    Trace *t = ctx;
    char name[32];
    (void)sigma;
    if (t->step > 0) {
        float ref[ROWS * COLS];
        snprintf(name, sizeof name, "sample.%d", t->step - 1);
        read_named(t->f, name, ref, ROWS * COLS);
        for (int k = 0; k < ROWS * COLS; k++) {
            double e = fabs(((float *)x->data)[k] - ref[k]) / fmax(1.0, fabs(ref[k]));
            if (e > t->worst) t->worst = e, t->bad_step = t->step - 1;
        }
    }
    snprintf(name, sizeof name, "model_output.%d", t->step++);
    read_named(t->f, name, v->data, ROWS * COLS);
    return VFM_OK;
}

TEST(unipc_matches_diffusers_step_by_step) {
    Trace t = {0};
    REQUIRE_OK(safetensors_open(&t.f, test_fixture("wan/unipc.safetensors")));
    float ref_sig[STEPS + 1], x[ROWS * COLS], last[ROWS * COLS];
    read_named(t.f, "sigmas", ref_sig, STEPS + 1);
    double sig[STEPS + 1];
    unipc_sigmas(STEPS, 3.0, sig);
    for (int i = 0; i <= STEPS; i++) CHECK_MSG(sig[i] == (double)ref_sig[i], "sigma %d: %.9g vs %.9g", i, sig[i], ref_sig[i]);
    read_named(t.f, "start", x, ROWS * COLS);
    Tensor xt = TF32(x, ROWS, COLS);
    int64_t rows[2] = {0, ROWS};
    double shift = 3.0;
    REQUIRE_OK(flow_unipc_sample(STEPS, 2, 1, 1, rows, &shift, replay, &t, &xt, NULL, NULL));
    read_named(t.f, "sample.11", last, ROWS * COLS);
    for (int k = 0; k < ROWS * COLS; k++) {
        double e = fabs(x[k] - last[k]) / fmax(1.0, fabs(last[k]));
        if (e > t.worst) t.worst = e, t.bad_step = STEPS - 1;
    }
    CHECK_MSG(t.worst < 2e-6, "step %d: |vfm - diffusers| = %.3g", t.bad_step, t.worst);
    /* order 1 (no multistep terms) is another sampler: the check can fail */
    Trace t1 = {t.f, 0, 0, 0};
    read_named(t.f, "start", x, ROWS * COLS);
    REQUIRE_OK(flow_unipc_sample(STEPS, 1, 1, 1, rows, &shift, replay, &t1, &xt, NULL, NULL));
    CHECK_MSG(t1.worst > 1e-3, "order 1 also matched diffusers' order 2 (%.3g)", t1.worst);
    safetensors_close(t.f);
}
