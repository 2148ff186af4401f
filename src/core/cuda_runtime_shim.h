/* The few CUDA runtime calls core needs, behind a C interface. Implemented in
 * cuda_runtime_shim.cu when built with nvcc (VFM_CUDA), else by stubs that report
 * "this build has no CUDA" so the binary runs CPU-only. */
#ifndef VFM_CUDA_RUNTIME_SHIM_H
#define VFM_CUDA_RUNTIME_SHIM_H

#include <stddef.h>

#include "error.h"

#ifdef __cplusplus
extern "C" {
#endif

int vfm_cuda_device_count(void);
vfm_status vfm_cuda_malloc(size_t bytes, void **out);
void vfm_cuda_free(void *p);
vfm_status vfm_cuda_memcpy(void *dst, int dst_on_gpu, const void *src, int src_on_gpu, size_t bytes);
vfm_status vfm_cuda_memset0(void *p, size_t bytes);
vfm_status vfm_cuda_synchronize(void);
/* "NVIDIA H100 80GB HBM3, sm_90, 79.1 GiB" or "no CUDA device". */
const char *vfm_cuda_describe(void);
/* The current device's name ("NVIDIA H100 80GB HBM3"), "" without one. */
const char *vfm_cuda_device_name(void);

/* Bytes vfm holds through vfm_cuda_malloc now, and the most it held since the last reset (the
 * allocator's high-water mark: weights, optimizer state, activations, scratch; not what cuBLASLt,
 * cuDNN or NCCL allocate for themselves). */
void vfm_cuda_alloc_stats(size_t *current, size_t *peak);
void vfm_cuda_alloc_reset_peak(void);
/* Free and total memory of the current device (cudaMemGetInfo: everything, every process). */
vfm_status vfm_cuda_mem_info(size_t *free_bytes, size_t *total_bytes);
/* Page-locked host memory (cudaMallocHost), for copies that overlap compute. */
vfm_status vfm_cuda_host_alloc(size_t bytes, void **out);
void vfm_cuda_host_free(void *p);
/* 1 when p points into device memory (cudaMalloc'd or managed), 0 for host memory, NULL, or
 * without a device. */
int vfm_cuda_is_device_pointer(const void *p);

#ifdef __cplusplus
}
#endif
#endif
