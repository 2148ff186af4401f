/* Data parallelism over the parameter table (design §4): the bucketed gradient reduction
 * (mean over DP×CP through each entry's reduce groups), ZeRO-1 (Adam moments sharded over the
 * DP×CP group: reduce-scatter of gradients, AdamW on the local shard, all-gather of parameters),
 * the global gradient norm, the loss/metric mean, and the optimizer-state checkpoint files
 * optim.<rank>.safetensors (one shard each, loadable at any DP size).
 *
 * Buckets. Consecutive table entries, filled in reverse table order (the order backward
 * completes them) until each holds at least bucket_size_mb; bucket 0 ends with the last entry.
 * Backward calls dp_grad_bucket_ready(b) when bucket b's gradients are complete; buckets are
 * issued strictly in index order (a bucket waits until all lower-numbered ones are ready), so
 * every rank issues the same collectives in the same order whatever the completion order.
 * dp_grad_sync_finish issues what is left and returns when every bucket is reduced. An issue posts
 * the bucket's sum (comm_all_reduce_start / comm_reduce_scatter_v_start): on the MPI backend (and
 * GPU memory staged through it) a blocking collective; on a GPU's NCCL comm it runs on the comm's
 * stream, overlapped with the rest of backward on the ops' stream. The 1/DP scaling of every
 * bucket runs when its sum is complete — in dp_grad_sync_finish, or before the PP sum of
 * replicated entries for the buckets issued before it — so the bits are those of one blocking
 * reduction after another. The bucket's values are final only after dp_grad_sync_finish. With
 * gradient accumulation, call
 * dp_grad_bucket_ready only during the last micro-batch (or call only dp_grad_sync_finish).
 *
 * One bucket's reduction, in order:
 *   1. entries with REDUCE_TP_HEADS (always) or REDUCE_TP_SP (only under sequence parallelism):
 *      summed over the TP group (ordered sum). The first bucket holding a REDUCE_PP entry first
 *      sums every REDUCE_PP entry of the table over the PP group in one collective
 *      (pp_reduce_replicated_grads): stage tables differ, so the buckets around the embedders
 *      differ between stages, and per-bucket sums would pair other entries. This needs every
 *      REDUCE_PP gradient final when that bucket is issued (the conditioning's backward runs
 *      last, so they are). No-ops while TP = PP = 1 (the comms have one rank or are NULL).
 *   2. every entry: mean over DP of the sum over CP = ordered sum over DP×CP (comm.h: rank order,
 *      the same bits on every rank), then × (float)(cp/n) (skipped when that is 1: pure CP).
 *      Plain DP all-reduces the bucket; ZeRO-1 reduce-scatters it,
 *      each rank receiving only the part inside its shard: bit for bit the all-reduce result
 *      restricted to the shard.
 *
 * Shards (ZeRO-1). The flat buffer, padded to a multiple of n = |DP×CP|, is cut into n equal
 * contiguous shards of S = ceil(total/n) elements: rank j owns [j·S, min((j+1)·S, total)) (the
 * padding is never stored; a tail shard may be short or empty). Shards cross entry boundaries;
 * the update is elementwise, and AdamW runs on each entry's piece with that entry's weight-decay
 * flag. Plain DP uses the same shard cut for the gradient norm and for checkpoint files, which is
 * what makes plain DP and ZeRO-1 give identical bits.
 *
 * Gradient norm: √(Σ_j partial_j), partial_j = op_sum_squares over shard j (its fixed chunk
 * order), the partials added in rank order j = 0..n-1. Plain DP computes every partial locally;
 * ZeRO-1 computes its own and all-gathers the n doubles. At n = 1 this is exactly
 * grad_global_norm (optimizer.h). Across different DP sizes the norm differs in the last bits.
 * Under TP or PP (a TP or PP comm of more than one rank) each shard's partial is kept as four
 * sums, each entry's piece by op_sum_squares: entries split over TP or replicated over TP, times
 * entries every pipeline stage holds (REDUCE_PP) or not. The TP-split sums are added over TP in
 * rank order; then what each stage holds alone is added over PP in stage order; the entries
 * every stage holds (identical on every stage after their PP sum) count once. At PP = 1 this is
 * bit for bit the two-sum rule of TP alone.
 *
 * Expert parallelism (dp_set_expert_parallel, EP > 1: docs/parallel.md "Expert parallelism").
 * grad_comm is then the expert-data-parallel group (the DP×CP ranks with this rank's EP index): EP
 * rank r's buffer holds experts [r·E/EP, (r+1)·E/EP) at the offsets where every EP rank holds
 * its own, so the shards, ZeRO-1's moments and the checkpoint ranges are cut over that group,
 * which covers the whole buffer once per EP rank. Step 1 of a bucket then also sums the dense
 * entries (those without REDUCE_EXPERT) over the EP group (ordered sum, each contiguous run of
 * them at once), so that step 2's sum over grad_comm makes their sum over all of DP×CP; an
 * expert's gradient already holds its EP group's tokens (the all-to-all brought them) and is
 * summed over grad_comm only. Both are then scaled by 1/DP, DP = EP·|grad_comm|/cp. The dense
 * entries' values and moments are identical on the EP ranks of one shard (their ZeRO state is
 * replicated EP times: sharded over DP/EP, not DP). The norm counts the expert entries' Σ g² of
 * every EP rank (summed over EP) and the dense ones once; dp_mean_f64 averages over DP×CP.
 *
 * On the CPU the fp32 parameters are the master weights (one full copy per rank); on the GPU the
 * fp32 master becomes a third buffer sharded like m and v, and the all-gather then fills the
 * bf16 parameters. */
#ifndef VFM_DP_H
#define VFM_DP_H

#include <stdint.h>

#include "model/params.h"
#include "parallel/comm.h"
#include "optim/optimizer.h"

typedef struct DpConfig {
    double bucket_size_mb;  /* ddp.bucket_size_mb */
    int zero1;              /* ddp.use_distributed_optimizer */
    int tp_rank, pp_rank;   /* the model partition this rank holds: checkpoint shards match on it */
    int cp;                 /* context-parallel ranks per replica in the DP×CP group (0 or 1: none): each
                               holds a partial sum (its chunk's tokens) of the replica's gradient, so
                               the reduction sums over them and averages over the n/cp replicas */
} DpConfig;

typedef struct DpBucket {
    int64_t begin, end;           /* [begin, end) of the flat buffer */
    int first_entry, last_entry;  /* table entries in it (first <= last) */
    /* this step's reduction of the bucket, posted (comm_*_start: on a GPU's NCCL comm it runs on
     * the comm's stream while the backward goes on) and completed by dp_grad_sync_finish, which
     * then scales [scale_at, scale_at + scale_n) by 1/DP (the mean after the sum, as before) */
    CommRequest req;
    int64_t scale_at, scale_n;
} DpBucket;

typedef struct DataParallel {
    const ParamTable *table;
    Comm *grad_comm;             /* DP×CP group: gradient mean, ZeRO-1 shards */
    Comm *tp_comm, *pp_comm;     /* REDUCE_TP_* / REDUCE_PP sums; NULL = one rank */
    int sequence_parallel;       /* model.sequence_parallel: REDUCE_TP_SP entries sum over TP too
                                    (0 after dp_init; dp_set_sequence_parallel sets it) */
    DpConfig cfg;
    DpBucket *buckets;
    int n_buckets;
    int next_bucket;             /* the next bucket to issue */
    int pp_summed;               /* this step's REDUCE_PP sum over PP is done */
    unsigned char *ready;        /* [n_buckets] */
    int64_t shard_size;          /* S = ceil(total / n) */
    int64_t own_begin, own_end;  /* this rank's shard */
    Device device;               /* where grads, params and the moments live (cpu after dp_init) */
    Comm *dev_comm;              /* GPU: the comm for the gradient and parameter buffers (NCCL), or NULL:
                                    grad_comm moves them (the MPI backend stages GPU memory) */
    double *norm_parts;          /* on device: the shards' Σ g² (dp_grad_sumsq_into), made on first use */
    Comm *ep_comm;               /* expert parallelism: the EP group (NULL = none; above) */
} DataParallel;

/* Shard j of n over total elements: [*begin, *end). */
void zero_shard_range(int64_t total, int n, int j, int64_t *begin, int64_t *end);

/* The table's entries must be contiguous in table order (as param_table_add lays them out). */
vfm_status dp_init(DataParallel *dp, const ParamTable *t, const DpConfig *cfg, Comm *grad_comm, Comm *tp_comm,
                   Comm *pp_comm);
void dp_free(DataParallel *dp);
int dp_bucket_of_entry(const DataParallel *dp, int entry);
/* 1 when an entry's gradient is summed over the TP group: REDUCE_TP_HEADS always, REDUCE_TP_SP
 * only under sequence parallelism (design §3). */
int dp_entry_reduces_over_tp(const ParamEntry *e, int sequence_parallel);
void dp_set_sequence_parallel(DataParallel *dp, int on);
/* Expert parallelism over ep_comm (NULL or one rank: none); grad_comm must then be the
 * expert-data-parallel group (above). Before the first reduction. */
void dp_set_expert_parallel(DataParallel *dp, Comm *ep_comm);
/* 1 when entry e is summed over the EP group before the DP reduction (a dense entry under EP). */
int dp_entry_reduces_over_ep(const DataParallel *dp, const ParamEntry *e);
/* Sums the dense entries among [first_entry, end_entry) of grads (element x at grads[x - base])
 * over the EP group, each contiguous run of them in one ordered all-reduce; nothing without EP. */
vfm_status dp_ep_sum_dense(const DataParallel *dp, float *grads, int64_t base, int first_entry, int end_entry);
/* Data-parallel replicas: |grad_comm| · EP / cp (the 1/DP of the mean). */
int dp_replicas(const DataParallel *dp);
/* The device of the buffers handed to the calls below (before dp_optimizer_init), and the comm
 * that moves them on a GPU (NULL: grad_comm; its MPI backend stages GPU memory through host copies,
 * comm.h). Scalars (the norm partials, the loss) always go over grad_comm. */
void dp_set_device(DataParallel *dp, Device device, Comm *dev_comm);

/* grads[table->total]: this rank's gradients on entry, the reduced ones on return (ZeRO-1: valid
 * only inside this rank's shard; elsewhere they are left as they were). */
vfm_status dp_grad_bucket_ready(DataParallel *dp, float *grads, int bucket);
vfm_status dp_grad_sync_finish(DataParallel *dp, float *grads);
/* Global norm of the reduced gradients grads[table->total] (above); the same value on every rank. */
vfm_status dp_grad_norm(DataParallel *dp, const float *grads, double *norm);
/* The same under ZeRO-1 from this rank's shard alone, shard[own_end - own_begin] (FSDP keeps only
 * that); the same bits as dp_grad_norm on a whole buffer holding those values. */
vfm_status dp_grad_norm_shard(DataParallel *dp, const float *shard, double *norm);
/* The squared norm of dp_grad_norm (the same bits) into the step state's STEP_SUMSQ (ops.h), on
 * the device: without a host wait at one rank and under plain DP; ZeRO-1 over several ranks and
 * TP/PP reduce host values over their comms (the host waits there). */
vfm_status dp_grad_sumsq_into(DataParallel *dp, const float *grads, Tensor *state);
/* The same from this rank's ZeRO-1 shard (FSDP). */
vfm_status dp_grad_sumsq_shard_into(DataParallel *dp, const float *shard, Tensor *state);

/* optimizer_init for this layout: m and v hold [total] elements (plain DP) or this rank's shard. */
vfm_status dp_optimizer_init(const DataParallel *dp, Optimizer *o, const OptimConfig *c);
/* One AdamW update (lr, gradients × grad_scale) of this rank's elements: all of them (plain DP)
 * or its shard followed by the all-gather of params[total] (ZeRO-1). Frozen entries are skipped,
 * weight decay applies to entries with weight_decay set. Bitwise optimizer_step on the same
 * elements. */
vfm_status dp_optimizer_step(DataParallel *dp, Optimizer *o, float *params, const float *grads, double lr,
                             double grad_scale);
/* values[n] = mean over DP×CP (ordered sum / n): the loss and the log line's metrics. */
vfm_status dp_mean_f64(DataParallel *dp, double *values, int n);

/* Writes <dir>/optim.<global_rank>.safetensors: this rank's shard [own_begin, own_end) of m and v
 * as flat f32 tensors "exp_avg" and "exp_avg_sq", with metadata format=vfm-optim-shard,
 * shard_index, shard_count, begin, end, total, step, table (a fingerprint of names, shapes and
 * offsets), tp_rank, pp_rank. Plain DP writes the same cut from its full copy. */
vfm_status dp_optim_save(const DataParallel *dp, const Optimizer *o, const char *dir, int global_rank);
/* Fills m and v (this rank's part) from the optim.*.safetensors files in dir of this rank's
 * model partition, whatever DP size (shard count) wrote them: each needed range is read from the
 * files that hold it. The shard files must tile the whole buffer and match the table; otherwise
 * an error names what is missing or different. */
vfm_status dp_optim_load(DataParallel *dp, Optimizer *o, const char *dir);

#endif
