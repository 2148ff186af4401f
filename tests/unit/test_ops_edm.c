/* Tests of the EDM ops and the masked weighted MSE: the full DFM loss against PyTorch autograd
 * (reference/golden_ops_misc.py), finite-difference gradients (f64 build), NaN in padding rows,
 * thread-count independence and argument errors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "golden.h"
#include "gradcheck.h"
#include "ops/ops.h"
#include "test.h"

/* All tensors of one run of the EDM objective, in one dtype. */
typedef struct {
    DType dt;
    int64_t S, C, B;
    void *x0, *noise, *F, *sigma, *mask;       /* inputs */
    void *c_skip, *c_out, *c_in, *c_noise, *w; /* [B] */
    void *x_t, *net_in, *D, *dD, *dF;          /* [S,C] */
    void *loss, *sample_sum, *sample_count;
    int32_t *tok2sample;
} EdmRun;

static void *alloc_like(DType dt, int64_t n) { return calloc((size_t)(n ? n : 1), dtype_size(dt)); }

/* Copies golden tensor g (f32 or f64) into a new buffer of dtype dt. */
static void *golden_as(const Tensor *g, DType dt) {
    int64_t n = tensor_numel(g);
    void *p = alloc_like(dt, n);
    for (int64_t i = 0; i < n; i++) {
        double v = g->dtype == DT_F32 ? ((const float *)g->data)[i] : ((const double *)g->data)[i];
        if (dt == DT_F32) ((float *)p)[i] = (float)v;
        else ((double *)p)[i] = v;
    }
    return p;
}

static void run_alloc(EdmRun *r, DType dt, int64_t S, int64_t C, int64_t B) {
    memset(r, 0, sizeof *r);
    r->dt = dt; r->S = S; r->C = C; r->B = B;
    void **sc[] = {&r->x0, &r->noise, &r->F, &r->x_t, &r->net_in, &r->D, &r->dD, &r->dF};
    for (size_t i = 0; i < sizeof sc / sizeof sc[0]; i++) *sc[i] = alloc_like(dt, S * C);
    void **b[] = {&r->sigma, &r->c_skip, &r->c_out, &r->c_in, &r->c_noise, &r->w, &r->sample_sum, &r->sample_count};
    for (size_t i = 0; i < sizeof b / sizeof b[0]; i++) *b[i] = alloc_like(dt, B);
    r->mask = alloc_like(dt, S);
    r->loss = alloc_like(dt, 1);
    r->tok2sample = calloc((size_t)S, sizeof(int32_t));
}

static void run_free(EdmRun *r) {
    void *all[] = {r->x0, r->noise, r->F, r->x_t, r->net_in, r->D, r->dD, r->dF, r->sigma, r->c_skip, r->c_out,
                   r->c_in, r->c_noise, r->w, r->sample_sum, r->sample_count, r->mask, r->loss, r->tok2sample};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
}

#define T2(r, p) tensor_make((p), (r)->dt, DEV_CPU, 2, (int64_t[]){(r)->S, (r)->C})
#define T1(r, p, n) tensor_make((p), (r)->dt, DEV_CPU, 1, (int64_t[]){(n)})

/* precondition -> add noise -> denoise (F given) -> weighted MSE against x0 -> backward to dF */
static vfm_status run_objective(EdmRun *r, float sigma_data) {
    Tensor sigma = T1(r, r->sigma, r->B), c_skip = T1(r, r->c_skip, r->B), c_out = T1(r, r->c_out, r->B);
    Tensor c_in = T1(r, r->c_in, r->B), c_noise = T1(r, r->c_noise, r->B), w = T1(r, r->w, r->B);
    Tensor x0 = T2(r, r->x0), noise = T2(r, r->noise), F = T2(r, r->F), x_t = T2(r, r->x_t), net_in = T2(r, r->net_in);
    Tensor D = T2(r, r->D), dD = T2(r, r->dD), dF = T2(r, r->dF), mask = T1(r, r->mask, r->S);
    Tensor loss = T1(r, r->loss, 1), ssum = T1(r, r->sample_sum, r->B), scount = T1(r, r->sample_count, r->B);
    Tensor map = TI32(r->tok2sample, r->S);
    VFM_TRY(op_edm_precondition(&c_skip, &c_out, &c_in, &c_noise, &w, &sigma, sigma_data));
    VFM_TRY(op_edm_add_noise(&x_t, &net_in, &x0, &noise, &sigma, &c_in, &map));
    VFM_TRY(op_edm_denoise(&D, &x_t, &F, &c_skip, &c_out, &map));
    VFM_TRY(op_weighted_mse_forward(&loss, &ssum, &scount, &D, &x0, &w, &mask, &map));
    VFM_TRY(op_weighted_mse_backward(&dD, 1.0, &D, &x0, &w, &mask, &map));
    return op_edm_denoise_backward(&dF, &dD, &c_out, &map);
}

static void run_from_golden(EdmRun *r, const Golden *g, DType dt) {
    const Tensor *x0 = golden_need(g, "x0"), *sigma = golden_need(g, "sigma"), *map = golden_need(g, "tok2sample");
    run_alloc(r, dt, x0->shape[0], x0->shape[1], tensor_numel(sigma));
    const char *names[5] = {"x0", "noise", "F", "sigma", "mask"};
    void **dst[5] = {&r->x0, &r->noise, &r->F, &r->sigma, &r->mask};
    for (int i = 0; i < 5; i++) {
        free(*dst[i]);
        *dst[i] = golden_as(golden_need(g, names[i]), dt);
    }
    memcpy(r->tok2sample, map->data, sizeof(int32_t) * r->S);
}

/* compares buffer p (dtype of r) with golden tensor name at atol/rtol */
static void check_vs(const EdmRun *r, const Golden *g, const char *name, const void *p, double atol, double rtol) {
    const Tensor *ref = golden_need(g, name);
    if (!ref) return;
    int64_t n = tensor_numel(ref);
    double *got = malloc(sizeof(double) * n);
    for (int64_t i = 0; i < n; i++) got[i] = r->dt == DT_F32 ? ((const float *)p)[i] : ((const double *)p)[i];
    char what[96];
    snprintf(what, sizeof what, "%s (%s)", name, dtype_name(r->dt));
    CHECK_CLOSE_F64(what, got, ref->data, n, atol, rtol);
    free(got);
}

TEST(ops_edm_full_loss_golden) {
    Golden *g = golden_load("ops_misc_edm.bin");
    REQUIRE(g);
    float sigma_data = (float)golden_scalar(g, "sigma_data");
    for (int k = 0; k < 2; k++) {
        EdmRun r;
        run_from_golden(&r, g, k ? DT_F64 : DT_F32);
        REQUIRE_OK(run_objective(&r, sigma_data));
        /* f64 build: the same float64 arithmetic as torch up to evaluation order. f32 build: each op
         * rounds to f32 (rel 6e-8) and the loss sums in double; the chain precondition -> x_t -> D
         * -> (D-x0)² could amplify by |D|/|D-x0| (measured worst 6e-8 relative): rtol 1e-6. */
        double rtol = k ? 1e-12 : 1e-6;
        check_vs(&r, g, "c_skip", r.c_skip, 0, rtol);
        check_vs(&r, g, "c_out", r.c_out, 0, rtol);
        check_vs(&r, g, "c_in", r.c_in, 0, rtol);
        check_vs(&r, g, "c_noise", r.c_noise, 0, rtol);
        check_vs(&r, g, "weight", r.w, 0, rtol);
        check_vs(&r, g, "x_t", r.x_t, 0, rtol);
        check_vs(&r, g, "net_in", r.net_in, 0, rtol);
        check_vs(&r, g, "denoised", r.D, 0, rtol);
        check_vs(&r, g, "loss", r.loss, 0, rtol);
        check_vs(&r, g, "sample_sum", r.sample_sum, 0, rtol);
        check_vs(&r, g, "sample_count", r.sample_count, 0, 0);
        check_vs(&r, g, "ddenoised", r.dD, 0, rtol);
        check_vs(&r, g, "dF", r.dF, 0, rtol);
        if (k) {
            CHECK_NONZERO("dF", r.dF, r.S * r.C);
            CHECK_NONZERO("ddenoised", r.dD, r.S * r.C);
        }
        run_free(&r);
    }
    golden_free(g);
}

/* NaN in every padding row of every input (and of the mask) changes no output bit. */
TEST(ops_edm_nan_padding_changes_nothing) {
    Golden *g = golden_load("ops_misc_edm.bin");
    REQUIRE(g);
    float sigma_data = (float)golden_scalar(g, "sigma_data");
    for (int k = 0; k < 2; k++) {
        DType dt = k ? DT_F64 : DT_F32;
        size_t es = dtype_size(dt);
        EdmRun clean, dirty;
        run_from_golden(&clean, g, dt);
        run_from_golden(&dirty, g, dt);
        int64_t S = clean.S, C = clean.C, padding = 0;
        for (int64_t s = 0; s < S; s++) {
            if (clean.tok2sample[s] >= 0) continue;
            padding++;
            void *rows[3] = {dirty.x0, dirty.noise, dirty.F};
            for (int j = 0; j < 3; j++)
                for (int64_t c = 0; c < C; c++) {
                    if (k) ((double *)rows[j])[s * C + c] = NAN;
                    else ((float *)rows[j])[s * C + c] = NAN;
                }
            if (k) ((double *)dirty.mask)[s] = NAN;
            else ((float *)dirty.mask)[s] = NAN;
        }
        REQUIRE(padding > 0);
        /* outputs start as garbage: the ops must write the padding rows */
        memset(dirty.x_t, 0xff, S * C * es);
        memset(dirty.D, 0xff, S * C * es);
        memset(dirty.dF, 0xff, S * C * es);
        REQUIRE_OK(run_objective(&clean, sigma_data));
        REQUIRE_OK(run_objective(&dirty, sigma_data));
        CHECK(memcmp(clean.x_t, dirty.x_t, S * C * es) == 0);
        CHECK(memcmp(clean.net_in, dirty.net_in, S * C * es) == 0);
        CHECK(memcmp(clean.D, dirty.D, S * C * es) == 0);
        CHECK(memcmp(clean.dD, dirty.dD, S * C * es) == 0);
        CHECK(memcmp(clean.dF, dirty.dF, S * C * es) == 0);
        CHECK(memcmp(clean.loss, dirty.loss, es) == 0);
        CHECK(memcmp(clean.sample_sum, dirty.sample_sum, clean.B * es) == 0);
        CHECK(memcmp(clean.sample_count, dirty.sample_count, clean.B * es) == 0);
        /* and the padding rows of every output are exactly 0 */
        int zero = 1;
        for (int64_t s = 0; s < S; s++)
            for (int64_t c = 0; c < C && clean.tok2sample[s] < 0; c++) {
                void *outs[5] = {dirty.x_t, dirty.net_in, dirty.D, dirty.dD, dirty.dF};
                for (int j = 0; j < 5; j++) {
                    double v = k ? ((double *)outs[j])[s * C + c] : ((float *)outs[j])[s * C + c];
                    if (v != 0 || signbit(v)) zero = 0;
                }
            }
        CHECK(zero);
        run_free(&clean);
        run_free(&dirty);
    }
    golden_free(g);
}

/* ---- finite-difference gradients (f64) ---------------------------------------------- */

/* Pack of 3 samples of 4, 7 and 2 tokens, each padded to a multiple of 4 (rows 16 in all). */
enum { PK_S = 16, PK_C = 5, PK_B = 3 };
static void pack_map(int32_t *map) {
    const int len[PK_B] = {4, 7, 2}, padded[PK_B] = {4, 8, 4};
    int s = 0;
    for (int b = 0; b < PK_B; b++)
        for (int i = 0; i < padded[b]; i++) map[s++] = i < len[b] ? b : -1;
}

typedef struct {
    Tensor x_t, F, c_skip, c_out, map, out;
    const double *r;
} DenoiseCtx;

static double denoise_objective(void *p) {
    DenoiseCtx *c = p;
    if (op_edm_denoise(&c->out, &c->x_t, &c->F, &c->c_skip, &c->c_out, &c->map) != VFM_OK) return NAN;
    return dot_f64(c->r, c->out.data, PK_S * PK_C);
}

TEST(ops_edm_denoise_gradcheck) {
    double x_t[PK_S * PK_C], F[PK_S * PK_C], r[PK_S * PK_C], out[PK_S * PK_C], dF[PK_S * PK_C];
    double c_skip[PK_B] = {0.7, 0.2, 0.01}, c_out[PK_B] = {0.3, 0.45, 0.499};
    int32_t map[PK_S];
    pack_map(map);
    test_fill_uniform_f64(x_t, PK_S * PK_C, 31, -2, 2);
    test_fill_uniform_f64(F, PK_S * PK_C, 32, -2, 2);
    test_fill_uniform_f64(r, PK_S * PK_C, 33, -1, 1);
    DenoiseCtx ctx = {TF64(x_t, PK_S, PK_C), TF64(F, PK_S, PK_C), TF64(c_skip, PK_B), TF64(c_out, PK_B),
                      TI32(map, PK_S), TF64(out, PK_S, PK_C), r};
    Tensor R = TF64(r, PK_S, PK_C), DF = TF64(dF, PK_S, PK_C);
    REQUIRE_OK(op_edm_denoise_backward(&DF, &R, &ctx.c_out, &ctx.map));
    CHECK_NONZERO("dF", dF, PK_S * PK_C);
    /* L is linear in F: central differences exact up to rounding of L */
    GRADCHECK("edm_denoise dF", F, dF, PK_S * PK_C, denoise_objective, &ctx, 1e-3, 1e-10, 0, 0);
}

typedef struct {
    Tensor loss, pred, target, w, mask, map;
} MseCtx;

static double mse_objective(void *p) {
    MseCtx *c = p;
    if (op_weighted_mse_forward(&c->loss, NULL, NULL, &c->pred, &c->target, &c->w, &c->mask, &c->map) != VFM_OK)
        return NAN;
    return ((double *)c->loss.data)[0];
}

TEST(ops_edm_weighted_mse_gradcheck) {
    double pred[PK_S * PK_C], target[PK_S * PK_C], dpred[PK_S * PK_C], mask[PK_S], loss[1];
    double w[PK_B] = {15.1, 1.3, 4.0};
    int32_t map[PK_S];
    pack_map(map);
    test_fill_uniform_f64(pred, PK_S * PK_C, 41, -1, 1);
    test_fill_uniform_f64(target, PK_S * PK_C, 42, -1, 1);
    for (int s = 0; s < PK_S; s++) mask[s] = map[s] < 0 ? 0 : 1;
    mask[2] = 0.25; /* a fractional and a zero mask inside real samples */
    mask[5] = 0;
    MseCtx ctx = {TF64(loss, 1), TF64(pred, PK_S, PK_C), TF64(target, PK_S, PK_C), TF64(w, PK_B), TF64(mask, PK_S),
                  TI32(map, PK_S)};
    const double dloss = 0.7;
    Tensor DP = TF64(dpred, PK_S, PK_C);
    REQUIRE_OK(op_weighted_mse_backward(&DP, dloss, &ctx.pred, &ctx.target, &ctx.w, &ctx.mask, &ctx.map));
    CHECK_NONZERO("dpred", dpred, PK_S * PK_C);
    for (int64_t i = 0; i < PK_S * PK_C; i++) dpred[i] /= dloss; /* the check differentiates L itself */
    /* quadratic L: central differences exact up to rounding (~1e-16·|L|/h) */
    GRADCHECK("weighted_mse dpred", pred, dpred, PK_S * PK_C, mse_objective, &ctx, 1e-4, 1e-10, 1e-9, 0);
    /* rows with mask 0 and padding rows get exactly 0 */
    int zero = 1;
    for (int s = 0; s < PK_S; s++)
        for (int c = 0; c < PK_C; c++)
            if ((map[s] < 0 || mask[s] == 0) && dpred[s * PK_C + c] != 0) zero = 0;
    CHECK(zero);
}

/* The loss is summed over fixed chunks of rows: 1 and 2 threads give the same bits. */
TEST(ops_edm_weighted_mse_thread_independent) {
    enum { S = 3001, C = 16, B = 4 };
    float *pred = malloc(sizeof(float) * S * C), *target = malloc(sizeof(float) * S * C), mask[S], w[B] = {1, 2, 3, 4};
    float *dp1 = malloc(sizeof(float) * S * C), *dp2 = malloc(sizeof(float) * S * C), l1[1], l2[1], ss1[B], ss2[B];
    int32_t map[S];
    test_fill_uniform_f32(pred, S * C, 51, -1, 1);
    test_fill_uniform_f32(target, S * C, 52, -1, 1);
    for (int s = 0; s < S; s++) {
        map[s] = s % 11 == 10 ? -1 : (s * B) / S;
        mask[s] = 1;
    }
    Tensor P = TF32(pred, S, C), Tg = TF32(target, S, C), W = TF32(w, B), M = TF32(mask, S), MP = TI32(map, S);
    Tensor L1 = TF32(l1, 1), L2 = TF32(l2, 1), SS1 = TF32(ss1, B), SS2 = TF32(ss2, B);
    Tensor DP1 = TF32(dp1, S, C), DP2 = TF32(dp2, S, C);
    ops_set_threads(1);
    REQUIRE_OK(op_weighted_mse_forward(&L1, &SS1, NULL, &P, &Tg, &W, &M, &MP));
    REQUIRE_OK(op_weighted_mse_backward(&DP1, 1.0, &P, &Tg, &W, &M, &MP));
    ops_set_threads(2);
    REQUIRE_OK(op_weighted_mse_forward(&L2, &SS2, NULL, &P, &Tg, &W, &M, &MP));
    REQUIRE_OK(op_weighted_mse_backward(&DP2, 1.0, &P, &Tg, &W, &M, &MP));
    ops_set_threads(1);
    CHECK(memcmp(l1, l2, sizeof l1) == 0);
    CHECK(memcmp(ss1, ss2, sizeof ss1) == 0);
    CHECK(memcmp(dp1, dp2, sizeof(float) * S * C) == 0);
    /* E[(a-b)²] = 2/3 for a, b ~ U(-1,1): loss ≈ mean weight · 2/3 */
    CHECK_MSG(fabs(l1[0] - 2.5 * 2.0 / 3.0) < 0.05, "loss %.5f", l1[0]);
    free(pred); free(target); free(dp1); free(dp2);
}

TEST(ops_edm_weighted_mse_empty_mask_gives_zero) {
    float pred[2 * 3] = {1, 2, 3, 4, 5, 6}, target[2 * 3] = {0}, mask[2] = {0, 0}, w[1] = {2}, loss[1] = {-1}, dp[6];
    int32_t map[2] = {0, -1};
    Tensor P = TF32(pred, 2, 3), Tg = TF32(target, 2, 3), W = TF32(w, 1), M = TF32(mask, 2), MP = TI32(map, 2);
    Tensor L = TF32(loss, 1), DP = TF32(dp, 2, 3);
    REQUIRE_OK(op_weighted_mse_forward(&L, NULL, NULL, &P, &Tg, &W, &M, &MP));
    REQUIRE_OK(op_weighted_mse_backward(&DP, 1.0, &P, &Tg, &W, &M, &MP));
    CHECK(loss[0] == 0);
    for (int i = 0; i < 6; i++) CHECK(dp[i] == 0);
}

TEST(ops_edm_precondition_known_values) {
    /* σ = σ_d = 0.5: c_skip = 1/2, c_out = 0.25/√0.5 = √2/4, c_in = √2, c_noise = ln(0.5)/4, w = 0.5/0.0625 = 8 */
    double sigma[1] = {0.5}, cs[1], co[1], ci[1], cn[1], w[1];
    Tensor S = TF64(sigma, 1), CS = TF64(cs, 1), CO = TF64(co, 1), CI = TF64(ci, 1), CN = TF64(cn, 1), W = TF64(w, 1);
    REQUIRE_OK(op_edm_precondition(&CS, &CO, &CI, &CN, &W, &S, 0.5f));
    double want[5] = {0.5, sqrt(2.0) / 4, sqrt(2.0), log(0.5) / 4, 8.0}, got[5] = {cs[0], co[0], ci[0], cn[0], w[0]};
    CHECK_CLOSE_F64("precondition at sigma = sigma_data", got, want, 5, 1e-15, 0);
    /* λ·c_out² = 1: F regresses a unit-variance target */
    CHECK(fabs(w[0] * co[0] * co[0] - 1) < 1e-15);
    /* NULL outputs are allowed */
    CHECK_OK(op_edm_precondition(NULL, NULL, NULL, &CN, NULL, &S, 0.5f));
}

TEST(ops_edm_argument_errors) {
    float x[4 * 2] = {0}, y[4 * 2] = {0}, z[4 * 2] = {0}, sig[2] = {1, 1}, cin[2] = {1, 1}, mask[4] = {1, 1, 1, 1};
    int32_t map[4] = {0, 1, 2, -1}; /* sample 2 does not exist with B = 2 */
    Tensor X = TF32(x, 4, 2), Y = TF32(y, 4, 2), Z = TF32(z, 4, 2), SG = TF32(sig, 2), CI = TF32(cin, 2);
    Tensor MP = TI32(map, 4), M = TF32(mask, 4), L = TF32(z, 1);
    CHECK(op_edm_add_noise(&Z, NULL, &X, &Y, &SG, &CI, &MP) == VFM_ERR_SHAPE);
    CHECK(strstr(vfm_last_error(), "edm_add_noise") && strstr(vfm_last_error(), "tok2sample"));
    map[2] = 1;
    CHECK_OK(op_edm_add_noise(&Z, NULL, &X, &Y, &SG, &CI, &MP));
    CHECK(op_edm_add_noise(&Z, &Y, &X, &Y, &SG, NULL, &MP) == VFM_ERR_SHAPE); /* net_in without c_in */
    CHECK(strstr(vfm_last_error(), "c_in") != NULL);
    Tensor M3 = TF32(mask, 3);
    CHECK(op_weighted_mse_forward(&L, NULL, NULL, &X, &Y, &SG, &M3, &MP) == VFM_ERR_SHAPE);
    CHECK(strstr(vfm_last_error(), "weighted_mse_forward") && strstr(vfm_last_error(), "mask"));
    CHECK_OK(op_weighted_mse_forward(&L, NULL, NULL, &X, &Y, &SG, &M, &MP));
    double xd[8] = {0};
    Tensor XD = TF64(xd, 4, 2);
    CHECK(op_edm_denoise(&Z, &XD, &Y, &SG, &CI, &MP) == VFM_ERR_SHAPE); /* mixed dtypes */
    Tensor Fbad = TF32(y, 2, 4);
    CHECK(op_edm_denoise(&Z, &X, &Fbad, &SG, &CI, &MP) == VFM_ERR_SHAPE);
    CHECK(strstr(vfm_last_error(), "edm_denoise") && strstr(vfm_last_error(), "F"));
}
