/* Collective communication over one process group: a Comm per group, with an MPI backend (CPU
 * buffers) or an NCCL backend (GPU buffers: one ncclComm per group, its unique id broadcast over
 * MPI, the device chosen from the local rank). Every call is collective over the group's members
 * (send/recv: the two peers) and returns when the result is in place, except the non-blocking
 * exchanges at the end (comm_exchange_start / comm_wait), which ring attention overlaps with
 * compute.
 *
 * A group of one process is a no-op comm: with the MPI backend it never calls MPI (gathers and
 * all-to-alls copy, reductions leave the buffer as it is), so a run without a launcher works
 * without an MPI runtime. With the NCCL backend a one-rank group is a real one-rank NCCL
 * communicator (no MPI needed for its id).
 *
 * Reduction order. COMM_SUM and COMM_MAX use the library's own algorithm (MPI's tree, NCCL's
 * ring): fast, but a float sum's bits depend on that algorithm and on the group size.
 * COMM_SUM_ORDERED is deterministic: element i of the result is
 *     ((x_0[i] + x_1[i]) + x_2[i]) + ... + x_{n-1}[i]
 * added in the buffer's own type, left to right in group rank order (= ascending global rank),
 * the same bits on every rank and on both backends. It is built from data movement only: every
 * element's n values are gathered to one place (an all-to-all of 1/n of the buffer to each rank,
 * or an all-gather of the whole buffer when it is small) and summed there in rank order, then the
 * sums are all-gathered. Gradients, the loss and the gradient norm use it, so a data-parallel run
 * does not depend on MPI's internal tree, and ZeRO-1's reduce-scatter gives exactly the bits of
 * the all-reduce restricted to the shard. It moves the same bytes as a ring reduce-scatter +
 * all-gather; the extra cost is the local sum.
 *
 * Buffers: the NCCL backend takes GPU memory; the MPI backend takes host memory, and also GPU
 * memory, which it stages through page-locked host copies (waiting for the GPU first: slow, for
 * tests and for two ranks sharing one GPU, which NCCL refuses).
 *
 * Dtypes: f32, f64, i32, i64 for everything; bf16 for data movement, COMM_SUM_ORDERED (both backends)
 * and NCCL's own reductions.
 * Counts are elements. Errors come back as a vfm_status whose message names the op and the group
 * ("all_reduce over dp×cp (4 ranks): ..."). */
#ifndef VFM_COMM_H
#define VFM_COMM_H

#include <stdint.h>

#include "core/tensor.h"
#include "parallel/groups.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { COMM_BACKEND_MPI, COMM_BACKEND_NCCL } CommBackend;
typedef enum {
    COMM_SUM,         /* the backend's reduction: order unspecified */
    COMM_MAX,
    COMM_SUM_ORDERED, /* deterministic: summed in group rank order (above) */
} CommOp;

typedef struct CommImpl CommImpl;

typedef struct Comm {
    char name[32];        /* for messages: "dp×cp", "tp", ... */
    CommBackend backend;
    int size, rank;       /* group size; this process's index in members */
    int *members;         /* [size] global ranks; index = group rank */
    CommImpl *impl;
    /* Payload this process has addressed to other members through point-to-point sends and
     * all-to-alls (what ST-DiT's byte counts read: docs/parallel.md); reductions and gathers are not
     * counted. The caller may reset it. */
    double bytes_sent;
} Comm;

/* A comm over the listed global ranks (the caller among them); collective over the members.
 * Every member must list the same ranks in the same order. */
vfm_status comm_create(Comm *c, const char *name, CommBackend backend, const int *members, int n);
/* The comm of the `kind` group holding this process (members from group_members); collective
 * over that group. */
vfm_status comm_create_group(Comm *c, const ParallelLayout *l, GroupKind kind, CommBackend backend);
void comm_free(Comm *c);

/* buf[count] (in place) = reduction over the group. */
vfm_status comm_all_reduce(Comm *c, void *buf, int64_t count, DType dt, CommOp op);
/* recv[count] = reduction over the group of send[rank·count : (rank+1)·count] (send[size·count]).
 * recv may lie inside send. */
vfm_status comm_reduce_scatter(Comm *c, const void *send, void *recv, int64_t count, DType dt, CommOp op);
/* As comm_reduce_scatter with pieces of unequal length: send holds the pieces back to back,
 * piece j (counts[j] elements, counts[size]) goes reduced to rank j; recv[counts[rank]]. */
vfm_status comm_reduce_scatter_v(Comm *c, const void *send, void *recv, const int64_t *counts, DType dt, CommOp op);
/* recv[size·count]: rank j's send[count] at recv[j·count]. send may be recv + rank·count (in place). */
vfm_status comm_all_gather(Comm *c, const void *send, void *recv, int64_t count, DType dt);
/* Unequal pieces back to back: rank j's send[counts[j]] at recv[Σ_{k<j} counts[k]]; in place when
 * send is where this rank's piece goes. */
vfm_status comm_all_gather_v(Comm *c, const void *send, void *recv, const int64_t *counts, DType dt);
/* buf[count] of group rank root to every member. */
vfm_status comm_broadcast(Comm *c, void *buf, int64_t count, DType dt, int root);
/* Point to point with group rank peer; messages between a pair arrive in the order sent. */
vfm_status comm_send(Comm *c, const void *buf, int64_t count, DType dt, int peer);
vfm_status comm_recv(Comm *c, void *buf, int64_t count, DType dt, int peer);
/* send[size·count]: block j goes to rank j; recv[size·count]: block j came from rank j. */
vfm_status comm_all_to_all(Comm *c, const void *send, void *recv, int64_t count, DType dt);
/* General form: send_counts/send_displs[size] and recv_counts/recv_displs[size] in elements. */
vfm_status comm_all_to_all_v(Comm *c, const void *send, const int64_t *send_counts, const int64_t *send_displs,
                             void *recv, const int64_t *recv_counts, const int64_t *recv_displs, DType dt);
vfm_status comm_barrier(Comm *c);

/* ---- non-blocking point to point --------------------------------------------------------- */
/* One send or receive of an exchange. */
typedef struct CommP2P {
    int is_send;      /* 1: send buf[count] to peer; 0: receive buf[count] from peer */
    void *buf;        /* a send's buffer is only read */
    int64_t count;
    DType dtype;
    int peer;         /* group rank, not this rank */
} CommP2P;

/* A posted exchange, completed by comm_wait (pending is NULL when nothing is outstanding). */
typedef struct CommRequest {
    Comm *comm;
    void *pending;    /* backend state */
} CommRequest;

/* Posts every send and receive of ops[n] together and returns at once (MPI: MPI_Isend/MPI_Irecv;
 * NCCL: one ncclGroup on the comm's stream), so the caller computes while the data moves; the
 * buffers must not be touched (receives) or changed (sends) until comm_wait. Two ranks that send
 * to each other in one exchange never deadlock (a ring step at P = 2 has the same peer on both
 * sides). Messages between a pair arrive in the order posted. On NCCL, exchanges run one after
 * another on the comm's stream: a pair exchanging data must post both directions in ONE exchange,
 * never as two (the first would wait for a receive queued behind it). */
vfm_status comm_exchange_start(Comm *c, const CommP2P *ops, int n, CommRequest *req);
/* Completes req (no-op when nothing is pending); receives are in place on return. */
vfm_status comm_wait(CommRequest *req);
/* One-message exchanges (see the NCCL note above). */
vfm_status comm_isend(Comm *c, const void *buf, int64_t count, DType dt, int peer, CommRequest *req);
vfm_status comm_irecv(Comm *c, void *buf, int64_t count, DType dt, int peer, CommRequest *req);
/* Blocking: send[send_count] to dst while receiving recv[recv_count] from src (a ring shift);
 * dst or src may be -1 for none. */
vfm_status comm_sendrecv(Comm *c, const void *send, int64_t send_count, int dst, void *recv, int64_t recv_count,
                         int src, DType dt);

/* ---- non-blocking collectives ------------------------------------------------------------- */
/* comm_all_gather / comm_reduce_scatter (equal pieces) posted without waiting, completed by
 * comm_wait: the prefetch of FSDP units. NCCL: enqueued on the comm's stream after the work issued
 * so far on the ops' stream (ops_stream(); an event orders them), an event recorded behind them
 * (ops of one comm run in posting order, so later ops on it wait for these); the ops' stream does
 * not wait for them — comm_wait before touching the buffers. MPI: the
 * host has no separate engine to overlap with, so the call completes at once and leaves nothing
 * pending. Buffers as for comm_exchange_start. */
vfm_status comm_all_gather_start(Comm *c, const void *send, void *recv, int64_t count, DType dt, CommRequest *req);
vfm_status comm_reduce_scatter_start(Comm *c, const void *send, void *recv, int64_t count, DType dt, CommOp op,
                                     CommRequest *req);
/* comm_reduce_scatter_v and comm_all_reduce posted the same way: the data-parallel gradient buckets,
 * reduced on the comm's stream while the backward goes on (NCCL). */
vfm_status comm_reduce_scatter_v_start(Comm *c, const void *send, void *recv, const int64_t *counts, DType dt,
                                       CommOp op, CommRequest *req);
vfm_status comm_all_reduce_start(Comm *c, void *buf, int64_t count, DType dt, CommOp op, CommRequest *req);

/* Makes GPU launch_gpu_for_local_rank(local_rank, count) current for this process (before any
 * NCCL comm is created); *device receives it. VFM_ERR_UNSUPPORTED without CUDA or a device. */
vfm_status comm_bind_gpu(int local_rank, int *device);
/* 1 when this build has the NCCL backend and libnccl.so.2 can be loaded. */
int comm_nccl_available(void);

#ifdef __cplusplus
}
#endif
#endif
