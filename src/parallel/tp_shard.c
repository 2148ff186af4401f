/* Tensor-parallel shards of the parameter table: the local table and the runs of each shard in
 * the full tensors (see tp_shard.h). */
#include "tp_shard.h"

#include <stdlib.h>
#include <string.h>

void tp_shard_map_free(TpShardMap *m) {
    param_table_free(&m->local);
    free(m->shards);
    m->shards = NULL;
}

vfm_status tp_shard_map_init(TpShardMap *m, const ParamTable *full, int tp, int rank) {
    return tp_shard_map_init_ep(m, full, tp, rank, 1, 0);
}

vfm_status tp_shard_map_init_ep(TpShardMap *m, const ParamTable *full, int tp, int rank, int ep, int ep_rank) {
    memset(m, 0, sizeof *m);
    m->ep = ep, m->ep_rank = ep_rank;
    if (ep < 1 || ep_rank < 0 || ep_rank >= ep)
        return vfm_fail(VFM_ERR_INTERNAL, "tp_shard_map_init: EP rank %d of %d", ep_rank, ep);
    m->full = full;
    m->tp = tp;
    m->rank = rank;
    param_table_init(&m->local);
    if (tp < 1 || rank < 0 || rank >= tp) return vfm_fail(VFM_ERR_INTERNAL, "tp_shard_map_init: rank %d of %d", rank, tp);
    m->shards = calloc((size_t)(full->count > 0 ? full->count : 1), sizeof *m->shards);
    if (!m->shards) return vfm_fail(VFM_ERR_NOMEM, "tp_shard_map_init: %d entries", full->count);
    for (int i = 0; i < full->count; i++) {
        const ParamEntry *e = &full->entries[i];
        TpShard *s = &m->shards[i];
        int d = e->tp_split_dim, parts = e->tp_parts > 1 ? e->tp_parts : 1;
        int split = tp, at = rank; /* the split's size and this rank's place in it */
        int expert = (e->reduce_groups & REDUCE_EXPERT) && ep > 1;
        if (expert && d < 0) d = 0, parts = 1, split = 1; /* replicated over TP: whole, then EP's rows */
        int64_t shape[VFM_MAX_DIMS];
        memcpy(shape, e->shape, sizeof shape);
        if (d >= e->ndim) d = -1;
        s->split_dim = d;
        s->parts = d >= 0 ? parts : 1;
        /* EP (expert entries): this rank's E/EP experts are the parts [ep_rank·P/ep, +P/ep) of a
         * dimension-0 split (P = tp_parts: one or two per expert), or rows [ep_rank·n/ep, +n/ep) of
         * dimension 0 (the other splits; parts 1 ⇒ P = ep) */
        if (expert && d == 0 && s->parts == 1) s->parts = parts = ep;
        if (expert && ((d == 0 && s->parts % ep) || (d > 0 && e->shape[0] % ep))) {
            vfm_status st = vfm_fail(VFM_ERR_USAGE, "%s: its %lld expert rows do not split over "
                                     "model.expert_model_parallel_size = %d", e->name, (long long)e->shape[0], ep);
            tp_shard_map_free(m);
            return st;
        }
        if (d >= 0 && e->shape[d] % ((int64_t)s->parts * split) != 0) {
            vfm_status st = s->parts > 1
                ? vfm_fail(VFM_ERR_USAGE, "%s: each of the %d parts of dimension %d (%lld) does not split over "
                           "model.tensor_model_parallel_size = %d", e->name, s->parts, d, (long long)e->shape[d], tp)
                : vfm_fail(VFM_ERR_USAGE, "%s: dimension %d (%lld) does not split over "
                           "model.tensor_model_parallel_size = %d", e->name, d, (long long)e->shape[d], tp);
            tp_shard_map_free(m);
            return st;
        }
        int64_t outer = 1, inner = 1;
        for (int k = 0; k < e->ndim; k++) {
            if (d >= 0 && k < d) outer *= e->shape[k];
            if (d >= 0 && k > d) inner *= e->shape[k];
        }
        if (d < 0) {
            s->begin = 0, s->count = e->ndim > 0 ? e->shape[0] : 1;
            s->runs = 1, s->run_len = e->numel, s->first = 0, s->stride = e->numel, s->part_stride = 0;
        } else {
            int64_t part = e->shape[d] / s->parts; /* one part's size along d */
            s->count = part / split;
            s->begin = s->count * at;
            shape[d] = s->count * s->parts;
            s->runs = outer * s->parts, s->run_len = s->count * inner, s->first = s->begin * inner;
            s->stride = e->shape[d] * inner, s->part_stride = part * inner;
            if (expert && d == 0) { /* this EP rank's parts only (outer = 1) */
                int lp = s->parts / ep;
                s->first += (int64_t)ep_rank * lp * s->part_stride;
                s->parts = lp, s->runs = lp, shape[0] = s->count * lp;
            } else if (expert) { /* this EP rank's rows of dimension 0 */
                int64_t rows = e->shape[0] / ep;
                s->first += (int64_t)ep_rank * rows * (e->numel / e->shape[0]);
                s->runs = outer / ep * s->parts, shape[0] = rows;
            }
        }
        int k = param_table_add(&m->local, e->init, e->init_scale, e->ndim, shape, e->reduce_groups,
                                e->tp_split_dim, "%s", e->name);
        if (k < 0) {
            tp_shard_map_free(m);
            return vfm_fail(VFM_ERR_NOMEM, "tp_shard_map_init: entry %s", e->name);
        }
        m->local.entries[k].weight_decay = e->weight_decay;
        m->local.entries[k].trainable = e->trainable;
        m->local.entries[k].reduce_groups = e->reduce_groups;
        m->local.entries[k].tp_parts = e->tp_parts;
        m->local.entries[k].group = e->group;
    }
    return VFM_OK;
}

vfm_status tp_shard_runs(const TpShardMap *m, int entry, int64_t a, int64_t b, TpRunFn fn, void *ctx) {
    const TpShard *s = &m->shards[entry];
    while (a < b) {
        int64_t run = a / s->run_len, within = a % s->run_len;
        int64_t len = s->run_len - within < b - a ? s->run_len - within : b - a;
        int64_t at = s->first + (run / s->parts) * s->stride + (run % s->parts) * s->part_stride + within;
        VFM_TRY(fn(ctx, a, at, len));
        a += len;
    }
    return VFM_OK;
}

typedef struct {
    float *dst;
    const float *src;
    int to_local;
} CopyCtx;

static vfm_status copy_run(void *p, int64_t local_at, int64_t full_at, int64_t len) {
    CopyCtx *c = p;
    if (c->to_local) memcpy(c->dst + local_at, c->src + full_at, (size_t)len * sizeof(float));
    else memcpy(c->dst + full_at, c->src + local_at, (size_t)len * sizeof(float));
    return VFM_OK;
}

static vfm_status copy_all(const TpShardMap *m, float *local, float *full, int to_local) {
    for (int i = 0; i < m->full->count; i++) {
        const ParamEntry *fe = &m->full->entries[i], *le = &m->local.entries[i];
        CopyCtx c = {to_local ? local + le->offset : full + fe->offset, to_local ? full + fe->offset : local + le->offset,
                     to_local};
        VFM_TRY(tp_shard_runs(m, i, 0, le->numel, copy_run, &c));
    }
    return VFM_OK;
}

vfm_status tp_shard_extract(const TpShardMap *m, float *local, const float *full) {
    return copy_all(m, local, (float *)full, 1);
}

vfm_status tp_shard_insert(const TpShardMap *m, float *full, const float *local) {
    return copy_all(m, (float *)local, full, 0);
}

vfm_status tp_shard_init_values(const TpShardMap *m, float *local, uint64_t seed) {
    int64_t biggest = 1;
    for (int i = 0; i < m->full->count; i++)
        if (m->full->entries[i].numel > biggest) biggest = m->full->entries[i].numel;
    float *one = malloc((size_t)biggest * sizeof *one);
    if (!one) return vfm_fail(VFM_ERR_NOMEM, "tp_shard_init_values: %lld elements", (long long)biggest);
    vfm_status s = VFM_OK;
    for (int i = 0; i < m->full->count && s == VFM_OK; i++) {
        /* a one-entry table with the same name, shape and init draws the same values */
        const ParamEntry *e = &m->full->entries[i];
        ParamTable t;
        param_table_init(&t);
        if (param_table_add(&t, e->init, e->init_scale, e->ndim, e->shape, 0, -1, "%s", e->name) < 0)
            s = vfm_fail(VFM_ERR_NOMEM, "tp_shard_init_values: %s", e->name);
        if (s == VFM_OK) s = param_table_init_values(&t, one, seed);
        CopyCtx c = {local + m->local.entries[i].offset, one, 1};
        if (s == VFM_OK) s = tp_shard_runs(m, i, 0, m->local.entries[i].numel, copy_run, &c);
        param_table_free(&t);
    }
    free(one);
    return s;
}
