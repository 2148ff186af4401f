/* Tensor-parallel shards of the parameter table. The model builds its table with the single-rank
 * (full) shapes; each TP rank holds a local table with the same names, order and flags, in which
 * every entry with tp_split_dim d >= 0 has dimension d divided by TP, laid out contiguously in the
 * rank's own parameter buffer (and in the parallel gradient, Adam and EMA buffers).
 *
 * Rank t holds indices [t·n/TP, (t+1)·n/TP) of the split dimension (n its full size):
 *   column-parallel (d = 0, W[out, in]): rows of W: a heads or hidden-unit block, contiguous in
 *     the full tensor;
 *   row-parallel (d = 1): columns of W: one run of in/TP elements in each of the `out` rows
 *     (strided in the full tensor);
 *   replicated (d = -1): the whole tensor.
 * In general the shard is `runs` runs of `run_len` contiguous elements of the full tensor, the
 * first at `first`, one every `stride` (runs = Π shape[<d], run_len = n/TP · Π shape[>d]).
 * An entry with tp_parts = k > 1 (a fused q|k|v weight [3D, D], tp_parts 3) is k equal parts along
 * d that split separately: rank t holds block t of each part, back to back in part order (its
 * local qkv is [q_t; k_t; v_t]); the runs then go part by part, `part_stride` apart, and
 * runs = Π shape[<d] · k, run_len = n/(k·TP) · Π shape[>d].
 * Checkpoints (ckpt_shard.h) write and read exactly these runs, so `model.safetensors` always
 * holds full tensors whatever the layout.
 *
 * kv heads smaller than TP are not supported: k and v must split like q (num_query_groups a
 * multiple of TP); the model refuses other layouts naming model.num_query_groups. */
#ifndef VFM_TP_SHARD_H
#define VFM_TP_SHARD_H

#include <stdint.h>

#include "model/params.h"

typedef struct TpShard {
    int split_dim;                       /* -1: replicated */
    int parts;                           /* tp_parts (1, or 3 for a fused qkv) */
    int64_t begin, count;                /* along split_dim, within each part, in the full tensor */
    int64_t runs, run_len, first, stride;/* the shard inside the full entry, in elements */
    int64_t part_stride;                 /* elements between the same run of consecutive parts */
} TpShard;

typedef struct TpShardMap {
    const ParamTable *full; /* the single-rank table (not owned) */
    ParamTable local;       /* this rank's table */
    TpShard *shards;        /* [full->count] */
    int tp, rank;
    int ep, ep_rank;        /* expert parallelism: entries with REDUCE_EXPERT split dimension 0 over ep */
    /* Checkpoint files (ckpt_shard.h) hold the tensors of `file` (NULL: full) and local entry i is
     * file entry file_entry[i] (NULL: i). Pipeline parallelism: full is the stage's table, file the
     * whole model's (not owned). */
    const ParamTable *file;
    const int *file_entry;
} TpShardMap;

/* VFM_ERR_USAGE naming the entry, the dimension and TP when a split dimension (or each of its
 * tp_parts parts) does not divide. */
vfm_status tp_shard_map_init(TpShardMap *m, const ParamTable *full, int tp, int rank);
/* The same with expert parallelism: an entry with REDUCE_EXPERT (replicated over TP) holds on EP
 * rank r experts [r·E/ep, (r+1)·E/ep), i.e. rows [r·n/ep, (r+1)·n/ep) of its dimension 0, so
 * checkpoints name every expert by its global index whatever ep. */
vfm_status tp_shard_map_init_ep(TpShardMap *m, const ParamTable *full, int tp, int rank, int ep, int ep_rank);
void tp_shard_map_free(TpShardMap *m);

/* Calls fn for the pieces of entry i's local elements [a, b) (offsets inside the entry): local
 * element local_at.. of the shard is full element full_at.. of the full entry, len elements. */
typedef vfm_status (*TpRunFn)(void *ctx, int64_t local_at, int64_t full_at, int64_t len);
vfm_status tp_shard_runs(const TpShardMap *m, int entry, int64_t a, int64_t b, TpRunFn fn, void *ctx);

/* Host f32 buffers laid out by the full table (full) and by the local one (local): copy this rank's
 * shard out of a full buffer, or into one (tools and tests; a training rank never holds full). */
vfm_status tp_shard_extract(const TpShardMap *m, float *local, const float *full);
vfm_status tp_shard_insert(const TpShardMap *m, float *full, const float *local);
/* local (host f32, local layout) = the initial values the single-rank model has at this rank's
 * elements (param_table_init_values keys values by name and element index), one entry at a time:
 * memory O(largest entry). */
vfm_status tp_shard_init_values(const TpShardMap *m, float *local, uint64_t seed);

#endif
