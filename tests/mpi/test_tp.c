/* Tensor-parallel building blocks at TP = the world size (1-4): the parameter shards (local
 * shapes, runs in the full tensors, extract/insert/init), and the Megatron regions on an MLP
 * block y = fc2(gelu(fc1(rmsnorm(x; w)))) with fc1 column-parallel, fc2 row-parallel and the norm
 * weight replicated (REDUCE_TP_SP), without and with sequence parallelism, against the same block
 * on one rank: outputs, input gradients and every weight gradient (after the reduce-group sums of
 * dp.c) within max|a-b| <= 1e-6·max|ref| + 1e-5·max|ref|. TP and TP+SP agree bit for bit on y, dx,
 * dW1, dW2 (the ordered reduce-scatter is the ordered all-reduce restricted to a block). Skipping
 * the exit's all-reduce (a broken variant) must fail. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi_test.h"
#include "ops/ops.h"
#include "parallel/dp.h"
#include "parallel/tp.h"
#include "parallel/tp_shard.h"

enum { S = 24, D = 12, F = 48 }; /* S, D and F divide by 2, 3 and 4 */

static void block_table(ParamTable *t) {
    param_table_init(t);
    param_table_add(t, INIT_NORMAL, 0.5f, 1, (int64_t[]){D}, REDUCE_TP_SP, -1, "norm.weight");
    param_table_add(t, INIT_NORMAL, 0.3f, 2, (int64_t[]){F, D}, 0, 0, "mlp.fc1.weight");
    param_table_add(t, INIT_NORMAL, 0.3f, 2, (int64_t[]){D, F}, 0, 1, "mlp.fc2.weight");
}

typedef struct {
    float y[S * D], dx[S * D]; /* this rank's rows (all S without SP) */
    float *grads;              /* local table layout, after the reduce-group sums */
} BlockOut;

/* The block on this rank: x and dy are this rank's rows (S/TP under SP, S without), params and
 * grads laid out by `local`. skip_exit_reduce: the broken variant. */
static vfm_status run_block(const TpContext *c, const ParamTable *local, const float *params, const float *x,
                            const float *dy_in, BlockOut *out, int skip_exit_reduce) {
    int tp = c->tp ? c->tp->size : 1;
    int64_t rows = c->sequence_parallel ? S / tp : S, Fl = F / tp;
    float *h = calloc(S * D, 4), *hf = calloc(S * D, 4), *rstd = calloc(S, 4), *pre = calloc(S * F, 4);
    float *act = calloc(S * F, 4), *p = calloc(S * D, 4), *dp = calloc(S * D, 4), *dact = calloc(S * F, 4);
    float *dh = calloc(S * D, 4), *dhl = calloc(S * D, 4), *dy = calloc(S * D, 4);
    memset(out->grads, 0, (size_t)local->total * sizeof(float));
    Tensor w = param_view(local, 0, (void *)params, DT_F32, DEV_CPU), w1 = param_view(local, 1, (void *)params, DT_F32, DEV_CPU),
           w2 = param_view(local, 2, (void *)params, DT_F32, DEV_CPU);
    Tensor gw = param_view(local, 0, out->grads, DT_F32, DEV_CPU), gw1 = param_view(local, 1, out->grads, DT_F32, DEV_CPU),
           gw2 = param_view(local, 2, out->grads, DT_F32, DEV_CPU);
    Tensor X = TF32((float *)x, rows, D), H = TF32(h, rows, D), R = TF32(rstd, rows), HF = TF32(hf, S, D);
    Tensor PRE = TF32(pre, S, Fl), ACT = TF32(act, S, Fl), P = TF32(p, S, D), Y = TF32(out->y, rows, D);
    Tensor DY = TF32(dy, rows, D), DP = TF32(dp, S, D), DACT = TF32(dact, S, Fl), DH = TF32(dh, S, D),
           DHL = TF32(dhl, rows, D), DX = TF32(out->dx, rows, D);
    vfm_status s = op_rmsnorm_forward(&H, &R, &X, &w, 1e-6f);
    if (s == VFM_OK) s = tp_region_enter_forward(c, &HF, &H);
    if (s == VFM_OK) s = op_linear_forward(&ACT, &PRE, &HF, &w1, NULL, ACT_GELU_ERF);
    if (s == VFM_OK) s = op_linear_forward(&P, NULL, &ACT, &w2, NULL, ACT_NONE);
    if (s == VFM_OK) s = skip_exit_reduce ? tp_sp_scatter(c, &Y, &P) : tp_region_exit_forward(c, &Y, &P);
    /* backward */
    memcpy(dy, dy_in, (size_t)(rows * D) * sizeof(float));
    if (s == VFM_OK) s = tp_region_exit_backward(c, &DP, &DY);
    if (s == VFM_OK) s = op_linear_backward(&DACT, &gw2, NULL, &DP, &ACT, &w2, NULL, ACT_NONE, 0);
    if (s == VFM_OK) s = op_linear_backward(&DH, &gw1, NULL, &DACT, &HF, &w1, &PRE, ACT_GELU_ERF, 0);
    if (s == VFM_OK) s = tp_region_enter_backward(c, &DHL, &DH);
    if (s == VFM_OK) s = op_rmsnorm_backward(&DX, &gw, &DHL, &X, &R, &w);
    /* the reduce groups: REDUCE_TP_SP entries over TP under SP (no DP here) */
    DataParallel dpar;
    DpConfig cfg = {1, 0, 0, 0, 1};
    if (s == VFM_OK) s = dp_init(&dpar, local, &cfg, NULL, c->tp, NULL);
    if (s == VFM_OK) {
        dp_set_sequence_parallel(&dpar, c->sequence_parallel);
        s = dp_grad_sync_finish(&dpar, out->grads);
        dp_free(&dpar);
    }
    free(h), free(hf), free(rstd), free(pre), free(act), free(p), free(dp), free(dact), free(dh), free(dhl), free(dy);
    return s;
}

static double max_abs(const float *x, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++)
        if (fabs(x[i]) > m) m = fabs(x[i]);
    return m;
}

static int close_enough(const float *got, const float *want, int64_t n, double scale) {
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - (double)want[i]);
        if (!(e <= (1e-6 + 1e-5) * scale)) return 0;
    }
    return 1;
}

typedef struct {
    ParamTable full;
    TpShardMap map;
    float *full_params, *local_params, x[S * D], dy[S * D];
    BlockOut ref;  /* one rank, whole table */
    float *ref_local_grads;
} Fixture;

static int fixture_init(Fixture *f) {
    int tp = mt_world(), r = mt_rank();
    block_table(&f->full);
    if (tp_shard_map_init(&f->map, &f->full, tp, r) != VFM_OK) return 0;
    f->full_params = malloc((size_t)f->full.total * sizeof(float));
    f->local_params = malloc((size_t)f->map.local.total * sizeof(float));
    f->ref.grads = malloc((size_t)f->full.total * sizeof(float));
    f->ref_local_grads = malloc((size_t)f->map.local.total * sizeof(float));
    param_table_init_values(&f->full, f->full_params, 5);
    tp_shard_init_values(&f->map, f->local_params, 5);
    test_fill_uniform_f32(f->x, S * D, 6, -1, 1);
    test_fill_uniform_f32(f->dy, S * D, 7, -1, 1);
    TpContext one = {NULL, 0};
    if (run_block(&one, &f->full, f->full_params, f->x, f->dy, &f->ref, 0) != VFM_OK) return 0;
    tp_shard_extract(&f->map, f->ref_local_grads, f->ref.grads);
    return 1;
}

static void fixture_free(Fixture *f) {
    free(f->full_params), free(f->local_params), free(f->ref.grads), free(f->ref_local_grads);
    tp_shard_map_free(&f->map);
    param_table_free(&f->full);
}

/* Runs the block at this TP size, with or without SP; 1 when y, dx and every gradient match. */
static int tp_case(Fixture *f, int sp, int broken, BlockOut *out, int report) {
    int tp = mt_world(), r = mt_rank();
    TpContext c = {mt_world_comm(), sp};
    int64_t rows = sp ? S / tp : S, at = sp ? rows * r : 0;
    if (run_block(&c, &f->map.local, f->local_params, f->x + at * D, f->dy + at * D, out, broken) != VFM_OK) {
        test_fail(__FILE__, __LINE__, "run_block: %s", vfm_last_error());
        return 0;
    }
    int ok = 1;
    const char *what[5] = {"y", "dx", "dw (norm)", "dW1", "dW2"};
    const float *got[5] = {out->y, out->dx, out->grads, out->grads + f->map.local.entries[1].offset,
                           out->grads + f->map.local.entries[2].offset};
    const float *want[5] = {f->ref.y + at * D, f->ref.dx + at * D, f->ref_local_grads,
                            f->ref_local_grads + f->map.local.entries[1].offset,
                            f->ref_local_grads + f->map.local.entries[2].offset};
    int64_t n[5] = {rows * D, rows * D, D, f->map.local.entries[1].numel, f->map.local.entries[2].numel};
    double scale[5] = {max_abs(f->ref.y, S * D), max_abs(f->ref.dx, S * D), max_abs(f->ref.grads, D),
                       max_abs(f->ref.grads + f->full.entries[1].offset, F * D),
                       max_abs(f->ref.grads + f->full.entries[2].offset, F * D)};
    for (int k = 0; k < 5; k++) {
        int same = close_enough(got[k], want[k], n[k], scale[k]);
        if (!same && report) test_fail(__FILE__, __LINE__, "TP%d%s: %s differs from the single-rank block", tp, sp ? "+SP" : "", what[k]);
        ok &= same;
    }
    return ok;
}

TEST(tp_regions_match_single_rank) {
    Fixture f;
    REQUIRE(fixture_init(&f));
    CHECK_SAME_BITS("tp_shard_init_values = the shard of the full init", f.local_params,
                    (tp_shard_extract(&f.map, f.ref_local_grads, f.full_params), f.ref_local_grads), f.map.local.total);
    tp_shard_extract(&f.map, f.ref_local_grads, f.ref.grads);
    BlockOut plain = {.grads = malloc((size_t)f.map.local.total * 4)}, sp = {.grads = malloc((size_t)f.map.local.total * 4)};
    tp_case(&f, 0, 0, &plain, 1);
    tp_case(&f, 1, 0, &sp, 1);
    /* TP and TP+SP: the same bits on this rank's rows and on both sharded weights */
    int tp = mt_world(), r = mt_rank();
    int64_t rows = S / tp;
    CHECK_SAME_BITS("y: TP+SP vs TP", sp.y, plain.y + rows * r * D, rows * D);
    CHECK_SAME_BITS("dx: TP+SP vs TP", sp.dx, plain.dx + rows * r * D, rows * D);
    int64_t w1 = f.map.local.entries[1].offset, nw = f.map.local.total - w1;
    CHECK_SAME_BITS("dW1, dW2: TP+SP vs TP", sp.grads + w1, plain.grads + w1, nw);
    free(plain.grads), free(sp.grads);
    fixture_free(&f);
}

TEST(tp_skipped_reduction_is_caught) {
    REQUIRE_WORLD(2, 3, 4);
    Fixture f;
    REQUIRE(fixture_init(&f));
    BlockOut out = {.grads = malloc((size_t)f.map.local.total * 4)};
    int bad[2] = {!tp_case(&f, 0, 1, &out, 0), !tp_case(&f, 1, 1, &out, 0)};
    CHECK_OK(comm_all_reduce(mt_world_comm(), bad, 2, DT_I32, COMM_MAX));
    CHECK_MSG(bad[0], "TP without the exit all-reduce still matched");
    CHECK_MSG(bad[1], "TP+SP without the exit reduce-scatter still matched");
    free(out.grads);
    fixture_free(&f);
}

/* Shards: local shapes, the runs inside the full tensors, and extract/insert as inverses. */
TEST(tp_shard_map_layout) {
    ParamTable t;
    param_table_init(&t);
    param_table_add(&t, INIT_NORMAL, 1, 2, (int64_t[]){8, 6}, 0, 0, "col.weight");      /* rows split */
    param_table_add(&t, INIT_NORMAL, 1, 2, (int64_t[]){6, 8}, 0, 1, "row.weight");      /* columns split */
    param_table_add(&t, INIT_ONE, 0, 1, (int64_t[]){5}, REDUCE_TP_HEADS, -1, "q_norm.weight");
    param_table_add(&t, INIT_NORMAL, 1, 1, (int64_t[]){8}, 0, 0, "col.bias");
    TpShardMap m;
    REQUIRE_OK(tp_shard_map_init(&m, &t, 4, 1));
    const ParamTable *l = &m.local;
    CHECK(l->count == 4 && l->entries[0].shape[0] == 2 && l->entries[0].shape[1] == 6);
    CHECK(l->entries[1].shape[0] == 6 && l->entries[1].shape[1] == 2 && l->entries[2].shape[0] == 5);
    CHECK(l->entries[3].shape[0] == 2 && l->total == 12 + 12 + 5 + 2);
    CHECK(strcmp(l->entries[1].name, "row.weight") == 0 && l->entries[2].reduce_groups == (REDUCE_TP_HEADS | REDUCE_DP_CP));
    /* column-parallel: rows 2..3 = one run of 12 at 12; row-parallel: 6 runs of 2 at 2, 10, 18, ... */
    CHECK(m.shards[0].runs == 1 && m.shards[0].run_len == 12 && m.shards[0].first == 12);
    CHECK(m.shards[1].runs == 6 && m.shards[1].run_len == 2 && m.shards[1].first == 2 && m.shards[1].stride == 8);
    CHECK(m.shards[2].split_dim == -1 && m.shards[2].run_len == 5 && m.shards[2].first == 0);
    float full[48 + 48 + 5 + 8], back[48 + 48 + 5 + 8], local[31];
    for (int i = 0; i < (int)(sizeof full / sizeof *full); i++) full[i] = (float)i, back[i] = -1;
    REQUIRE_OK(tp_shard_extract(&m, local, full));
    CHECK(local[12] == 48 + 2 && local[13] == 48 + 3 && local[14] == 48 + 10); /* row.weight: (0,2), (0,3), (1,2) */
    CHECK(local[29] == 96 + 5 + 2);                                           /* col.bias[2] */
    REQUIRE_OK(tp_shard_insert(&m, back, local));
    CHECK(back[12] == 12 && back[11] == -1 && back[48 + 2] == 50 && back[48 + 4] == -1);
    tp_shard_map_free(&m);
    vfm_status s = tp_shard_map_init(&m, &t, 3, 0);
    CHECK_MSG(s == VFM_ERR_USAGE && strstr(vfm_last_error(), "col.weight") &&
              strstr(vfm_last_error(), "model.tensor_model_parallel_size = 3"), "%s", vfm_last_error());
    param_table_free(&t);
}

/* A fused q|k|v weight [3n, w] (tp_parts 3) splits each part separately: rank t's local weight is
 * [q_t; k_t; v_t], one run per part; a part that does not divide names the parts. */
TEST(tp_shard_fused_parts) {
    ParamTable t;
    param_table_init(&t);
    int e = param_table_add(&t, INIT_NORMAL, 1, 2, (int64_t[]){12, 3}, 0, 0, "attn.qkv.weight"); /* parts of 4 rows */
    int b = param_table_add(&t, INIT_NORMAL, 1, 1, (int64_t[]){12}, 0, 0, "attn.qkv.bias");
    t.entries[e].tp_parts = t.entries[b].tp_parts = 3;
    TpShardMap m;
    REQUIRE_OK(tp_shard_map_init(&m, &t, 2, 1));
    CHECK(m.local.entries[0].shape[0] == 6 && m.local.entries[0].tp_parts == 3 && m.local.total == 18 + 6);
    float full[36 + 12], local[24];
    for (int i = 0; i < 48; i++) full[i] = (float)i;
    REQUIRE_OK(tp_shard_extract(&m, local, full));
    /* rank 1: rows 2-3 of q, 6-7 (k), 10-11 (v): elements 6.., 18.., 30.. of the weight */
    CHECK(local[0] == 6 && local[5] == 11 && local[6] == 18 && local[12] == 30 && local[17] == 35);
    CHECK(local[18] == 36 + 2 && local[20] == 36 + 6 && local[22] == 36 + 10); /* the bias the same way */
    float back[48];
    for (int i = 0; i < 48; i++) back[i] = -1;
    REQUIRE_OK(tp_shard_insert(&m, back, local));
    CHECK(back[6] == 6 && back[30] == 30 && back[0] == -1 && back[12] == -1);
    tp_shard_map_free(&m);
    vfm_status s = tp_shard_map_init(&m, &t, 3, 0);
    CHECK_MSG(s == VFM_ERR_USAGE && strstr(vfm_last_error(), "each of the 3 parts"), "%s", vfm_last_error());
    param_table_free(&t);
}

TEST(tp_sp_rows_and_scatter_gather) {
    int64_t b, n;
    CHECK_OK(tp_sp_rows(24, 4, 3, &b, &n));
    CHECK(b == 18 && n == 6);
    CHECK(tp_sp_rows(26, 4, 0, &b, &n) == VFM_ERR_USAGE && strstr(vfm_last_error(), "model.sequence_parallel"));
    int tp = mt_world(), r = mt_rank();
    int32_t whole[S], mine[S], back[S];
    for (int i = 0; i < S; i++) whole[i] = i < 20 ? i / 5 : -1; /* a tok2sample map */
    TpContext c = {mt_world_comm(), 1};
    Tensor W = TI32(whole, S), M = TI32(mine, S / tp), B = TI32(back, S);
    CHECK_OK(tp_sp_scatter(&c, &M, &W));
    CHECK(memcmp(mine, whole + r * (S / tp), (size_t)(S / tp) * 4) == 0);
    CHECK_OK(tp_sp_gather(&c, &B, &M));
    CHECK(memcmp(back, whole, sizeof whole) == 0);
}
