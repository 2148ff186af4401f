/* A layout's name and its `vfm train` overrides (plan.h). */
#include <stdio.h>

#include "plan/plan.h"

static const char *const ZERO[] = {"plain DP", "ZeRO-1", "ZeRO-2", "ZeRO-3"};

void plan_layout_name(const PlanLayout *pl, char *out, size_t n) {
    char l[160], rc[64];
    train_layout_describe(&pl->l, pl->dp, l, sizeof l);
    recompute_describe(&pl->rc, rc, sizeof rc);
    snprintf(out, n, "%s, %s%s%s", l, ZERO[pl->sharding], pl->rc.granularity == RECOMPUTE_NONE ? "" : ", recompute ",
             pl->rc.granularity == RECOMPUTE_NONE ? "" : rc);
}

static void put(PlanOverride *o, int *k, const char *key, const char *fmt, long long v, const char *s) {
    snprintf(o[*k].key, sizeof o[*k].key, "%s", key);
    if (s) snprintf(o[*k].value, sizeof o[*k].value, "%s", s);
    else snprintf(o[*k].value, sizeof o[*k].value, fmt, v);
    (*k)++;
}

int plan_layout_overrides(const PlanLayout *pl, PlanOverride *o) {
    int k = 0;
    const TrainLayout *l = &pl->l;
    put(o, &k, "model.tensor_model_parallel_size", "%lld", l->tp, NULL);
    put(o, &k, "model.sequence_parallel", NULL, 0, l->sp ? "true" : "false");
    put(o, &k, "model.context_parallel_size", "%lld", l->cp, NULL);
    if (l->cp > 1) put(o, &k, "model.cp_comm_type", NULL, 0, cp_comm_type_name(l->cp_type));
    if (l->cp > 1 && l->cp_type == CP_COMM_A2A_P2P) {
        char sizes[32];
        snprintf(sizes, sizeof sizes, "[%d,%d]", l->a2a_size, l->cp / l->a2a_size);
        put(o, &k, "model.hierarchical_context_parallel_sizes", NULL, 0, sizes);
    }
    put(o, &k, "model.pipeline_model_parallel_size", "%lld", l->pp, NULL);
    if (l->pp > 1) put(o, &k, "model.virtual_pipeline_model_parallel_size", "%lld", l->vp > 1 ? l->vp : 1, NULL);
    int fsdp = pl->sharding >= DP_SHARD_OPTIM_GRADS;
    put(o, &k, "ddp.use_distributed_optimizer", NULL, 0, pl->sharding == DP_SHARD_NO_SHARD ? "false" : "true");
    put(o, &k, "ddp.use_megatron_fsdp", NULL, 0, fsdp ? "true" : "false");
    put(o, &k, "ddp.data_parallel_sharding_strategy", NULL, 0, dp_sharding_name(pl->sharding));
    put(o, &k, "ddp.overlap_grad_reduce", NULL, 0, pl->overlap_grad_reduce ? "true" : "false");
    if (pl->rc.granularity != RECOMPUTE_NONE) {
        put(o, &k, "model.recompute_granularity", NULL, 0, pl->rc.granularity == RECOMPUTE_FULL ? "full" : "selective");
        if (pl->rc.granularity == RECOMPUTE_FULL) {
            put(o, &k, "model.recompute_method", NULL, 0, pl->rc.method == RECOMPUTE_BLOCK ? "block" : "uniform");
            put(o, &k, "model.recompute_num_layers", "%lld", pl->rc.num_layers, NULL);
        }
    }
    put(o, &k, "train.global_batch_size", "%lld", (long long)pl->microbatches * pl->dp, NULL);
    return k;
}
