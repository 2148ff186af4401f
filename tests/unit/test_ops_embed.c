/* Tests of the timestep embedding, the 3-D sin-cos position embedding and patchify/unpatchify:
 * goldens (reference/golden_ops_misc.py), finite-difference gradients (f64 build), padding and
 * shape errors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "golden.h"
#include "gradcheck.h"
#include "ops/ops.h"
#include "test.h"

/* ---- timestep embedding ---------------------------------------------------------------- */

TEST(ops_embed_timestep_golden) {
    Golden *g = golden_load("ops_misc_timestep.bin");
    REQUIRE(g);
    const char *cases[2] = {"a", "b"};
    /* f32 vs torch float32 (diffusers' own dtype): torch rounds the angle t·f to f32 before sin/cos,
     * we round only the result, so they differ by up to ~ulp(max|t·f|): |t| <= 999 in case a
     * (ulp 6.1e-5), <= 60 in case b (ulp 3.8e-6); atol = 3 ulp of the largest angle. */
    const double atol32_torch[2] = {2e-4, 1.2e-5};
    for (int c = 0; c < 2; c++) {
        char name[64];
        snprintf(name, sizeof name, "%s_t", cases[c]);
        const Tensor *t_g = golden_need(g, name);
        REQUIRE(t_g);
        snprintf(name, sizeof name, "%s_dim", cases[c]);
        int dim = (int)golden_scalar(g, name);
        snprintf(name, sizeof name, "%s_shift", cases[c]);
        float shift = (float)golden_scalar(g, name);
        snprintf(name, sizeof name, "%s_dout", cases[c]);
        const Tensor *dout_g = golden_need(g, name);
        REQUIRE(dout_g);
        int64_t B = tensor_numel(t_g);
        float *t32 = test_as_f32(t_g), *dout32 = test_as_f32(dout_g);
        double *t64 = test_as_f64(t_g), *dout64 = test_as_f64(dout_g);
        float *emb32 = malloc(sizeof(float) * B * dim), dt32[16];
        double *emb64 = malloc(sizeof(double) * B * dim), dt64[16];
        REQUIRE(B <= 16);
        for (int flip = 0; flip < 2; flip++) {
            Tensor tt32 = TF32(t32, B), e32 = TF32(emb32, B, dim), do32 = TF32(dout32, B, dim), gt32 = TF32(dt32, B);
            Tensor tt64 = TF64(t64, B), e64 = TF64(emb64, B, dim), do64 = TF64(dout64, B, dim), gt64 = TF64(dt64, B);
            REQUIRE_OK(op_timestep_embedding_forward(&e32, &tt32, flip, shift, 10000.0f));
            REQUIRE_OK(op_timestep_embedding_forward(&e64, &tt64, flip, shift, 10000.0f));
            REQUIRE_OK(op_timestep_embedding_backward(&gt32, &do32, &tt32, flip, shift, 10000.0f));
            REQUIRE_OK(op_timestep_embedding_backward(&gt64, &do64, &tt64, flip, shift, 10000.0f));
            snprintf(name, sizeof name, "%s_emb%d", cases[c], flip);
            const Tensor *ref = golden_need(g, name);
            snprintf(name, sizeof name, "%s_dt%d", cases[c], flip);
            const Tensor *dref = golden_need(g, name);
            snprintf(name, sizeof name, "%s_emb32_%d", cases[c], flip);
            const Tensor *ref32 = golden_need(g, name);
            REQUIRE(ref && dref && ref32);
            float *ref_f = test_as_f32(ref), *dref_f = test_as_f32(dref);
            /* f64 build vs torch float64: same formula, libm vs torch sin/cos (1e-12 covers |t·f| < 1e3) */
            CHECK_CLOSE_F64("emb f64", emb64, ref->data, B * dim, 1e-12, 0);
            CHECK_CLOSE_F64("dt f64", dt64, dref->data, B, 1e-12, 1e-12);
            /* f32 build: the float64 value rounded once (0.5 ulp of |emb| <= 1 is 6e-8) */
            CHECK_CLOSE_F32("emb f32 vs float64", emb32, ref_f, B * dim, 1e-7, 0);
            CHECK_CLOSE_F32("dt f32 vs float64", dt32, dref_f, B, 1e-7, 1e-6);
            CHECK_CLOSE_F32("emb f32 vs torch float32", emb32, ref32->data, B * dim, atol32_torch[c], 0);
            double dtd[16];
            for (int64_t b = 0; b < B; b++) dtd[b] = dt64[b];
            CHECK_NONZERO("dt", dtd, B);
            free(ref_f);
            free(dref_f);
        }
        free(t32); free(dout32); free(t64); free(dout64); free(emb32); free(emb64);
    }
    golden_free(g);
}

typedef struct {
    Tensor t, emb;
    const double *r;
    int flip;
    float shift;
} TimestepCtx;

static double timestep_objective(void *p) {
    TimestepCtx *c = p;
    if (op_timestep_embedding_forward(&c->emb, &c->t, c->flip, c->shift, 10000.0f) != VFM_OK) return NAN;
    return dot_f64(c->r, c->emb.data, tensor_numel(&c->emb));
}

TEST(ops_embed_timestep_gradcheck) {
    const int dims[2] = {16, 256};
    const float shifts[2] = {0.0f, 1.0f};
    enum { B = 5 };
    for (int k = 0; k < 2; k++)
        for (int flip = 0; flip < 2; flip++) {
            int dim = dims[k];
            double t[B], dt[B], *emb = malloc(sizeof(double) * B * dim), *r = malloc(sizeof(double) * B * dim);
            test_fill_uniform_f64(t, B, 11 + k, -3.0, 30.0);
            test_fill_uniform_f64(r, B * dim, 12 + k, -1.0, 1.0);
            TimestepCtx ctx = {TF64(t, B), TF64(emb, B, dim), r, flip, shifts[k]};
            Tensor dtt = TF64(dt, B), dout = TF64(r, B, dim);
            REQUIRE_OK(op_timestep_embedding_backward(&dtt, &dout, &ctx.t, flip, shifts[k], 10000.0f));
            CHECK_NONZERO("dt", dt, B);
            /* central differences, h = 1e-6: truncation ~h²·|∂³L| ~ 1e-12·dim, rounding ~1e-16·|L|/h */
            GRADCHECK("timestep dt", t, dt, B, timestep_objective, &ctx, 1e-6, 1e-7, 1e-7, 0);
            free(emb);
            free(r);
        }
}

TEST(ops_embed_timestep_shape_errors) {
    float t[3] = {1, 2, 3}, out[3 * 5];
    Tensor tt = TF32(t, 3), odd = TF32(out, 3, 5), wrong_rows = TF32(out, 5, 3);
    CHECK(op_timestep_embedding_forward(&odd, &tt, 0, 0, 10000) == VFM_ERR_SHAPE);
    CHECK(op_timestep_embedding_forward(&wrong_rows, &tt, 0, 0, 10000) == VFM_ERR_SHAPE);
    CHECK(strstr(vfm_last_error(), "timestep_embedding_forward") && strstr(vfm_last_error(), "out"));
    Tensor ok = TF32(out, 3, 4);
    CHECK(op_timestep_embedding_forward(&ok, &tt, 0, 2.0f, 10000) == VFM_ERR_SHAPE); /* half - shift = 0 */
    double t64[3] = {0};
    Tensor mixed = TF64(t64, 3);
    CHECK(op_timestep_embedding_forward(&ok, &mixed, 0, 0, 10000) == VFM_ERR_SHAPE);
}

/* ---- 3-D position embedding ----------------------------------------------------------- */

TEST(ops_embed_pos3d_golden) {
    Golden *g = golden_load("ops_misc_pos3d.bin");
    REQUIRE(g);
    for (int i = 0; i < 3; i++) {
        char name[64];
        snprintf(name, sizeof name, "g%d_pos", i);
        const Tensor *pos_g = golden_need(g, name);
        snprintf(name, sizeof name, "g%d_table", i);
        const Tensor *table = golden_need(g, name);
        REQUIRE(pos_g && table);
        int64_t S = table->shape[0], D = table->shape[1];
        int32_t *map = calloc((size_t)S, sizeof *map); /* all rows belong to sample 0 */
        float *x32 = calloc((size_t)(S * D), sizeof *x32);
        double *x64 = calloc((size_t)(S * D), sizeof *x64);
        Tensor pos = *pos_g, t2s = TI32(map, S), X32 = TF32(x32, S, D), X64 = TF64(x64, S, D);
        REQUIRE_OK(op_pos_embed_3d_add(&X32, &pos, &t2s));
        REQUIRE_OK(op_pos_embed_3d_add(&X64, &pos, &t2s));
        float *ref32 = test_as_f32(table);
        /* f32: the double value rounded once (|emb| <= 1: 6e-8); f64: glibc vs numpy sin/cos/pow
         * on angles below ~6 agree to a few ulp */
        CHECK_CLOSE_F32("pos3d f32", x32, ref32, S * D, 1e-6, 0);
        CHECK_CLOSE_F64("pos3d f64", x64, table->data, S * D, 1e-13, 0);
        free(map); free(x32); free(x64); free(ref32);
    }
    golden_free(g);
}

/* A pack in shuffled order with padding rows (NaN in x, nonsense positions): real rows get
 * base + table[t·H·W + h·W + w]; padding rows are left untouched. */
TEST(ops_embed_pos3d_pack_any_order_and_padding) {
    Golden *g = golden_load("ops_misc_pos3d.bin");
    REQUIRE(g);
    const Tensor *table = golden_need(g, "g0_table"), *thw = golden_need(g, "g0_thw");
    REQUIRE(table && thw);
    const int32_t *dims = thw->data;
    int64_t T = dims[0], H = dims[1], W = dims[2], n = T * H * W, D = table->shape[1];
    int64_t S = n + 5;
    int32_t *pos = malloc(sizeof(int32_t) * S * 3), *map = malloc(sizeof(int32_t) * S);
    int64_t *src = malloc(sizeof(int64_t) * S);
    float *x = malloc(sizeof(float) * S * D), *base = malloc(sizeof(float) * S * D);
    test_fill_uniform_f32(base, S * D, 3, -1, 1);
    int64_t next = 0;
    for (int64_t s = 0; s < S; s++) {
        if (s % 7 == 3 && s / 7 < 5) { /* 5 padding rows spread through the pack */
            map[s] = -1;
            src[s] = -1;
            pos[3 * s] = 1 << 30; pos[3 * s + 1] = -12345; pos[3 * s + 2] = 77;
            for (int64_t j = 0; j < D; j++) base[s * D + j] = NAN;
            continue;
        }
        int64_t row = (next * 17) % n; /* 17 is coprime with n = 72: a permutation */
        next++;
        map[s] = (int32_t)(s % 3);
        src[s] = row;
        pos[3 * s] = (int32_t)(row / (H * W));
        pos[3 * s + 1] = (int32_t)((row / W) % H);
        pos[3 * s + 2] = (int32_t)(row % W);
    }
    REQUIRE(next == n);
    memcpy(x, base, sizeof(float) * S * D);
    Tensor X = TF32(x, S, D), P = TI32(pos, S, 3), M = TI32(map, S);
    REQUIRE_OK(op_pos_embed_3d_add(&X, &P, &M));
    const double *tab = table->data;
    double worst = 0;
    int padding_untouched = 1;
    for (int64_t s = 0; s < S; s++)
        for (int64_t j = 0; j < D; j++) {
            if (src[s] < 0) {
                if (!isnan(x[s * D + j])) padding_untouched = 0;
                continue;
            }
            double want = (double)(base[s * D + j] + (float)tab[src[s] * D + j]);
            if (fabs(x[s * D + j] - want) > worst) worst = fabs(x[s * D + j] - want);
        }
    CHECK(padding_untouched);
    /* base in [-1,1) plus the embedding: one f32 rounding of the sum (1.2e-7) and of the term */
    CHECK_MSG(worst <= 3e-7, "worst %.3g", worst);
    free(pos); free(map); free(src); free(x); free(base);
    golden_free(g);
}

/* 1-D part of width 2n for position p: [sin(p ω_k) | cos(p ω_k)], ω_k = 10000^(-k/n). */
static void part_ref(double *out, double p, int n) {
    for (int k = 0; k < n; k++) {
        double w = pow(10000.0, -(double)k / n);
        out[k] = sin(p * w);
        out[n + k] = cos(p * w);
    }
}

TEST(ops_embed_pos3d_large_positions_no_table) {
    enum { D = 64 };
    const int32_t pos[2][3] = {{40, 123, 517}, {0, 2000, 1}};
    for (int r = 0; r < 2; r++) {
        double x[D] = {0}, want[D];
        int32_t map[1] = {0};
        Tensor X = TF64(x, 1, D), P = TI32((int32_t *)pos[r], 1, 3), M = TI32(map, 1);
        REQUIRE_OK(op_pos_embed_3d_add(&X, &P, &M));
        part_ref(want, pos[r][0], D / 8);                      /* temporal, width D/4 */
        part_ref(want + D / 4, pos[r][2], 3 * D / 16);         /* w, width 3D/8 */
        part_ref(want + D / 4 + 3 * D / 8, pos[r][1], 3 * D / 16); /* h, width 3D/8 */
        /* angles up to 2000: libm's argument reduction is exact, 1e-12 covers the ω rounding */
        CHECK_CLOSE_F64("pos3d large", x, want, D, 1e-12, 0);
    }
}

TEST(ops_embed_pos3d_shape_errors) {
    float x[4 * 24] = {0};
    int32_t pos[4 * 3] = {0}, map[4] = {0};
    Tensor X = TF32(x, 4, 24), P = TI32(pos, 4, 3), M = TI32(map, 4);
    CHECK(op_pos_embed_3d_add(&X, &P, &M) == VFM_ERR_SHAPE); /* 24 is not a multiple of 16 */
    CHECK(strstr(vfm_last_error(), "pos_embed_3d_add") != NULL);
    Tensor X16 = TF32(x, 6, 16), P2 = TI32(pos, 4, 3);
    CHECK(op_pos_embed_3d_add(&X16, &P2, &M) == VFM_ERR_SHAPE); /* 6 rows, pos has 4 */
    CHECK(strstr(vfm_last_error(), "pos") != NULL);
}

/* ---- patchify ------------------------------------------------------------------------- */

TEST(ops_embed_patchify_golden) {
    Golden *g = golden_load("ops_misc_patchify.bin");
    REQUIRE(g);
    for (int i = 0; i < 3; i++) {
        char name[64];
        snprintf(name, sizeof name, "p%d_patch", i);
        const Tensor *patch = golden_need(g, name);
        snprintf(name, sizeof name, "p%d_latent", i);
        const Tensor *latent = golden_need(g, name);
        snprintf(name, sizeof name, "p%d_tokens", i);
        const Tensor *tokens = golden_need(g, name);
        snprintf(name, sizeof name, "p%d_r", i);
        const Tensor *r = golden_need(g, name);
        snprintf(name, sizeof name, "p%d_unpatch_r", i);
        const Tensor *unpatch_r = golden_need(g, name);
        REQUIRE(patch && latent && tokens && r && unpatch_r);
        const int32_t *pp = patch->data;
        int pt = pp[0], ph = pp[1], pw = pp[2];
        int64_t nl = tensor_numel(latent), nt = tensor_numel(tokens);
        float *tok = malloc(sizeof(float) * nt), *lat = malloc(sizeof(float) * nl);
        Tensor TK = tensor_make(tok, DT_F32, DEV_CPU, 2, tokens->shape);
        Tensor LT = tensor_make(lat, DT_F32, DEV_CPU, 4, latent->shape);
        /* pure permutations: bitwise */
        REQUIRE_OK(op_patchify(&TK, latent, pt, ph, pw));
        CHECK_CLOSE_F32("patchify", tok, tokens->data, nt, 0, 0);
        REQUIRE_OK(op_unpatchify(&LT, tokens, pt, ph, pw));
        CHECK_CLOSE_F32("unpatchify", lat, latent->data, nl, 0, 0);
        REQUIRE_OK(op_unpatchify(&LT, r, pt, ph, pw));
        CHECK_CLOSE_F32("unpatchify = autograd of patchify", lat, unpatch_r->data, nl, 0, 0);
        free(tok);
        free(lat);
    }
    golden_free(g);
}

typedef struct {
    Tensor in, out;
    const double *r;
    int pt, ph, pw, forward; /* forward = 1: L = Σ r·patchify(in); 0: L = Σ r·unpatchify(in) */
} PatchCtx;

static double patch_objective(void *p) {
    PatchCtx *c = p;
    vfm_status s = c->forward ? op_patchify(&c->out, &c->in, c->pt, c->ph, c->pw)
                              : op_unpatchify(&c->out, &c->in, c->pt, c->ph, c->pw);
    if (s != VFM_OK) return NAN;
    return dot_f64(c->r, c->out.data, tensor_numel(&c->out));
}

TEST(ops_embed_patchify_adjoint_gradcheck) {
    const int cfg[2][7] = {{3, 2, 4, 6, 1, 2, 2}, {2, 4, 2, 3, 2, 1, 3}}; /* C T H W pt ph pw */
    for (int k = 0; k < 2; k++) {
        int C = cfg[k][0], T = cfg[k][1], H = cfg[k][2], W = cfg[k][3], pt = cfg[k][4], ph = cfg[k][5], pw = cfg[k][6];
        int64_t n = (int64_t)C * T * H * W, rows = (T / pt) * (H / ph) * (W / pw), cols = (int64_t)pt * ph * pw * C;
        REQUIRE(rows * cols == n);
        double *x = malloc(sizeof(double) * n), *y = malloc(sizeof(double) * n), *r = malloc(sizeof(double) * n);
        double *q = malloc(sizeof(double) * n), *gx = malloc(sizeof(double) * n), *gy = malloc(sizeof(double) * n);
        double *back = malloc(sizeof(double) * n), *tmp = malloc(sizeof(double) * n);
        test_fill_uniform_f64(x, n, 21 + k, -1, 1);
        test_fill_uniform_f64(y, n, 22 + k, -1, 1);
        test_fill_uniform_f64(r, n, 23 + k, -1, 1);
        test_fill_uniform_f64(q, n, 24 + k, -1, 1);
        Tensor X = TF64(x, C, T, H, W), Y = TF64(y, rows, cols), R = TF64(r, rows, cols), Q = TF64(q, C, T, H, W);
        Tensor GX = TF64(gx, C, T, H, W), GY = TF64(gy, rows, cols);
        /* gradient of Σ r·patchify(x) is unpatchify(r); of Σ q·unpatchify(y) is patchify(q) */
        REQUIRE_OK(op_unpatchify(&GX, &R, pt, ph, pw));
        REQUIRE_OK(op_patchify(&GY, &Q, pt, ph, pw));
        CHECK_NONZERO("unpatchify(r)", gx, n);
        CHECK_NONZERO("patchify(q)", gy, n);
        PatchCtx fwd = {X, TF64(tmp, rows, cols), r, pt, ph, pw, 1};
        PatchCtx inv = {Y, TF64(tmp, C, T, H, W), q, pt, ph, pw, 0};
        /* L is linear: central differences are exact up to rounding of L (~1e-16·n/h) */
        GRADCHECK("d/dx Σ r·patchify(x)", x, gx, n, patch_objective, &fwd, 1e-3, 1e-10, 0, 0);
        GRADCHECK("d/dy Σ q·unpatchify(y)", y, gy, n, patch_objective, &inv, 1e-3, 1e-10, 0, 0);
        /* exact adjoint: <r, P x> = <P* r, x>, the same products summed in another order */
        Tensor PX = TF64(tmp, rows, cols);
        REQUIRE_OK(op_patchify(&PX, &X, pt, ph, pw));
        double lhs = dot_f64(r, tmp, n), rhs = dot_f64(gx, x, n);
        CHECK_MSG(fabs(lhs - rhs) <= 1e-12 * (fabs(lhs) + 1), "adjoint %.17g vs %.17g", lhs, rhs);
        /* and each is the inverse of the other, bitwise */
        Tensor BK = TF64(back, C, T, H, W);
        REQUIRE_OK(op_unpatchify(&BK, &PX, pt, ph, pw));
        CHECK(memcmp(back, x, sizeof(double) * n) == 0);
        free(x); free(y); free(r); free(q); free(gx); free(gy); free(back); free(tmp);
    }
}

TEST(ops_embed_patchify_shape_errors) {
    float lat[2 * 3 * 4 * 4] = {0}, tok[2 * 3 * 4 * 4] = {0};
    Tensor L = TF32(lat, 2, 3, 4, 4);
    Tensor TK = TF32(tok, 4, 16);
    CHECK(op_patchify(&TK, &L, 2, 2, 2) == VFM_ERR_SHAPE); /* T = 3 does not divide by pt = 2 */
    CHECK(strstr(vfm_last_error(), "patchify") && strstr(vfm_last_error(), "latent"));
    Tensor TK2 = TF32(tok, 12, 8); /* pt 1, ph 2, pw 2: 3·2·2 = 12 tokens of 2·2·2 = 8 */
    CHECK_OK(op_patchify(&TK2, &L, 1, 2, 2));
    Tensor TK3 = TF32(tok, 8, 12);
    CHECK(op_unpatchify(&L, &TK3, 1, 2, 2) == VFM_ERR_SHAPE);
    CHECK(strstr(vfm_last_error(), "unpatchify") && strstr(vfm_last_error(), "tokens"));
    CHECK(op_patchify(&TK2, &L, 0, 2, 2) == VFM_ERR_SHAPE);
}
