/* The DiT split over a layout without running it: this rank's table (TP shards add up to the
 * single-rank model, replicated entries whole, the reduce-group flags of design §3 on every entry),
 * the per-rank figures of `vfm model info` against the formulas of docs/parallel.md, and a bad
 * layout refused with exit 2 before anything is printed. (The layouts run in tests/mpi.) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capture.h"
#include "core/config.h"
#include "model/dit.h"
#include "parallel/sharding.h"
#include "parallel/tp_shard.h"
#include "test.h"

static DiTConfig small(DiTVariant v) {
    DiTConfig c;
    memset(&c, 0, sizeof c);
    c.variant = v, c.hidden = 64, c.layers = 2, c.heads = 4, c.kv_heads = v == DIT_VARIANT_DFM ? 2 : 0;
    c.in_channels = 4, c.out_channels = 4, c.patch_spatial = 2, c.patch_temporal = 1, c.d_text = 16;
    c.adaln_lora = 16, c.fps_dim = 16, c.qk_norm = 1, c.ln_eps = 1e-5f, c.init_std = 0.02f;
    if (v == DIT_VARIANT_ADALN_ZERO) c.num_classes = 3, c.class_dropout_prob = 0.1f, c.learn_sigma = 1;
    return c;
}

TEST(dit_tp_shards_add_up_and_carry_the_reduce_flags) {
    for (int v = 0; v < 3; v++) {
        DiTConfig c = small((DiTVariant)v);
        DiT m;
        REQUIRE_OK(dit_describe_parallel(&m, &c, &(DiTParallel){.tp = 2, .tp_rank = 1, .sequence_parallel = 1, .cp = 1}));
        int64_t split = 0, repl = 0;
        for (int i = 0; i < m.table.count; i++) {
            const ParamEntry *e = &m.table.entries[i];
            if (e->tp_split_dim >= 0) split += e->numel;
            else repl += e->numel;
            int heads = strncmp(e->name, "blocks.", 7) == 0 &&
                        (strstr(e->name, "q_norm.weight") || strstr(e->name, "k_norm.weight") ||
                         strstr(e->name, "proj.bias") || strstr(e->name, "fc2.bias"));
            /* design §3: QK-norm and row-parallel biases always over TP; every other replicated
             * weight over TP under SP; split weights never */
            if (e->tp_split_dim >= 0) CHECK_MSG(!(e->reduce_groups & (REDUCE_TP_HEADS | REDUCE_TP_SP)), "%s", e->name);
            else if (heads) CHECK_MSG(e->reduce_groups & REDUCE_TP_HEADS, "%s", e->name);
            else CHECK_MSG(e->reduce_groups & REDUCE_TP_SP, "%s", e->name);
        }
        CHECK(2 * split + repl == m.full_table->total);
        CHECK(m.heads_local == 2 && m.ffn_local == 128);
        dit_destroy(&m);
    }
}

TEST(dit_comm_bytes_follow_the_formulas) {
    DiTConfig c = small(DIT_VARIANT_DFM); /* 3 regions per block (cross-attention) */
    DiT m;
    DiTParallel p = {.tp = 2, .sequence_parallel = 1, .cp = 2};
    p.cpa.type = CP_COMM_P2P;
    REQUIRE_OK(dit_describe_parallel(&m, &c, &p));
    DiTCommBytes b;
    dit_comm_bytes(&m, 1000, 10, 2, &b); /* padded to 1000 (a multiple of TP·CP = 4); r = 500 rows per CP rank */
    double r = 500, D = 64, L = 2, share = 0.5;
    CHECK(b.tp_forward == L * 3 * 2 * share * r * D * 2);
    CHECK(b.tp_backward == L * 3 * 3 * share * r * D * 2);
    double g = 1, hd = 16; /* 2 kv heads over TP 2 */
    CHECK(b.cp_forward == L * 2 * (2 - 1) * r * g * hd * 2);
    CHECK(b.cp_backward == L * (2 * (2 - 1) + 2 * 2) * r * g * hd * 2);
    CHECK(b.output == 3 * 250 * 16 * 2); /* 4 ranks hold 250 rows each of 16 values */
    dit_destroy(&m);
}

TEST(model_info_per_rank) {
    const char *args[] = {"model", "info", "--preset", "dit-7b", "--seq", "74000", "model.tensor_model_parallel_size=2",
                          "model.sequence_parallel=true", "model.context_parallel_size=4"};
    char *out, *err;
    CHECK(run_vfm(args, 9, &out, &err) == 0);
    CHECK_MSG(strstr(out, "per rank at TP2+SP × CP4 p2p × DP1 (8 ranks):") &&
                  strstr(out, "TP regions 12730.4 MB forward + 19095.6 MB backward, CP attention 12730.4 + 29704.2 MB"),
              "%s", out);
    free(out), free(err);
    /* by pipeline stage: 28 blocks over 4 stages; stage 3 sends gradients back only (8192 rows of 4096 bf16
     * values = 67.1 MB), the middle stages both ways; every stage sums the replicated embedders over PP */
    const char *pp[] = {"model", "info", "--preset", "dit-7b", "--seq", "8192", "model.pipeline_model_parallel_size=4"};
    CHECK(run_vfm(pp, 7, &out, &err) == 0);
    CHECK_MSG(strstr(out, "per rank at PP4 × DP1 (4 ranks), by pipeline stage:") &&
                  strstr(out, "stage 0: 7 blocks (0-6), patch embedder") && strstr(out, "stage 3: 7 blocks (21-27), final layer and loss") &&
                  strstr(out, "to the next/previous stage 67.1 + 67.1 MB") && strstr(out, "to the next/previous stage 0.0 + 67.1 MB") &&
                  strstr(out, "PP sum of the replicated embedders"),
              "%s", out);
    free(out), free(err);
    const char *bad[] = {"model", "info", "--preset", "dit-7b", "model.tensor_model_parallel_size=3"};
    CHECK(run_vfm(bad, 5, &out, &err) == 2);
    CHECK_MSG(out[0] == 0 && strstr(err, "model.num_attention_heads (32) is not a multiple of "
                                         "model.tensor_model_parallel_size (3)"), "%s|%s", out, err);
    free(out), free(err);
    /* expert parallelism is the trainer's only: model info and plan say so rather than ignore the key */
    const char *ep_info[] = {"model", "info", "--preset", "ecdit-1b", "--world", "64", "model.expert_model_parallel_size=8"};
    CHECK(run_vfm(ep_info, 7, &out, &err) == 2);
    CHECK_MSG(out[0] == 0 && strstr(err, "model.expert_model_parallel_size"), "%s|%s", out, err);
    free(out), free(err);
    const char *ep_plan[] = {"plan", "--preset", "ecdit-1b", "--seq", "8192", "--gpus", "64", "model.expert_model_parallel_size=8"};
    CHECK(run_vfm(ep_plan, 8, &out, &err) == 2);
    CHECK_MSG(strstr(err, "model.expert_model_parallel_size"), "%s|%s", out, err);
    free(out), free(err);
}

/* `vfm model info` with the sharding keys: the bytes per rank of the resolved strategy (those of
 * dp_memory_bytes, tested against hand-computed numbers in test_sharding.c), ZeRO-1's optimizer state
 * by hand, and contradictory keys refused with exit 2. */
TEST(model_info_bytes_per_rank_by_sharding) {
    Config *cfg;
    const char *ov[] = {"model.preset=dit-7b"};
    REQUIRE_OK(config_load(&cfg, NULL, ov, 1));
    DiTConfig c;
    REQUIRE_OK(dit_config_from(&c, cfg));
    config_free(cfg);
    DiT m;
    dit_describe(&m, &c);
    int first[64];
    REQUIRE(c.layers <= 64);
    PpBlocks b = {first, 0, 0};
    dit_block_layout(&m, first, &b.n_blocks, &b.head_first);
    const struct {
        const char *keys[2];
        DpSharding s;
        const char *name;
    } rows[] = {
        {{"ddp.use_distributed_optimizer=true", NULL}, DP_SHARD_OPTIM, "optim (ZeRO-1)"},
        {{"ddp.data_parallel_sharding_strategy=no_shard", NULL}, DP_SHARD_NO_SHARD, "no_shard (plain DP)"},
        {{"ddp.use_megatron_fsdp=true", "ddp.data_parallel_sharding_strategy=optim_grads"}, DP_SHARD_OPTIM_GRADS,
         "optim_grads (ZeRO-2)"},
        {{"ddp.use_megatron_fsdp=true", NULL}, DP_SHARD_OPTIM_GRADS_PARAMS, "optim_grads_params (ZeRO-3)"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const char *args[8] = {"model", "info", "--preset", "dit-7b", "--world", "8", rows[i].keys[0], rows[i].keys[1]};
        char *out, *err;
        CHECK(run_vfm(args, rows[i].keys[1] ? 8 : 7, &out, &err) == 0);
        DpMemory mem;
        REQUIRE_OK(dp_memory_bytes(rows[i].s, &m.table, &b, 8, DEV_CPU, &mem));
        char want[256];
        snprintf(want, sizeof want, "memory, %s over DP×CP = 8 ranks (f32, this CPU implementation): parameters %.1f MB, "
                 "gradients %.1f MB, optimizer state %.1f MB", rows[i].name, mem.params / 1e6, mem.grads / 1e6,
                 mem.optimizer / 1e6);
        CHECK_MSG(strstr(out, want) != NULL, "row %zu: '%s' not in\n%s", i, want, out);
        if (rows[i].s == DP_SHARD_OPTIM)
            CHECK(mem.optimizer == (m.table.total + 7) / 8 * 8 && mem.params == 4 * m.table.total);
        if (rows[i].s == DP_SHARD_OPTIM_GRADS_PARAMS) CHECK(mem.params < m.table.total); /* under a quarter of ZeRO-1's 4·total */
        free(out), free(err);
    }
    const char *bad[] = {"model", "info", "--preset", "dit-7b", "ddp.data_parallel_sharding_strategy=optim_grads_params"};
    char *out, *err;
    CHECK(run_vfm(bad, 5, &out, &err) == 2);
    CHECK_MSG(out[0] == 0 && strstr(err, "needs ddp.use_megatron_fsdp: true"), "%s|%s", out, err);
    free(out), free(err);
    dit_destroy(&m);
}

/* Expert weights under TP × EP (tp_shard.h): EP rank q holds experts [q·E/EP, (q+1)·E/EP), TP rank
 * t the units [t·F/TP, (t+1)·F/TP) of each (fc1: GELU by rows, SwiGLU gate and value rows each;
 * fc2 by columns). Over every (TP, EP) rank every element of the full tensor is held exactly once,
 * at the place the formula gives. */
static void check_expert_shards(int up) {
    enum { E = 4, F = 6, D = 3, TP = 2, EP = 2 };
    ParamTable t;
    param_table_init(&t);
    int fc1 = param_table_add(&t, INIT_ZERO, 0, 2, (int64_t[]){E * up * F, D}, REDUCE_EXPERT, 0, "fc1");
    int fc2 = param_table_add(&t, INIT_ZERO, 0, 2, (int64_t[]){E * D, F}, REDUCE_EXPERT, 1, "fc2");
    REQUIRE(fc1 >= 0 && fc2 >= 0);
    t.entries[fc1].tp_parts = E * up;
    float *full = malloc((size_t)t.total * sizeof(float)), *local = malloc((size_t)t.total * sizeof(float));
    int *seen = calloc((size_t)t.total, sizeof(int));
    for (int64_t i = 0; i < t.total; i++) full[i] = (float)i;
    for (int tr = 0; tr < TP; tr++)
        for (int er = 0; er < EP; er++) {
            TpShardMap m;
            REQUIRE_OK(tp_shard_map_init_ep(&m, &t, TP, tr, EP, er));
            const ParamEntry *l1 = &m.local.entries[fc1], *l2 = &m.local.entries[fc2];
            CHECK(l1->shape[0] == E / EP * up * F / TP && l1->shape[1] == D);
            CHECK(l2->shape[0] == E / EP * D && l2->shape[1] == F / TP);
            REQUIRE_OK(tp_shard_extract(&m, local, full));
            for (int le = 0; le < E / EP; le++) {
                int e = er * (E / EP) + le;
                for (int p = 0; p < up; p++) /* gate rows, then value rows (SwiGLU) */
                    for (int u = 0; u < F / TP; u++)
                        for (int d = 0; d < D; d++) {
                            int64_t lr = ((int64_t)le * up + p) * (F / TP) + u, fr = ((int64_t)e * up + p) * F + tr * (F / TP) + u;
                            int64_t at = t.entries[fc1].offset + fr * D + d;
                            CHECK(local[l1->offset + lr * D + d] == full[at]);
                            seen[at]++;
                        }
                for (int d = 0; d < D; d++)
                    for (int u = 0; u < F / TP; u++) {
                        int64_t at = t.entries[fc2].offset + ((int64_t)e * D + d) * F + tr * (F / TP) + u;
                        CHECK(local[l2->offset + ((int64_t)le * D + d) * (F / TP) + u] == full[at]);
                        seen[at]++;
                    }
            }
            tp_shard_map_free(&m);
        }
    for (int64_t i = 0; i < t.total; i++) CHECK(seen[i] == 1);
    free(full), free(local), free(seen);
    param_table_free(&t);
}

TEST(moe_expert_shards_under_tp_and_ep) {
    check_expert_shards(1);
    check_expert_shards(2);
}
