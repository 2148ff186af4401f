/* Activation recomputation in the DiT's block loop (dit.h "dit_set_recompute"; the plans and the
 * keys: src/parallel/recompute.h; docs/parallel.md "Activation recomputation"). The loop in dit.c
 * calls dit_recompute_forward_begin before each block's forward (a FULL group's activations are
 * carved in the arena's scratch) and dit_recompute_backward_begin before each block's backward (at
 * the last block of a FULL group: the group's forward again from its kept input); block_backward
 * asks dit_recomputes_attention before a SELECTIVE block's attention backward. A replay is the
 * same computation on the same inputs: the block has no random draws (σ, noise and the CFG drop
 * are drawn by the objective before the model, keyed by sample uid) and every op is deterministic,
 * so outputs and gradients are bitwise those without recomputation. Under TP/SP/CP the replay
 * runs the block's collectives again, on every rank of the group alike. */
#include <stdlib.h>

#include "model/dit_internal.h"

vfm_status dit_set_recompute(DiT *m, const RecomputeConfig *rc, int n_chunks, const int *chunk_blocks) {
    if (m->saved) return vfm_fail(VFM_ERR_INTERNAL, "dit_set_recompute after dit_reserve");
    free(m->recompute);
    m->recompute = NULL;
    if (!rc || rc->granularity == RECOMPUTE_NONE) return VFM_OK;
    int n = m->cfg.layers, one = n;
    if (n_chunks <= 0 || !chunk_blocks) n_chunks = 1, chunk_blocks = &one;
    int total = 0;
    for (int i = 0; i < n_chunks; i++) total += chunk_blocks[i];
    if (total != n)
        return vfm_fail(VFM_ERR_INTERNAL, "dit_set_recompute: the chunks hold %d blocks, the model %d", total, n);
    m->recompute = calloc((size_t)n, sizeof *m->recompute);
    if (!m->recompute) return vfm_fail(VFM_ERR_NOMEM, "dit: a recomputation plan of %d blocks", n);
    for (int i = 0, at = 0; i < n_chunks; at += chunk_blocks[i++]) {
        RecomputeBlock *plan = m->recompute + at;
        recompute_plan(rc, chunk_blocks[i], plan);
        for (int k = 0; k < chunk_blocks[i]; k++) plan[k].group_first += at, plan[k].group_end += at;
    }
    return VFM_OK;
}

static const RecomputeBlock *full_plan(const DiT *m, int l) {
    return m->recompute && m->recompute[l].mode == RECOMPUTE_FULL ? &m->recompute[l] : NULL;
}

int dit_recomputes_attention(const DiT *m, int l) {
    return m->recompute && m->recompute[l].mode == RECOMPUTE_SELECTIVE;
}

vfm_status dit_recompute_forward_begin(DiT *m, Acts *a, int l) {
    const RecomputeBlock *p = full_plan(m, l);
    if (!p || p->group_first != l) return VFM_OK;
    return dit_carve_group(m, a, p->group_first, p->group_end);
}

vfm_status dit_recompute_backward_begin(DiT *m, Acts *a, const DiTInputs *in, int l) {
    const RecomputeBlock *p = full_plan(m, l);
    if (!p || p->group_end - 1 != l) return VFM_OK;
    VFM_TRY(dit_carve_group(m, a, p->group_first, p->group_end));
    void (*probe)(void *, const char *, int, const Tensor *) = m->probe;
    m->probe = NULL; /* the probes saw this forward once */
    vfm_status s = VFM_OK;
    for (int j = p->group_first; j < p->group_end && s == VFM_OK; j++)
        s = dit_block_forward(m, j, a, in, j + 1 < p->group_end ? &a->blocks[j + 1].h0 : &a->rc_sink);
    m->probe = probe;
    return s;
}
