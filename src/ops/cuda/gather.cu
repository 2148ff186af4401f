// CUDA backend: row lookup (class-label embedding) and column gather with their scatter-add
// backwards. Each destination element is owned by one thread that adds its terms in the CPU's order
// (b for the table, k within a row for the columns) with explicitly rounded f32 additions: no
// atomics, and f32 results are the CPU's bits. Indices live on the GPU: they are checked there and
// the answer is brought back (the call waits for the GPU), so an index outside is an error before
// anything is written, as on the CPU.
#include <limits.h>

#include "cuda_common.h"

// first[0] = the smallest position i with idx[i] outside [0, n) (integer min: order-free).
__global__ void first_bad_index_kernel(const int32_t *idx, int64_t count, int64_t n, unsigned long long *first) {
    GRID_STRIDE(i, count) {
        if (idx[i] < 0 || idx[i] >= n) atomicMin(first, (unsigned long long)i);
    }
}

// VFM_ERR_SHAPE naming the first index of idx[count] outside [0, n), else VFM_OK.
static vfm_status check_indices(const char *op, const Tensor *idx, int64_t count, int64_t n, const char *whose,
                                const char *unit) {
    if (count == 0) return VFM_OK;
    unsigned long long *first = NULL, host = 0;
    VFM_TRY(cuda_scratch(SCRATCH_HOST_RESULT, sizeof *first, (void **)&first));
    cudaStream_t st = cuda_stream();
    CUDA_TRY(op, idx, cudaMemsetAsync(first, 0xff, sizeof *first, st));  // ULLONG_MAX: none yet
    CUDA_LAUNCH(first_bad_index_kernel, cuda_blocks(count), CUDA_THREADS, 0, (const int32_t *)idx->data, count, n,
                first);
    CUDA_TRY(op, idx, cudaMemcpyAsync(&host, first, sizeof host, cudaMemcpyDeviceToHost, st));
    CUDA_TRY(op, idx, cudaStreamSynchronize(st));
    if (host == ULLONG_MAX) return VFM_OK;
    int32_t value = 0;
    CUDA_TRY(op, idx, cudaMemcpy(&value, (const int32_t *)idx->data + host, sizeof value, cudaMemcpyDeviceToHost));
    return vfm_fail(VFM_ERR_SHAPE, "%s: idx[%llu] = %d is outside the %s %lld %s", op, host, value, whose, (long long)n,
                    unit);
}

// out[b, d] = table[idx[b], d]
template <typename T> __global__ void embedding_forward_kernel(T *out, const T *table, const int32_t *idx, int64_t B, int64_t D) {
    GRID_STRIDE(i, B * D) out[i] = table[(int64_t)idx[i / D] * D + i % D];
}

// dtable[idx[b], d] += dout[b, d], b in order: one thread per column d.
template <typename T> __global__ void embedding_backward_kernel(float *dtable, const T *dout, const int32_t *idx, int64_t B, int64_t D) {
    GRID_STRIDE(d, D) {
        for (int64_t b = 0; b < B; b++) {
            float *cell = dtable + (int64_t)idx[b] * D + d;
            *cell = __fadd_rn(*cell, to_f32(dout[b * D + d]));
        }
    }
}

// out[n, k] = in[n, idx[k]] (raw element copies: any dtype of the element's size)
template <typename E> __global__ void gather_columns_kernel(E *out, const E *in, const int32_t *idx, int64_t N, int64_t K, int64_t M) {
    GRID_STRIDE(i, N * K) out[i] = in[(i / K) * M + idx[i % K]];
}

// din[n, idx[k]] += dout[n, k], k in order: one thread per row n.
template <typename T> __global__ void gather_columns_backward_kernel(T *din, const T *dout, const int32_t *idx, int64_t N, int64_t K, int64_t M) {
    GRID_STRIDE(n, N) {
        for (int64_t k = 0; k < K; k++) {
            T *cell = din + n * M + idx[k];
            *cell = from_f32<T>(__fadd_rn(to_f32(*cell), to_f32(dout[n * K + k])));
        }
    }
}

extern "C" vfm_status cuda_embedding_forward(Tensor *out, const Tensor *table, const Tensor *idx) {
    const char *op = "embedding_forward";
    int64_t B = tensor_dim(out, 0), D = tensor_dim(out, 1);
    VFM_TRY(check_indices(op, idx, B, tensor_dim(table, 0), "table's", "rows"));
    if (B * D == 0) return VFM_OK;
    FLOAT_DISPATCH(op, "table", table, T,
                   CUDA_LAUNCH(embedding_forward_kernel<T>, cuda_blocks(B * D), CUDA_THREADS, 0, (T *)out->data,
                               (const T *)table->data, (const int32_t *)idx->data, B, D));
    return VFM_OK;
}

extern "C" vfm_status cuda_embedding_backward(Tensor *dtable, const Tensor *dout, const Tensor *idx) {
    const char *op = "embedding_backward";
    int64_t B = tensor_dim(dout, 0), D = tensor_dim(dout, 1);
    VFM_TRY(check_indices(op, idx, B, tensor_dim(dtable, 0), "table's", "rows"));
    if (B * D == 0) return VFM_OK;
    if (dtable->dtype != DT_F32) return cuda_bad_dtype(op, "dtable", dtable);
    FLOAT_DISPATCH(op, "dout", dout, T,
                   CUDA_LAUNCH(embedding_backward_kernel<T>, cuda_blocks(D), CUDA_THREADS, 0, (float *)dtable->data,
                               (const T *)dout->data, (const int32_t *)idx->data, B, D));
    return VFM_OK;
}

extern "C" vfm_status cuda_gather_columns(Tensor *out, const Tensor *in, const Tensor *idx) {
    const char *op = "gather_columns";
    int64_t N = tensor_dim(out, 0), K = tensor_dim(out, 1), M = tensor_dim(in, 1);
    VFM_TRY(check_indices(op, idx, K, M, "input's", "columns"));
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
    VFM_TRY(check_indices(op, idx, K, M, "input's", "columns"));
    if (N * K == 0) return VFM_OK;
    FLOAT_DISPATCH(op, "din", din, T,
                   CUDA_LAUNCH(gather_columns_backward_kernel<T>, cuda_blocks(N), CUDA_THREADS, 0, (T *)din->data,
                               (const T *)dout->data, (const int32_t *)idx->data, N, K, M));
    return VFM_OK;
}
