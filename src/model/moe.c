/* The mixture-of-experts layer (moe.h). */
#include <math.h>
#include <stdio.h>

#include "model/dit_internal.h"

void moe_add(MoeLayer *ml, ParamTable *t, const char *prefix, int64_t D, const MoeSpec *s) {
    char name[128];
    int64_t E = s->experts, F = s->ffn;
    ml->s = *s;
    param_table_set_group(t, DIT_GROUP_MLP);
    LinearSpec r = s->router, in = s->in, out = s->out;
    r.tp_dim = in.tp_dim = out.tp_dim = -1; /* replicated: MoE runs without TP (dit_check_parallel) */
    r.bias = in.bias = out.bias = 0;
    in.groups |= REDUCE_EXPERT, out.groups |= REDUCE_EXPERT; /* split by expert over EP (tp_shard.h) */
    snprintf(name, sizeof name, "%s.router", prefix);
    ml->router = linear_add(t, name, E, D, r);
    snprintf(name, sizeof name, "%s.experts.fc1", prefix);
    ml->fc1 = linear_add(t, name, E * F, D, in).w;
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

/* Under EP the bound of the largest pack reserved (dit_reserve), whatever this pack: the
 * all-to-alls' size, the same on every EP rank. */
static int64_t capacity_bound(const DiT *m, const MoeSpec *s, int64_t R, int B) {
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

/* Expert parallelism (moe.h): EP ranks, and rows [r0, r0 + n) of a slot tensor as a view. */
static int ep_of(const DiT *m) { return m->par.ep > 1 ? m->par.ep : 1; }
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

/* The experts of this rank over the dispatched slots: x [EP·(E/EP)·C, in] holds, per sender r,
 * its slots of this rank's E/EP experts; one grouped GEMM per sender block. */
static vfm_status experts_forward(Tensor *y, Tensor *pre, const Tensor *x, const Tensor *w, int ep, int64_t El,
                                  Activation act) {
    int64_t n = tensor_dim(x, 0) / ep;
    for (int r = 0; r < ep; r++) {
        Tensor xr = rows_at(x, r * n, n), yr = rows_at(y, r * n, n), pr;
        if (pre) pr = rows_at(pre, r * n, n);
        VFM_TRY(op_grouped_linear_forward(&yr, pre ? &pr : NULL, &xr, w, (int)El, act));
    }
    return VFM_OK;
}

static vfm_status experts_backward(Tensor *dx, Tensor *dw, Tensor *dy, const Tensor *x, const Tensor *w,
                                   const Tensor *pre, int ep, int64_t El, Activation act) {
    int64_t n = tensor_dim(x, 0) / ep;
    for (int r = 0; r < ep; r++) { /* dw accumulates sender by sender, in EP rank order */
        Tensor dxr = rows_at(dx, r * n, n), dyr = rows_at(dy, r * n, n), xr = rows_at(x, r * n, n), pr;
        if (pre) pr = rows_at(pre, r * n, n);
        VFM_TRY(op_grouped_linear_backward(&dxr, dw, &dyr, &xr, w, pre ? &pr : NULL, (int)El, act, 0));
    }
    return VFM_OK;
}

/* The routing of the pack (the forward's first part; a FULL recomputation's replay skips it and
 * reuses what the forward recorded: the routing is never computed twice). */
static vfm_status route(const DiT *m, const MoeLayer *ml, MoeActs *b, Acts *a, const Tensor *xm, int64_t *C_out) {
    const MoeSpec *s = &ml->s;
    const Placement *pl = &a->pl;
    MoeScratch *sc = &a->mlp.moe;
    int64_t E = s->experts, R = a->R;
    int n = pl->n, ep = ep_of(m);
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
    /* route: fp32 logits, probabilities, candidates, the per-sample top-C */
    Tensor logits_act = first_rows(&sc->logits_act, R), logits = first_rows(&sc->logits, R);
    VFM_TRY(linear_forward(m, &logits_act, NULL, xm, &ml->router, ACT_NONE));
    if (logits_act.dtype != DT_F32) VFM_TRY(op_convert(&logits, &logits_act));
    else logits = logits_act;
    int k = s->routing == MOE_EXPERT_CHOICE ? (int)E : s->topk;
    VFM_TRY(op_moe_softmax(&b->probs, &b->lse, &logits, &pl->t2s));
    VFM_TRY(op_moe_topk_mask(&b->masked, &b->probs, &pl->t2s, k));
    Tensor st = slots2(&b->slot_tok, E, C), sw = slots2(&b->slot_w, E, C);
    VFM_TRY(op_moe_topc(&st, &sw, &b->tok_slot, &b->masked, &cut, &cuc));
    if (s->aux_coeff != 0 || s->z_coeff != 0)
        VFM_TRY(op_moe_router_losses(&b->losses, &b->probs, &b->lse, &b->masked, &pl->t2s, k));
    return VFM_OK;
}

vfm_status moe_forward(const DiT *m, const MoeLayer *ml, MoeActs *b, Acts *a, const Tensor *xm, Tensor *out) {
    const MoeSpec *s = &ml->s;
    MoeScratch *sc = &a->mlp.moe;
    int64_t E = s->experts, F = s->ffn, C = b->C_used;
    int ep = ep_of(m);
    if (!a->replaying) VFM_TRY(route(m, ml, b, a, xm, &C));
    Tensor st = slots2(&b->slot_tok, E, C), sw = slots2(&b->slot_w, E, C);
    /* the experts over their slots, then the weighted combine */
    Tensor xe = first_rows(&b->xe, E * C), pre = first_rows(&b->pre, E * C), h = first_rows(&b->h, E * C);
    Tensor ye = first_rows(&b->ye, E * C), w1 = layer_param(m, ml->fc1), w2 = layer_param(m, ml->fc2);
    Tensor swf = tensor_make(sw.data, sw.dtype, sw.device, 1, (int64_t[]){E * C});
    (void)F;
    if (ep == 1) {
        VFM_TRY(op_moe_permute(&xe, xm, &st));
        VFM_TRY(op_grouped_linear_forward(&h, &pre, &xe, &w1, (int)E, s->act));
        VFM_TRY(op_grouped_linear_forward(&ye, NULL, &h, &w2, (int)E, ACT_NONE));
        return op_moe_combine(out, &ye, &swf, &b->tok_slot);
    }
    /* EP: dispatch (xe: this rank's experts' slots from every EP rank), the experts, combine back
     * (ye: this rank's tokens' slots, in the one-rank layout) */
    Tensor xa = first_rows(&sc->xa, E * C);
    VFM_TRY(op_moe_permute(&xa, xm, &st));
    VFM_TRY(ep_all_to_all(m, &xe, &xa));
    if (m->par.test_permute_ep_a2a) VFM_TRY(swap_rows01(&xe, &xa));
    VFM_TRY(experts_forward(&h, &pre, &xe, &w1, ep, E / ep, s->act));
    VFM_TRY(experts_forward(&xa, NULL, &h, &w2, ep, E / ep, ACT_NONE));
    VFM_TRY(ep_all_to_all(m, &ye, &xa));
    return op_moe_combine(out, &ye, &swf, &b->tok_slot);
}

vfm_status moe_backward(const DiT *m, const MoeLayer *ml, const MoeActs *b, Acts *a, const Tensor *xm) {
    const MoeSpec *s = &ml->s;
    MoeScratch *sc = &a->mlp.moe;
    int64_t E = s->experts, C = b->C_used, R = a->R;
    int k = s->routing == MOE_EXPERT_CHOICE ? (int)E : s->topk;
    Tensor st = slots2(&b->slot_tok, E, C);
    Tensor sw = tensor_make(b->slot_w.data, b->slot_w.dtype, b->slot_w.device, 1, (int64_t[]){E * C});
    Tensor dw = first_rows(&sc->dw, E * C), dye = first_rows(&sc->dye, E * C), dh = first_rows(&sc->dh, E * C);
    Tensor dxe = first_rows(&sc->dxe, E * C), xe = first_rows(&b->xe, E * C), pre = first_rows(&b->pre, E * C);
    Tensor h = first_rows(&b->h, E * C), ye = first_rows(&b->ye, E * C);
    Tensor w1 = layer_param(m, ml->fc1), w2 = layer_param(m, ml->fc2);
    Tensor g1 = layer_grad(m, ml->fc1), g2 = layer_grad(m, ml->fc2);
    VFM_TRY(op_moe_combine_backward(&dye, &dw, &a->d_branch, &ye, &sw, &st));
    int ep = ep_of(m);
    if (ep == 1) {
        VFM_TRY(op_grouped_linear_backward(&dh, &g2, &dye, &h, &w2, NULL, (int)E, ACT_NONE, 0));
        VFM_TRY(op_grouped_linear_backward(&dxe, &g1, &dh, &xe, &w1, &pre, (int)E, s->act, 0));
        VFM_TRY(op_moe_combine(&a->d_xm_full, &dxe, NULL, &b->tok_slot)); /* the permute's backward */
    } else { /* the slots' gradients to the experts' ranks and the inputs' back (forward's a2as reversed) */
        Tensor xa = first_rows(&sc->xa, E * C);
        VFM_TRY(ep_all_to_all(m, &xa, &dye));
        VFM_TRY(experts_backward(&dh, &g2, &xa, &h, &w2, NULL, ep, E / ep, ACT_NONE));
        VFM_TRY(experts_backward(&dxe, &g1, &dh, &xe, &w1, &pre, ep, E / ep, s->act));
        VFM_TRY(ep_all_to_all(m, &dye, &dxe));
        VFM_TRY(op_moe_combine(&a->d_xm_full, &dye, NULL, &b->tok_slot));
    }
    double scale = m->loss_grad_scale > 0 ? m->loss_grad_scale : 1.0;
    float aux = s->routing == MOE_TOKEN_AUX_LOSS ? (float)(s->aux_coeff * scale) : 0.f;
    Tensor dlogits = first_rows(&sc->logits, R);
    VFM_TRY(op_moe_router_backward(&dlogits, &dw, &b->tok_slot, &b->probs, &b->lse, &b->masked, &a->pl.t2s, k, aux,
                                   (float)(s->z_coeff * scale)));
    Tensor dlogits_act = first_rows(&sc->logits_act, R);
    if (dlogits_act.dtype != DT_F32) VFM_TRY(op_convert(&dlogits_act, &dlogits));
    else dlogits_act = dlogits;
    VFM_TRY(linear_backward(m, &a->d_xm_full, 1, &dlogits_act, xm, &ml->router, NULL, ACT_NONE));
    return region_enter_backward(m, a);
}

vfm_status moe_carve_routing(const DiT *m, const MoeLayer *ml, ActCarver *cv, MoeActs *b, const Acts *a) {
    const MoeSpec *s = &ml->s;
    int64_t E = s->experts, R = a->R, C = capacity_bound(m, s, R, a->B);
    VFM_TRY(carve_f32(cv, &b->probs, R, E));
    VFM_TRY(carve_f32(cv, &b->masked, R, E));
    VFM_TRY(carve_f32(cv, &b->lse, R, 0));
    VFM_TRY(carve_as(cv, &b->slot_tok, DT_I32, E, C));
    VFM_TRY(carve_f32(cv, &b->slot_w, E, C));
    VFM_TRY(carve_as(cv, &b->tok_slot, DT_I32, R, E));
    VFM_TRY(carve_as(cv, &b->cu_tok, DT_I32, a->B + 2, 0)); /* + EP's empty last sample */
    VFM_TRY(carve_as(cv, &b->cu_cap, DT_I32, a->B + 2, 0));
    return carve_f32(cv, &b->losses, 2, 0);
}

vfm_status moe_carve(const DiT *m, const MoeLayer *ml, ActCarver *cv, MoeActs *b, const Acts *a) {
    const MoeSpec *s = &ml->s;
    int64_t E = s->experts, F = s->ffn, D = m->cfg.hidden, R = a->R, C = capacity_bound(m, s, R, a->B);
    VFM_TRY(carve_act(cv, &b->xe, E * C, D));
    VFM_TRY(carve_act(cv, &b->pre, E * C, F));
    VFM_TRY(carve_act(cv, &b->h, E * C, F));
    return carve_act(cv, &b->ye, E * C, D);
}

vfm_status moe_carve_scratch(const DiT *m, const MoeLayer *ml, ActCarver *cv, MoeScratch *s, const Acts *a) {
    const MoeSpec *p = &ml->s;
    int64_t E = p->experts, D = m->cfg.hidden, R = a->R, C = capacity_bound(m, p, R, a->B);
    VFM_TRY(carve_f32(cv, &s->logits, R, E));
    if (cv->act != DT_F32) VFM_TRY(carve_act(cv, &s->logits_act, R, E));
    else s->logits_act = s->logits;
    VFM_TRY(carve_f32(cv, &s->dw, E * C, 0));
    VFM_TRY(carve_act(cv, &s->dye, E * C, D));
    VFM_TRY(carve_act(cv, &s->dxe, E * C, D));
    if (ep_of(m) > 1) VFM_TRY(carve_act(cv, &s->xa, E * C, D));
    return carve_act(cv, &s->dh, E * C, p->ffn);
}

double moe_flops(const DiT *m, const MoeLayer *ml, const FlopShape *s) {
    const MoeSpec *p = &ml->s;
    double D = m->cfg.hidden, E = p->experts, per = s->samples > 0 ? s->tokens / s->samples : 0;
    double slots = s->samples * E * (double)moe_capacity(p, (int64_t)llround(per));
    return linear_flops(m, &ml->router, s->tokens) + 2.0 * slots * 2.0 * D * (double)p->ffn;
}
