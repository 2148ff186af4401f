// CUDA backend: Philox normal fill. The same philox.h code as the CPU (no fused multiply-adds,
// our own log/sincos), so element e gets the same bits on the GPU as on the CPU.
#include "core/philox.h"
#include "cuda_common.h"

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
    out[i] = from_f32<T>(__fmul_rn(std, z[e & 3]));
}

extern "C" vfm_status cuda_randn_fill(Tensor *out, uint64_t seed, uint32_t stream, uint32_t step, uint64_t uid,
                                      uint64_t element_offset, float std) {
    int64_t n = tensor_numel(out);
    if (n == 0) return VFM_OK;
    uint32_t key[2];
    philox_key(seed, stream, key);
    int threads = 256;
    unsigned blocks = (unsigned)((n + threads - 1) / threads);
    FLOAT_DISPATCH("randn_fill", "out", out, T,
                   CUDA_LAUNCH(randn_fill_kernel<T>, blocks, threads, 0, (T *)out->data, n, key[0], key[1], step, uid,
                               element_offset, std));
    return VFM_OK;
}
