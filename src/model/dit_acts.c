/* The activation memory of a DiT: what one forward keeps for its backward and the backward's
 * scratch, laid out for a pack's sizes (each layer carves its own: block.h, conditioning.h,
 * head.h), and dit_reserve.
 * Activations are carved in the model's act_dtype, statistics (LayerNorm/RMSNorm, log-sum-exp) in
 * f32; on CUDA the attention operands keep ATTN_SPARE_ROWS rows after their last row (ops.h) and
 * the host inputs' device copies are carved too. With recomputation (dit_set_recompute) a FULL
 * group keeps only its input in the slot and carves the rest in the model's scratch arena, group
 * after group; SELECTIVE blocks keep all but their attention outputs, which live in the scratch. */
#include <stdlib.h>
#include <string.h>

#include "model/dit_internal.h"

static ActCarver carver(const DiT *m, Arena *arena) {
    return (ActCarver){arena, 0, m->device, m->act_dtype, m->device == DEV_CUDA ? ATTN_SPARE_ROWS : 0};
}

/* The chunk's blocks [a->b0, a->b1) in the slot (recomputation: dit_set_recompute): all of a NONE
 * block's activations; a SELECTIVE block's but its attention outputs; a FULL group's first input
 * only (the rest goes to the scratch: dit_carve_group). */
static vfm_status carve_blocks(const DiT *m, ActCarver *cv, Acts *a) {
    for (int l = a->b0; l < a->b1; l++) {
        RecomputeBlock p = dit_recompute_block(m, a->b0, a->b1, l);
        const DiTBlock *blk = dit_block(m, l);
        if (p.mode != RECOMPUTE_FULL)
            VFM_TRY(block_carve(m, blk, cv, &a->blocks[l], a, CARVE_ALL, p.mode == RECOMPUTE_SELECTIVE));
        else /* the group's input, and every MoE layer's routing (the replay reuses it) */
            VFM_TRY(block_carve(m, blk, cv, &a->blocks[l], a, (p.group_first == l ? CARVE_INPUT : 0) | CARVE_ROUTING, 0));
    }
    return VFM_OK;
}

/* A FULL group's activations [first, end) and the sink of its replayed output. */
static vfm_status carve_group(const DiT *m, ActCarver *cv, Acts *a, int first, int end) {
    for (int l = first; l < end; l++)
        VFM_TRY(block_carve(m, dit_block(m, l), cv, &a->blocks[l], a, l == first ? CARVE_REST : CARVE_INPUT | CARVE_REST, 0));
    return carve_act(cv, &a->rc_sink, a->Rl, m->cfg.hidden);
}

/* SELECTIVE: the attention outputs every block of the chunk shares, one pair per attention of the
 * chunk's first block (every block of an architecture has the same sub-layers). */
static vfm_status carve_selective(const DiT *m, ActCarver *cv, Acts *a) {
    const DiTBlock *p = dit_block(m, a->b0);
    for (int k = 0; k < p->n_sub; k++)
        if (p->sub[k].kind != MIXER_MLP)
            VFM_TRY(attention_carve_recomputed(m, cv, &a->rc[k], a->Rt > a->R ? a->Rt : a->R));
    return VFM_OK;
}

/* The scratch the chunk needs: its largest FULL group, or the SELECTIVE outputs (counted only). */
static vfm_status scratch_bytes(const DiT *m, const Acts *a, size_t *bytes) {
    *bytes = 0;
    if (m->recompute.granularity == RECOMPUTE_NONE) return VFM_OK;
    Acts probe = *a; /* counting writes the tensors' shapes: into a copy of the block table */
    probe.blocks = calloc((size_t)m->cfg.layers, sizeof *probe.blocks);
    if (!probe.blocks) return vfm_fail(VFM_ERR_NOMEM, "dit: a block table");
    vfm_status s = VFM_OK;
    for (int l = a->b0; l < a->b1 && s == VFM_OK; l++) {
        RecomputeBlock p = dit_recompute_block(m, a->b0, a->b1, l);
        ActCarver cv = carver(m, NULL);
        if (p.mode == RECOMPUTE_SELECTIVE && l == a->b0) s = carve_selective(m, &cv, &probe);
        else if (p.mode == RECOMPUTE_FULL && p.group_first == l) s = carve_group(m, &cv, &probe, l, p.group_end);
        if (cv.bytes > *bytes) *bytes = cv.bytes;
    }
    free(probe.blocks);
    return s;
}

vfm_status dit_carve_group(DiT *m, Acts *a, int first, int end) {
    arena_rewind(&m->rc_scratch, 0);
    ActCarver cv = carver(m, &m->rc_scratch);
    return carve_group(m, &cv, a, first, end);
}

vfm_status dit_carve_selective(DiT *m, Acts *a) {
    arena_rewind(&m->rc_scratch, 0);
    ActCarver cv = carver(m, &m->rc_scratch);
    VFM_TRY(carve_selective(m, &cv, a));
    for (int l = a->b0; l < a->b1; l++) {
        const DiTBlock *p = dit_block(m, l);
        for (int k = 0; k < p->n_sub; k++) {
            if (p->sub[k].kind != MIXER_MLP)
                attention_use_recomputed(m, &p->sub[k].attn, &a->blocks[l].sub[k].attn, &a->rc[k], a);
        }
    }
    return VFM_OK;
}

/* The rows of this rank: inputs, output and the scratch of the TP regions and the CP gather. */
static vfm_status carve_parallel(const DiT *m, ActCarver *cv, Acts *a) {
    const Placement *pl = &a->pl;
    int64_t D = m->cfg.hidden, tok = dit_token_dim(&m->cfg), out = dit_out_dim(&m->cfg);
    int64_t wmax = tok > out ? tok : out;
    if (wmax < 3) wmax = 3;
    int sp = m->par.sequence_parallel && m->par.tp > 1;
    if (pl->identity) return VFM_OK;
    if (pl->repacked) VFM_TRY(carve_f32(cv, &a->w_whole, pl->S, wmax));
    if (m->par.cp > 1) {
        VFM_TRY(carve_f32(cv, &a->w_cp, pl->R, wmax));
        VFM_TRY(carve_act(cv, &a->w_gather, pl->S, out));
    }
    VFM_TRY(carve_act(cv, &a->out_local, pl->Rl, out));
    VFM_TRY(carve_act(cv, &a->dout_local, pl->Rl, out));
    VFM_TRY(carve_act(cv, &a->pl.x, pl->Rl, tok));
    VFM_TRY(carve_as(cv, &a->pl.t2s, DT_I32, pl->Rl, 0));
    VFM_TRY(carve_as(cv, &a->pl.pos, DT_I32, pl->Rl, 3));
    if (sp) {
        VFM_TRY(carve_as(cv, &a->pl.pos_r, DT_I32, pl->R, 3));
        VFM_TRY(carve_act(cv, &a->xm_full, pl->R, D));
        VFM_TRY(carve_act(cv, &a->partial, pl->R, D));
        VFM_TRY(carve_act(cv, &a->d_xm_full, pl->R, D));
        VFM_TRY(carve_act(cv, &a->d_partial, pl->R, D));
    }
    return VFM_OK;
}

/* CUDA: the device copies of a pack given in host memory (dit.h "DiTInputs"): the network input
 * and text in the act dtype (and f32 for their upload), c_noise, fps, maps, labels, the layouts'
 * offsets; the output and its gradient. */
static vfm_status carve_staging(const DiT *m, ActCarver *cv, Acts *a, int64_t L, int B) {
    if (m->device != DEV_CUDA) return VFM_OK;
    Staging *g = &a->stage;
    int64_t S = a->pl.S_in, tok = dit_token_dim(&m->cfg), out = dit_out_dim(&m->cfg);
    int64_t Lt = m->cfg.f.cross_attn ? L : 1, dt = m->cfg.d_text > 0 ? m->cfg.d_text : 1;
    VFM_TRY(carve_act(cv, &g->x, S, tok));
    VFM_TRY(carve_f32(cv, &g->x32, S, tok));
    VFM_TRY(carve_act(cv, &g->text, Lt, dt));
    VFM_TRY(carve_f32(cv, &g->text32, Lt, dt));
    VFM_TRY(carve_f32(cv, &g->c_noise, B, 0));
    VFM_TRY(carve_f32(cv, &g->fps, B, 0));
    VFM_TRY(carve_as(cv, &g->t2s, DT_I32, S, 0));
    VFM_TRY(carve_as(cv, &g->pos, DT_I32, S, 3));
    VFM_TRY(carve_as(cv, &g->labels, DT_I32, B, 0));
    for (int k = 0; k < 8; k++) VFM_TRY(carve_as(cv, &g->cu[k], DT_I32, B + 1, 0));
    VFM_TRY(carve_act(cv, &g->out, S, out));
    VFM_TRY(carve_f32(cv, &g->out32, S, out));
    return carve_act(cv, &g->dout, S, out);
}

vfm_status dit_carve_acts(const DiT *m, Arena *arena, size_t *bytes, Acts *a, int64_t L, int B, int b0, int b1) {
    const DiTConfig *c = &m->cfg;
    int64_t D = c->hidden, R = a->pl.R, Rl = a->pl.Rl;
    BlockActs *blocks = a->blocks;
    Placement pl = a->pl;
    memset(a, 0, sizeof *a);
    a->blocks = blocks;
    a->pl = pl;
    memset(blocks, 0, (size_t)c->layers * sizeof *blocks);
    a->S = pl.S_in, a->R = R, a->Rl = Rl, a->L = L, a->B = B;
    a->Rt = pl.have_st ? pl.st.rows_t : R;
    a->b0 = b0, a->b1 = b1;
    ActCarver cv = carver(m, arena);
    VFM_TRY(carve_staging(m, &cv, a, L, B));
    VFM_TRY(carve_parallel(m, &cv, a));
    if (m->patch.conv) VFM_TRY(carve_act(&cv, &a->x_perm, Rl, dit_token_dim(c)));
    VFM_TRY(conditioning_carve(&m->cond, &cv, &a->cond, D, B, L));
    VFM_TRY(pos_learned_carve(&m->pos, &cv, &a->pos, Rl, D));
    VFM_TRY(carve_blocks(m, &cv, a));
    VFM_TRY(carve_act(&cv, &a->h_final, Rl, D));
    VFM_TRY(head_carve(&m->head, &cv, &a->head, D, Rl, B));
    /* the backward's scratch, shared by every block */
    VFM_TRY(carve_act(&cv, &a->d_res, Rl, D));
    VFM_TRY(carve_act(&cv, &a->d_branch, Rl, D));
    VFM_TRY(carve_act(&cv, &a->d_xm, Rl, D));
    if (!a->d_xm_full.data) a->d_xm_full = a->d_xm; /* no SP: the region's rows are the local rows */
    if (!a->d_partial.data) a->d_partial = a->d_branch;
    VFM_TRY(attention_carve_scratch(m, &cv, &a->attn, a, dit_has_mixer(m, MIXER_CROSS_ATTENTION), c->f.factorised));
    const MlpLayer *mlp = block_mlp(&m->blocks[0]);
    if (mlp) VFM_TRY(mlp_carve_scratch(m, mlp, &cv, &a->mlp, a));
    VFM_TRY(modulation_carve_scratch(&m->blocks[0].mod, &cv, &a->mod, B));
    *bytes = cv.bytes;
    return VFM_OK;
}

/* Bytes of one slot and of the recomputation scratch for packs of up to these sizes: those of the
 * largest of this rank's chunks (a slot holds any chunk's forward). packed: the pack comes from the
 * encoder (its slots divide: dit_place_packed) rather than any caller (dit_place_bounds). */
static vfm_status slot_bytes(const DiT *m, int64_t max_tokens, int64_t max_text, int max_samples, int packed,
                             size_t *bytes, size_t *scratch) {
    Acts probe;
    memset(&probe, 0, sizeof probe);
    probe.blocks = calloc((size_t)m->cfg.layers, sizeof *probe.blocks);
    if (!probe.blocks) return vfm_fail(VFM_ERR_NOMEM, "dit: block activations");
    *bytes = *scratch = 0;
    vfm_status s = VFM_OK;
    int chunks = m->par.pp > 1 && m->par.vp > 1 ? m->par.vp : 1;
    for (int v = 0; v < chunks && s == VFM_OK; v++) {
        int b0, b1;
        size_t n = 0, rc = 0;
        dit_chunk_blocks(m, v, &b0, &b1);
        if (packed) dit_place_packed(m, max_tokens, &probe.pl);
        else dit_place_bounds(m, max_tokens, max_samples, &probe.pl);
        s = dit_carve_acts(m, NULL, &n, &probe, max_text, max_samples, b0, b1);
        if (s == VFM_OK) s = scratch_bytes(m, &probe, &rc);
        if (n > *bytes) *bytes = n;
        if (rc > *scratch) *scratch = rc;
    }
    free(probe.blocks);
    return s;
}

/* The scratch arena at least `bytes` (zeroed as a slot's). */
static vfm_status fit_scratch(DiT *m, size_t bytes) {
    if (bytes <= m->rc_scratch.size) return VFM_OK;
    if (m->rc_scratch.base) arena_destroy(&m->rc_scratch);
    VFM_TRY(arena_init(&m->rc_scratch, m->device, bytes));
    return device_memset0(m->device, m->rc_scratch.base, bytes);
}

vfm_status dit_fit_pack(DiT *m, const Acts *a, int64_t L, int B, int b0, int b1) {
    Acts probe;
    memset(&probe, 0, sizeof probe);
    probe.pl = a->pl; /* read only: carving copies the plan's sizes */
    probe.blocks = calloc((size_t)m->cfg.layers, sizeof *probe.blocks);
    if (!probe.blocks) return vfm_fail(VFM_ERR_NOMEM, "dit: block activations");
    size_t bytes = 0, scratch = 0;
    vfm_status s = dit_carve_acts(m, NULL, &bytes, &probe, L, B, b0, b1);
    if (s == VFM_OK) s = scratch_bytes(m, &probe, &scratch);
    free(probe.blocks);
    if (s == VFM_OK && bytes > m->slot_bytes) m->slot_bytes = bytes;
    return s == VFM_OK ? fit_scratch(m, scratch) : s;
}

/* A fresh arena is zeroed: rows no op writes (the attention operands' spare rows) must be finite. */
vfm_status dit_saved_fit(DiT *m, DiTSaved *sv) {
    if (sv->arena.base && sv->arena.size >= m->slot_bytes) return VFM_OK;
    if (sv->arena.base) arena_destroy(&sv->arena);
    VFM_TRY(arena_init(&sv->arena, m->device, m->slot_bytes));
    return device_memset0(m->device, sv->arena.base, sv->arena.size);
}

vfm_status dit_saved_create(DiT *m, DiTSaved **out) {
    *out = NULL;
    if (!m->slot_bytes) return vfm_fail(VFM_ERR_INTERNAL, "dit_saved_create: call dit_reserve first");
    DiTSaved *sv = calloc(1, sizeof *sv);
    if (sv) sv->a.blocks = calloc((size_t)m->cfg.layers, sizeof *sv->a.blocks);
    if (!sv || !sv->a.blocks) {
        free(sv);
        return vfm_fail(VFM_ERR_NOMEM, "dit: saved activations");
    }
    vfm_status s = dit_saved_fit(m, sv);
    if (s != VFM_OK) {
        dit_saved_destroy(m, sv);
        return s;
    }
    *out = sv;
    return VFM_OK;
}

void dit_saved_destroy(DiT *m, DiTSaved *sv) {
    (void)m;
    if (!sv) return;
    if (sv->arena.base) arena_destroy(&sv->arena);
    dit_place_free(&sv->a.pl);
    free(sv->a.blocks);
    free(sv);
}

vfm_status dit_reserve(DiT *m, int64_t max_tokens, int64_t max_text, int max_samples) {
    size_t bytes, scratch;
    Placement pl;
    dit_place_bounds(m, max_tokens, max_samples, &pl);
    int64_t routed = pl.R * (m->par.cp > 1 ? m->par.cp : 1); /* MoE routes whole packs (moe.h) */
    if (routed > m->moe_ep_rows) m->moe_ep_rows = routed;
    if (max_samples > m->moe_ep_samples) m->moe_ep_samples = max_samples;
    dit_place_free(&pl);
    VFM_TRY(slot_bytes(m, max_tokens, max_text, max_samples, 0, &bytes, &scratch));
    if (bytes > m->slot_bytes) m->slot_bytes = bytes;
    VFM_TRY(fit_scratch(m, scratch));
    if (!m->saved) VFM_TRY(dit_saved_create(m, &m->saved));
    return dit_saved_fit(m, m->saved);
}

size_t dit_activation_bytes(const DiT *m, int64_t tokens, int64_t text, int samples) {
    size_t bytes = 0, scratch = 0;
    if (slot_bytes(m, tokens, m->cfg.f.cross_attn ? text : 0, samples, 0, &bytes, &scratch) != VFM_OK)
        return 0;
    return bytes + scratch;
}

vfm_status dit_activation_plan(const DiT *m, int64_t rows, int64_t text, int samples, size_t *slot, size_t *scratch) {
    return slot_bytes(m, rows, m->cfg.f.cross_attn ? text : 0, samples, 1, slot, scratch);
}

size_t dit_activation_peak(const DiT *m) { return (m->saved ? m->saved->arena.peak : 0) + m->rc_scratch.peak; }

size_t dit_saved_peak(const DiTSaved *sv) { return sv ? sv->arena.peak : 0; }
