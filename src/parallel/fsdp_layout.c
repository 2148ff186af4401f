/* The ZeRO-2/3 unit layout (fsdp_layout.h). */
#include "parallel/fsdp_layout.h"

#include <stdlib.h>
#include <string.h>

void fsdp_unit_piece(const FsdpUnit *u, int j, int64_t *lo, int64_t *hi) {
    int64_t a = u->begin + (int64_t)j * u->shard, b = a + u->shard;
    *lo = a < u->end ? a : u->end;
    *hi = b < u->end ? b : u->end;
}

static vfm_status add_unit(FsdpLayout *l, const ParamTable *t, int first, int end, int block, int shard_params) {
    if (first >= end) return VFM_OK;
    FsdpUnit *u = &l->units[l->n_units++];
    u->first_entry = first;
    u->end_entry = end;
    u->begin = t->entries[first].offset;
    u->end = t->entries[end - 1].offset + t->entries[end - 1].numel;
    u->shard = (u->end - u->begin + l->n - 1) / l->n;
    u->slot = l->slots;
    u->block = block;
    u->sharded_params = shard_params && block >= 0;
    l->slots += u->shard;
    int64_t padded = u->shard * l->n;
    if (padded > l->max_unit_padded) l->max_unit_padded = padded;
    if (u->sharded_params && padded > l->max_block_padded) l->max_block_padded = padded;
    if (!u->sharded_params) l->unsharded_params += u->end - u->begin;
    return VFM_OK;
}

vfm_status fsdp_layout_init(FsdpLayout *l, const ParamTable *t, const PpBlocks *b, int n, int shard_params) {
    memset(l, 0, sizeof *l);
    if (n < 1) return vfm_fail(VFM_ERR_INTERNAL, "fsdp: %d ranks", n);
    l->n = n;
    int64_t at = 0;
    for (int i = 0; i < t->count; i++) {
        if (t->entries[i].offset != at)
            return vfm_fail(VFM_ERR_INTERNAL, "fsdp: table entry %s is at %lld, expected %lld (entries must be contiguous)",
                            t->entries[i].name, (long long)t->entries[i].offset, (long long)at);
        at += t->entries[i].numel;
    }
    int nb = b ? b->n_blocks : 0, head = nb ? b->head_first : t->count;
    for (int k = 0; k < nb; k++) {
        int end = k + 1 < nb ? b->block_first[k + 1] : head;
        if (b->block_first[k] >= end || b->block_first[k] < 0 || end > t->count || (k > 0 && b->block_first[k] < b->block_first[k - 1]))
            return vfm_fail(VFM_ERR_INTERNAL, "fsdp: block %d spans entries [%d, %d) of %d", k, b->block_first[k], end, t->count);
    }
    l->units = calloc((size_t)nb + 2, sizeof *l->units);
    if (!l->units) return vfm_fail(VFM_ERR_NOMEM, "fsdp: units");
    VFM_TRY(add_unit(l, t, 0, nb ? b->block_first[0] : t->count, -1, shard_params));
    for (int k = 0; k < nb; k++) VFM_TRY(add_unit(l, t, b->block_first[k], k + 1 < nb ? b->block_first[k + 1] : head, k, shard_params));
    if (nb) VFM_TRY(add_unit(l, t, head, t->count, -1, shard_params));
    return VFM_OK;
}

void fsdp_layout_free(FsdpLayout *l) {
    free(l->units);
    memset(l, 0, sizeof *l);
}

int fsdp_layout_unit_of_entry(const FsdpLayout *l, int entry) {
    for (int u = 0; u < l->n_units; u++)
        if (entry >= l->units[u].first_entry && entry < l->units[u].end_entry) return u;
    return -1;
}
