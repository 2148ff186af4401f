/* Parameters per pipeline stage and the PP sum of replicated gradients (see pp_stage.h). */
#include "pp_stage.h"

#include <stdlib.h>
#include <string.h>

#include "core/hash.h"
#include "parallel/pp_schedule.h"

/* The block holding entry i, -1 before the blocks, n_blocks after them. */
static int block_of(const PpBlocks *b, int i) {
    if (b->n_blocks == 0 || i < b->block_first[0]) return -1;
    if (i >= b->head_first) return b->n_blocks;
    int k = 0;
    while (k + 1 < b->n_blocks && b->block_first[k + 1] <= i) k++;
    return k;
}

int pp_entry_stage(const ParamTable *full, const PpBlocks *blocks, int P, int V, int entry) {
    if (full->entries[entry].reduce_groups & REDUCE_PP) return -1;
    int k = block_of(blocks, entry);
    if (k < 0) return 0;
    if (k >= blocks->n_blocks) return P - 1;
    int stage, chunk;
    pp_block_owner(blocks->n_blocks, P, V, k, &stage, &chunk);
    return stage;
}

void pp_stage_map_free(PpStageMap *m) {
    param_table_free(&m->local);
    free(m->full_entry);
    free(m->block_first);
    free(m->block_index);
    memset(m, 0, sizeof *m);
}

vfm_status pp_stage_map_init(PpStageMap *m, const ParamTable *full, const PpBlocks *blocks, int P, int V, int stage) {
    memset(m, 0, sizeof *m);
    param_table_init(&m->local);
    if (blocks->n_blocks > 0) VFM_TRY(pp_check_layers(blocks->n_blocks, P, V));
    m->full_entry = malloc((size_t)(full->count > 0 ? full->count : 1) * sizeof(int));
    m->block_first = malloc((size_t)(blocks->n_blocks > 0 ? blocks->n_blocks : 1) * sizeof(int));
    m->block_index = malloc((size_t)(blocks->n_blocks > 0 ? blocks->n_blocks : 1) * sizeof(int));
    if (!m->full_entry || !m->block_first || !m->block_index) {
        pp_stage_map_free(m);
        return vfm_fail(VFM_ERR_NOMEM, "pipeline stage map");
    }
    int last_block = -2;
    m->head_first = -1;
    for (int i = 0; i < full->count; i++) {
        int s = pp_entry_stage(full, blocks, P, V, i);
        if (s >= 0 && s != stage) continue;
        int k = block_of(blocks, i);
        if (k >= 0 && k < blocks->n_blocks && k != last_block) { /* the first entry of a block of this stage */
            m->block_first[m->n_blocks] = m->local.count;
            m->block_index[m->n_blocks++] = k;
            last_block = k;
        }
        if (k >= blocks->n_blocks && m->head_first < 0) m->head_first = m->local.count;
        const ParamEntry *e = &full->entries[i];
        param_table_set_group(&m->local, e->group);
        int j = param_table_add(&m->local, e->init, e->init_scale, e->ndim, e->shape, e->reduce_groups, e->tp_split_dim,
                                "%s", e->name);
        ParamEntry *d = &m->local.entries[j];
        d->weight_decay = e->weight_decay;
        d->trainable = e->trainable;
        d->tp_parts = e->tp_parts;
        d->reduce_groups = e->reduce_groups;
        m->full_entry[j] = i;
    }
    if (m->head_first < 0) m->head_first = m->local.count;
    return VFM_OK;
}

vfm_status pp_reduce_replicated_grads(Comm *pp, const ParamTable *t, float *grads, int64_t base, int first_entry,
                                      int end_entry, Device device) {
    if (!pp || pp->size == 1) return VFM_OK;
    int64_t n = 0, lo = -1, hi = -1;
    int contiguous = 1;
    for (int i = first_entry; i < end_entry; i++) {
        const ParamEntry *e = &t->entries[i];
        if (!(e->reduce_groups & REDUCE_PP)) continue;
        if (lo < 0) lo = e->offset;
        else if (e->offset != hi) contiguous = 0;
        hi = e->offset + e->numel;
        n += e->numel;
    }
    if (n == 0) return VFM_OK;
    if (contiguous) return comm_all_reduce(pp, grads + (lo - base), n, DT_F32, COMM_SUM_ORDERED);
    float *pack;
    VFM_TRY(device_malloc(device, (size_t)n * sizeof(float), (void **)&pack));
    vfm_status s = VFM_OK;
    for (int pass = 0; pass < 3 && s == VFM_OK; pass++) { /* pack, sum, unpack */
        if (pass == 1) {
            s = comm_all_reduce(pp, pack, n, DT_F32, COMM_SUM_ORDERED);
            continue;
        }
        int64_t at = 0;
        for (int i = first_entry; i < end_entry && s == VFM_OK; i++) {
            const ParamEntry *e = &t->entries[i];
            if (!(e->reduce_groups & REDUCE_PP)) continue;
            float *g = grads + (e->offset - base);
            size_t bytes = (size_t)e->numel * sizeof(float);
            s = pass == 0 ? device_memcpy(pack + at, device, g, device, bytes) : device_memcpy(g, device, pack + at, device, bytes);
            at += e->numel;
        }
    }
    device_free(device, pack);
    return s;
}

vfm_status pp_check_replicated(Comm *pp, const ParamTable *t) {
    if (!pp || pp->size == 1) return VFM_OK;
    uint64_t h = hash_string64("vfm-pp-replicated");
    int count = 0;
    for (int i = 0; i < t->count; i++) {
        const ParamEntry *e = &t->entries[i];
        if (!(e->reduce_groups & REDUCE_PP)) continue;
        h = hash_combine64(h, hash_string64(e->name));
        h = hash_combine64(h, hash_bytes64(e->shape, sizeof e->shape[0] * (size_t)e->ndim, (uint64_t)e->ndim));
        count++;
    }
    int64_t mine[2] = {(int64_t)h, count}, *all = malloc(2 * (size_t)pp->size * sizeof *all);
    if (!all) return vfm_fail(VFM_ERR_NOMEM, "pipeline: replicated-entry check");
    vfm_status s = comm_all_gather(pp, mine, all, 2, DT_I64);
    for (int r = 1; r < pp->size && s == VFM_OK; r++)
        if (all[2 * r] != all[0] || all[2 * r + 1] != all[1])
            s = vfm_fail(VFM_ERR_INTERNAL, "pipeline: stage %d holds other replicated (REDUCE_PP) entries than stage 0 "
                         "(%lld and %lld entries)", r, (long long)all[2 * r + 1], (long long)all[1]);
    free(all);
    return s;
}

vfm_status pp_check_replicated_values(Comm *pp, const ParamTable *t, const float *params, Device device, int64_t step) {
    if (!pp || pp->size == 1) return VFM_OK;
    int64_t most = 0;
    for (int i = 0; i < t->count; i++)
        if ((t->entries[i].reduce_groups & REDUCE_PP) && t->entries[i].numel > most) most = t->entries[i].numel;
    float *host = malloc((size_t)(most > 0 ? most : 1) * sizeof *host);
    int64_t *all = malloc((size_t)pp->size * sizeof *all);
    vfm_status s = host && all ? VFM_OK : vfm_fail(VFM_ERR_NOMEM, "pipeline: replicated-value check");
    uint64_t h = hash_string64("vfm-pp-replicated-values");
    for (int i = 0, k = 0; i < t->count && s == VFM_OK; i++) {
        const ParamEntry *e = &t->entries[i];
        if (!(e->reduce_groups & REDUCE_PP)) continue;
        size_t bytes = (size_t)e->numel * sizeof(float);
        s = device_memcpy(host, DEV_CPU, params + e->offset, device, bytes);
        if (s == VFM_OK) h = hash_combine64(h, hash_bytes64(host, bytes, (uint64_t)k++)); /* stage tables number entries differently */
    }
    int64_t mine = (int64_t)h;
    if (s == VFM_OK) s = comm_all_gather(pp, &mine, all, 1, DT_I64);
    for (int r = 1; r < pp->size && s == VFM_OK; r++)
        if (all[r] != all[0])
            s = vfm_fail(VFM_ERR_INTERNAL, "pipeline: after step %lld the replicated embedders (REDUCE_PP entries) of "
                         "stage %d differ from stage 0's: their gradients were not summed over the stages alike",
                         (long long)step, r);
    free(host);
    free(all);
    return s;
}
