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
static int64_t capacity_bound(const MoeSpec *s, int64_t R, int B) {
    if (s->capacity_factor <= 0) return R;
    int k = s->routing == MOE_EXPERT_CHOICE ? 1 : s->topk;
    int64_t c = (int64_t)ceil((double)R * k * s->capacity_factor / s->experts) + B;
    return c < R ? c : R;
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

vfm_status moe_forward(const DiT *m, const MoeLayer *ml, MoeActs *b, Acts *a, const Tensor *xm, Tensor *out) {
    const MoeSpec *s = &ml->s;
    const Placement *pl = &a->pl;
    MoeScratch *sc = &a->mlp.moe;
    int64_t E = s->experts, F = s->ffn, R = a->R;
    int n = pl->n;
    /* the samples' rows and capacities (host offsets of the pack, made when it was placed) */
    const int32_t *pad = pl->cu_pad ? pl->cu_pad : pl->cu_in_pad; /* one rank: the caller's slots */
    int32_t cu_tok[n + 1], cu_cap[n + 1];
    cu_tok[0] = cu_cap[0] = 0;
    for (int i = 0; i < n; i++) {
        cu_tok[i + 1] = pad[i + 1];
        cu_cap[i + 1] = cu_cap[i] + (int32_t)moe_capacity(s, pl->cu_real[i + 1] - pl->cu_real[i]);
    }
    int64_t C = cu_cap[n];
    if (C > tensor_dim(&b->slot_tok, 1))
        return vfm_fail(VFM_ERR_INTERNAL, "moe: %lld slots per expert, %lld carved", (long long)C,
                        (long long)tensor_dim(&b->slot_tok, 1));
    b->C_used = C;
    Tensor cut = first_rows(&b->cu_tok, n + 1), cuc = first_rows(&b->cu_cap, n + 1);
    Tensor host_tok = TI32(cu_tok, n + 1), host_cap = TI32(cu_cap, n + 1);
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
    /* the experts over their slots, then the weighted combine */
    Tensor xe = first_rows(&b->xe, E * C), pre = first_rows(&b->pre, E * C), h = first_rows(&b->h, E * C);
    Tensor ye = first_rows(&b->ye, E * C), w1 = layer_param(m, ml->fc1), w2 = layer_param(m, ml->fc2);
    Tensor swf = tensor_make(sw.data, sw.dtype, sw.device, 1, (int64_t[]){E * C});
    VFM_TRY(op_moe_permute(&xe, xm, &st));
    VFM_TRY(op_grouped_linear_forward(&h, &pre, &xe, &w1, (int)E, s->act));
    VFM_TRY(op_grouped_linear_forward(&ye, NULL, &h, &w2, (int)E, ACT_NONE));
    (void)F;
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
    VFM_TRY(op_grouped_linear_backward(&dh, &g2, &dye, &h, &w2, NULL, (int)E, ACT_NONE, 0));
    VFM_TRY(op_grouped_linear_backward(&dxe, &g1, &dh, &xe, &w1, &pre, (int)E, s->act, 0));
    VFM_TRY(op_moe_combine(&a->d_xm_full, &dxe, NULL, &b->tok_slot)); /* the permute's backward */
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

vfm_status moe_carve(const DiT *m, const MoeLayer *ml, ActCarver *cv, MoeActs *b, const Acts *a) {
    const MoeSpec *s = &ml->s;
    int64_t E = s->experts, F = s->ffn, D = m->cfg.hidden, R = a->R, C = capacity_bound(s, R, a->B);
    VFM_TRY(carve_f32(cv, &b->probs, R, E));
    VFM_TRY(carve_f32(cv, &b->masked, R, E));
    VFM_TRY(carve_f32(cv, &b->lse, R, 0));
    VFM_TRY(carve_as(cv, &b->slot_tok, DT_I32, E, C));
    VFM_TRY(carve_f32(cv, &b->slot_w, E, C));
    VFM_TRY(carve_as(cv, &b->tok_slot, DT_I32, R, E));
    VFM_TRY(carve_act(cv, &b->xe, E * C, D));
    VFM_TRY(carve_act(cv, &b->pre, E * C, F));
    VFM_TRY(carve_act(cv, &b->h, E * C, F));
    VFM_TRY(carve_act(cv, &b->ye, E * C, D));
    VFM_TRY(carve_as(cv, &b->cu_tok, DT_I32, a->B + 1, 0));
    VFM_TRY(carve_as(cv, &b->cu_cap, DT_I32, a->B + 1, 0));
    return carve_f32(cv, &b->losses, 2, 0);
}

vfm_status moe_carve_scratch(const DiT *m, const MoeLayer *ml, ActCarver *cv, MoeScratch *s, const Acts *a) {
    const MoeSpec *p = &ml->s;
    int64_t E = p->experts, D = m->cfg.hidden, R = a->R, C = capacity_bound(p, R, a->B);
    VFM_TRY(carve_f32(cv, &s->logits, R, E));
    if (cv->act != DT_F32) VFM_TRY(carve_act(cv, &s->logits_act, R, E));
    else s->logits_act = s->logits;
    VFM_TRY(carve_f32(cv, &s->dw, E * C, 0));
    VFM_TRY(carve_act(cv, &s->dye, E * C, D));
    VFM_TRY(carve_act(cv, &s->dxe, E * C, D));
    return carve_act(cv, &s->dh, E * C, p->ffn);
}

double moe_flops(const DiT *m, const MoeLayer *ml, const FlopShape *s) {
    const MoeSpec *p = &ml->s;
    double D = m->cfg.hidden, E = p->experts, per = s->samples > 0 ? s->tokens / s->samples : 0;
    double slots = s->samples * E * (double)moe_capacity(p, (int64_t)llround(per));
    return linear_flops(m, &ml->router, s->tokens) + 2.0 * slots * 2.0 * D * (double)p->ffn;
}
