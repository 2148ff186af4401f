/* The bounded plan cache (plan_cache.h): flat arrays scanned by a 64-bit hash first; the capacity
 * is a few hundred, so a scan costs less than the library call the plan saves. */
#include "ops/plan_cache.h"

#include <stdlib.h>
#include <string.h>

#include "core/hash.h"

vfm_status plan_cache_init(PlanCache *c, int capacity, size_t key_bytes, size_t value_bytes, PlanDestroyFn destroy,
                           void *ctx) {
    memset(c, 0, sizeof *c);
    if (capacity < 1 || key_bytes == 0 || value_bytes == 0)
        return vfm_fail(VFM_ERR_INTERNAL, "plan cache: capacity %d, key %zu bytes, value %zu bytes", capacity, key_bytes,
                        value_bytes);
    c->capacity = capacity, c->key_bytes = key_bytes, c->value_bytes = value_bytes;
    c->destroy = destroy, c->ctx = ctx;
    c->keys = calloc((size_t)capacity, key_bytes);
    c->values = calloc((size_t)capacity, value_bytes);
    c->hashes = calloc((size_t)capacity, sizeof *c->hashes);
    c->last_use = calloc((size_t)capacity, sizeof *c->last_use);
    if (!c->keys || !c->values || !c->hashes || !c->last_use) {
        plan_cache_free(c);
        return vfm_fail(VFM_ERR_NOMEM, "plan cache of %d entries", capacity);
    }
    return VFM_OK;
}

void *plan_cache_find(PlanCache *c, const void *key) {
    uint64_t h = hash_bytes64(key, c->key_bytes, 0);
    for (int i = 0; i < c->count; i++)
        if (c->hashes[i] == h && memcmp(c->keys + (size_t)i * c->key_bytes, key, c->key_bytes) == 0) {
            c->last_use[i] = ++c->clock;
            c->hits++;
            return c->values + (size_t)i * c->value_bytes;
        }
    c->misses++;
    return NULL;
}

void *plan_cache_insert(PlanCache *c, const void *key) {
    int slot = c->count;
    if (c->count == c->capacity) { /* evict the least recently used */
        slot = 0;
        for (int i = 1; i < c->count; i++)
            if (c->last_use[i] < c->last_use[slot]) slot = i;
        if (c->destroy) c->destroy(c->values + (size_t)slot * c->value_bytes, c->ctx);
        c->evictions++;
    } else {
        c->count++;
    }
    memcpy(c->keys + (size_t)slot * c->key_bytes, key, c->key_bytes);
    c->hashes[slot] = hash_bytes64(key, c->key_bytes, 0);
    c->last_use[slot] = ++c->clock;
    void *value = c->values + (size_t)slot * c->value_bytes;
    memset(value, 0, c->value_bytes);
    return value;
}

void plan_cache_free(PlanCache *c) {
    if (c->destroy && c->values)
        for (int i = 0; i < c->count; i++) c->destroy(c->values + (size_t)i * c->value_bytes, c->ctx);
    free(c->keys);
    free(c->values);
    free(c->hashes);
    free(c->last_use);
    memset(c, 0, sizeof *c);
}
