/* Tests of op_adamw_step: 10 steps against torch.optim.AdamW (reference/golden_ops_misc.py) in
 * f32 and f64, decoupled weight decay, grad_scale applied first, argument errors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "golden.h"
#include "ops/ops.h"
#include "test.h"

static AdamWHyper hyper(double lr, double wd, int step, double grad_scale) {
    AdamWHyper h = {(float)lr, 0.9f, 0.95f, 1e-5f, (float)wd, step, (float)grad_scale, NULL};
    return h;
}

/* Runs the golden's 10 steps for tensor i in dtype dt; compares after every step. */
static void adamw_vs_torch(const Golden *g, int i, DType dt) {
    char name[64];
    snprintf(name, sizeof name, "p%d_init", i);
    const Tensor *init = golden_need(g, name);
    snprintf(name, sizeof name, "p%d_grads", i);
    const Tensor *grads = golden_need(g, name);
    snprintf(name, sizeof name, "p%d_wd", i);
    double wd = golden_scalar(g, name);
    snprintf(name, sizeof name, "p%d_after_%s", i, dt == DT_F32 ? "f32" : "f64");
    const Tensor *after = golden_need(g, name);
    const Tensor *lr = golden_need(g, "lr");
    if (!init || !grads || !after || !lr) return;
    int64_t n = tensor_numel(init), steps = tensor_numel(lr);
    size_t es = dtype_size(dt);
    void *p = calloc((size_t)n, es), *m = calloc((size_t)n, es), *v = calloc((size_t)n, es), *gr = calloc((size_t)n, es);
    double *got = malloc(sizeof(double) * n), *ref = malloc(sizeof(double) * n);
    const float *init_f = init->data, *grads_f = grads->data;
    for (int64_t j = 0; j < n; j++) {
        if (dt == DT_F32) ((float *)p)[j] = init_f[j];
        else ((double *)p)[j] = init_f[j];
    }
    Tensor P = tensor_make(p, dt, DEV_CPU, 1, &n), M = tensor_make(m, dt, DEV_CPU, 1, &n);
    Tensor V = tensor_make(v, dt, DEV_CPU, 1, &n), G = tensor_make(gr, dt, DEV_CPU, 1, &n);
    for (int64_t k = 0; k < steps; k++) {
        for (int64_t j = 0; j < n; j++) {
            if (dt == DT_F32) ((float *)gr)[j] = grads_f[k * n + j];
            else ((double *)gr)[j] = grads_f[k * n + j];
        }
        AdamWHyper h = hyper(((const double *)lr->data)[k], wd, (int)k + 1, 1.0);
        CHECK_OK(op_adamw_step(&P, &M, &V, &G, &h));
        for (int64_t j = 0; j < n; j++) {
            got[j] = dt == DT_F32 ? ((float *)p)[j] : ((double *)p)[j];
            ref[j] = after->dtype == DT_F32 ? ((const float *)after->data)[k * n + j]
                                            : ((const double *)after->data)[k * n + j];
        }
        snprintf(name, sizeof name, "param %d after step %lld (%s)", i, (long long)k + 1, dtype_name(dt));
        /* f32 vs torch float32: torch's vectorised kernels may fuse multiply-adds, and its scalars
         * (1-β1 = 0.1f) come from the nominal doubles while ours come from the float β1, so each
         * step may differ by ~1 ulp of |p| <= 1.1 (1.2e-7) plus ~2e-7 relative of the update
         * lr·m̂/(√v̂+eps) <= 1e-2 (measured worst over 10 steps: 6e-8, 1 ulp); atol 5e-7 = 4 ulp.
         * f64 vs torch float64 run with the same float-rounded hyper-parameters: evaluation order
         * only (measured bitwise equal). */
        if (dt == DT_F32) CHECK_CLOSE_F64(name, got, ref, n, 5e-7, 0);
        else CHECK_CLOSE_F64(name, got, ref, n, 1e-14, 0);
    }
    /* the parameters did move */
    double moved = 0;
    for (int64_t j = 0; j < n; j++) moved = fmax(moved, fabs(got[j] - init_f[j]));
    CHECK_MSG(moved > 1e-2, "parameters moved only %.3g", moved);
    free(p); free(m); free(v); free(gr); free(got); free(ref);
}

TEST(ops_adamw_matches_torch_10_steps) {
    Golden *g = golden_load("ops_misc_adamw.bin");
    REQUIRE(g);
    for (int i = 0; i < 3; i++) { /* tensors 0 and 2: weight decay 0.033; tensor 1: weight decay 0 */
        adamw_vs_torch(g, i, DT_F32);
        adamw_vs_torch(g, i, DT_F64);
    }
    golden_free(g);
}

/* Decoupled weight decay: with zero gradients (m = v = 0) the Adam update is 0/(0+eps) = 0, so
 * one step multiplies the parameters by exactly (1 - lr·wd); with wd = 0 nothing changes. */
TEST(ops_adamw_decoupled_weight_decay) {
    double p[4] = {1.5, -2.0, 0.25, 3.0}, m[4] = {0}, v[4] = {0}, g[4] = {0}, p0[4];
    memcpy(p0, p, sizeof p);
    Tensor P = TF64(p, 4), M = TF64(m, 4), V = TF64(v, 4), G = TF64(g, 4);
    AdamWHyper h = hyper(1e-2, 0.1, 1, 1.0);
    REQUIRE_OK(op_adamw_step(&P, &M, &V, &G, &h));
    double keep = 1.0 - (double)h.lr * (double)h.weight_decay, want[4];
    for (int i = 0; i < 4; i++) want[i] = p0[i] * keep;
    CHECK_CLOSE_F64("decay only", p, want, 4, 0, 0);
    h = hyper(1e-2, 0.0, 2, 1.0);
    REQUIRE_OK(op_adamw_step(&P, &M, &V, &G, &h));
    CHECK_CLOSE_F64("no decay", p, want, 4, 0, 0);
}

/* grad_scale multiplies the gradient before the moments: stepping with (s·g, scale 1) and with
 * (g, scale s) gives the same bits, for a power of two and for an arbitrary s. */
TEST(ops_adamw_grad_scale_applies_first) {
    enum { N = 257 };
    const float scales[2] = {0.5f, 0.37f};
    for (int k = 0; k < 2; k++) {
        float pa[N], pb[N], ma[N] = {0}, mb[N] = {0}, va[N] = {0}, vb[N] = {0}, g[N], gs[N];
        test_fill_uniform_f32(pa, N, 61, -1, 1);
        memcpy(pb, pa, sizeof pa);
        Tensor PA = TF32(pa, N), PB = TF32(pb, N), MA = TF32(ma, N), MB = TF32(mb, N), VA = TF32(va, N), VB = TF32(vb, N);
        Tensor G = TF32(g, N), GS = TF32(gs, N);
        for (int step = 1; step <= 3; step++) {
            test_fill_uniform_f32(g, N, 62 + step, -2, 2);
            for (int i = 0; i < N; i++) gs[i] = scales[k] * g[i];
            AdamWHyper ha = hyper(3e-3, 0.033, step, scales[k]), hb = hyper(3e-3, 0.033, step, 1.0);
            REQUIRE_OK(op_adamw_step(&PA, &MA, &VA, &G, &ha));
            REQUIRE_OK(op_adamw_step(&PB, &MB, &VB, &GS, &hb));
        }
        CHECK(memcmp(pa, pb, sizeof pa) == 0);
        CHECK(memcmp(ma, mb, sizeof ma) == 0);
        CHECK(memcmp(va, vb, sizeof va) == 0);
        CHECK(fabs(ma[0]) > 0 && va[0] > 0); /* the moments were written */
    }
}

/* Elementwise: the result does not depend on the thread count. */
TEST(ops_adamw_thread_independent) {
    enum { N = 10007 };
    float *p1 = malloc(sizeof(float) * N), *p2 = malloc(sizeof(float) * N), *m1 = calloc(N, 4), *m2 = calloc(N, 4);
    float *v1 = calloc(N, 4), *v2 = calloc(N, 4), *g = malloc(sizeof(float) * N);
    test_fill_uniform_f32(p1, N, 71, -1, 1);
    memcpy(p2, p1, sizeof(float) * N);
    test_fill_uniform_f32(g, N, 72, -1, 1);
    Tensor P1 = TF32(p1, N), P2 = TF32(p2, N), M1 = TF32(m1, N), M2 = TF32(m2, N), V1 = TF32(v1, N), V2 = TF32(v2, N);
    Tensor G = TF32(g, N);
    AdamWHyper h = hyper(1e-3, 0.033, 1, 1.0);
    ops_set_threads(1);
    REQUIRE_OK(op_adamw_step(&P1, &M1, &V1, &G, &h));
    ops_set_threads(2);
    REQUIRE_OK(op_adamw_step(&P2, &M2, &V2, &G, &h));
    ops_set_threads(1);
    CHECK(memcmp(p1, p2, sizeof(float) * N) == 0);
    free(p1); free(p2); free(m1); free(m2); free(v1); free(v2); free(g);
}

TEST(ops_adamw_argument_errors) {
    float p[4] = {0}, m[4] = {0}, v[3] = {0}, g[4] = {0};
    double gd[4] = {0};
    Tensor P = TF32(p, 4), M = TF32(m, 4), V3 = TF32(v, 3), G = TF32(g, 4), GD = TF64(gd, 4), V = TF32(m, 4);
    AdamWHyper h = hyper(1e-3, 0, 1, 1.0);
    CHECK(op_adamw_step(&P, &M, &V3, &G, &h) == VFM_ERR_SHAPE);
    CHECK(strstr(vfm_last_error(), "adamw_step") && strstr(vfm_last_error(), "v"));
    CHECK(op_adamw_step(&P, &M, &V, &GD, &h) == VFM_ERR_SHAPE);
    CHECK(strstr(vfm_last_error(), "grad") != NULL);
    h.step = 0;
    CHECK(op_adamw_step(&P, &M, &V, &G, &h) == VFM_ERR_SHAPE);
    CHECK(op_adamw_step(&P, &M, &V, &G, NULL) == VFM_ERR_SHAPE);
}

/* The training step's decision on the device (op_step_decide) and AdamW gated by it: an applied
 * step gives the bits of op_adamw_step with the host's clip factor and step count; a skipped one
 * (non-finite norm or loss) writes nothing and leaves the count; the records hold loss, norm, ok. */
TEST(adamw_gated_by_the_step_state_equals_host_scalars_and_skips_cleanly) {
    const int64_t n = 1000;
    float p0[1000], g[1000];
    test_fill_uniform_f32(p0, n, 31, -1, 1);
    test_fill_uniform_f32(g, n, 32, -0.5f, 0.5f);
    double state[STEP_SLOTS + 3 * 4];
    memset(state, 0, sizeof state);
    Tensor st = TENSOR(state, DT_F64, DEV_CPU, STEP_SLOTS + 3 * 4);
    float pa[1000], ma[1000] = {0}, va[1000] = {0}, pb[1000], mb[1000] = {0}, vb[1000] = {0};
    memcpy(pa, p0, sizeof pa), memcpy(pb, p0, sizeof pb);
    Tensor G = TENSOR(g, DT_F32, DEV_CPU, n);
    const double clip = 1.0;
    int host_t = 0;
    for (int k = 0; k < 4; k++) {
        int skip = k == 2;
        /* the step's loss and Σ g² as the trainer leaves them, then the decision */
        state[STEP_LOSS] = skip ? NAN : 0.25 * (k + 1);
        Tensor gg = G;
        REQUIRE_OK(op_sum_squares_into(&st, STEP_SUMSQ, &gg));
        double sumsq = state[STEP_SUMSQ], host_sumsq = 0;
        REQUIRE_OK(op_sum_squares(&host_sumsq, &gg));
        CHECK(sumsq == host_sumsq);
        float lr = 1e-3f * (float)(k + 1);
        StepDecideHyper h = {clip, lr, 0.9f, 0.95f, k};
        REQUIRE_OK(op_step_decide(&st, &h));
        double norm = sqrt(host_sumsq), coeff = clip / (norm + 1e-6), scale = coeff < 1.0 ? coeff : 1.0;
        CHECK(state[STEP_OK] == !skip && state[STEP_NORM] == norm && state[STEP_LOSS] == 0);
        CHECK(state[STEP_SLOTS + 3 * k + 2] == !skip && state[STEP_SLOTS + 3 * k + 1] == norm);
        Tensor P = TENSOR(pa, DT_F32, DEV_CPU, n), M = TENSOR(ma, DT_F32, DEV_CPU, n), V = TENSOR(va, DT_F32, DEV_CPU, n);
        AdamWHyper gated = {lr, 0.9f, 0.95f, 1e-8f, 0.1f, 0, 0.f, &st};
        REQUIRE_OK(op_adamw_step(&P, &M, &V, &G, &gated));
        if (!skip) { /* the host's way: its own count and clip factor */
            host_t++;
            Tensor Pb = TENSOR(pb, DT_F32, DEV_CPU, n), Mb = TENSOR(mb, DT_F32, DEV_CPU, n), Vb = TENSOR(vb, DT_F32, DEV_CPU, n);
            AdamWHyper host = {lr, 0.9f, 0.95f, 1e-8f, 0.1f, host_t, (float)scale, NULL};
            REQUIRE_OK(op_adamw_step(&Pb, &Mb, &Vb, &G, &host));
        }
        CHECK_MSG(state[STEP_ADAM_T] == host_t, "step %d: count %g, want %d", k, state[STEP_ADAM_T], host_t);
        CHECK_MSG(memcmp(pa, pb, sizeof pa) == 0 && memcmp(ma, mb, sizeof ma) == 0 && memcmp(va, vb, sizeof va) == 0,
                  "step %d (%s): the gated update differs from the host's", k, skip ? "skipped" : "applied");
    }
}
