/* Parameter table construction, lookup, views and deterministic initialisation. */
#include "params.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/hash.h"
#include "core/philox.h"

void param_table_init(ParamTable *t) { memset(t, 0, sizeof *t); }

void param_table_free(ParamTable *t) {
    free(t->entries);
    memset(t, 0, sizeof *t);
}

vfm_status param_table_copy(ParamTable *dst, const ParamTable *src) {
    *dst = *src;
    dst->entries = malloc((size_t)(src->count > 0 ? src->count : 1) * sizeof *dst->entries);
    if (!dst->entries) {
        memset(dst, 0, sizeof *dst);
        return vfm_fail(VFM_ERR_NOMEM, "parameter table of %d entries", src->count);
    }
    if (src->count > 0) memcpy(dst->entries, src->entries, (size_t)src->count * sizeof *dst->entries);
    dst->capacity = src->count > 0 ? src->count : 1;
    return VFM_OK;
}

int param_table_add(ParamTable *t, ParamInit init, float init_scale, int ndim, const int64_t *shape,
                    unsigned reduce_groups, int tp_split_dim, const char *name_fmt, ...) {
    if (t->count == t->capacity) {
        t->capacity = t->capacity ? 2 * t->capacity : 64;
        t->entries = realloc(t->entries, (size_t)t->capacity * sizeof *t->entries);
    }
    ParamEntry *e = &t->entries[t->count];
    memset(e, 0, sizeof *e);
    va_list ap;
    va_start(ap, name_fmt);
    vsnprintf(e->name, sizeof e->name, name_fmt, ap);
    va_end(ap);
    e->ndim = ndim;
    e->numel = 1;
    for (int i = 0; i < ndim; i++) {
        e->shape[i] = shape[i];
        e->numel *= shape[i];
    }
    e->offset = t->total;
    e->init = init;
    e->init_scale = init_scale;
    e->weight_decay = ndim >= 2;
    e->tp_split_dim = tp_split_dim;
    e->reduce_groups = reduce_groups | REDUCE_DP_CP;
    e->trainable = 1;
    e->tp_parts = 1;
    e->group = t->group;
    t->total += e->numel;
    return t->count++;
}

void param_table_set_group(ParamTable *t, int group) { t->group = group; }

int param_table_find(const ParamTable *t, const char *name) {
    for (int i = 0; i < t->count; i++)
        if (strcmp(t->entries[i].name, name) == 0) return i;
    return -1;
}

Tensor param_view(const ParamTable *t, int i, void *buf, DType dtype, Device dev) {
    const ParamEntry *e = &t->entries[i];
    char *base = (char *)buf + (size_t)e->offset * dtype_size(dtype);
    return tensor_make(base, dtype, dev, e->ndim, e->shape);
}

vfm_status param_table_init_values(const ParamTable *t, float *buf, uint64_t seed) {
    for (int i = 0; i < t->count; i++) {
        const ParamEntry *e = &t->entries[i];
        float *p = buf + e->offset;
        uint64_t uid = hash_string64(e->name);
        switch (e->init) {
        case INIT_ZERO:
            memset(p, 0, (size_t)e->numel * sizeof *p);
            break;
        case INIT_ONE:
            for (int64_t k = 0; k < e->numel; k++) p[k] = 1.0f;
            break;
        case INIT_NORMAL:
            for (int64_t k = 0; k < e->numel; k++)
                p[k] = e->init_scale * philox_normal_at(seed, RNG_STREAM_INIT, 0, uid, (uint64_t)k);
            break;
        case INIT_UNIFORM_FANIN: {
            float bound = 1.0f / sqrtf(e->init_scale);
            for (int64_t k = 0; k < e->numel; k++)
                p[k] = bound * (2.0f * philox_uniform_at(seed, RNG_STREAM_INIT, 0, uid, (uint64_t)k) - 1.0f);
            break;
        }
        case INIT_XAVIER_UNIFORM: {
            double fan_out = (double)e->shape[0], fan_in = (double)e->numel / fan_out;
            float bound = (float)sqrt(6.0 / (fan_in + fan_out));
            for (int64_t k = 0; k < e->numel; k++)
                p[k] = bound * (2.0f * philox_uniform_at(seed, RNG_STREAM_INIT, 0, uid, (uint64_t)k) - 1.0f);
            break;
        }
        default:
            return vfm_fail(VFM_ERR_INTERNAL, "parameter %s: unknown init %d", e->name, (int)e->init);
        }
    }
    return VFM_OK;
}

int64_t param_table_trainable(const ParamTable *t) {
    int64_t n = 0;
    for (int i = 0; i < t->count; i++)
        if (t->entries[i].trainable) n += t->entries[i].numel;
    return n;
}

vfm_status param_placement(const ParamTable *t, size_t elem_bytes, size_t align, ParamPlacement *out) {
    memset(out, 0, sizeof *out);
    if (elem_bytes == 0 || align % elem_bytes)
        return vfm_fail(VFM_ERR_INTERNAL, "param_placement: %zu-byte alignment of %zu-byte elements", align,
                        elem_bytes);
    int64_t step = (int64_t)(align / elem_bytes), n = t->count > 0 ? t->count : 1;
    out->at = malloc((size_t)n * sizeof *out->at);
    out->runs = malloc((size_t)n * sizeof *out->runs);
    if (!out->at || !out->runs) {
        param_placement_free(out);
        return vfm_fail(VFM_ERR_NOMEM, "param_placement: %d entries", t->count);
    }
    int64_t end = 0;
    for (int i = 0; i < t->count; i++) {
        const ParamEntry *e = &t->entries[i];
        int64_t at = (end + step - 1) / step * step;
        out->at[i] = at;
        end = at + e->numel;
        if (e->numel == 0) continue;
        PlacementRun *r = out->n_runs ? &out->runs[out->n_runs - 1] : NULL;
        if (r && r->table_offset + r->count == e->offset && r->placed_offset + r->count == at)
            r->count += e->numel;
        else
            out->runs[out->n_runs++] = (PlacementRun){e->offset, at, e->numel};
    }
    out->total = end;
    return VFM_OK;
}

void param_placement_free(ParamPlacement *p) {
    free(p->at);
    free(p->runs);
    memset(p, 0, sizeof *p);
}
