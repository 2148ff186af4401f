/* MPI backend of comm.h: host buffers, one MPI communicator per group (MPI_Comm_create_group,
 * collective over the members only), errors returned (MPI_ERRORS_RETURN) and named. */
#include "comm_internal.h"

#ifdef VFM_MPI
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parallel/launch.h"

/* Up to this many elements an ordered all-reduce all-gathers the whole buffer (one message);
 * above, it moves 1/n of the buffer to each rank (all-to-all), sums there and all-gathers. */
#define ORDERED_GATHER_MAX 1024
/* Elementwise reductions run in chunks of this many elements (MPI counts are int). */
#define REDUCE_CHUNK ((int64_t)1 << 27)

static MPI_Comm mcomm(const Comm *c) { return *(MPI_Comm *)c->impl->mpi; }

static MPI_Datatype mtype(DType dt) {
    switch (dt) {
    case DT_F32: return MPI_FLOAT;
    case DT_F64: return MPI_DOUBLE;
    case DT_I32: return MPI_INT32_T;
    case DT_I64: return MPI_INT64_T;
    default: return MPI_UINT16_T; /* bf16: moved, never reduced */
    }
}

static vfm_status mpi_error(const Comm *c, const char *op, int rc) {
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) snprintf(text, sizeof text, "MPI error %d", rc);
    return vfm_fail(VFM_ERR_IO, "%s over %s (%d ranks, mpi): %s", op, c->name, c->size, text);
}

#define MPI_TRY(op, call)                                 \
    do {                                                  \
        int mpi_rc_ = (call);                             \
        if (mpi_rc_ != MPI_SUCCESS) return mpi_error(c, op, mpi_rc_); \
    } while (0)

static vfm_status to_int(const Comm *c, const char *op, int64_t v, int *out) {
    if (v > INT_MAX)
        return vfm_fail(VFM_ERR_UNSUPPORTED, "%s over %s: %lld elements do not fit one MPI call (split the buffer)", op,
                        c->name, (long long)v);
    *out = (int)v;
    return VFM_OK;
}

/* int arrays for the v-collectives: 4 × size ints (counts and displacements, send and receive). */
static vfm_status int_arrays(const Comm *c, int **out) {
    *out = malloc(4 * (size_t)c->size * sizeof(int));
    return *out ? VFM_OK : vfm_fail(VFM_ERR_NOMEM, "comm %s: count arrays", c->name);
}

int comm_world_rank(void) {
    if (!launch_mpi_active()) return 0;
    int r = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
}

vfm_status mpi_comm_open(Comm *c) {
    if (!launch_mpi_active())
        return vfm_fail(VFM_ERR_UNSUPPORTED, "comm %s: a group of %d ranks needs MPI, but this process was not "
                        "started by a launcher (mpirun, srun)", c->name, c->size);
    MPI_Comm *mc = malloc(sizeof *mc);
    if (!mc) return vfm_fail(VFM_ERR_NOMEM, "comm %s", c->name);
    MPI_Group world, group;
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    int rc = MPI_Group_incl(world, c->size, c->members, &group);
    if (rc == MPI_SUCCESS) {
        rc = MPI_Comm_create_group(MPI_COMM_WORLD, group, 0, mc);
        MPI_Group_free(&group);
    }
    MPI_Group_free(&world);
    if (rc != MPI_SUCCESS) {
        free(mc);
        return mpi_error(c, "create", rc);
    }
    MPI_Comm_set_errhandler(*mc, MPI_ERRORS_RETURN);
    c->impl->mpi = mc;
    return VFM_OK;
}

void mpi_comm_close(Comm *c) {
    MPI_Comm *mc = c->impl->mpi;
    if (mc && launch_mpi_active()) MPI_Comm_free(mc);
    free(mc);
    c->impl->mpi = NULL;
}

/* Ordered sum of count (<= REDUCE_CHUNK) elements, in place. */
static vfm_status ordered_all_reduce(Comm *c, char *buf, int64_t count, DType dt) {
    int n = c->size, k = (int)count;
    size_t es = dtype_size(dt);
    void *rows;
    if (count <= ORDERED_GATHER_MAX) {
        VFM_TRY(comm_scratch(c, (size_t)n * (size_t)count * es, &rows));
        MPI_TRY("all_reduce", MPI_Allgather(buf, k, mtype(dt), rows, k, mtype(dt), mcomm(c)));
        return comm_sum_rows_ordered(buf, rows, n, count, dt);
    }
    int *v;
    VFM_TRY(int_arrays(c, &v));
    int *scount = v, *sdispl = v + n, *rcount = v + 2 * n, *rdispl = v + 3 * n;
    for (int p = 0; p < n; p++) {
        int64_t lo = count * p / n, hi = count * (p + 1) / n;
        scount[p] = (int)(hi - lo);
        sdispl[p] = (int)lo;
    }
    int mine = scount[c->rank];
    for (int p = 0; p < n; p++) {
        rcount[p] = mine;
        rdispl[p] = p * mine;
    }
    vfm_status s = comm_scratch(c, (size_t)n * (size_t)mine * es, &rows);
    int rc = MPI_SUCCESS;
    if (s == VFM_OK) rc = MPI_Alltoallv(buf, scount, sdispl, mtype(dt), rows, rcount, rdispl, mtype(dt), mcomm(c));
    if (s == VFM_OK && rc == MPI_SUCCESS) {
        /* a refused dtype is refused on every rank alike: the gather below still runs, so none waits */
        s = comm_sum_rows_ordered(buf + (size_t)sdispl[c->rank] * es, rows, n, mine, dt);
        rc = MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, scount, sdispl, mtype(dt), mcomm(c));
    }
    free(v);
    if (s == VFM_OK && rc != MPI_SUCCESS) s = mpi_error(c, "all_reduce", rc);
    return s;
}

vfm_status mpi_all_reduce(Comm *c, void *buf, int64_t count, DType dt, CommOp op) {
    size_t es = dtype_size(dt);
    for (int64_t at = 0; at < count; at += REDUCE_CHUNK) {
        int64_t k = count - at < REDUCE_CHUNK ? count - at : REDUCE_CHUNK;
        char *p = (char *)buf + (size_t)at * es;
        if (op == COMM_SUM_ORDERED) VFM_TRY(ordered_all_reduce(c, p, k, dt));
        else MPI_TRY("all_reduce", MPI_Allreduce(MPI_IN_PLACE, p, (int)k, mtype(dt), op == COMM_MAX ? MPI_MAX : MPI_SUM, mcomm(c)));
    }
    return VFM_OK;
}

vfm_status mpi_reduce_scatter_v(Comm *c, const void *send, void *recv, const int64_t *counts, DType dt, CommOp op) {
    int n = c->size, *v;
    size_t es = dtype_size(dt);
    int64_t total = 0;
    VFM_TRY(int_arrays(c, &v));
    int *scount = v, *sdispl = v + n, *rcount = v + 2 * n, *rdispl = v + 3 * n;
    vfm_status s = VFM_OK;
    for (int p = 0; p < n && s == VFM_OK; p++) {
        s = to_int(c, "reduce_scatter", counts[p], &scount[p]);
        if (s == VFM_OK) s = to_int(c, "reduce_scatter", total, &sdispl[p]);
        total += counts[p];
    }
    int mine = s == VFM_OK ? scount[c->rank] : 0;
    void *tmp = NULL;
    if (s == VFM_OK && op == COMM_SUM_ORDERED) {
        /* every rank's copy of my piece, rank by rank, then summed in that order */
        int all;
        s = to_int(c, "reduce_scatter", (int64_t)n * mine, &all);
        for (int p = 0; p < n && s == VFM_OK; p++) {
            rcount[p] = mine;
            rdispl[p] = p * mine;
        }
        if (s == VFM_OK) s = comm_scratch(c, (size_t)n * (size_t)mine * es, &tmp);
        if (s == VFM_OK) {
            int rc = MPI_Alltoallv(send, scount, sdispl, mtype(dt), tmp, rcount, rdispl, mtype(dt), mcomm(c));
            if (rc != MPI_SUCCESS) s = mpi_error(c, "reduce_scatter", rc);
            else comm_sum_rows_ordered(recv, tmp, n, mine, dt);
        }
    } else if (s == VFM_OK) {
        /* MPI forbids recv inside send: reduce into scratch, then copy */
        const char *lo = send, *hi = lo + (size_t)total * es, *r = recv;
        int overlap = r + (size_t)mine * es > lo && r < hi;
        if (overlap) s = comm_scratch(c, (size_t)mine * es + 1, &tmp);
        if (s == VFM_OK) {
            int rc = MPI_Reduce_scatter(send, overlap ? tmp : recv, scount, mtype(dt), op == COMM_MAX ? MPI_MAX : MPI_SUM,
                                        mcomm(c));
            if (rc != MPI_SUCCESS) s = mpi_error(c, "reduce_scatter", rc);
            else if (overlap) memcpy(recv, tmp, (size_t)mine * es);
        }
    }
    free(v);
    return s;
}

vfm_status mpi_all_gather_v(Comm *c, const void *send, void *recv, const int64_t *counts, DType dt) {
    int n = c->size, *v;
    size_t es = dtype_size(dt);
    int64_t total = 0;
    VFM_TRY(int_arrays(c, &v));
    vfm_status s = VFM_OK;
    for (int p = 0; p < n && s == VFM_OK; p++) {
        s = to_int(c, "all_gather", counts[p], &v[p]);
        if (s == VFM_OK) s = to_int(c, "all_gather", total, &v[n + p]);
        total += counts[p];
    }
    if (s == VFM_OK) {
        int in_place = (const char *)send == (char *)recv + (size_t)v[n + c->rank] * es;
        int rc = MPI_Allgatherv(in_place ? MPI_IN_PLACE : send, v[c->rank], mtype(dt), recv, v, v + n, mtype(dt), mcomm(c));
        if (rc != MPI_SUCCESS) s = mpi_error(c, "all_gather", rc);
    }
    free(v);
    return s;
}

vfm_status mpi_broadcast(Comm *c, void *buf, int64_t count, DType dt, int root) {
    int k = 0;
    VFM_TRY(to_int(c, "broadcast", count, &k));
    MPI_TRY("broadcast", MPI_Bcast(buf, k, mtype(dt), root, mcomm(c)));
    return VFM_OK;
}

vfm_status mpi_send(Comm *c, const void *buf, int64_t count, DType dt, int peer) {
    int k = 0;
    VFM_TRY(to_int(c, "send", count, &k));
    MPI_TRY("send", MPI_Send(buf, k, mtype(dt), peer, 0, mcomm(c)));
    return VFM_OK;
}

vfm_status mpi_recv(Comm *c, void *buf, int64_t count, DType dt, int peer) {
    int k = 0, got = -1;
    MPI_Status st;
    VFM_TRY(to_int(c, "recv", count, &k));
    MPI_TRY("recv", MPI_Recv(buf, k, mtype(dt), peer, 0, mcomm(c), &st));
    MPI_Get_count(&st, mtype(dt), &got);
    if (got != k)
        return vfm_fail(VFM_ERR_INTERNAL, "recv over %s: expected %d elements from rank %d, got %d", c->name, k, peer, got);
    return VFM_OK;
}

vfm_status mpi_all_to_all_v(Comm *c, const void *send, const int64_t *send_counts, const int64_t *send_displs,
                            void *recv, const int64_t *recv_counts, const int64_t *recv_displs, DType dt) {
    int n = c->size, *v;
    VFM_TRY(int_arrays(c, &v));
    vfm_status s = VFM_OK;
    for (int p = 0; p < n && s == VFM_OK; p++) {
        s = to_int(c, "all_to_all", send_counts[p], &v[p]);
        if (s == VFM_OK) s = to_int(c, "all_to_all", send_displs[p], &v[n + p]);
        if (s == VFM_OK) s = to_int(c, "all_to_all", recv_counts[p], &v[2 * n + p]);
        if (s == VFM_OK) s = to_int(c, "all_to_all", recv_displs[p], &v[3 * n + p]);
    }
    if (s == VFM_OK) {
        int rc = MPI_Alltoallv(send, v, v + n, mtype(dt), recv, v + 2 * n, v + 3 * n, mtype(dt), mcomm(c));
        if (rc != MPI_SUCCESS) s = mpi_error(c, "all_to_all", rc);
    }
    free(v);
    return s;
}

vfm_status mpi_barrier(Comm *c) {
    MPI_TRY("barrier", MPI_Barrier(mcomm(c)));
    return VFM_OK;
}

/* An exchange in flight: its requests and, for the receives, the counts they must deliver. */
typedef struct {
    int n;
    MPI_Request *req;
    int *want;       /* [n] elements expected (-1 for a send) */
    MPI_Datatype *type;
    int *peer;
} MpiExchange;

static void exchange_free(MpiExchange *x) {
    if (!x) return;
    free(x->req), free(x->want), free(x->type), free(x->peer);
    free(x);
}

vfm_status mpi_exchange_start(Comm *c, const CommP2P *ops, int n, void **pending) {
    MpiExchange *x = calloc(1, sizeof *x);
    if (x) {
        x->req = malloc((size_t)n * sizeof *x->req);
        x->want = malloc((size_t)n * sizeof *x->want);
        x->type = malloc((size_t)n * sizeof *x->type);
        x->peer = malloc((size_t)n * sizeof *x->peer);
    }
    if (!x || !x->req || !x->want || !x->type || !x->peer) {
        exchange_free(x);
        return vfm_fail(VFM_ERR_NOMEM, "exchange over %s: %d requests", c->name, n);
    }
    vfm_status s = VFM_OK;
    for (int i = 0; i < n && s == VFM_OK; i++) {
        int k = 0, rc;
        const char *op = ops[i].is_send ? "isend" : "irecv";
        s = to_int(c, op, ops[i].count, &k);
        if (s != VFM_OK) break;
        x->type[i] = mtype(ops[i].dtype);
        x->peer[i] = ops[i].peer;
        x->want[i] = ops[i].is_send ? -1 : k;
        if (ops[i].is_send) rc = MPI_Isend(ops[i].buf, k, x->type[i], ops[i].peer, 0, mcomm(c), &x->req[i]);
        else rc = MPI_Irecv(ops[i].buf, k, x->type[i], ops[i].peer, 0, mcomm(c), &x->req[i]);
        if (rc != MPI_SUCCESS) s = mpi_error(c, op, rc);
        else x->n++;
    }
    if (s != VFM_OK) {
        /* complete what was posted, so no request outlives its buffers */
        MPI_Waitall(x->n, x->req, MPI_STATUSES_IGNORE);
        exchange_free(x);
        return s;
    }
    *pending = x;
    return VFM_OK;
}

vfm_status mpi_wait(Comm *c, void *pending) {
    MpiExchange *x = pending;
    MPI_Status *st = malloc((size_t)(x->n + 1) * sizeof *st);
    if (!st) {
        MPI_Waitall(x->n, x->req, MPI_STATUSES_IGNORE);
        exchange_free(x);
        return vfm_fail(VFM_ERR_NOMEM, "wait over %s", c->name);
    }
    int rc = MPI_Waitall(x->n, x->req, st);
    vfm_status s = rc == MPI_SUCCESS ? VFM_OK : mpi_error(c, "wait", rc);
    for (int i = 0; i < x->n && s == VFM_OK; i++) {
        if (x->want[i] < 0) continue;
        int got = -1;
        MPI_Get_count(&st[i], x->type[i], &got);
        if (got != x->want[i])
            s = vfm_fail(VFM_ERR_INTERNAL, "irecv over %s: expected %d elements from rank %d, got %d", c->name, x->want[i],
                         x->peer[i], got);
    }
    free(st);
    exchange_free(x);
    return s;
}

#else
typedef int comm_mpi_unused; /* this build has no MPI: comm.c holds the stubs */
#endif
