/* Pipeline-parallel schedules as pure functions (design §4): for P stages, M micro-batches and V
 * model chunks per stage, the ordered list of what one stage does — forward or backward of
 * micro-batch m on its local chunk v, and communication steps that post sends and receives of
 * hidden states (forward) and their gradients (backward) together — as Megatron-LM's 1F1B and
 * interleaved 1F1B run them (non-overlapped, batched p2p); the checker that simulates all stages
 * together; and the split of the transformer blocks over the P·V chunks.
 *
 * Chunks. Global chunk g = v·P + p is local chunk v of stage p; g runs before g + 1, so the
 * hidden state goes stage p → p + 1 and, at the end of a round, stage P−1 → stage 0 (chunk v → v+1).
 * Chunk 0 (stage 0) starts from the patch embedder; chunk P·V − 1 (stage P−1) ends with the final
 * layer and the loss. A message is identified by (kind, micro-batch, boundary b): the activation
 * leaving global chunk b−1 for chunk b, or the gradient going back from chunk b to chunk b−1.
 *
 * 1F1B (V = 1), stage p: warmup W = min(P−p−1, M) forwards; M−W steady pairs F(W+i), B(i); W
 * cooldown backwards. Any M ≥ 1 (M < P leaves stages idle longer). At most min(P−p, M) micro-batches
 * are in flight (forward done, backward not) on stage p.
 *
 * Interleaved 1F1B (V > 1): micro-batches go through the chunks in groups of G (Megatron's
 * microbatch_group_size_per_vp_stage): chunk 0 of the group's micro-batches, then chunk 1, …;
 * backward visits the chunks in reverse. Warmup = 2(P−p−1) + (V−1)·G virtual steps (capped at
 * M·V). Megatron requires P ≤ G ≤ M and M mod G = 0 or ≥ P; with its default G = P that means M a
 * multiple of P. vfm picks G itself (pp_interleave_group): G = P when P divides M, otherwise the
 * smallest G in (P, M] that Megatron's rule accepts (M = 2P+1 → G = P+1; M = 5, P = 4 → G = 5),
 * at the price of more warmup (more activations in flight). M < P is refused (VFM_ERR_USAGE): no
 * valid G exists, and the interleaved schedule would have to wait on itself.
 *
 * Communication steps are posted as one exchange (comm_exchange_start) and completed before the
 * next action: every send is matched by a receive in the peer's step of the same round, which the
 * checker proves (a step completes when each of its messages meets the peer's matching message
 * in the peer's current step — the rendezvous rule of MPI_Isend/Irecv + Waitall and NCCL groups).
 * Messages between a pair arrive in the order posted; the checker asserts the k-th send p→q and
 * the k-th receive at q from p carry the same (kind, micro-batch, boundary). */
#ifndef VFM_PP_SCHEDULE_H
#define VFM_PP_SCHEDULE_H

#include <stddef.h>

#include "core/error.h"

typedef enum { PP_FORWARD, PP_BACKWARD, PP_COMM } PpActionKind;
typedef enum { PP_SEND_ACT, PP_RECV_ACT, PP_SEND_GRAD, PP_RECV_GRAD } PpMsgKind;

/* One message of a communication step, named by the buffer it moves on this stage:
 *   PP_SEND_ACT  the output of (mb, chunk) to the next stage;
 *   PP_RECV_ACT  the input of (mb, chunk) from the previous stage;
 *   PP_SEND_GRAD the gradient of the input of (mb, chunk) to the previous stage;
 *   PP_RECV_GRAD the gradient of the output of (mb, chunk) from the next stage. */
typedef struct PpMsg {
    PpMsgKind kind;
    int mb, chunk;   /* local chunk v */
    int peer;        /* PP group rank */
} PpMsg;

#define PP_MAX_MSGS 4

typedef struct PpAction {
    PpActionKind kind;
    int mb, chunk;             /* PP_FORWARD / PP_BACKWARD */
    int n_msgs;                /* PP_COMM: 1..PP_MAX_MSGS, posted together */
    PpMsg msgs[PP_MAX_MSGS];
} PpAction;

typedef struct PpSchedule {
    int stages, microbatches, chunks, stage; /* P, M, V, this stage p */
    int group;                 /* interleaved: micro-batches per group G (0 for 1F1B) */
    int warmup;                /* forwards before the first backward (virtual steps when V > 1) */
    int forward_only;          /* 1: no backward (validation, sampling) */
    PpAction *actions;
    int n_actions, capacity;
} PpSchedule;

/* Megatron's 1F1B for stage `stage` of `stages` (≥ 1) over `microbatches` (≥ 1). */
vfm_status pp_schedule_1f1b(PpSchedule *s, int stages, int microbatches, int stage);
/* Interleaved 1F1B with `chunks` ≥ 2 chunks per stage; group = 0 picks G with
 * pp_interleave_group, otherwise G is checked against Megatron's rule. */
vfm_status pp_schedule_interleaved(PpSchedule *s, int stages, int microbatches, int chunks, int group, int stage);
/* 1F1B when chunks = 1, else interleaved with G chosen by vfm. */
vfm_status pp_schedule_build(PpSchedule *s, int stages, int microbatches, int chunks, int stage);
/* Forwards only (validation, sampling; Megatron's forward_only): every micro-batch through every
 * chunk in the schedule's forward order, no backward; the runner frees each input after its
 * forward. chunks > 1 follows the interleaved table (same rules for M and G). */
vfm_status pp_schedule_forward_only(PpSchedule *s, int stages, int microbatches, int chunks, int stage);
void pp_schedule_free(PpSchedule *s);
/* The most (micro-batch, chunk) pairs the schedule holds between forward and backward: the
 * activation slots its stage needs (the trainer's, and `vfm plan`'s count). */
int pp_schedule_in_flight(const PpSchedule *s);
/* G for the interleaved schedule (above); VFM_ERR_USAGE naming the keys when M < P. */
vfm_status pp_interleave_group(int stages, int microbatches, int *group);

/* Runs the schedules of all P stages (sched[p] for stage p, same P, M, V) against each other:
 * every forward and backward (forward only: every forward) of every (micro-batch, chunk) exactly once, a forward's input
 * received before it (except global chunk 0), a backward after its forward and after its output
 * gradient arrived (except the last global chunk), every message matched in FIFO order with the
 * same identity, and no deadlock. When max_in_flight[p] ≥ 0 it also bounds the micro-batch·chunk
 * pairs held between forward and backward on stage p. Returns 1 when all hold; otherwise 0 with
 * a description (stage, action index, what failed) in err. */
int pp_schedule_check(const PpSchedule *const *sched, const int *max_in_flight, char *err, size_t err_size);

/* One line per action ("F m3 c1", "B m0 c0", "C send_act m2 c0 →1, recv_grad m0 c0 ←1") into
 * buf; for docs and failure messages. */
void pp_schedule_format(const PpSchedule *s, char *buf, size_t size);

/* ---- blocks over chunks -------------------------------------------------------------------- */
/* Global chunk g of C = stages·chunks holds blocks [⌊g·L/C⌋, ⌊(g+1)·L/C⌋): uneven splits are
 * allowed, sizes differ by at most one and the larger chunks come last (the first stage also
 * carries the patch embedder). L ≥ C is required (VFM_ERR_USAGE naming model.num_layers and the
 * pipeline keys otherwise). */
vfm_status pp_check_layers(int num_layers, int stages, int chunks);
void pp_chunk_blocks(int num_layers, int stages, int chunks, int stage, int chunk, int *first, int *count);
/* The stage and local chunk holding block l. */
void pp_block_owner(int num_layers, int stages, int chunks, int block, int *stage, int *chunk);

#endif
