/* Tensor-parallel regions (Megatron semantics, design §4): the communication around the
 * column-parallel linears that open a region (q/k/v, the text k/v, fc1: heads or hidden units
 * split over TP) and the row-parallel linears that close it (attention proj, fc2: their outputs
 * are partial sums over the TP ranks' slices).
 *
 *                 forward                               backward
 *   enter  no SP: identity (full = local)              all-reduce of dfull
 *          SP:    all-gather of the token rows         reduce-scatter of the token rows
 *   exit   no SP: all-reduce of the partial output     identity
 *          SP:    reduce-scatter of the token rows     all-gather of the token rows
 *
 * Under sequence parallelism (model.sequence_parallel) the token rows of the (CP-local) pack are
 * cut into TP equal contiguous blocks between regions (norms, adaLN modulation, gated residual,
 * loss): rank t holds rows [t·S/TP, (t+1)·S/TP). The encoder pads packs to lcm(64, TP·CP), so S is
 * a multiple of TP on every CP rank. Every sum is COMM_SUM_ORDERED (rank order), and the ordered
 * reduce-scatter is the ordered all-reduce restricted to a block: TP and TP+SP give the same bits.
 * A row-parallel bias is added after the exit (once); it is replicated, REDUCE_TP_SP.
 *
 * Tensors are [rows, width] (any trailing shape is viewed as one width), f32/f64/bf16 on the
 * comm's device (MPI: host, NCCL: GPU). A NULL or one-rank comm makes every call a copy or no-op. */
#ifndef VFM_TP_H
#define VFM_TP_H

#include "parallel/comm.h"

typedef struct TpContext {
    Comm *tp;               /* the TP group; NULL = one rank */
    int sequence_parallel;  /* model.sequence_parallel */
} TpContext;

/* Rows [*begin, *begin + *count) of a rows-row pack that TP rank `rank` of tp holds under SP;
 * VFM_ERR_USAGE when tp does not divide rows. */
vfm_status tp_sp_rows(int64_t rows, int tp, int rank, int64_t *begin, int64_t *count);

/* Entering a region: no SP, full = local (copied unless the same memory); SP, full[rows, D] =
 * all-gather of every rank's local[rows/TP, D]. */
vfm_status tp_region_enter_forward(const TpContext *c, Tensor *full, const Tensor *local);
/* dfull[rows, D]: the summed input gradient of the region's column-parallel linears (partial: each
 * rank's linears read only its slice of the weights). No SP: dlocal = ordered all-reduce of dfull
 * (dlocal may be dfull); SP: dlocal[rows/TP, D] = ordered reduce-scatter. dfull is clobbered. */
vfm_status tp_region_enter_backward(const TpContext *c, Tensor *dlocal, Tensor *dfull);
/* Leaving a region: partial[rows, D] = the row-parallel linear's output on this rank. No SP,
 * local = ordered all-reduce (local may be partial); SP, local[rows/TP, D] = ordered
 * reduce-scatter. partial is clobbered. */
vfm_status tp_region_exit_forward(const TpContext *c, Tensor *local, Tensor *partial);
/* No SP, dpartial = dlocal (copied unless the same memory); SP, dpartial[rows, D] = all-gather. */
vfm_status tp_region_exit_backward(const TpContext *c, Tensor *dpartial, const Tensor *dlocal);

/* Between regions under SP: this rank's rows of a whole-pack tensor (inputs: tokens, tok2sample,
 * positions, loss mask; any dtype), and the inverse gather (e.g. to look at a whole output). Without
 * SP both are copies. */
vfm_status tp_sp_scatter(const TpContext *c, Tensor *local, const Tensor *full);
vfm_status tp_sp_gather(const TpContext *c, Tensor *full, const Tensor *local);

#endif
