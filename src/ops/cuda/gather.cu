// CUDA backend: row lookup (class-label embedding) and column gather with their scatter-add
// backwards. Each destination element is owned by one thread that adds its terms in the CPU's order
// (b for the table, k within a row for the columns) with explicitly rounded f32 additions: no
// atomics, and f32 results are the CPU's bits. Indices live on the GPU and are checked there
// without the host waiting (a wait per call would be several per micro-batch): an index outside
// is skipped by the kernels (its output row or column is 0, its gradient dropped) and the first
// one is kept on the GPU; cuda_index_errors (ops_check_index_errors) reports it later, when the
// host reads anyway (the trainer: with the step counters, once per log interval).
#include <limits.h>

#include "core/cuda_runtime_shim.h"
#include "core/host_reads.h"
#include "cuda_common.h"

// first[0] = the smallest position i with idx[i] outside [0, n) (integer min: order-free).
__global__ void first_bad_index_kernel(const int32_t *idx, int64_t count, int64_t n, unsigned long long *first) {
    GRID_STRIDE(i, count) {
        if (idx[i] < 0 || idx[i] >= n) atomicMin(first, (unsigned long long)i);
    }
}

// The first call with an index outside is kept: rec = {position, value, op, bound} (rec[0] = -1: none).
__global__ void keep_bad_index_kernel(const unsigned long long *first, const int32_t *idx, int64_t n, int op,
                                      long long *rec) {
    if (*first == ULLONG_MAX || rec[0] >= 0) return;
    rec[0] = (long long)*first, rec[1] = idx[*first], rec[2] = op, rec[3] = n;
}

static const char *const kIndexOps[4] = {"embedding_forward", "embedding_backward", "gather_columns",
                                         "gather_columns_backward"};
static long long *g_bad_record;  // device [4]: the first index outside found since the last report

// Checks idx[count] against [0, n) on the GPU; the host does not wait (see the top).
static vfm_status check_indices(int op, const Tensor *idx, int64_t count, int64_t n) {
    if (count == 0) return VFM_OK;
    cudaStream_t st = cuda_stream();
    if (!g_bad_record) {
        VFM_TRY(vfm_cuda_malloc(4 * sizeof(long long), (void **)&g_bad_record));
        CUDA_TRY(kIndexOps[op], idx, cudaMemsetAsync(g_bad_record, 0xff, 4 * sizeof(long long), st));
    }
    unsigned long long *first = NULL;
    VFM_TRY(cuda_scratch(SCRATCH_HOST_RESULT, sizeof *first, (void **)&first));
    CUDA_TRY(kIndexOps[op], idx, cudaMemsetAsync(first, 0xff, sizeof *first, st));  // ULLONG_MAX: none yet
    CUDA_LAUNCH(first_bad_index_kernel, cuda_blocks(count), CUDA_THREADS, 0, (const int32_t *)idx->data, count, n, first);
    CUDA_LAUNCH(keep_bad_index_kernel, 1, 1, 0, first, (const int32_t *)idx->data, n, op, g_bad_record);
    return VFM_OK;
}

extern "C" vfm_status cuda_index_errors(void) {
    if (!g_bad_record) return VFM_OK;
    long long rec[4];
    vfm_host_read("index check (gather, embedding)");
    cudaStream_t st = cuda_stream();
    CUDA_TRY("index check", NULL, cudaMemcpyAsync(rec, g_bad_record, sizeof rec, cudaMemcpyDeviceToHost, st));
    CUDA_TRY("index check", NULL, cudaStreamSynchronize(st));
    if (rec[0] < 0) return VFM_OK;
    CUDA_TRY("index check", NULL, cudaMemsetAsync(g_bad_record, 0xff, sizeof rec, st));
    int op = rec[2] >= 0 && rec[2] < 4 ? (int)rec[2] : 0;
    const char *whose = op < 2 ? "table's" : "input's", *unit = op < 2 ? "rows" : "columns";
    return vfm_fail(VFM_ERR_SHAPE, "%s: idx[%lld] = %lld is outside the %s %lld %s (found on the GPU)", kIndexOps[op],
                    rec[0], rec[1], whose, rec[3], unit);
}

// out[b, d] = table[idx[b], d] (0 for an index outside [0, rows))
template <typename T>
__global__ void embedding_forward_kernel(T *out, const T *table, const int32_t *idx, int64_t B, int64_t D, int64_t rows) {
    GRID_STRIDE(i, B * D) {
        int64_t r = idx[i / D];
        out[i] = r >= 0 && r < rows ? table[r * D + i % D] : from_f32<T>(0.f);
    }
}

// dtable[idx[b], d] += dout[b, d], b in order: one thread per column d (indices outside skipped).
template <typename T>
__global__ void embedding_backward_kernel(float *dtable, const T *dout, const int32_t *idx, int64_t B, int64_t D, int64_t rows) {
    GRID_STRIDE(d, D) {
        for (int64_t b = 0; b < B; b++) {
            if (idx[b] < 0 || idx[b] >= rows) continue;
            float *cell = dtable + (int64_t)idx[b] * D + d;
            *cell = __fadd_rn(*cell, to_f32(dout[b * D + d]));
        }
    }
}

// out[n, k] = in[n, idx[k]] (raw element copies: any dtype of the element's size; 0 for an index outside)
template <typename E> __global__ void gather_columns_kernel(E *out, const E *in, const int32_t *idx, int64_t N, int64_t K, int64_t M) {
    GRID_STRIDE(i, N * K) {
        int64_t c = idx[i % K];
        out[i] = c >= 0 && c < M ? in[(i / K) * M + c] : (E)0;
    }
}

// din[n, idx[k]] += dout[n, k], k in order: one thread per row n.
template <typename T> __global__ void gather_columns_backward_kernel(T *din, const T *dout, const int32_t *idx, int64_t N, int64_t K, int64_t M) {
    GRID_STRIDE(n, N) {
        for (int64_t k = 0; k < K; k++) {
            if (idx[k] < 0 || idx[k] >= M) continue;
            T *cell = din + n * M + idx[k];
            *cell = from_f32<T>(__fadd_rn(to_f32(*cell), to_f32(dout[n * K + k])));
        }
    }
}

extern "C" vfm_status cuda_embedding_forward(Tensor *out, const Tensor *table, const Tensor *idx) {
    const char *op = "embedding_forward";
    int64_t B = tensor_dim(out, 0), D = tensor_dim(out, 1);
    VFM_TRY(check_indices(0, idx, B, tensor_dim(table, 0)));
    if (B * D == 0) return VFM_OK;
    FLOAT_DISPATCH(op, "table", table, T,
                   CUDA_LAUNCH(embedding_forward_kernel<T>, cuda_blocks(B * D), CUDA_THREADS, 0, (T *)out->data,
                               (const T *)table->data, (const int32_t *)idx->data, B, D, tensor_dim(table, 0)));
    return VFM_OK;
}

extern "C" vfm_status cuda_embedding_backward(Tensor *dtable, const Tensor *dout, const Tensor *idx) {
    const char *op = "embedding_backward";
    int64_t B = tensor_dim(dout, 0), D = tensor_dim(dout, 1);
    VFM_TRY(check_indices(1, idx, B, tensor_dim(dtable, 0)));
    if (B * D == 0) return VFM_OK;
    if (dtable->dtype != DT_F32) return cuda_bad_dtype(op, "dtable", dtable);
    FLOAT_DISPATCH(op, "dout", dout, T,
                   CUDA_LAUNCH(embedding_backward_kernel<T>, cuda_blocks(D), CUDA_THREADS, 0, (float *)dtable->data,
                               (const T *)dout->data, (const int32_t *)idx->data, B, D, tensor_dim(dtable, 0)));
    return VFM_OK;
}

extern "C" vfm_status cuda_gather_columns(Tensor *out, const Tensor *in, const Tensor *idx) {
    const char *op = "gather_columns";
    int64_t N = tensor_dim(out, 0), K = tensor_dim(out, 1), M = tensor_dim(in, 1);
    VFM_TRY(check_indices(2, idx, K, M));
    if (N * K == 0) return VFM_OK;
    const int32_t *I = (const int32_t *)idx->data;
    if (dtype_size(in->dtype) == 4)
        CUDA_LAUNCH(gather_columns_kernel<uint32_t>, cuda_blocks(N * K), CUDA_THREADS, 0, (uint32_t *)out->data,
                    (const uint32_t *)in->data, I, N, K, M);
    else if (dtype_size(in->dtype) == 2)
        CUDA_LAUNCH(gather_columns_kernel<uint16_t>, cuda_blocks(N * K), CUDA_THREADS, 0, (uint16_t *)out->data,
                    (const uint16_t *)in->data, I, N, K, M);
    else
        return cuda_bad_dtype(op, "in", in);
    return VFM_OK;
}

extern "C" vfm_status cuda_gather_columns_backward(Tensor *din, const Tensor *dout, const Tensor *idx) {
    const char *op = "gather_columns_backward";
    int64_t N = tensor_dim(dout, 0), K = tensor_dim(dout, 1), M = tensor_dim(din, 1);
    VFM_TRY(check_indices(3, idx, K, M));
    if (N * K == 0) return VFM_OK;
    FLOAT_DISPATCH(op, "din", din, T,
                   CUDA_LAUNCH(gather_columns_backward_kernel<T>, cuda_blocks(N), CUDA_THREADS, 0, (T *)din->data,
                               (const T *)dout->data, (const int32_t *)idx->data, N, K, M));
    return VFM_OK;
}
