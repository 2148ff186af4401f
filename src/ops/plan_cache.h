/* A bounded cache of library plans (cuBLASLt GEMM descriptors and algorithms), keyed by the bytes of
 * a fixed-size key struct. Shapes change every step (pack token counts, samples per pack, caption
 * lengths), so the number of distinct keys a run meets is unbounded: when the cache is full, the
 * least recently used entry is handed to `destroy` (which frees what the plan owns) and its slot
 * reused. Inserting never fails after init. Plain C on the host, so the CPU tests run it. */
#ifndef VFM_PLAN_CACHE_H
#define VFM_PLAN_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef void (*PlanDestroyFn)(void *value, void *ctx);

typedef struct PlanCache {
    int capacity, count;
    size_t key_bytes, value_bytes;
    unsigned char *keys, *values; /* capacity × key_bytes, capacity × value_bytes */
    uint64_t *hashes, *last_use, clock;
    PlanDestroyFn destroy;        /* may be NULL */
    void *ctx;
    int64_t hits, misses, evictions;
} PlanCache;

vfm_status plan_cache_init(PlanCache *c, int capacity, size_t key_bytes, size_t value_bytes, PlanDestroyFn destroy,
                           void *ctx);
/* The value stored under key (marked as just used), or NULL. Valid until the next insert. Keys are
 * compared byte for byte: build them from a zeroed struct. */
void *plan_cache_find(PlanCache *c, const void *key);
/* A zeroed value slot for key (which must not be in the cache), evicting the least recently used
 * entry when full. Valid until the next insert. */
void *plan_cache_insert(PlanCache *c, const void *key);
/* Destroys every entry and frees the cache. */
void plan_cache_free(PlanCache *c);

#ifdef __cplusplus
}
#endif
#endif
