/* Tests of MovieGen's two ops (ops.h "MovieGen's block norm and position"): RMSNorm + adaLN modulate
 * and the learned factorized 3-D position. Finite-difference gradients of every input on the f64
 * build over a pack of 3 samples with padding rows; the forward against its formula written out;
 * += semantics; padding rows written 0 and never read (NaN there); positions outside a table refused;
 * the CPU backward's bits at 1 and 2 threads. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gradcheck.h"
#include "ops/ops.h"
#include "test.h"

/* Central differences on f64 (test_ops_norm.c's bounds): h 1e-6, atol 1e-7, rtol 1e-6. */
#define FD_H 1e-6
#define FD_ATOL 1e-7
#define FD_RTOL 1e-6

static double *fill64(int64_t n, uint64_t seed, double lo, double hi) {
    double *p = malloc((size_t)n * sizeof *p);
    test_fill_uniform_f64(p, n, seed, lo, hi);
    return p;
}

/* 3 samples of 4, 2 and 5 rows, each followed by 2, 1 and 3 padding rows. */
enum { S_ = 17, B_ = 3 };
static const int32_t T2S[S_] = {0, 0, 0, 0, -1, -1, 1, 1, -1, 2, 2, 2, 2, 2, -1, -1, -1};

/* ---- RMSNorm + modulate -------------------------------------------------------------------- */

typedef struct {
    int64_t D;
    int has_w, has_shift, has_scale;
    double *x, *w, *shift, *scale, *r, *y, *rstd;
} RmsCtx;

static vfm_status rms_forward(RmsCtx *c) {
    Tensor x = TF64(c->x, S_, c->D), y = TF64(c->y, S_, c->D), rstd = TF64(c->rstd, S_), w = TF64(c->w, c->D),
           shift = TF64(c->shift, B_, c->D), scale = TF64(c->scale, B_, c->D), t2s = TI32((int32_t *)T2S, S_);
    return op_rmsnorm_modulate_forward(&y, &rstd, &x, c->has_w ? &w : NULL, c->has_shift ? &shift : NULL,
                                       c->has_scale ? &scale : NULL, &t2s, 1e-5f);
}

static double rms_objective(void *p) {
    RmsCtx *c = p;
    if (rms_forward(c) != VFM_OK) return NAN;
    return dot_f64(c->r, c->y, S_ * c->D);
}

TEST(rmsnorm_modulate_gradcheck_pack_with_padding) {
    static const int variants[4][3] = {{1, 1, 1}, {0, 1, 1}, {1, 0, 1}, {1, 1, 0}}; /* (w, shift, scale) */
    for (int v = 0; v < 4; v++) {
        RmsCtx c = {.D = 12, .has_w = variants[v][0], .has_shift = variants[v][1], .has_scale = variants[v][2]};
        int64_t n = S_ * c.D, nb = B_ * c.D;
        c.x = fill64(n, 200 + v, -1.5, 2.5);
        c.w = fill64(c.D, 210 + v, 0.5, 1.5);
        c.shift = fill64(nb, 220 + v, -0.6, 0.6);
        c.scale = fill64(nb, 230 + v, -0.6, 0.6);
        c.r = fill64(n, 240 + v, -1, 1);
        c.y = calloc((size_t)n, 8), c.rstd = calloc(S_, 8);
        REQUIRE_OK(rms_forward(&c));
        /* the forward, written out */
        for (int64_t s = 0; s < S_; s++) {
            double ss = 0;
            for (int64_t d = 0; d < c.D; d++) ss += c.x[s * c.D + d] * c.x[s * c.D + d];
            double rs = T2S[s] < 0 ? 0 : 1 / sqrt(ss / c.D + 1e-5f);
            CHECK_MSG(fabs(c.rstd[s] - rs) <= 1e-12 * rs, "rstd[%lld] %g vs %g", (long long)s, c.rstd[s], rs);
            for (int64_t d = 0; d < c.D && T2S[s] >= 0; d++) {
                int64_t b = T2S[s];
                double want = c.x[s * c.D + d] * rs * (c.has_w ? c.w[d] : 1) *
                                  (1 + (c.has_scale ? c.scale[b * c.D + d] : 0)) + (c.has_shift ? c.shift[b * c.D + d] : 0);
                CHECK_MSG(fabs(c.y[s * c.D + d] - want) <= 1e-12, "y[%lld,%lld]", (long long)s, (long long)d);
            }
        }
        /* gradients; dx accumulates onto what it held */
        double *dx0 = fill64(n, 250 + v, -1, 1), *dx = malloc((size_t)n * 8), *dw = calloc((size_t)c.D, 8);
        double *dshift = calloc((size_t)nb, 8), *dscale = calloc((size_t)nb, 8);
        memcpy(dx, dx0, (size_t)n * 8);
        Tensor x = TF64(c.x, S_, c.D), rstd = TF64(c.rstd, S_), w = TF64(c.w, c.D), scale = TF64(c.scale, B_, c.D),
               dy = TF64(c.r, S_, c.D), t2s = TI32((int32_t *)T2S, S_), tdx = TF64(dx, S_, c.D), tdw = TF64(dw, c.D),
               tdshift = TF64(dshift, B_, c.D), tdscale = TF64(dscale, B_, c.D);
        REQUIRE_OK(op_rmsnorm_modulate_backward(&tdx, c.has_w ? &tdw : NULL, c.has_shift ? &tdshift : NULL,
                                                c.has_scale ? &tdscale : NULL, &dy, &x, &rstd, c.has_w ? &w : NULL,
                                                c.has_scale ? &scale : NULL, &t2s));
        for (int64_t i = 0; i < n; i++) dx[i] -= dx0[i];
        for (int64_t s = 0; s < S_; s++)
            for (int64_t d = 0; d < c.D && T2S[s] < 0; d++) CHECK(c.y[s * c.D + d] == 0 && dx[s * c.D + d] == 0);
        CHECK_NONZERO("rmsnorm_modulate dx", dx, n);
        GRADCHECK("rmsnorm_modulate dx", c.x, dx, n, rms_objective, &c, FD_H, FD_ATOL, FD_RTOL, 0);
        if (c.has_w) {
            CHECK_NONZERO("rmsnorm_modulate dw", dw, c.D);
            GRADCHECK("rmsnorm_modulate dw", c.w, dw, c.D, rms_objective, &c, FD_H, FD_ATOL, FD_RTOL, 0);
        }
        if (c.has_shift) {
            CHECK_NONZERO("rmsnorm_modulate dshift", dshift, nb);
            GRADCHECK("rmsnorm_modulate dshift", c.shift, dshift, nb, rms_objective, &c, FD_H, FD_ATOL, FD_RTOL, 0);
        }
        if (c.has_scale) {
            CHECK_NONZERO("rmsnorm_modulate dscale", dscale, nb);
            GRADCHECK("rmsnorm_modulate dscale", c.scale, dscale, nb, rms_objective, &c, FD_H, FD_ATOL, FD_RTOL, 0);
        }
        free(c.x), free(c.w), free(c.shift), free(c.scale), free(c.r), free(c.y), free(c.rstd);
        free(dx0), free(dx), free(dw), free(dshift), free(dscale);
    }
}

/* NaN in padding rows changes nothing; the parameter sums do not depend on the thread count. */
TEST(rmsnorm_modulate_padding_and_threads) {
    const int64_t D = 70, n = S_ * D, nb = B_ * D;
    float *x = malloc((size_t)n * 4), *dy = malloc((size_t)n * 4), *w = malloc(D * 4), *sh = malloc(nb * 4),
          *sc = malloc(nb * 4);
    test_fill_uniform_f32(x, n, 1, -2, 2), test_fill_uniform_f32(dy, n, 2, -1, 1), test_fill_uniform_f32(w, D, 3, 0.5f, 1.5f);
    test_fill_uniform_f32(sh, nb, 4, -1, 1), test_fill_uniform_f32(sc, nb, 5, -1, 1);
    for (int64_t s = 0; s < S_; s++)
        for (int64_t d = 0; d < D && T2S[s] < 0; d++) x[s * D + d] = dy[s * D + d] = NAN;
    float *got[2][4];
    int threads = ops_get_threads();
    for (int k = 0; k < 2; k++) {
        ops_set_threads(k + 1);
        float *y = calloc((size_t)n, 4), *rstd = calloc(S_, 4), *dx = calloc((size_t)n, 4), *dw = calloc(D, 4);
        float *dsh = calloc(nb, 4), *dsc = calloc(nb, 4);
        Tensor tx = TF32(x, S_, D), ty = TF32(y, S_, D), tr = TF32(rstd, S_), tw = TF32(w, D), tsh = TF32(sh, B_, D),
               tsc = TF32(sc, B_, D), tdy = TF32(dy, S_, D), t2s = TI32((int32_t *)T2S, S_), tdx = TF32(dx, S_, D),
               tdw = TF32(dw, D), tdsh = TF32(dsh, B_, D), tdsc = TF32(dsc, B_, D);
        REQUIRE_OK(op_rmsnorm_modulate_forward(&ty, &tr, &tx, &tw, &tsh, &tsc, &t2s, 1e-5f));
        REQUIRE_OK(op_rmsnorm_modulate_backward(&tdx, &tdw, &tdsh, &tdsc, &tdy, &tx, &tr, &tw, &tsc, &t2s));
        for (int64_t i = 0; i < n; i++) CHECK_MSG(isfinite(y[i]) && isfinite(dx[i]), "element %lld not finite", (long long)i);
        got[k][0] = y, got[k][1] = dw, got[k][2] = dsh, got[k][3] = dsc;
        free(rstd), free(dx);
    }
    ops_set_threads(threads);
    CHECK(memcmp(got[0][0], got[1][0], (size_t)n * 4) == 0);
    CHECK(memcmp(got[0][1], got[1][1], (size_t)D * 4) == 0);
    CHECK(memcmp(got[0][2], got[1][2], (size_t)nb * 4) == 0);
    CHECK(memcmp(got[0][3], got[1][3], (size_t)nb * 4) == 0);
    for (int k = 0; k < 2; k++)
        for (int j = 0; j < 4; j++) free(got[k][j]);
    free(x), free(dy), free(w), free(sh), free(sc);
}

/* ---- learned factorized 3-D position --------------------------------------------------------- */

enum { NT = 3, NH = 4, NW = 5 };

typedef struct {
    int64_t D;
    int32_t *pos;
    double *tab[3], *r, *out;
} PosCtx;

static vfm_status pos_forward(PosCtx *c) {
    Tensor out = TF64(c->out, S_, c->D), et = TF64(c->tab[0], NT, c->D), eh = TF64(c->tab[1], NH, c->D),
           ew = TF64(c->tab[2], NW, c->D), pos = TI32(c->pos, S_, 3), t2s = TI32((int32_t *)T2S, S_);
    return op_pos_embed_learned_forward(&out, &et, &eh, &ew, &pos, &t2s);
}

static double pos_objective(void *p) {
    PosCtx *c = p;
    if (pos_forward(c) != VFM_OK) return NAN;
    return dot_f64(c->r, c->out, S_ * c->D);
}

static void make_positions(int32_t *pos) {
    for (int64_t s = 0; s < S_; s++) /* repeated rows in every table; padding rows far outside */
        if (T2S[s] < 0) pos[3 * s] = pos[3 * s + 1] = pos[3 * s + 2] = 1000;
        else pos[3 * s] = (int32_t)(s % NT), pos[3 * s + 1] = (int32_t)((s * 3) % NH), pos[3 * s + 2] = (int32_t)((s * 7) % NW);
}

TEST(pos_embed_learned_forward_gradcheck_and_errors) {
    int32_t pos[S_ * 3];
    make_positions(pos);
    PosCtx c = {.D = 10, .pos = pos};
    const int64_t rows[3] = {NT, NH, NW};
    for (int k = 0; k < 3; k++) c.tab[k] = fill64(rows[k] * c.D, 300 + k, -1, 1);
    c.r = fill64(S_ * c.D, 310, -1, 1);
    c.out = fill64(S_ * c.D, 311, -1, 1); /* overwritten, padding rows included */
    REQUIRE_OK(pos_forward(&c));
    for (int64_t s = 0; s < S_; s++)
        for (int64_t d = 0; d < c.D; d++) {
            double want = T2S[s] < 0 ? 0 : c.tab[0][pos[3 * s] * c.D + d] + c.tab[1][pos[3 * s + 1] * c.D + d] +
                                                c.tab[2][pos[3 * s + 2] * c.D + d];
            CHECK(c.out[s * c.D + d] == want);
        }
    double *g[3];
    for (int k = 0; k < 3; k++) g[k] = fill64(rows[k] * c.D, 320 + k, -1, 1); /* += onto these */
    double *g0[3];
    for (int k = 0; k < 3; k++) g0[k] = malloc((size_t)(rows[k] * c.D) * 8), memcpy(g0[k], g[k], (size_t)(rows[k] * c.D) * 8);
    Tensor dt = TF64(g[0], NT, c.D), dh = TF64(g[1], NH, c.D), dw = TF64(g[2], NW, c.D), dout = TF64(c.r, S_, c.D),
           tp = TI32(pos, S_, 3), t2s = TI32((int32_t *)T2S, S_);
    REQUIRE_OK(op_pos_embed_learned_backward(&dt, &dh, &dw, &dout, &tp, &t2s));
    static const char *const names[3] = {"dtab_t", "dtab_h", "dtab_w"};
    for (int k = 0; k < 3; k++) {
        for (int64_t i = 0; i < rows[k] * c.D; i++) g[k][i] -= g0[k][i];
        CHECK_NONZERO(names[k], g[k], rows[k] * c.D);
        GRADCHECK(names[k], c.tab[k], g[k], rows[k] * c.D, pos_objective, &c, FD_H, FD_ATOL, FD_RTOL, 0);
    }
    /* a real row's position outside its table: refused, naming the row and the axis */
    pos[3 * 6 + 1] = NH;
    vfm_status st = pos_forward(&c);
    CHECK_MSG(st == VFM_ERR_SHAPE && strstr(vfm_last_error(), "row 6 has h = 4"), "%s", vfm_last_error());
    st = op_pos_embed_learned_backward(&dt, &dh, &dw, &dout, &tp, &t2s);
    CHECK(st == VFM_ERR_SHAPE);
    for (int k = 0; k < 3; k++) free(c.tab[k]), free(g[k]), free(g0[k]);
    free(c.r), free(c.out);
}
