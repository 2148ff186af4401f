/* The shared model inputs of a pack (see conditioning.h). */
#include "conditioning.h"

#include <stdlib.h>
#include <string.h>

typedef struct CondLayout {
    PackConditioning *c;
    int64_t L, d_text;
    int B;
    DType act;
} CondLayout;

static void cond_layout(Carver *k, void *ctx) {
    CondLayout *l = ctx;
    l->c->text = CARVE(k, l->act, l->L, l->d_text);
    l->c->fps = CARVE(k, DT_F32, l->B);
    l->c->labels = CARVE(k, DT_I32, l->B);
    l->c->cu_text_cond = CARVE(k, DT_I32, l->B + 1);
}

vfm_status pack_conditioning_build_on(PackConditioning *c, const Pack *p, const PackTensors *pt, DType act,
                                      const int *drop, const int32_t *class_row, ObjectiveWork *w) {
    memset(c, 0, sizeof *c);
    int64_t L = p->n_text;
    int B = p->n_samples;
    Device dev = pt->device;
    CondLayout cl = {c, L, p->text_dim, B, act};
    VFM_TRY(carve_slot(w, dev, OW_COND, cond_layout, &cl));
    c->tok2sample = pt->token_sample;
    c->pos = pt->token_pos;
    c->mask = pt->loss_mask;

    /* per sample on the host: fps, class rows, text lengths after dropping; then one copy each */
    void *hv;
    VFM_TRY(objective_work_host(w, (size_t)(3 * B + 1) * sizeof(float), &hv));
    float *fps = hv;
    int32_t *labels = (int32_t *)(fps + B), *cu = labels + B;
    int max_q = 0, max_kv = 0;
    cu[0] = 0;
    for (int i = 0; i < B; i++) {
        int dropped = drop && drop[i];
        int32_t len = dropped ? 1 : p->cu_text[i + 1] - p->cu_text[i];
        cu[i + 1] = cu[i] + len;
        fps[i] = p->samples[i].fps > 0 ? p->samples[i].fps : 30.0f;
        labels[i] = class_row ? class_row[i] : 0;
        if (p->samples[i].tokens > max_q) max_q = p->samples[i].tokens;
        if (len > max_kv) max_kv = len;
    }
    VFM_TRY(op_upload(&c->fps, fps)); /* on the ops' stream: no wait for the GPU inside the step */
    VFM_TRY(op_upload(&c->labels, labels));
    VFM_TRY(op_upload(&c->cu_text_cond, cu));
    /* the text in the activation dtype, a dropped prompt's first row zeroed (its length is 1) */
    VFM_TRY(op_convert(&c->text, &pt->text));
    for (int i = 0; i < B; i++) {
        if (!(drop && drop[i])) continue;
        size_t at = (size_t)p->cu_text_padded[i] * (size_t)p->text_dim * dtype_size(act);
        Tensor row = tensor_make((char *)c->text.data + at, act, dev, 1, (int64_t[]){p->text_dim});
        VFM_TRY(op_fill(&row, 0.0));
    }
    DiTInputs *in = &c->in;
    in->fps = &c->fps;
    in->text = &c->text;
    in->tok2sample = &c->tok2sample;
    in->pos = &c->pos;
    in->class_labels = class_row ? &c->labels : NULL;
    in->self_layout = (VarlenLayout){B, pt->cu_seqlens, pt->cu_seqlens_padded, pt->cu_seqlens, pt->cu_seqlens_padded,
                                     max_q, max_q};
    in->cross_layout = (VarlenLayout){B, pt->cu_seqlens, pt->cu_seqlens_padded, c->cu_text_cond, pt->cu_text_padded,
                                      max_q, max_kv};
    return VFM_OK;
}

vfm_status pack_conditioning_build(PackConditioning *c, const Pack *p, const int *drop, const int32_t *class_row) {
    ObjectiveWork *own = calloc(1, sizeof *own);
    if (!own) return vfm_fail(VFM_ERR_NOMEM, "conditioning");
    PackTensors pt;
    pack_tensors_view(&pt, p);
    vfm_status s = pack_conditioning_build_on(c, p, &pt, DT_F32, drop, class_row, own);
    c->own = own; /* kept even on failure: pack_conditioning_free releases it */
    return s;
}

void pack_conditioning_free(PackConditioning *c) {
    if (c->own) {
        objective_work_free(c->own);
        free(c->own);
    }
    c->own = NULL;
}
