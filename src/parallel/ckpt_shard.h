/* Checkpoint files that do not depend on the parallel layout (design §3): one safetensors file
 * of full f32 tensors named as in the single-rank model, which every rank fills with the slices it
 * holds and from which every rank reads back the slices it needs at any layout. No rank ever holds
 * more than its own buffers.
 *
 * Writing (collective over `comm`, normally the world): every rank computes the same header
 * (tensor order: each set in turn, the full table's entries in table order; data back to back);
 * comm rank 0 creates "<path>.tmp" with that header and the file's full size; then every rank
 * pwrites its runs (tp_shard.h: a column-parallel shard is one run per tensor, a row-parallel one a
 * run per row) and fsyncs; then rank 0 renames the file into place and fsyncs the directory. Ranks
 * that hold a copy of what another rank writes (DP/CP replicas) pass an empty range and write
 * nothing. A failure on any rank fails the call on every rank.
 *
 * What a rank writes or reads is elements [lo, hi) of its local (TP-shard) layout, of each set's
 * buffer (buf[0] = element lo):
 *   weights (model.safetensors, ema.safetensors): one set, prefix "", [0, local total) on the
 *     ranks with dp = cp = 0 (under expert parallelism one rank per EP rank: the shard map
 *     (tp_shard_map_init_ep) puts its experts' rows at their global indices), nothing elsewhere;
 *     under ZeRO-2/3 each rank of the gradient group its fp32 master shard (the ZeRO-1 range below);
 *   Adam moments (optim.safetensors): sets "exp_avg." and "exp_avg_sq.", the rank's ZeRO-1
 *     shard [begin, end) of its local buffer, or with plain DP the same cut of its full copy;
 *     with the metadata "step". Loading takes any other range: the state reshards across DP, CP,
 *     ZeRO and TP alike.
 * Files written by PyTorch (any tensor order) read the same way; the dtype must be F32. */
#ifndef VFM_CKPT_SHARD_H
#define VFM_CKPT_SHARD_H

#include <stdint.h>

#include "optim/optimizer.h"
#include "parallel/comm.h"
#include "parallel/tp_shard.h"

typedef struct ShardedSet {
    const char *prefix;  /* tensor names are prefix + the entry's name */
    float *buf;          /* host f32: element lo of the local layout first */
} ShardedSet;

/* metadata: NULL-terminated key, value pairs (may be NULL); comm NULL = one process. */
vfm_status sharded_safetensors_write(const char *path, Comm *comm, const TpShardMap *m, const ShardedSet *sets, int n_sets,
                                     int64_t lo, int64_t hi, const char *const *metadata);
/* Fills elements [lo, hi) of every set's buffer from path's full tensors (shapes must be the full
 * table's: otherwise an error naming the tensor). */
vfm_status sharded_safetensors_read(const char *path, const TpShardMap *m, const ShardedSet *sets, int n_sets, int64_t lo,
                                    int64_t hi);
/* A metadata value of path (f32 tensors are not read), into out[n]; VFM_ERR_FORMAT when absent. */
vfm_status sharded_safetensors_metadata(const char *path, const char *key, char *out, size_t n);

/* Weights: this rank's local buffer params[local total]; `writes` = 0 on replicas. */
vfm_status ckpt_write_weights(const char *path, Comm *comm, const TpShardMap *m, const float *params, int writes);
vfm_status ckpt_read_weights(const char *path, const TpShardMap *m, float *params);
/* Elements [lo, hi) of the local layout, held in buf[hi - lo]: FSDP's fp32 master shard, each rank
 * of the DP×CP group writing (and reading back) its own range of the same file. */
vfm_status ckpt_write_weights_range(const char *path, Comm *comm, const TpShardMap *m, const float *buf, int64_t lo,
                                    int64_t hi);
vfm_status ckpt_read_weights_range(const char *path, const TpShardMap *m, float *buf, int64_t lo, int64_t hi);
/* Adam moments: o->m, o->v hold local elements [o->begin, o->end); this rank writes [lo, hi) of
 * them (its ZeRO-1 shard, or its DP×CP cut under plain DP), with the step. Reading fills
 * [o->begin, o->end) and sets o->step. */
vfm_status ckpt_write_optim(const char *path, Comm *comm, const TpShardMap *m, const Optimizer *o, int64_t lo, int64_t hi);
vfm_status ckpt_read_optim(const char *path, const TpShardMap *m, Optimizer *o);

#endif
