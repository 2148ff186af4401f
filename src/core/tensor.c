/* Tensor views, owning allocation, copies between devices, bf16 conversion, device memory figures. */
#include "tensor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "cuda_runtime_shim.h"
#include "host_reads.h"

size_t dtype_size(DType t) {
    switch (t) {
    case DT_F32: return 4;
    case DT_F64: return 8;
    case DT_BF16: return 2;
    case DT_I32: return 4;
    case DT_I64: return 8;
    }
    return 0;
}

const char *dtype_name(DType t) {
    static const char *n[] = {"f32", "f64", "bf16", "i32", "i64"};
    return (unsigned)t < 5 ? n[t] : "?";
}

const char *device_name(Device d) { return d == DEV_CUDA ? "cuda" : "cpu"; }

Tensor tensor_make(void *data, DType dtype, Device device, int ndim, const int64_t *shape) {
    Tensor t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.dtype = dtype;
    t.device = device;
    t.ndim = ndim > VFM_MAX_DIMS ? VFM_MAX_DIMS : ndim;
    for (int i = 0; i < t.ndim; i++) t.shape[i] = shape[i];
    return t;
}

int64_t tensor_numel(const Tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

size_t tensor_bytes(const Tensor *t) { return (size_t)tensor_numel(t) * dtype_size(t->dtype); }

int64_t tensor_dim(const Tensor *t, int d) {
    if (d < 0) d += t->ndim;
    return (d >= 0 && d < t->ndim) ? t->shape[d] : 1;
}

int64_t tensor_rows(const Tensor *t) {
    if (t->ndim == 0) return 1;
    int64_t last = t->shape[t->ndim - 1];
    return last ? tensor_numel(t) / last : 0;
}

const char *tensor_describe(const Tensor *t, char *buf, size_t n) {
    size_t k = (size_t)snprintf(buf, n, "%s[", dtype_name(t->dtype));
    for (int i = 0; i < t->ndim && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? "," : "", (long long)t->shape[i]);
    if (k < n) snprintf(buf + k, n - k, "]@%s", device_name(t->device));
    return buf;
}

vfm_status device_malloc(Device dev, size_t bytes, void **out) {
    *out = NULL;
    if (bytes == 0) bytes = 1;
    if (dev == DEV_CPU) {
        size_t rounded = (bytes + 63) & ~(size_t)63;
        void *p = aligned_alloc(64, rounded);
        if (!p) return vfm_fail(VFM_ERR_NOMEM, "cannot allocate %zu bytes of host memory", bytes);
        *out = p;
        return VFM_OK;
    }
    return vfm_cuda_malloc(bytes, out);
}

void device_free(Device dev, void *p) {
    if (!p) return;
    if (dev == DEV_CPU) free(p);
    else vfm_cuda_free(p);
}

vfm_status device_memcpy(void *dst, Device dst_dev, const void *src, Device src_dev, size_t bytes) {
    if (bytes == 0) return VFM_OK;
    if (dst_dev == DEV_CPU && src_dev == DEV_CPU) {
        memmove(dst, src, bytes);
        return VFM_OK;
    }
    return vfm_cuda_memcpy(dst, dst_dev == DEV_CUDA, src, src_dev == DEV_CUDA, bytes);
}

vfm_status device_memset0(Device dev, void *p, size_t bytes) {
    if (dev == DEV_CPU) {
        memset(p, 0, bytes);
        return VFM_OK;
    }
    return vfm_cuda_memset0(p, bytes);
}

int device_cuda_count(void) { return vfm_cuda_device_count(); }

vfm_status device_synchronize(Device dev) {
    if (dev == DEV_CUDA) return vfm_cuda_synchronize(); /* counted by the shim */
    vfm_host_read("device_synchronize"); /* the same place, counted on the CPU (core/host_reads.h) */
    return VFM_OK;
}

vfm_status device_memory(Device dev, DeviceMemory *out) {
    memset(out, 0, sizeof *out);
    if (dev == DEV_CUDA) {
        vfm_cuda_alloc_stats(&out->held, &out->peak);
        return vfm_cuda_mem_info(&out->free, &out->total);
    }
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0) out->peak = (size_t)ru.ru_maxrss * 1024;
    FILE *f = fopen("/proc/self/statm", "r");
    long long pages_total, pages_resident;
    if (f && fscanf(f, "%lld %lld", &pages_total, &pages_resident) == 2)
        out->held = (size_t)pages_resident * (size_t)sysconf(_SC_PAGESIZE);
    if (f) fclose(f);
    if (out->held > out->peak) out->peak = out->held;
    return VFM_OK;
}

void device_memory_reset_peak(Device dev) {
    if (dev == DEV_CUDA) vfm_cuda_alloc_reset_peak();
}

vfm_status tensor_alloc(Tensor *t, DType dtype, Device device, int ndim, const int64_t *shape) {
    *t = tensor_make(NULL, dtype, device, ndim, shape);
    size_t bytes = tensor_bytes(t);
    VFM_TRY(device_malloc(device, bytes, &t->data));
    return device_memset0(device, t->data, bytes);
}

void tensor_free(Tensor *t) {
    if (t && t->data) device_free(t->device, t->data);
    if (t) t->data = NULL;
}

vfm_status tensor_copy(Tensor *dst, const Tensor *src) {
    if (dst->dtype != src->dtype || tensor_numel(dst) != tensor_numel(src)) {
        char a[96], b[96];
        return vfm_fail(VFM_ERR_SHAPE, "tensor_copy: %s from %s", tensor_describe(dst, a, sizeof a),
                        tensor_describe(src, b, sizeof b));
    }
    return device_memcpy(dst->data, dst->device, src->data, src->device, tensor_bytes(src));
}

uint16_t bf16_from_f32(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return (uint16_t)((u >> 16) | 0x40);
    uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)((u + rounding) >> 16);
}

float f32_from_bf16(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

void tensor_shape_text(const int64_t *shape, int ndim, char *out, size_t n) {
    size_t k = (size_t)snprintf(out, n, "[");
    for (int d = 0; d < ndim && k < n; d++) k += (size_t)snprintf(out + k, n - k, "%s%lld", d ? "," : "", (long long)shape[d]);
    if (k < n) snprintf(out + k, n - k, "]");
}
