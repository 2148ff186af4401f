/* EDM loss over a pack (see edm.h). */
#include "edm.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/philox.h"

float edm_draw_sigma(const EdmConfig *e, uint32_t step, uint64_t uid) {
    float z = philox_normal_at(e->seed, RNG_STREAM_SIGMA, step, uid, 0);
    return expf(e->p_mean + e->p_std * z);
}

int edm_draw_cfg_drop(const EdmConfig *e, uint32_t step, uint64_t uid) {
    if (e->cfg_dropout <= 0) return 0;
    return philox_uniform_at(e->seed, RNG_STREAM_CFG, step, uid, 0) < e->cfg_dropout;
}

vfm_status edm_pack_noise(float *noise, const Pack *pack, const DiTConfig *mc, uint64_t seed, uint32_t stream,
                          uint32_t step) {
    int d = pack->token_dim;
    memset(noise, 0, (size_t)(pack->n_tokens * d) * sizeof(float));
    for (int i = 0; i < pack->n_samples; i++) {
        const PackSample *s = &pack->samples[i];
        const int32_t *ls = s->latent_shape;
        int64_t n = (int64_t)ls[0] * ls[1] * ls[2] * ls[3];
        float *canon = malloc((size_t)n * sizeof(float));
        if (!canon) return vfm_fail(VFM_ERR_NOMEM, "edm: noise for %s", s->source);
        Tensor c = TF32(canon, ls[0], ls[1], ls[2], ls[3]);
        Tensor rows = TF32(noise + (int64_t)pack->cu_seqlens_padded[i] * d, s->tokens, d);
        vfm_status st = op_randn_fill(&c, seed, stream, step, s->uid, 0, 1.0f);
        if (st == VFM_OK) st = op_patchify(&rows, &c, mc->patch_temporal, mc->patch_spatial, mc->patch_spatial);
        free(canon);
        VFM_TRY(st);
    }
    return VFM_OK;
}

/* Working tensors of one step; freed by edm_work_free. */
typedef struct EdmWork {
    float *buf;
    Tensor x0, noise, x_t, net_in, F, denoised, d_denoised, dF; /* [S, C] */
    Tensor sigma, c_skip, c_out, c_in, c_noise, weight, fps;     /* [B] */
    Tensor loss, sample_sum, sample_count;                        /* [1], [B], [B] */
    Tensor text;                                                  /* [L, d_text] conditioning copy */
    int32_t *cu_text_cond;                                        /* [B+1] */
    Tensor tok2sample, pos, mask, class_row;
    DiTInputs in;
} EdmWork;

/* Draws the per-sample σ, CFG coins and noise of a step (design §3 keying). */
static vfm_status edm_draw(const EdmConfig *e, const DiTConfig *mc, const Pack *p, uint32_t step, EdmDraws *d) {
    int B = p->n_samples;
    d->sigma = malloc((size_t)B * sizeof(float));
    d->drop = malloc((size_t)B * sizeof(int));
    d->noise = malloc((size_t)(p->n_tokens * p->token_dim) * sizeof(float));
    if (!d->sigma || !d->drop || !d->noise) return vfm_fail(VFM_ERR_NOMEM, "edm: draws for %d samples", B);
    for (int i = 0; i < B; i++) {
        uint64_t key_uid = e->sigma_per_pack ? p->samples[0].uid : p->samples[i].uid;
        d->sigma[i] = edm_draw_sigma(e, step, key_uid);
        d->drop[i] = edm_draw_cfg_drop(e, step, key_uid);
    }
    if (mc->num_classes > 0) { /* the class label's own CFG coin: element 1 of the CFG stream */
        d->class_row = malloc((size_t)B * sizeof(int32_t));
        if (!d->class_row) return vfm_fail(VFM_ERR_NOMEM, "edm: class labels of %d samples", B);
        for (int i = 0; i < B; i++) {
            uint64_t key_uid = e->sigma_per_pack ? p->samples[0].uid : p->samples[i].uid;
            int drop = philox_uniform_at(e->seed, RNG_STREAM_CFG, step, key_uid, 1) < mc->class_dropout_prob;
            d->class_row[i] = dit_class_row(mc, p->samples[i].class_label, drop);
            if (d->class_row[i] < 0)
                return vfm_fail(VFM_ERR_USAGE, "%s: class label %d does not fit model.num_classes=%d (an unlabelled "
                                "sample needs the null class: model.class_dropout_prob > 0)", p->samples[i].source,
                                p->samples[i].class_label, mc->num_classes);
        }
    }
    return edm_pack_noise(d->noise, p, mc, e->seed, RNG_STREAM_NOISE, step);
}

static void edm_draws_free(EdmDraws *d) {
    free(d->sigma);
    free(d->drop);
    free(d->noise);
    free(d->class_row);
}

static vfm_status edm_work_build(EdmWork *w, DiT *model, float sigma_data, const Pack *p, const EdmDraws *draws,
                                 EdmStepResult *res) {
    memset(w, 0, sizeof *w);
    int64_t S = p->n_tokens, L = p->n_text, C = p->token_dim;
    int B = p->n_samples;
    if (dit_out_dim(&model->cfg) != C)
        return vfm_fail(VFM_ERR_USAGE, "EDM needs out_channels == in_channels (model gives %d values per token, data %lld)",
                        dit_out_dim(&model->cfg), (long long)C);
    size_t floats = (size_t)(8 * S * C + 10 * B + 1 + L * p->text_dim);
    w->buf = calloc(floats, sizeof(float));
    w->cu_text_cond = calloc((size_t)B + 1, sizeof(int32_t));
    if (!w->buf || !w->cu_text_cond) return vfm_fail(VFM_ERR_NOMEM, "edm: %zu floats of working memory", floats);
    float *f = w->buf;
#define TAKE2(t, r, c) (t = TF32(f, r, c), f += (r) * (c))
#define TAKE1(t, n) (t = TF32(f, n), f += (n))
    TAKE2(w->x0, S, C); TAKE2(w->noise, S, C); TAKE2(w->x_t, S, C); TAKE2(w->net_in, S, C);
    TAKE2(w->F, S, C); TAKE2(w->denoised, S, C); TAKE2(w->d_denoised, S, C); TAKE2(w->dF, S, C);
    TAKE1(w->sigma, B); TAKE1(w->c_skip, B); TAKE1(w->c_out, B); TAKE1(w->c_in, B); TAKE1(w->c_noise, B);
    TAKE1(w->weight, B); TAKE1(w->fps, B); TAKE1(w->loss, 1); TAKE1(w->sample_sum, B); TAKE1(w->sample_count, B);
    TAKE2(w->text, L, p->text_dim);
#undef TAKE1
#undef TAKE2
    w->tok2sample = TI32(p->token_sample, S);
    w->pos = TI32(p->token_pos, S, 3);
    w->mask = TF32(p->loss_mask, S);

    /* per-sample draws: σ, the CFG coin, fps; the conditioning text */
    float *sigma = w->sigma.data, *fps = w->fps.data;
    Tensor pack_text = TF32(p->text, L, p->text_dim);
    VFM_TRY(op_copy(&w->text, &pack_text));
    for (int i = 0; i < B; i++) {
        sigma[i] = draws->sigma[i];
        int drop = draws->drop[i];
        int32_t len = drop ? 1 : p->cu_text[i + 1] - p->cu_text[i];
        if (drop) {
            Tensor row = TF32((float *)w->text.data + (int64_t)p->cu_text_padded[i] * p->text_dim, p->text_dim);
            VFM_TRY(op_fill(&row, 0.0));
        }
        w->cu_text_cond[i + 1] = w->cu_text_cond[i] + len;
        fps[i] = p->samples[i].fps > 0 ? p->samples[i].fps : 30.0f;
        if (res->sigma) res->sigma[i] = sigma[i];
        if (res->dropped) res->dropped[i] = drop;
    }

    /* x0 = σ_data·latent; ε; preconditioning; x_t and the network input */
    Tensor latent = TF32(p->tokens, S, C);
    VFM_TRY(op_copy(&w->x0, &latent));
    VFM_TRY(op_scale(&w->x0, sigma_data));
    Tensor noise = TF32(draws->noise, S, C);
    VFM_TRY(op_copy(&w->noise, &noise));
    VFM_TRY(op_edm_precondition(&w->c_skip, &w->c_out, &w->c_in, &w->c_noise, &w->weight, &w->sigma, sigma_data));
    VFM_TRY(op_edm_add_noise(&w->x_t, &w->net_in, &w->x0, &w->noise, &w->sigma, &w->c_in, &w->tok2sample));

    int max_q = 0, max_kv = 0;
    for (int i = 0; i < B; i++) {
        if (p->samples[i].tokens > max_q) max_q = p->samples[i].tokens;
        int32_t kv = w->cu_text_cond[i + 1] - w->cu_text_cond[i];
        if (kv > max_kv) max_kv = kv;
    }
    DiTInputs *in = &w->in;
    in->x = &w->net_in;
    in->c_noise = &w->c_noise;
    in->fps = &w->fps;
    in->text = &w->text;
    in->tok2sample = &w->tok2sample;
    if (draws->class_row) w->class_row = TI32(draws->class_row, B);
    in->class_labels = draws->class_row ? &w->class_row : NULL;
    in->pos = &w->pos;
    in->self_layout = (VarlenLayout){B, TI32(p->cu_seqlens, B + 1), TI32(p->cu_seqlens_padded, B + 1),
                                     TI32(p->cu_seqlens, B + 1), TI32(p->cu_seqlens_padded, B + 1), max_q, max_q};
    in->cross_layout = (VarlenLayout){B, TI32(p->cu_seqlens, B + 1), TI32(p->cu_seqlens_padded, B + 1),
                                      TI32(w->cu_text_cond, B + 1), TI32(p->cu_text_padded, B + 1), max_q, max_kv};
    return VFM_OK;
}

static void edm_work_free(EdmWork *w) {
    free(w->buf);
    free(w->cu_text_cond);
}

static vfm_status edm_forward_loss(DiT *model, const Pack *p, EdmWork *w, EdmStepResult *res) {
    VFM_TRY(dit_reserve(model, p->n_tokens, p->n_text, p->n_samples));
    VFM_TRY(dit_forward(model, &w->in, &w->F));
    VFM_TRY(op_edm_denoise(&w->denoised, &w->x_t, &w->F, &w->c_skip, &w->c_out, &w->tok2sample));
    VFM_TRY(op_weighted_mse_forward(&w->loss, &w->sample_sum, &w->sample_count, &w->denoised, &w->x0, &w->weight,
                                    &w->mask, &w->tok2sample));
    res->loss = ((float *)w->loss.data)[0];
    res->n_samples = p->n_samples;
    if (res->sample_loss) {
        const float *sum = w->sample_sum.data, *cnt = w->sample_count.data;
        for (int i = 0; i < p->n_samples; i++) res->sample_loss[i] = cnt[i] > 0 ? sum[i] / cnt[i] : 0.0;
    }
    return VFM_OK;
}

vfm_status edm_loss_and_grad_given(DiT *model, float sigma_data, const Pack *p, const EdmDraws *draws,
                                   double grad_scale, EdmStepResult *res) {
    EdmWork w;
    vfm_status s = edm_work_build(&w, model, sigma_data, p, draws, res);
    if (s == VFM_OK) s = edm_forward_loss(model, p, &w, res);
    if (s == VFM_OK)
        s = op_weighted_mse_backward(&w.d_denoised, grad_scale, &w.denoised, &w.x0, &w.weight, &w.mask, &w.tok2sample);
    if (s == VFM_OK) s = op_edm_denoise_backward(&w.dF, &w.d_denoised, &w.c_out, &w.tok2sample);
    if (s == VFM_OK) s = dit_backward(model, &w.in, &w.dF);
    if (s == VFM_OK && res->F) {
        Tensor out = TF32(res->F, p->n_tokens, p->token_dim);
        s = op_copy(&out, &w.F);
    }
    edm_work_free(&w);
    return s;
}

vfm_status edm_loss_given(DiT *model, float sigma_data, const Pack *p, const EdmDraws *draws, EdmStepResult *res) {
    EdmWork w;
    vfm_status s = edm_work_build(&w, model, sigma_data, p, draws, res);
    if (s == VFM_OK) s = edm_forward_loss(model, p, &w, res);
    if (s == VFM_OK && res->F) {
        Tensor out = TF32(res->F, p->n_tokens, p->token_dim);
        s = op_copy(&out, &w.F);
    }
    edm_work_free(&w);
    return s;
}

vfm_status edm_loss_and_grad(DiT *model, const EdmConfig *e, const Pack *p, uint32_t step, double grad_scale,
                             EdmStepResult *res) {
    EdmDraws d = {0};
    vfm_status s = edm_draw(e, &model->cfg, p, step, &d);
    if (s == VFM_OK) s = edm_loss_and_grad_given(model, e->sigma_data, p, &d, grad_scale, res);
    edm_draws_free(&d);
    return s;
}

vfm_status edm_loss(DiT *model, const EdmConfig *e, const Pack *p, uint32_t step, EdmStepResult *res) {
    EdmDraws d = {0};
    vfm_status s = edm_draw(e, &model->cfg, p, step, &d);
    if (s == VFM_OK) s = edm_loss_given(model, e->sigma_data, p, &d, res);
    edm_draws_free(&d);
    return s;
}
