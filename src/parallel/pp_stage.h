/* Parameters under pipeline parallelism: which stage holds each entry of the model's table, each
 * stage's own table, and the sum over the PP group of the gradients of the replicated entries.
 *
 * Placement (design §4): the blocks go to the stage of their chunk (pp_schedule.h: block l is in
 * global chunk g, on stage g mod P); entries flagged REDUCE_PP (the conditioning embedders: t, fps,
 * class, cond norm) are on every stage, initialised identically (values keyed by name); the other
 * entries before the blocks (the patch embedder) are on the first stage, those after the blocks (the
 * final layer) on the last. A stage's table keeps the full table's order, names and flags, laid
 * out contiguously, so checkpoints map entries by name.
 *
 * Replicated gradients. Every stage computes the conditioning itself, so each holds only its own
 * blocks' part of an embedder's gradient. pp_reduce_replicated_grads sums the REDUCE_PP entries
 * over the PP group in stage order (COMM_SUM_ORDERED, all of them in one collective, concatenated
 * in table order) — BEFORE the data-parallel / ZeRO reduction, so that the DP×CP mean then sees
 * the whole gradient on every stage (Megatron adds them after its ZeRO reduce-scatter, when the
 * regions outside a rank's shard are stale). Every stage gets the same bits, so the replicated
 * weights stay identical across stages after every update. The local chunks' contributions need
 * no extra step: the chunks of a stage accumulate into the same gradient buffer. */
#ifndef VFM_PP_STAGE_H
#define VFM_PP_STAGE_H

#include <stdint.h>

#include "model/params.h"
#include "parallel/comm.h"

/* Where the blocks are in the full table: block b holds entries [block_first[b], block_first[b+1])
 * (the last block ends at head_first); entries before block_first[0] precede the blocks, entries
 * from head_first on follow them. */
typedef struct PpBlocks {
    const int *block_first;
    int n_blocks, head_first;
} PpBlocks;

/* The stage holding entry i, or -1 when every stage holds it (REDUCE_PP). */
int pp_entry_stage(const ParamTable *full, const PpBlocks *blocks, int stages, int chunks, int entry);

typedef struct PpStageMap {
    ParamTable local;      /* this stage's entries, full-table order, contiguous */
    int *full_entry;       /* [local.count]: index in the full table */
    int *block_first;      /* [n_blocks]: the stage's blocks (global order) in the local table */
    int *block_index;      /* [n_blocks]: their global block numbers */
    int n_blocks, head_first; /* head_first: first local entry after the blocks (local.count if none) */
} PpStageMap;

vfm_status pp_stage_map_init(PpStageMap *m, const ParamTable *full, const PpBlocks *blocks, int stages, int chunks,
                             int stage);
void pp_stage_map_free(PpStageMap *m);

/* Sums the REDUCE_PP entries among entries [first_entry, end_entry) of t over pp (rank order),
 * in place. Entry e's gradient is at grads[e->offset - base] (base = 0 for a whole-table buffer, a
 * unit's first offset for an FSDP unit buffer). pp NULL or of one rank: nothing to do. */
vfm_status pp_reduce_replicated_grads(Comm *pp, const ParamTable *t, float *grads, int64_t base, int first_entry,
                                      int end_entry, Device device);
/* Collective over pp: VFM_ERR_INTERNAL unless every stage holds the same REDUCE_PP entries (names
 * and shapes, in the same order), which the sum above relies on. */
vfm_status pp_check_replicated(Comm *pp, const ParamTable *t);

/* Collective over pp: VFM_ERR_INTERNAL, naming the step and a stage, unless every stage holds bitwise
 * the same values in its REDUCE_PP entries of `params` (the stage table's buffer on `device`). The
 * trainer asserts this after every update: the replicated embedders must never drift apart. */
vfm_status pp_check_replicated_values(Comm *pp, const ParamTable *t, const float *params, Device device, int64_t step);

#endif
