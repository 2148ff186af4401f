/* How data parallelism shards the training state (Megatron's ddp.data_parallel_sharding_strategy):
 *   no_shard            plain DP: every rank holds parameters, gradients and optimizer state;
 *   optim               ZeRO-1, Megatron's distributed optimizer: the optimizer state is sharded
 *                       (what ddp.use_distributed_optimizer selects; dp.h);
 *   optim_grads         ZeRO-2: gradients too (fsdp.h);
 *   optim_grads_params  ZeRO-3 / FSDP: parameters too (fsdp.h); the seeds' log spelling
 *                       MODEL_AND_OPTIMIZER_STATES means the same.
 * The key pair resolution, and the bytes per rank each strategy keeps (what `vfm model info`
 * prints). */
#ifndef VFM_SHARDING_H
#define VFM_SHARDING_H

#include <stdint.h>

#include "core/config.h"
#include "core/tensor.h"
#include "model/params.h"
#include "parallel/pp_stage.h"

typedef enum {
    DP_SHARD_NO_SHARD,
    DP_SHARD_OPTIM,
    DP_SHARD_OPTIM_GRADS,
    DP_SHARD_OPTIM_GRADS_PARAMS,
} DpSharding;

/* Megatron's value ("no_shard", "optim", "optim_grads", "optim_grads_params"). */
const char *dp_sharding_name(DpSharding s);

/* The keys as given: strategy NULL when ddp.data_parallel_sharding_strategy is not set, *_set
 * when the boolean was set explicitly (a default never contradicts). */
typedef struct DpShardingKeys {
    int use_megatron_fsdp, use_megatron_fsdp_set;       /* ddp.use_megatron_fsdp */
    const char *strategy;                               /* ddp.data_parallel_sharding_strategy */
    int use_distributed_optimizer, distributed_optimizer_set; /* ddp.use_distributed_optimizer */
    int pipeline_stages;                                /* model.pipeline_model_parallel_size */
} DpShardingKeys;

/* Resolution (VFM_ERR_USAGE with one line naming the keys for the contradictory pairs):
 *   FSDP off: no strategy → optim if ddp.use_distributed_optimizer else no_shard; no_shard and optim
 *     must agree with an explicit use_distributed_optimizer; optim_grads / optim_grads_params need
 *     ddp.use_megatron_fsdp: true (Megatron reads the strategy only under its FSDP).
 *   FSDP on: no strategy → optim_grads_params (Megatron FSDP's default); a sharding strategy with
 *     use_distributed_optimizer explicitly false, or no_shard with it explicitly true, is refused;
 *     optim_grads and optim_grads_params with pipeline parallelism are refused (not supported:
 *     with PP use optim, as NeMo's recipes do). */
vfm_status dp_sharding_resolve(const DpShardingKeys *k, DpSharding *out);
/* The same from a loaded config. */
vfm_status dp_sharding_from_config(const Config *cfg, DpSharding *out);

/* Bytes per rank of the training state (the most any rank of the DP×CP group holds). */
typedef struct DpMemory {
    int64_t params;     /* the parameters forward reads (ZeRO-3: the pieces and the unsharded units) */
    int64_t grads;      /* gradients (ZeRO-2/3: the reduced pieces and the flat shard) */
    int64_t optimizer;  /* Adam m, v and the fp32 master when it is a buffer of its own */
    int64_t transient;  /* at most alive at once besides: gathered units and unit gradient buffers */
} DpMemory;

/* t: the rank's table (TP-local, its pipeline stage); blocks as in pp_stage.h; n = |DP×CP|.
 * Element sizes: CPU fp32 parameters, gradients and moments (the parameters are the master,
 * except under ZeRO-3, whose master is the flat shard); CUDA bf16 parameters, fp32 gradients, fp32
 * master and moments (the 18 bytes per parameter of Megatron's mixed precision, unsharded).
 * With S = ⌈total/n⌉, S_u = ⌈numel_u/n⌉, p/g/w the parameter, gradient and master sizes:
 *   no_shard           params total·p   grads total·g        optimizer total·(8 + w)
 *   optim              params total·p   grads total·g        optimizer S·(8 + w)
 *   optim_grads        params total·p   grads (Σ S_u + S)·g  optimizer S·(8 + w)
 *                      transient 2·max(n·S_u)·g (the unit computing and the one reducing)
 *   optim_grads_params params (Σ S_u + the whole units, padded to n·S_u)·p (fsdp.c keeps a piece of
 *                      every unit and the embedder and final-layer units whole), grads and optimizer as above
 *                      (w = 4 on the CPU too), transient 2·max_blocks(n·S_u)·p + 2·max(n·S_u)·g. */
vfm_status dp_memory_bytes(DpSharding s, const ParamTable *t, const PpBlocks *blocks, int n, Device device,
                           DpMemory *out);

#endif
