/* The data-parallel sharding strategy (a table of ddp key combinations: the strategy each selects
 * or the one line that refuses it), the bytes per rank of every strategy on a small table against
 * hand-computed numbers, and Megatron's recomputation keys (validation table, per-block plans,
 * the bound from the pipeline chunks), and what the trainer refuses until FSDP and recomputation are
 * wired in. */
#include <string.h>

#include "core/config.h"
#include "parallel/recompute.h"
#include "parallel/sharding.h"
#include "train/train_setup.h"
#include "test.h"

TEST(sharding_key_table) {
    const struct {
        int fsdp, fsdp_set;
        const char *strategy;
        int distopt, distopt_set, pp;
        vfm_status status;
        DpSharding want;
        const char *message;
    } rows[] = {
        {0, 0, NULL, 1, 0, 1, VFM_OK, DP_SHARD_OPTIM, NULL},
        {0, 0, NULL, 0, 1, 1, VFM_OK, DP_SHARD_NO_SHARD, NULL},
        {0, 0, "no_shard", 1, 0, 1, VFM_OK, DP_SHARD_NO_SHARD, NULL}, /* a default never contradicts */
        {0, 0, "no_shard", 1, 1, 1, VFM_ERR_USAGE, 0, "no_shard contradicts ddp.use_distributed_optimizer: true"},
        {0, 0, "optim", 0, 1, 1, VFM_ERR_USAGE, 0, "optim (the distributed optimizer) contradicts ddp.use_distributed_optimizer: false"},
        {0, 0, "optim", 1, 0, 1, VFM_OK, DP_SHARD_OPTIM, NULL},
        {0, 0, "optim_grads", 1, 0, 1, VFM_ERR_USAGE, 0, "optim_grads needs ddp.use_megatron_fsdp: true"},
        {0, 1, "optim_grads_params", 1, 0, 1, VFM_ERR_USAGE, 0, "needs ddp.use_megatron_fsdp: true, which is set to false"},
        {1, 1, NULL, 1, 0, 1, VFM_OK, DP_SHARD_OPTIM_GRADS_PARAMS, NULL},
        {1, 1, "optim_grads", 1, 1, 1, VFM_OK, DP_SHARD_OPTIM_GRADS, NULL},
        {1, 1, "MODEL_AND_OPTIMIZER_STATES", 1, 0, 1, VFM_OK, DP_SHARD_OPTIM_GRADS_PARAMS, NULL},
        {1, 1, "optim_grads_params", 0, 1, 1, VFM_ERR_USAGE, 0, "optim_grads_params shards the optimizer state: it contradicts ddp.use_distributed_optimizer: false"},
        {1, 1, NULL, 0, 1, 1, VFM_ERR_USAGE, 0, "contradicts ddp.use_distributed_optimizer: false"},
        {1, 1, "no_shard", 0, 1, 1, VFM_OK, DP_SHARD_NO_SHARD, NULL},
        {1, 1, "no_shard", 1, 1, 1, VFM_ERR_USAGE, 0, "no_shard contradicts"},
        {1, 1, "optim", 1, 0, 1, VFM_OK, DP_SHARD_OPTIM, NULL},
        {1, 1, "optim_grads_params", 1, 0, 2, VFM_ERR_USAGE, 0, "optim_grads_params with model.pipeline_model_parallel_size = 2 is not supported"},
        {1, 1, "optim_grads", 1, 0, 4, VFM_ERR_USAGE, 0, "use optim (ZeRO-1) with pipeline parallelism"},
        {1, 1, "optim", 1, 0, 4, VFM_OK, DP_SHARD_OPTIM, NULL},
        {0, 0, "zero3", 1, 0, 1, VFM_ERR_USAGE, 0, "'zero3' is not one of no_shard, optim, optim_grads, optim_grads_params"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        DpShardingKeys k = {rows[i].fsdp, rows[i].fsdp_set, rows[i].strategy, rows[i].distopt, rows[i].distopt_set, rows[i].pp};
        DpSharding got = (DpSharding)-1;
        vfm_status s = dp_sharding_resolve(&k, &got);
        CHECK_MSG(s == rows[i].status, "row %zu: status %s (%s)", i, vfm_status_name(s), s ? vfm_last_error() : "");
        if (s == VFM_OK && rows[i].status == VFM_OK)
            CHECK_MSG(got == rows[i].want, "row %zu: %s, want %s", i, dp_sharding_name(got), dp_sharding_name(rows[i].want));
        if (rows[i].message)
            CHECK_MSG(strstr(vfm_last_error(), rows[i].message) != NULL, "row %zu: '%s' lacks '%s'", i, vfm_last_error(),
                      rows[i].message);
    }
}

TEST(sharding_from_config) {
    const struct {
        const char *yaml;
        vfm_status status;
        DpSharding want;
    } rows[] = {
        {"ddp:\n  use_distributed_optimizer: false\n", VFM_OK, DP_SHARD_NO_SHARD},
        {"ddp:\n  use_megatron_fsdp: true\n", VFM_OK, DP_SHARD_OPTIM_GRADS_PARAMS},
        {"ddp:\n  use_megatron_fsdp: true\n  data_parallel_sharding_strategy: MODEL_AND_OPTIMIZER_STATES\n", VFM_OK,
         DP_SHARD_OPTIM_GRADS_PARAMS},
        {"ddp:\n  data_parallel_sharding_strategy: null\n", VFM_OK, DP_SHARD_OPTIM},
        {"ddp:\n  use_megatron_fsdp: true\n  use_distributed_optimizer: false\n", VFM_ERR_USAGE, 0},
        {"ddp:\n  use_megatron_fsdp: true\n  data_parallel_sharding_strategy: optim_grads\nmodel:\n  "
         "pipeline_model_parallel_size: 2\n", VFM_ERR_USAGE, 0},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        Config *cfg = NULL;
        REQUIRE_OK(config_from_yaml_string(&cfg, rows[i].yaml, "test"));
        DpSharding got;
        vfm_status s = dp_sharding_from_config(cfg, &got);
        CHECK_MSG(s == rows[i].status, "row %zu: %s", i, vfm_last_error());
        if (s == VFM_OK && rows[i].status == VFM_OK) CHECK_MSG(got == rows[i].want, "row %zu: %s", i, dp_sharding_name(got));
        config_free(cfg);
    }
    /* the registry refuses other spellings before any resolution */
    Config *cfg = NULL;
    CHECK(config_from_yaml_string(&cfg, "ddp:\n  data_parallel_sharding_strategy: full_shard\n", "test") == VFM_ERR_USAGE);
    CHECK(strstr(vfm_last_error(), "data_parallel_sharding_strategy") != NULL);
    config_free(cfg);
}

/* 46 elements: an embedder unit of 17, two blocks of 11, a final layer of 7; n = 4:
 * S = 12, pieces 5 + 3 + 3 + 2 = 13, the largest padded unit 20, the largest padded block 12; ZeRO-3
 * keeps the 13 pieces and the embedder and final-layer units whole, padded: 20 + 8. */
TEST(sharding_bytes_per_rank) {
    ParamTable t;
    param_table_init(&t);
    param_table_add(&t, INIT_ZERO, 0, 2, (int64_t[]){4, 3}, 0, -1, "a.weight");
    param_table_add(&t, INIT_ZERO, 0, 1, (int64_t[]){5}, 0, -1, "a.bias");
    int first[2];
    for (int l = 0; l < 2; l++) {
        first[l] = param_table_add(&t, INIT_ZERO, 0, 2, (int64_t[]){3, 3}, 0, -1, "blocks.%d.weight", l);
        param_table_add(&t, INIT_ZERO, 0, 1, (int64_t[]){2}, 0, -1, "blocks.%d.bias", l);
    }
    int head = param_table_add(&t, INIT_ZERO, 0, 1, (int64_t[]){7}, 0, -1, "final.weight");
    REQUIRE(t.total == 46);
    PpBlocks b = {first, 2, head};
    const struct {
        DpSharding s;
        Device dev;
        int64_t params, grads, optimizer, transient;
    } rows[] = {
        {DP_SHARD_NO_SHARD, DEV_CPU, 184, 184, 368, 0},
        {DP_SHARD_OPTIM, DEV_CPU, 184, 184, 96, 0},
        {DP_SHARD_OPTIM_GRADS, DEV_CPU, 184, 100, 96, 160},
        {DP_SHARD_OPTIM_GRADS_PARAMS, DEV_CPU, 164, 100, 144, 256},
        {DP_SHARD_NO_SHARD, DEV_CUDA, 92, 184, 552, 0}, /* 18 bytes per parameter */
        {DP_SHARD_OPTIM, DEV_CUDA, 92, 184, 144, 0},
        {DP_SHARD_OPTIM_GRADS, DEV_CUDA, 92, 100, 144, 160},
        {DP_SHARD_OPTIM_GRADS_PARAMS, DEV_CUDA, 82, 100, 144, 208},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        DpMemory m;
        REQUIRE_OK(dp_memory_bytes(rows[i].s, &t, &b, 4, rows[i].dev, &m));
        CHECK_MSG(m.params == rows[i].params && m.grads == rows[i].grads && m.optimizer == rows[i].optimizer &&
                      m.transient == rows[i].transient,
                  "%s on %s: params %lld grads %lld optimizer %lld transient %lld", dp_sharding_name(rows[i].s),
                  device_name(rows[i].dev), (long long)m.params, (long long)m.grads, (long long)m.optimizer,
                  (long long)m.transient);
    }
    /* one rank: nothing is sharded, whatever the strategy (ZeRO-1 = plain) */
    DpMemory one, plain;
    REQUIRE_OK(dp_memory_bytes(DP_SHARD_OPTIM, &t, &b, 1, DEV_CPU, &one));
    REQUIRE_OK(dp_memory_bytes(DP_SHARD_NO_SHARD, &t, &b, 1, DEV_CPU, &plain));
    CHECK(one.optimizer == plain.optimizer && one.params == plain.params);
    param_table_free(&t);
}

TEST(recompute_key_table) {
    const struct {
        const char *g, *m;
        int n, max;
        vfm_status status;
        RecomputeGranularity gran;
        RecomputeMethod method;
        const char *message;
    } rows[] = {
        {"", "", 0, 4, VFM_OK, RECOMPUTE_NONE, RECOMPUTE_METHOD_NONE, NULL},
        {"", "uniform", 0, 4, VFM_ERR_USAGE, 0, 0, "model.recompute_method is set but model.recompute_granularity is not"},
        {"", "", 2, 4, VFM_ERR_USAGE, 0, 0, "model.recompute_num_layers is set"},
        {"full", "", 1, 4, VFM_ERR_USAGE, 0, 0, "full needs model.recompute_method: uniform or block"},
        {"full", "uniform", 0, 4, VFM_ERR_USAGE, 0, 0, "must be between 1 and the blocks of a pipeline chunk (4)"},
        {"full", "block", 5, 4, VFM_ERR_USAGE, 0, 0, "model.recompute_num_layers = 5"},
        {"full", "uniform", 2, 4, VFM_OK, RECOMPUTE_FULL, RECOMPUTE_UNIFORM, NULL},
        {"full", "block", 4, 4, VFM_OK, RECOMPUTE_FULL, RECOMPUTE_BLOCK, NULL},
        {"selective", "", 0, 4, VFM_OK, RECOMPUTE_SELECTIVE, RECOMPUTE_METHOD_NONE, NULL},
        {"selective", "block", 0, 4, VFM_ERR_USAGE, 0, 0, "applies to model.recompute_granularity: full only"},
        {"selective", "", 1, 4, VFM_ERR_USAGE, 0, 0, "must be unset (0) with model.recompute_granularity: selective"},
        {"partial", "", 0, 4, VFM_ERR_USAGE, 0, 0, "'partial' is not one of full, selective"},
        {"full", "layer", 1, 4, VFM_ERR_USAGE, 0, 0, "'layer' is not one of uniform, block"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        RecomputeConfig c;
        vfm_status s = recompute_resolve(rows[i].g, rows[i].m, rows[i].n, rows[i].max, &c);
        CHECK_MSG(s == rows[i].status, "row %zu: %s", i, s ? vfm_last_error() : "ok");
        if (s == VFM_OK && rows[i].status == VFM_OK)
            CHECK_MSG(c.granularity == rows[i].gran && c.method == rows[i].method && c.num_layers == rows[i].n, "row %zu", i);
        if (rows[i].message)
            CHECK_MSG(strstr(vfm_last_error(), rows[i].message) != NULL, "row %zu: '%s' lacks '%s'", i, vfm_last_error(),
                      rows[i].message);
    }
}

static void plan_text(const RecomputeConfig *c, int n, char *out, size_t size) {
    RecomputeBlock p[16];
    recompute_plan(c, n, p);
    size_t at = 0;
    out[0] = 0;
    for (int i = 0; i < n && at < size; i++) {
        char m = p[i].mode == RECOMPUTE_FULL ? 'F' : p[i].mode == RECOMPUTE_SELECTIVE ? 'S' : '-';
        at += (size_t)snprintf(out + at, size - at, "%s%c[%d,%d)", i ? " " : "", m, p[i].group_first, p[i].group_end);
    }
}

TEST(recompute_plans_follow_megatron) {
    char got[256];
    /* uniform: consecutive groups of n, each rerun from its first block's input; the last shorter */
    RecomputeConfig uni = {RECOMPUTE_FULL, RECOMPUTE_UNIFORM, 2};
    plan_text(&uni, 5, got, sizeof got);
    CHECK_MSG(strcmp(got, "F[0,2) F[0,2) F[2,4) F[2,4) F[4,5)") == 0, "%s", got);
    /* block: the first n blocks of the chunk, one at a time; the rest keep their activations */
    RecomputeConfig blk = {RECOMPUTE_FULL, RECOMPUTE_BLOCK, 2};
    plan_text(&blk, 5, got, sizeof got);
    CHECK_MSG(strcmp(got, "F[0,1) F[1,2) -[2,3) -[3,4) -[4,5)") == 0, "%s", got);
    /* a chunk smaller than n (uneven pipeline split): every block of it */
    blk.num_layers = 3;
    plan_text(&blk, 2, got, sizeof got);
    CHECK_MSG(strcmp(got, "F[0,1) F[1,2)") == 0, "%s", got);
    uni.num_layers = 3;
    plan_text(&uni, 2, got, sizeof got);
    CHECK_MSG(strcmp(got, "F[0,2) F[0,2)") == 0, "%s", got);
    RecomputeConfig sel = {RECOMPUTE_SELECTIVE, RECOMPUTE_METHOD_NONE, 0}, none = {RECOMPUTE_NONE, RECOMPUTE_METHOD_NONE, 0};
    plan_text(&sel, 3, got, sizeof got);
    CHECK_MSG(strcmp(got, "S[0,1) S[1,2) S[2,3)") == 0, "%s", got);
    plan_text(&none, 3, got, sizeof got);
    CHECK_MSG(strcmp(got, "-[0,1) -[1,2) -[2,3)") == 0, "%s", got);
}

TEST(recompute_from_config_counts_chunks) {
    /* 12 blocks over PP 2 × VP 2: chunks of 3, so at most 3 per chunk; 13 blocks: the largest is 4 */
    const char *yaml = "model:\n  num_layers: %d\n  pipeline_model_parallel_size: 2\n  "
                       "virtual_pipeline_model_parallel_size: 2\n  recompute_granularity: full\n  recompute_method: block\n"
                       "  recompute_num_layers: %d\n";
    const int rows[][3] = {{12, 3, VFM_OK}, {12, 4, VFM_ERR_USAGE}, {13, 4, VFM_OK}, {13, 5, VFM_ERR_USAGE}};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        char text[512];
        snprintf(text, sizeof text, yaml, rows[i][0], rows[i][1]);
        Config *cfg = NULL;
        REQUIRE_OK(config_from_yaml_string(&cfg, text, "test"));
        RecomputeConfig c;
        vfm_status s = recompute_from_config(cfg, &c);
        CHECK_MSG(s == (vfm_status)rows[i][2], "L=%d n=%d: %s", rows[i][0], rows[i][1], s ? vfm_last_error() : "ok");
        config_free(cfg);
    }
    Config *cfg = NULL;
    REQUIRE_OK(config_from_yaml_string(&cfg, "model:\n  recompute_granularity: selective\n", "test"));
    RecomputeConfig c;
    CHECK_OK(recompute_from_config(cfg, &c));
    CHECK(c.granularity == RECOMPUTE_SELECTIVE);
    config_free(cfg);
}

TEST(trainer_refuses_what_is_not_wired_in) {
    const struct {
        const char *yaml;
        vfm_status status;
        const char *message;
    } rows[] = {
        /* ZeRO-2/3 are wired in (tests/mpi/train_fsdp.sh); only contradictions are refused */
        {"ddp:\n  use_megatron_fsdp: true\n", VFM_OK, NULL},
        {"ddp:\n  use_megatron_fsdp: true\n  data_parallel_sharding_strategy: optim_grads\n", VFM_OK, NULL},
        {"ddp:\n  data_parallel_sharding_strategy: optim_grads\n", VFM_ERR_USAGE, "ddp.use_megatron_fsdp"},
        {"ddp:\n  use_megatron_fsdp: true\n  use_distributed_optimizer: false\n", VFM_ERR_USAGE,
         "ddp.use_distributed_optimizer"},
        {"ddp:\n  data_parallel_sharding_strategy: no_shard\n", VFM_OK, NULL},
        {"ddp:\n  data_parallel_sharding_strategy: no_shard\n  use_distributed_optimizer: false\n", VFM_OK, NULL},
        {"ddp:\n  data_parallel_sharding_strategy: optim\n", VFM_OK, NULL},
        {"ddp:\n  use_megatron_fsdp: true\n  data_parallel_sharding_strategy: optim\n", VFM_OK, NULL},
        {"ddp:\n  use_distributed_optimizer: true\n  data_parallel_sharding_strategy: no_shard\n", VFM_ERR_USAGE, "contradicts"},
        {"model:\n  recompute_granularity: selective\n", VFM_OK, NULL},
        {"model:\n  recompute_granularity: full\n  recompute_method: uniform\n  recompute_num_layers: 2\n", VFM_OK, NULL},
        {"model:\n  recompute_granularity: full\n", VFM_ERR_USAGE, "needs model.recompute_method"},
        {"model:\n  recompute_method: block\n", VFM_ERR_USAGE, "model.recompute_granularity is not"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        Config *cfg = NULL;
        char yaml[512]; /* the whole set-up of a run: on the mock set */
        snprintf(yaml, sizeof yaml, "dataset:\n  mock: true\n%s", rows[i].yaml);
        REQUIRE_OK(config_from_yaml_string(&cfg, yaml, "test"));
        TrainSetup su;
        vfm_status s = train_setup_from_config(&su, cfg, 0);
        CHECK_MSG(s == rows[i].status, "row %zu: %s", i, s ? vfm_last_error() : "ok");
        if (rows[i].message)
            CHECK_MSG(strstr(vfm_last_error(), rows[i].message) != NULL, "row %zu: '%s' lacks '%s'", i, vfm_last_error(),
                      rows[i].message);
        config_free(cfg);
    }
}
