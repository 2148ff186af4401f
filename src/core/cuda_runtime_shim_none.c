/* CPU-only build: every CUDA entry point reports that CUDA is not available. */
#include "cuda_runtime_shim.h"

#ifndef VFM_CUDA
static vfm_status no_cuda(void) {
    return vfm_fail(VFM_ERR_UNSUPPORTED, "this vfm was built without CUDA (nvcc was not found at build time)");
}
int vfm_cuda_device_count(void) { return 0; }
vfm_status vfm_cuda_malloc(size_t bytes, void **out) { (void)bytes; *out = NULL; return no_cuda(); }
void vfm_cuda_free(void *p) { (void)p; }
vfm_status vfm_cuda_memcpy(void *dst, int dst_on_gpu, const void *src, int src_on_gpu, size_t bytes) {
    (void)dst; (void)dst_on_gpu; (void)src; (void)src_on_gpu; (void)bytes;
    return no_cuda();
}
vfm_status vfm_cuda_memset0(void *p, size_t bytes) { (void)p; (void)bytes; return no_cuda(); }
vfm_status vfm_cuda_synchronize(void) { return VFM_OK; }
const char *vfm_cuda_describe(void) { return "no CUDA support in this build"; }
const char *vfm_cuda_device_name(void) { return ""; }
void vfm_cuda_alloc_stats(size_t *current, size_t *peak) { *current = *peak = 0; }
void vfm_cuda_alloc_reset_peak(void) {}
vfm_status vfm_cuda_mem_info(size_t *free_bytes, size_t *total_bytes) {
    *free_bytes = *total_bytes = 0;
    return no_cuda();
}
vfm_status vfm_cuda_host_alloc(size_t bytes, void **out) { (void)bytes; *out = NULL; return no_cuda(); }
void vfm_cuda_host_free(void *p) { (void)p; }
int vfm_cuda_is_device_pointer(const void *p) { (void)p; return 0; }
void vfm_cuda_set_process_device(int device) { (void)device; }
vfm_status vfm_cuda_stream_create(void **stream) { *stream = NULL; return no_cuda(); }
void vfm_cuda_stream_destroy(void *stream) { (void)stream; }
vfm_status vfm_cuda_event_create(void **event) { *event = NULL; return no_cuda(); }
void vfm_cuda_event_destroy(void *event) { (void)event; }
vfm_status vfm_cuda_event_record(void *event, void *stream) { (void)event; (void)stream; return no_cuda(); }
vfm_status vfm_cuda_stream_wait_event(void *stream, void *event) { (void)stream; (void)event; return no_cuda(); }
vfm_status vfm_cuda_event_synchronize(void *event) { (void)event; return VFM_OK; }
vfm_status vfm_cuda_stream_synchronize(void *stream) { (void)stream; return VFM_OK; }
vfm_status vfm_cuda_memcpy_async(void *dst, int dst_on_gpu, const void *src, int src_on_gpu, size_t bytes,
                                 void *stream) {
    (void)dst; (void)dst_on_gpu; (void)src; (void)src_on_gpu; (void)bytes; (void)stream;
    return no_cuda();
}
#else
typedef int vfm_cuda_shim_none_unused; /* ISO C forbids an empty translation unit */
#endif
