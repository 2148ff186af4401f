/* The adaLN modulation layer (modulation.h). */
#include <math.h>

#include "model/dit_internal.h"

void modulation_add_full(ModulationLayer *ml, ParamTable *t, const char *name, int64_t D, int n_chunks, int bias) {
    param_table_set_group(t, DIT_GROUP_ADALN);
    ml->n_chunks = n_chunks, ml->width = D;
    ml->down = LINEAR_NONE;
    ml->up = linear_add(t, name, n_chunks * D, D, linear_zeros(bias, REDUCE_TP_SP));
    ml->table = -1;
}

void modulation_add_table(ModulationLayer *ml, ParamTable *t, const char *name, int64_t D, int n_chunks) {
    param_table_set_group(t, DIT_GROUP_ADALN);
    ml->n_chunks = n_chunks, ml->width = D;
    ml->down = ml->up = LINEAR_NONE;
    ml->table = param_table_add(t, INIT_NORMAL, 1.0f / sqrtf((float)D), 3, (int64_t[]){1, n_chunks, D}, REDUCE_TP_SP,
                                -1, "%s", name);
}

void modulation_add_lora(ModulationLayer *ml, ParamTable *t, const char *down, const char *up, int64_t D, int n_chunks,
                         int64_t rank) {
    param_table_set_group(t, DIT_GROUP_ADALN);
    ml->n_chunks = n_chunks, ml->width = D;
    LinearSpec s = linear_torch_default(D, REDUCE_TP_SP);
    s.bias = 0;
    ml->down = linear_add(t, down, rank, D, s);
    ml->up = linear_add(t, up, n_chunks * D, rank, linear_zeros(0, REDUCE_TP_SP));
    ml->table = -1;
}

void modulation_handles(ModulationLayer *ml, const HandleVisitor *v) {
    visit_linear(v, &ml->down), visit_linear(v, &ml->up);
    visit_entry(v, &ml->table);
}

vfm_status modulation_forward(const DiT *m, const ModulationLayer *ml, ModActs *b, const CondActs *ca) {
    const Tensor *cond_silu = &ca->silu;
    if (ml->table >= 0) {
        VFM_TRY(vector_rows(m, &b->mod, ml->table, &ca->zeros));
        VFM_TRY(op_add(&b->mod, &b->mod, &ca->proj));
    } else if (ml->down.w >= 0) {
        VFM_TRY(linear_forward(m, &b->u, NULL, cond_silu, &ml->down, ACT_NONE));
        VFM_TRY(linear_forward(m, &b->mod, NULL, &b->u, &ml->up, ACT_NONE));
    } else {
        VFM_TRY(linear_forward(m, &b->mod, NULL, cond_silu, &ml->up, ACT_NONE));
    }
    for (int k = 0; k < ml->n_chunks; k++) VFM_TRY(op_columns_get(&b->chunk[k], &b->mod, k * ml->width));
    return VFM_OK;
}

vfm_status modulation_backward(const DiT *m, const ModulationLayer *ml, const ModActs *b, ModScratch *s, CondActs *ca) {
    const Tensor *cond_silu = &ca->silu;
    Tensor *d_cond_silu = &ca->d_silu;
    Tensor d_mod = TENSOR(s->d_mod.data, s->d_mod.dtype, s->d_mod.device, tensor_dim(cond_silu, 0), ml->n_chunks * ml->width);
    VFM_TRY(op_fill(&d_mod, 0.0));
    for (int k = 0; k < ml->n_chunks; k++) VFM_TRY(op_columns_add(&d_mod, &s->d_chunk[k], k * ml->width));
    if (ml->table >= 0) {
        VFM_TRY(vector_rows_backward(m, &d_mod, ml->table, &ca->zeros));
        return op_add(&ca->d_proj, &ca->d_proj, &d_mod);
    }
    if (ml->down.w < 0) return linear_backward(m, d_cond_silu, 1, &d_mod, cond_silu, &ml->up, NULL, ACT_NONE);
    VFM_TRY(linear_backward(m, &s->d_u, 0, &d_mod, &b->u, &ml->up, NULL, ACT_NONE));
    return linear_backward(m, d_cond_silu, 1, &s->d_u, cond_silu, &ml->down, NULL, ACT_NONE);
}

vfm_status modulation_carve(const ModulationLayer *ml, ActCarver *cv, ModActs *b, int samples) {
    if (ml->down.out > 0) VFM_TRY(carve_act(cv, &b->u, samples, ml->down.out));
    VFM_TRY(carve_act(cv, &b->mod, samples, ml->n_chunks * ml->width));
    for (int k = 0; k < ml->n_chunks; k++) VFM_TRY(carve_act(cv, &b->chunk[k], samples, ml->width));
    return VFM_OK;
}

vfm_status modulation_carve_scratch(const ModulationLayer *ml, ActCarver *cv, ModScratch *s, int samples) {
    int64_t nD = ml->n_chunks * ml->width, two = 2 * ml->width;
    VFM_TRY(carve_act(cv, &s->d_mod, samples, nD > two ? nD : two));
    for (int k = 0; k < ml->n_chunks; k++) VFM_TRY(carve_act(cv, &s->d_chunk[k], samples, ml->width));
    return ml->down.out > 0 ? carve_act(cv, &s->d_u, samples, ml->down.out) : VFM_OK;
}

double modulation_flops(const DiT *m, const ModulationLayer *ml, const FlopShape *s) {
    return linear_flops(m, &ml->down, s->samples) + linear_flops(m, &ml->up, s->samples);
}
