// The CPU harness, host side: the CUDA runtime calls vfm makes, on the host. One device ("vfm CPU
// harness", an H100's launch limits) whose memory is the process heap: cudaMalloc is memalign(256),
// so AddressSanitizer sees every device buffer with its exact size and reports a kernel that
// reads or writes past one. Work runs when it is issued (kernels, copies, sets), so streams and
// events only order what is already done; events record the host clock. The calls check what the
// GPU checks: copies and sets must stay inside device allocations on their device side and must
// not name device memory on their host side, a freed or unknown pointer is an error, and a device
// of 16 GiB (VFM_HARNESS_DEVICE_MIB) runs out of memory like one.
#include <malloc.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <map>
#include <mutex>

#include "runtime.h"

struct CUstream_st {
    unsigned flags;
};
struct CUevent_st {
    unsigned flags;
    int recorded;
    double seconds;
};

namespace {

enum Kind { DEVICE, PINNED };
struct Alloc {
    size_t bytes;
    Kind kind;
};

std::mutex g_mutex;
std::map<uintptr_t, Alloc> g_allocs;  // start -> allocation (device and page-locked host)
std::map<const void *, int> g_streams, g_events;
std::map<const void *, int> g_smem_optin;  // kernel -> dynamic shared memory limit
size_t g_device_used;
thread_local cudaError_t g_last = cudaSuccess;
cudaError_t g_sticky = cudaSuccess;
char g_sticky_msg[1024];
thread_local char g_detail[1024];  // what the last error of this thread was about
thread_local cudaError_t g_detail_code = cudaSuccess;

const size_t kSharedDefault = 48 << 10, kSharedOptinMax = 232448;  // an H100's limits

size_t device_capacity(void) {
    static size_t cap = [] {
        const char *e = getenv("VFM_HARNESS_DEVICE_MIB");
        return (e && *e ? strtoull(e, NULL, 10) : 16384) << 20;
    }();
    return cap;
}

// e as this thread's last error, with what it was about.
void vrecord(cudaError_t e, const char *fmt, va_list ap) {
    vsnprintf(g_detail, sizeof g_detail, fmt, ap);
    g_detail_code = e;
    g_last = e;
}

cudaError_t fail(cudaError_t e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
cudaError_t fail(cudaError_t e, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vrecord(e, fmt, ap);
    va_end(ap);
    return e;
}

// The allocation holding [p, p + n) (n may be 0), or NULL. Caller holds g_mutex.
const Alloc *find(const void *p, size_t n, uintptr_t *start) {
    uintptr_t a = (uintptr_t)p;
    auto it = g_allocs.upper_bound(a);
    if (it == g_allocs.begin()) return NULL;
    --it;
    if (a < it->first || a + n > it->first + it->second.bytes || (n == 0 && a >= it->first + it->second.bytes))
        return NULL;
    if (start) *start = it->first;
    return &it->second;
}

bool is_device(const void *p) {
    const Alloc *a = find(p, 0, NULL);
    return a && a->kind == DEVICE;
}

const char *side_name(bool device) { return device ? "device" : "host"; }

// One side of a copy or set: [p, p + n) inside one device allocation (device) or no device memory.
cudaError_t check_side(const char *call, const char *which, const void *p, size_t n, bool device) {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (n == 0) return cudaSuccess;
    const Alloc *a = find(p, n, NULL);
    if (device && !(a && a->kind == DEVICE)) {
        if (is_device(p))
            return fail(cudaErrorInvalidValue, "%s: %s %p + %zu bytes runs past the end of its device allocation", call,
                        which, p, n);
        return fail(cudaErrorInvalidValue, "%s: %s %p is not device memory", call, which, p);
    }
    if (!device && is_device(p)) return fail(cudaErrorInvalidValue, "%s: %s %p is device memory", call, which, p);
    return cudaSuccess;
}

double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

bool stream_known(cudaStream_t s) {
    if (s == NULL || s == cudaStreamLegacy || s == cudaStreamPerThread) return true;
    std::lock_guard<std::mutex> lock(g_mutex);
    return g_streams.count(s) != 0;
}

bool event_known(cudaEvent_t e) {
    std::lock_guard<std::mutex> lock(g_mutex);
    return e && g_events.count(e) != 0;
}

}  // namespace

#define STICKY_CHECK()                                  \
    do {                                                \
        if (g_sticky != cudaSuccess) return g_sticky;   \
    } while (0)

// ---- for the scheduler and the stand-ins (runtime.h) -------------------------------------------

void runtime_launch_error(cudaError_t e, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vrecord(e, fmt, ap);
    va_end(ap);
}

void runtime_kernel_fault(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_sticky_msg, sizeof g_sticky_msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "harness: fault: %s\n", g_sticky_msg);
    g_sticky = cudaErrorLaunchFailure;
    g_last = cudaErrorLaunchFailure;
}

cudaError_t runtime_sticky_error(void) { return g_sticky; }

bool runtime_stream_ok(cudaStream_t s, const char *kernel) {
    if (stream_known(s)) return true;
    runtime_launch_error(cudaErrorInvalidResourceHandle, "kernel %s: stream %p was never created or is destroyed",
                         kernel, (void *)s);
    return false;
}

size_t runtime_dynamic_shared_limit(const void *kernel) {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto it = g_smem_optin.find(kernel);
    return it == g_smem_optin.end() ? kSharedDefault : (size_t)it->second;
}

size_t runtime_device_extent(const void *p) {
    std::lock_guard<std::mutex> lock(g_mutex);
    uintptr_t start = 0;
    const Alloc *a = find(p, 0, &start);
    if (!a || a->kind != DEVICE) return 0;
    return start + a->bytes - (uintptr_t)p;
}

// ---- errors ------------------------------------------------------------------------------------

extern "C" cudaError_t cudaGetLastError(void) {
    cudaError_t e = g_sticky != cudaSuccess ? g_sticky : g_last;
    g_last = cudaSuccess;
    return e;
}

extern "C" cudaError_t cudaPeekAtLastError(void) { return g_sticky != cudaSuccess ? g_sticky : g_last; }

extern "C" const char *cudaGetErrorName(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    default: return "cudaError";
    }
}

extern "C" const char *cudaGetErrorString(cudaError_t e) {
    static thread_local char buf[1200];
    const char *base = "unknown error";
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: base = "invalid argument"; break;
    case cudaErrorMemoryAllocation: base = "out of memory"; break;
    case cudaErrorInvalidConfiguration: base = "invalid configuration argument"; break;
    case cudaErrorInvalidDevice: base = "invalid device ordinal"; break;
    case cudaErrorInvalidResourceHandle: base = "invalid resource handle"; break;
    case cudaErrorLaunchFailure: base = "unspecified launch failure"; break;
    default: break;
    }
    const char *detail = e == g_sticky && g_sticky_msg[0] ? g_sticky_msg : e == g_detail_code ? g_detail : "";
    if (!detail[0]) return base;
    snprintf(buf, sizeof buf, "%s (CPU harness: %s)", base, detail);
    return buf;
}

// ---- device ------------------------------------------------------------------------------------

// VFM_HARNESS_DEVICES (default 1): how many devices the process reports. They are all the same
// host memory: only which one is current changes. Two MPI ranks that each take their own then use
// NCCL (its stand-in, nccl.cpp) as ranks on a machine with a GPU per rank do.
static int device_count(void) {
    static int n = [] {
        const char *e = getenv("VFM_HARNESS_DEVICES");
        int v = e && *e ? atoi(e) : 1;
        return v < 1 ? 1 : v > 64 ? 64 : v;
    }();
    return n;
}
static int g_device;

extern "C" cudaError_t cudaGetDeviceCount(int *n) {
    *n = device_count();
    return cudaSuccess;
}

extern "C" cudaError_t cudaSetDevice(int d) {
    STICKY_CHECK();
    if (d < 0 || d >= device_count())
        return fail(cudaErrorInvalidDevice, "cudaSetDevice(%d): the harness has %d device(s) (VFM_HARNESS_DEVICES)", d,
                    device_count());
    g_device = d;
    return cudaSuccess;
}

extern "C" cudaError_t cudaGetDevice(int *d) {
    *d = g_device;
    return cudaSuccess;
}

extern "C" cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d) {
    if (d < 0 || d >= device_count()) return fail(cudaErrorInvalidDevice, "cudaGetDeviceProperties(%d)", d);
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "vfm CPU harness");
    p->major = 9, p->minor = 0;
    p->totalGlobalMem = device_capacity();
    p->sharedMemPerBlock = kSharedDefault, p->sharedMemPerBlockOptin = kSharedOptinMax;
    p->maxThreadsPerBlock = 1024, p->warpSize = 32, p->multiProcessorCount = 132, p->regsPerBlock = 65536;
    p->maxThreadsDim[0] = p->maxThreadsDim[1] = 1024, p->maxThreadsDim[2] = 64;
    p->maxGridSize[0] = 2147483647, p->maxGridSize[1] = p->maxGridSize[2] = 65535;
    return cudaSuccess;
}

extern "C" cudaError_t cudaDeviceSynchronize(void) {
    STICKY_CHECK();
    return cudaSuccess;
}

extern "C" cudaError_t cudaFuncSetAttribute(const void *func, cudaFuncAttribute attr, int value) {
    STICKY_CHECK();
    if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaSuccess;  // hints: nothing to model
    if (value < 0 || (size_t)value > kSharedOptinMax)
        return fail(cudaErrorInvalidValue, "cudaFuncSetAttribute: %d bytes of dynamic shared memory (at most %zu)",
                    value, kSharedOptinMax);
    std::lock_guard<std::mutex> lock(g_mutex);
    g_smem_optin[func] = value;
    return cudaSuccess;
}

// ---- memory ------------------------------------------------------------------------------------

static cudaError_t allocate(void **p, size_t bytes, Kind kind, const char *call) {
    *p = NULL;
    STICKY_CHECK();
    std::lock_guard<std::mutex> lock(g_mutex);
    if (kind == DEVICE && bytes > device_capacity() - g_device_used)
        return fail(cudaErrorMemoryAllocation, "%s of %zu bytes: %zu of %zu in use", call, bytes, g_device_used,
                    device_capacity());
    void *m = memalign(256, bytes ? bytes : 1);  // exact size: ASan guards the bytes past it
    if (!m) return fail(cudaErrorMemoryAllocation, "%s of %zu bytes: the host is out of memory", call, bytes);
    g_allocs[(uintptr_t)m] = Alloc{bytes ? bytes : 1, kind};
    if (kind == DEVICE) g_device_used += bytes ? bytes : 1;
    *p = m;
    return cudaSuccess;
}

static cudaError_t release(void *p, Kind kind, const char *call) {
    STICKY_CHECK();
    if (!p) return cudaSuccess;
    std::lock_guard<std::mutex> lock(g_mutex);
    auto it = g_allocs.find((uintptr_t)p);
    if (it == g_allocs.end() || it->second.kind != kind)
        return fail(cudaErrorInvalidValue, "%s(%p): not a live %s allocation", call, p,
                    kind == DEVICE ? "device" : "page-locked");
    if (kind == DEVICE) g_device_used -= it->second.bytes;
    g_allocs.erase(it);
    free(p);
    return cudaSuccess;
}

extern "C" cudaError_t cudaMalloc(void **p, size_t bytes) { return allocate(p, bytes, DEVICE, "cudaMalloc"); }

extern "C" cudaError_t cudaFree(void *p) { return release(p, DEVICE, "cudaFree"); }

extern "C" cudaError_t cudaMallocHost(void **p, size_t bytes) { return allocate(p, bytes, PINNED, "cudaMallocHost"); }

extern "C" cudaError_t cudaFreeHost(void *p) { return release(p, PINNED, "cudaFreeHost"); }

extern "C" cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total) {
    STICKY_CHECK();
    std::lock_guard<std::mutex> lock(g_mutex);
    *total = device_capacity();
    *free_bytes = device_capacity() - g_device_used;
    return cudaSuccess;
}

extern "C" cudaError_t cudaPointerGetAttributes(cudaPointerAttributes *a, const void *p) {
    STICKY_CHECK();
    memset(a, 0, sizeof *a);
    std::lock_guard<std::mutex> lock(g_mutex);
    const Alloc *al = find(p, 0, NULL);
    a->type = !al ? cudaMemoryTypeUnregistered : al->kind == DEVICE ? cudaMemoryTypeDevice : cudaMemoryTypeHost;
    a->device = 0;
    if (al) (al->kind == DEVICE ? a->devicePointer : a->hostPointer) = (void *)p;
    return cudaSuccess;
}

extern "C" cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind kind, cudaStream_t s) {
    STICKY_CHECK();
    if (!stream_known(s)) return fail(cudaErrorInvalidResourceHandle, "cudaMemcpyAsync: stream %p", (void *)s);
    bool dst_dev, src_dev;
    if (kind == cudaMemcpyDefault) {
        std::lock_guard<std::mutex> lock(g_mutex);
        dst_dev = is_device(dst), src_dev = is_device(src);
    } else {
        dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
        src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    }
    char call[64];
    snprintf(call, sizeof call, "cudaMemcpy %s to %s", side_name(src_dev), side_name(dst_dev));
    cudaError_t e = check_side(call, "destination", dst, n, dst_dev);
    if (e == cudaSuccess) e = check_side(call, "source", src, n, src_dev);
    if (e != cudaSuccess) return e;
    if (n) memmove(dst, src, n);
    return cudaSuccess;
}

extern "C" cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind kind) {
    return cudaMemcpyAsync(dst, src, n, kind, NULL);
}

extern "C" cudaError_t cudaMemsetAsync(void *p, int value, size_t n, cudaStream_t s) {
    STICKY_CHECK();
    if (!stream_known(s)) return fail(cudaErrorInvalidResourceHandle, "cudaMemsetAsync: stream %p", (void *)s);
    cudaError_t e = check_side("cudaMemset", "destination", p, n, true);
    if (e != cudaSuccess) return e;
    if (n) memset(p, value, n);
    return cudaSuccess;
}

extern "C" cudaError_t cudaMemset(void *p, int value, size_t n) { return cudaMemsetAsync(p, value, n, NULL); }

// ---- streams and events ------------------------------------------------------------------------

// A new handle (stream or event) in its table of live ones; a destroyed one leaves it.
template <typename T> static cudaError_t handle_create(std::map<const void *, int> &live, T **out, T value) {
    STICKY_CHECK();
    *out = new T(value);
    std::lock_guard<std::mutex> lock(g_mutex);
    live[*out] = 1;
    return cudaSuccess;
}

template <typename T> static cudaError_t handle_destroy(std::map<const void *, int> &live, T *h, const char *call) {
    STICKY_CHECK();
    std::lock_guard<std::mutex> lock(g_mutex);
    if (!h || !live.erase(h)) return fail(cudaErrorInvalidResourceHandle, "%s(%p): not a live handle", call, (void *)h);
    delete h;
    return cudaSuccess;
}

extern "C" cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags) {
    return handle_create(g_streams, s, CUstream_st{flags});
}

extern "C" cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithFlags(s, cudaStreamDefault); }

extern "C" cudaError_t cudaStreamDestroy(cudaStream_t s) { return handle_destroy(g_streams, s, "cudaStreamDestroy"); }

extern "C" cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    STICKY_CHECK();
    return stream_known(s) ? cudaSuccess : fail(cudaErrorInvalidResourceHandle, "cudaStreamSynchronize(%p)", (void *)s);
}

extern "C" cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned) {
    STICKY_CHECK();
    if (!stream_known(s)) return fail(cudaErrorInvalidResourceHandle, "cudaStreamWaitEvent: stream %p", (void *)s);
    if (!event_known(e)) return fail(cudaErrorInvalidResourceHandle, "cudaStreamWaitEvent: event %p", (void *)e);
    return cudaSuccess;
}

extern "C" cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags) {
    return handle_create(g_events, e, CUevent_st{flags, 0, 0});
}

extern "C" cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, cudaEventDefault); }

extern "C" cudaError_t cudaEventDestroy(cudaEvent_t e) { return handle_destroy(g_events, e, "cudaEventDestroy"); }

extern "C" cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    STICKY_CHECK();
    if (!event_known(e)) return fail(cudaErrorInvalidResourceHandle, "cudaEventRecord: event %p", (void *)e);
    if (!stream_known(s)) return fail(cudaErrorInvalidResourceHandle, "cudaEventRecord: stream %p", (void *)s);
    e->recorded = 1;
    e->seconds = now_seconds();
    return cudaSuccess;
}

extern "C" cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    STICKY_CHECK();
    return event_known(e) ? cudaSuccess : fail(cudaErrorInvalidResourceHandle, "cudaEventSynchronize(%p)", (void *)e);
}

extern "C" cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
    STICKY_CHECK();
    if (!event_known(a) || !event_known(b))
        return fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: unknown event");
    if ((a->flags | b->flags) & cudaEventDisableTiming)
        return fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: an event was created without timing");
    if (!a->recorded || !b->recorded) return fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: never recorded");
    *ms = (float)((b->seconds - a->seconds) * 1e3);
    return cudaSuccess;
}
