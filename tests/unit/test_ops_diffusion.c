/* Tests of the flow-matching and DDPM ops: per-sample noise mixing, the learned-sigma channel
 * halves, the DDPM VB term (finite-difference gradient in f64 over the KL and the decoder-NLL
 * branches, f32 vs f64, NaN padding) and the reverse step against its formula. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "diffusion/ddpm.h"
#include "gradcheck.h"
#include "ops/ops.h"
#include "test.h"

/* 3 samples of 2, 3 and 1 rows, padded to 8 rows: map 0 0 -1 1 1 1 -1 2 */
enum { DS = 8, DC = 6, DB = 3 };
static const int32_t DMAP[DS] = {0, 0, -1, 1, 1, 1, -1, 2};

TEST(ops_noise_mix_values_and_padding) {
    float x0[DS * DC], n[DS * DC], out[DS * DC], a[DB] = {0.25f, 1.0f, -1.0f}, s[DB] = {0.75f, 0.0f, 1.0f};
    test_fill_uniform_f32(x0, DS * DC, 1, -1, 1);
    test_fill_uniform_f32(n, DS * DC, 2, -1, 1);
    for (int c = 0; c < DC; c++) x0[2 * DC + c] = n[6 * DC + c] = NAN; /* padding rows are never read */
    memset(out, 0xff, sizeof out);
    Tensor X0 = TF32(x0, DS, DC), N = TF32(n, DS, DC), O = TF32(out, DS, DC), A = TF32(a, DB), Sg = TF32(s, DB);
    Tensor map = TI32((int32_t *)DMAP, DS);
    REQUIRE_OK(op_noise_mix(&O, &X0, &N, &A, &Sg, &map));
    for (int r = 0; r < DS; r++)
        for (int c = 0; c < DC; c++) {
            int b = DMAP[r];
            float want = b < 0 ? 0.0f : a[b] * x0[r * DC + c] + s[b] * n[r * DC + c];
            CHECK_MSG(out[r * DC + c] == want, "row %d col %d: %g vs %g", r, c, out[r * DC + c], want);
        }
}

TEST(ops_channel_halves_split_merge_layout) {
    /* rows of 2 positions × (2 first | 2 second) values: [a0 a1 b0 b1 | a2 a3 b2 b3] */
    float x[2 * 8], first[2 * 4], second[2 * 4], back[2 * 8];
    for (int i = 0; i < 16; i++) x[i] = (float)i;
    Tensor X = TF32(x, 2, 8), F = TF32(first, 2, 4), Sd = TF32(second, 2, 4), B = TF32(back, 2, 8);
    REQUIRE_OK(op_channel_halves_split(&F, &Sd, &X, 2));
    const float want_first[8] = {0, 1, 4, 5, 8, 9, 12, 13}, want_second[8] = {2, 3, 6, 7, 10, 11, 14, 15};
    CHECK(memcmp(first, want_first, sizeof first) == 0);
    CHECK(memcmp(second, want_second, sizeof second) == 0);
    REQUIRE_OK(op_channel_halves_merge(&B, &F, &Sd, 2));
    CHECK(memcmp(back, x, sizeof x) == 0);
    REQUIRE_OK(op_channel_halves_merge(&B, &F, NULL, 2));
    CHECK(back[2] == 0 && back[3] == 0 && back[4] == 4);
    Tensor bad = TF32(x, 2, 6);
    CHECK(op_channel_halves_split(&F, &Sd, &bad, 4) == VFM_ERR_SHAPE);
}

/* The VB inputs of the 3 samples: timesteps 0 (decoder NLL), 5 and 300 of the 1000-step chain,
 * x_t made from x0 and a true ε, the prediction ε̂ near it (so the t = 0 bins are not saturated),
 * x0 covering both edge bins and the middle. */
typedef struct VbCase {
    double v[DS * DC], eps[DS * DC], xt[DS * DC], x0[DS * DC], coef[DB * DDPM_VB_NCOEF], mask[DS];
} VbCase;

static void vb_case(VbCase *k) {
    static const int steps[DB] = {0, 5, 300};
    DdpmChain chain;
    ddpm_chain_init(&chain, 0);
    double e_true[DS * DC], delta[DS * DC];
    test_fill_uniform_f64(k->x0, DS * DC, 11, -1.3, 1.3);
    test_fill_uniform_f64(e_true, DS * DC, 12, -2, 2);
    test_fill_uniform_f64(delta, DS * DC, 13, -0.3, 0.3);
    test_fill_uniform_f64(k->v, DS * DC, 14, -0.9, 0.9);
    for (int b = 0; b < DB; b++) ddpm_vb_coef(&chain, steps[b], k->coef + b * DDPM_VB_NCOEF);
    k->x0[0] = -1.2, k->x0[1] = 1.2, k->x0[2] = 0.1; /* sample 0 (t = 0): both edges and the middle */
    for (int r = 0; r < DS; r++) {
        int b = DMAP[r] < 0 ? 0 : DMAP[r];
        double ac = chain.alpha_bar[steps[b]];
        k->mask[r] = DMAP[r] < 0 ? 0 : 1;
        for (int c = 0; c < DC; c++) {
            int i = r * DC + c;
            k->xt[i] = sqrt(ac) * k->x0[i] + sqrt(1 - ac) * e_true[i];
            k->eps[i] = e_true[i] + delta[i];
        }
    }
}

typedef struct VbCtx {
    VbCase *k;
    double loss[1];
} VbCtx;

static Tensor T2(double *p) { return TF64(p, DS, DC); }

static double vb_objective(void *p) {
    VbCtx *c = p;
    Tensor L = TF64(c->loss, 1), V = T2(c->k->v), E = T2(c->k->eps), XT = T2(c->k->xt), X0 = T2(c->k->x0);
    Tensor K = TF64(c->k->coef, DB, DDPM_VB_NCOEF), M = TF64(c->k->mask, DS), map = TI32((int32_t *)DMAP, DS);
    if (op_ddpm_vb_forward(&L, NULL, &V, &E, &XT, &X0, &K, &M, &map) != VFM_OK) return NAN;
    return c->loss[0];
}

TEST(ops_ddpm_vb_gradcheck_kl_and_decoder_nll) {
    VbCase k;
    vb_case(&k);
    double dv[DS * DC];
    Tensor V = T2(k.v), E = T2(k.eps), XT = T2(k.xt), X0 = T2(k.x0), DV = T2(dv);
    Tensor K = TF64(k.coef, DB, DDPM_VB_NCOEF), M = TF64(k.mask, DS), map = TI32((int32_t *)DMAP, DS);
    REQUIRE_OK(op_ddpm_vb_backward(&DV, 1.0, &V, &E, &XT, &X0, &K, &M, &map));
    /* every real element of every sample moves the loss (t = 0 included) */
    for (int r = 0; r < DS; r++)
        for (int c = 0; c < DC; c++)
            CHECK_MSG((dv[r * DC + c] != 0) == (DMAP[r] >= 0), "dv[%d,%d] = %g", r, c, dv[r * DC + c]);
    VbCtx ctx = {&k, {0}};
    double l0 = vb_objective(&ctx);
    CHECK_MSG(isfinite(l0) && l0 > 0, "vb loss %g", l0);
    GRADCHECK("ddpm_vb dv", k.v, dv, DS * DC, vb_objective, &ctx, 1e-6, 1e-9, 1e-6, 0);
}

TEST(ops_ddpm_vb_f32_matches_f64_and_ignores_padding) {
    VbCase k;
    vb_case(&k);
    float v[DS * DC], e[DS * DC], xt[DS * DC], x0[DS * DC], coef[DB * DDPM_VB_NCOEF], mask[DS], dv[DS * DC];
    for (int i = 0; i < DS * DC; i++) v[i] = (float)k.v[i], e[i] = (float)k.eps[i], xt[i] = (float)k.xt[i], x0[i] = (float)k.x0[i];
    for (int i = 0; i < DB * DDPM_VB_NCOEF; i++) coef[i] = (float)k.coef[i];
    for (int i = 0; i < DS; i++) mask[i] = (float)k.mask[i];
    for (int c = 0; c < DC; c++) v[2 * DC + c] = e[6 * DC + c] = x0[2 * DC + c] = NAN; /* padding */
    mask[6] = NAN;
    float loss32[1], sums[DB];
    double loss64[1], sums64[DB];
    Tensor map = TI32((int32_t *)DMAP, DS);
    Tensor V = TF32(v, DS, DC), E = TF32(e, DS, DC), XT = TF32(xt, DS, DC), X0 = TF32(x0, DS, DC);
    Tensor K = TF32(coef, DB, DDPM_VB_NCOEF), M = TF32(mask, DS), L = TF32(loss32, 1), SS = TF32(sums, DB);
    memset(dv, 0xff, sizeof dv);
    Tensor DV = TF32(dv, DS, DC);
    REQUIRE_OK(op_ddpm_vb_forward(&L, &SS, &V, &E, &XT, &X0, &K, &M, &map));
    REQUIRE_OK(op_ddpm_vb_backward(&DV, 1.0, &V, &E, &XT, &X0, &K, &M, &map));
    for (int c = 0; c < DC; c++) CHECK(dv[2 * DC + c] == 0 && dv[6 * DC + c] == 0);
    Tensor V6 = T2(k.v), E6 = T2(k.eps), XT6 = T2(k.xt), X06 = T2(k.x0), L6 = TF64(loss64, 1), SS6 = TF64(sums64, DB);
    Tensor K6 = TF64(k.coef, DB, DDPM_VB_NCOEF), M6 = TF64(k.mask, DS);
    REQUIRE_OK(op_ddpm_vb_forward(&L6, &SS6, &V6, &E6, &XT6, &X06, &K6, &M6, &map));
    /* inputs rounded to f32: rel 1e-4 (the t = 0 bins amplify rounding of the mean) */
    CHECK_MSG(fabs(loss32[0] - loss64[0]) <= 1e-4 * fabs(loss64[0]), "f32 %.8g vs f64 %.8g", loss32[0], loss64[0]);
    double total = 0, rows = 0;
    for (int b = 0; b < DB; b++) total += sums64[b];
    for (int r = 0; r < DS; r++) rows += k.mask[r];
    CHECK_MSG(fabs(total / rows - loss64[0]) <= 1e-12 * loss64[0], "per-sample sums %.12g vs loss %.12g", total / rows,
              loss64[0]);
}

TEST(ops_ddpm_step_matches_its_formula) {
    enum { N = 12 };
    float x[N], e[N], v[N], z[N], out[N];
    test_fill_uniform_f32(x, N, 21, -2, 2);
    test_fill_uniform_f32(e, N, 22, -2, 2);
    test_fill_uniform_f32(v, N, 23, -1, 1);
    test_fill_uniform_f32(z, N, 24, -2, 2);
    DdpmStepCoef c = {1.3, 0.4, 0.7, 0.2, 0.05, -7.0, -4.0, -5.5};
    Tensor X = TF32(x, N), E = TF32(e, N), Vt = TF32(v, N), Z = TF32(z, N), O = TF32(out, N);
    for (int mode = 0; mode < 3; mode++) { /* learned variance, fixed variance, no noise */
        REQUIRE_OK(op_ddpm_step(&O, &X, &E, mode == 0 ? &Vt : NULL, mode < 2 ? &Z : NULL, &c));
        for (int i = 0; i < N; i++) {
            double px0 = c.recip_ac * x[i] - c.recipm1_ac * e[i], mean = c.c_x0 * px0 + c.c_xt * x[i] + c.c_eps * e[i];
            double f = 0.5 * (v[i] + 1.0), logvar = mode == 0 ? f * c.max_log + (1 - f) * c.min_log : c.fixed_logvar;
            double want = mean + (mode < 2 ? exp(0.5 * logvar) * z[i] : 0.0);
            CHECK_MSG(fabs(out[i] - want) <= 1e-6 * fabs(want) + 1e-7, "mode %d [%d]: %g vs %g", mode, i, out[i], want);
        }
    }
}
