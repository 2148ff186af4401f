/* The few CUDA runtime calls core needs, behind a C interface. Implemented in
 * cuda_runtime_shim.cu when built with nvcc (VFM_CUDA), else by stubs that report
 * "this build has no CUDA" so the binary runs CPU-only. Every call that makes the host wait for the
 * device (vfm_cuda_memcpy, the synchronize calls) is counted (core/host_reads.h). */
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
/* The GPU this process works on (comm_bind_gpu sets it): threads other than the one that chose it
 * (the data loader's readers allocating page-locked buffers) select it before any CUDA call, so
 * they never start a context on another device. -1 (the start value) = the runtime's default. */
void vfm_cuda_set_process_device(int device);
/* Streams and events for copies that overlap compute (handles are cudaStream_t / cudaEvent_t).
 * A created stream does not synchronise with the legacy default stream (the ops' stream unless
 * cuda_ops_set_stream changed it): order against it only through events. Events have timing off.
 * stream NULL means the legacy default stream. */
vfm_status vfm_cuda_stream_create(void **stream);
void vfm_cuda_stream_destroy(void *stream);
vfm_status vfm_cuda_event_create(void **event);
void vfm_cuda_event_destroy(void *event);
vfm_status vfm_cuda_event_record(void *event, void *stream);
/* Work issued on `stream` after this call waits until `event` has completed (the host does not wait). */
vfm_status vfm_cuda_stream_wait_event(void *stream, void *event);
/* The host waits until the work issued on `stream` is done. */
vfm_status vfm_cuda_stream_synchronize(void *stream);
/* The host waits until `event` has completed (a never-recorded event has). */
vfm_status vfm_cuda_event_synchronize(void *event);
/* cudaMemcpyAsync on `stream`: asynchronous to the host when the host side is page-locked. */
vfm_status vfm_cuda_memcpy_async(void *dst, int dst_on_gpu, const void *src, int src_on_gpu, size_t bytes,
                                 void *stream);
/* 1 when p points into device memory (cudaMalloc'd or managed), 0 for host memory, NULL, or
 * without a device. */
int vfm_cuda_is_device_pointer(const void *p);

#ifdef __cplusplus
}
#endif
#endif
