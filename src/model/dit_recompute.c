/* Activation recomputation in the DiT's block loop (dit.h "dit_set_recompute"; the plans and the
 * keys: src/parallel/recompute.h; docs/parallel.md "Activation recomputation"). The loop in dit.c
 * calls dit_recompute_forward_begin before each block's forward (a FULL group's activations are
 * carved in the arena's scratch) and dit_recompute_backward_begin before each block's backward (at
 * the last block of a FULL group: the group's forward again from its kept input); under SELECTIVE
 * each attention layer recomputes its output before its backward (attention.c). Plans are made per
 * chunk [b0, b1) of the forward (recompute.h; dit_forward's chunk is every block); what is
 * recomputed lives in the model's scratch arena, which every slot shares. A replay is the
 * same computation on the same inputs: the block has no random draws (σ, noise and the CFG drop
 * are drawn by the objective before the model, keyed by sample uid) and every op is deterministic,
 * so outputs and gradients are bitwise those without recomputation. Under TP/SP/CP the replay
 * runs the block's collectives again, on every rank of the group alike; under ZeRO-3 it gathers
 * each block's unit around its replay (dit_fsdp_forward_begin/_end), as the forward does. */
#include <string.h>

#include "model/dit_internal.h"

vfm_status dit_set_recompute(DiT *m, const RecomputeConfig *rc) {
    if (m->saved) return vfm_fail(VFM_ERR_INTERNAL, "dit_set_recompute after dit_reserve");
    memset(&m->recompute, 0, sizeof m->recompute);
    if (rc) m->recompute = *rc;
    return VFM_OK;
}

vfm_status dit_recompute_forward_begin(DiT *m, Acts *a, int l) {
    RecomputeBlock p = dit_recompute_block(m, a->b0, a->b1, l);
    if (p.mode == RECOMPUTE_SELECTIVE && l == a->b0) return dit_carve_selective(m, a);
    if (p.mode != RECOMPUTE_FULL || p.group_first != l) return VFM_OK;
    return dit_carve_group(m, a, p.group_first, p.group_end);
}

vfm_status dit_recompute_backward_begin(DiT *m, Acts *a, const DiTInputs *in, int l) {
    RecomputeBlock p = dit_recompute_block(m, a->b0, a->b1, l);
    if (p.mode == RECOMPUTE_SELECTIVE) m->rc_replays++; /* its attention's backward recomputes it */
    if (p.mode == RECOMPUTE_SELECTIVE && l == a->b1 - 1) return dit_carve_selective(m, a);
    if (p.mode != RECOMPUTE_FULL || p.group_end - 1 != l) return VFM_OK;
    VFM_TRY(dit_carve_group(m, a, p.group_first, p.group_end));
    void (*probe)(void *, const char *, int, const Tensor *) = m->probe;
    m->probe = NULL; /* the probes saw this forward once */
    vfm_status s = VFM_OK;
    for (int j = p.group_first; j < p.group_end && s == VFM_OK; j++) {
        /* ZeRO-3: each block's unit gathered around its replay, as in the forward */
        s = dit_fsdp_forward_begin(m, j, j + 1 < p.group_end ? j + 1 : -1);
        Tensor *out = j + 1 < p.group_end ? &a->blocks[j + 1].h[0] : &a->rc_sink;
        if (s == VFM_OK) s = block_forward(m, j, dit_block(m, j), &a->blocks[j], a, in, out);
        if (s == VFM_OK) m->rc_replays++;
        if (s == VFM_OK) s = dit_fsdp_forward_end(m, j);
    }
    m->probe = probe;
    return s;
}
