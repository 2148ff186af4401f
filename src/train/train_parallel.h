/* The parallel layout of a training job (design §4, docs/parallel.md): the layout keys and their
 * checks (one line, exit 2, before any work), the process groups of this rank and their comms,
 * what the DiT needs to split itself (DiTParallel), and the checkpoint files that do not depend
 * on the layout: model.safetensors and ema.safetensors of full tensors, optim.safetensors of full
 * Adam moments, every rank writing and reading only its own slices (parallel/ckpt_shard.h). */
#ifndef VFM_TRAIN_PARALLEL_H
#define VFM_TRAIN_PARALLEL_H

#include "model/dit.h"
#include "optim/optimizer.h"
#include "parallel/comm.h"
#include "parallel/dp.h"
#include "parallel/fsdp.h"
#include "parallel/groups.h"
#include "parallel/launch.h"
#include "parallel/recompute.h"
#include "parallel/sharding.h"

typedef struct Config Config;

/* The layout keys, read and checked on their own. */
typedef struct TrainLayout {
    int tp, pp, cp;        /* model.{tensor,pipeline,context}_parallel_size */
    int sp;                /* model.sequence_parallel (0 when TP = 1: nothing to split) */
    CpCommType cp_type;    /* model.cp_comm_type */
    int a2a_size;          /* a2a+p2p: model.hierarchical_context_parallel_sizes[0] */
    int vp;                /* model.virtual_pipeline_model_parallel_size (0 or 1: one chunk per stage) */
    int hybrid;            /* ST-DiT's model.cp_comm_type hybrid; cp_type is then its full attention's */
    int ep;                /* model.expert_model_parallel_size: EP within DP×CP (1: none) */
} TrainLayout;

/* ST-DiT's CP keys (train_stdit.c): model.cp_comm_type (hybrid by default for model.variant stdit,
 * and only there) into l->cp_type and l->hybrid, the full attention's model.stdit_full_cp_comm_type
 * then in cp_type; *type names what cp_type holds. VFM_ERR_USAGE naming the key for a combination
 * that makes no sense. */
vfm_status st_layout_keys(TrainLayout *l, const Config *cfg, const char **type);

/* The keys alone: cp_comm_type parsed, the hierarchical
 * sizes checked against it and CP; keys that do nothing at this layout are named in a warning
 * (when `warn`: rank 0 speaks for the job). */
vfm_status train_layout_from(TrainLayout *l, const Config *cfg, int warn);
/* With the world size and the model: the world divides by TP·PP·CP, the model splits over TP and
 * the CP mode's head rules hold (dit_check_parallel), EP divides DP·CP. */
vfm_status train_layout_check(const TrainLayout *l, const DiTConfig *mc, int world_size);
/* "TP2+SP × CP2 (p2p) × DP2" for the log */
void train_layout_describe(const TrainLayout *l, int dp, char *out, size_t n);
/* The resolved layout as the log's `layout:` line states it, key=value words a test can read:
 * "world=4 dp=1 pp=1 vp=1 cp=2 tp=2 sp=1 cp_comm_type=a2a+p2p[2,2] sharding=optim recompute=full,uniform,1"
 * (recompute: none, selective, or full,<method>,<layers>). */
void train_layout_state(const TrainLayout *l, int world, int dp, DpSharding sharding, const RecomputeConfig *rc,
                        char *out, size_t n);

typedef struct TrainParallel {
    TrainLayout keys;
    ParallelLayout layout;
    Comm world, grad, tp, cp, a2a, ring; /* grad: DP×CP (gradient reduction, ZeRO-1); under EP the
                                             ranks of DP×CP with this rank's EP index */
    Comm pp;                              /* the pipeline stages of this rank's replica */
    Comm grad_gpu;                        /* NCCL over DP×CP for GPU gradients (train_parallel_gpu) */
    Comm ep;                              /* expert parallelism: the EP group; grad is then the
                                             expert-data-parallel group (dp.h; CP included) */
    Comm *grad_dev;                       /* the comm for GPU buffers: &grad_gpu, or NULL (grad stages them) */
    Comm tp_gpu, cp_gpu, a2a_gpu, ring_gpu, pp_gpu, ep_gpu; /* NCCL twins of tp, cp, a2a, ring, pp, ep:
                                             the model's activations, when every rank has a GPU of its own */
    unsigned made;                        /* which comms exist (bit per comm) */
    DiTParallel model;                    /* for dit_create_parallel */
} TrainParallel;

/* Collective over the world: the groups of this rank and their comms (MPI backend). */
vfm_status train_parallel_init(TrainParallel *p, const TrainLayout *keys, int world_size, int rank);
void train_parallel_free(TrainParallel *p);
/* A GPU run, before any GPU memory: binds this rank to its GPU (by local rank) and, when every rank
 * can (NCCL loads and each local rank has a GPU of its own; decided together), makes NCCL comms for
 * the gradient buffers (more than one rank in DP×CP) and for the model's TP, CP, PP and EP activations
 * (p->model's comms then point at them). Otherwise the MPI comms stage GPU buffers through host
 * memory (two ranks sharing one GPU). *how: one line for the log. */
vfm_status train_parallel_gpu(TrainParallel *p, const LaunchInfo *launch, char *how, size_t how_n);
/* dp_init for this layout: gradients summed over CP and averaged over DP (DpConfig.cp), the TP
 * group for the REDUCE_TP_* entries, sequence parallelism set, and under PP the PP group for the
 * REDUCE_PP entries (summed over the stages before the DP×CP reduction). */
vfm_status train_parallel_dp_init(TrainParallel *p, DataParallel *dp, const DiT *m, double bucket_mb, int zero1);

/* Collective over the world: <stage>/model.safetensors, ema.safetensors (ema may be NULL; on the
 * model's device) and optim.safetensors (o NULL: none). A GPU model's buffers are written from host
 * copies (and read into them): the files hold the fp32 master weights whatever the device.
 * Weights are written by the ranks with dp = cp = 0 (each its TP shard; under EP the first EP
 * group of the DP×CP group, each EP rank its experts under their global indices), the moments by every rank (its range of
 * the grad group's cut of its TP shard). */
vfm_status train_parallel_save(TrainParallel *p, const DiT *m, const float *ema, const DataParallel *dp,
                               const Optimizer *o, const char *stage);
/* This rank's slices of a checkpoint directory written at any layout: the weights (and EMA, or a
 * copy of the weights when the checkpoint has none; ema may be NULL) and, when o is not NULL, the
 * Adam moments and step from optim.safetensors (or from the optim.<rank>.safetensors shards of
 * older checkpoints, at TP 1). */
vfm_status train_parallel_load(TrainParallel *p, DiT *m, float *ema, DataParallel *dp, Optimizer *o, const char *dir);

/* ZeRO-2 / ZeRO-3 (strategy optim_grads / optim_grads_params): FSDP over the DP×CP group for this
 * rank's model (dit_fsdp_create: the weights move into its units), gradients summed over CP and
 * averaged over DP as dp_init's, the TP group for the REDUCE_TP_* entries. accumulate_unsharded:
 * fsdp.h (1: ZeRO-1's bits; 0: 1/n gradient memory with several micro-batches). */
vfm_status train_parallel_fsdp_init(TrainParallel *p, Fsdp *f, DiT *m, DpSharding strategy, int accumulate_unsharded);
/* The same files as train_parallel_save / _load, from and into FSDP's fp32 master shard f->master
 * (elements [f->dp.own_begin, own_end) of the rank's local layout; every rank of the DP×CP group
 * writes its own range) and ema_shard (the EMA of that range, or NULL); so ZeRO-1, ZeRO-2 and
 * ZeRO-3 read each other's checkpoints. The load ends with fsdp_distribute_master. */
vfm_status train_parallel_save_fsdp(TrainParallel *p, const DiT *m, Fsdp *f, const float *ema_shard, const Optimizer *o,
                                    const char *stage);
vfm_status train_parallel_load_fsdp(TrainParallel *p, const DiT *m, Fsdp *f, float *ema_shard, Optimizer *o,
                                    const char *dir);

#endif
