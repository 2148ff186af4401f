/* The output head (head.h). */
#include <math.h>

#include "model/dit_internal.h"

enum { SHIFT = 0, SCALE = 1 };

void head_add_linear(FinalLayer *hl, ParamTable *t, const char *name, int64_t D, int64_t out) {
    param_table_set_group(t, DIT_GROUP_FINAL);
    hl->adaln = 0;
    hl->ada = LINEAR_NONE;
    hl->out = linear_add(t, name, out, D, linear_torch_default(D, 0));
    hl->table = -1;
}

void head_add_adaln(FinalLayer *hl, ParamTable *t, const char *linear, const char *ada, int64_t D, int64_t out,
                    float eps) {
    param_table_set_group(t, DIT_GROUP_FINAL);
    hl->adaln = 1;
    hl->norm_eps = eps;
    hl->out = linear_add(t, linear, out, D, linear_zeros(1, 0));
    hl->ada = linear_add(t, ada, 2 * D, D, linear_zeros(1, REDUCE_TP_SP));
    hl->table = -1;
}

void head_add_table(FinalLayer *hl, ParamTable *t, const char *linear, const char *table, int64_t D, int64_t out,
                    float eps) {
    param_table_set_group(t, DIT_GROUP_FINAL);
    hl->adaln = 1;
    hl->norm_eps = eps;
    hl->ada = LINEAR_NONE;
    hl->out = linear_add(t, linear, out, D, linear_torch_default(D, 0));
    hl->table = param_table_add(t, INIT_NORMAL, 1.0f / sqrtf((float)D), 3, (int64_t[]){1, 2, D}, REDUCE_TP_SP, -1,
                                "%s", table);
}

void head_handles(FinalLayer *hl, const HandleVisitor *v) {
    visit_linear(v, &hl->ada), visit_linear(v, &hl->out);
    visit_entry(v, &hl->table);
}

vfm_status head_forward(const DiT *m, const FinalLayer *hl, HeadActs *b, const Tensor *h, const CondActs *ca,
                        const Tensor *t2s, Tensor *out) {
    if (!hl->adaln) return linear_forward(m, out, NULL, h, &hl->out, ACT_NONE);
    if (hl->table >= 0) VFM_TRY(vector_rows(m, &b->mod, hl->table, &ca->zeros));
    else VFM_TRY(linear_forward(m, &b->mod, NULL, &ca->silu, &hl->ada, ACT_NONE));
    VFM_TRY(op_columns_get(&b->shift, &b->mod, 0));
    VFM_TRY(op_columns_get(&b->scale, &b->mod, tensor_dim(h, -1)));
    if (hl->table >= 0) {
        VFM_TRY(op_add(&b->shift, &b->shift, &ca->cond));
        VFM_TRY(op_add(&b->scale, &b->scale, &ca->cond));
    }
    VFM_TRY(op_layernorm_modulate_forward(&b->xm, &b->mean, &b->rstd, h, &b->shift, &b->scale, t2s, hl->norm_eps));
    return linear_forward(m, out, NULL, &b->xm, &hl->out, ACT_NONE);
}

vfm_status head_backward(const DiT *m, const FinalLayer *hl, const HeadActs *b, ModScratch *s, const Tensor *h,
                         CondActs *ca, const Tensor *t2s, const Tensor *dout, Tensor *d_xm, Tensor *d_h) {
    const Tensor *cond_silu = &ca->silu;
    Tensor *d_cond_silu = &ca->d_silu;
    Tensor dy = *dout; /* linear_backward with ACT_NONE leaves dy untouched */
    if (!hl->adaln) {
        VFM_TRY(linear_backward(m, d_h, 0, &dy, h, &hl->out, NULL, ACT_NONE));
        return op_fill(d_cond_silu, 0.0);
    }
    int64_t D = tensor_dim(h, -1);
    Tensor d_mod = TENSOR(s->d_mod.data, s->d_mod.dtype, s->d_mod.device, tensor_dim(cond_silu, 0), 2 * D);
    VFM_TRY(linear_backward(m, d_xm, 0, &dy, &b->xm, &hl->out, NULL, ACT_NONE));
    VFM_TRY(op_fill(d_h, 0.0));
    VFM_TRY(op_fill(&s->d_chunk[SHIFT], 0.0));
    VFM_TRY(op_fill(&s->d_chunk[SCALE], 0.0));
    VFM_TRY(op_layernorm_modulate_backward(d_h, &s->d_chunk[SHIFT], &s->d_chunk[SCALE], d_xm, h, &b->mean, &b->rstd,
                                           &b->scale, t2s));
    VFM_TRY(op_fill(&d_mod, 0.0));
    VFM_TRY(op_columns_add(&d_mod, &s->d_chunk[SHIFT], 0));
    VFM_TRY(op_columns_add(&d_mod, &s->d_chunk[SCALE], D));
    if (hl->table < 0) return linear_backward(m, d_cond_silu, 0, &d_mod, cond_silu, &hl->ada, NULL, ACT_NONE);
    VFM_TRY(vector_rows_backward(m, &d_mod, hl->table, &ca->zeros));
    VFM_TRY(op_add(&ca->d_c, &ca->d_c, &s->d_chunk[SHIFT]));
    VFM_TRY(op_add(&ca->d_c, &ca->d_c, &s->d_chunk[SCALE]));
    return op_fill(d_cond_silu, 0.0);
}

vfm_status head_carve(const FinalLayer *hl, ActCarver *cv, HeadActs *b, int64_t D, int64_t rows, int B) {
    if (!hl->adaln) return VFM_OK;
    VFM_TRY(carve_act(cv, &b->mod, B, 2 * D));
    VFM_TRY(carve_act(cv, &b->shift, B, D));
    VFM_TRY(carve_act(cv, &b->scale, B, D));
    VFM_TRY(carve_f32(cv, &b->mean, rows, 0));
    VFM_TRY(carve_f32(cv, &b->rstd, rows, 0));
    return carve_act(cv, &b->xm, rows, D);
}

double head_flops(const DiT *m, const FinalLayer *hl, const FlopShape *s) {
    return linear_flops(m, &hl->out, s->tokens) + linear_flops(m, &hl->ada, s->samples);
}
