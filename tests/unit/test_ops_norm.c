/* Tests of LayerNorm + adaLN modulate, the gated residual and RMSNorm: finite-difference
 * gradients on the f64 build over a pack of 3 samples with padding rows, PyTorch goldens on
 * the f32 build, accumulate (+=) semantics, NaN in padding rows, thread-count independence of
 * the parameter-gradient sums, shape errors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "golden.h"
#include "gradcheck.h"
#include "ops/ops.h"
#include "test.h"

/* Finite differences on f64: central, h = 1e-6; truncation O(h²) ~ 1e-12, rounding
 * ~ 1e-16·|L|/h ~ 1e-9 (|L| < 100 here), so atol 1e-7, rtol 1e-6 (of max|analytic|). */
#define FD_H 1e-6
#define FD_ATOL 1e-7
#define FD_RTOL 1e-6

/* f32 against PyTorch evaluated in float64 (stored as f32). Row statistics are summed in
 * double, so the error is a few f32 roundings of O(1..10) values: observed ≤ 5e-7 absolute;
 * atol 1e-5 + rtol 1e-5·max|ref| keeps a ≥ 20x margin and still catches any wrong term. */
#define GOLD_ATOL 1e-5
#define GOLD_RTOL 1e-5

static double *fill64(int64_t n, uint64_t seed, double lo, double hi) {
    double *p = malloc((size_t)n * sizeof *p);
    test_fill_uniform_f64(p, n, seed, lo, hi);
    return p;
}

static double *zeros64(int64_t n) { return calloc((size_t)n, sizeof(double)); }

/* A pack of samples with lengths[i] rows each followed by pads[i] padding rows (-1). */
static int64_t make_pack(int32_t *t2s, const int *lengths, const int *pads, int n_samples) {
    int64_t s = 0;
    for (int i = 0; i < n_samples; i++) {
        for (int k = 0; k < lengths[i]; k++) t2s[s++] = i;
        for (int k = 0; k < pads[i]; k++) t2s[s++] = -1;
    }
    return s;
}

static const int PACK_LENGTHS[3] = {4, 2, 5}, PACK_PADS[3] = {2, 1, 3};
enum { PACK_S = 17, PACK_B = 3 };

/* ---- layernorm + modulate: finite differences ------------------------------------------ */

typedef struct {
    int64_t S, D, B;
    int has_shift, has_scale;
    int32_t *t2s;
    double *x, *shift, *scale, *r, *y, *mean, *rstd;
} LnCtx;

static vfm_status ln_forward(LnCtx *c) {
    Tensor x = TF64(c->x, c->S, c->D), y = TF64(c->y, c->S, c->D), mean = TF64(c->mean, c->S),
           rstd = TF64(c->rstd, c->S), shift = TF64(c->shift, c->B, c->D), scale = TF64(c->scale, c->B, c->D),
           t2s = TI32(c->t2s, c->S);
    return op_layernorm_modulate_forward(&y, &mean, &rstd, &x, c->has_shift ? &shift : NULL,
                                         c->has_scale ? &scale : NULL, &t2s, 1e-5f);
}

static double ln_objective(void *p) {
    LnCtx *c = p;
    if (ln_forward(c) != VFM_OK) return NAN;
    return dot_f64(c->r, c->y, c->S * c->D);
}

TEST(layernorm_modulate_gradcheck_pack_with_padding) {
    static const int variants[3][2] = {{1, 1}, {0, 1}, {1, 0}}; /* (shift, scale) */
    for (int v = 0; v < 3; v++) {
        int32_t t2s[PACK_S];
        LnCtx c = {.S = make_pack(t2s, PACK_LENGTHS, PACK_PADS, 3), .D = 12, .B = PACK_B, .t2s = t2s,
                   .has_shift = variants[v][0], .has_scale = variants[v][1]};
        int64_t n = c.S * c.D, nb = c.B * c.D;
        c.x = fill64(n, 100 + v, -1.5, 2.5);
        c.shift = fill64(nb, 110 + v, -0.6, 0.6);
        c.scale = fill64(nb, 120 + v, -0.6, 0.6);
        c.r = fill64(n, 130 + v, -1, 1);
        c.y = zeros64(n);
        c.mean = zeros64(c.S);
        c.rstd = zeros64(c.S);
        double *dx = zeros64(n), *dshift = zeros64(nb), *dscale = zeros64(nb);
        REQUIRE_OK(ln_forward(&c));
        Tensor x = TF64(c.x, c.S, c.D), mean = TF64(c.mean, c.S), rstd = TF64(c.rstd, c.S),
               scale = TF64(c.scale, c.B, c.D), dy = TF64(c.r, c.S, c.D), tt = TI32(t2s, c.S);
        Tensor tdx = TF64(dx, c.S, c.D), tdshift = TF64(dshift, c.B, c.D), tdscale = TF64(dscale, c.B, c.D);
        REQUIRE_OK(op_layernorm_modulate_backward(&tdx, c.has_shift ? &tdshift : NULL, c.has_scale ? &tdscale : NULL,
                                                  &dy, &x, &mean, &rstd, c.has_scale ? &scale : NULL, &tt));
        CHECK_NONZERO("layernorm_modulate dx", dx, n);
        GRADCHECK("layernorm_modulate dx", c.x, dx, n, ln_objective, &c, FD_H, FD_ATOL, FD_RTOL, 0);
        for (int64_t s = 0; s < c.S; s++) /* padding rows: y = 0, stats 0, no gradient */
            if (t2s[s] < 0) {
                CHECK(c.mean[s] == 0 && c.rstd[s] == 0);
                for (int64_t d = 0; d < c.D; d++) CHECK(c.y[s * c.D + d] == 0 && dx[s * c.D + d] == 0);
            }
        if (c.has_shift) {
            CHECK_NONZERO("layernorm_modulate dshift", dshift, nb);
            GRADCHECK("layernorm_modulate dshift", c.shift, dshift, nb, ln_objective, &c, FD_H, FD_ATOL, FD_RTOL, 0);
        }
        if (c.has_scale) {
            CHECK_NONZERO("layernorm_modulate dscale", dscale, nb);
            GRADCHECK("layernorm_modulate dscale", c.scale, dscale, nb, ln_objective, &c, FD_H, FD_ATOL, FD_RTOL, 0);
        }
        free(c.x); free(c.shift); free(c.scale); free(c.r); free(c.y); free(c.mean); free(c.rstd);
        free(dx); free(dshift); free(dscale);
    }
}

/* ---- gated residual: finite differences ------------------------------------------------- */

typedef struct {
    int64_t S, D, B;
    int has_gate;
    int32_t *t2s;
    double *x, *y, *gate, *r, *out;
} GatedCtx;

static double gated_objective(void *p) {
    GatedCtx *c = p;
    Tensor x = TF64(c->x, c->S, c->D), y = TF64(c->y, c->S, c->D), gate = TF64(c->gate, c->B, c->D),
           out = TF64(c->out, c->S, c->D), t2s = TI32(c->t2s, c->S);
    if (op_gated_residual_forward(&out, &x, &y, c->has_gate ? &gate : NULL, &t2s) != VFM_OK) return NAN;
    return dot_f64(c->r, c->out, c->S * c->D);
}

TEST(gated_residual_gradcheck_pack_with_padding) {
    for (int has_gate = 1; has_gate >= 0; has_gate--) {
        int32_t t2s[PACK_S];
        GatedCtx c = {.S = make_pack(t2s, PACK_LENGTHS, PACK_PADS, 3), .D = 10, .B = PACK_B, .t2s = t2s,
                      .has_gate = has_gate};
        int64_t n = c.S * c.D, nb = c.B * c.D;
        c.x = fill64(n, 200, -2, 2);
        c.y = fill64(n, 201, -2, 2);
        c.gate = fill64(nb, 202, -1, 1);
        c.r = fill64(n, 203, -1, 1);
        c.out = zeros64(n);
        double *dx = zeros64(n), *dy = fill64(n, 204, 7, 8), *dgate = zeros64(nb);
        Tensor dout = TF64(c.r, c.S, c.D), y = TF64(c.y, c.S, c.D), gate = TF64(c.gate, c.B, c.D), tt = TI32(t2s, c.S);
        Tensor tdx = TF64(dx, c.S, c.D), tdy = TF64(dy, c.S, c.D), tdgate = TF64(dgate, c.B, c.D);
        REQUIRE_OK(op_gated_residual_backward(&tdx, &tdy, has_gate ? &tdgate : NULL, &dout, &y,
                                              has_gate ? &gate : NULL, &tt));
        CHECK_NONZERO("gated_residual dx", dx, n);
        CHECK_NONZERO("gated_residual dy", dy, n);
        GRADCHECK("gated_residual dx", c.x, dx, n, gated_objective, &c, FD_H, FD_ATOL, FD_RTOL, 0);
        GRADCHECK("gated_residual dy", c.y, dy, n, gated_objective, &c, FD_H, FD_ATOL, FD_RTOL, 0);
        if (has_gate) {
            CHECK_NONZERO("gated_residual dgate", dgate, nb);
            GRADCHECK("gated_residual dgate", c.gate, dgate, nb, gated_objective, &c, FD_H, FD_ATOL, FD_RTOL, 0);
        }
        free(c.x); free(c.y); free(c.gate); free(c.r); free(c.out); free(dx); free(dy); free(dgate);
    }
}

/* ---- RMSNorm: finite differences -------------------------------------------------------- */

typedef struct {
    int64_t N, d;
    int has_w;
    double *x, *w, *r, *y, *rstd;
} RmsCtx;

static double rms_objective(void *p) {
    RmsCtx *c = p;
    Tensor x = TF64(c->x, c->N, c->d), w = TF64(c->w, c->d), y = TF64(c->y, c->N, c->d), rstd = TF64(c->rstd, c->N);
    if (op_rmsnorm_forward(&y, &rstd, &x, c->has_w ? &w : NULL, 1e-5f) != VFM_OK) return NAN;
    return dot_f64(c->r, c->y, c->N * c->d);
}

TEST(rmsnorm_gradcheck_rows_and_per_head_view) {
    /* (rows, d, weight): plain rows; q[S=3,H=4,hd=8] viewed as [12,8] (per-head QK-norm); no weight */
    static const int cases[3][3] = {{6, 10, 1}, {3 * 4, 8, 1}, {5, 9, 0}};
    for (int k = 0; k < 3; k++) {
        RmsCtx c = {.N = cases[k][0], .d = cases[k][1], .has_w = cases[k][2]};
        int64_t n = c.N * c.d;
        c.x = fill64(n, 300 + k, -2, 2);
        c.w = fill64(c.d, 310 + k, 0.5, 1.5);
        c.r = fill64(n, 320 + k, -1, 1);
        c.y = zeros64(n);
        c.rstd = zeros64(c.N);
        REQUIRE(isfinite(rms_objective(&c)));
        double *dx = fill64(n, 330, 3, 4), *dw = zeros64(c.d); /* dx is overwritten */
        Tensor x = TF64(c.x, c.N, c.d), w = TF64(c.w, c.d), dy = TF64(c.r, c.N, c.d), rstd = TF64(c.rstd, c.N);
        Tensor tdx = TF64(dx, c.N, c.d), tdw = TF64(dw, c.d);
        REQUIRE_OK(op_rmsnorm_backward(&tdx, c.has_w ? &tdw : NULL, &dy, &x, &rstd, c.has_w ? &w : NULL));
        CHECK_NONZERO("rmsnorm dx", dx, n);
        GRADCHECK("rmsnorm dx", c.x, dx, n, rms_objective, &c, FD_H, FD_ATOL, FD_RTOL, 0);
        if (c.has_w) {
            CHECK_NONZERO("rmsnorm dw", dw, c.d);
            GRADCHECK("rmsnorm dw", c.w, dw, c.d, rms_objective, &c, FD_H, FD_ATOL, FD_RTOL, 0);
        }
        free(c.x); free(c.w); free(c.r); free(c.y); free(c.rstd); free(dx); free(dw);
    }
}

/* ---- goldens ------------------------------------------------------------------------------ */

static const Tensor *case_tensor(const Golden *g, int c, const char *name) {
    char key[64];
    snprintf(key, sizeof key, "c%d.%s", c, name);
    return golden_need(g, key);
}

static int case_int(const Golden *g, int c, const char *name) {
    char key[64];
    snprintf(key, sizeof key, "c%d.%s", c, name);
    return (int)golden_scalar(g, key);
}

/* A zero-filled f32 tensor shaped like ref (free .data). */
static Tensor zeros_like(const Tensor *ref) {
    Tensor t = *ref;
    t.data = calloc(1, tensor_bytes(ref) + 1);
    return t;
}

static Tensor copy_of(const Tensor *ref) {
    Tensor t = zeros_like(ref);
    memcpy(t.data, ref->data, tensor_bytes(ref));
    return t;
}

static void check_golden(const char *op, int c, const char *name, const Tensor *got, const Tensor *ref) {
    char what[96];
    snprintf(what, sizeof what, "%s %s (case %d)", op, name, c);
    CHECK_MSG(tensor_numel(got) == tensor_numel(ref), "%s: sizes differ", what);
    check_close_f32(what, got->data, ref->data, tensor_numel(ref), GOLD_ATOL, GOLD_RTOL, __FILE__, __LINE__);
}

TEST(layernorm_modulate_golden_vs_torch) {
    Golden *g = golden_load("ops_linear_norm_layernorm_modulate.bin");
    REQUIRE(g);
    int ncases = (int)golden_scalar(g, "ncases");
    float eps = (float)golden_scalar(g, "eps");
    REQUIRE(ncases == 3 && eps > 0);
    for (int c = 0; c < ncases; c++) {
        const Tensor *x = case_tensor(g, c, "x"), *shift = case_tensor(g, c, "shift"), *scale = case_tensor(g, c, "scale"),
                     *t2s = case_tensor(g, c, "tok2sample"), *r = case_tensor(g, c, "r"), *y_ref = case_tensor(g, c, "y"),
                     *mean_ref = case_tensor(g, c, "mean"), *rstd_ref = case_tensor(g, c, "rstd"),
                     *dx_ref = case_tensor(g, c, "dx"), *dshift_ref = case_tensor(g, c, "dshift"),
                     *dscale_ref = case_tensor(g, c, "dscale");
        REQUIRE(x && shift && scale && t2s && r && y_ref && mean_ref && rstd_ref && dx_ref && dshift_ref && dscale_ref);
        int has_shift = case_int(g, c, "has_shift"), has_scale = case_int(g, c, "has_scale");
        Tensor y = zeros_like(y_ref), mean = zeros_like(mean_ref), rstd = zeros_like(rstd_ref), dx = zeros_like(dx_ref),
               dshift = zeros_like(dshift_ref), dscale = zeros_like(dscale_ref);
        CHECK_OK(op_layernorm_modulate_forward(&y, &mean, &rstd, x, has_shift ? shift : NULL, has_scale ? scale : NULL,
                                               t2s, eps));
        check_golden("layernorm_modulate", c, "y", &y, y_ref);
        check_golden("layernorm_modulate", c, "mean", &mean, mean_ref);
        check_golden("layernorm_modulate", c, "rstd", &rstd, rstd_ref);
        CHECK_OK(op_layernorm_modulate_backward(&dx, has_shift ? &dshift : NULL, has_scale ? &dscale : NULL, r, x, &mean,
                                                &rstd, has_scale ? scale : NULL, t2s));
        check_golden("layernorm_modulate", c, "dx", &dx, dx_ref);
        check_golden("layernorm_modulate", c, "dshift", &dshift, dshift_ref);
        check_golden("layernorm_modulate", c, "dscale", &dscale, dscale_ref);
        free(y.data); free(mean.data); free(rstd.data); free(dx.data); free(dshift.data); free(dscale.data);
    }
    golden_free(g);
}

TEST(gated_residual_golden_vs_torch) {
    Golden *g = golden_load("ops_linear_norm_gated_residual.bin");
    REQUIRE(g);
    int ncases = (int)golden_scalar(g, "ncases");
    REQUIRE(ncases == 3);
    for (int c = 0; c < ncases; c++) {
        const Tensor *x = case_tensor(g, c, "x"), *yin = case_tensor(g, c, "y"), *gate = case_tensor(g, c, "gate"),
                     *t2s = case_tensor(g, c, "tok2sample"), *r = case_tensor(g, c, "r"),
                     *out_ref = case_tensor(g, c, "out"), *dx_ref = case_tensor(g, c, "dx"),
                     *dy_ref = case_tensor(g, c, "dy"), *dgate_ref = case_tensor(g, c, "dgate");
        REQUIRE(x && yin && gate && t2s && r && out_ref && dx_ref && dy_ref && dgate_ref);
        const Tensor *gate_arg = case_int(g, c, "has_gate") ? gate : NULL;
        Tensor out = zeros_like(out_ref), x_inplace = copy_of(x), dx = zeros_like(dx_ref), dy = zeros_like(dy_ref),
               dgate = zeros_like(dgate_ref), dout_alias = copy_of(r), dy2 = zeros_like(dy_ref);
        CHECK_OK(op_gated_residual_forward(&out, x, yin, gate_arg, t2s));
        check_golden("gated_residual", c, "out", &out, out_ref);
        CHECK_OK(op_gated_residual_forward(&x_inplace, &x_inplace, yin, gate_arg, t2s)); /* out aliases x */
        check_golden("gated_residual", c, "out in place", &x_inplace, out_ref);
        CHECK_OK(op_gated_residual_backward(&dx, &dy, gate_arg ? &dgate : NULL, r, yin, gate_arg, t2s));
        check_golden("gated_residual", c, "dx", &dx, dx_ref);
        check_golden("gated_residual", c, "dy", &dy, dy_ref);
        check_golden("gated_residual", c, "dgate", &dgate, dgate_ref);
        /* dx aliasing dout: the residual gradient passes through untouched */
        CHECK_OK(op_gated_residual_backward(&dout_alias, &dy2, NULL, &dout_alias, yin, gate_arg, t2s));
        CHECK(memcmp(dout_alias.data, r->data, tensor_bytes(r)) == 0);
        check_golden("gated_residual", c, "dy (dx aliases dout)", &dy2, dy_ref);
        free(out.data); free(x_inplace.data); free(dx.data); free(dy.data); free(dgate.data);
        free(dout_alias.data); free(dy2.data);
    }
    golden_free(g);
}

TEST(rmsnorm_golden_vs_torch) {
    Golden *g = golden_load("ops_linear_norm_rmsnorm.bin");
    REQUIRE(g);
    int ncases = (int)golden_scalar(g, "ncases");
    float eps = (float)golden_scalar(g, "eps");
    REQUIRE(ncases == 3 && eps > 0);
    for (int c = 0; c < ncases; c++) {
        const Tensor *x = case_tensor(g, c, "x"), *w = case_tensor(g, c, "w"), *r = case_tensor(g, c, "r"),
                     *y_ref = case_tensor(g, c, "y"), *rstd_ref = case_tensor(g, c, "rstd"),
                     *dx_ref = case_tensor(g, c, "dx"), *dw_ref = case_tensor(g, c, "dw");
        REQUIRE(x && w && r && y_ref && rstd_ref && dx_ref && dw_ref);
        const Tensor *w_arg = case_int(g, c, "has_w") ? w : NULL;
        Tensor y = zeros_like(y_ref), rstd = zeros_like(rstd_ref), dx = zeros_like(dx_ref), dw = zeros_like(dw_ref);
        CHECK_OK(op_rmsnorm_forward(&y, &rstd, x, w_arg, eps));
        check_golden("rmsnorm", c, "y", &y, y_ref);
        check_golden("rmsnorm", c, "rstd", &rstd, rstd_ref);
        CHECK_OK(op_rmsnorm_backward(&dx, w_arg ? &dw : NULL, r, x, &rstd, w_arg));
        check_golden("rmsnorm", c, "dx", &dx, dx_ref);
        check_golden("rmsnorm", c, "dw", &dw, dw_ref);
        free(y.data); free(rstd.data); free(dx.data); free(dw.data);
    }
    golden_free(g);
}

/* ---- accumulate semantics ------------------------------------------------------------------ */

/* Scratch for the f64 pack tests: S×D activations, B×D per-sample parameters. */
typedef struct {
    int32_t t2s[PACK_S];
    int64_t S, D, B;
    double *x, *y, *mean, *rstd, *shift, *scale, *dy;
} Pack64;

static void pack64_init(Pack64 *p, int64_t D, uint64_t seed) {
    p->S = make_pack(p->t2s, PACK_LENGTHS, PACK_PADS, 3);
    p->D = D;
    p->B = PACK_B;
    p->x = fill64(p->S * D, seed, -2, 2);
    p->y = zeros64(p->S * D);
    p->mean = zeros64(p->S);
    p->rstd = zeros64(p->S);
    p->shift = fill64(p->B * D, seed + 1, -0.5, 0.5);
    p->scale = fill64(p->B * D, seed + 2, -0.5, 0.5);
    p->dy = fill64(p->S * D, seed + 3, -1, 1);
}

static void pack64_free(Pack64 *p) {
    free(p->x); free(p->y); free(p->mean); free(p->rstd); free(p->shift); free(p->scale); free(p->dy);
}

TEST(layernorm_modulate_backward_accumulates) {
    Pack64 p;
    pack64_init(&p, 8, 400);
    int64_t n = p.S * p.D, nb = p.B * p.D;
    Tensor x = TF64(p.x, p.S, p.D), y = TF64(p.y, p.S, p.D), mean = TF64(p.mean, p.S), rstd = TF64(p.rstd, p.S),
           shift = TF64(p.shift, p.B, p.D), scale = TF64(p.scale, p.B, p.D), dy = TF64(p.dy, p.S, p.D),
           t2s = TI32(p.t2s, p.S);
    REQUIRE_OK(op_layernorm_modulate_forward(&y, &mean, &rstd, &x, &shift, &scale, &t2s, 1e-5f));
    double *dx0 = fill64(n, 410, -1, 1), *dx = malloc((size_t)n * 8), *dshift = zeros64(nb), *dscale = zeros64(nb);
    double *dx_once = zeros64(n), *dshift_once = zeros64(nb), *dscale_once = zeros64(nb), *expect = zeros64(n);
    Tensor tdx = TF64(dx, p.S, p.D), tdshift = TF64(dshift, p.B, p.D), tdscale = TF64(dscale, p.B, p.D);
    Tensor tdx_once = TF64(dx_once, p.S, p.D), tdshift_once = TF64(dshift_once, p.B, p.D),
           tdscale_once = TF64(dscale_once, p.B, p.D);
    REQUIRE_OK(op_layernorm_modulate_backward(&tdx_once, &tdshift_once, &tdscale_once, &dy, &x, &mean, &rstd, &scale, &t2s));
    memcpy(dx, dx0, (size_t)n * 8);
    for (int call = 0; call < 2; call++)
        REQUIRE_OK(op_layernorm_modulate_backward(&tdx, &tdshift, &tdscale, &dy, &x, &mean, &rstd, &scale, &t2s));
    for (int64_t i = 0; i < n; i++) expect[i] = dx0[i] + 2 * dx_once[i];
    CHECK_CLOSE_F64("dx = dx0 + 2g", dx, expect, n, 1e-14, 1e-14);
    for (int64_t i = 0; i < nb; i++) expect[i] = 2 * dshift_once[i];
    CHECK_CLOSE_F64("dshift doubled", dshift, expect, nb, 1e-14, 1e-14);
    for (int64_t i = 0; i < nb; i++) expect[i] = 2 * dscale_once[i];
    CHECK_CLOSE_F64("dscale doubled", dscale, expect, nb, 1e-14, 1e-14);
    CHECK_NONZERO("dx once", dx_once, n);
    CHECK_NONZERO("dshift once", dshift_once, nb);
    CHECK_NONZERO("dscale once", dscale_once, nb);
    free(dx0); free(dx); free(dshift); free(dscale); free(dx_once); free(dshift_once); free(dscale_once); free(expect);
    pack64_free(&p);
}

TEST(gated_residual_backward_accumulates) {
    Pack64 p;
    pack64_init(&p, 8, 500);
    int64_t n = p.S * p.D, nb = p.B * p.D;
    Tensor yin = TF64(p.x, p.S, p.D), gate = TF64(p.scale, p.B, p.D), dout = TF64(p.dy, p.S, p.D),
           t2s = TI32(p.t2s, p.S);
    double *dx0 = fill64(n, 510, -1, 1), *dx = malloc((size_t)n * 8), *dgate = zeros64(nb), *dgate_once = zeros64(nb);
    double *dy = zeros64(n), *expect = zeros64(n);
    Tensor tdx = TF64(dx, p.S, p.D), tdgate = TF64(dgate, p.B, p.D), tdgate_once = TF64(dgate_once, p.B, p.D),
           tdy = TF64(dy, p.S, p.D);
    REQUIRE_OK(op_gated_residual_backward(NULL, &tdy, &tdgate_once, &dout, &yin, &gate, &t2s));
    memcpy(dx, dx0, (size_t)n * 8);
    for (int call = 0; call < 2; call++)
        REQUIRE_OK(op_gated_residual_backward(&tdx, &tdy, &tdgate, &dout, &yin, &gate, &t2s));
    for (int64_t i = 0; i < nb; i++) expect[i] = 2 * dgate_once[i];
    CHECK_NONZERO("dgate once", dgate_once, nb);
    CHECK_CLOSE_F64("dgate doubled", dgate, expect, nb, 1e-14, 1e-14);
    for (int64_t i = 0; i < n; i++) expect[i] = dx0[i] + 2 * p.dy[i];
    CHECK_CLOSE_F64("dx = dx0 + 2 dout", dx, expect, n, 1e-14, 1e-14);
    free(dx0); free(dx); free(dgate); free(dgate_once); free(dy); free(expect);
    pack64_free(&p);
}

TEST(rmsnorm_backward_accumulates_dw_overwrites_dx) {
    enum { N = 7, D = 6 };
    double x[N * D], w[D], y[N * D], rstd[N], dy[N * D], dx1[N * D], dx2[N * D], dw[D] = {0}, dw_once[D] = {0};
    test_fill_uniform_f64(x, N * D, 600, -2, 2);
    test_fill_uniform_f64(w, D, 601, 0.5, 1.5);
    test_fill_uniform_f64(dy, N * D, 602, -1, 1);
    for (int i = 0; i < N * D; i++) dx2[i] = NAN;
    Tensor tx = TF64(x, N, D), tw = TF64(w, D), ty = TF64(y, N, D), tr = TF64(rstd, N), tdy = TF64(dy, N, D);
    Tensor tdx1 = TF64(dx1, N, D), tdx2 = TF64(dx2, N, D), tdw = TF64(dw, D), tdw_once = TF64(dw_once, D);
    REQUIRE_OK(op_rmsnorm_forward(&ty, &tr, &tx, &tw, 1e-5f));
    REQUIRE_OK(op_rmsnorm_backward(&tdx1, &tdw_once, &tdy, &tx, &tr, &tw));
    REQUIRE_OK(op_rmsnorm_backward(&tdx2, &tdw, &tdy, &tx, &tr, &tw));
    REQUIRE_OK(op_rmsnorm_backward(&tdx2, &tdw, &tdy, &tx, &tr, &tw));
    CHECK_CLOSE_F64("dx overwritten, not accumulated", dx2, dx1, N * D, 0, 0);
    for (int j = 0; j < D; j++) dw_once[j] *= 2;
    CHECK_CLOSE_F64("dw doubled", dw, dw_once, D, 1e-14, 1e-14);
}

/* ---- NaN in padding rows ----------------------------------------------------------------- */

static int same_bits(const void *a, const void *b, size_t n) { return memcmp(a, b, n) == 0; }

TEST(layernorm_modulate_ignores_nan_padding_rows) {
    Pack64 clean, dirty;
    pack64_init(&clean, 9, 700);
    pack64_init(&dirty, 9, 700);
    int64_t S = clean.S, D = clean.D, n = S * D, nb = clean.B * D;
    for (int64_t s = 0; s < S; s++)
        if (dirty.t2s[s] < 0)
            for (int64_t d = 0; d < D; d++) dirty.x[s * D + d] = dirty.dy[s * D + d] = NAN;
    double *dx[2] = {zeros64(n), zeros64(n)}, *dshift[2] = {zeros64(nb), zeros64(nb)},
           *dscale[2] = {zeros64(nb), zeros64(nb)};
    Pack64 *packs[2] = {&clean, &dirty};
    for (int k = 0; k < 2; k++) {
        Pack64 *p = packs[k];
        Tensor x = TF64(p->x, S, D), y = TF64(p->y, S, D), mean = TF64(p->mean, S), rstd = TF64(p->rstd, S),
               shift = TF64(p->shift, p->B, D), scale = TF64(p->scale, p->B, D), dy = TF64(p->dy, S, D),
               t2s = TI32(p->t2s, S), tdx = TF64(dx[k], S, D), tdshift = TF64(dshift[k], p->B, D),
               tdscale = TF64(dscale[k], p->B, D);
        REQUIRE_OK(op_layernorm_modulate_forward(&y, &mean, &rstd, &x, &shift, &scale, &t2s, 1e-5f));
        REQUIRE_OK(op_layernorm_modulate_backward(&tdx, &tdshift, &tdscale, &dy, &x, &mean, &rstd, &scale, &t2s));
    }
    /* padding rows of y are 0 in both, so whole tensors compare bit for bit */
    CHECK(same_bits(clean.y, dirty.y, (size_t)n * 8));
    CHECK(same_bits(clean.mean, dirty.mean, (size_t)S * 8));
    CHECK(same_bits(clean.rstd, dirty.rstd, (size_t)S * 8));
    CHECK(same_bits(dx[0], dx[1], (size_t)n * 8));
    CHECK(same_bits(dshift[0], dshift[1], (size_t)nb * 8));
    CHECK(same_bits(dscale[0], dscale[1], (size_t)nb * 8));
    CHECK_NONZERO("dscale", dscale[1], nb);
    for (int k = 0; k < 2; k++) { free(dx[k]); free(dshift[k]); free(dscale[k]); }
    pack64_free(&clean);
    pack64_free(&dirty);
}

TEST(gated_residual_ignores_nan_padding_rows) {
    Pack64 clean, dirty; /* x = residual input, y = branch output, scale = gate, dy = dout */
    pack64_init(&clean, 9, 800);
    pack64_init(&dirty, 9, 800);
    int64_t S = clean.S, D = clean.D, n = S * D, nb = clean.B * D;
    double *ybranch[2] = {fill64(n, 810, -1, 1), fill64(n, 810, -1, 1)};
    for (int64_t s = 0; s < S; s++)
        if (dirty.t2s[s] < 0)
            for (int64_t d = 0; d < D; d++) dirty.x[s * D + d] = ybranch[1][s * D + d] = NAN;
    double *out[2] = {zeros64(n), zeros64(n)}, *dx[2] = {zeros64(n), zeros64(n)}, *dy[2] = {zeros64(n), zeros64(n)},
           *dgate[2] = {zeros64(nb), zeros64(nb)};
    Pack64 *packs[2] = {&clean, &dirty};
    for (int k = 0; k < 2; k++) {
        Pack64 *p = packs[k];
        Tensor x = TF64(p->x, S, D), y = TF64(ybranch[k], S, D), gate = TF64(p->scale, p->B, D),
               dout = TF64(p->dy, S, D), t2s = TI32(p->t2s, S), tout = TF64(out[k], S, D), tdx = TF64(dx[k], S, D),
               tdy = TF64(dy[k], S, D), tdgate = TF64(dgate[k], p->B, D);
        REQUIRE_OK(op_gated_residual_forward(&tout, &x, &y, &gate, &t2s));
        REQUIRE_OK(op_gated_residual_backward(&tdx, &tdy, &tdgate, &dout, &y, &gate, &t2s));
    }
    for (int64_t s = 0; s < S; s++) {
        if (clean.t2s[s] >= 0) CHECK(same_bits(out[0] + s * D, out[1] + s * D, (size_t)D * 8));
        else CHECK(isnan(out[1][s * D]) && out[0][s * D] == clean.x[s * D]); /* padding rows: out = x */
    }
    CHECK(same_bits(dx[0], dx[1], (size_t)n * 8));
    CHECK(same_bits(dy[0], dy[1], (size_t)n * 8));
    CHECK(same_bits(dgate[0], dgate[1], (size_t)nb * 8));
    CHECK_NONZERO("dgate", dgate[1], nb);
    for (int64_t s = 0; s < S; s++) /* no gradient into padding rows of the branch */
        if (clean.t2s[s] < 0)
            for (int64_t d = 0; d < D; d++) CHECK(dy[1][s * D + d] == 0);
    for (int k = 0; k < 2; k++) { free(ybranch[k]); free(out[k]); free(dx[k]); free(dy[k]); free(dgate[k]); }
    pack64_free(&clean);
    pack64_free(&dirty);
}

/* ---- thread-count independence ---------------------------------------------------------- */

/* The per-sample and weight gradient sums have a fixed order: 1 and 4 threads give the same bits. */
TEST(norm_parameter_grads_same_bits_any_thread_count) {
    enum { S = 300, D = 200, B = 3, HD = 8, NH = S * D / HD };
    static const int lengths[3] = {120, 50, 110}, pads[3] = {7, 3, 10};
    int32_t t2s[S];
    REQUIRE(make_pack(t2s, lengths, pads, 3) == S);
    float *x = malloc(S * D * 4), *dy = malloc(S * D * 4), *y = malloc(S * D * 4), mean[S], rstd[S];
    float *shift = malloc(B * D * 4), *scale = malloc(B * D * 4), w[HD], *rstd_heads = malloc(NH * 4);
    test_fill_uniform_f32(x, S * D, 900, -2, 2);
    test_fill_uniform_f32(dy, S * D, 901, -1, 1);
    test_fill_uniform_f32(shift, B * D, 902, -1, 1);
    test_fill_uniform_f32(scale, B * D, 903, -1, 1);
    test_fill_uniform_f32(w, HD, 904, 0.5, 1.5);
    Tensor tx = TF32(x, S, D), tdy = TF32(dy, S, D), ty = TF32(y, S, D), tmean = TF32(mean, S), trstd = TF32(rstd, S),
           tshift = TF32(shift, B, D), tscale = TF32(scale, B, D), tt = TI32(t2s, S);
    /* RMSNorm on the per-head view [S·D/8, 8] */
    Tensor xh = TF32(x, NH, HD), dyh = TF32(dy, NH, HD), yh = TF32(y, NH, HD), rstdh = TF32(rstd_heads, NH),
           tw = TF32(w, HD);
    REQUIRE_OK(op_rmsnorm_forward(&yh, &rstdh, &xh, &tw, 1e-6f));
    REQUIRE_OK(op_layernorm_modulate_forward(&ty, &tmean, &trstd, &tx, &tshift, &tscale, &tt, 1e-6f));
    float *grads[2];
    const int64_t per_run = 3 * B * D + HD + S * D; /* dshift, dscale, dgate, dw, dx */
    for (int k = 0; k < 2; k++) {
        ops_set_threads(k == 0 ? 1 : 4);
        float *gbuf = grads[k] = calloc((size_t)per_run, 4);
        Tensor dshift = TF32(gbuf, B, D), dscale = TF32(gbuf + B * D, B, D), dgate = TF32(gbuf + 2 * B * D, B, D),
               dw = TF32(gbuf + 3 * B * D, HD), dx = TF32(gbuf + 3 * B * D + HD, S, D);
        REQUIRE_OK(op_layernorm_modulate_backward(&dx, &dshift, &dscale, &tdy, &tx, &tmean, &trstd, &tscale, &tt));
        REQUIRE_OK(op_gated_residual_backward(NULL, NULL, &dgate, &tdy, &tx, &tscale, &tt));
        REQUIRE_OK(op_rmsnorm_backward(NULL, &dw, &dyh, &xh, &rstdh, &tw));
    }
    ops_set_threads(1);
    CHECK(same_bits(grads[0], grads[1], (size_t)per_run * 4));
    const char *names[4] = {"dshift", "dscale", "dgate", "rmsnorm dw"};
    for (int part = 0; part < 4; part++) {
        int64_t lo = part * B * D, hi = part < 3 ? lo + B * D : lo + HD, nonzero = 0;
        for (int64_t i = lo; i < hi; i++) nonzero += grads[0][i] != 0;
        CHECK_MSG(nonzero == hi - lo, "%s: %lld of %lld entries are zero", names[part], (long long)(hi - lo - nonzero),
                  (long long)(hi - lo));
    }
    free(grads[0]); free(grads[1]); free(x); free(dy); free(y); free(shift); free(scale); free(rstd_heads);
}

/* ---- argument errors -------------------------------------------------------------------- */

static void check_shape_error(vfm_status s, const char *op, const char *arg) {
    CHECK_MSG(s == VFM_ERR_SHAPE, "%s: expected VFM_ERR_SHAPE, got %s", op, vfm_status_name(s));
    const char *msg = vfm_last_error();
    CHECK_MSG(strstr(msg, op) && strstr(msg, arg), "message '%s' should name %s and %s", msg, op, arg);
}

TEST(norm_ops_shape_errors) {
    enum { S = 6, D = 4 };
    float x[S * D] = {0}, y[S * D], mean[S], rstd[S], shift[2 * (D + 1)] = {0}, w[D + 1] = {0}, dx[S * D];
    int32_t t2s[S] = {0, 0, -1, 1, 1, -1}, t2s_bad[S] = {0, 0, -1, 1, 2, -1};
    Tensor tx = TF32(x, S, D), ty = TF32(y, S, D), tmean = TF32(mean, S), trstd = TF32(rstd, S),
           tshift = TF32(shift, 2, D), tshift_bad = TF32(shift, 2, D + 1), tt = TI32(t2s, S),
           tt_bad = TI32(t2s_bad, S), tt_short = TI32(t2s, S - 1), tdscale_bad = TF32(shift, 1, D), tdx = TF32(dx, S, D);
    check_shape_error(op_layernorm_modulate_forward(&ty, &tmean, &trstd, &tx, &tshift_bad, NULL, &tt, 1e-6f),
                      "layernorm_modulate_forward", "shift");
    check_shape_error(op_layernorm_modulate_forward(&ty, &tmean, &trstd, &tx, &tshift, NULL, &tt_short, 1e-6f),
                      "layernorm_modulate_forward", "tok2sample");
    check_shape_error(op_layernorm_modulate_forward(&ty, &tmean, &trstd, &tx, &tshift, NULL, &tt_bad, 1e-6f),
                      "layernorm_modulate_forward", "tok2sample");
    check_shape_error(op_layernorm_modulate_backward(&tdx, NULL, &tdscale_bad, &ty, &tx, &tmean, &trstd, &tshift, &tt),
                      "layernorm_modulate_backward", "dscale");
    Tensor y_short = TF32(y, S - 1, D);
    check_shape_error(op_gated_residual_forward(&tx, &tx, &y_short, &tshift, &tt), "gated_residual_forward", "y");
    check_shape_error(op_gated_residual_backward(&tdx, &ty, &tshift_bad, &tx, &ty, &tshift, &tt),
                      "gated_residual_backward", "dgate");
    Tensor tw_bad = TF32(w, D + 1), tw = TF32(w, D), trstd_bad = TF32(rstd, S - 1);
    check_shape_error(op_rmsnorm_forward(&ty, &trstd, &tx, &tw_bad, 1e-6f), "rmsnorm_forward", "w");
    check_shape_error(op_rmsnorm_backward(&tdx, NULL, &ty, &tx, &trstd_bad, &tw), "rmsnorm_backward", "rstd");
    Tensor x64 = TF64(dx, S / 2, D);
    check_shape_error(op_rmsnorm_forward(&ty, &trstd, &x64, NULL, 1e-6f), "rmsnorm_forward", "y");
    /* the correct calls pass */
    CHECK_OK(op_layernorm_modulate_forward(&ty, &tmean, &trstd, &tx, &tshift, NULL, &tt, 1e-6f));
    CHECK_OK(op_rmsnorm_forward(&ty, &trstd, &tx, &tw, 1e-6f));
}
