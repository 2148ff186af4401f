/* Layout-independent checkpoints: the ranks of the job save weights and Adam moments as TP
 * shards (TP = world size, or TP2 × DP2 with ZeRO-1 moments at four ranks) into one
 * model.safetensors and one optim.safetensors of full tensors; every rank then loads them at TP1,
 * TP2, TP3 and TP4 (each TP rank simulated in turn) and at DP 1 and 3 (ZeRO ranges), bit for bit
 * against the full values. The files are plain safetensors: data/formats/safetensors.c reads the full
 * tensors by their single-rank names. A model of another shape is refused naming the tensor. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fileutil.h"
#include "data/formats/safetensors.h"
#include "mpi_test.h"
#include "parallel/ckpt_shard.h"
#include "parallel/dp.h"

/* Split dims of every kind, sizes divisible by 1-4; 3-D entries split on either dimension. */
static void ckpt_table(ParamTable *t, int fc2_rows) {
    param_table_init(t);
    param_table_add(t, INIT_NORMAL, 1, 2, (int64_t[]){24, 12}, 0, 0, "blocks.0.attn.q.weight");
    param_table_add(t, INIT_NORMAL, 1, 2, (int64_t[]){12, 24}, 0, 1, "blocks.0.attn.proj.weight");
    param_table_add(t, INIT_ONE, 0, 1, (int64_t[]){4}, REDUCE_TP_HEADS, -1, "blocks.0.attn.q_norm.weight");
    param_table_add(t, INIT_NORMAL, 1, 2, (int64_t[]){48, 12}, 0, 0, "blocks.0.mlp.fc1.weight");
    param_table_add(t, INIT_NORMAL, 1, 2, (int64_t[]){fc2_rows, 48}, 0, 1, "blocks.0.mlp.fc2.weight");
    param_table_add(t, INIT_NORMAL, 1, 3, (int64_t[]){12, 3, 2}, 0, 0, "conv.weight");
    param_table_add(t, INIT_NORMAL, 1, 3, (int64_t[]){2, 12, 3}, 0, 1, "mix.weight");
    param_table_add(t, INIT_UNIFORM_FANIN, 4, 1, (int64_t[]){5}, REDUCE_TP_SP, -1, "final.bias");
}

static void path_in(char *out, size_t n, const char *name) { path_join(out, n, test_tmpdir(), name); }

TEST(ckpt_shard_save_tp_load_any_layout) {
    int W = mt_world(), r = mt_rank();
    int save_tp = W == 4 ? 2 : W, save_dp = W / save_tp, tp_rank = r % save_tp, dp_rank = r / save_tp;
    ParamTable full;
    ckpt_table(&full, 12);
    int64_t N = full.total;
    float *params = malloc((size_t)N * 4), *m_full = malloc((size_t)N * 4), *v_full = malloc((size_t)N * 4);
    REQUIRE_OK(param_table_init_values(&full, params, 9));
    test_fill_uniform_f32(m_full, N, 21, -1, 1);
    test_fill_uniform_f32(v_full, N, 22, 0, 1);
    /* this rank's shard: weights, and its ZeRO-1 piece of the moments */
    TpShardMap map;
    REQUIRE_OK(tp_shard_map_init(&map, &full, save_tp, tp_rank));
    int64_t L = map.local.total, lo, hi;
    zero_shard_range(L, save_dp, dp_rank, &lo, &hi);
    float *local = malloc((size_t)L * 4), *lm = malloc((size_t)L * 4), *lv = malloc((size_t)L * 4);
    REQUIRE_OK(tp_shard_extract(&map, local, params));
    REQUIRE_OK(tp_shard_extract(&map, lm, m_full));
    REQUIRE_OK(tp_shard_extract(&map, lv, v_full));
    Optimizer o = {.table = &map.local, .begin = lo, .end = hi, .m = lm + lo, .v = lv + lo, .step = 7};
    char model[1400], optim[1400];
    path_in(model, sizeof model, "model.safetensors");
    path_in(optim, sizeof optim, "optim.safetensors");
    CHECK_OK(ckpt_write_weights(model, mt_world_comm(), &map, local, dp_rank == 0));
    CHECK_OK(ckpt_write_optim(optim, mt_world_comm(), &map, &o, lo, hi));
    tp_shard_map_free(&map);

    /* a plain safetensors file of full tensors under their single-rank names */
    SafetensorsFile *f;
    REQUIRE_OK(safetensors_open(&f, model));
    CHECK(safetensors_count(f) == full.count);
    float whole[12 * 48];
    int k = safetensors_find(f, "blocks.0.mlp.fc2.weight");
    REQUIRE(k >= 0);
    CHECK_OK(safetensors_read_f32(f, k, whole, 12 * 48));
    CHECK_SAME_BITS("fc2 read whole by data/safetensors", whole, params + full.entries[4].offset, 12 * 48);
    safetensors_close(f);
    REQUIRE_OK(safetensors_open(&f, optim));
    k = safetensors_find(f, "exp_avg_sq.blocks.0.attn.proj.weight");
    REQUIRE(k >= 0);
    CHECK_OK(safetensors_read_f32(f, k, whole, 12 * 24));
    CHECK_SAME_BITS("proj's exp_avg_sq read whole", whole, v_full + full.entries[1].offset, 12 * 24);
    CHECK(strcmp(safetensors_metadata(f, "step"), "7") == 0);
    safetensors_close(f);

    /* load at TP 1-4, every TP rank, and the moments at DP 1 and 3 */
    float *want = malloc((size_t)N * 4), *got = malloc((size_t)N * 4), *gm = malloc((size_t)N * 4), *gv = malloc((size_t)N * 4);
    for (int tp = 1; tp <= 4; tp++)
        for (int t = 0; t < tp; t++) {
            REQUIRE_OK(tp_shard_map_init(&map, &full, tp, t));
            int64_t n = map.local.total;
            memset(got, 0xff, (size_t)n * 4);
            CHECK_OK(ckpt_read_weights(model, &map, got));
            tp_shard_extract(&map, want, params);
            char what[96];
            snprintf(what, sizeof what, "weights saved at TP%d×DP%d, loaded at TP%d rank %d", save_tp, save_dp, tp, t);
            CHECK_SAME_BITS(what, got, want, n);
            for (int dp = 1; dp <= 3; dp += 2)
                for (int d = 0; d < dp; d++) {
                    int64_t b, e;
                    zero_shard_range(n, dp, d, &b, &e);
                    Optimizer lo_opt = {.table = &map.local, .begin = b, .end = e, .m = gm, .v = gv, .step = -1};
                    CHECK_OK(ckpt_read_optim(optim, &map, &lo_opt));
                    CHECK(lo_opt.step == 7);
                    tp_shard_extract(&map, want, m_full);
                    snprintf(what, sizeof what, "exp_avg at TP%d rank %d, DP%d rank %d", tp, t, dp, d);
                    CHECK_SAME_BITS(what, gm, want + b, e - b);
                    tp_shard_extract(&map, want, v_full);
                    snprintf(what, sizeof what, "exp_avg_sq at TP%d rank %d, DP%d rank %d", tp, t, dp, d);
                    CHECK_SAME_BITS(what, gv, want + b, e - b);
                }
            tp_shard_map_free(&map);
        }

    /* another model: fc2 with 24 rows */
    ParamTable other;
    ckpt_table(&other, 24);
    REQUIRE_OK(tp_shard_map_init(&map, &other, 1, 0));
    float *big = malloc((size_t)other.total * 4);
    vfm_status s = ckpt_read_weights(model, &map, big);
    CHECK_MSG(s == VFM_ERR_SHAPE && strstr(vfm_last_error(), "blocks.0.mlp.fc2.weight"), "%s", vfm_last_error());
    tp_shard_map_free(&map);
    param_table_free(&other);
    free(big);
    free(params), free(m_full), free(v_full), free(local), free(lm), free(lv), free(want), free(got), free(gm), free(gv);
    param_table_free(&full);
}
