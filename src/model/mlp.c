/* The MLP layer (mlp.h). */
#include <stdio.h>
#include <string.h>

#include "model/dit_internal.h"

void mlp_add(MlpLayer *ml, ParamTable *t, const char *prefix, int64_t D, const MlpSpec *s) {
    LinearSpec in = s->in, out = s->out;
    in.tp_dim = 0, out.tp_dim = 1; /* column-parallel fc1, row-parallel fc2 */
    char name[128];
    memset(ml, 0, sizeof *ml);
    if (s->moe.experts > 0) {
        MoeSpec ms = s->moe;
        ms.in = s->in, ms.out = s->out, ms.act = s->act, ms.swiglu = s->swiglu;
        if (ms.router.w_init == INIT_ZERO && ms.router.w_scale == 0) ms.router = s->in;
        ml->fc1 = ml->fc2 = LINEAR_NONE;
        moe_add(&ml->moe, t, prefix, D, &ms);
        return;
    }
    param_table_set_group(t, DIT_GROUP_MLP);
    ml->swiglu = s->swiglu;
    ml->act = s->act;
    snprintf(name, sizeof name, "%s.%s", prefix, s->fc1_name ? s->fc1_name : "fc1");
    ml->fc1 = linear_add(t, name, (s->swiglu ? 2 : 1) * s->ffn, D, in);
    if (s->swiglu) { /* gate and value rows split over TP each: a rank's fc1 is [g_t; u_t] */
        t->entries[ml->fc1.w].tp_parts = 2;
        if (ml->fc1.b >= 0) t->entries[ml->fc1.b].tp_parts = 2;
    }
    snprintf(name, sizeof name, "%s.%s", prefix, s->fc2_name ? s->fc2_name : "fc2");
    ml->fc2 = linear_add(t, name, D, s->ffn, out);
}

void mlp_handles(MlpLayer *ml, const HandleVisitor *v) {
    if (ml->moe.s.experts > 0) moe_handles(&ml->moe, v);
    else visit_linear(v, &ml->fc1), visit_linear(v, &ml->fc2);
}

vfm_status mlp_forward(const DiT *m, const MlpLayer *ml, MlpActs *b, Acts *a, const Tensor *xm, Tensor *out) {
    if (ml->moe.s.experts > 0) return moe_forward(m, &ml->moe, &b->moe, a, xm, out);
    Tensor xf;
    VFM_TRY(region_enter(m, a, xm, &xf));
    if (ml->swiglu) {
        VFM_TRY(linear_forward(m, &b->pre, NULL, &xf, &ml->fc1, ACT_NONE));
        VFM_TRY(op_swiglu_forward(&b->h, &b->pre));
    } else {
        VFM_TRY(linear_forward(m, &b->h, &b->pre, &xf, &ml->fc1, ml->act));
    }
    return region_exit(m, a, out, &b->h, &ml->fc2, 0);
}

vfm_status mlp_backward(const DiT *m, const MlpLayer *ml, const MlpActs *b, Acts *a, const Tensor *xm) {
    if (ml->moe.s.experts > 0) return moe_backward(m, &ml->moe, &b->moe, a, xm);
    MlpScratch *s = &a->mlp;
    Tensor dpart, xf;
    VFM_TRY(region_exit_backward(m, a, &dpart));
    VFM_TRY(linear_backward(m, &s->d_h, 0, &dpart, &b->h, &ml->fc2, NULL, ACT_NONE));
    VFM_TRY(region_enter(m, a, xm, &xf));
    if (ml->swiglu) {
        VFM_TRY(op_swiglu_backward(&s->d_pre, &s->d_h, &b->pre));
        VFM_TRY(linear_backward(m, &a->d_xm_full, 0, &s->d_pre, &xf, &ml->fc1, NULL, ACT_NONE));
    } else {
        VFM_TRY(linear_backward(m, &a->d_xm_full, 0, &s->d_h, &xf, &ml->fc1, &b->pre, ml->act));
    }
    return region_enter_backward(m, a);
}

vfm_status mlp_carve(const DiT *m, const MlpLayer *ml, ActCarver *cv, MlpActs *b, const Acts *a) {
    if (ml->moe.s.experts > 0) VFM_TRY(moe_carve_routing(m, &ml->moe, cv, &b->moe, a));
    return mlp_carve_rest(m, ml, cv, b, a);
}

vfm_status mlp_carve_rest(const DiT *m, const MlpLayer *ml, ActCarver *cv, MlpActs *b, const Acts *a) {
    if (ml->moe.s.experts > 0) return moe_carve(m, &ml->moe, cv, &b->moe, a);
    VFM_TRY(carve_act(cv, &b->pre, a->R, (ml->swiglu ? 2 : 1) * m->ffn_local));
    return carve_act(cv, &b->h, a->R, m->ffn_local);
}

vfm_status mlp_carve_scratch(const DiT *m, const MlpLayer *ml, ActCarver *cv, MlpScratch *s, const Acts *a) {
    if (ml->moe.s.experts > 0) return moe_carve_scratch(m, &ml->moe, cv, &s->moe, a);
    VFM_TRY(carve_act(cv, &s->d_h, a->R, m->ffn_local));
    return ml->swiglu ? carve_act(cv, &s->d_pre, a->R, 2 * m->ffn_local) : VFM_OK;
}

double mlp_flops(const DiT *m, const MlpLayer *ml, const FlopShape *s) {
    if (ml->moe.s.experts > 0) return moe_flops(m, &ml->moe, s);
    return linear_flops(m, &ml->fc1, s->tokens) + linear_flops(m, &ml->fc2, s->tokens);
}
