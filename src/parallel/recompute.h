/* Activation recomputation, Megatron's keys: which blocks of a pipeline chunk recompute what in
 * backward, and the validation of model.recompute_granularity / recompute_method /
 * recompute_num_layers. (The model replays blocks with these plans; random draws inside a block
 * are keyed, not stateful, so a replay draws the same numbers.)
 *
 *   full + uniform n: the chunk's blocks in consecutive groups of n (the last may be shorter); a
 *     group keeps only its input and reruns all its blocks' forward in backward;
 *   full + block n:   the first min(n, blocks) blocks of each chunk each keep only their input
 *     and rerun their forward; the others keep everything;
 *   selective:        every block keeps its input and the inputs of its attention (q, k, v) and
 *     recomputes the attention output (and its log-sum-exp) in backward.
 * Megatron counts per pipeline stage, per model chunk under virtual pipelining (its
 * TransformerBlock is one chunk); so does vfm.
 *
 * Rules (Megatron's TransformerConfig, plus vfm's "no key silently ignored"): full needs a
 * method and 1 <= num_layers <= the blocks of the largest chunk; selective takes neither a method
 * nor num_layers; without a granularity neither may be set. Violations are VFM_ERR_USAGE with one
 * line naming the keys. */
#ifndef VFM_RECOMPUTE_H
#define VFM_RECOMPUTE_H

#include "core/config.h"

typedef enum { RECOMPUTE_NONE, RECOMPUTE_FULL, RECOMPUTE_SELECTIVE } RecomputeGranularity;
typedef enum { RECOMPUTE_METHOD_NONE, RECOMPUTE_UNIFORM, RECOMPUTE_BLOCK } RecomputeMethod;

typedef struct RecomputeConfig {
    RecomputeGranularity granularity;
    RecomputeMethod method;
    int num_layers;   /* 0 = unset */
} RecomputeConfig;

/* granularity, method: "" (null), or Megatron's values; max_chunk_blocks: blocks of the largest
 * pipeline chunk (num_layers when there is no pipeline). */
vfm_status recompute_resolve(const char *granularity, const char *method, int num_layers, int max_chunk_blocks,
                             RecomputeConfig *out);
/* From a config: the three keys and model.num_layers over the pipeline chunks (pp_schedule.h's
 * split). */
vfm_status recompute_from_config(const Config *cfg, RecomputeConfig *out);

/* "full, uniform 2", "full, block 1", "selective" or "none" (for log lines). */
void recompute_describe(const RecomputeConfig *c, char *out, size_t n);

/* What block i of a chunk of n_blocks does (plan[n_blocks]). */
typedef struct RecomputeBlock {
    RecomputeGranularity mode;  /* NONE: keeps its activations; FULL or SELECTIVE as above */
    int group_first, group_end; /* FULL: the recomputed group [first, end) holding the block (its
                                   input is group_first's input); otherwise [i, i + 1) */
} RecomputeBlock;
void recompute_plan(const RecomputeConfig *c, int n_blocks, RecomputeBlock *plan);
/* Block i's entry of that plan. */
RecomputeBlock recompute_block(const RecomputeConfig *c, int n_blocks, int i);

#endif
