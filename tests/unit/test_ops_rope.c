/* Tests of Wan's ops: 3-D RoPE (against the formula, its inverse, finite differences on the f64
 * build) and RMSNorm over a row split across ranks (two column halves with the statistics
 * summed give op_rmsnorm's values and gradients; finite differences through the split path). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gradcheck.h"
#include "ops/ops.h"
#include "test.h"

#define FD_H 1e-6
#define FD_ATOL 1e-7
#define FD_RTOL 1e-6

static double *fill64(int64_t n, uint64_t seed, double lo, double hi) {
    double *p = malloc((size_t)n * sizeof *p);
    test_fill_uniform_f64(p, n, seed, lo, hi);
    return p;
}

/* ---- RoPE ------------------------------------------------------------------------------------ */

enum { RN = 5, RH = 2, RHD = 16 }; /* parts: frames 6, rows 4... hd 16: dh = dw = 4, dt = 8 */
static const int32_t RPOS[RN * 3] = {0, 0, 0, 1, 2, 3, 4, 0, 7, 2, 5, 1, 9, 9, 9};

TEST(rope_3d_matches_the_formula_and_inverts) {
    double x[RN * RH * RHD], y[RN * RH * RHD], back[RN * RH * RHD];
    test_fill_uniform_f64(x, RN * RH * RHD, 41, -2, 2);
    Tensor tx = TF64(x, RN, RH, RHD), ty = TF64(y, RN, RH, RHD), tb = TF64(back, RN, RH, RHD);
    Tensor pos = TENSOR((void *)RPOS, DT_I32, DEV_CPU, RN, 3);
    REQUIRE_OK(op_rope_3d(&ty, &tx, &pos, 10000.0f, 0));
    const int width[3] = {8, 4, 4};
    double worst = 0;
    for (int n = 0; n < RN; n++)
        for (int h = 0; h < RH; h++) {
            int at = 0;
            for (int part = 0; part < 3; part++)
                for (int k = 0; k < width[part] / 2; k++, at += 2) {
                    double a = RPOS[n * 3 + part] * pow(10000.0, -2.0 * k / width[part]);
                    const double *xr = x + (n * RH + h) * RHD + at, *yr = y + (n * RH + h) * RHD + at;
                    double e0 = xr[0] * cos(a) - xr[1] * sin(a), e1 = xr[0] * sin(a) + xr[1] * cos(a);
                    worst = fmax(worst, fmax(fabs(e0 - yr[0]), fabs(e1 - yr[1])));
                }
        }
    CHECK_MSG(worst < 1e-12, "rope differs from the formula by %g", worst);
    CHECK(fabs(y[RN * RH * RHD - 1] - x[RN * RH * RHD - 1]) > 1e-3); /* position 9 moved the last pair */
    REQUIRE_OK(op_rope_3d(&tb, &ty, &pos, 10000.0f, 1));
    for (int i = 0; i < RN * RH * RHD; i++) worst = fmax(worst, fabs(back[i] - x[i]));
    CHECK_MSG(worst < 1e-12, "the inverse rotation gives x back within %g", worst);
    REQUIRE_OK(op_rope_3d(&tx, &tx, &pos, 10000.0f, 0)); /* in place */
    CHECK(memcmp(x, y, sizeof x) == 0);
}

typedef struct {
    double *x, *y, *r;
    Tensor pos;
} RopeCtx;

static double rope_objective(void *p) {
    RopeCtx *c = p;
    Tensor x = TF64(c->x, RN, RH, RHD), y = TF64(c->y, RN, RH, RHD);
    if (op_rope_3d(&y, &x, &c->pos, 10000.0f, 0) != VFM_OK) return NAN;
    return dot_f64(c->r, c->y, RN * RH * RHD);
}

TEST(rope_3d_gradcheck_inverse_is_the_backward) {
    int64_t n = RN * RH * RHD;
    RopeCtx c = {fill64(n, 51, -1, 1), calloc(n, sizeof(double)), fill64(n, 52, -1, 1),
                 TENSOR((void *)RPOS, DT_I32, DEV_CPU, RN, 3)};
    double *dx = calloc(n, sizeof(double));
    Tensor dy = TF64(c.r, RN, RH, RHD), tdx = TF64(dx, RN, RH, RHD);
    REQUIRE_OK(op_rope_3d(&tdx, &dy, &c.pos, 10000.0f, 1));
    CHECK_NONZERO("rope dx", dx, n);
    GRADCHECK("rope dx", c.x, dx, n, rope_objective, &c, FD_H, FD_ATOL, FD_RTOL, 0);
    free(c.x), free(c.y), free(c.r), free(dx);
}

/* ---- RMSNorm over a split row --------------------------------------------------------------- */

enum { SN = 6, SD = 12, SHALF = 6 };

/* y, rstd through the split ops with the row's columns in `parts` blocks, statistics summed. */
static vfm_status split_forward(double *y, double *rstd, const double *x, const double *w, int parts) {
    int64_t d = SD / parts;
    double ss[SN] = {0}, part_ss[SN];
    for (int p = 0; p < parts; p++) {
        double xp[SN * SD];
        for (int n = 0; n < SN; n++) memcpy(xp + n * d, x + n * SD + p * d, (size_t)d * sizeof(double));
        Tensor tx = TF64(xp, SN, d), tss = TF64(part_ss, SN);
        VFM_TRY(op_rmsnorm_sumsq(&tss, &tx));
        for (int n = 0; n < SN; n++) ss[n] += part_ss[n];
    }
    for (int p = 0; p < parts; p++) {
        double xp[SN * SD], yp[SN * SD];
        for (int n = 0; n < SN; n++) memcpy(xp + n * d, x + n * SD + p * d, (size_t)d * sizeof(double));
        Tensor tx = TF64(xp, SN, d), ty = TF64(yp, SN, d), tw = TF64((double *)w + p * d, d), tss = TF64(ss, SN);
        Tensor tr = TF64(rstd, SN);
        VFM_TRY(op_rmsnorm_split_forward(&ty, &tr, &tx, &tw, &tss, SD, 1e-5f));
        for (int n = 0; n < SN; n++) memcpy(y + n * SD + p * d, yp + n * d, (size_t)d * sizeof(double));
    }
    return VFM_OK;
}

static vfm_status split_backward(double *dx, double *dw, const double *dy, const double *x, const double *w,
                                 const double *rstd, int parts) {
    int64_t d = SD / parts;
    double dot[SN] = {0}, part_dot[SN], xp[SN * SD], dyp[SN * SD], dxp[SN * SD];
#define COLS(dst, src, p) \
    for (int n = 0; n < SN; n++) memcpy((dst) + n * d, (src) + n * SD + (p) * d, (size_t)d * sizeof(double))
    for (int p = 0; p < parts; p++) {
        COLS(xp, x, p);
        COLS(dyp, dy, p);
        Tensor tx = TF64(xp, SN, d), tdy = TF64(dyp, SN, d), tw = TF64((double *)w + p * d, d), tdot = TF64(part_dot, SN);
        VFM_TRY(op_rmsnorm_dot(&tdot, &tdy, &tx, &tw));
        for (int n = 0; n < SN; n++) dot[n] += part_dot[n];
    }
    for (int p = 0; p < parts; p++) {
        COLS(xp, x, p);
        COLS(dyp, dy, p);
        Tensor tx = TF64(xp, SN, d), tdy = TF64(dyp, SN, d), tw = TF64((double *)w + p * d, d), tdot = TF64(dot, SN);
        Tensor tr = TF64((double *)rstd, SN), tdx = TF64(dxp, SN, d), tdw = TF64(dw + p * d, d);
        VFM_TRY(op_rmsnorm_split_backward(&tdx, &tdw, &tdy, &tx, &tr, &tw, &tdot, SD));
        for (int n = 0; n < SN; n++) memcpy(dx + n * SD + p * d, dxp + n * d, (size_t)d * sizeof(double));
    }
#undef COLS
    return VFM_OK;
}

TEST(rmsnorm_split_over_two_ranks_equals_rmsnorm) {
    double x[SN * SD], w[SD], dy[SN * SD], y1[SN * SD], r1[SN], y2[SN * SD], r2[SN];
    double dx1[SN * SD], dw1[SD] = {0}, dx2[SN * SD], dw2[SD] = {0};
    test_fill_uniform_f64(x, SN * SD, 61, -2, 2);
    test_fill_uniform_f64(w, SD, 62, 0.5, 1.5);
    test_fill_uniform_f64(dy, SN * SD, 63, -1, 1);
    Tensor tx = TF64(x, SN, SD), tw = TF64(w, SD), ty = TF64(y1, SN, SD), tr = TF64(r1, SN), tdy = TF64(dy, SN, SD);
    Tensor tdx = TF64(dx1, SN, SD), tdw = TF64(dw1, SD);
    REQUIRE_OK(op_rmsnorm_forward(&ty, &tr, &tx, &tw, 1e-5f));
    REQUIRE_OK(op_rmsnorm_backward(&tdx, &tdw, &tdy, &tx, &tr, &tw));
    REQUIRE_OK(split_forward(y2, r2, x, w, 2));
    REQUIRE_OK(split_backward(dx2, dw2, dy, x, w, r2, 2));
    double worst = 0;
    for (int i = 0; i < SN * SD; i++) worst = fmax(worst, fmax(fabs(y1[i] - y2[i]), fabs(dx1[i] - dx2[i])));
    for (int i = 0; i < SD; i++) worst = fmax(worst, fabs(dw1[i] - dw2[i]));
    CHECK_MSG(worst < 1e-12, "split RMSNorm differs from op_rmsnorm by %g", worst);
    /* the statistic left unsummed (one rank's half only) is a different norm: the test can fail */
    double ss[SN], yb[SN * SD], rb[SN];
    Tensor half = TF64(x, SN, SD), tss = TF64(ss, SN), tyb = TF64(yb, SN, SD), trb = TF64(rb, SN);
    REQUIRE_OK(op_rmsnorm_sumsq(&tss, &half));
    for (int n = 0; n < SN; n++) ss[n] *= 0.5;
    REQUIRE_OK(op_rmsnorm_split_forward(&tyb, &trb, &half, &tw, &tss, SD, 1e-5f));
    CHECK(fabs(yb[0] - y1[0]) > 1e-3);
}

typedef struct {
    double *x, *w, *r, *y, *rstd;
} SplitCtx;

static double split_objective(void *p) {
    SplitCtx *c = p;
    if (split_forward(c->y, c->rstd, c->x, c->w, 2) != VFM_OK) return NAN;
    return dot_f64(c->r, c->y, SN * SD);
}

TEST(rmsnorm_split_gradcheck) {
    SplitCtx c = {fill64(SN * SD, 71, -2, 2), fill64(SD, 72, 0.5, 1.5), fill64(SN * SD, 73, -1, 1),
                  calloc(SN * SD, sizeof(double)), calloc(SN, sizeof(double))};
    double *dx = calloc(SN * SD, sizeof(double)), *dw = calloc(SD, sizeof(double));
    REQUIRE(isfinite(split_objective(&c)));
    REQUIRE_OK(split_backward(dx, dw, c.r, c.x, c.w, c.rstd, 2));
    CHECK_NONZERO("split rmsnorm dx", dx, SN * SD);
    CHECK_NONZERO("split rmsnorm dw", dw, SD);
    GRADCHECK("split rmsnorm dx", c.x, dx, SN * SD, split_objective, &c, FD_H, FD_ATOL, FD_RTOL, 0);
    GRADCHECK("split rmsnorm dw", c.w, dw, SD, split_objective, &c, FD_H, FD_ATOL, FD_RTOL, 0);
    free(c.x), free(c.w), free(c.r), free(c.y), free(c.rstd), free(dx), free(dw);
}
