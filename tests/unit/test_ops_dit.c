/* Tests of the ops the DiT reference's layout needs: the 2-D sin-cos position embedding, the class
 * table lookup and the column gather — goldens (reference/golden_ops_dit.py), finite-difference
 * gradients (f64 build), padding, repeated indices, thread invariance and index errors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "golden.h"
#include "gradcheck.h"
#include "ops/ops.h"
#include "test.h"

/* ---- 2-D position embedding ------------------------------------------------------------- */

TEST(ops_dit_pos2d_golden) {
    Golden *g = golden_load("ops_dit.bin");
    REQUIRE(g);
    for (int i = 0; i < 3; i++) {
        char name[32];
        snprintf(name, sizeof name, "p%d_pos", i);
        const Tensor *pos = golden_need(g, name);
        snprintf(name, sizeof name, "p%d_table", i);
        const Tensor *table = golden_need(g, name);
        REQUIRE(pos && table);
        int64_t S = table->shape[0], D = table->shape[1];
        int32_t *map = calloc((size_t)S, sizeof *map);
        float *x32 = calloc((size_t)(S * D), sizeof *x32);
        double *x64 = calloc((size_t)(S * D), sizeof *x64);
        Tensor P = *pos, M = TI32(map, S), X32 = TF32(x32, S, D), X64 = TF64(x64, S, D);
        REQUIRE_OK(op_pos_embed_2d_add(&X32, &P, &M));
        REQUIRE_OK(op_pos_embed_2d_add(&X64, &P, &M));
        float *ref32 = test_as_f32(table);
        /* f32: the double value rounded once (|emb| <= 1: 6e-8); f64: libm vs numpy on angles < 6 */
        CHECK_CLOSE_F32("pos2d f32", x32, ref32, S * D, 1e-7, 0);
        CHECK_CLOSE_F64("pos2d f64", x64, table->data, S * D, 1e-13, 0);
        free(map); free(x32); free(x64); free(ref32);
    }
    golden_free(g);
}

/* Padding rows (NaN, nonsense positions) stay untouched; real rows get base + embedding. */
TEST(ops_dit_pos2d_padding_untouched) {
    enum { S = 6, D = 8 };
    float x[S * D], base[S * D];
    int32_t pos[S * 3] = {0, 0, 0, 9, -5, 7, 0, 1, 2, 3, 1, 2, 0, 0, 1, 1 << 30, 4, 4};
    int32_t map[S] = {0, -1, 0, 1, 1, -1};
    test_fill_uniform_f32(base, S * D, 7, -1, 1);
    for (int j = 0; j < D; j++) base[1 * D + j] = base[5 * D + j] = NAN;
    memcpy(x, base, sizeof x);
    Tensor X = TF32(x, S, D), P = TI32(pos, S, 3), M = TI32(map, S);
    REQUIRE_OK(op_pos_embed_2d_add(&X, &P, &M));
    for (int j = 0; j < D; j++) CHECK(isnan(x[1 * D + j]) && isnan(x[5 * D + j]));
    /* rows 2 and 3 share (h, w) = (1, 2) in different frames: the same embedding */
    for (int j = 0; j < D; j++)
        CHECK_MSG(fabsf((x[2 * D + j] - base[2 * D + j]) - (x[3 * D + j] - base[3 * D + j])) < 1e-6f, "col %d", j);
    /* row 0 at (0, 0): sin 0 = 0, cos 0 = 1 in both halves */
    for (int j = 0; j < D; j++) CHECK(fabsf(x[j] - base[j] - ((j % 4) < 2 ? 0.0f : 1.0f)) < 1e-6f);
    Tensor bad = TF32(x, S, 6);
    CHECK(op_pos_embed_2d_add(&bad, &P, &M) == VFM_ERR_SHAPE); /* 6 is not a multiple of 4 */
    CHECK(strstr(vfm_last_error(), "pos_embed_2d_add") != NULL);
}

/* ---- class table lookup ----------------------------------------------------------------- */

TEST(ops_dit_embedding_golden) {
    Golden *g = golden_load("ops_dit.bin");
    REQUIRE(g);
    const Tensor *table = golden_need(g, "e_table"), *idx = golden_need(g, "e_idx"), *dout = golden_need(g, "e_dout");
    const Tensor *ref = golden_need(g, "e_out"), *dref = golden_need(g, "e_dtable");
    REQUIRE(table && idx && dout && ref && dref);
    int64_t N = table->shape[0], D = table->shape[1], B = idx->shape[0];
    double *t64 = test_as_f64(table), *d64 = test_as_f64(dout), *o64 = calloc((size_t)(B * D), sizeof(double));
    double *dt64 = calloc((size_t)(N * D), sizeof(double));
    float *o32 = calloc((size_t)(B * D), sizeof(float)), *dt32 = calloc((size_t)(N * D), sizeof(float));
    Tensor T64 = TF64(t64, N, D), O64 = TF64(o64, B, D), dO64 = TF64(d64, B, D), dT64 = TF64(dt64, N, D);
    Tensor O32 = TF32(o32, B, D), dT32 = TF32(dt32, N, D), I = *idx;
    REQUIRE_OK(op_embedding_forward(&O64, &T64, &I));
    REQUIRE_OK(op_embedding_backward(&dT64, &dO64, &I));
    REQUIRE_OK(op_embedding_forward(&O32, table, &I));
    REQUIRE_OK(op_embedding_backward(&dT32, dout, &I));
    CHECK_CLOSE_F64("embedding out f64", o64, ref->data, B * D, 0, 0); /* a copy: exact */
    CHECK_CLOSE_F64("embedding dtable f64", dt64, dref->data, N * D, 1e-15, 0);
    float *ref32 = test_as_f32(ref), *dref32 = test_as_f32(dref);
    CHECK_CLOSE_F32("embedding out f32", o32, ref32, B * D, 0, 0);
    CHECK_CLOSE_F32("embedding dtable f32", dt32, dref32, N * D, 2.5e-7, 0); /* one f32 add of two terms */
    /* accumulates (+=) */
    REQUIRE_OK(op_embedding_backward(&dT64, &dO64, &I));
    for (int64_t k = 0; k < N * D; k++) CHECK(fabs(dt64[k] - 2 * ((const double *)dref->data)[k]) < 1e-15);
    free(t64); free(d64); free(o64); free(dt64); free(o32); free(dt32); free(ref32); free(dref32);
    golden_free(g);
}

typedef struct {
    Tensor table, idx, out, din;
    const double *r;
    int gather;
} LookupCtx;

static double lookup_objective(void *p) {
    LookupCtx *c = p;
    vfm_status s = c->gather ? op_gather_columns(&c->out, &c->table, &c->idx) : op_embedding_forward(&c->out, &c->table, &c->idx);
    if (s != VFM_OK) return NAN;
    return dot_f64(c->r, c->out.data, tensor_numel(&c->out));
}

TEST(ops_dit_embedding_and_gather_gradcheck) {
    enum { N = 5, D = 4, B = 6, K = 7 };
    int32_t eidx[B] = {4, 1, 1, 0, 4, 2}, gidx[K] = {3, 0, 0, 2, 1, 3, 3};
    for (int gather = 0; gather < 2; gather++) {
        int64_t rows = gather ? N : B, cols = gather ? K : D;
        double table[N * D], r[B * K], out[B * K], grad[N * D] = {0};
        test_fill_uniform_f64(table, N * D, 21, -1, 1);
        test_fill_uniform_f64(r, rows * cols, 22, -1, 1);
        LookupCtx c = {TF64(table, N, D), gather ? TI32(gidx, K) : TI32(eidx, B), TF64(out, rows, cols),
                       TF64(grad, N, D), r, gather};
        Tensor dout = TF64(r, rows, cols);
        if (gather) REQUIRE_OK(op_gather_columns_backward(&c.din, &dout, &c.idx));
        else REQUIRE_OK(op_embedding_backward(&c.din, &dout, &c.idx));
        CHECK_NONZERO(gather ? "gather din" : "embedding dtable", grad, N * D);
        /* linear in the table: central differences are exact up to rounding (1e-16·|L|/h) */
        GRADCHECK(gather ? "gather din" : "embedding dtable", table, grad, N * D, lookup_objective, &c, 1e-4, 1e-9, 1e-9, 0);
    }
}

TEST(ops_dit_lookup_index_errors) {
    float table[3 * 2] = {0}, out[2 * 2], grad[3 * 2] = {0};
    int32_t idx[2] = {1, 3};
    Tensor T = TF32(table, 3, 2), O = TF32(out, 2, 2), I = TI32(idx, 2), G = TF32(grad, 3, 2);
    CHECK(op_embedding_forward(&O, &T, &I) == VFM_ERR_SHAPE);
    CHECK(strstr(vfm_last_error(), "idx[1] = 3") != NULL);
    CHECK(op_embedding_backward(&G, &O, &I) == VFM_ERR_SHAPE);
    for (int k = 0; k < 6; k++) CHECK(grad[k] == 0); /* nothing written */
    idx[1] = -1;
    CHECK(op_gather_columns(&O, &T, &I) == VFM_ERR_SHAPE); /* 3 rows x 2 cols: out must be [3, 2] */
    float out3[3 * 2];
    Tensor O3 = TF32(out3, 3, 2);
    CHECK(op_gather_columns(&O3, &T, &I) == VFM_ERR_SHAPE); /* idx -1 */
    CHECK(strstr(vfm_last_error(), "gather_columns") != NULL);
}

/* ---- column gather ---------------------------------------------------------------------- */

TEST(ops_dit_gather_golden_and_thread_invariance) {
    Golden *g = golden_load("ops_dit.bin");
    REQUIRE(g);
    const Tensor *in = golden_need(g, "g_in"), *idx = golden_need(g, "g_idx"), *dout = golden_need(g, "g_dout");
    const Tensor *ref = golden_need(g, "g_out"), *dref = golden_need(g, "g_din");
    REQUIRE(in && idx && dout && ref && dref);
    int64_t N = in->shape[0], M = in->shape[1], K = idx->shape[0];
    float *o32 = calloc((size_t)(N * K), sizeof(float)), *di32 = calloc((size_t)(N * M), sizeof(float));
    float *di32b = calloc((size_t)(N * M), sizeof(float));
    Tensor O = TF32(o32, N, K), dI = TF32(di32, N, M), dIb = TF32(di32b, N, M), I = *idx;
    REQUIRE_OK(op_gather_columns(&O, in, &I));
    REQUIRE_OK(op_gather_columns_backward(&dI, dout, &I));
    float *ref32 = test_as_f32(ref), *dref32 = test_as_f32(dref);
    CHECK_CLOSE_F32("gather out", o32, ref32, N * K, 0, 0);
    CHECK_CLOSE_F32("gather din", di32, dref32, N * M, 2.5e-7, 0); /* column 4 takes two terms */
    int threads = ops_get_threads();
    ops_set_threads(threads > 1 ? 1 : 3);
    REQUIRE_OK(op_gather_columns_backward(&dIb, dout, &I));
    ops_set_threads(threads);
    CHECK(memcmp(di32, di32b, sizeof(float) * (size_t)(N * M)) == 0);
    free(o32); free(di32); free(di32b); free(ref32); free(dref32);
    golden_free(g);
}
