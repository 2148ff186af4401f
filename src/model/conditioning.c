/* The conditioning layer (conditioning.h). */
#include <stdlib.h>

#include "model/dit_internal.h"

void timestep_embedder_add(TimestepEmbedder *te, ParamTable *t, const char *l1, const char *l2, int freq_dim,
                           int64_t width, int flip, float shift, const LinearSpec *init) {
    param_table_set_group(t, DIT_GROUP_COND);
    te->freq_dim = freq_dim, te->flip = flip, te->shift = shift, te->width = width;
    LinearSpec s1 = init ? *init : linear_torch_default(freq_dim, 0), s2 = init ? *init : linear_torch_default(width, 0);
    s1.groups |= REDUCE_PP, s2.groups |= REDUCE_PP; /* every pipeline stage computes it */
    te->l1 = linear_add(t, l1, width, freq_dim, s1);
    te->l2 = linear_add(t, l2, width, width, s2);
}

void class_table_add(ConditioningLayer *cl, ParamTable *t, const char *name, int64_t rows, int64_t D, float std) {
    param_table_set_group(t, DIT_GROUP_COND);
    cl->has_classes = 1;
    cl->class_table = param_table_add(t, INIT_NORMAL, std, 2, (int64_t[]){rows, D}, REDUCE_PP, -1, "%s", name);
}

void cond_norm_add(ConditioningLayer *cl, ParamTable *t, const char *name, int64_t D) {
    param_table_set_group(t, DIT_GROUP_COND);
    cl->has_norm = 1;
    cl->norm_w = vector_add(t, INIT_ONE, D, REDUCE_PP, name);
}

void cond_proj_add(ConditioningLayer *cl, ParamTable *t, const char *name, int64_t D, int n_chunks) {
    param_table_set_group(t, DIT_GROUP_COND);
    cl->has_proj = 1;
    cl->proj = linear_add(t, name, n_chunks * D, D, linear_torch_default(D, REDUCE_PP));
}

/* Every rank holds the whole text; its gradient comes partial over the TP heads of the
 * cross-attentions (and over the pipeline stages): the weights' gradients sum over both. */
void text_mlp_add(ConditioningLayer *cl, ParamTable *t, const char *l1, const char *l2, int64_t d_text, int64_t D) {
    param_table_set_group(t, DIT_GROUP_COND);
    cl->has_text_mlp = 1;
    cl->text1 = linear_add(t, l1, D, d_text, linear_torch_default(d_text, REDUCE_PP | REDUCE_TP_HEADS));
    cl->text2 = linear_add(t, l2, D, D, linear_torch_default(D, REDUCE_PP | REDUCE_TP_HEADS));
}

void conditioning_handles(ConditioningLayer *cl, const HandleVisitor *v) {
    visit_linear(v, &cl->t.l1), visit_linear(v, &cl->t.l2);
    if (cl->has_proj) visit_linear(v, &cl->proj);
    if (cl->has_text_mlp) visit_linear(v, &cl->text1), visit_linear(v, &cl->text2);
    if (cl->has_fps) visit_linear(v, &cl->fps.l1), visit_linear(v, &cl->fps.l2);
    if (cl->has_classes) visit_entry(v, &cl->class_table);
    if (cl->has_norm) visit_entry(v, &cl->norm_w);
}

/* ---- the timestep embedder ------------------------------------------------------------------------ */

static vfm_status embedder_forward(const DiT *m, const TimestepEmbedder *te, EmbedderActs *a, const Tensor *t) {
    VFM_TRY(op_timestep_embedding_forward(&a->in, t, te->flip, te->shift, 10000.0f));
    VFM_TRY(linear_forward(m, &a->pre, NULL, &a->in, &te->l1, ACT_NONE));
    VFM_TRY(op_silu_forward(&a->h, &a->pre));
    return linear_forward(m, &a->emb, NULL, &a->h, &te->l2, ACT_NONE);
}

/* From d_emb = d(embedding); the scalar input gets no gradient. */
static vfm_status embedder_backward(const DiT *m, const TimestepEmbedder *te, EmbedderActs *a, Tensor *d_emb) {
    VFM_TRY(linear_backward(m, &a->d_h, 0, d_emb, &a->h, &te->l2, NULL, ACT_NONE));
    VFM_TRY(op_silu_backward(&a->d_h, &a->d_h, &a->pre));
    return linear_backward(m, NULL, 0, &a->d_h, &a->in, &te->l1, NULL, ACT_NONE);
}

/* own_d_emb: the embedding's gradient is its own tensor (not c's). */
static vfm_status embedder_carve(const TimestepEmbedder *te, ActCarver *cv, EmbedderActs *a, int B, int own_d_emb) {
    VFM_TRY(carve_act(cv, &a->in, B, te->freq_dim));
    VFM_TRY(carve_act(cv, &a->pre, B, te->width));
    VFM_TRY(carve_act(cv, &a->h, B, te->width));
    VFM_TRY(carve_act(cv, &a->emb, B, te->width));
    if (own_d_emb) VFM_TRY(carve_act(cv, &a->d_emb, B, te->width));
    return carve_act(cv, &a->d_h, B, te->width);
}

/* ---- c -------------------------------------------------------------------------------------------- */

/* Wan's parts: the row index zeros, the shared projection, the embedded text; the gradients the
 * blocks and the head add to start at zero. */
static vfm_status wan_parts_forward(const DiT *m, const ConditioningLayer *cl, CondActs *a, const DiTInputs *in) {
    if (a->zeros.data) {
        int32_t *host = calloc((size_t)tensor_numel(&a->zeros) + 1, sizeof *host);
        if (!host) return vfm_fail(VFM_ERR_NOMEM, "dit: %lld row indices", (long long)tensor_numel(&a->zeros));
        vfm_status s = op_upload(&a->zeros, host);
        free(host);
        VFM_TRY(s);
        VFM_TRY(op_fill(&a->d_c, 0.0));
    }
    if (cl->has_proj) {
        VFM_TRY(linear_forward(m, &a->proj, NULL, &a->silu, &cl->proj, ACT_NONE));
        VFM_TRY(op_fill(&a->d_proj, 0.0));
    }
    if (!cl->has_text_mlp) return VFM_OK;
    VFM_TRY(linear_forward(m, &a->text_h, &a->text_pre, in->text, &cl->text1, ACT_GELU_TANH));
    VFM_TRY(linear_forward(m, &a->text_emb, NULL, &a->text_h, &cl->text2, ACT_NONE));
    return op_fill(&a->d_text, 0.0);
}

vfm_status conditioning_forward(const DiT *m, const ConditioningLayer *cl, CondActs *a, const DiTInputs *in) {
    VFM_TRY(embedder_forward(m, &cl->t, &a->t, in->c_noise));
    VFM_TRY(op_copy(&a->raw, &a->t.emb));
    if (cl->has_fps) {
        VFM_TRY(embedder_forward(m, &cl->fps, &a->fps, in->fps));
        VFM_TRY(op_columns_add(&a->raw, &a->fps.emb, 0));
    }
    if (cl->has_classes) {
        Tensor table = layer_param(m, cl->class_table);
        VFM_TRY(op_embedding_forward(&a->y_emb, &table, in->class_labels));
        VFM_TRY(op_add(&a->raw, &a->raw, &a->y_emb));
    }
    if (cl->has_norm) {
        Tensor w = layer_param(m, cl->norm_w);
        VFM_TRY(op_rmsnorm_forward(&a->cond, &a->rstd, &a->raw, &w, 1e-6f));
    }
    VFM_TRY(op_silu_forward(&a->silu, &a->cond));
    return wan_parts_forward(m, cl, a, in);
}

vfm_status conditioning_backward(const DiT *m, const ConditioningLayer *cl, CondActs *a, const DiTInputs *in) {
    if (cl->has_proj) VFM_TRY(linear_backward(m, &a->d_silu, 1, &a->d_proj, &a->silu, &cl->proj, NULL, ACT_NONE));
    if (cl->has_text_mlp) {
        VFM_TRY(linear_backward(m, &a->d_text_h, 0, &a->d_text, &a->text_h, &cl->text2, NULL, ACT_NONE));
        VFM_TRY(linear_backward(m, NULL, 0, &a->d_text_h, in->text, &cl->text1, &a->text_pre, ACT_GELU_TANH));
    }
    VFM_TRY(op_silu_backward(&a->d_cond, &a->d_silu, &a->cond));
    if (a->zeros.data) VFM_TRY(op_add(&a->d_cond, &a->d_cond, &a->d_c));
    if (cl->has_norm) {
        Tensor w = layer_param(m, cl->norm_w), dw = layer_grad(m, cl->norm_w);
        VFM_TRY(op_rmsnorm_backward(&a->d_raw, &dw, &a->d_cond, &a->raw, &a->rstd, &w));
    }
    VFM_TRY(embedder_backward(m, &cl->t, &a->t, &a->d_raw));
    if (cl->has_fps) {
        VFM_TRY(op_columns_get(&a->fps.d_emb, &a->d_raw, 0));
        VFM_TRY(embedder_backward(m, &cl->fps, &a->fps, &a->fps.d_emb));
    }
    if (cl->has_classes) {
        Tensor dtable = layer_grad(m, cl->class_table);
        VFM_TRY(op_embedding_backward(&dtable, &a->d_raw, in->class_labels));
    }
    return VFM_OK;
}

/* Wan's parts (conditioning.h): zeros and d_c whenever a table reads them, proj, the text MLP's. */
static vfm_status wan_parts_carve(const ConditioningLayer *cl, ActCarver *cv, CondActs *a, int64_t D, int B,
                                  int64_t L) {
    if (!cl->has_proj) return VFM_OK;
    VFM_TRY(carve_as(cv, &a->zeros, DT_I32, B, 0));
    VFM_TRY(carve_act(cv, &a->d_c, B, D));
    int64_t nD = cl->proj.out;
    VFM_TRY(carve_act(cv, &a->proj, B, nD));
    VFM_TRY(carve_act(cv, &a->d_proj, B, nD));
    if (!cl->has_text_mlp) return VFM_OK;
    VFM_TRY(carve_act(cv, &a->text_pre, L, D));
    VFM_TRY(carve_act(cv, &a->text_h, L, D));
    VFM_TRY(carve_act(cv, &a->text_emb, L, D));
    VFM_TRY(carve_act(cv, &a->d_text, L, D));
    return carve_act(cv, &a->d_text_h, L, D);
}

vfm_status conditioning_carve(const ConditioningLayer *cl, ActCarver *cv, CondActs *a, int64_t D, int B, int64_t L) {
    VFM_TRY(embedder_carve(&cl->t, cv, &a->t, B, 0));
    if (cl->has_fps) VFM_TRY(embedder_carve(&cl->fps, cv, &a->fps, B, 1));
    if (cl->has_classes) VFM_TRY(carve_act(cv, &a->y_emb, B, D));
    VFM_TRY(carve_act(cv, &a->raw, B, D));
    if (cl->has_norm) {
        VFM_TRY(carve_f32(cv, &a->rstd, B, 0));
        VFM_TRY(carve_act(cv, &a->cond, B, D));
        VFM_TRY(carve_act(cv, &a->d_raw, B, D));
    } else {
        a->cond = a->raw;
    }
    VFM_TRY(carve_act(cv, &a->silu, B, D));
    VFM_TRY(carve_act(cv, &a->d_silu, B, D));
    VFM_TRY(carve_act(cv, &a->d_cond, B, D));
    if (!cl->has_norm) a->d_raw = a->d_cond;
    return wan_parts_carve(cl, cv, a, D, B, L);
}

double conditioning_flops(const DiT *m, const ConditioningLayer *cl, const FlopShape *s) {
    double f = linear_flops(m, &cl->t.l1, s->samples) + linear_flops(m, &cl->t.l2, s->samples);
    if (cl->has_fps) f += linear_flops(m, &cl->fps.l1, s->samples) + linear_flops(m, &cl->fps.l2, s->samples);
    if (cl->has_proj) f += linear_flops(m, &cl->proj, s->samples);
    if (cl->has_text_mlp) f += linear_flops(m, &cl->text1, s->text) + linear_flops(m, &cl->text2, s->text);
    return f;
}
