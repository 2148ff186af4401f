/* ZeRO-2/3 for the DiT (parallel/fsdp.h): one FSDP unit per block (the embedders and the final
 * layer one each), and the hooks the block loop calls: gather before a block's forward and
 * backward (prefetching the next unit), release after, a unit's gradient buffer before its backward
 * and its reduce-scatter after. Without m->fsdp every hook does nothing; weights.c reads the
 * weights and gradients from the units. */
#include <stdlib.h>
#include <string.h>

#include "model/dit_internal.h"
#include "parallel/fsdp.h"

vfm_status dit_fsdp_create(DiT *m, Fsdp *f, const FsdpConfig *cfg, Comm *comm, Comm *tp_comm) {
    if (m->fsdp) return vfm_fail(VFM_ERR_INTERNAL, "dit: FSDP is already set up");
    if (m->wcopy)
        return vfm_fail(VFM_ERR_UNSUPPORTED, "dit: ZeRO-2/3 keeps fp32 weights in its units: set f32 activations "
                        "(dit_set_act_dtype) first");
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
    if (s != VFM_OK) {
        fsdp_free(f);
        return s;
    }
    device_free(m->device, m->params);
    device_free(m->device, m->grads);
    m->params = m->grads = NULL;
    m->fsdp = f;
    return VFM_OK;
}

static int unit_of_block(const DiT *m, int l) { return m->fsdp_unit[dit_block(m, l)->first_entry]; }

vfm_status dit_fsdp_forward_begin(DiT *m, int l, int next) {
    if (!m->fsdp) return VFM_OK;
    VFM_TRY(fsdp_gather(m->fsdp, unit_of_block(m, l)));
    return next >= 0 ? fsdp_prefetch(m->fsdp, unit_of_block(m, next)) : VFM_OK;
}

vfm_status dit_fsdp_forward_end(DiT *m, int l) { return m->fsdp ? fsdp_release(m->fsdp, unit_of_block(m, l)) : VFM_OK; }

vfm_status dit_fsdp_backward_begin(DiT *m, int l, int next) {
    if (!m->fsdp) return VFM_OK;
    int u = unit_of_block(m, l);
    VFM_TRY(fsdp_gather(m->fsdp, u));
    if (next >= 0) VFM_TRY(fsdp_prefetch(m->fsdp, unit_of_block(m, next)));
    return fsdp_grad_begin(m->fsdp, u);
}

vfm_status dit_fsdp_backward_end(DiT *m, int l) {
    if (!m->fsdp) return VFM_OK;
    int u = unit_of_block(m, l);
    VFM_TRY(fsdp_release(m->fsdp, u));
    return fsdp_reduce_grads(m->fsdp, u, m->fsdp_last_microbatch);
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
