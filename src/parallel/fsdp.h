/* Fully sharded data parallelism over the parameter table (design §4): ZeRO-2
 * (ddp.data_parallel_sharding_strategy optim_grads: gradients and optimizer state sharded) and
 * ZeRO-3 (optim_grads_params: parameters too), over the DP×CP group, on the rank's TP-local table.
 *
 * Units. One unit per transformer block (the table's blocks are contiguous runs of entries), one
 * for the entries before the blocks (patch and conditioning embedders) and one for those after
 * them (final layer), when not empty. Each unit is one flat bucket padded to a multiple of n =
 * |DP×CP|: rank j holds piece j, elements [begin + j·S_u, begin + (j+1)·S_u) of the unit (S_u =
 * ⌈numel/n⌉; the padding is zero and never stored anywhere else). Under ZeRO-3 the block units'
 * parameters exist only as these pieces between uses: fsdp_gather all-gathers a unit before its
 * forward (and again before its backward), fsdp_release drops it after; the embedder and
 * final-layer units stay whole on every rank. Under ZeRO-2 every rank keeps all parameters.
 *
 * Gradients. The model's backward writes a unit's gradients into the unit's unsharded buffer
 * (fsdp_grad_begin … fsdp_grad … fsdp_reduce_grads); fsdp_reduce_grads first sums the entries that
 * reduce over TP (REDUCE_TP_HEADS; REDUCE_TP_SP under SP), over EP (dense entries under expert
 * parallelism, fsdp_set_expert_parallel) and over PP (REDUCE_PP, pp_stage.h), then
 * reduce-scatters the buffer (COMM_SUM_ORDERED: each element the rank-order sum, as ZeRO-1's) so
 * this rank keeps only its piece. Two ways to accumulate micro-batches:
 *   accumulate_unsharded = 0: every micro-batch is reduce-scattered and the pieces added up (the
 *     gradient memory is 1/n; the sum runs micro-batch by micro-batch over the ranks, another
 *     float order than ZeRO-1's, which sums each rank's micro-batches first);
 *   accumulate_unsharded = 1: the unit buffers keep the unsharded sum over the step's micro-batches
 *     and are reduced once, in the last one: exactly ZeRO-1's order (bitwise ZeRO-1), at ZeRO-1's
 *     gradient memory while accumulating. With one micro-batch per step both are the same.
 *
 * The optimizer runs on ZeRO-1's flat shard. fsdp_grad_finish scales the pieces (× 1/(n/cp), the
 * mean over DP of the sum over CP, as dp.c) and moves them to the flat layout of dp.h — rank j
 * owns [j·S, (j+1)·S) of the whole buffer, S = ⌈total/n⌉ — with one all-to-all of at most S
 * elements per rank. There the gradient norm, AdamW and the Adam moments are exactly ZeRO-1's
 * (same elements, same per-entry pieces, same partial sums), so ZeRO-2/3 give ZeRO-1's bits and
 * write and read ZeRO-1's optimizer files. After the update the fp32 master shard goes back: under
 * ZeRO-2 an all-gather of the whole buffer (as ZeRO-1), under ZeRO-3 an all-to-all into the
 * block units' pieces plus an all-gather of the unsharded units. The per-unit balance keeps every
 * unit's collectives spread over all ranks (a unit inside one rank's flat shard would send all of
 * it to that rank); the re-layout costs ≤ 2·S elements per rank per step, against ~3·total for the
 * unit collectives themselves.
 *
 * GPU. Buffers live on `device`; fsdp_prefetch(u) posts the all-gather of unit u on the comm's
 * stream (comm_all_gather_start) so that it runs while the current unit computes, and
 * fsdp_gather(u) waits for it. On the CPU (MPI backend) the prefetch gathers at once. At most two
 * gathered block units are alive at a time when the model prefetches one ahead. */
#ifndef VFM_FSDP_H
#define VFM_FSDP_H

#include <stdint.h>

#include "model/params.h"
#include "optim/optimizer.h"
#include "parallel/comm.h"
#include "parallel/dp.h"
#include "parallel/fsdp_layout.h"
#include "parallel/pp_stage.h"
#include "parallel/sharding.h"

typedef struct FsdpConfig {
    DpSharding strategy;        /* DP_SHARD_OPTIM_GRADS or DP_SHARD_OPTIM_GRADS_PARAMS */
    int accumulate_unsharded;   /* above */
    int cp;                     /* context-parallel ranks per replica in the DP×CP group (0 or 1: none) */
    int tp_rank, pp_rank;       /* the model partition (optimizer files) */
} FsdpConfig;

typedef struct Fsdp {
    const ParamTable *table;
    FsdpConfig cfg;
    FsdpLayout lay;
    Comm *comm, *tp_comm, *pp_comm;  /* DP×CP; TP and PP sums (NULL = one rank) */
    int sequence_parallel;
    Device device;
    int n, rank;
    DataParallel dp;          /* ZeRO-1's view: the flat shard [dp.own_begin, dp.own_end), optimizer files */
    float *params;            /* ZeRO-2: [total] every parameter; ZeRO-3: NULL */
    float *param_slots;       /* ZeRO-3: [slots] this rank's piece of each block unit */
    float **unit_params;      /* [n_units] the whole unit (padded to n·S_u) while usable, else NULL */
    unsigned char *owned;     /* [n_units] 1 when unit_params[u] is allocated here (gathered, or kept whole) */
    CommRequest *gather_req;  /* [n_units] a prefetch in flight */
    float **unit_grads;       /* [n_units] the unsharded gradient [n·S_u] between grad_begin and reduce */
    float *grad_slots;        /* [slots] reduced pieces, summed over the step's micro-batches */
    unsigned char *reduced;   /* [n_units] micro-batches reduced into grad_slots this step (0, 1, 2+) */
    float *flat_grads;        /* [own_end - own_begin] after fsdp_grad_finish */
    float *master;            /* fp32 master of the flat shard: ZeRO-3 its own buffer, ZeRO-2 params + own_begin */
    int gathered, peak_gathered; /* block units gathered now / at most (a test checks the reshard) */
    uint64_t params_version;  /* counts the changes of the parameters (set, distribute_master): a
                               * model's bf16 copies of the whole units are current while it equals
                               * the version they were made from (dit_fsdp.c) */
} Fsdp;

/* t: the rank's (TP-local, stage) table, contiguous; comm: DP×CP. Allocates the parameter
 * storage (set it next with fsdp_set_unit_params or fsdp_set_params). */
vfm_status fsdp_init(Fsdp *f, const ParamTable *t, const PpBlocks *blocks, const FsdpConfig *cfg, Comm *comm,
                     Comm *tp_comm, Comm *pp_comm, Device device);
void fsdp_free(Fsdp *f);
void fsdp_set_sequence_parallel(Fsdp *f, int on);
/* Expert parallelism (dp.h): comm (the DP×CP one above) is then the expert-data-parallel
 * group; a unit's dense entries are summed over ep_comm before the reduce-scatter, experts not, and
 * the mean divides by DP = EP·n/cp. ZeRO-3 gathers a unit over that group, so each EP rank's
 * units hold its own experts. Before the first reduction. */
void fsdp_set_expert_parallel(Fsdp *f, Comm *ep_comm);
/* GPU with NCCL: comm (above) moves device buffers only; host_comm, an MPI comm over the same ranks
 * in the same order, carries what the optimizer's ZeRO-1 view (dp.h) reduces on the host — the
 * loss's mean, the gradient norm's partials. Without it those go over comm. */
void fsdp_set_host_comm(Fsdp *f, Comm *host_comm);
/* The unit of block b, of a table entry. */
int fsdp_unit_of_block(const Fsdp *f, int block);
int fsdp_unit_of_entry(const Fsdp *f, int entry);

/* ---- parameters ---------------------------------------------------------------------------- */
/* values[end - begin]: unit u's parameters, the same on every rank (an initialisation or a
 * checkpoint read one unit at a time); the rank keeps what it stores of them. Not collective. */
vfm_status fsdp_set_unit_params(Fsdp *f, int unit, const float *values);
/* full[total]: every unit from one buffer (tests, tools). */
vfm_status fsdp_set_params(Fsdp *f, const float *full);
/* Collective over DP×CP: values[end - begin] = unit u's current parameters. */
vfm_status fsdp_get_unit_params(Fsdp *f, int unit, float *values);

/* Posts the all-gather of unit u (no-op when it is whole or already posted). */
vfm_status fsdp_prefetch(Fsdp *f, int unit);
/* Unit u's parameters whole on return (collective over DP×CP unless it was prefetched or is kept
 * whole). */
vfm_status fsdp_gather(Fsdp *f, int unit);
/* Reshards unit u (ZeRO-3 block units: the gathered copy is freed; others: nothing). */
vfm_status fsdp_release(Fsdp *f, int unit);
/* A view of entry i's parameters (its unit gathered or whole). */
vfm_status fsdp_param(const Fsdp *f, int entry, Tensor *out);

/* ---- gradients ----------------------------------------------------------------------------- */
/* Gives unit u its unsharded gradient buffer: zeroed, or (accumulate_unsharded) the running sum
 * of the step's earlier micro-batches. */
vfm_status fsdp_grad_begin(Fsdp *f, int unit);
/* A view of entry i's gradient in its unit's buffer (between grad_begin and reduce_grads). */
vfm_status fsdp_grad(const Fsdp *f, int entry, Tensor *out);
/* Unit u's micro-batch gradient is complete: TP/PP sums, reduce-scatter, accumulate this rank's
 * piece (accumulate_unsharded: only when last_microbatch). Collective over DP×CP (and TP/PP). */
vfm_status fsdp_reduce_grads(Fsdp *f, int unit, int last_microbatch);
/* After the step's last micro-batch (every unit reduced): the mean, then the flat shard
 * f->flat_grads (collective). */
vfm_status fsdp_grad_finish(Fsdp *f);
/* ZeRO-1's global norm of the flat shards (the same value on every rank). */
vfm_status fsdp_grad_norm(Fsdp *f, double *norm);

/* ---- optimizer ----------------------------------------------------------------------------- */
/* Adam moments over the flat shard (as dp_optimizer_init under ZeRO-1). */
vfm_status fsdp_optimizer_init(const Fsdp *f, Optimizer *o, const OptimConfig *c);
/* AdamW on the flat shard (master, flat_grads), then fsdp_distribute_master. */
vfm_status fsdp_optimizer_step(Fsdp *f, Optimizer *o, double lr, double grad_scale);
/* Collective: the parameters from the fp32 master shard f->master ([dp.own_begin, dp.own_end) of
 * the buffer) to where forward reads them — ZeRO-2 all-gathers every parameter, ZeRO-3 moves the
 * block units' pieces (all-to-all) and all-gathers the whole units. A checkpoint read fills the
 * master shard (one contiguous range per rank) and calls this. No block unit may be gathered. */
vfm_status fsdp_distribute_master(Fsdp *f);

#endif
