/* Tests of the linear op (bias, GELU epilogue) and the activations GELU, SiLU, SwiGLU:
 * finite-difference gradients on the f64 build, PyTorch goldens on the f32 build, accumulate
 * semantics, thread-count independence of the bias gradient, shape errors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "golden.h"
#include "gradcheck.h"
#include "ops/ops.h"
#include "test.h"

/* Finite differences on f64: central, h = 1e-6. The truncation error is O(h²·|f'''|) ~ 1e-12
 * and the rounding error ~ 1e-16·|L|/h ~ 1e-9 for these sizes (|L| < 100), so atol 1e-7 and
 * rtol 1e-6 leave a 100x margin and still catch any wrong term. */
#define FD_H 1e-6
#define FD_ATOL 1e-7
#define FD_RTOL 1e-6

static double *fill64(int64_t n, uint64_t seed, double lo, double hi) {
    double *p = malloc((size_t)n * sizeof *p);
    test_fill_uniform_f64(p, n, seed, lo, hi);
    return p;
}

static double *zeros64(int64_t n) { return calloc((size_t)n, sizeof(double)); }

/* ---- linear: finite differences ------------------------------------------------------- */

typedef struct {
    int64_t n, in, out;
    int has_bias;
    Activation act;
    double *x, *w, *b, *r, *y, *pre;
} LinearCtx;

static double linear_objective(void *p) {
    LinearCtx *c = p;
    Tensor x = TF64(c->x, c->n, c->in), w = TF64(c->w, c->out, c->in), b = TF64(c->b, c->out);
    Tensor y = TF64(c->y, c->n, c->out), pre = TF64(c->pre, c->n, c->out);
    if (op_linear_forward(&y, c->act != ACT_NONE ? &pre : NULL, &x, &w, c->has_bias ? &b : NULL, c->act) != VFM_OK)
        return NAN;
    return dot_f64(c->r, c->y, c->n * c->out);
}

static void linear_gradcheck_case(int has_bias, Activation act, int dx_accumulate) {
    LinearCtx c = {.n = 5, .in = 7, .out = 6, .has_bias = has_bias, .act = act};
    int64_t nx = c.n * c.in, nw = c.out * c.in, ny = c.n * c.out;
    c.x = fill64(nx, 11, -2, 2);
    c.w = fill64(nw, 12, -0.8, 0.8);
    c.b = fill64(c.out, 13, -0.5, 0.5);
    c.r = fill64(ny, 14, -1, 1);
    c.y = zeros64(ny);
    c.pre = zeros64(ny);
    double *dy = malloc((size_t)ny * sizeof *dy), *dw = zeros64(nw), *db = zeros64(c.out);
    /* with dx_accumulate the analytic dx is read as (dx after) - (dx before) */
    double *dx = dx_accumulate ? fill64(nx, 15, -3, 3) : fill64(nx, 16, 1e3, 2e3);
    double *dx_before = malloc((size_t)nx * sizeof *dx_before);
    memcpy(dx_before, dx, (size_t)nx * sizeof *dx);
    memcpy(dy, c.r, (size_t)ny * sizeof *dy);
    REQUIRE(isfinite(linear_objective(&c)));
    Tensor tx = TF64(c.x, c.n, c.in), tw = TF64(c.w, c.out, c.in), tpre = TF64(c.pre, c.n, c.out);
    Tensor tdx = TF64(dx, c.n, c.in), tdw = TF64(dw, c.out, c.in), tdb = TF64(db, c.out), tdy = TF64(dy, c.n, c.out);
    REQUIRE_OK(op_linear_backward(&tdx, &tdw, has_bias ? &tdb : NULL, &tdy, &tx, &tw, act != ACT_NONE ? &tpre : NULL,
                                  act, dx_accumulate));
    if (dx_accumulate)
        for (int64_t i = 0; i < nx; i++) dx[i] -= dx_before[i];
    CHECK_NONZERO("dx", dx, nx);
    CHECK_NONZERO("dw", dw, nw);
    GRADCHECK("linear dx", c.x, dx, nx, linear_objective, &c, FD_H, FD_ATOL, FD_RTOL, 0);
    GRADCHECK("linear dw", c.w, dw, nw, linear_objective, &c, FD_H, FD_ATOL, FD_RTOL, 0);
    if (has_bias) {
        CHECK_NONZERO("db", db, c.out);
        GRADCHECK("linear db", c.b, db, c.out, linear_objective, &c, FD_H, FD_ATOL, FD_RTOL, 0);
    } else {
        for (int64_t j = 0; j < c.out; j++) CHECK(db[j] == 0); /* NULL db: nothing written */
    }
    free(c.x); free(c.w); free(c.b); free(c.r); free(c.y); free(c.pre);
    free(dy); free(dx); free(dx_before); free(dw); free(db);
}

TEST(linear_gradcheck_bias_gelu_erf) { linear_gradcheck_case(1, ACT_GELU_ERF, 0); }
TEST(linear_gradcheck_bias_gelu_tanh) { linear_gradcheck_case(1, ACT_GELU_TANH, 0); }
TEST(linear_gradcheck_bias_no_activation) { linear_gradcheck_case(1, ACT_NONE, 0); }
TEST(linear_gradcheck_no_bias_no_activation) { linear_gradcheck_case(0, ACT_NONE, 0); }
TEST(linear_gradcheck_no_bias_gelu_tanh_dx_accumulate) { linear_gradcheck_case(0, ACT_GELU_TANH, 1); }

/* ---- activations: finite differences -------------------------------------------------- */

enum { KIND_GELU_ERF, KIND_GELU_TANH, KIND_SILU, KIND_SWIGLU };

typedef struct {
    int kind;
    int64_t rows, cols; /* of x; y has cols/2 for SwiGLU */
    double *x, *r, *y;
} ActCtx;

static int64_t act_out_cols(const ActCtx *c) { return c->kind == KIND_SWIGLU ? c->cols / 2 : c->cols; }

static vfm_status act_forward(int kind, Tensor *y, const Tensor *x) {
    switch (kind) {
    case KIND_GELU_ERF: return op_gelu_forward(y, x, ACT_GELU_ERF);
    case KIND_GELU_TANH: return op_gelu_forward(y, x, ACT_GELU_TANH);
    case KIND_SILU: return op_silu_forward(y, x);
    default: return op_swiglu_forward(y, x);
    }
}

static vfm_status act_backward(int kind, Tensor *dx, const Tensor *dy, const Tensor *x) {
    switch (kind) {
    case KIND_GELU_ERF: return op_gelu_backward(dx, dy, x, ACT_GELU_ERF);
    case KIND_GELU_TANH: return op_gelu_backward(dx, dy, x, ACT_GELU_TANH);
    case KIND_SILU: return op_silu_backward(dx, dy, x);
    default: return op_swiglu_backward(dx, dy, x);
    }
}

static double act_objective(void *p) {
    ActCtx *c = p;
    Tensor x = TF64(c->x, c->rows, c->cols), y = TF64(c->y, c->rows, act_out_cols(c));
    if (act_forward(c->kind, &y, &x) != VFM_OK) return NAN;
    return dot_f64(c->r, c->y, c->rows * act_out_cols(c));
}

TEST(activations_gradcheck) {
    static const char *names[] = {"gelu_erf dx", "gelu_tanh dx", "silu dx", "swiglu dx"};
    for (int kind = 0; kind < 4; kind++) {
        ActCtx c = {.kind = kind, .rows = 6, .cols = 10};
        int64_t nx = c.rows * c.cols, ny = c.rows * act_out_cols(&c);
        c.x = fill64(nx, 20 + kind, -4, 4); /* covers the tails of erf/tanh/sigmoid */
        c.r = fill64(ny, 30 + kind, -1, 1);
        c.y = zeros64(ny);
        double *dx = fill64(nx, 40, 5, 6); /* overwritten (=) */
        Tensor tx = TF64(c.x, c.rows, c.cols), tdx = TF64(dx, c.rows, c.cols), tr = TF64(c.r, c.rows, act_out_cols(&c));
        CHECK_OK(act_backward(kind, &tdx, &tr, &tx));
        CHECK_NONZERO(names[kind], dx, nx);
        GRADCHECK(names[kind], c.x, dx, nx, act_objective, &c, FD_H, FD_ATOL, FD_RTOL, 0);
        free(c.x); free(c.r); free(c.y); free(dx);
    }
}

/* ---- goldens (PyTorch, float64 reference stored as f32) -------------------------------- */

/* f32 against the float64 PyTorch reference. The GEMMs sum ≤ 40 products of O(1) terms in f32
 * (relative error ~ K·2⁻²⁴ ≈ 2.4e-6 worst case, ~4e-7 typical) and erf/tanh/exp are within a few
 * ulp, so every tensor must agree to atol 1e-5 + rtol 1e-5·max|ref| (outputs are O(1..10)). */
#define GOLD_ATOL 1e-5
#define GOLD_RTOL 1e-5

static float *copy32(const Tensor *t) {
    float *p = malloc(tensor_bytes(t));
    memcpy(p, t->data, tensor_bytes(t));
    return p;
}

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

TEST(linear_golden_vs_torch) {
    Golden *g = golden_load("ops_linear_norm_linear.bin");
    REQUIRE(g);
    int ncases = (int)golden_scalar(g, "ncases");
    REQUIRE(ncases == 3);
    for (int c = 0; c < ncases; c++) {
        const Tensor *x = case_tensor(g, c, "x"), *w = case_tensor(g, c, "w"), *b = case_tensor(g, c, "b");
        const Tensor *r = case_tensor(g, c, "r"), *y_ref = case_tensor(g, c, "y"), *pre_ref = case_tensor(g, c, "pre");
        const Tensor *dx_ref = case_tensor(g, c, "dx"), *dw_ref = case_tensor(g, c, "dw"), *db_ref = case_tensor(g, c, "db");
        REQUIRE(x && w && b && r && y_ref && pre_ref && dx_ref && dw_ref && db_ref);
        Activation act = (Activation)case_int(g, c, "act");
        int has_bias = case_int(g, c, "has_bias");
        int64_t n = x->shape[0], in = x->shape[1], out = w->shape[0];
        float *y = calloc((size_t)(n * out), 4), *pre = calloc((size_t)(n * out), 4), *dy = copy32(r);
        float *dx = calloc((size_t)(n * in), 4), *dw = calloc((size_t)(out * in), 4), *db = calloc((size_t)out, 4);
        Tensor ty = TF32(y, n, out), tpre = TF32(pre, n, out), tdy = TF32(dy, n, out);
        Tensor tdx = TF32(dx, n, in), tdw = TF32(dw, out, in), tdb = TF32(db, out);
        Tensor *pre_arg = act != ACT_NONE ? &tpre : NULL;
        CHECK_OK(op_linear_forward(&ty, pre_arg, x, w, has_bias ? b : NULL, act));
        CHECK_CLOSE_F32("linear y", y, y_ref->data, n * out, GOLD_ATOL, GOLD_RTOL);
        if (pre_arg) CHECK_CLOSE_F32("linear pre", pre, pre_ref->data, n * out, GOLD_ATOL, GOLD_RTOL);
        CHECK_OK(op_linear_backward(&tdx, &tdw, has_bias ? &tdb : NULL, &tdy, x, w, pre_arg, act, 0));
        CHECK_CLOSE_F32("linear dx", dx, dx_ref->data, n * in, GOLD_ATOL, GOLD_RTOL);
        CHECK_CLOSE_F32("linear dw", dw, dw_ref->data, out * in, GOLD_ATOL, GOLD_RTOL);
        CHECK_CLOSE_F32("linear db", db, db_ref->data, out, GOLD_ATOL, GOLD_RTOL);
        free(y); free(pre); free(dy); free(dx); free(dw); free(db);
    }
    golden_free(g);
}

TEST(activations_golden_vs_torch) {
    static const char *names[] = {"gelu_erf", "gelu_tanh", "silu", "swiglu"};
    Golden *g = golden_load("ops_linear_norm_activations.bin");
    REQUIRE(g);
    int ncases = (int)golden_scalar(g, "ncases");
    REQUIRE(ncases >= 4);
    for (int c = 0; c < ncases; c++) {
        const Tensor *x = case_tensor(g, c, "x"), *r = case_tensor(g, c, "r");
        const Tensor *y_ref = case_tensor(g, c, "y"), *dx_ref = case_tensor(g, c, "dx");
        REQUIRE(x && r && y_ref && dx_ref);
        int kind = case_int(g, c, "kind");
        REQUIRE(kind >= 0 && kind < 4);
        Tensor y = *y_ref, dx = *dx_ref; /* same shapes, own buffers */
        y.data = calloc(1, tensor_bytes(y_ref));
        dx.data = calloc(1, tensor_bytes(dx_ref));
        char what[64];
        CHECK_OK(act_forward(kind, &y, x));
        snprintf(what, sizeof what, "%s y (case %d)", names[kind], c);
        CHECK_CLOSE_F32(what, y.data, y_ref->data, tensor_numel(&y), GOLD_ATOL, GOLD_RTOL);
        CHECK_OK(act_backward(kind, &dx, r, x));
        snprintf(what, sizeof what, "%s dx (case %d)", names[kind], c);
        CHECK_CLOSE_F32(what, dx.data, dx_ref->data, tensor_numel(&dx), GOLD_ATOL, GOLD_RTOL);
        free(y.data);
        free(dx.data);
    }
    golden_free(g);
}

/* ---- accumulate semantics -------------------------------------------------------------- */

TEST(linear_backward_accumulates_and_rewrites_dy) {
    enum { N = 4, IN = 5, OUT = 3 };
    double x[N * IN], w[OUT * IN], pre[N * OUT], y[N * OUT], r[N * OUT], dy[N * OUT];
    double dx1[N * IN], dx2[N * IN], dw[OUT * IN], db[OUT], dw1[OUT * IN], db1[OUT], dpre[N * OUT];
    test_fill_uniform_f64(x, N * IN, 1, -2, 2);
    test_fill_uniform_f64(w, OUT * IN, 2, -1, 1);
    test_fill_uniform_f64(r, N * OUT, 3, -1, 1);
    Tensor tx = TF64(x, N, IN), tw = TF64(w, OUT, IN), tpre = TF64(pre, N, OUT), ty = TF64(y, N, OUT);
    Tensor tdy = TF64(dy, N, OUT), tr = TF64(r, N, OUT), tdpre = TF64(dpre, N, OUT);
    Tensor tdx1 = TF64(dx1, N, IN), tdx2 = TF64(dx2, N, IN), tdw = TF64(dw, OUT, IN), tdb = TF64(db, OUT);
    REQUIRE_OK(op_linear_forward(&ty, &tpre, &tx, &tw, NULL, ACT_GELU_ERF));

    /* dy becomes dpre = dy·gelu'(pre) */
    memcpy(dy, r, sizeof dy);
    memset(dw, 0, sizeof dw);
    memset(db, 0, sizeof db);
    REQUIRE_OK(op_linear_backward(&tdx1, &tdw, &tdb, &tdy, &tx, &tw, &tpre, ACT_GELU_ERF, 0));
    REQUIRE_OK(op_gelu_backward(&tdpre, &tr, &tpre, ACT_GELU_ERF));
    CHECK_CLOSE_F64("dy rewritten to dpre", dy, dpre, N * OUT, 0, 0);
    memcpy(dw1, dw, sizeof dw);
    memcpy(db1, db, sizeof db);
    CHECK_NONZERO("dw", dw1, OUT * IN);
    CHECK_NONZERO("db", db1, OUT);

    /* a second backward (dy restored: the first one rewrote it) doubles dw and db */
    memcpy(dy, r, sizeof dy);
    REQUIRE_OK(op_linear_backward(NULL, &tdw, &tdb, &tdy, &tx, &tw, &tpre, ACT_GELU_ERF, 0));
    for (int i = 0; i < OUT * IN; i++) dw1[i] *= 2;
    for (int i = 0; i < OUT; i++) db1[i] *= 2;
    CHECK_CLOSE_F64("dw after two backwards", dw, dw1, OUT * IN, 1e-15, 1e-14);
    CHECK_CLOSE_F64("db after two backwards", db, db1, OUT, 1e-15, 1e-14);

    /* dx_accumulate = 1 adds to what dx held; 0 overwrites garbage */
    for (int i = 0; i < N * IN; i++) dx2[i] = 0.25 * i;
    memcpy(dy, r, sizeof dy);
    REQUIRE_OK(op_linear_backward(&tdx2, NULL, NULL, &tdy, &tx, &tw, &tpre, ACT_GELU_ERF, 1));
    for (int i = 0; i < N * IN; i++) dx2[i] -= 0.25 * i;
    CHECK_CLOSE_F64("dx accumulated", dx2, dx1, N * IN, 1e-14, 1e-14);
    for (int i = 0; i < N * IN; i++) dx2[i] = NAN;
    memcpy(dy, r, sizeof dy);
    REQUIRE_OK(op_linear_backward(&tdx2, NULL, NULL, &tdy, &tx, &tw, &tpre, ACT_GELU_ERF, 0));
    CHECK_CLOSE_F64("dx overwritten", dx2, dx1, N * IN, 0, 0);
}

/* The bias gradient sums rows serially per column: the same bits at any thread count. */
TEST(linear_bias_grad_same_bits_any_thread_count) {
    enum { N = 777, IN = 3, OUT = 150 };
    float *x = malloc(N * IN * 4), *w = malloc(OUT * IN * 4), *dy = malloc(N * OUT * 4);
    float db1[OUT] = {0}, db4[OUT] = {0};
    test_fill_uniform_f32(x, N * IN, 5, -1, 1);
    test_fill_uniform_f32(w, OUT * IN, 6, -1, 1);
    test_fill_uniform_f32(dy, N * OUT, 7, -1, 1);
    Tensor tx = TF32(x, N, IN), tw = TF32(w, OUT, IN), tdy = TF32(dy, N, OUT);
    Tensor tdb1 = TF32(db1, OUT), tdb4 = TF32(db4, OUT);
    ops_set_threads(1);
    REQUIRE_OK(op_linear_backward(NULL, NULL, &tdb1, &tdy, &tx, &tw, NULL, ACT_NONE, 0));
    ops_set_threads(4);
    REQUIRE_OK(op_linear_backward(NULL, NULL, &tdb4, &tdy, &tx, &tw, NULL, ACT_NONE, 0));
    ops_set_threads(1);
    CHECK(memcmp(db1, db4, sizeof db1) == 0);
    double sum0 = 0;
    for (int r = 0; r < N; r++) sum0 += dy[r * OUT];
    CHECK_MSG(fabs(db1[0] - sum0) <= 1e-5 * fabs(sum0) + 1e-5, "db[0] %g vs %g", db1[0], sum0);
    free(x); free(w); free(dy);
}

/* ---- argument errors ------------------------------------------------------------------- */

static void check_shape_error(vfm_status s, const char *op, const char *arg) {
    CHECK_MSG(s == VFM_ERR_SHAPE, "%s: expected VFM_ERR_SHAPE, got %s", op, vfm_status_name(s));
    const char *msg = vfm_last_error();
    CHECK_MSG(strstr(msg, op) && strstr(msg, arg), "message '%s' should name %s and %s", msg, op, arg);
}

TEST(linear_and_activations_shape_errors) {
    float x[6 * 4], w[3 * 5], b[4], y[6 * 3], pre[6 * 3], dx[6 * 4], dw[3 * 4], dy[6 * 3];
    memset(x, 0, sizeof x); memset(w, 0, sizeof w); memset(b, 0, sizeof b);
    Tensor tx = TF32(x, 6, 4), tw_bad = TF32(w, 3, 5), tw = TF32(w, 3, 4), tb_bad = TF32(b, 4);
    Tensor ty = TF32(y, 6, 3), tpre = TF32(pre, 6, 3), tdx = TF32(dx, 6, 4), tdw_bad = TF32(dw, 4, 3),
           tdy = TF32(dy, 6, 3);
    check_shape_error(op_linear_forward(&ty, NULL, &tx, &tw_bad, NULL, ACT_NONE), "linear_forward", "w");
    check_shape_error(op_linear_forward(&ty, NULL, &tx, &tw, &tb_bad, ACT_NONE), "linear_forward", "b");
    check_shape_error(op_linear_forward(&ty, NULL, &tx, &tw, NULL, ACT_GELU_ERF), "linear_forward", "pre");
    check_shape_error(op_linear_backward(&tdx, &tdw_bad, NULL, &tdy, &tx, &tw, &tpre, ACT_GELU_TANH, 0),
                      "linear_backward", "dw");
    Tensor x64 = TF64(dx, 3, 4); /* mixed dtypes */
    check_shape_error(op_linear_forward(&ty, NULL, &x64, &tw, NULL, ACT_NONE), "linear_forward", "w");
    Tensor y_bad = TF32(y, 6, 2);
    check_shape_error(op_gelu_forward(&y_bad, &tx, ACT_GELU_ERF), "gelu_forward", "y");
    check_shape_error(op_silu_backward(&tdx, &y_bad, &tx), "silu_backward", "dy");
    Tensor x_odd = TF32(x, 8, 3), y_sw = TF32(y, 8, 1);
    check_shape_error(op_swiglu_forward(&y_sw, &x_odd), "swiglu_forward", "x");
    Tensor x_sw = TF32(x, 6, 4), y_sw_bad = TF32(y, 6, 3);
    check_shape_error(op_swiglu_forward(&y_sw_bad, &x_sw), "swiglu_forward", "y");
    /* a correct call passes */
    CHECK_OK(op_linear_forward(&ty, &tpre, &tx, &tw, NULL, ACT_GELU_TANH));
}
