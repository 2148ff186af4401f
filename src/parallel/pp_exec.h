/* Runs one stage's pipeline schedule (pp_schedule.h) over the PP comm: calls the stage's forward
 * and backward for each (micro-batch, chunk) in schedule order, and moves the hidden states and
 * their gradients between stages with the non-blocking p2p exchange (comm_exchange_start /
 * comm_wait), one exchange per communication step.
 *
 * Buffers (act_count elements of dtype on device each, owned by the runner):
 *   in(mb, v)   the received input of chunk v: valid from its receive until backward(mb, v) returns
 *               (the stage may keep a pointer to it as a saved activation); forward only: until
 *               forward(mb, v) returns;
 *   out(mb, v)  filled by forward(mb, v), sent, freed when the send completed;
 *   gout(mb, v) the received gradient of the output, valid during backward(mb, v);
 *   gin(mb, v)  filled by backward(mb, v), sent, freed when the send completed.
 * The first global chunk gets in = NULL (it starts from the batch) and computes no gin; the last
 * one gets out = NULL and gout = NULL (it ends in the loss, whose gradient it computes itself).
 * Every (micro-batch, chunk) runs its forward before its backward, and each chunk sees its
 * micro-batches in increasing order in both directions, so gradients accumulated over
 * micro-batches add in the same order as on one rank. A fixed act_count per run is the fixed
 * pack length of design §3 (every pack padded to it). */
#ifndef VFM_PP_EXEC_H
#define VFM_PP_EXEC_H

#include <stdint.h>

#include "parallel/comm.h"
#include "parallel/pp_schedule.h"

typedef struct PpStage {
    void *ctx;
    /* x[act_count] (NULL on global chunk 0) → y[act_count] (NULL on the last global chunk) */
    vfm_status (*forward)(void *ctx, int mb, int chunk, const void *x, void *y);
    /* dy[act_count] (NULL on the last global chunk) → dx[act_count] (NULL on global chunk 0);
     * never called for a forward-only schedule (may be NULL then) */
    vfm_status (*backward)(void *ctx, int mb, int chunk, const void *dy, void *dx);
} PpStage;

typedef struct PpRunStats {
    int max_live_buffers;   /* most runner buffers alive at once */
    int exchanges;          /* communication steps posted */
} PpRunStats;

/* pp: the PP group (group rank = stage; NULL or one rank when P = 1). stats may be NULL. */
vfm_status pp_run(const PpSchedule *s, Comm *pp, const PpStage *stage, int64_t act_count, DType dtype, Device device,
                  PpRunStats *stats);

#endif
