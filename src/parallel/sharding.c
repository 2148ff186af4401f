/* The data-parallel sharding strategy: key resolution and bytes per rank (see sharding.h). */
#include "sharding.h"

#include <string.h>

#include "parallel/fsdp_layout.h"

const char *dp_sharding_name(DpSharding s) {
    switch (s) {
    case DP_SHARD_NO_SHARD: return "no_shard";
    case DP_SHARD_OPTIM: return "optim";
    case DP_SHARD_OPTIM_GRADS: return "optim_grads";
    default: return "optim_grads_params";
    }
}

static int parse_strategy(const char *v, DpSharding *out) {
    static const struct {
        const char *name;
        DpSharding s;
    } names[] = {{"no_shard", DP_SHARD_NO_SHARD},
                 {"optim", DP_SHARD_OPTIM},
                 {"optim_grads", DP_SHARD_OPTIM_GRADS},
                 {"optim_grads_params", DP_SHARD_OPTIM_GRADS_PARAMS},
                 {"MODEL_AND_OPTIMIZER_STATES", DP_SHARD_OPTIM_GRADS_PARAMS}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(v, names[i].name) == 0) {
            *out = names[i].s;
            return 1;
        }
    return 0;
}

vfm_status dp_sharding_resolve(const DpShardingKeys *k, DpSharding *out) {
    DpSharding s;
    const char *v = k->strategy;
    if (v && !parse_strategy(v, &s))
        return vfm_fail(VFM_ERR_USAGE, "ddp.data_parallel_sharding_strategy: '%s' is not one of no_shard, optim, optim_grads, "
                        "optim_grads_params (or MODEL_AND_OPTIMIZER_STATES)", v);
    int fsdp = k->use_megatron_fsdp, distopt = k->use_distributed_optimizer, explicit_distopt = k->distributed_optimizer_set;
    if (!v) s = fsdp ? DP_SHARD_OPTIM_GRADS_PARAMS : distopt ? DP_SHARD_OPTIM : DP_SHARD_NO_SHARD;
    if (!fsdp && s >= DP_SHARD_OPTIM_GRADS)
        return vfm_fail(VFM_ERR_USAGE, "ddp.data_parallel_sharding_strategy: %s needs ddp.use_megatron_fsdp: true%s (without "
                        "FSDP only no_shard and optim apply)", v, k->use_megatron_fsdp_set ? ", which is set to false" : "");
    if (s == DP_SHARD_NO_SHARD && distopt && explicit_distopt)
        return vfm_fail(VFM_ERR_USAGE, "ddp.data_parallel_sharding_strategy: no_shard contradicts "
                        "ddp.use_distributed_optimizer: true (which shards the optimizer state); drop one of them");
    if (s == DP_SHARD_OPTIM && !distopt && explicit_distopt)
        return vfm_fail(VFM_ERR_USAGE, "ddp.data_parallel_sharding_strategy: optim (the distributed optimizer) contradicts "
                        "ddp.use_distributed_optimizer: false; drop one of them");
    if (s >= DP_SHARD_OPTIM_GRADS && !distopt && explicit_distopt)
        return vfm_fail(VFM_ERR_USAGE, "ddp.use_megatron_fsdp: true with ddp.data_parallel_sharding_strategy: %s shards the "
                        "optimizer state: it contradicts ddp.use_distributed_optimizer: false (set it to true or leave it "
                        "out)", dp_sharding_name(s));
    if (s >= DP_SHARD_OPTIM_GRADS && k->pipeline_stages > 1)
        return vfm_fail(VFM_ERR_USAGE, "ddp.data_parallel_sharding_strategy: %s%s with model.pipeline_model_parallel_size "
                        "= %d is not supported: use optim (ZeRO-1) with pipeline parallelism", dp_sharding_name(s),
                        k->strategy ? "" : " (from ddp.use_megatron_fsdp: true)", k->pipeline_stages);
    *out = s;
    return VFM_OK;
}

vfm_status dp_sharding_from_config(const Config *cfg, DpSharding *out) {
    DpShardingKeys k = {
        .use_megatron_fsdp = cfg_bool(cfg, "ddp.use_megatron_fsdp"),
        .use_megatron_fsdp_set = cfg_is_set(cfg, "ddp.use_megatron_fsdp"),
        .strategy = cfg_str(cfg, "ddp.data_parallel_sharding_strategy")[0] ? cfg_str(cfg, "ddp.data_parallel_sharding_strategy")
                                                                              : NULL, /* null: not given */
        .use_distributed_optimizer = cfg_bool(cfg, "ddp.use_distributed_optimizer"),
        .distributed_optimizer_set = cfg_is_set(cfg, "ddp.use_distributed_optimizer"),
        .pipeline_stages = (int)cfg_int(cfg, "model.pipeline_model_parallel_size"),
    };
    return dp_sharding_resolve(&k, out);
}

vfm_status dp_memory_bytes(DpSharding s, const ParamTable *t, const PpBlocks *blocks, int n, Device device, DpMemory *out) {
    memset(out, 0, sizeof *out);
    if (n < 1) return vfm_fail(VFM_ERR_INTERNAL, "memory: %d data-parallel ranks", n);
    int gpu = device == DEV_CUDA;
    int64_t total = t->total, S = (total + n - 1) / n;
    int64_t p = gpu ? 2 : 4, g = 4, w = gpu || s == DP_SHARD_OPTIM_GRADS_PARAMS ? 4 : 0;
    if (s == DP_SHARD_NO_SHARD || s == DP_SHARD_OPTIM) {
        out->params = total * p;
        out->grads = total * g;
        out->optimizer = (s == DP_SHARD_NO_SHARD ? total : S) * (8 + w);
        return VFM_OK;
    }
    FsdpLayout l;
    VFM_TRY(fsdp_layout_init(&l, t, blocks, n, s == DP_SHARD_OPTIM_GRADS_PARAMS));
    out->grads = (l.slots + S) * g;
    out->optimizer = S * (8 + w);
    out->transient = 2 * l.max_unit_padded * g;
    if (s == DP_SHARD_OPTIM_GRADS) {
        out->params = total * p;
    } else {
        int64_t held = l.slots; /* fsdp.c's param_slots: a piece of every unit */
        for (int u = 0; u < l.n_units; u++) /* and the units that stay whole, padded to n pieces */
            if (!l.units[u].sharded_params) held += l.units[u].shard * n;
        out->params = held * p;
        out->transient += 2 * l.max_block_padded * p;
    }
    fsdp_layout_free(&l);
    return VFM_OK;
}
