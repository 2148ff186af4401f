/* Arena: one device allocation carved by a bump pointer (activations, per-step scratch).
 * Marks let a caller free everything allocated after a point in one move. */
#ifndef VFM_ARENA_H
#define VFM_ARENA_H

#include <stddef.h>

#include "tensor.h"

typedef struct Arena {
    char *base;
    size_t size, used, peak;
    Device device;
} Arena;

vfm_status arena_init(Arena *a, Device device, size_t bytes);
void arena_destroy(Arena *a);
/* 256-byte aligned; fails with VFM_ERR_NOMEM naming the sizes when full. */
vfm_status arena_alloc(Arena *a, size_t bytes, void **out);
/* A zero-filled tensor carved from the arena. */
vfm_status arena_tensor(Arena *a, Tensor *t, DType dtype, int ndim, const int64_t *shape);
size_t arena_mark(const Arena *a);
void arena_rewind(Arena *a, size_t mark);

#endif
