// CUDA backend: sum of squares (the global gradient norm) and the NaN/Inf count. Both return a host
// value, so they wait for the stream. The sum is taken in double: per-block partials over a grid
// whose size depends only on n, then one block adds them in order — the same bits every run.
#include "cuda_common.h"

#define SUMSQ_BLOCKS 512

template <typename T> __global__ void sum_squares_partial_kernel(const T *x, int64_t n, double *partial) {
    double s = 0;
    GRID_STRIDE(i, n) {
        double v = (double)to_f32(x[i]);
        s += v * v;
    }
    s = block_sum<double>(s);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void sum_partials_kernel(const double *partial, int n, double *out) {
    double s = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += partial[i];
    s = block_sum<double>(s);
    if (threadIdx.x == 0) *out = s;
}

template <typename T> __global__ void count_nonfinite_kernel(const T *x, int64_t n, unsigned long long *count) {
    unsigned long long c = 0;
    GRID_STRIDE(i, n) c += isfinite(to_f32(x[i])) ? 0 : 1;
    c = block_sum<unsigned long long>(c);
    if (threadIdx.x == 0 && c) atomicAdd(count, c);  // integer sum: any order gives the same count
}

extern "C" vfm_status cuda_sum_squares(double *out, const Tensor *x) {
    int64_t n = tensor_numel(x);
    *out = 0;
    if (n == 0) return VFM_OK;
    unsigned blocks = cuda_blocks(n);
    if (blocks > SUMSQ_BLOCKS) blocks = SUMSQ_BLOCKS;
    double *partial = NULL, *result = NULL;
    VFM_TRY(cuda_scratch(SCRATCH_REDUCE, blocks * sizeof(double), (void **)&partial));
    VFM_TRY(cuda_scratch(SCRATCH_HOST_RESULT, sizeof(double), (void **)&result));
    cudaStream_t st = cuda_stream();
    FLOAT_DISPATCH("sum_squares", "x", x, T,
                   CUDA_LAUNCH(sum_squares_partial_kernel<T>, blocks, CUDA_THREADS, 0, (const T *)x->data, n, partial));
    CUDA_LAUNCH(sum_partials_kernel, 1, CUDA_THREADS, 0, partial, (int)blocks, result);
    CUDA_TRY("sum_squares", x, cudaMemcpyAsync(out, result, sizeof(double), cudaMemcpyDeviceToHost, st));
    CUDA_TRY("sum_squares", x, cudaStreamSynchronize(st));
    return VFM_OK;
}

extern "C" vfm_status cuda_count_nonfinite(int64_t *count, const Tensor *x) {
    int64_t n = tensor_numel(x);
    *count = 0;
    if (n == 0) return VFM_OK;
    unsigned long long *dev = NULL, host = 0;
    VFM_TRY(cuda_scratch(SCRATCH_HOST_RESULT, sizeof(unsigned long long), (void **)&dev));
    cudaStream_t st = cuda_stream();
    CUDA_TRY("count_nonfinite", x, cudaMemsetAsync(dev, 0, sizeof *dev, st));
    FLOAT_DISPATCH("count_nonfinite", "x", x, T,
                   CUDA_LAUNCH(count_nonfinite_kernel<T>, cuda_blocks(n), CUDA_THREADS, 0, (const T *)x->data, n, dev));
    CUDA_TRY("count_nonfinite", x, cudaMemcpyAsync(&host, dev, sizeof host, cudaMemcpyDeviceToHost, st));
    CUDA_TRY("count_nonfinite", x, cudaStreamSynchronize(st));
    *count = (int64_t)host;
    return VFM_OK;
}

// acc[at] = Σ x², the kernels and bits of cuda_sum_squares, left on the device (no host wait).
extern "C" vfm_status cuda_sum_squares_into(Tensor *acc, int64_t at, const Tensor *x) {
    int64_t n = tensor_numel(x);
    cudaStream_t st = cuda_stream();
    double *out = (double *)acc->data + at;
    if (n == 0) {
        CUDA_TRY("sum_squares_into", x, cudaMemsetAsync(out, 0, sizeof *out, st));
        return VFM_OK;
    }
    unsigned blocks = cuda_blocks(n);
    if (blocks > SUMSQ_BLOCKS) blocks = SUMSQ_BLOCKS;
    double *partial = NULL;
    VFM_TRY(cuda_scratch(SCRATCH_REDUCE, blocks * sizeof(double), (void **)&partial));
    FLOAT_DISPATCH("sum_squares_into", "x", x, T,
                   CUDA_LAUNCH(sum_squares_partial_kernel<T>, blocks, CUDA_THREADS, 0, (const T *)x->data, n, partial));
    CUDA_LAUNCH(sum_partials_kernel, 1, CUDA_THREADS, 0, partial, (int)blocks, out);
    return VFM_OK;
}
