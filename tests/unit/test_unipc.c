/* The UniPC sampler (diffusion/unipc.h) against diffusers' UniPCMultistepScheduler as Wan configures
 * it (reference/make_wan_fixtures.py, tests/fixtures/wan/unipc.safetensors): the same times and,
 * fed the same sequence of model outputs, the same sample after every one of 12 steps, at Wan's
 * solver order 2 and at sampler.unipc_order's other values, 1 and 3. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "data/formats/safetensors.h"
#include "diffusion/unipc.h"
#include "test.h"

enum { STEPS = 12, ROWS = 3, COLS = 5 };

typedef struct Trace {
    SafetensorsFile *f;
    const char *prefix; /* "" (order 2), "order1." or "order3." */
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
        snprintf(name, sizeof name, "%ssample.%d", t->prefix, t->step - 1);
        read_named(t->f, name, ref, ROWS * COLS);
        for (int k = 0; k < ROWS * COLS; k++) {
            double e = fabs(((float *)x->data)[k] - ref[k]) / fmax(1.0, fabs(ref[k]));
            if (e > t->worst) t->worst = e, t->bad_step = t->step - 1;
        }
    }
    snprintf(name, sizeof name, "%smodel_output.%d", t->prefix, t->step++);
    read_named(t->f, name, v->data, ROWS * COLS);
    return VFM_OK;
}

/* Samples the trace of one order; the largest relative difference from diffusers, at *bad_step. */
static double replay_order(SafetensorsFile *f, const char *prefix, int order, int *bad_step) {
    Trace t = {f, prefix, 0, 0, 0};
    float x[ROWS * COLS], last[ROWS * COLS];
    char name[32];
    snprintf(name, sizeof name, "%sstart", prefix);
    read_named(f, name, x, ROWS * COLS);
    Tensor xt = TF32(x, ROWS, COLS);
    int64_t rows[2] = {0, ROWS};
    double shift = 3.0;
    if (flow_unipc_sample(STEPS, order, 1, 1, rows, &shift, replay, &t, &xt, NULL, NULL) != VFM_OK) return INFINITY;
    snprintf(name, sizeof name, "%ssample.%d", prefix, STEPS - 1);
    read_named(f, name, last, ROWS * COLS);
    for (int k = 0; k < ROWS * COLS; k++) {
        double e = fabs(x[k] - last[k]) / fmax(1.0, fabs(last[k]));
        if (e > t.worst) t.worst = e, t.bad_step = STEPS - 1;
    }
    *bad_step = t.bad_step;
    return t.worst;
}

TEST(unipc_matches_diffusers_step_by_step) {
    SafetensorsFile *f;
    REQUIRE_OK(safetensors_open(&f, test_fixture("wan/unipc.safetensors")));
    float ref_sig[STEPS + 1];
    read_named(f, "sigmas", ref_sig, STEPS + 1);
    double sig[STEPS + 1];
    unipc_sigmas(STEPS, 3.0, sig);
    for (int i = 0; i <= STEPS; i++) CHECK_MSG(sig[i] == (double)ref_sig[i], "sigma %d: %.9g vs %.9g", i, sig[i], ref_sig[i]);
    static const struct {
        const char *prefix;
        int order;
    } orders[] = {{"", 2}, {"order1.", 1}, {"order3.", 3}};
    for (int i = 0; i < 3; i++) {
        int bad = 0;
        double worst = replay_order(f, orders[i].prefix, orders[i].order, &bad);
        CHECK_MSG(worst < 2e-6, "order %d, step %d: |vfm - diffusers| = %.3g", orders[i].order, bad, worst);
    }
    /* another order is another sampler: the check can fail */
    int bad = 0;
    double other = replay_order(f, "", 1, &bad), other3 = replay_order(f, "", 3, &bad);
    CHECK_MSG(other > 1e-3 && other3 > 1e-3, "orders 1 and 3 also matched diffusers' order 2 (%.3g, %.3g)", other, other3);
    safetensors_close(f);
}
