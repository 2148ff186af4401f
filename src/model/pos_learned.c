/* The learned factorized 3-D position (pos_learned.h). */
#include <stdio.h>

#include "model/dit_internal.h"

static const char *const AXIS[3] = {"t", "h", "w"};
static const char *const KEY[3] = {"model.max_frames / model.patch_temporal", "model.max_img_h / model.patch_spatial",
                                   "model.max_img_w / model.patch_spatial"};

void pos_learned_add(PosLearnedLayer *pl, ParamTable *t, const char *prefix, const int rows[3], int64_t D, float std) {
    param_table_set_group(t, DIT_GROUP_PATCH);
    pl->on = 1;
    for (int k = 0; k < 3; k++) {
        pl->rows[k] = rows[k];
        pl->tab[k] = param_table_add(t, INIT_NORMAL, std, 2, (int64_t[]){rows[k], D}, REDUCE_PP, -1, "%s.emb_%s.weight",
                                     prefix, AXIS[k]);
    }
}

void pos_learned_handles(PosLearnedLayer *pl, const HandleVisitor *v) {
    if (!pl->on) return;
    for (int k = 0; k < 3; k++) visit_entry(v, &pl->tab[k]);
}

vfm_status pos_learned_check(const PosLearnedLayer *pl, const DiTInputs *in) {
    if (!pl->on || in->pos->device != DEV_CPU) return VFM_OK;
    const int32_t *pos = in->pos->data, *t2s = in->tok2sample->data;
    for (int64_t s = 0; s < tensor_dim(in->pos, 0); s++) {
        if (t2s[s] < 0) continue;
        for (int k = 0; k < 3; k++)
            if (pos[3 * s + k] < 0 || pos[3 * s + k] >= pl->rows[k])
                return vfm_fail(VFM_ERR_USAGE, "moviegen: sample %d of the pack reaches %s = %d, but the learned "
                                "position has %lld %s rows (%s): raise the key or crop the data", t2s[s], AXIS[k],
                                pos[3 * s + k], (long long)pl->rows[k], AXIS[k], KEY[k]);
    }
    return VFM_OK;
}

vfm_status pos_learned_forward(const DiT *m, const PosLearnedLayer *pl, PosActs *a, const Tensor *pos,
                               const Tensor *t2s) {
    if (!pl->on) return VFM_OK;
    Tensor et = layer_param(m, pl->tab[0]), eh = layer_param(m, pl->tab[1]), ew = layer_param(m, pl->tab[2]);
    return op_pos_embed_learned_forward(&a->pe, &et, &eh, &ew, pos, t2s);
}

vfm_status pos_learned_backward_begin(const PosLearnedLayer *pl, PosActs *a) {
    return pl->on ? op_fill(&a->d_pe, 0.0) : VFM_OK;
}

vfm_status pos_learned_backward(const DiT *m, const PosLearnedLayer *pl, PosActs *a, const Tensor *pos,
                                const Tensor *t2s) {
    if (!pl->on) return VFM_OK;
    Tensor dt = layer_grad(m, pl->tab[0]), dh = layer_grad(m, pl->tab[1]), dw = layer_grad(m, pl->tab[2]);
    return op_pos_embed_learned_backward(&dt, &dh, &dw, &a->d_pe, pos, t2s);
}

vfm_status pos_learned_carve(const PosLearnedLayer *pl, ActCarver *cv, PosActs *a, int64_t rows, int64_t D) {
    if (!pl->on) return VFM_OK;
    VFM_TRY(carve_act(cv, &a->pe, rows, D));
    return carve_act(cv, &a->d_pe, rows, D);
}
