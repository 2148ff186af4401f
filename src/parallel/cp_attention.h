/* Context-parallel self-attention over packed THD sequences (design §4; research/context-parallel.md):
 * every CP rank holds chunk r of every sample (cp_layout.h) and gets exactly the rows of o, lse,
 * dq, dk, dv that full-sequence attention (op_attention_forward/backward on the whole pack) gives
 * for its chunk. Modes (Megatron's model.cp_comm_type):
 *
 *  p2p         ring attention. K and V travel around the ring (rank r sends its current block to
 *              r+1 and receives the next from r-1), the exchange posted before the local tile is
 *              computed so a GPU overlaps the two; P tiles per rank, merged with the exact
 *              log-sum-exp (op_attention_merge). Backward: each tile's op_attention_backward with
 *              the merged o and lse (exact partial gradients); dQ accumulates locally, dK/dV travel
 *              around the ring with their block and reach their owner after P hops (the
 *              accumulators have the tensors' dtype: a bf16 GPU path should keep them in fp32). Sums run in a fixed order (block j: ranks j, j+1, ...).
 *  a2a         Ulysses: an all-to-all turns [S/P rows, H heads] into [S rows, H/P heads], every
 *              rank runs whole-sequence attention on its heads, and the inverse all-to-all brings
 *              o and lse back. Needs H divisible by P; kv heads (GQA) either divisible by P, or
 *              dividing P, in which case each kv head is replicated to the P/Hkv ranks whose
 *              query heads read it (and their dK/dV are summed in rank order on the way back).
 *  a2a+p2p     hierarchical: the all-to-all inside groups of A consecutive CP ranks turns chunks
 *              into super-chunks of A chunks with H/A heads, then a ring over the R = P/A groups;
 *              model.hierarchical_context_parallel_sizes = [A, R]. a2a is A = P (a ring of one),
 *              p2p is A = 1.
 *  all_gather  K and V are all-gathered (whole pack), local attention of the chunk's queries,
 *              dK/dV reduce-scattered back to their owners (ordered sum). Simple, memory O(S).
 *
 * Cross-attention needs none of this: the text stays whole on every rank and
 * cp_cross_layout(chunks, r, whole_cross) is the local layout for op_attention_forward/backward.
 *
 * Tensors: q[S/P, H, hd], k and v [S/P, Hkv, hd], o like q, lse[S/P, H] (the rank's chunk set,
 * H and Hkv the heads this TP rank holds). Scratch is allocated per call on q's device. */
#ifndef VFM_CP_ATTENTION_H
#define VFM_CP_ATTENTION_H

#include "ops/ops.h"
#include "parallel/comm.h"
#include "parallel/cp_layout.h"

/* CP_COMM_HYBRID is ST-DiT's model-level scheme (st_layout.h), not an attention of this file: its
 * full-attention layers run one of the others (model.stdit_full_cp_comm_type). */
typedef enum { CP_COMM_P2P, CP_COMM_A2A, CP_COMM_A2A_P2P, CP_COMM_ALL_GATHER, CP_COMM_HYBRID } CpCommType;

/* "p2p", "a2a", "a2a+p2p", "all_gather", "hybrid"; VFM_ERR_USAGE naming model.cp_comm_type otherwise. */
vfm_status cp_comm_type_parse(const char *s, CpCommType *out);
const char *cp_comm_type_name(CpCommType t);
/* Before any work: VFM_ERR_USAGE with one line naming the key and the numbers when the layout
 * cannot run (a2a: heads per TP rank not divisible by CP, kv heads neither dividing nor divided
 * by CP; a2a+p2p: the all-to-all size not dividing CP, or the same head rules with it). heads and
 * kv_heads are per TP rank; a2a_size is model.hierarchical_context_parallel_sizes[0] (ignored
 * unless a2a+p2p). */
vfm_status cp_check_config(CpCommType type, int cp, int a2a_size, int heads, int kv_heads);

typedef struct CpAttention {
    CpCommType type;
    int P, A, R;                        /* CP size = A·R: all-to-all group size, ring size */
    int cp_rank, a2a_rank, ring_rank;   /* cp_rank = ring_rank·A + a2a_rank */
    Comm *cp, *a2a, *ring;              /* the CP group, the all-to-all group, the ring */
    /* Tests only: when k >= 1, ring step k contributes nothing (forward and backward): a broken
     * variant the equivalence tests must catch. */
    int test_drop_ring_step;
} CpAttention;

/* cp: the CP group (rank order = chunk order). p2p: the ring is cp; a2a: the all-to-all is cp;
 * a2a+p2p: a2a and ring are the sub-groups of cp_subgroup_members (groups.h); all_gather: cp.
 * Unused comms may be NULL. */
vfm_status cp_attention_init(CpAttention *a, CpCommType type, Comm *cp, Comm *a2a, Comm *ring);

/* o[S/P,H,hd], lse[S/P,H] of this rank's queries against all keys of their samples. chunks:
 * the pack split into P parts (cp_chunks_init with parts = P). */
vfm_status cp_attention_forward(const CpAttention *a, const CpChunks *chunks, Tensor *o, Tensor *lse, const Tensor *q,
                                const Tensor *k, const Tensor *v);
/* dq (=), dk (=), dv (=) of this rank's rows, from the forward's o and lse. */
vfm_status cp_attention_backward(const CpAttention *a, const CpChunks *chunks, Tensor *dq, Tensor *dk, Tensor *dv,
                                 const Tensor *dout, const Tensor *q, const Tensor *k, const Tensor *v, const Tensor *o,
                                 const Tensor *lse);

#endif
