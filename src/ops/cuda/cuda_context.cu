// The CUDA backend's shared state: the stream ops are issued on, errors that name the op and the
// tensor, grow-only scratch buffers, and the sample-range kernels of the column sums.
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cuda_runtime_shim.h"
#include "core/host_reads.h"
#include "cuda_common.h"

static cudaStream_t g_stream = 0;
static int g_sync_checked, g_sync;

extern "C" void cuda_ops_set_stream(void *stream) { g_stream = (cudaStream_t)stream; }
extern "C" void *cuda_ops_get_stream(void) { return (void *)g_stream; }
cudaStream_t cuda_stream(void) { return g_stream; }

static const char *describe(const Tensor *t, char *buf, size_t n) {
    if (!t) return "";
    buf[0] = ' ';
    buf[1] = '(';
    tensor_describe(t, buf + 2, n - 3);
    size_t k = strlen(buf);
    if (k + 1 < n) buf[k] = ')', buf[k + 1] = 0;
    return buf;
}

vfm_status cuda_call_fail(const char *op, const char *call, cudaError_t e, const Tensor *t) {
    char d[160];
    return vfm_fail(e == cudaErrorMemoryAllocation ? VFM_ERR_NOMEM : VFM_ERR_INTERNAL, "%s%s: %s: %s", op,
                    describe(t, d, sizeof d), call, cudaGetErrorString(e));
}

vfm_status cuda_bad_dtype(const char *op, const char *arg, const Tensor *t) {
    char d[160];
    return vfm_fail(VFM_ERR_SHAPE, "%s: %s%s has a dtype the CUDA kernel does not take (f32 or bf16)", op, arg,
                    describe(t, d, sizeof d));
}

// VFM_CUDA_SYNC=1: wait after every launch so an asynchronous fault is reported by the op that
// caused it (slow; for debugging and the first runs on a new machine).
vfm_status cuda_check_launch(const char *op, const Tensor *t) {
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return cuda_call_fail(op, "kernel launch", e, t);
    if (!g_sync_checked) {
        const char *env = getenv("VFM_CUDA_SYNC");
        g_sync = env && *env && strcmp(env, "0") != 0;
        g_sync_checked = 1;
    }
    if (g_sync) {
        e = cudaStreamSynchronize(g_stream);
        if (e != cudaSuccess) return cuda_call_fail(op, "kernel (VFM_CUDA_SYNC)", e, t);
    }
    return VFM_OK;
}

static void *g_scratch[SCRATCH_SLOTS];
static size_t g_scratch_bytes[SCRATCH_SLOTS];

vfm_status cuda_scratch(ScratchSlot slot, size_t bytes, void **out) {
    if (bytes == 0) bytes = 1;
    if (bytes > g_scratch_bytes[slot]) {
        if (g_scratch[slot]) {
            // work queued earlier may still use the old buffer
            vfm_host_read("CUDA scratch growth");
            cudaError_t e = cudaDeviceSynchronize();
            if (e != cudaSuccess) return cuda_call_fail("scratch", "cudaDeviceSynchronize", e, NULL);
            vfm_cuda_free(g_scratch[slot]);
            g_scratch[slot] = NULL;
            g_scratch_bytes[slot] = 0;
        }
        size_t rounded = (bytes + (1u << 20) - 1) & ~(size_t)((1u << 20) - 1);  // whole MiB: fewer regrowths
        vfm_status s = vfm_cuda_malloc(rounded, &g_scratch[slot]);  // counted in vfm's device memory
        if (s != VFM_OK) {
            g_scratch[slot] = NULL;
            return vfm_fail_context(s, "CUDA scratch buffer %d", (int)slot);
        }
        g_scratch_bytes[slot] = rounded;
    }
    *out = g_scratch[slot];
    return VFM_OK;
}

__global__ void sample_ranges_init_kernel(int *ranges, int B) {
    GRID_STRIDE(b, B) {
        ranges[2 * b] = INT_MAX;
        ranges[2 * b + 1] = -1;
    }
}

// ranges[2b] = first row of sample b, ranges[2b+1] = its last row (integer min/max: any order of
// the atomics gives the same answer).
__global__ void sample_ranges_kernel(const int32_t *t2s, int64_t rows, int B, int *ranges) {
    GRID_STRIDE(r, rows) {
        int b = t2s[r];
        if (b >= 0 && b < B) {
            atomicMin(&ranges[2 * b], (int)r);
            atomicMax(&ranges[2 * b + 1], (int)r);
        }
    }
}
