/* The DiT's forward and backward over one pack (dit.h): the loop over a chunk of this rank's blocks
 * between the patch embedding and the output head, with the pack's rows placed on this rank's
 * layout, the FSDP units gathered and released and the recomputation's scratch carved around each
 * block. What a block computes is its architecture's list of layers (arch.h, block.h). */
#include <string.h>

#include "model/dit_internal.h"

static vfm_status check_inputs(const DiT *m, const DiTInputs *in, int64_t *S, int64_t *L, int *B) {
    const DiTConfig *c = &m->cfg;
    *S = tensor_dim(in->x, 0);
    *L = c->f.cross_attn ? tensor_dim(in->text, 0) : 0;
    *B = (int)tensor_dim(in->c_noise, 0);
    if (tensor_dim(in->x, -1) != dit_token_dim(c))
        return vfm_fail(VFM_ERR_SHAPE, "dit_forward: tokens have %lld values, the model expects %d (C·p²·pt)",
                        (long long)tensor_dim(in->x, -1), dit_token_dim(c));
    if (c->f.cross_attn && tensor_dim(in->text, -1) != c->d_text)
        return vfm_fail(VFM_ERR_SHAPE, "dit_forward: text rows have %lld values, the model expects %d",
                        (long long)tensor_dim(in->text, -1), c->d_text);
    if (c->num_classes > 0 && (!in->class_labels || tensor_numel(in->class_labels) != *B))
        return vfm_fail(VFM_ERR_SHAPE, "dit_forward: the model is class-conditional (%d classes): it needs a class "
                        "label per sample", c->num_classes);
    if (!m->saved) return vfm_fail(VFM_ERR_INTERNAL, "dit_forward: call dit_reserve first");
    return VFM_OK;
}

/* The chunk's ends: [b0, b1) inside [0, L), an input hidden state exactly when it is not the
 * first chunk, an output one exactly when it is not the last; `h` names them (x/y or dy/dx). */
static vfm_status check_chunk(const DiT *m, int b0, int b1, const Tensor *h_in, const Tensor *h_out, const char *h) {
    int L = m->cfg.layers;
    if (b0 < 0 || b1 > L || b0 >= b1)
        return vfm_fail(VFM_ERR_INTERNAL, "dit chunk: blocks [%d, %d) of a %d-block model", b0, b1, L);
    for (int l = b0; l < b1; l++)
        if (m->block_local[l] < 0)
            return vfm_fail(VFM_ERR_INTERNAL, "dit chunk [%d, %d): block %d is on another pipeline stage", b0, b1, l);
    if ((b0 == 0) != (h_in == NULL) || (b1 == L) != (h_out == NULL))
        return vfm_fail(VFM_ERR_INTERNAL, "dit chunk [%d, %d): %s must be given exactly for an inner end", b0, b1, h);
    return VFM_OK;
}

vfm_status dit_hidden_rows(const DiT *m, const DiTInputs *in, int64_t *rows) {
    Placement pl;
    memset(&pl, 0, sizeof pl);
    vfm_status s = dit_place_plan(m, in, &pl);
    *rows = pl.Rl;
    dit_place_free(&pl);
    return s;
}

vfm_status dit_chunk_forward(DiT *m, DiTSaved *sv, const DiTInputs *in, int b0, int b1, const Tensor *x, Tensor *y,
                             Tensor *out) {
    int64_t S, L;
    int B;
    VFM_TRY(check_inputs(m, in, &S, &L, &B));
    VFM_TRY(check_chunk(m, b0, b1, x, y, "x/y"));
    VFM_TRY(pos_learned_check(&m->pos, in));
    if (!sv) sv = m->saved;
    Acts *a = &sv->a;
    int last = b1 == m->cfg.layers;
    sv->b1 = 0;
    dit_place_free(&a->pl);
    VFM_TRY(dit_place_plan(m, in, &a->pl));
    if (m->cfg.f.factorised) VFM_TRY(dit_fit_pack(m, a, L, B, b0, b1)); /* frame padding: past the reserve's bound */
    VFM_TRY(dit_saved_fit(m, sv));
    arena_rewind(&sv->arena, 0);
    size_t bytes;
    VFM_TRY(dit_carve_acts(m, &sv->arena, &bytes, a, L, B, b0, b1));
    VFM_TRY(dit_stage_inputs(m, a, &in, last ? out : NULL)); /* host inputs of a GPU model: their device copies */
    VFM_TRY(dit_place_inputs(m, a, in));
    m->running = sv;
    VFM_TRY(conditioning_forward(m, &m->cond, &a->cond, in));
    VFM_TRY(pos_learned_forward(m, &m->pos, &a->pos, &a->pl.pos, &a->pl.t2s)); /* every chunk: its blocks add it */
    if (b0 == 0) VFM_TRY(patch_embed_forward(m, &m->patch, &a->x_perm, &a->pl.x, &a->pl.pos, &a->pl.t2s, &a->blocks[0].h[0]));
    else VFM_TRY(op_copy(&a->blocks[b0].h[0], x));
    for (int l = b0; l < b1; l++) {
        VFM_TRY(dit_recompute_forward_begin(m, a, l));
        Tensor *h_out = l + 1 < b1 ? &a->blocks[l + 1].h[0] : last ? &a->h_final : y;
        VFM_TRY(dit_fsdp_forward_begin(m, l, l + 1 < b1 ? l + 1 : -1));
        VFM_TRY(block_forward(m, l, dit_block(m, l), &a->blocks[l], a, in, h_out));
        VFM_TRY(dit_fsdp_forward_end(m, l));
    }
    if (last) {
        Tensor *whole = dit_stage_out(a, out); /* out, or its device twin when the inputs came from the host */
        Tensor *o = a->pl.identity ? whole : &a->out_local;
        VFM_TRY(head_forward(m, &m->head, &a->head, &a->h_final, &a->cond, &a->pl.t2s, o));
        VFM_TRY(dit_gather_output(m, a, whole));
        VFM_TRY(dit_stage_output(m, a, out));
    }
    m->running = NULL;
    sv->b0 = b0, sv->b1 = b1;
    return VFM_OK;
}

vfm_status dit_forward(DiT *m, const DiTInputs *in, Tensor *out) {
    return dit_chunk_forward(m, NULL, in, 0, m->cfg.layers, NULL, NULL, out);
}

vfm_status dit_chunk_backward(DiT *m, DiTSaved *sv, const DiTInputs *in, int b0, int b1, const Tensor *dy,
                              Tensor *dx, const Tensor *dout) {
    VFM_TRY(check_chunk(m, b0, b1, dx, dy, "dx/dy"));
    if (!sv) sv = m->saved;
    Acts *a = sv ? &sv->a : NULL;
    if (!a || sv->b0 != b0 || sv->b1 != b1 || a->S != tensor_dim(in->x, 0))
        return vfm_fail(VFM_ERR_INTERNAL, "dit_backward without a matching forward");
    int last = b1 == m->cfg.layers;
    if (a->stage.on) { /* the forward staged these inputs: use its device copies */
        in = &a->stage.in;
        if (last) VFM_TRY(dit_stage_dout(m, a, &dout));
    }
    m->running = sv;
    if (last) { /* d_res = d(last block output); d(silu(c)) starts with the head's share */
        VFM_TRY(dit_scatter_dout(m, a, dout));
        VFM_TRY(dit_fsdp_grads_begin(m, m->head_first));
        VFM_TRY(head_backward(m, &m->head, &a->head, &a->mod, &a->h_final, &a->cond, &a->pl.t2s,
                              a->pl.identity ? dout : &a->dout_local, &a->d_xm, &a->d_res));
        VFM_TRY(dit_fsdp_grads_end(m, m->head_first));
        if (m->on_grads_final) m->on_grads_final(m->on_grads_final_ctx, m->head_first);
    } else {
        VFM_TRY(op_copy(&a->d_res, dy));
        VFM_TRY(op_fill(&a->cond.d_silu, 0.0));
    }
    VFM_TRY(pos_learned_backward_begin(&m->pos, &a->pos));
    for (int l = b1 - 1; l >= b0; l--) {
        VFM_TRY(dit_recompute_backward_begin(m, a, in, l));
        const DiTBlock *p = dit_block(m, l);
        VFM_TRY(dit_fsdp_backward_begin(m, l, l > b0 ? l - 1 : -1));
        VFM_TRY(block_backward(m, l, p, &a->blocks[l], a, in));
        VFM_TRY(dit_fsdp_backward_end(m, l));
        if (m->on_grads_final) m->on_grads_final(m->on_grads_final_ctx, p->first_entry);
    }
    VFM_TRY(dit_fsdp_grads_begin(m, 0)); /* the embedders: every chunk adds its conditioning's share */
    if (b0 == 0) VFM_TRY(patch_embed_backward(m, &m->patch, &a->x_perm, &a->pl.x, &a->d_res));
    else VFM_TRY(op_copy(dx, &a->d_res));
    VFM_TRY(pos_learned_backward(m, &m->pos, &a->pos, &a->pl.pos, &a->pl.t2s));
    VFM_TRY(conditioning_backward(m, &m->cond, &a->cond, in));
    if (b0 == 0) VFM_TRY(dit_fsdp_grads_end(m, 0)); /* the first chunk's backward comes last */
    if (m->on_grads_final && b0 == 0) m->on_grads_final(m->on_grads_final_ctx, 0);
    m->running = NULL;
    return VFM_OK;
}

vfm_status dit_backward(DiT *m, const DiTInputs *in, const Tensor *dout) {
    return dit_chunk_backward(m, NULL, in, 0, m->cfg.layers, NULL, NULL, dout);
}
