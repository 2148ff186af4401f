// NCCL backend of comm.h and the GPU binding: buffers live on the current GPU; each comm has one
// ncclComm and one CUDA stream of its own (non-blocking: the ops' stream does not wait for it, so
// a reduction posted during the backward overlaps it); every call first makes that stream wait for
// the work issued so far on the ops' stream (an event), and the blocking calls wait for their
// stream, so results are in place on return; the _start calls leave it running (comm_wait). libnccl.so.2 is
// loaded on first use (ops/cuda/cuda_libs.h: the same search as cuBLASLt and cuDNN; VFM_NCCL_LIB
// names another file), so binaries built here still start on machines without NCCL and CPU runs
// never load it.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cuda_runtime_shim.h"
#include "ops/cuda/cuda_launch.h"
#include "ops/cuda/cuda_libs.h"
#include "ops/ops.h"
#include "parallel/comm_internal.h"
#include "parallel/launch.h"

extern "C" vfm_status comm_bind_gpu(int local_rank, int *device) {
    int n = 0;
    *device = -1;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        cudaGetLastError();
        return vfm_fail(VFM_ERR_UNSUPPORTED, "no CUDA device to bind local rank %d to", local_rank);
    }
    int d = launch_gpu_for_local_rank(local_rank, n);
    cudaError_t e = cudaSetDevice(d);
    if (e != cudaSuccess)
        return vfm_fail(VFM_ERR_UNSUPPORTED, "cudaSetDevice(%d) for local rank %d: %s", d, local_rank, cudaGetErrorString(e));
    *device = d;
    vfm_cuda_set_process_device(d);  // the loader's reader threads allocate page-locked memory for this GPU
    return VFM_OK;
}

#ifdef VFM_NCCL
#include <nccl.h>

static_assert(sizeof(ncclUniqueId) == COMM_NCCL_ID_BYTES, "ncclUniqueId size");

// ---- the library, loaded once ---------------------------------------------------------------

static struct {
    int tried, ok;
    char error[4096];
    decltype(&ncclGetUniqueId) GetUniqueId;
    decltype(&ncclCommInitRank) CommInitRank;
    decltype(&ncclCommDestroy) CommDestroy;
    decltype(&ncclGetErrorString) GetErrorString;
    decltype(&ncclGetLastError) GetLastError; // optional (NCCL >= 2.13)
    decltype(&ncclAllReduce) AllReduce;
    decltype(&ncclReduceScatter) ReduceScatter;
    decltype(&ncclAllGather) AllGather;
    decltype(&ncclBroadcast) Broadcast;
    decltype(&ncclReduce) Reduce;
    decltype(&ncclSend) Send;
    decltype(&ncclRecv) Recv;
    decltype(&ncclGroupStart) GroupStart;
    decltype(&ncclGroupEnd) GroupEnd;
} api;

template <typename F> static bool load_sym(const char *name, F *out) {
    *out = (F)cuda_lib_symbol(CUDA_LIB_NCCL, name);
    if (!*out) snprintf(api.error, sizeof api.error, "%s lacks %s (NCCL too old?)", "libnccl", name);
    return *out != nullptr;
}

extern "C" vfm_status nccl_backend_load(void) {
    if (!api.tried) {
        api.tried = 1;
        if (cuda_lib_open(CUDA_LIB_NCCL) != VFM_OK) {  // where it looked: `vfm version` prints it too
            snprintf(api.error, sizeof api.error, "%s", vfm_last_error());
        } else {
            api.ok = load_sym("ncclGetUniqueId", &api.GetUniqueId) && load_sym("ncclCommInitRank", &api.CommInitRank) &&
                     load_sym("ncclCommDestroy", &api.CommDestroy) && load_sym("ncclGetErrorString", &api.GetErrorString) &&
                     load_sym("ncclAllReduce", &api.AllReduce) && load_sym("ncclReduceScatter", &api.ReduceScatter) &&
                     load_sym("ncclAllGather", &api.AllGather) && load_sym("ncclBroadcast", &api.Broadcast) &&
                     load_sym("ncclReduce", &api.Reduce) && load_sym("ncclSend", &api.Send) &&
                     load_sym("ncclRecv", &api.Recv) && load_sym("ncclGroupStart", &api.GroupStart) &&
                     load_sym("ncclGroupEnd", &api.GroupEnd);
            api.GetLastError = (decltype(api.GetLastError))cuda_lib_symbol(CUDA_LIB_NCCL, "ncclGetLastError");
        }
    }
    return api.ok ? VFM_OK : vfm_fail(VFM_ERR_UNSUPPORTED, "NCCL backend: %s", api.error);
}

// ---- per-comm state and errors --------------------------------------------------------------

struct NcclState {
    ncclComm_t comm;
    cudaStream_t stream;
    cudaEvent_t compute; // recorded on the ops' stream before each call's work (follow_compute)
    void *scratch; // device scratch for ordered sums
    size_t scratch_bytes;
};

/* Ordered all-reduces up to this many elements gather the whole buffer (as comm_mpi.c). */
#define ORDERED_GATHER_MAX 1024

static NcclState *state(const Comm *c) { return (NcclState *)c->impl->nccl; }

static vfm_status nccl_error(const Comm *c, const char *op, ncclResult_t r) {
    const char *detail = api.GetLastError && c->impl->nccl ? api.GetLastError(state(c)->comm) : "";
    return vfm_fail(r == ncclSystemError ? VFM_ERR_IO : VFM_ERR_UNSUPPORTED, "%s over %s (%d rank%s, nccl): %s%s%s", op,
                    c->name, c->size, c->size == 1 ? "" : "s", api.GetErrorString(r), detail && *detail ? ": " : "",
                    detail ? detail : "");
}

static vfm_status cuda_error(const Comm *c, const char *op, cudaError_t e) {
    return vfm_fail(e == cudaErrorMemoryAllocation ? VFM_ERR_NOMEM : VFM_ERR_IO, "%s over %s (%d ranks, nccl): CUDA: %s", op,
                    c->name, c->size, cudaGetErrorString(e));
}

#define NCCL_TRY(op, call)                                     \
    do {                                                       \
        ncclResult_t nccl_r_ = (call);                         \
        if (nccl_r_ != ncclSuccess) return nccl_error(c, op, nccl_r_); \
    } while (0)
#define CUDA_TRY(op, call)                                     \
    do {                                                       \
        cudaError_t cuda_e_ = (call);                          \
        if (cuda_e_ != cudaSuccess) return cuda_error(c, op, cuda_e_); \
    } while (0)

// Inside ncclGroupStart/End the first failing call's result is kept (later calls are not made) and
// the group is always closed: a group left open would swallow every later NCCL call of the process.
#define GROUP_CALL(r, call)                        \
    do {                                           \
        if ((r) == ncclSuccess) (r) = (call);      \
    } while (0)
static vfm_status group_end(Comm *c, const char *op, ncclResult_t r) {
    ncclResult_t e = api.GroupEnd();
    if (r == ncclSuccess) r = e;
    return r == ncclSuccess ? VFM_OK : nccl_error(c, op, r);
}

static ncclDataType_t ntype(DType dt) {
    switch (dt) {
    case DT_F32: return ncclFloat32;
    case DT_F64: return ncclFloat64;
    case DT_I32: return ncclInt32;
    case DT_I64: return ncclInt64;
    default: return ncclBfloat16;
    }
}

static vfm_status device_scratch(Comm *c, size_t bytes, void **out) {
    NcclState *st = state(c);
    if (bytes > st->scratch_bytes) {
        cudaFree(st->scratch);
        st->scratch = nullptr;
        st->scratch_bytes = 0;
        CUDA_TRY("scratch", cudaMalloc(&st->scratch, bytes));
        st->scratch_bytes = bytes;
    }
    *out = st->scratch;
    return VFM_OK;
}

// The comm's stream waits for the work issued so far on the ops' stream (the buffers' producers).
static vfm_status follow_compute(Comm *c, const char *op) {
    NcclState *st = state(c);
    CUDA_TRY(op, cudaEventRecord(st->compute, (cudaStream_t)ops_stream()));
    CUDA_TRY(op, cudaStreamWaitEvent(st->stream, st->compute, 0));
    return VFM_OK;
}

static vfm_status finish(Comm *c, const char *op) {
    CUDA_TRY(op, cudaStreamSynchronize(state(c)->stream));
    return VFM_OK;
}

// ---- the ordered sum ------------------------------------------------------------------------

template <typename T> __global__ void sum_rows_kernel(T *dst, const T *rows, int n_rows, long long count) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < count; i += (long long)gridDim.x * blockDim.x) {
        T acc = rows[i];
        for (int k = 1; k < n_rows; k++) acc = acc + rows[(long long)k * count + i];
        dst[i] = acc;
    }
}

template <typename T>
static void launch_sum_rows_of(void *dst, const void *rows, int n, long long count, int grid, cudaStream_t s) {
    VFM_KERNEL_LAUNCH(sum_rows_kernel<T>, grid, 256, 0, s, (T *)dst, (const T *)rows, n, count);
}

static cudaError_t launch_sum_rows(void *dst, const void *rows, int n, int64_t count, DType dt, cudaStream_t s) {
    if (count == 0) return cudaSuccess;
    long long blocks = (count + 255) / 256;
    int grid = (int)(blocks < 8192 ? blocks : 8192);
    switch (dt) {
    case DT_F32: launch_sum_rows_of<float>(dst, rows, n, count, grid, s); break;
    case DT_F64: launch_sum_rows_of<double>(dst, rows, n, count, grid, s); break;
    case DT_I32: launch_sum_rows_of<int32_t>(dst, rows, n, count, grid, s); break;
    case DT_I64: launch_sum_rows_of<long long>(dst, rows, n, count, grid, s); break;
    default: launch_sum_rows_of<__nv_bfloat16>(dst, rows, n, count, grid, s); break;
    }
    return cudaGetLastError();
}

extern "C" vfm_status nccl_sum_rows_ordered(void *dst, const void *rows, int n_rows, int64_t count, DType dt) {
    cudaError_t e = launch_sum_rows(dst, rows, n_rows, count, dt, 0);
    if (e == cudaSuccess) e = cudaStreamSynchronize(0);
    return e == cudaSuccess ? VFM_OK : vfm_fail(VFM_ERR_IO, "sum_rows_ordered: CUDA: %s", cudaGetErrorString(e));
}

// ---- creation -------------------------------------------------------------------------------

extern "C" vfm_status nccl_unique_id(unsigned char id[COMM_NCCL_ID_BYTES]) {
    VFM_TRY(nccl_backend_load());
    ncclUniqueId u;
    ncclResult_t r = api.GetUniqueId(&u);
    if (r != ncclSuccess) return vfm_fail(VFM_ERR_IO, "ncclGetUniqueId: %s", api.GetErrorString(r));
    memcpy(id, &u, sizeof u);
    return VFM_OK;
}

extern "C" vfm_status nccl_comm_open(Comm *c, const unsigned char id[COMM_NCCL_ID_BYTES]) {
    VFM_TRY(nccl_backend_load());
    NcclState *st = (NcclState *)calloc(1, sizeof *st);
    if (!st) return vfm_fail(VFM_ERR_NOMEM, "comm %s", c->name);
    cudaError_t e = cudaStreamCreateWithFlags(&st->stream, cudaStreamNonBlocking);
    if (e == cudaSuccess) {
        e = cudaEventCreateWithFlags(&st->compute, cudaEventDisableTiming);
        if (e != cudaSuccess) cudaStreamDestroy(st->stream);
    }
    if (e != cudaSuccess) {
        free(st);
        return cuda_error(c, "create", e);
    }
    ncclUniqueId u;
    memcpy(&u, id, sizeof u);
    ncclResult_t r = api.CommInitRank(&st->comm, c->size, u, c->rank);
    if (r != ncclSuccess) {
        cudaEventDestroy(st->compute);
        cudaStreamDestroy(st->stream);
        free(st);
        return nccl_error(c, "create", r);
    }
    c->impl->nccl = st;
    return VFM_OK;
}

extern "C" void nccl_comm_close(Comm *c) {
    NcclState *st = state(c);
    if (!st) return;
    cudaStreamSynchronize(st->stream);
    api.CommDestroy(st->comm);
    cudaEventDestroy(st->compute);
    cudaStreamDestroy(st->stream);
    cudaFree(st->scratch);
    free(st);
    c->impl->nccl = nullptr;
}

// ---- collectives ----------------------------------------------------------------------------

static vfm_status enqueue_reduce_scatter_v(Comm *c, const void *send, void *recv, const int64_t *counts, DType dt, CommOp op);
static vfm_status enqueue_all_gather_v(Comm *c, const void *send, void *recv, const int64_t *counts, DType dt);

static vfm_status enqueue_all_reduce(Comm *c, void *buf, int64_t count, DType dt, CommOp op) {
    NcclState *st = state(c);
    VFM_TRY(follow_compute(c, "all_reduce"));
    if (op != COMM_SUM_ORDERED) {
        NCCL_TRY("all_reduce", api.AllReduce(buf, buf, (size_t)count, ntype(dt), op == COMM_MAX ? ncclMax : ncclSum, st->comm, st->stream));
        return VFM_OK;
    }
    if (count <= ORDERED_GATHER_MAX) {
        /* small: every rank gathers everything and sums (one collective) */
        void *rows = nullptr;
        VFM_TRY(device_scratch(c, (size_t)c->size * (size_t)count * dtype_size(dt), &rows));
        NCCL_TRY("all_reduce", api.AllGather(buf, rows, (size_t)count, ntype(dt), st->comm, st->stream));
        CUDA_TRY("all_reduce", launch_sum_rows(buf, rows, c->size, count, dt, st->stream));
        return VFM_OK;
    }
    /* large: rank p sums part p of every rank's buffer, then the parts are all-gathered (the bytes of
     * a ring all-reduce, scratch of one part per rank), one after the other on the comm's stream */
    int n = c->size;
    int64_t *parts = (int64_t *)malloc((size_t)n * sizeof *parts);
    if (!parts) return vfm_fail(VFM_ERR_NOMEM, "all_reduce over %s: parts", c->name);
    for (int p = 0; p < n; p++) parts[p] = count * (p + 1) / n - count * p / n;
    char *mine = (char *)buf + (size_t)(count * c->rank / n) * dtype_size(dt);
    vfm_status s = enqueue_reduce_scatter_v(c, buf, mine, parts, dt, COMM_SUM_ORDERED);
    if (s == VFM_OK) s = enqueue_all_gather_v(c, mine, buf, parts, dt);
    free(parts);
    return s;
}

extern "C" vfm_status nccl_all_reduce(Comm *c, void *buf, int64_t count, DType dt, CommOp op) {
    VFM_TRY(enqueue_all_reduce(c, buf, count, dt, op));
    return finish(c, "all_reduce");
}

static int all_equal(const Comm *c, const int64_t *counts) {
    for (int j = 1; j < c->size; j++)
        if (counts[j] != counts[0]) return 0;
    return 1;
}

static vfm_status enqueue_reduce_scatter_v(Comm *c, const void *send, void *recv, const int64_t *counts, DType dt, CommOp op) {
    NcclState *st = state(c);
    VFM_TRY(follow_compute(c, "reduce_scatter"));
    size_t es = dtype_size(dt);
    int64_t mine = counts[c->rank], total = 0, at = 0;
    for (int j = 0; j < c->size; j++) total += counts[j];
    if (op == COMM_SUM_ORDERED) {
        void *rows = nullptr;
        VFM_TRY(device_scratch(c, (size_t)c->size * (size_t)mine * es, &rows));
        NCCL_TRY("reduce_scatter", api.GroupStart());
        ncclResult_t r = ncclSuccess;
        for (int j = 0; j < c->size; j++) {
            if (counts[j] > 0) GROUP_CALL(r, api.Send((const char *)send + at * es, (size_t)counts[j], ntype(dt), j, st->comm, st->stream));
            if (mine > 0) GROUP_CALL(r, api.Recv((char *)rows + (size_t)j * mine * es, (size_t)mine, ntype(dt), j, st->comm, st->stream));
            at += counts[j];
        }
        VFM_TRY(group_end(c, "reduce_scatter", r));
        CUDA_TRY("reduce_scatter", launch_sum_rows(recv, rows, c->size, mine, dt, st->stream));
        return VFM_OK;
    }
    ncclRedOp_t rop = op == COMM_MAX ? ncclMax : ncclSum;
    /* recv inside send other than NCCL's in-place form: reduce into scratch, then copy */
    const char *lo = (const char *)send, *r = (const char *)recv;
    int overlap = r + mine * es > lo && r < lo + total * es;
    void *out = recv;
    if (overlap) VFM_TRY(device_scratch(c, (size_t)mine * es + 1, &out));
    if (all_equal(c, counts)) {
        NCCL_TRY("reduce_scatter", api.ReduceScatter(send, out, (size_t)mine, ntype(dt), rop, st->comm, st->stream));
    } else {
        NCCL_TRY("reduce_scatter", api.GroupStart());
        ncclResult_t r = ncclSuccess;
        for (int j = 0; j < c->size; j++) {
            if (counts[j] > 0) GROUP_CALL(r, api.Reduce((const char *)send + at * es, out, (size_t)counts[j], ntype(dt), rop, j, st->comm, st->stream));
            at += counts[j];
        }
        VFM_TRY(group_end(c, "reduce_scatter", r));
    }
    if (overlap) CUDA_TRY("reduce_scatter", cudaMemcpyAsync(recv, out, (size_t)mine * es, cudaMemcpyDeviceToDevice, st->stream));
    return VFM_OK;
}

static vfm_status enqueue_all_gather_v(Comm *c, const void *send, void *recv, const int64_t *counts, DType dt) {
    NcclState *st = state(c);
    VFM_TRY(follow_compute(c, "all_gather"));
    size_t es = dtype_size(dt);
    if (all_equal(c, counts)) {
        NCCL_TRY("all_gather", api.AllGather(send, recv, (size_t)counts[0], ntype(dt), st->comm, st->stream));
        return VFM_OK;
    }
    int64_t at = 0;
    NCCL_TRY("all_gather", api.GroupStart());
    ncclResult_t r = ncclSuccess;
    for (int j = 0; j < c->size; j++) {
        if (counts[j] > 0) GROUP_CALL(r, api.Broadcast(send, (char *)recv + at * es, (size_t)counts[j], ntype(dt), j, st->comm, st->stream));
        at += counts[j];
    }
    VFM_TRY(group_end(c, "all_gather", r));
    return VFM_OK;
}

// An event recorded on the comm's stream behind the work just enqueued (nccl_wait completes it).
static vfm_status record_pending(Comm *c, const char *op, void **pending) {
    cudaEvent_t ev;
    CUDA_TRY(op, cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    cudaError_t e = cudaEventRecord(ev, state(c)->stream);
    if (e != cudaSuccess) {
        cudaEventDestroy(ev);
        return cuda_error(c, op, e);
    }
    *pending = (void *)ev;
    return VFM_OK;
}

extern "C" vfm_status nccl_all_reduce_start(Comm *c, void *buf, int64_t count, DType dt, CommOp op, void **pending) {
    VFM_TRY(enqueue_all_reduce(c, buf, count, dt, op));
    return record_pending(c, "all_reduce", pending);
}

extern "C" vfm_status nccl_reduce_scatter_v(Comm *c, const void *send, void *recv, const int64_t *counts, DType dt, CommOp op) {
    VFM_TRY(enqueue_reduce_scatter_v(c, send, recv, counts, dt, op));
    return finish(c, "reduce_scatter");
}

extern "C" vfm_status nccl_reduce_scatter_v_start(Comm *c, const void *send, void *recv, const int64_t *counts, DType dt,
                                                  CommOp op, void **pending) {
    VFM_TRY(enqueue_reduce_scatter_v(c, send, recv, counts, dt, op));
    return record_pending(c, "reduce_scatter", pending);
}

extern "C" vfm_status nccl_all_gather_v(Comm *c, const void *send, void *recv, const int64_t *counts, DType dt) {
    VFM_TRY(enqueue_all_gather_v(c, send, recv, counts, dt));
    return finish(c, "all_gather");
}

extern "C" vfm_status nccl_all_gather_v_start(Comm *c, const void *send, void *recv, const int64_t *counts, DType dt,
                                              void **pending) {
    VFM_TRY(enqueue_all_gather_v(c, send, recv, counts, dt));
    return record_pending(c, "all_gather", pending);
}

extern "C" vfm_status nccl_broadcast(Comm *c, void *buf, int64_t count, DType dt, int root) {
    NcclState *st = state(c);
    VFM_TRY(follow_compute(c, "broadcast"));
    NCCL_TRY("broadcast", api.Broadcast(buf, buf, (size_t)count, ntype(dt), root, st->comm, st->stream));
    return finish(c, "broadcast");
}

extern "C" vfm_status nccl_send(Comm *c, const void *buf, int64_t count, DType dt, int peer) {
    NcclState *st = state(c);
    VFM_TRY(follow_compute(c, "send"));
    NCCL_TRY("send", api.Send(buf, (size_t)count, ntype(dt), peer, st->comm, st->stream));
    return finish(c, "send");
}

extern "C" vfm_status nccl_recv(Comm *c, void *buf, int64_t count, DType dt, int peer) {
    NcclState *st = state(c);
    VFM_TRY(follow_compute(c, "recv"));
    NCCL_TRY("recv", api.Recv(buf, (size_t)count, ntype(dt), peer, st->comm, st->stream));
    return finish(c, "recv");
}

extern "C" vfm_status nccl_all_to_all_v(Comm *c, const void *send, const int64_t *send_counts, const int64_t *send_displs,
                                        void *recv, const int64_t *recv_counts, const int64_t *recv_displs, DType dt) {
    NcclState *st = state(c);
    size_t es = dtype_size(dt);
    VFM_TRY(follow_compute(c, "all_to_all"));
    NCCL_TRY("all_to_all", api.GroupStart());
    ncclResult_t r = ncclSuccess;
    for (int j = 0; j < c->size; j++) {
        if (send_counts[j] > 0) GROUP_CALL(r, api.Send((const char *)send + send_displs[j] * es, (size_t)send_counts[j], ntype(dt), j, st->comm, st->stream));
        if (recv_counts[j] > 0) GROUP_CALL(r, api.Recv((char *)recv + recv_displs[j] * es, (size_t)recv_counts[j], ntype(dt), j, st->comm, st->stream));
    }
    VFM_TRY(group_end(c, "all_to_all", r));
    return finish(c, "all_to_all");
}

// An exchange in flight is an event recorded on the comm's stream after its group; waiting
// synchronises the host with it. The comm's stream is non-blocking, so compute issued on the ops'
// stream meanwhile overlaps it.
extern "C" vfm_status nccl_exchange_start(Comm *c, const CommP2P *ops, int n, void **pending) {
    NcclState *st = state(c);
    VFM_TRY(follow_compute(c, "exchange"));
    NCCL_TRY("exchange", api.GroupStart());
    ncclResult_t r = ncclSuccess;
    for (int i = 0; i < n; i++) {
        if (ops[i].count == 0) continue;
        if (ops[i].is_send) GROUP_CALL(r, api.Send(ops[i].buf, (size_t)ops[i].count, ntype(ops[i].dtype), ops[i].peer, st->comm, st->stream));
        else GROUP_CALL(r, api.Recv(ops[i].buf, (size_t)ops[i].count, ntype(ops[i].dtype), ops[i].peer, st->comm, st->stream));
    }
    VFM_TRY(group_end(c, "exchange", r));
    return record_pending(c, "exchange", pending);
}

extern "C" vfm_status nccl_wait(Comm *c, void *pending) {
    cudaEvent_t ev = (cudaEvent_t)pending;
    cudaError_t e = cudaEventSynchronize(ev);
    cudaEventDestroy(ev);
    if (e != cudaSuccess) return cuda_error(c, "wait", e);
    return VFM_OK;
}

extern "C" vfm_status nccl_barrier(Comm *c) {
    NcclState *st = state(c);
    void *one = nullptr;
    VFM_TRY(device_scratch(c, sizeof(float), &one));
    VFM_TRY(follow_compute(c, "barrier"));
    NCCL_TRY("barrier", api.AllReduce(one, one, 1, ncclFloat32, ncclSum, st->comm, st->stream));
    return finish(c, "barrier");
}

#endif
