/* Bump allocator over one device buffer. */
#include "arena.h"

#include <string.h>

vfm_status arena_init(Arena *a, Device device, size_t bytes) {
    memset(a, 0, sizeof *a);
    a->device = device;
    void *p = NULL;
    VFM_TRY(device_malloc(device, bytes, &p));
    a->base = p;
    a->size = bytes;
    return VFM_OK;
}

void arena_destroy(Arena *a) {
    device_free(a->device, a->base);
    memset(a, 0, sizeof *a);
}

vfm_status arena_alloc(Arena *a, size_t bytes, void **out) {
    size_t start = (a->used + 255) & ~(size_t)255;
    if (start + bytes > a->size) {
        *out = NULL;
        return vfm_fail(VFM_ERR_NOMEM, "arena full: %zu bytes requested, %zu of %zu in use", bytes, a->used,
                        a->size);
    }
    *out = a->base + start;
    a->used = start + bytes;
    if (a->used > a->peak) a->peak = a->used;
    return VFM_OK;
}

vfm_status arena_tensor(Arena *a, Tensor *t, DType dtype, int ndim, const int64_t *shape) {
    *t = tensor_make(NULL, dtype, a->device, ndim, shape);
    size_t bytes = tensor_bytes(t);
    VFM_TRY(arena_alloc(a, bytes, &t->data));
    return device_memset0(a->device, t->data, bytes);
}

size_t arena_mark(const Arena *a) { return a->used; }
void arena_rewind(Arena *a, size_t mark) {
    if (mark <= a->used) a->used = mark;
}
