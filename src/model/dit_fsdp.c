/* ZeRO-2/3 for the DiT (parallel/fsdp.h): one FSDP unit per block (the embedders and the final
 * layer one each), and the hooks the block loop calls: gather before a block's forward and
 * backward (prefetching the next unit), release after, a unit's gradient buffer before its backward
 * and its reduce-scatter after. Without m->fsdp every hook does nothing; weights.c reads the
 * weights and gradients from the units.
 *
 * bf16 on the GPU. The units hold fp32 parameters (the optimizer's master and its pieces); the ops
 * read a bf16 copy of each unit (m->fsdp_wcopy[u], laid out as the whole model's copy would be
 * from the unit's first entry, so every weight stays 256-byte aligned). A ZeRO-3 block unit's copy
 * is made right after its gather, whose fp32 buffer is then released at once (only the bf16 copy
 * stays through the block's compute, beside the next unit's fp32 gather in flight), and freed at
 * the block's end. The whole units' copies (all units under ZeRO-2) stay, made again by
 * dit_refresh_weights whenever the FSDP parameters change; a forward that finds them older than
 * the parameters fails rather than compute with stale weights. */
#include <stdlib.h>
#include <string.h>

#include "model/dit_internal.h"
#include "parallel/fsdp.h"

/* Elements of unit u's copy, and where its first entry sits in m->wplace. */
static int64_t wcopy_span(const DiT *m, int u, int64_t *base) {
    const FsdpUnit *fu = &m->fsdp->lay.units[u];
    *base = m->wplace.at[fu->first_entry];
    int64_t end = fu->end_entry < m->table.count ? m->wplace.at[fu->end_entry] : m->wplace.total;
    return end - *base;
}

/* Unit u's bf16 copy from its fp32 parameters (gathered or whole), allocated on first use. */
static vfm_status unit_convert(DiT *m, int u) {
    const Fsdp *f = m->fsdp;
    const FsdpUnit *fu = &f->lay.units[u];
    const float *src = f->unit_params[u];
    if (!src) return vfm_fail(VFM_ERR_INTERNAL, "dit: FSDP unit %d converted while not gathered", u);
    int64_t base, n = wcopy_span(m, u, &base);
    if (!m->fsdp_wcopy[u]) {
        size_t bytes = (size_t)(n > 0 ? n : 1) * dtype_size(m->act_dtype);
        VFM_TRY(device_malloc(m->device, bytes, &m->fsdp_wcopy[u]));
        if (n > fu->end - fu->begin) VFM_TRY(device_memset0(m->device, m->fsdp_wcopy[u], bytes)); /* the gaps */
    }
    return dit_convert_placed(m, m->fsdp_wcopy[u], base, src, fu->begin, fu->end);
}

static void unit_copy_free(DiT *m, int u) {
    device_free(m->device, m->fsdp_wcopy[u]);
    m->fsdp_wcopy[u] = NULL;
}

void dit_fsdp_wcopy_free(DiT *m) {
    if (!m->fsdp_wcopy) return;
    for (int u = 0; u < m->fsdp_n_units; u++) unit_copy_free(m, u);
    free(m->fsdp_wcopy);
    m->fsdp_wcopy = NULL;
    m->fsdp_n_units = 0;
}

size_t dit_fsdp_wcopy_bytes(const DiT *m) {
    size_t bytes = 0;
    for (int u = 0; u < m->fsdp_n_units; u++) {
        int64_t base;
        if (m->fsdp_wcopy[u]) bytes += (size_t)wcopy_span(m, u, &base) * dtype_size(m->act_dtype);
    }
    return bytes;
}

vfm_status dit_fsdp_refresh_weights(DiT *m) {
    if (!m->fsdp_wcopy) return VFM_OK;
    for (int u = 0; u < m->fsdp_n_units; u++)
        if (!m->fsdp->lay.units[u].sharded_params) VFM_TRY(unit_convert(m, u));
    m->fsdp_wversion = m->fsdp->params_version;
    return VFM_OK;
}

vfm_status dit_fsdp_create(DiT *m, Fsdp *f, const FsdpConfig *cfg, Comm *comm, Comm *tp_comm) {
    if (m->fsdp) return vfm_fail(VFM_ERR_INTERNAL, "dit: FSDP is already set up");
    int *first = malloc((size_t)(m->n_blocks > 0 ? m->n_blocks : 1) * sizeof *first);
    m->fsdp_unit = malloc((size_t)(m->table.count > 0 ? m->table.count : 1) * sizeof *m->fsdp_unit);
    if (!first || !m->fsdp_unit) {
        free(first);
        return vfm_fail(VFM_ERR_NOMEM, "dit: FSDP unit map");
    }
    PpBlocks b;
    dit_block_layout(m, first, &b.n_blocks, &b.head_first);
    b.block_first = first;
    vfm_status s = fsdp_init(f, &m->table, &b, cfg, comm, tp_comm, NULL, m->device);
    free(first);
    VFM_TRY(s);
    fsdp_set_sequence_parallel(f, m->par.sequence_parallel && m->par.tp > 1);
    for (int i = 0; i < m->table.count; i++) m->fsdp_unit[i] = fsdp_unit_of_entry(f, i);
    s = fsdp_set_params(f, m->params);
    if (s == VFM_OK && m->wcopy) { /* bf16: the units' copies replace the whole model's */
        m->fsdp_wcopy = calloc((size_t)f->lay.n_units + 1, sizeof *m->fsdp_wcopy);
        if (!m->fsdp_wcopy) s = vfm_fail(VFM_ERR_NOMEM, "dit: FSDP weight copies");
        m->fsdp_n_units = f->lay.n_units;
        m->fsdp = f;
        if (s == VFM_OK) s = dit_fsdp_refresh_weights(m);
        m->fsdp = NULL;
    }
    if (s != VFM_OK) {
        dit_fsdp_wcopy_free(m);
        fsdp_free(f);
        return s;
    }
    device_free(m->device, m->params);
    device_free(m->device, m->grads);
    device_free(m->device, m->wcopy);
    m->params = m->grads = NULL;
    m->wcopy = NULL;
    m->fsdp = f;
    return VFM_OK;
}

static int unit_of_block(const DiT *m, int l) { return m->fsdp_unit[dit_block(m, l)->first_entry]; }

/* Block l's unit gathered (its bf16 copy made, the fp32 gather released), block next's prefetched. */
static vfm_status gather_block(DiT *m, int l, int next) {
    Fsdp *f = m->fsdp;
    int u = unit_of_block(m, l);
    if (m->fsdp_wcopy && m->fsdp_wversion != f->params_version)
        return vfm_fail(VFM_ERR_INTERNAL, "dit: the FSDP parameters changed after the bf16 copies were made "
                        "(call dit_refresh_weights)");
    VFM_TRY(fsdp_gather(f, u));
    if (m->fsdp_wcopy && f->lay.units[u].sharded_params) {
        VFM_TRY(unit_convert(m, u));
        VFM_TRY(fsdp_release(f, u));
    }
    return next >= 0 ? fsdp_prefetch(f, unit_of_block(m, next)) : VFM_OK;
}

static vfm_status release_block(DiT *m, int l) {
    int u = unit_of_block(m, l);
    if (m->fsdp_wcopy && m->fsdp->lay.units[u].sharded_params) unit_copy_free(m, u);
    return fsdp_release(m->fsdp, u);
}

vfm_status dit_fsdp_forward_begin(DiT *m, int l, int next) { return m->fsdp ? gather_block(m, l, next) : VFM_OK; }

vfm_status dit_fsdp_forward_end(DiT *m, int l) { return m->fsdp ? release_block(m, l) : VFM_OK; }

vfm_status dit_fsdp_backward_begin(DiT *m, int l, int next) {
    if (!m->fsdp) return VFM_OK;
    VFM_TRY(gather_block(m, l, next));
    return fsdp_grad_begin(m->fsdp, unit_of_block(m, l));
}

vfm_status dit_fsdp_backward_end(DiT *m, int l) {
    if (!m->fsdp) return VFM_OK;
    VFM_TRY(release_block(m, l));
    return fsdp_reduce_grads(m->fsdp, unit_of_block(m, l), m->fsdp_last_microbatch);
}

vfm_status dit_fsdp_grads_begin(DiT *m, int entry) {
    if (!m->fsdp) return VFM_OK;
    int u = m->fsdp_unit[entry];
    if (m->fsdp->unit_grads[u]) return VFM_OK; /* an earlier chunk of this backward began it */
    return fsdp_grad_begin(m->fsdp, u);
}

vfm_status dit_fsdp_grads_end(DiT *m, int entry) {
    return m->fsdp ? fsdp_reduce_grads(m->fsdp, m->fsdp_unit[entry], m->fsdp_last_microbatch) : VFM_OK;
}
