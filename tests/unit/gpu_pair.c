/* GPU test helpers (see gpu_pair.h). */
#include "gpu_pair.h"

const int32_t PACK_T2S[PACK_S] = {0, 0, 0, 0, -1, -1, 1, 1, 1, 2, 2, -1, -1};

void pack_nan_padding(Pair *p, int64_t cols) {
    pair_nan_rows(p, cols, 4, 6);
    pair_nan_rows(p, cols, 11, 13);
}

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

static float round_to(float v, DType dt) { return dt == DT_BF16 ? f32_from_bf16(bf16_from_f32(v)) : v; }

static Pair pair_alloc(DType dt, int ndim, const int64_t *shape) {
    Pair p;
    memset(&p, 0, sizeof p);
    p.cpu = tensor_make(NULL, DT_F32, DEV_CPU, ndim, shape);
    p.n = tensor_numel(&p.cpu);
    p.h = calloc((size_t)p.n + 1, sizeof(float));
    p.cpu.data = p.h;
    if (tensor_alloc(&p.gpu, dt, DEV_CUDA, ndim, shape) != VFM_OK) test_fail(__FILE__, __LINE__, "GPU alloc failed");
    return p;
}

void pair_upload_values(Pair *p, const float *vals) {
    if (!p->gpu.data) return;
    if (p->gpu.dtype == DT_F32) {
        device_memcpy(p->gpu.data, DEV_CUDA, vals, DEV_CPU, (size_t)p->n * sizeof(float));
        return;
    }
    uint16_t *tmp = malloc((size_t)p->n * sizeof(uint16_t) + 2);
    for (int64_t i = 0; i < p->n; i++) tmp[i] = bf16_from_f32(vals[i]);
    device_memcpy(p->gpu.data, DEV_CUDA, tmp, DEV_CPU, (size_t)p->n * sizeof(uint16_t));
    free(tmp);
}

void pair_upload(Pair *p) {
    for (int64_t i = 0; i < p->n; i++) p->h[i] = round_to(p->h[i], p->gpu.dtype);
    pair_upload_values(p, p->h);
}

float *pair_copy_host(const Pair *p) {
    float *c = malloc((size_t)p->n * sizeof(float) + 4);
    memcpy(c, p->h, (size_t)p->n * sizeof(float));
    return c;
}

Pair pair_rand(DType dt, uint64_t seed, float lo, float hi, int ndim, const int64_t *shape) {
    Pair p = pair_alloc(dt, ndim, shape);
    test_fill_uniform_f32(p.h, p.n, seed, lo, hi);
    pair_upload(&p);
    return p;
}

Pair pair_zeros(DType dt, int ndim, const int64_t *shape) { return pair_alloc(dt, ndim, shape); }

void pair_download(const Pair *p, float *out) {
    if (!p->gpu.data) return;
    if (p->gpu.dtype == DT_F32) {
        device_memcpy(out, DEV_CPU, p->gpu.data, DEV_CUDA, (size_t)p->n * sizeof(float));
        return;
    }
    uint16_t *tmp = malloc((size_t)p->n * sizeof(uint16_t) + 2);
    device_memcpy(tmp, DEV_CPU, p->gpu.data, DEV_CUDA, (size_t)p->n * sizeof(uint16_t));
    for (int64_t i = 0; i < p->n; i++) out[i] = f32_from_bf16(tmp[i]);
    free(tmp);
}

void pair_misalign(Pair *p) {
    if (!p->gpu.data || p->moved) return;
    size_t bytes = tensor_bytes(&p->gpu), elem = dtype_size(p->gpu.dtype);
    void *to = NULL;
    /* exactly one element more: a read past the tensor still reaches past the allocation */
    if (device_malloc(DEV_CUDA, bytes + elem, &to) != VFM_OK) test_fail(__FILE__, __LINE__, "GPU alloc failed");
    char *at = (char *)to + elem; /* device allocations are 256-byte aligned */
    if (device_memcpy(at, DEV_CUDA, p->gpu.data, DEV_CUDA, bytes) != VFM_OK)
        test_fail(__FILE__, __LINE__, "GPU copy failed");
    tensor_free(&p->gpu);
    p->gpu = tensor_make(at, p->gpu.dtype, DEV_CUDA, p->cpu.ndim, p->cpu.shape);
    p->moved = to;
}

void pair_free(Pair *p) {
    free(p->h);
    if (p->moved) device_free(DEV_CUDA, p->moved);
    else tensor_free(&p->gpu);
    memset(p, 0, sizeof *p);
}

void pair_nan_rows(Pair *p, int64_t cols, int64_t r0, int64_t r1) {
    for (int64_t i = r0 * cols; i < r1 * cols && i < p->n; i++) p->h[i] = NAN;
    pair_upload(p);
}

int pair_close(const char *what, const Pair *p, double atol, double rtol, const char *file, int line) {
    float *got = malloc((size_t)p->n * sizeof(float) + 4);
    pair_download(p, got);
    int ok = check_close_f32(what, got, p->h, p->n, atol, rtol, file, line);
    free(got);
    return ok;
}

void *pair_snapshot(const Pair *p) {
    size_t bytes = tensor_bytes(&p->gpu);
    void *s = malloc(bytes + 4);
    device_memcpy(s, DEV_CPU, p->gpu.data, DEV_CUDA, bytes);
    return s;
}

int pair_same_bits(const char *what, const Pair *p, const void *snapshot, const char *file, int line) {
    size_t bytes = tensor_bytes(&p->gpu);
    void *now = pair_snapshot(p);
    int same = memcmp(now, snapshot, bytes) == 0;
    free(now);
    if (!same) test_fail(file, line, "%s: a second run gave different bits", what);
    return same;
}

IPair ipair_make(const int32_t *values, int ndim, const int64_t *shape) {
    IPair p;
    memset(&p, 0, sizeof p);
    p.cpu = tensor_make(NULL, DT_I32, DEV_CPU, ndim, shape);
    int64_t n = tensor_numel(&p.cpu);
    p.h = malloc((size_t)n * sizeof(int32_t) + 4);
    memcpy(p.h, values, (size_t)n * sizeof(int32_t));
    p.cpu.data = p.h;
    if (tensor_alloc(&p.gpu, DT_I32, DEV_CUDA, ndim, shape) == VFM_OK)
        device_memcpy(p.gpu.data, DEV_CUDA, p.h, DEV_CPU, (size_t)n * sizeof(int32_t));
    return p;
}

void ipair_free(IPair *p) {
    free(p->h);
    tensor_free(&p->gpu);
    memset(p, 0, sizeof *p);
}
