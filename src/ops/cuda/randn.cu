// CUDA backend: Philox normal fill. The same philox.h code as the CPU (no fused multiply-adds,
// our own log/sincos), so element e gets the same bits on the GPU as on the CPU. Issued on the ops'
// stream like every other op (the noise must be ordered with the ops that read it).
#include "core/philox.h"
#include "cuda_common.h"

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// One thread per element: element e uses lane e % 4 of counter block e / 4.
template <typename T>
__global__ void randn_fill_kernel(T *out, int64_t n, uint32_t k0, uint32_t k1, uint32_t step, uint64_t uid,
                                  uint64_t element_offset, float std) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    uint32_t key[2] = {k0, k1};
    uint64_t e = element_offset + (uint64_t)i;
    float z[4];
    philox_normal4(key, e >> 2, step, uid, z);
    out[i] = from_float<T>(__fmul_rn(std, z[e & 3]));
}

extern "C" vfm_status cuda_randn_fill(Tensor *out, uint64_t seed, uint32_t stream, uint32_t step, uint64_t uid,
                                      uint64_t element_offset, float std) {
    int64_t n = tensor_numel(out);
    if (n == 0) return VFM_OK;
    uint32_t key[2];
    philox_key(seed, stream, key);
    int threads = 256;
    unsigned blocks = (unsigned)((n + threads - 1) / threads);
    cudaStream_t st = cuda_stream();
    if (out->dtype == DT_F32)
        randn_fill_kernel<float><<<blocks, threads, 0, st>>>((float *)out->data, n, key[0], key[1], step, uid,
                                                             element_offset, std);
    else if (out->dtype == DT_BF16)
        randn_fill_kernel<__nv_bfloat16><<<blocks, threads, 0, st>>>((__nv_bfloat16 *)out->data, n, key[0], key[1],
                                                                     step, uid, element_offset, std);
    else
        return vfm_fail(VFM_ERR_SHAPE, "randn_fill: unsupported dtype %s on cuda", dtype_name(out->dtype));
    return cuda_check_launch("randn_fill", out);
}
