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

#ifdef __cplusplus
}
#endif
#endif
