// The CPU harness's NCCL: the entry points comm_nccl.cu looks up (libs.cpp hands them out by name),
// over MPI. Each rank is its own process with its own harness device, so a communicator of several
// ranks is an MPI communicator of those processes (MPI_Comm_create_group over MPI_COMM_WORLD, its
// members found through the unique id, which names the root's world rank) and the "device"
// buffers are host memory MPI can move. Work runs when it is issued, as every harness stream does:
// a call returns with its result in place. Grouped sends and receives (ncclGroupStart/End) are
// posted together at the group's end, so a ring exchange cannot deadlock. Reductions gather every
// rank's values and add them in rank order (NCCL's order is its own: callers that need an order use
// vfm's ordered sums, which move data only). Every buffer must be device memory of the harness
// (runtime_device_extent), with room for what the call reads or writes: a host buffer handed to
// NCCL — a fault on a GPU — is a fault here. Types: f32, f64, i32, i64, bf16 (what vfm moves).
#ifdef VFM_NCCL
#include <cuda_bf16.h>
#include <nccl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef VFM_MPI
#define OMPI_SKIP_MPICXX 1  // MPI's C API only
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

#include <vector>

#include <sanitizer/common_interface_defs.h>

#include "runtime.h"

struct ncclComm {
    int nranks, rank;
#ifdef VFM_MPI
    MPI_Comm mpi;
#endif
    char last_error[512];
};

namespace {

const char kMagic[16] = "vfm-harness-id";
const int kTagBase = 29000;  // world point-to-point tags of the rendezvous (vfm's own MPI traffic uses its own comms)
int g_ids;                   // ids made by this process
int g_group_depth;
char g_error[512];           // the last error outside a communicator

struct P2P {
    bool send;
    void *buf;
    size_t bytes;
    int peer;
    ncclComm *comm;
};
std::vector<P2P> g_pending;

ncclResult_t failv(ncclComm *c, ncclResult_t r, const char *fmt, va_list ap) {
    char *dst = c ? c->last_error : g_error;
    vsnprintf(dst, sizeof g_error, fmt, ap);
    return r;
}
ncclResult_t fail(ncclComm *c, ncclResult_t r, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
ncclResult_t fail(ncclComm *c, ncclResult_t r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    failv(c, r, fmt, ap);
    va_end(ap);
    return r;
}

size_t type_bytes(ncclDataType_t t) {
    switch (t) {
    case ncclFloat32: case ncclInt32: return 4;
    case ncclFloat64: case ncclInt64: return 8;
    case ncclBfloat16: return 2;
    default: return 0;
    }
}

// A device buffer of at least `bytes` from p (what the GPU would fault on, faulted here too).
bool device_buffer(ncclComm *c, const char *call, const char *what, const void *p, size_t bytes) {
    if (bytes == 0) return true;
    size_t extent = runtime_device_extent(p);
    if (extent >= bytes) return true;
    runtime_kernel_fault("%s: %s %p %s (%zu bytes asked)", call, what, p,
                         extent == 0 ? "is not device memory" : "runs past its device allocation", bytes);
    __sanitizer_print_stack_trace();  // who handed it over
    fail(c, ncclInvalidArgument, "%s: %s is not %zu bytes of device memory", call, what, bytes);
    return false;
}

// dst[i] = rows[0][i] (op) rows[1][i] (op) ... in rank order, in the type (bf16: each step rounded).
template <typename T> void reduce_rows(T *dst, const T *rows, int n, size_t count, ncclRedOp_t op) {
    for (size_t i = 0; i < count; i++) {
        T acc = rows[i];
        for (int k = 1; k < n; k++) {
            T v = rows[(size_t)k * count + i];
            acc = op == ncclMax ? (v > acc ? v : acc) : (T)(acc + v);
        }
        dst[i] = acc;
    }
}
void reduce_rows_bf16(__nv_bfloat16 *dst, const __nv_bfloat16 *rows, int n, size_t count, ncclRedOp_t op) {
    for (size_t i = 0; i < count; i++) {
        float acc = __bfloat162float(rows[i]);
        for (int k = 1; k < n; k++) {
            float v = __bfloat162float(rows[(size_t)k * count + i]);
            acc = __bfloat162float(__float2bfloat16_rn(op == ncclMax ? (v > acc ? v : acc) : acc + v));
        }
        dst[i] = __float2bfloat16_rn(acc);
    }
}
ncclResult_t reduce(ncclComm *c, void *dst, const void *rows, size_t count, ncclDataType_t t, ncclRedOp_t op) {
    if (op != ncclSum && op != ncclMax) return fail(c, ncclInvalidArgument, "reduction op %d: the harness has sum and max", (int)op);
    int n = c->nranks;
    switch (t) {
    case ncclFloat32: reduce_rows((float *)dst, (const float *)rows, n, count, op); break;
    case ncclFloat64: reduce_rows((double *)dst, (const double *)rows, n, count, op); break;
    case ncclInt32: reduce_rows((int32_t *)dst, (const int32_t *)rows, n, count, op); break;
    case ncclInt64: reduce_rows((int64_t *)dst, (const int64_t *)rows, n, count, op); break;
    case ncclBfloat16: reduce_rows_bf16((__nv_bfloat16 *)dst, (const __nv_bfloat16 *)rows, n, count, op); break;
    default: return fail(c, ncclInvalidArgument, "datatype %d: the harness moves f32, f64, i32, i64, bf16", (int)t);
    }
    return ncclSuccess;
}

ncclResult_t check_comm(ncclComm *c, const char *call, ncclDataType_t t, size_t *es) {
    if (!c) return fail(nullptr, ncclInvalidArgument, "%s: NULL communicator", call);
    *es = type_bytes(t);
    if (*es == 0) return fail(c, ncclInvalidArgument, "%s: datatype %d (the harness moves f32, f64, i32, i64, bf16)", call, (int)t);
    return ncclSuccess;
}

#ifdef VFM_MPI
ncclResult_t mpi_ok(ncclComm *c, const char *call, int rc) {
    if (rc == MPI_SUCCESS) return ncclSuccess;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    return fail(c, ncclSystemError, "%s: MPI: %s", call, msg);
}

// Every rank's `bytes` from send, rank by rank, into rows (n * bytes).
ncclResult_t gather_all(ncclComm *c, const char *call, const void *send, void *rows, size_t bytes) {
    if (bytes > (size_t)INT32_MAX) return fail(c, ncclInvalidArgument, "%s: %zu bytes per rank (the harness moves < 2 GiB)", call, bytes);
    std::vector<char> mine((const char *)send, (const char *)send + bytes);  // send may lie inside rows
    return mpi_ok(c, call, MPI_Allgather(mine.data(), (int)bytes, MPI_BYTE, rows, (int)bytes, MPI_BYTE, c->mpi));
}
#endif

ncclResult_t run_p2p(const std::vector<P2P> &ops) {
#ifdef VFM_MPI
    std::vector<MPI_Request> req;
    for (int pass = 0; pass < 2; pass++)  // the receives first, then the sends
        for (const P2P &o : ops) {
            if (o.send == (pass == 0)) continue;
            MPI_Request r;
            int rc = o.send ? MPI_Isend(o.buf, (int)o.bytes, MPI_BYTE, o.peer, 0, o.comm->mpi, &r)
                            : MPI_Irecv(o.buf, (int)o.bytes, MPI_BYTE, o.peer, 0, o.comm->mpi, &r);
            if (rc != MPI_SUCCESS) return mpi_ok(o.comm, o.send ? "ncclSend" : "ncclRecv", rc);
            req.push_back(r);
        }
    if (req.empty()) return ncclSuccess;
    return mpi_ok(ops[0].comm, "ncclGroupEnd", MPI_Waitall((int)req.size(), req.data(), MPI_STATUSES_IGNORE));
#else
    return ops.empty() ? ncclSuccess : fail(ops[0].comm, ncclInvalidUsage, "point-to-point without MPI");
#endif
}

ncclResult_t p2p(bool send, void *buf, size_t count, ncclDataType_t t, int peer, ncclComm *c) {
    const char *call = send ? "ncclSend" : "ncclRecv";
    size_t es;
    ncclResult_t r = check_comm(c, call, t, &es);
    if (r != ncclSuccess) return r;
    if (peer < 0 || peer >= c->nranks)
        return fail(c, ncclInvalidArgument, "%s: peer %d of %d ranks (rank %d)", call, peer, c->nranks, c->rank);
    if (!device_buffer(c, call, send ? "sendbuff" : "recvbuff", buf, count * es)) return ncclInvalidArgument;
    if (count * es > (size_t)INT32_MAX) return fail(c, ncclInvalidArgument, "%s: %zu bytes (the harness moves < 2 GiB)", call, count * es);
    P2P op = {send, buf, count * es, peer, c};
    if (g_group_depth > 0) {
        g_pending.push_back(op);
        return ncclSuccess;
    }
    return run_p2p(std::vector<P2P>{op});
}

}  // namespace

extern "C" {

const char *ncclGetErrorString(ncclResult_t r) {
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
    }
}

const char *ncclGetLastError(ncclComm_t c) { return c ? c->last_error : g_error; }

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    memset(id, 0, sizeof *id);
    int world = 0;
#ifdef VFM_MPI
    int up = 0;
    MPI_Initialized(&up);
    if (up) MPI_Comm_rank(MPI_COMM_WORLD, &world);
#endif
    int32_t fields[2] = {world, g_ids++};
    memcpy(id->internal, kMagic, sizeof kMagic);
    memcpy(id->internal + sizeof kMagic, fields, sizeof fields);
    return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *out, int nranks, ncclUniqueId id, int rank) {
    *out = nullptr;
    if (memcmp(id.internal, kMagic, sizeof kMagic) != 0)
        return fail(nullptr, ncclInvalidArgument, "ncclCommInitRank: not an id of ncclGetUniqueId");
    if (nranks < 1 || rank < 0 || rank >= nranks)
        return fail(nullptr, ncclInvalidArgument, "ncclCommInitRank: rank %d of %d", rank, nranks);
    int32_t fields[2];
    memcpy(fields, id.internal + sizeof kMagic, sizeof fields);
    ncclComm *c = (ncclComm *)calloc(1, sizeof *c);
    if (!c) return fail(nullptr, ncclSystemError, "ncclCommInitRank: no memory");
    c->nranks = nranks, c->rank = rank;
    if (nranks == 1) {
        *out = c;
        return ncclSuccess;
    }
#ifdef VFM_MPI
    // the members' world ranks: each tells the root (named by the id), which tells everyone
    int tag = kTagBase + (fields[1] % 1000) * 2, root = fields[0], me;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    std::vector<int> members((size_t)nranks);
    int rc = MPI_SUCCESS;
    if (rank == 0) {
        members[0] = me;
        for (int i = 1; i < nranks && rc == MPI_SUCCESS; i++) {
            int who[2];
            rc = MPI_Recv(who, 2, MPI_INT, MPI_ANY_SOURCE, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            if (rc == MPI_SUCCESS && who[0] > 0 && who[0] < nranks) members[(size_t)who[0]] = who[1];
        }
        for (int i = 1; i < nranks && rc == MPI_SUCCESS; i++)
            rc = MPI_Send(members.data(), nranks, MPI_INT, members[(size_t)i], tag + 1, MPI_COMM_WORLD);
    } else {
        int who[2] = {rank, me};
        rc = MPI_Send(who, 2, MPI_INT, root, tag, MPI_COMM_WORLD);
        if (rc == MPI_SUCCESS) rc = MPI_Recv(members.data(), nranks, MPI_INT, root, tag + 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    MPI_Group world, group;
    if (rc == MPI_SUCCESS) rc = MPI_Comm_group(MPI_COMM_WORLD, &world);
    if (rc == MPI_SUCCESS) rc = MPI_Group_incl(world, nranks, members.data(), &group);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_create_group(MPI_COMM_WORLD, group, tag, &c->mpi);
    if (rc != MPI_SUCCESS) {
        ncclResult_t r = mpi_ok(nullptr, "ncclCommInitRank", rc);
        free(c);
        return r;
    }
    MPI_Group_free(&group);
    MPI_Group_free(&world);
    *out = c;
    return ncclSuccess;
#else
    free(c);
    return fail(nullptr, ncclInvalidUsage, "ncclCommInitRank: %d ranks need MPI (this harness was built without)", nranks);
#endif
}

ncclResult_t ncclCommDestroy(ncclComm_t c) {
    if (!c) return ncclSuccess;
#ifdef VFM_MPI
    if (c->nranks > 1) MPI_Comm_free(&c->mpi);
#endif
    free(c);
    return ncclSuccess;
}

ncclResult_t ncclGroupStart(void) {
    g_group_depth++;
    return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void) {
    if (g_group_depth == 0) return fail(nullptr, ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
    if (--g_group_depth > 0) return ncclSuccess;
    std::vector<P2P> ops;
    ops.swap(g_pending);
    return run_p2p(ops);
}

ncclResult_t ncclSend(const void *buf, size_t count, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t) {
    return p2p(true, (void *)buf, count, t, peer, c);
}

ncclResult_t ncclRecv(void *buf, size_t count, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t) {
    return p2p(false, buf, count, t, peer, c);
}

ncclResult_t ncclAllGather(const void *send, void *recv, size_t count, ncclDataType_t t, ncclComm_t c, cudaStream_t) {
    size_t es;
    ncclResult_t r = check_comm(c, "ncclAllGather", t, &es);
    if (r != ncclSuccess) return r;
    size_t bytes = count * es;
    if (!device_buffer(c, "ncclAllGather", "sendbuff", send, bytes) ||
        !device_buffer(c, "ncclAllGather", "recvbuff", recv, bytes * c->nranks))
        return ncclInvalidArgument;
    if (c->nranks == 1) {
        memmove(recv, send, bytes);
        return ncclSuccess;
    }
#ifdef VFM_MPI
    return gather_all(c, "ncclAllGather", send, recv, bytes);
#else
    return ncclInvalidUsage;
#endif
}

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                           cudaStream_t) {
    size_t es;
    ncclResult_t r = check_comm(c, "ncclAllReduce", t, &es);
    if (r != ncclSuccess) return r;
    if (!device_buffer(c, "ncclAllReduce", "sendbuff", send, count * es) ||
        !device_buffer(c, "ncclAllReduce", "recvbuff", recv, count * es))
        return ncclInvalidArgument;
    std::vector<char> rows(count * es * c->nranks);
    if (c->nranks == 1) memcpy(rows.data(), send, count * es);
#ifdef VFM_MPI
    else if ((r = gather_all(c, "ncclAllReduce", send, rows.data(), count * es)) != ncclSuccess) return r;
#endif
    return reduce(c, recv, rows.data(), count, t, op);
}

ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t count, ncclDataType_t t, ncclRedOp_t op,
                               ncclComm_t c, cudaStream_t) {
    size_t es;
    ncclResult_t r = check_comm(c, "ncclReduceScatter", t, &es);
    if (r != ncclSuccess) return r;
    size_t bytes = count * es;
    if (!device_buffer(c, "ncclReduceScatter", "sendbuff", send, bytes * c->nranks) ||
        !device_buffer(c, "ncclReduceScatter", "recvbuff", recv, bytes))
        return ncclInvalidArgument;
    if (bytes > (size_t)INT32_MAX) return fail(c, ncclInvalidArgument, "ncclReduceScatter: %zu bytes per rank", bytes);
    std::vector<char> rows(bytes * c->nranks);  // every rank's piece for this rank
    if (c->nranks == 1) memcpy(rows.data(), send, bytes);
#ifdef VFM_MPI
    else if ((r = mpi_ok(c, "ncclReduceScatter", MPI_Alltoall(send, (int)bytes, MPI_BYTE, rows.data(), (int)bytes,
                                                              MPI_BYTE, c->mpi))) != ncclSuccess)
        return r;
#endif
    return reduce(c, recv, rows.data(), count, t, op);
}

ncclResult_t ncclReduce(const void *send, void *recv, size_t count, ncclDataType_t t, ncclRedOp_t op, int root,
                        ncclComm_t c, cudaStream_t s) {
    if (c && (root < 0 || root >= c->nranks)) return fail(c, ncclInvalidArgument, "ncclReduce: root %d", root);
    if (c && c->rank != root) {  // only the root's recvbuff is written: reduce into scratch elsewhere
        size_t es = type_bytes(t);
        if (es == 0) return fail(c, ncclInvalidArgument, "ncclReduce: datatype %d", (int)t);
        void *tmp = nullptr;
        if (cudaMalloc(&tmp, count * es + 1) != cudaSuccess) return fail(c, ncclSystemError, "ncclReduce: scratch");
        ncclResult_t r = ncclAllReduce(send, tmp, count, t, op, c, s);
        cudaFree(tmp);
        return r;
    }
    return ncclAllReduce(send, recv, count, t, op, c, s);
}

ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t t, int root, ncclComm_t c,
                           cudaStream_t) {
    size_t es;
    ncclResult_t r = check_comm(c, "ncclBroadcast", t, &es);
    if (r != ncclSuccess) return r;
    if (root < 0 || root >= c->nranks) return fail(c, ncclInvalidArgument, "ncclBroadcast: root %d", root);
    if ((c->rank == root && !device_buffer(c, "ncclBroadcast", "sendbuff", send, count * es)) ||
        !device_buffer(c, "ncclBroadcast", "recvbuff", recv, count * es))
        return ncclInvalidArgument;
    if (count * es > (size_t)INT32_MAX) return fail(c, ncclInvalidArgument, "ncclBroadcast: %zu bytes", count * es);
    if (c->rank == root) memmove(recv, send, count * es);
#ifdef VFM_MPI
    if (c->nranks > 1) return mpi_ok(c, "ncclBroadcast", MPI_Bcast(recv, (int)(count * es), MPI_BYTE, root, c->mpi));
#endif
    return ncclSuccess;
}

}  // extern "C"
#endif
