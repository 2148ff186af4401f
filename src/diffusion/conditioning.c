/* The shared model inputs of a pack (see conditioning.h). */
#include "conditioning.h"

#include <stdlib.h>
#include <string.h>

vfm_status pack_conditioning_build(PackConditioning *c, const Pack *p, const int *drop, const int32_t *class_row) {
    memset(c, 0, sizeof *c);
    int64_t S = p->n_tokens, L = p->n_text;
    int B = p->n_samples;
    size_t floats = (size_t)(L * p->text_dim + 2 * B + 1);
    c->buf = calloc(floats, sizeof(float));
    c->cu_text_cond = calloc((size_t)B + 1, sizeof(int32_t));
    if (!c->buf || !c->cu_text_cond) return vfm_fail(VFM_ERR_NOMEM, "conditioning: %zu floats", floats);
    c->text = TF32(c->buf, L, p->text_dim);
    c->fps = TF32(c->buf + L * p->text_dim, B);
    /* labels: i32 in the same buffer (float and int32 have the same size) */
    c->labels = TI32((int32_t *)(c->buf + L * p->text_dim + B), B);
    c->tok2sample = TI32(p->token_sample, S);
    c->pos = TI32(p->token_pos, S, 3);
    c->mask = TF32(p->loss_mask, S);

    Tensor pack_text = TF32(p->text, L, p->text_dim);
    VFM_TRY(op_copy(&c->text, &pack_text));
    float *fps = c->fps.data;
    int32_t *labels = c->labels.data;
    int max_q = 0, max_kv = 0;
    for (int i = 0; i < B; i++) {
        int dropped = drop && drop[i];
        int32_t len = dropped ? 1 : p->cu_text[i + 1] - p->cu_text[i];
        if (dropped) {
            Tensor row = TF32((float *)c->text.data + (int64_t)p->cu_text_padded[i] * p->text_dim, p->text_dim);
            VFM_TRY(op_fill(&row, 0.0));
        }
        c->cu_text_cond[i + 1] = c->cu_text_cond[i] + len;
        fps[i] = p->samples[i].fps > 0 ? p->samples[i].fps : 30.0f;
        if (class_row) labels[i] = class_row[i];
        if (p->samples[i].tokens > max_q) max_q = p->samples[i].tokens;
        if (len > max_kv) max_kv = len;
    }
    DiTInputs *in = &c->in;
    in->fps = &c->fps;
    in->text = &c->text;
    in->tok2sample = &c->tok2sample;
    in->pos = &c->pos;
    in->class_labels = class_row ? &c->labels : NULL;
    in->self_layout = (VarlenLayout){B, TI32(p->cu_seqlens, B + 1), TI32(p->cu_seqlens_padded, B + 1),
                                     TI32(p->cu_seqlens, B + 1), TI32(p->cu_seqlens_padded, B + 1), max_q, max_q};
    in->cross_layout = (VarlenLayout){B, TI32(p->cu_seqlens, B + 1), TI32(p->cu_seqlens_padded, B + 1),
                                      TI32(c->cu_text_cond, B + 1), TI32(p->cu_text_padded, B + 1), max_q, max_kv};
    return VFM_OK;
}

void pack_conditioning_free(PackConditioning *c) {
    free(c->buf);
    free(c->cu_text_cond);
    c->buf = NULL;
    c->cu_text_cond = NULL;
}
