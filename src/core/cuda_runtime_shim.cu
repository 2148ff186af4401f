// CUDA runtime calls behind the C interface of cuda_runtime_shim.h, and the byte count of what vfm
// holds on the GPU (a table of live allocations, so a free knows its size).
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "cuda_runtime_shim.h"
#include "host_reads.h"

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

// ---- live allocations: open addressing, pointer -> bytes -----------------------------------------

typedef struct {
    void *p;
    size_t bytes;
} Live;
static Live *g_live;
static size_t g_live_cap, g_live_n, g_held, g_peak;
static pthread_mutex_t g_live_lock = PTHREAD_MUTEX_INITIALIZER;
#define FREED ((void *)1)

static size_t live_hash(const void *p, size_t cap) { return (size_t)(((uintptr_t)p >> 8) * 0x9E3779B97F4A7C15ull) & (cap - 1); }

// Rehashes without the freed slots, doubling the table when more than a quarter of it is live.
static int live_grow(void) {
    size_t live = 0;
    for (size_t i = 0; i < g_live_cap; i++) live += g_live[i].p && g_live[i].p != FREED;
    size_t cap = g_live_cap == 0 ? 1024 : live * 4 > g_live_cap ? 2 * g_live_cap : g_live_cap;
    Live *t = (Live *)calloc(cap, sizeof *t);
    if (!t) return 0;
    for (size_t i = 0; i < g_live_cap; i++)
        if (g_live[i].p && g_live[i].p != FREED) {
            size_t h = live_hash(g_live[i].p, cap);
            while (t[h].p) h = (h + 1) & (cap - 1);
            t[h] = g_live[i];
        }
    free(g_live);
    g_live = t;
    g_live_cap = cap;
    g_live_n = 0;
    for (size_t i = 0; i < cap; i++) g_live_n += t[i].p != NULL;
    return 1;
}

static void live_add(void *p, size_t bytes) {
    pthread_mutex_lock(&g_live_lock);
    if ((g_live_n + 1) * 2 > g_live_cap && !live_grow()) {  // no table: the bytes go uncounted
        pthread_mutex_unlock(&g_live_lock);
        return;
    }
    size_t h = live_hash(p, g_live_cap);
    while (g_live[h].p && g_live[h].p != FREED) h = (h + 1) & (g_live_cap - 1);
    if (!g_live[h].p) g_live_n++;
    g_live[h] = (Live){p, bytes};
    g_held += bytes;
    if (g_held > g_peak) g_peak = g_held;
    pthread_mutex_unlock(&g_live_lock);
}

static void live_remove(void *p) {
    pthread_mutex_lock(&g_live_lock);
    if (g_live_cap) {
        size_t h = live_hash(p, g_live_cap);
        for (size_t k = 0; k < g_live_cap && g_live[h].p; k++, h = (h + 1) & (g_live_cap - 1))
            if (g_live[h].p == p) {
                g_held -= g_live[h].bytes;
                g_live[h].p = FREED;  // keeps the probe chains of later entries intact
                break;
            }
    }
    pthread_mutex_unlock(&g_live_lock);
}

extern "C" void vfm_cuda_alloc_stats(size_t *current, size_t *peak) {
    pthread_mutex_lock(&g_live_lock);
    *current = g_held;
    *peak = g_peak;
    pthread_mutex_unlock(&g_live_lock);
}

extern "C" void vfm_cuda_alloc_reset_peak(void) {
    pthread_mutex_lock(&g_live_lock);
    g_peak = g_held;
    pthread_mutex_unlock(&g_live_lock);
}

extern "C" vfm_status vfm_cuda_mem_info(size_t *free_bytes, size_t *total_bytes) {
    *free_bytes = *total_bytes = 0;
    cudaError_t e = cudaMemGetInfo(free_bytes, total_bytes);
    return e == cudaSuccess ? VFM_OK : cuda_fail(e, "cudaMemGetInfo");
}

static double mib(size_t b) { return (double)b / (1024.0 * 1024.0); }

extern "C" vfm_status vfm_cuda_malloc(size_t bytes, void **out) {
    cudaError_t e = cudaMalloc(out, bytes);
    if (e == cudaSuccess) {
        live_add(*out, bytes);
        return VFM_OK;
    }
    *out = NULL;
    if (e != cudaErrorMemoryAllocation) return cuda_fail(e, "cudaMalloc");
    cudaGetLastError();  // an allocation failure is not sticky; clear it
    size_t held, peak, free_b = 0, total = 0;
    vfm_cuda_alloc_stats(&held, &peak);
    if (cudaMemGetInfo(&free_b, &total) != cudaSuccess) cudaGetLastError();
    return vfm_fail(VFM_ERR_NOMEM,
                    "out of GPU memory: cudaMalloc of %.1f MiB failed; vfm holds %.1f MiB (peak %.1f MiB), the device "
                    "has %.1f MiB free of %.1f MiB",
                    mib(bytes), mib(held), mib(peak), mib(free_b), mib(total));
}

extern "C" void vfm_cuda_free(void *p) {
    if (!p) return;
    live_remove(p);
    cudaFree(p);
}

static int g_process_device = -1;

extern "C" void vfm_cuda_set_process_device(int device) { __atomic_store_n(&g_process_device, device, __ATOMIC_RELEASE); }

// This thread's current device := the process's (a no-op when unset or already current).
static void use_process_device(void) {
    int want = __atomic_load_n(&g_process_device, __ATOMIC_ACQUIRE), cur = -1;
    if (want < 0) return;
    if (cudaGetDevice(&cur) != cudaSuccess || cur != want) {
        cudaGetLastError();
        cudaSetDevice(want);
    }
}

extern "C" vfm_status vfm_cuda_host_alloc(size_t bytes, void **out) {
    use_process_device();  // called from the loader's reader threads too
    cudaError_t e = cudaMallocHost(out, bytes ? bytes : 1);
    if (e == cudaSuccess) return VFM_OK;
    *out = NULL;
    cudaGetLastError();
    return vfm_fail(VFM_ERR_NOMEM, "cudaMallocHost of %.1f MiB of page-locked host memory: %s", mib(bytes),
                    cudaGetErrorString(e));
}

extern "C" void vfm_cuda_host_free(void *p) {
    if (p) cudaFreeHost(p);
}

extern "C" int vfm_cuda_is_device_pointer(const void *p) {
    if (!p || vfm_cuda_device_count() == 0) return 0;
    cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

extern "C" vfm_status vfm_cuda_memcpy(void *dst, int dst_on_gpu, const void *src, int src_on_gpu, size_t bytes) {
    cudaMemcpyKind kind = dst_on_gpu ? (src_on_gpu ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                                     : (src_on_gpu ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
    vfm_host_read("cudaMemcpy");  // blocks the host until the copy (and the work before it) is done
    cudaError_t e = cudaMemcpy(dst, src, bytes, kind);
    return e == cudaSuccess ? VFM_OK : cuda_fail(e, "cudaMemcpy");
}

extern "C" vfm_status vfm_cuda_memcpy_async(void *dst, int dst_on_gpu, const void *src, int src_on_gpu, size_t bytes,
                                            void *stream) {
    cudaMemcpyKind kind = dst_on_gpu ? (src_on_gpu ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                                     : (src_on_gpu ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, kind, (cudaStream_t)stream);
    return e == cudaSuccess ? VFM_OK : cuda_fail(e, "cudaMemcpyAsync");
}

extern "C" vfm_status vfm_cuda_stream_create(void **stream) {
    use_process_device();
    cudaStream_t s = NULL;
    cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    *stream = (void *)s;
    return e == cudaSuccess ? VFM_OK : cuda_fail(e, "cudaStreamCreateWithFlags");
}

extern "C" void vfm_cuda_stream_destroy(void *stream) {
    if (stream) cudaStreamDestroy((cudaStream_t)stream);
}

extern "C" vfm_status vfm_cuda_event_create(void **event) {
    cudaEvent_t ev = NULL;
    cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    *event = (void *)ev;
    return e == cudaSuccess ? VFM_OK : cuda_fail(e, "cudaEventCreateWithFlags");
}

extern "C" void vfm_cuda_event_destroy(void *event) {
    if (event) cudaEventDestroy((cudaEvent_t)event);
}

extern "C" vfm_status vfm_cuda_event_record(void *event, void *stream) {
    cudaError_t e = cudaEventRecord((cudaEvent_t)event, (cudaStream_t)stream);
    return e == cudaSuccess ? VFM_OK : cuda_fail(e, "cudaEventRecord");
}

extern "C" vfm_status vfm_cuda_stream_wait_event(void *stream, void *event) {
    cudaError_t e = cudaStreamWaitEvent((cudaStream_t)stream, (cudaEvent_t)event, 0);
    return e == cudaSuccess ? VFM_OK : cuda_fail(e, "cudaStreamWaitEvent");
}

extern "C" vfm_status vfm_cuda_stream_synchronize(void *stream) {
    vfm_host_read("cudaStreamSynchronize");
    cudaError_t e = cudaStreamSynchronize((cudaStream_t)stream);
    return e == cudaSuccess ? VFM_OK : cuda_fail(e, "cudaStreamSynchronize");
}

extern "C" vfm_status vfm_cuda_event_synchronize(void *event) {
    vfm_host_read("cudaEventSynchronize");
    cudaError_t e = cudaEventSynchronize((cudaEvent_t)event);
    return e == cudaSuccess ? VFM_OK : cuda_fail(e, "cudaEventSynchronize");
}

extern "C" vfm_status vfm_cuda_memset0(void *p, size_t bytes) {
    cudaError_t e = cudaMemset(p, 0, bytes);
    return e == cudaSuccess ? VFM_OK : cuda_fail(e, "cudaMemset");
}

extern "C" vfm_status vfm_cuda_synchronize(void) {
    vfm_host_read("cudaDeviceSynchronize");
    cudaError_t e = cudaDeviceSynchronize();
    return e == cudaSuccess ? VFM_OK : cuda_fail(e, "cudaDeviceSynchronize");
}

extern "C" const char *vfm_cuda_device_name(void) {
    static char buf[256];
    if (vfm_cuda_device_count() == 0) return "";
    cudaDeviceProp p;
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&p, dev) != cudaSuccess) {
        cudaGetLastError();
        return "";
    }
    snprintf(buf, sizeof buf, "%s", p.name);
    return buf;
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
