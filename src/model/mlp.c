/* The MLP layer (mlp.h). */
#include <stdio.h>

#include "model/dit_internal.h"

void mlp_add(MlpLayer *ml, ParamTable *t, const char *prefix, int64_t D, const MlpSpec *s) {
    LinearSpec in = s->in, out = s->out;
    in.tp_dim = 0, out.tp_dim = 1; /* column-parallel fc1, row-parallel fc2 */
    char name[128];
    param_table_set_group(t, DIT_GROUP_MLP);
    ml->act = s->act;
    snprintf(name, sizeof name, "%s.fc1", prefix);
    ml->fc1 = linear_add(t, name, s->ffn, D, in);
    snprintf(name, sizeof name, "%s.fc2", prefix);
    ml->fc2 = linear_add(t, name, D, s->ffn, out);
}

void mlp_handles(MlpLayer *ml, const HandleVisitor *v) { visit_linear(v, &ml->fc1), visit_linear(v, &ml->fc2); }

vfm_status mlp_forward(const DiT *m, const MlpLayer *ml, MlpActs *b, Acts *a, const Tensor *xm, Tensor *out) {
    Tensor xf;
    VFM_TRY(region_enter(m, a, xm, &xf));
    VFM_TRY(linear_forward(m, &b->h, &b->pre, &xf, &ml->fc1, ml->act));
    return region_exit(m, a, out, &b->h, &ml->fc2, 0);
}

vfm_status mlp_backward(const DiT *m, const MlpLayer *ml, const MlpActs *b, Acts *a, const Tensor *xm) {
    Tensor dpart, xf;
    VFM_TRY(region_exit_backward(m, a, &dpart));
    VFM_TRY(linear_backward(m, &a->d_ffn, 0, &dpart, &b->h, &ml->fc2, NULL, ACT_NONE));
    VFM_TRY(region_enter(m, a, xm, &xf));
    VFM_TRY(linear_backward(m, &a->d_xm_full, 0, &a->d_ffn, &xf, &ml->fc1, &b->pre, ml->act));
    return region_enter_backward(m, a);
}

vfm_status mlp_carve(const DiT *m, ActCarver *cv, MlpActs *b, const Acts *a) {
    VFM_TRY(carve_act(cv, &b->pre, a->R, m->ffn_local));
    return carve_act(cv, &b->h, a->R, m->ffn_local);
}

vfm_status mlp_carve_scratch(const DiT *m, ActCarver *cv, Tensor *d_h, const Acts *a) {
    return carve_act(cv, d_h, a->R, m->ffn_local);
}

double mlp_flops(const DiT *m, const MlpLayer *ml, const FlopShape *s) {
    return linear_flops(m, &ml->fc1, s->tokens) + linear_flops(m, &ml->fc2, s->tokens);
}
