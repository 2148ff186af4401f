/* Where the model's weights and gradients are (dit_internal.h): its own buffers, the act-dtype
 * copy the ops read (laid out by m->wplace), or under ZeRO-2/3 the FSDP unit of each entry
 * (parallel/fsdp.h) or that unit's act-dtype copy (dit_fsdp.c); and the conversion that makes those copies. */
#include "model/dit_internal.h"
#include "parallel/fsdp.h"

/* Entry i's element `at` in its unit's buffer bufs[unit] (NULL when the unit is not there). */
static float *in_unit(const DiT *m, float *const *bufs, int entry, int64_t at) {
    int u = m->fsdp_unit[entry];
    float *base = bufs[u];
    if (!base) return NULL;
    return base + (m->table.entries[entry].offset - m->fsdp->lay.units[u].begin + at);
}

void *dit_weight_ptr(const DiT *m, int entry, int64_t at, DType *dt) {
    if (m->fsdp && m->fsdp_wcopy) { /* the unit's bf16 copy, laid out by wplace from its first entry */
        int u = m->fsdp_unit[entry];
        if (!m->fsdp_wcopy[u]) return NULL;
        *dt = m->act_dtype;
        int64_t at0 = m->wplace.at[entry] - m->wplace.at[m->fsdp->lay.units[u].first_entry] + at;
        return (char *)m->fsdp_wcopy[u] + (size_t)at0 * dtype_size(m->act_dtype);
    }
    if (m->fsdp) {
        *dt = DT_F32;
        return in_unit(m, m->fsdp->unit_params, entry, at);
    }
    if (m->wcopy) { /* laid out by wplace: every entry 256-byte aligned */
        *dt = m->act_dtype;
        return (char *)m->wcopy + (size_t)(m->wplace.at[entry] + at) * dtype_size(m->act_dtype);
    }
    *dt = DT_F32;
    return m->params + m->table.entries[entry].offset + at;
}

float *dit_grad_ptr(const DiT *m, int entry, int64_t at) {
    if (m->fsdp) return in_unit(m, m->fsdp->unit_grads, entry, at);
    return m->grads + m->table.entries[entry].offset + at;
}

/* One conversion per piece contiguous in both layouts: a single one when every entry's size is a
 * multiple of 256 bytes in act_dtype (dit-7b, dit-28b), one after each entry that is not otherwise
 * (DiT-XL's QK-norm weights of 72). */
vfm_status dit_convert_placed(const DiT *m, void *dst, int64_t dst_at, const float *src, int64_t begin, int64_t end) {
    size_t esz = dtype_size(m->act_dtype);
    for (int i = 0; i < m->wplace.n_runs; i++) {
        const PlacementRun *r = &m->wplace.runs[i];
        int64_t lo = r->table_offset > begin ? r->table_offset : begin;
        int64_t hi = r->table_offset + r->count < end ? r->table_offset + r->count : end;
        if (hi <= lo) continue;
        int64_t at = r->placed_offset + (lo - r->table_offset) - dst_at;
        Tensor d = TENSOR((char *)dst + (size_t)at * esz, m->act_dtype, m->device, hi - lo);
        Tensor s = TENSOR((float *)src + (lo - begin), DT_F32, m->device, hi - lo);
        VFM_TRY(op_convert(&d, &s));
    }
    return VFM_OK;
}
