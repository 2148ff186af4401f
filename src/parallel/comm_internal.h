/* Between comm.c (argument checks, one-rank groups, dispatch) and the backends comm_mpi.c and
 * comm_nccl.cu. Not for use outside src/parallel. */
#ifndef VFM_COMM_INTERNAL_H
#define VFM_COMM_INTERNAL_H

#include <stddef.h>

#include "parallel/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

struct CommImpl {
    void *mpi;             /* MPI backend state (an MPI_Comm), NULL for a one-process group */
    void *nccl;            /* NCCL backend state, NULL unless backend NCCL */
    unsigned char *scratch; /* host scratch for ordered sums */
    size_t scratch_bytes;
    void *stage[2];         /* host copies of GPU buffers on the MPI backend (comm_stage.c) */
    size_t stage_bytes[2];
    int stage_pinned[2];
};

/* Host scratch of at least bytes (kept for the comm's life). */
vfm_status comm_scratch(Comm *c, size_t bytes, void **out);
/* dst[count] = rows[0] + rows[1] + ... + rows[n_rows-1] (rows[n_rows][count], host), left to right
 * in the dtype; dst may alias rows[0]. The CPU definition of COMM_SUM_ORDERED. f32, f64, i32 and
 * i64; another dtype is VFM_ERR_INTERNAL (nothing summed). */
vfm_status comm_sum_rows_ordered(void *dst, const void *rows, int n_rows, int64_t count, DType dt);
/* The calling process's world rank (0 without MPI). */
int comm_world_rank(void);

/* ---- GPU buffers on the MPI backend (comm_stage.c) ---- */
typedef struct CommStaged {
    void *host_send, *host_recv; /* what the MPI call reads and writes */
    void *dev_recv;              /* where host_recv goes back (NULL: recv is host memory) */
    size_t recv_bytes;
} CommStaged;
/* 1 when a call on c with these buffers needs host copies: MPI backend and a buffer on the GPU. */
int comm_stage_wanted(const Comm *c, const void *a, const void *b);
/* Waits for the GPU and copies send[send_bytes] and recv[recv_bytes] (either may be NULL / host
 * memory: then used as they are) to host memory; overlapping buffers share one copy, so in-place
 * calls stay in place. */
vfm_status comm_stage_in(Comm *c, CommStaged *st, const void *send, size_t send_bytes, void *recv,
                         size_t recv_bytes);
/* After the MPI call (its status `call`): copies the received bytes back to the GPU. */
vfm_status comm_stage_out(CommStaged *st, vfm_status call);
void comm_stage_free(Comm *c);
/* memmove for a one-rank group, host or device memory on either side. */
vfm_status comm_local_copy(void *dst, const void *src, size_t bytes);
int comm_stage_exchange_wanted(const Comm *c, const CommP2P *ops, int n);
vfm_status comm_stage_exchange_start(Comm *c, const CommP2P *ops, int n, void **pending);
vfm_status comm_stage_exchange_wait(Comm *c, void *pending);
/* 1 when pending came from comm_stage_exchange_start and is not waited for yet. */
int comm_stage_exchange_owns(const void *pending);

/* ---- MPI backend (comm_mpi.c); buffers on the host ---- */
vfm_status mpi_comm_open(Comm *c);
void mpi_comm_close(Comm *c);
vfm_status mpi_all_reduce(Comm *c, void *buf, int64_t count, DType dt, CommOp op);
vfm_status mpi_reduce_scatter_v(Comm *c, const void *send, void *recv, const int64_t *counts, DType dt, CommOp op);
vfm_status mpi_all_gather_v(Comm *c, const void *send, void *recv, const int64_t *counts, DType dt);
vfm_status mpi_broadcast(Comm *c, void *buf, int64_t count, DType dt, int root);
vfm_status mpi_send(Comm *c, const void *buf, int64_t count, DType dt, int peer);
vfm_status mpi_recv(Comm *c, void *buf, int64_t count, DType dt, int peer);
vfm_status mpi_all_to_all_v(Comm *c, const void *send, const int64_t *send_counts, const int64_t *send_displs,
                            void *recv, const int64_t *recv_counts, const int64_t *recv_displs, DType dt);
vfm_status mpi_barrier(Comm *c);
vfm_status mpi_exchange_start(Comm *c, const CommP2P *ops, int n, void **pending);
vfm_status mpi_wait(Comm *c, void *pending);

/* ---- NCCL backend (comm_nccl.cu); buffers on the current GPU ---- */
#define COMM_NCCL_ID_BYTES 128
vfm_status nccl_backend_load(void);
vfm_status nccl_unique_id(unsigned char id[COMM_NCCL_ID_BYTES]);
vfm_status nccl_comm_open(Comm *c, const unsigned char id[COMM_NCCL_ID_BYTES]);
void nccl_comm_close(Comm *c);
vfm_status nccl_all_reduce(Comm *c, void *buf, int64_t count, DType dt, CommOp op);
vfm_status nccl_reduce_scatter_v(Comm *c, const void *send, void *recv, const int64_t *counts, DType dt, CommOp op);
vfm_status nccl_all_gather_v(Comm *c, const void *send, void *recv, const int64_t *counts, DType dt);
vfm_status nccl_broadcast(Comm *c, void *buf, int64_t count, DType dt, int root);
vfm_status nccl_send(Comm *c, const void *buf, int64_t count, DType dt, int peer);
vfm_status nccl_recv(Comm *c, void *buf, int64_t count, DType dt, int peer);
vfm_status nccl_all_to_all_v(Comm *c, const void *send, const int64_t *send_counts, const int64_t *send_displs,
                             void *recv, const int64_t *recv_counts, const int64_t *recv_displs, DType dt);
vfm_status nccl_barrier(Comm *c);
vfm_status nccl_exchange_start(Comm *c, const CommP2P *ops, int n, void **pending);
vfm_status nccl_wait(Comm *c, void *pending);
/* As nccl_all_gather_v / nccl_reduce_scatter_v, left running on the comm's stream: *pending is
 * the event nccl_wait completes. */
vfm_status nccl_all_gather_v_start(Comm *c, const void *send, void *recv, const int64_t *counts, DType dt, void **pending);
vfm_status nccl_reduce_scatter_v_start(Comm *c, const void *send, void *recv, const int64_t *counts, DType dt, CommOp op,
                                       void **pending);
vfm_status nccl_all_reduce_start(Comm *c, void *buf, int64_t count, DType dt, CommOp op, void **pending);
/* The GPU twin of comm_sum_rows_ordered (device pointers; same bits): exposed for its test. */
vfm_status nccl_sum_rows_ordered(void *dst, const void *rows, int n_rows, int64_t count, DType dt);

#ifdef __cplusplus
}
#endif
#endif
