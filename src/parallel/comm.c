/* Comm objects: creation, argument checks, one-process groups, dispatch to the MPI or NCCL
 * backend (see comm.h); the host helpers the backends share are in comm_host.c. */
#include "comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_internal.h"

static const char *backend_name(CommBackend b) { return b == COMM_BACKEND_NCCL ? "nccl" : "mpi"; }

static vfm_status op_error(const Comm *c, const char *op, vfm_status code, const char *why) {
    return vfm_fail(code, "%s over %s (%d rank%s, %s): %s", op, c->name, c->size, c->size == 1 ? "" : "s",
                    backend_name(c->backend), why);
}

#ifndef VFM_MPI
/* Without MPI only one-process groups exist; these are never reached. */
vfm_status mpi_comm_open(Comm *c) { return op_error(c, "create", VFM_ERR_UNSUPPORTED, "this build has no MPI"); }
void mpi_comm_close(Comm *c) { (void)c; }
int comm_world_rank(void) { return 0; }
#define NO_MPI(...) return op_error(c, __func__ + 4, VFM_ERR_UNSUPPORTED, "this build has no MPI")
vfm_status mpi_all_reduce(Comm *c, void *b, int64_t n, DType dt, CommOp op) { (void)b, (void)n, (void)dt, (void)op; NO_MPI(); }
vfm_status mpi_reduce_scatter_v(Comm *c, const void *s, void *r, const int64_t *n, DType dt, CommOp op) { (void)s, (void)r, (void)n, (void)dt, (void)op; NO_MPI(); }
vfm_status mpi_all_gather_v(Comm *c, const void *s, void *r, const int64_t *n, DType dt) { (void)s, (void)r, (void)n, (void)dt; NO_MPI(); }
vfm_status mpi_broadcast(Comm *c, void *b, int64_t n, DType dt, int root) { (void)b, (void)n, (void)dt, (void)root; NO_MPI(); }
vfm_status mpi_send(Comm *c, const void *b, int64_t n, DType dt, int p) { (void)b, (void)n, (void)dt, (void)p; NO_MPI(); }
vfm_status mpi_recv(Comm *c, void *b, int64_t n, DType dt, int p) { (void)b, (void)n, (void)dt, (void)p; NO_MPI(); }
vfm_status mpi_all_to_all_v(Comm *c, const void *s, const int64_t *sc, const int64_t *sd, void *r, const int64_t *rc,
                            const int64_t *rd, DType dt) { (void)s, (void)sc, (void)sd, (void)r, (void)rc, (void)rd, (void)dt; NO_MPI(); }
vfm_status mpi_barrier(Comm *c) { NO_MPI(); }
vfm_status mpi_exchange_start(Comm *c, const CommP2P *o, int n, void **p) { (void)o, (void)n, (void)p; NO_MPI(); }
vfm_status mpi_wait(Comm *c, void *p) { (void)p; NO_MPI(); }
#endif

#ifndef VFM_NCCL
#define NO_NCCL(...) return op_error(c, __func__ + 5, VFM_ERR_UNSUPPORTED, "this build has no NCCL (needs nvcc and nccl.h)")
vfm_status nccl_backend_load(void) {
    return vfm_fail(VFM_ERR_UNSUPPORTED, "this build has no NCCL backend (it needs nvcc and nccl.h at build time)");
}
vfm_status nccl_unique_id(unsigned char id[COMM_NCCL_ID_BYTES]) { (void)id; return nccl_backend_load(); }
vfm_status nccl_comm_open(Comm *c, const unsigned char id[COMM_NCCL_ID_BYTES]) { (void)id; NO_NCCL(); }
void nccl_comm_close(Comm *c) { (void)c; }
vfm_status nccl_all_reduce(Comm *c, void *b, int64_t n, DType dt, CommOp op) { (void)b, (void)n, (void)dt, (void)op; NO_NCCL(); }
vfm_status nccl_reduce_scatter_v(Comm *c, const void *s, void *r, const int64_t *n, DType dt, CommOp op) { (void)s, (void)r, (void)n, (void)dt, (void)op; NO_NCCL(); }
vfm_status nccl_all_gather_v(Comm *c, const void *s, void *r, const int64_t *n, DType dt) { (void)s, (void)r, (void)n, (void)dt; NO_NCCL(); }
vfm_status nccl_broadcast(Comm *c, void *b, int64_t n, DType dt, int root) { (void)b, (void)n, (void)dt, (void)root; NO_NCCL(); }
vfm_status nccl_send(Comm *c, const void *b, int64_t n, DType dt, int p) { (void)b, (void)n, (void)dt, (void)p; NO_NCCL(); }
vfm_status nccl_recv(Comm *c, void *b, int64_t n, DType dt, int p) { (void)b, (void)n, (void)dt, (void)p; NO_NCCL(); }
vfm_status nccl_all_to_all_v(Comm *c, const void *s, const int64_t *sc, const int64_t *sd, void *r, const int64_t *rc,
                             const int64_t *rd, DType dt) { (void)s, (void)sc, (void)sd, (void)r, (void)rc, (void)rd, (void)dt; NO_NCCL(); }
vfm_status nccl_barrier(Comm *c) { NO_NCCL(); }
vfm_status nccl_exchange_start(Comm *c, const CommP2P *o, int n, void **p) { (void)o, (void)n, (void)p; NO_NCCL(); }
vfm_status nccl_wait(Comm *c, void *p) { (void)p; NO_NCCL(); }
vfm_status nccl_all_gather_v_start(Comm *c, const void *s, void *r, const int64_t *n, DType dt, void **p) { (void)s, (void)r, (void)n, (void)dt, (void)p; NO_NCCL(); }
vfm_status nccl_reduce_scatter_v_start(Comm *c, const void *s, void *r, const int64_t *n, DType dt, CommOp op, void **p) { (void)s, (void)r, (void)n, (void)dt, (void)op, (void)p; NO_NCCL(); }
vfm_status nccl_all_reduce_start(Comm *c, void *b, int64_t n, DType dt, CommOp op, void **p) { (void)b, (void)n, (void)dt, (void)op, (void)p; NO_NCCL(); }
vfm_status nccl_sum_rows_ordered(void *d, const void *r, int n, int64_t k, DType dt) {
    (void)d, (void)r, (void)n, (void)k, (void)dt;
    return nccl_backend_load();
}
#endif

#ifndef VFM_CUDA
vfm_status comm_bind_gpu(int local_rank, int *device) {
    (void)local_rank;
    *device = -1;
    return vfm_fail(VFM_ERR_UNSUPPORTED, "no GPU to bind: this build has no CUDA");
}
#endif

int comm_nccl_available(void) { return nccl_backend_load() == VFM_OK; }

/* ---- creation ------------------------------------------------------------------------- */

vfm_status comm_create(Comm *c, const char *name, CommBackend backend, const int *members, int n) {
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "%s", name);
    c->backend = backend;
    c->size = n;
    int me = comm_world_rank();
    c->rank = -1;
    if (n < 1) return vfm_fail(VFM_ERR_INTERNAL, "comm %s: %d members", name, n);
    c->members = malloc((size_t)n * sizeof *c->members);
    c->impl = calloc(1, sizeof *c->impl);
    if (!c->members || !c->impl) {
        comm_free(c);
        return vfm_fail(VFM_ERR_NOMEM, "comm %s", name);
    }
    for (int i = 0; i < n; i++) {
        c->members[i] = members[i];
        if (members[i] == me) c->rank = i;
    }
    if (c->rank < 0) {
        comm_free(c);
        return vfm_fail(VFM_ERR_INTERNAL, "comm %s: this process (rank %d) is not among its %d members", name, me, n);
    }
    vfm_status s = VFM_OK;
    if (n > 1) s = mpi_comm_open(c);
    if (s == VFM_OK && backend == COMM_BACKEND_NCCL) {
        unsigned char id[COMM_NCCL_ID_BYTES] = {0};
        if (c->rank == 0) s = nccl_unique_id(id);
        if (n > 1) {
            /* rank 0's failure must not leave the others waiting for an id: send a flag with it */
            unsigned char msg[COMM_NCCL_ID_BYTES + 2] = {0};
            msg[0] = s == VFM_OK;
            memcpy(msg + 1, id, sizeof id);
            vfm_status b = mpi_broadcast(c, msg, sizeof msg / 2, DT_BF16, 0); /* bytes as 16-bit words */
            if (b != VFM_OK) s = b;
            else if (!msg[0] && s == VFM_OK) s = op_error(c, "create", VFM_ERR_UNSUPPORTED, "rank 0 could not make an NCCL id");
            memcpy(id, msg + 1, sizeof id);
        }
        if (s == VFM_OK) s = nccl_comm_open(c, id);
    }
    if (s != VFM_OK) comm_free(c);
    return s;
}

vfm_status comm_create_group(Comm *c, const ParallelLayout *l, GroupKind kind, CommBackend backend) {
    int n = group_size(l, kind);
    int *members = malloc((size_t)n * sizeof *members);
    if (!members) return vfm_fail(VFM_ERR_NOMEM, "group %s", group_kind_name(kind));
    group_members(l, kind, l->rank, members);
    vfm_status s = comm_create(c, group_kind_name(kind), backend, members, n);
    free(members);
    return s;
}

void comm_free(Comm *c) {
    if (c->impl) {
        if (c->impl->nccl) nccl_comm_close(c);
        if (c->impl->mpi) mpi_comm_close(c);
        free(c->impl->scratch);
        comm_stage_free(c);
        free(c->impl);
    }
    free(c->members);
    c->impl = NULL;
    c->members = NULL;
}

/* ---- checks ----------------------------------------------------------------------------- */

/* library_reduces: the backend's own reduction (COMM_SUM, COMM_MAX), which MPI has no bf16 for;
 * COMM_SUM_ORDERED sums bf16 itself on both backends. */
static vfm_status check_dtype(const Comm *c, const char *op, DType dt, int library_reduces) {
    if (dt != DT_F32 && dt != DT_F64 && dt != DT_I32 && dt != DT_I64 && dt != DT_BF16)
        return op_error(c, op, VFM_ERR_UNSUPPORTED, "unknown dtype");
    if (library_reduces && dt == DT_BF16 && c->backend == COMM_BACKEND_MPI)
        return op_error(c, op, VFM_ERR_UNSUPPORTED, "MPI cannot reduce bf16 itself (reduce in f32, or COMM_SUM_ORDERED)");
    return VFM_OK;
}

static vfm_status check_buf(const Comm *c, const char *op, const void *p, int64_t count) {
    if (count < 0) return op_error(c, op, VFM_ERR_INTERNAL, "negative count");
    if (count > 0 && !p) return op_error(c, op, VFM_ERR_INTERNAL, "NULL buffer");
    return VFM_OK;
}

static vfm_status check_counts(const Comm *c, const char *op, const int64_t *counts, int64_t *total) {
    *total = 0;
    for (int j = 0; j < c->size; j++) {
        if (counts[j] < 0) return op_error(c, op, VFM_ERR_INTERNAL, "negative count");
        *total += counts[j];
    }
    return VFM_OK;
}

static vfm_status check_rank(const Comm *c, const char *op, int r, const char *what) {
    if (r < 0 || r >= c->size) {
        char why[96];
        snprintf(why, sizeof why, "%s %d is not a rank of the group", what, r);
        return op_error(c, op, VFM_ERR_INTERNAL, why);
    }
    return VFM_OK;
}

/* A one-rank group's copy (host or GPU memory). */
#define LOCAL_COPY(dst, src, bytes) VFM_TRY(comm_local_copy((dst), (src), (bytes)))

/* MPI backend with GPU buffers: the backend call fn(c, <host send>, <host recv>, ...) on host copies. */
#define STAGED(send, send_bytes, recv, recv_bytes, fn, ...)                                   \
    do {                                                                                    \
        if (comm_stage_wanted(c, (send), (recv))) {                                          \
            CommStaged st_;                                                                 \
            VFM_TRY(comm_stage_in(c, &st_, (send), (send_bytes), (recv), (recv_bytes)));     \
            return comm_stage_out(&st_, fn(c, __VA_ARGS__));                                \
        }                                                                                   \
    } while (0)

#define BACKEND(fn, ...) (c->backend == COMM_BACKEND_NCCL ? nccl_##fn(__VA_ARGS__) : mpi_##fn(__VA_ARGS__))

/* One-process MPI-backend groups are handled here and never reach MPI. */
#define SELF_GROUP (c->size == 1 && c->backend == COMM_BACKEND_MPI)

/* ---- collectives -------------------------------------------------------------------------- */

vfm_status comm_all_reduce(Comm *c, void *buf, int64_t count, DType dt, CommOp op) {
    VFM_TRY(check_dtype(c, "all_reduce", dt, op != COMM_SUM_ORDERED));
    VFM_TRY(check_buf(c, "all_reduce", buf, count));
    if (SELF_GROUP || count == 0) return VFM_OK;
    size_t b = (size_t)count * dtype_size(dt);
    STAGED(buf, b, buf, b, mpi_all_reduce, st_.host_recv, count, dt, op);
    return BACKEND(all_reduce, c, buf, count, dt, op);
}

vfm_status comm_reduce_scatter_v(Comm *c, const void *send, void *recv, const int64_t *counts, DType dt, CommOp op) {
    int64_t total;
    VFM_TRY(check_dtype(c, "reduce_scatter", dt, op != COMM_SUM_ORDERED));
    VFM_TRY(check_counts(c, "reduce_scatter", counts, &total));
    VFM_TRY(check_buf(c, "reduce_scatter", send, total));
    VFM_TRY(check_buf(c, "reduce_scatter", recv, counts[c->rank]));
    size_t es = dtype_size(dt);
    if (SELF_GROUP) {
        LOCAL_COPY(recv, send, (size_t)counts[0] * es);
        return VFM_OK;
    }
    if (total == 0) return VFM_OK;
    STAGED(send, (size_t)total * es, recv, (size_t)counts[c->rank] * es, mpi_reduce_scatter_v, st_.host_send,
           st_.host_recv, counts, dt, op);
    return BACKEND(reduce_scatter_v, c, send, recv, counts, dt, op);
}

static vfm_status equal_counts(const Comm *c, int64_t count, int64_t **out) {
    *out = malloc((size_t)c->size * sizeof **out);
    if (!*out) return vfm_fail(VFM_ERR_NOMEM, "comm %s: counts", c->name);
    for (int j = 0; j < c->size; j++) (*out)[j] = count;
    return VFM_OK;
}

vfm_status comm_reduce_scatter(Comm *c, const void *send, void *recv, int64_t count, DType dt, CommOp op) {
    int64_t *counts;
    VFM_TRY(equal_counts(c, count, &counts));
    vfm_status s = comm_reduce_scatter_v(c, send, recv, counts, dt, op);
    free(counts);
    return s;
}

vfm_status comm_all_gather_v(Comm *c, const void *send, void *recv, const int64_t *counts, DType dt) {
    int64_t total;
    VFM_TRY(check_dtype(c, "all_gather", dt, 0));
    VFM_TRY(check_counts(c, "all_gather", counts, &total));
    VFM_TRY(check_buf(c, "all_gather", send, counts[c->rank]));
    VFM_TRY(check_buf(c, "all_gather", recv, total));
    size_t es = dtype_size(dt);
    if (SELF_GROUP) {
        LOCAL_COPY(recv, send, (size_t)counts[0] * es);
        return VFM_OK;
    }
    if (total == 0) return VFM_OK;
    STAGED(send, (size_t)counts[c->rank] * es, recv, (size_t)total * es, mpi_all_gather_v, st_.host_send, st_.host_recv,
           counts, dt);
    return BACKEND(all_gather_v, c, send, recv, counts, dt);
}

vfm_status comm_all_gather(Comm *c, const void *send, void *recv, int64_t count, DType dt) {
    int64_t *counts;
    VFM_TRY(equal_counts(c, count, &counts));
    vfm_status s = comm_all_gather_v(c, send, recv, counts, dt);
    free(counts);
    return s;
}

vfm_status comm_broadcast(Comm *c, void *buf, int64_t count, DType dt, int root) {
    VFM_TRY(check_dtype(c, "broadcast", dt, 0));
    VFM_TRY(check_rank(c, "broadcast", root, "root"));
    VFM_TRY(check_buf(c, "broadcast", buf, count));
    if (SELF_GROUP || count == 0) return VFM_OK;
    size_t b = (size_t)count * dtype_size(dt);
    STAGED(buf, b, buf, b, mpi_broadcast, st_.host_recv, count, dt, root);
    return BACKEND(broadcast, c, buf, count, dt, root);
}

vfm_status comm_send(Comm *c, const void *buf, int64_t count, DType dt, int peer) {
    VFM_TRY(check_dtype(c, "send", dt, 0));
    VFM_TRY(check_rank(c, "send", peer, "peer"));
    if (peer == c->rank) return op_error(c, "send", VFM_ERR_INTERNAL, "peer is this rank");
    VFM_TRY(check_buf(c, "send", buf, count));
    c->bytes_sent += (double)count * (double)dtype_size(dt);
    STAGED(buf, (size_t)count * dtype_size(dt), NULL, 0, mpi_send, st_.host_send, count, dt, peer);
    return BACKEND(send, c, buf, count, dt, peer);
}

vfm_status comm_recv(Comm *c, void *buf, int64_t count, DType dt, int peer) {
    VFM_TRY(check_dtype(c, "recv", dt, 0));
    VFM_TRY(check_rank(c, "recv", peer, "peer"));
    if (peer == c->rank) return op_error(c, "recv", VFM_ERR_INTERNAL, "peer is this rank");
    VFM_TRY(check_buf(c, "recv", buf, count));
    STAGED(NULL, 0, buf, (size_t)count * dtype_size(dt), mpi_recv, st_.host_recv, count, dt, peer);
    return BACKEND(recv, c, buf, count, dt, peer);
}

vfm_status comm_all_to_all_v(Comm *c, const void *send, const int64_t *send_counts, const int64_t *send_displs,
                             void *recv, const int64_t *recv_counts, const int64_t *recv_displs, DType dt) {
    VFM_TRY(check_dtype(c, "all_to_all", dt, 0));
    for (int j = 0; j < c->size; j++)
        if (send_counts[j] < 0 || recv_counts[j] < 0 || send_displs[j] < 0 || recv_displs[j] < 0)
            return op_error(c, "all_to_all", VFM_ERR_INTERNAL, "negative count or displacement");
    size_t es = dtype_size(dt);
    for (int j = 0; j < c->size; j++)
        if (j != c->rank) c->bytes_sent += (double)send_counts[j] * (double)es;
    if (SELF_GROUP) {
        if (send_counts[0] != recv_counts[0])
            return op_error(c, "all_to_all", VFM_ERR_INTERNAL, "send and receive counts differ");
        LOCAL_COPY((char *)recv + recv_displs[0] * es, (const char *)send + send_displs[0] * es, (size_t)send_counts[0] * es);
        return VFM_OK;
    }
    int64_t send_end = 0, recv_end = 0;
    for (int j = 0; j < c->size; j++) {
        if (send_displs[j] + send_counts[j] > send_end) send_end = send_displs[j] + send_counts[j];
        if (recv_displs[j] + recv_counts[j] > recv_end) recv_end = recv_displs[j] + recv_counts[j];
    }
    STAGED(send, (size_t)send_end * es, recv, (size_t)recv_end * es, mpi_all_to_all_v, st_.host_send, send_counts,
           send_displs, st_.host_recv, recv_counts, recv_displs, dt);
    return BACKEND(all_to_all_v, c, send, send_counts, send_displs, recv, recv_counts, recv_displs, dt);
}

vfm_status comm_all_to_all(Comm *c, const void *send, void *recv, int64_t count, DType dt) {
    int64_t *v = malloc(2 * (size_t)c->size * sizeof *v);
    if (!v) return vfm_fail(VFM_ERR_NOMEM, "comm %s: counts", c->name);
    for (int j = 0; j < c->size; j++) {
        v[j] = count;
        v[c->size + j] = (int64_t)j * count;
    }
    vfm_status s = check_buf(c, "all_to_all", send, count * c->size);
    if (s == VFM_OK) s = check_buf(c, "all_to_all", recv, count * c->size);
    if (s == VFM_OK) s = comm_all_to_all_v(c, send, v, v + c->size, recv, v, v + c->size, dt);
    free(v);
    return s;
}

vfm_status comm_barrier(Comm *c) {
    if (SELF_GROUP) return VFM_OK;
    return BACKEND(barrier, c);
}

/* ---- non-blocking point to point ------------------------------------------------------------ */

vfm_status comm_exchange_start(Comm *c, const CommP2P *ops, int n, CommRequest *req) {
    req->comm = c;
    req->pending = NULL;
    for (int i = 0; i < n; i++) {
        const char *op = ops[i].is_send ? "isend" : "irecv";
        VFM_TRY(check_dtype(c, op, ops[i].dtype, 0));
        VFM_TRY(check_rank(c, op, ops[i].peer, "peer"));
        if (ops[i].peer == c->rank) return op_error(c, op, VFM_ERR_INTERNAL, "peer is this rank");
        VFM_TRY(check_buf(c, op, ops[i].buf, ops[i].count));
    }
    if (n == 0) return VFM_OK;
    for (int i = 0; i < n; i++)
        if (ops[i].is_send) c->bytes_sent += (double)ops[i].count * (double)dtype_size(ops[i].dtype);
    if (comm_stage_exchange_wanted(c, ops, n)) return comm_stage_exchange_start(c, ops, n, &req->pending);
    return BACKEND(exchange_start, c, ops, n, &req->pending);
}

vfm_status comm_wait(CommRequest *req) {
    if (!req->pending) return VFM_OK;
    Comm *c = req->comm;
    void *p = req->pending;
    req->pending = NULL;
    if (comm_stage_exchange_owns(p)) return comm_stage_exchange_wait(c, p);
    return BACKEND(wait, c, p);
}

vfm_status comm_isend(Comm *c, const void *buf, int64_t count, DType dt, int peer, CommRequest *req) {
    CommP2P op = {1, (void *)buf, count, dt, peer};
    return comm_exchange_start(c, &op, 1, req);
}

vfm_status comm_irecv(Comm *c, void *buf, int64_t count, DType dt, int peer, CommRequest *req) {
    CommP2P op = {0, buf, count, dt, peer};
    return comm_exchange_start(c, &op, 1, req);
}

vfm_status comm_sendrecv(Comm *c, const void *send, int64_t send_count, int dst, void *recv, int64_t recv_count,
                         int src, DType dt) {
    CommP2P ops[2];
    int n = 0;
    if (dst >= 0) ops[n++] = (CommP2P){1, (void *)send, send_count, dt, dst};
    if (src >= 0) ops[n++] = (CommP2P){0, recv, recv_count, dt, src};
    CommRequest req;
    VFM_TRY(comm_exchange_start(c, ops, n, &req));
    return comm_wait(&req);
}

/* ---- non-blocking collectives ------------------------------------------------------------- */

vfm_status comm_all_gather_start(Comm *c, const void *send, void *recv, int64_t count, DType dt, CommRequest *req) {
    req->comm = c;
    req->pending = NULL;
    if (c->backend != COMM_BACKEND_NCCL) return comm_all_gather(c, send, recv, count, dt);
    int64_t *counts;
    VFM_TRY(check_dtype(c, "all_gather", dt, 0));
    VFM_TRY(check_buf(c, "all_gather", send, count));
    VFM_TRY(check_buf(c, "all_gather", recv, count * c->size));
    if (count == 0) return VFM_OK;
    VFM_TRY(equal_counts(c, count, &counts));
    vfm_status s = nccl_all_gather_v_start(c, send, recv, counts, dt, &req->pending);
    free(counts);
    return s;
}

vfm_status comm_reduce_scatter_v_start(Comm *c, const void *send, void *recv, const int64_t *counts, DType dt,
                                       CommOp op, CommRequest *req) {
    req->comm = c;
    req->pending = NULL;
    if (c->backend != COMM_BACKEND_NCCL) return comm_reduce_scatter_v(c, send, recv, counts, dt, op);
    int64_t total;
    VFM_TRY(check_dtype(c, "reduce_scatter", dt, op != COMM_SUM_ORDERED));
    VFM_TRY(check_counts(c, "reduce_scatter", counts, &total));
    VFM_TRY(check_buf(c, "reduce_scatter", send, total));
    VFM_TRY(check_buf(c, "reduce_scatter", recv, counts[c->rank]));
    if (total == 0) return VFM_OK;
    return nccl_reduce_scatter_v_start(c, send, recv, counts, dt, op, &req->pending);
}

vfm_status comm_reduce_scatter_start(Comm *c, const void *send, void *recv, int64_t count, DType dt, CommOp op,
                                     CommRequest *req) {
    int64_t *counts;
    VFM_TRY(equal_counts(c, count, &counts));
    vfm_status s = comm_reduce_scatter_v_start(c, send, recv, counts, dt, op, req);
    free(counts);
    return s;
}

vfm_status comm_all_reduce_start(Comm *c, void *buf, int64_t count, DType dt, CommOp op, CommRequest *req) {
    req->comm = c;
    req->pending = NULL;
    if (c->backend != COMM_BACKEND_NCCL) return comm_all_reduce(c, buf, count, dt, op);
    VFM_TRY(check_dtype(c, "all_reduce", dt, op != COMM_SUM_ORDERED));
    VFM_TRY(check_buf(c, "all_reduce", buf, count));
    if (count == 0) return VFM_OK;
    return nccl_all_reduce_start(c, buf, count, dt, op, &req->pending);
}
