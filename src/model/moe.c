/* The mixture-of-experts layer (moe.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "model/dit_internal.h"

void moe_add(MoeLayer *ml, ParamTable *t, const char *prefix, int64_t D, const MoeSpec *s) {
    char name[128];
    int64_t E = s->experts, F = s->ffn, up = s->swiglu ? 2 : 1;
    ml->s = *s;
    param_table_set_group(t, DIT_GROUP_MLP);
    LinearSpec r = s->router, in = s->in, out = s->out;
    /* the router is replicated over TP; its gradient is partial on every TP rank (the gate
     * gradients come from the experts' partial outputs), so it is summed over TP */
    r.tp_dim = -1, r.groups |= REDUCE_TP_HEADS;
    in.tp_dim = 0, out.tp_dim = 1; /* every expert split over TP like the dense MLP */
    r.bias = in.bias = out.bias = 0;
    in.groups |= REDUCE_EXPERT, out.groups |= REDUCE_EXPERT; /* split by expert over EP (tp_shard.h) */
    snprintf(name, sizeof name, "%s.router", prefix);
    ml->router = linear_add(t, name, E, D, r);
    snprintf(name, sizeof name, "%s.experts.fc1", prefix);
    ml->fc1 = linear_add(t, name, E * up * F, D, in).w;
    t->entries[ml->fc1].tp_parts = (int)(E * up); /* each expert's units (SwiGLU: gate, value) split over TP */
    snprintf(name, sizeof name, "%s.experts.fc2", prefix);
    ml->fc2 = linear_add(t, name, E * D, F, out).w;
}

void moe_handles(MoeLayer *ml, const HandleVisitor *v) {
    visit_linear(v, &ml->router);
    visit_entry(v, &ml->fc1), visit_entry(v, &ml->fc2);
}

int64_t moe_capacity(const MoeSpec *s, int64_t T) {
    if (s->capacity_factor <= 0) return T;
    int k = s->routing == MOE_EXPERT_CHOICE ? 1 : s->topk;
    int64_t c = (int64_t)ceil((double)T * k * s->capacity_factor / s->experts);
    return c < T ? c : T;
}

/* The carve's bound on C = Σ_b C_b over a pack of R rows and B samples. */
static int64_t capacity_bound_of(const MoeSpec *s, int64_t R, int B) {
    if (s->capacity_factor <= 0) return R;
    int k = s->routing == MOE_EXPERT_CHOICE ? 1 : s->topk;
    int64_t c = (int64_t)ceil((double)R * k * s->capacity_factor / s->experts) + B;
    return c < R ? c : R;
}

static int ep_of(const DiT *m) { return m->par.ep > 1 ? m->par.ep : 1; }
static int cp_of(const DiT *m) { return m->par.cp > 1 ? m->par.cp : 1; }
static int tp_of(const DiT *m) { return m->par.tp > 1 ? m->par.tp : 1; }
/* Rows the router selects over: the whole pack (under CP every CP rank routes every chunk). */
static int64_t routed_rows(const DiT *m, const Acts *a) { return a->R * cp_of(m); }
/* Hidden units of an expert on this rank (split over TP like the dense MLP). */
static int64_t ffn_here(const DiT *m, const MoeSpec *s) { return s->ffn / tp_of(m); }

/* Under EP the bound of the largest pack reserved (dit_reserve), whatever this pack: the
 * all-to-alls' size, the same on every EP rank. */
static int64_t capacity_bound(const DiT *m, const MoeSpec *s, const Acts *a) {
    int64_t R = routed_rows(m, a);
    int B = a->B;
    if (m->par.ep > 1 && m->moe_ep_rows > 0) R = m->moe_ep_rows, B = m->moe_ep_samples;
    return capacity_bound_of(s, R, B);
}

static Tensor first_rows(const Tensor *t, int64_t rows) {
    Tensor v = *t;
    v.shape[0] = rows;
    return v;
}
/* [E, C] (or [E·C, w]) views at the forward's C of tensors carved at the bound */
static Tensor slots2(const Tensor *t, int64_t E, int64_t C) {
    return tensor_make(t->data, t->dtype, t->device, 2, (int64_t[]){E, C});
}
static Tensor rows_at(const Tensor *t, int64_t r0, int64_t n) {
    int64_t w = tensor_numel(t) / tensor_dim(t, 0);
    return tensor_make((char *)t->data + (size_t)(r0 * w) * dtype_size(t->dtype), t->dtype, t->device, 2,
                       (int64_t[]){n, w});
}

/* The fixed-size all-to-all over the EP group: block r of send ([E·C, w], E/EP experts' slots each)
 * goes to EP rank r, block r of recv came from it. The same size every step (C is the carve's
 * bound), so no rank needs another's counts. */
static vfm_status ep_all_to_all(const DiT *m, Tensor *recv, const Tensor *send) {
    int64_t per = tensor_numel(send) / ep_of(m);
    return comm_all_to_all(m->par.ep_comm, send->data, recv->data, per, send->dtype);
}

/* The broken variant of the tests (DiTParallel.test_permute_ep_a2a): rows 0 and 1 of x swapped,
 * through tmp (a free row). */
static vfm_status swap_rows01(Tensor *x, Tensor *tmp) {
    Tensor r0 = rows_at(x, 0, 1), r1 = rows_at(x, 1, 1), t = rows_at(tmp, 0, 1);
    VFM_TRY(tensor_copy(&t, &r0));
    VFM_TRY(tensor_copy(&r0, &r1));
    return tensor_copy(&r1, &t);
}

/* Under CP: whole[RW, w] = this rank's rows local[R, w] in their places, zeros elsewhere (the
 * other CP ranks' tokens: their slots hold zero rows here, which the experts map to zero, no
 * gradient); local[R, w] = this rank's rows of whole. */
static vfm_status cp_to_whole(const DiT *m, const Acts *a, Tensor *whole, const Tensor *local) {
    VFM_TRY(op_fill(whole, 0.0));
    return cp_put_chunk(whole, local, a->pl.ch.cu_padded, a->pl.n, m->par.cp, m->par.cp_rank);
}
static vfm_status cp_from_whole(const DiT *m, const Acts *a, Tensor *local, const Tensor *whole) {
    return cp_take_chunk(local, whole, a->pl.ch.cu_padded, a->pl.n, m->par.cp, m->par.cp_rank);
}

/* One expert MLP kind over slot rows (x [N, D] → y [N, D]): fc1 (SwiGLU: to [g | u] of 2F, then
 * silu(g)·u), fc2; `groups` experts, one grouped GEMM each. */
static vfm_status expert_mlp_forward(const MoeSpec *s, Tensor *y, Tensor *pre, Tensor *h, const Tensor *x,
                                     const Tensor *w1, const Tensor *w2, int groups) {
    if (s->swiglu) {
        VFM_TRY(op_grouped_linear_forward(pre, NULL, x, w1, groups, ACT_NONE));
        VFM_TRY(op_swiglu_forward(h, pre));
    } else {
        VFM_TRY(op_grouped_linear_forward(h, pre, x, w1, groups, s->act));
    }
    return op_grouped_linear_forward(y, NULL, h, w2, groups, ACT_NONE);
}

/* Its backward: dx from dy (dh, dpre scratch), g1 and g2 accumulated. */
static vfm_status expert_mlp_backward(const MoeSpec *s, Tensor *dx, Tensor *g1, Tensor *g2, Tensor *dy, Tensor *dh,
                                      Tensor *dpre, const Tensor *x, const Tensor *pre, const Tensor *h,
                                      const Tensor *w1, const Tensor *w2, int groups) {
    VFM_TRY(op_grouped_linear_backward(dh, g2, dy, h, w2, NULL, groups, ACT_NONE, 0));
    if (s->swiglu) {
        VFM_TRY(op_swiglu_backward(dpre, dh, pre));
        return op_grouped_linear_backward(dx, g1, dpre, x, w1, NULL, groups, ACT_NONE, 0);
    }
    return op_grouped_linear_backward(dx, g1, dh, x, w1, pre, groups, s->act, 0);
}

/* The experts of this rank over the dispatched slots: x [EP·(E/EP)·C, D] holds, per sender r,
 * its slots of this rank's E/EP experts; one grouped GEMM per sender block (ep = 1: one block). */
static vfm_status experts_forward(const MoeSpec *s, Tensor *y, Tensor *pre, Tensor *h, const Tensor *x,
                                  const Tensor *w1, const Tensor *w2, int ep) {
    int64_t n = tensor_dim(x, 0) / ep;
    int El = s->experts / ep;
    for (int r = 0; r < ep; r++) {
        Tensor xr = rows_at(x, r * n, n), yr = rows_at(y, r * n, n), pr = rows_at(pre, r * n, n);
        Tensor hr = rows_at(h, r * n, n);
        VFM_TRY(expert_mlp_forward(s, &yr, &pr, &hr, &xr, w1, w2, El));
    }
    return VFM_OK;
}

static vfm_status experts_backward(const MoeSpec *s, Tensor *dx, Tensor *g1, Tensor *g2, Tensor *dy, Tensor *dh,
                                   Tensor *dpre, const Tensor *x, const Tensor *pre, const Tensor *h,
                                   const Tensor *w1, const Tensor *w2, int ep) {
    int64_t n = tensor_dim(x, 0) / ep;
    int El = s->experts / ep;
    for (int r = 0; r < ep; r++) { /* the weight gradients accumulate sender by sender, in EP rank order */
        Tensor dxr = rows_at(dx, r * n, n), dyr = rows_at(dy, r * n, n), xr = rows_at(x, r * n, n);
        Tensor pr = rows_at(pre, r * n, n), hr = rows_at(h, r * n, n), dhr = rows_at(dh, r * n, n), dpr;
        if (s->swiglu) dpr = rows_at(dpre, r * n, n);
        VFM_TRY(expert_mlp_backward(s, &dxr, g1, g2, &dyr, &dhr, s->swiglu ? &dpr : NULL, &xr, &pr, &hr, w1, w2, El));
    }
    return VFM_OK;
}

/* tok2sample of the routed rows (the whole internal pack) on the host: sample i's real rows; under
 * the broken variant DiTParallel.test_moe_local_logits only this CP rank's chunk of them. */
static void routed_t2s(const DiT *m, const Placement *pl, int32_t *t2s, int64_t RW) {
    int cp = cp_of(m), only_mine = m->par.test_moe_local_logits && cp > 1;
    for (int64_t r = 0; r < RW; r++) t2s[r] = -1;
    for (int i = 0; i < pl->n; i++) {
        int32_t at = pl->cu_pad[i], len = pl->cu_real[i + 1] - pl->cu_real[i], c = (pl->cu_pad[i + 1] - at) / cp;
        for (int32_t r = 0; r < len; r++)
            if (!only_mine || r / c == m->par.cp_rank) t2s[at + r] = i;
    }
}

/* The routing of the pack (the forward's first part; a FULL recomputation's replay skips it and
 * reuses what the forward recorded: the routing is never computed twice). xr: the region's rows
 * (under SP gathered over TP, so every TP rank routes the same rows the same way). Under CP the
 * fp32 logits of every CP rank's chunk are gathered into the whole pack, and every CP rank selects
 * over whole samples, identically; it keeps its own rows' slots (tok_local). */
static vfm_status route(const DiT *m, const MoeLayer *ml, MoeActs *b, Acts *a, const Tensor *xr, int64_t *C_out) {
    const MoeSpec *s = &ml->s;
    const Placement *pl = &a->pl;
    MoeScratch *sc = &a->mlp.moe;
    int64_t E = s->experts, R = a->R, RW = routed_rows(m, a);
    int n = pl->n, ep = ep_of(m), cp = cp_of(m);
    /* the samples' rows and capacities (host offsets of the pack, made when it was placed) */
    const int32_t *pad = pl->cu_pad ? pl->cu_pad : pl->cu_in_pad; /* one rank: the caller's slots */
    int32_t cu_tok[n + 2], cu_cap[n + 2];
    cu_tok[0] = cu_cap[0] = 0;
    for (int i = 0; i < n; i++) {
        cu_tok[i + 1] = pad[i + 1];
        cu_cap[i + 1] = cu_cap[i] + (int32_t)moe_capacity(s, pl->cu_real[i + 1] - pl->cu_real[i]);
    }
    int64_t C = cu_cap[n], bound = tensor_dim(&b->slot_tok, 1);
    if (C > bound)
        return vfm_fail(VFM_ERR_INTERNAL, "moe: %lld slots per expert, %lld carved", (long long)C, (long long)bound);
    /* Under EP every expert has the carve's `bound` slots, so the all-to-alls have one size on every
     * rank and every step: an empty last "sample" (no tokens) owns the slots past this pack's C. */
    int nc = n;
    if (ep > 1) cu_tok[n + 1] = cu_tok[n], cu_cap[n + 1] = (int32_t)bound, C = bound, nc = n + 1;
    b->C_used = *C_out = C;
    Tensor cut = first_rows(&b->cu_tok, nc + 1), cuc = first_rows(&b->cu_cap, nc + 1);
    Tensor host_tok = TI32(cu_tok, nc + 1), host_cap = TI32(cu_cap, nc + 1);
    VFM_TRY(tensor_copy(&cut, &host_tok));
    VFM_TRY(tensor_copy(&cuc, &host_cap));
    Tensor t2s = pl->t2s;
    if (!pl->identity) { /* the routed rows' samples (SP: the region's rows, CP: the whole pack) */
        int32_t *h = malloc((size_t)RW * sizeof *h);
        if (!h) return vfm_fail(VFM_ERR_NOMEM, "moe: %lld rows' samples", (long long)RW);
        routed_t2s(m, pl, h, RW);
        Tensor ht = TI32(h, RW);
        t2s = first_rows(&b->t2s, RW);
        vfm_status st = tensor_copy(&t2s, &ht);
        free(h);
        VFM_TRY(st);
    }
    /* route: fp32 logits (CP: gathered into the whole pack), probabilities, candidates, the per-sample top-C */
    Tensor logits_act = first_rows(&sc->logits_act, R), mine = first_rows(&sc->logits_mine, R);
    Tensor logits = first_rows(&sc->logits, RW);
    VFM_TRY(linear_forward(m, &logits_act, NULL, xr, &ml->router, ACT_NONE));
    if (logits_act.dtype != DT_F32) VFM_TRY(op_convert(&mine, &logits_act));
    else mine = logits_act;
    if (cp > 1) {
        Tensor all = first_rows(&sc->logits_all, cp * R);
        VFM_TRY(comm_all_gather(m->par.cp_comm, mine.data, all.data, R * E, DT_F32));
        for (int r = 0; r < cp; r++) {
            Tensor part = rows_at(&all, r * R, R);
            VFM_TRY(cp_put_chunk(&logits, &part, pl->ch.cu_padded, n, cp, r));
        }
    } else {
        logits = mine;
    }
    int k = s->routing == MOE_EXPERT_CHOICE ? (int)E : s->topk;
    VFM_TRY(op_moe_softmax(&b->probs, &b->lse, &logits, &t2s));
    VFM_TRY(op_moe_topk_mask(&b->masked, &b->probs, &t2s, k));
    Tensor st = slots2(&b->slot_tok, E, C), sw = slots2(&b->slot_w, E, C);
    VFM_TRY(op_moe_topc(&st, &sw, &b->tok_slot, &b->masked, &cut, &cuc));
    if (cp > 1) VFM_TRY(cp_from_whole(m, a, &b->tok_local, &b->tok_slot));
    if (s->aux_coeff != 0 || s->z_coeff != 0)
        VFM_TRY(op_moe_router_losses(&b->losses, &b->probs, &b->lse, &b->masked, &t2s, k));
    return VFM_OK;
}

vfm_status moe_forward(const DiT *m, const MoeLayer *ml, MoeActs *b, Acts *a, const Tensor *xm, Tensor *out) {
    const MoeSpec *s = &ml->s;
    MoeScratch *sc = &a->mlp.moe;
    int64_t E = s->experts, C = b->C_used;
    int ep = ep_of(m);
    Tensor xr; /* the region's rows: under SP every TP rank's, gathered */
    VFM_TRY(region_enter(m, a, xm, &xr));
    if (!a->replaying) VFM_TRY(route(m, ml, b, a, &xr, &C));
    Tensor st = slots2(&b->slot_tok, E, C), sw = slots2(&b->slot_w, E, C);
    /* the experts over their slots, then the weighted combine */
    Tensor xe = first_rows(&b->xe, E * C), pre = first_rows(&b->pre, E * C), h = first_rows(&b->h, E * C);
    Tensor ye = first_rows(&b->ye, E * C), w1 = layer_param(m, ml->fc1), w2 = layer_param(m, ml->fc2);
    Tensor swf = tensor_make(sw.data, sw.dtype, sw.device, 1, (int64_t[]){E * C});
    Tensor xw = xr; /* the permute's source: the routed rows (CP: the whole pack, others' rows zero) */
    if (m->par.cp > 1) {
        xw = first_rows(&sc->xw, routed_rows(m, a));
        VFM_TRY(cp_to_whole(m, a, &xw, &xr));
    }
    if (ep == 1) {
        VFM_TRY(op_moe_permute(&xe, &xw, &st));
        VFM_TRY(experts_forward(s, &ye, &pre, &h, &xe, &w1, &w2, 1));
    } else { /* EP: dispatch (xe: this rank's experts' slots from every EP rank), the experts, combine
              * back (ye: this rank's tokens' slots, in the one-rank layout) */
        Tensor xa = first_rows(&sc->xa, E * C);
        VFM_TRY(op_moe_permute(&xa, &xw, &st));
        VFM_TRY(ep_all_to_all(m, &xe, &xa));
        if (m->par.test_permute_ep_a2a) VFM_TRY(swap_rows01(&xe, &xa));
        VFM_TRY(experts_forward(s, &xa, &pre, &h, &xe, &w1, &w2, ep));
        VFM_TRY(ep_all_to_all(m, &ye, &xa));
    }
    /* TP: every rank's experts hold F/TP units, so the combine is partial and the region's exit sums it */
    TpContext tpc = dit_tp_context(m);
    Tensor partial = tpc.sequence_parallel ? a->partial : *out;
    VFM_TRY(op_moe_combine(&partial, &ye, &swf, &b->tok_local));
    return tp_region_exit_forward(&tpc, out, &partial);
}

vfm_status moe_backward(const DiT *m, const MoeLayer *ml, const MoeActs *b, Acts *a, const Tensor *xm) {
    const MoeSpec *s = &ml->s;
    MoeScratch *sc = &a->mlp.moe;
    int64_t E = s->experts, C = b->C_used, R = a->R, RW = routed_rows(m, a);
    int k = s->routing == MOE_EXPERT_CHOICE ? (int)E : s->topk, ep = ep_of(m);
    Tensor st = slots2(&b->slot_tok, E, C);
    Tensor sw = tensor_make(b->slot_w.data, b->slot_w.dtype, b->slot_w.device, 1, (int64_t[]){E * C});
    Tensor dw = first_rows(&sc->dw, E * C), dye = first_rows(&sc->dye, E * C), dh = first_rows(&sc->dh, E * C);
    Tensor dpre = first_rows(&sc->dpre, E * C);
    Tensor dxe = first_rows(&sc->dxe, E * C), xe = first_rows(&b->xe, E * C), pre = first_rows(&b->pre, E * C);
    Tensor h = first_rows(&b->h, E * C), ye = first_rows(&b->ye, E * C);
    Tensor w1 = layer_param(m, ml->fc1), w2 = layer_param(m, ml->fc2);
    Tensor g1 = layer_grad(m, ml->fc1), g2 = layer_grad(m, ml->fc2);
    Tensor dy; /* the region's output gradient (SP: gathered), CP: into the whole pack */
    VFM_TRY(region_exit_backward(m, a, &dy));
    if (m->par.cp > 1) {
        Tensor dyw = first_rows(&sc->xw, RW);
        VFM_TRY(cp_to_whole(m, a, &dyw, &dy));
        dy = dyw;
    }
    VFM_TRY(op_moe_combine_backward(&dye, &dw, &dy, &ye, &sw, &st));
    if (ep == 1) {
        VFM_TRY(experts_backward(s, &dxe, &g1, &g2, &dye, &dh, &dpre, &xe, &pre, &h, &w1, &w2, 1));
        VFM_TRY(op_moe_combine(&a->d_xm_full, &dxe, NULL, &b->tok_local)); /* the permute's backward */
    } else { /* the slots' gradients to the experts' ranks and the inputs' back (forward's a2as reversed) */
        Tensor xa = first_rows(&sc->xa, E * C);
        VFM_TRY(ep_all_to_all(m, &xa, &dye));
        VFM_TRY(experts_backward(s, &dxe, &g1, &g2, &xa, &dh, &dpre, &xe, &pre, &h, &w1, &w2, ep));
        VFM_TRY(ep_all_to_all(m, &dye, &dxe));
        VFM_TRY(op_moe_combine(&a->d_xm_full, &dye, NULL, &b->tok_local));
    }
    /* The router: dw is partial over TP (each rank's experts hold F/TP units) and the softmax's
     * backward is linear in it, so each TP rank's share is partial too; the losses' terms are
     * added on TP rank 0 only. Under CP over the whole pack (the losses are the pack's), then
     * this rank's rows. */
    double scale = m->loss_grad_scale > 0 ? m->loss_grad_scale : 1.0;
    int lead = m->par.tp <= 1 || m->par.tp_rank == 0;
    float aux = s->routing == MOE_TOKEN_AUX_LOSS && lead ? (float)(s->aux_coeff * scale) : 0.f;
    float z = lead ? (float)(s->z_coeff * scale) : 0.f;
    Tensor dlogits = first_rows(&sc->logits, RW), mine = dlogits;
    Tensor t2s = a->pl.identity ? a->pl.t2s : first_rows(&b->t2s, RW);
    VFM_TRY(op_moe_router_backward(&dlogits, &dw, &b->tok_slot, &b->probs, &b->lse, &b->masked, &t2s, k, aux, z));
    if (m->par.cp > 1) {
        mine = first_rows(&sc->logits_mine, R);
        VFM_TRY(cp_from_whole(m, a, &mine, &dlogits));
    }
    Tensor dlogits_act = first_rows(&sc->logits_act, R);
    if (dlogits_act.dtype != DT_F32) VFM_TRY(op_convert(&dlogits_act, &mine));
    else dlogits_act = mine;
    Tensor xr;
    VFM_TRY(region_enter(m, a, xm, &xr));
    VFM_TRY(linear_backward(m, &a->d_xm_full, 1, &dlogits_act, &xr, &ml->router, NULL, ACT_NONE));
    return region_enter_backward(m, a);
}

vfm_status moe_carve_routing(const DiT *m, const MoeLayer *ml, ActCarver *cv, MoeActs *b, const Acts *a) {
    const MoeSpec *s = &ml->s;
    int64_t E = s->experts, RW = routed_rows(m, a), C = capacity_bound(m, s, a);
    VFM_TRY(carve_f32(cv, &b->probs, RW, E));
    VFM_TRY(carve_f32(cv, &b->masked, RW, E));
    VFM_TRY(carve_f32(cv, &b->lse, RW, 0));
    VFM_TRY(carve_as(cv, &b->slot_tok, DT_I32, E, C));
    VFM_TRY(carve_f32(cv, &b->slot_w, E, C));
    VFM_TRY(carve_as(cv, &b->tok_slot, DT_I32, RW, E));
    if (m->par.cp > 1) VFM_TRY(carve_as(cv, &b->tok_local, DT_I32, a->R, E));
    else b->tok_local = b->tok_slot;
    if (!a->pl.identity) VFM_TRY(carve_as(cv, &b->t2s, DT_I32, RW, 0));
    VFM_TRY(carve_as(cv, &b->cu_tok, DT_I32, a->B + 2, 0)); /* + EP's empty last sample */
    VFM_TRY(carve_as(cv, &b->cu_cap, DT_I32, a->B + 2, 0));
    return carve_f32(cv, &b->losses, 2, 0);
}

vfm_status moe_carve(const DiT *m, const MoeLayer *ml, ActCarver *cv, MoeActs *b, const Acts *a) {
    const MoeSpec *s = &ml->s;
    int64_t E = s->experts, F = ffn_here(m, s), D = m->cfg.hidden, C = capacity_bound(m, s, a);
    VFM_TRY(carve_act(cv, &b->xe, E * C, D));
    VFM_TRY(carve_act(cv, &b->pre, E * C, (s->swiglu ? 2 : 1) * F));
    VFM_TRY(carve_act(cv, &b->h, E * C, F));
    return carve_act(cv, &b->ye, E * C, D);
}

vfm_status moe_carve_scratch(const DiT *m, const MoeLayer *ml, ActCarver *cv, MoeScratch *s, const Acts *a) {
    const MoeSpec *p = &ml->s;
    int64_t E = p->experts, D = m->cfg.hidden, R = a->R, RW = routed_rows(m, a), C = capacity_bound(m, p, a);
    int64_t F = ffn_here(m, p);
    VFM_TRY(carve_f32(cv, &s->logits, RW, E));
    if (m->par.cp > 1) {
        VFM_TRY(carve_f32(cv, &s->logits_mine, R, E));
        VFM_TRY(carve_f32(cv, &s->logits_all, m->par.cp * R, E));
        VFM_TRY(carve_act(cv, &s->xw, RW, D));
    } else {
        s->logits_mine = s->logits;
    }
    if (cv->act != DT_F32) VFM_TRY(carve_act(cv, &s->logits_act, R, E));
    else s->logits_act = s->logits_mine;
    VFM_TRY(carve_f32(cv, &s->dw, E * C, 0));
    VFM_TRY(carve_act(cv, &s->dye, E * C, D));
    VFM_TRY(carve_act(cv, &s->dxe, E * C, D));
    if (ep_of(m) > 1) VFM_TRY(carve_act(cv, &s->xa, E * C, D));
    if (p->swiglu) VFM_TRY(carve_act(cv, &s->dpre, E * C, 2 * F));
    return carve_act(cv, &s->dh, E * C, F);
}

double moe_flops(const DiT *m, const MoeLayer *ml, const FlopShape *s) {
    const MoeSpec *p = &ml->s;
    double D = m->cfg.hidden, E = p->experts, per = s->samples > 0 ? s->tokens / s->samples : 0;
    double slots = s->samples * E * (double)moe_capacity(p, (int64_t)llround(per));
    double F = (double)ffn_here(m, p); /* fc1 (SwiGLU: 2F outputs) and fc2 */
    return linear_flops(m, &ml->router, s->tokens) + 2.0 * slots * (p->swiglu ? 3.0 : 2.0) * D * F;
}
