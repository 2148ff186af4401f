// CUDA runtime calls behind the C interface of cuda_runtime_shim.h.
#include <cuda_runtime.h>
#include <stdio.h>

#include "cuda_runtime_shim.h"

static vfm_status cuda_fail(cudaError_t e, const char *what) {
    return vfm_fail(e == cudaErrorMemoryAllocation ? VFM_ERR_NOMEM : VFM_ERR_UNSUPPORTED, "%s: %s", what,
                    cudaGetErrorString(e));
}

extern "C" int vfm_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();  // clear the sticky "no driver" error
        return 0;
    }
    return n;
}

extern "C" vfm_status vfm_cuda_malloc(size_t bytes, void **out) {
    cudaError_t e = cudaMalloc(out, bytes);
    return e == cudaSuccess ? VFM_OK : cuda_fail(e, "cudaMalloc");
}

extern "C" void vfm_cuda_free(void *p) { cudaFree(p); }

extern "C" vfm_status vfm_cuda_memcpy(void *dst, int dst_on_gpu, const void *src, int src_on_gpu, size_t bytes) {
    cudaMemcpyKind kind = dst_on_gpu ? (src_on_gpu ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                                     : (src_on_gpu ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
    cudaError_t e = cudaMemcpy(dst, src, bytes, kind);
    return e == cudaSuccess ? VFM_OK : cuda_fail(e, "cudaMemcpy");
}

extern "C" vfm_status vfm_cuda_memset0(void *p, size_t bytes) {
    cudaError_t e = cudaMemset(p, 0, bytes);
    return e == cudaSuccess ? VFM_OK : cuda_fail(e, "cudaMemset");
}

extern "C" vfm_status vfm_cuda_synchronize(void) {
    cudaError_t e = cudaDeviceSynchronize();
    return e == cudaSuccess ? VFM_OK : cuda_fail(e, "cudaDeviceSynchronize");
}

extern "C" const char *vfm_cuda_describe(void) {
    static char buf[256];
    int n = vfm_cuda_device_count();
    if (n == 0) return "no CUDA device";
    cudaDeviceProp p;
    int dev = 0;
    cudaGetDevice(&dev);
    cudaGetDeviceProperties(&p, dev);
    snprintf(buf, sizeof buf, "%s, sm_%d%d, %.1f GiB (%d device%s)", p.name, p.major, p.minor,
             (double)p.totalGlobalMem / (1024.0 * 1024.0 * 1024.0), n, n > 1 ? "s" : "");
    return buf;
}
