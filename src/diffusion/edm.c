/* EDM loss over a pack (see edm.h). */
#include "edm.h"

#include <stdlib.h>
#include <string.h>

#include "diffusion/conditioning.h"

/* Working tensors of one step; freed by edm_work_free. */
typedef struct EdmWork {
    float *buf;
    Tensor x0, noise, x_t, net_in, F, denoised, d_denoised, dF; /* [S, C] */
    Tensor sigma, c_skip, c_out, c_in, c_noise, weight;          /* [B] */
    Tensor loss, sample_sum, sample_count;                        /* [1], [B], [B] */
    PackConditioning cond;
} EdmWork;

static vfm_status edm_work_build(EdmWork *w, DiT *model, float sigma_data, const Pack *p, const EdmDraws *draws,
                                 EdmStepResult *res) {
    memset(w, 0, sizeof *w);
    int64_t S = p->n_tokens, C = p->token_dim;
    int B = p->n_samples;
    if (dit_out_dim(&model->cfg) != C)
        return vfm_fail(VFM_ERR_USAGE, "EDM needs out_channels == in_channels (model gives %d values per token, data %lld)",
                        dit_out_dim(&model->cfg), (long long)C);
    size_t floats = (size_t)(8 * S * C + 9 * B + 1);
    w->buf = calloc(floats, sizeof(float));
    if (!w->buf) return vfm_fail(VFM_ERR_NOMEM, "edm: %zu floats of working memory", floats);
    float *f = w->buf;
#define TAKE2(t, r, c) (t = TF32(f, r, c), f += (r) * (c))
#define TAKE1(t, n) (t = TF32(f, n), f += (n))
    TAKE2(w->x0, S, C); TAKE2(w->noise, S, C); TAKE2(w->x_t, S, C); TAKE2(w->net_in, S, C);
    TAKE2(w->F, S, C); TAKE2(w->denoised, S, C); TAKE2(w->d_denoised, S, C); TAKE2(w->dF, S, C);
    TAKE1(w->sigma, B); TAKE1(w->c_skip, B); TAKE1(w->c_out, B); TAKE1(w->c_in, B); TAKE1(w->c_noise, B);
    TAKE1(w->weight, B); TAKE1(w->loss, 1); TAKE1(w->sample_sum, B); TAKE1(w->sample_count, B);
#undef TAKE1
#undef TAKE2
    VFM_TRY(pack_conditioning_build(&w->cond, p, draws->drop, draws->class_row));
    float *sigma = w->sigma.data;
    for (int i = 0; i < B; i++) {
        sigma[i] = draws->sigma[i];
        if (res->sigma) res->sigma[i] = sigma[i];
        if (res->dropped) res->dropped[i] = draws->drop[i];
    }

    /* x0 = σ_data·latent; ε; preconditioning; x_t and the network input */
    Tensor latent = TF32(p->tokens, S, C);
    VFM_TRY(op_copy(&w->x0, &latent));
    VFM_TRY(op_scale(&w->x0, sigma_data));
    Tensor noise = TF32(draws->noise, S, C);
    VFM_TRY(op_copy(&w->noise, &noise));
    VFM_TRY(op_edm_precondition(&w->c_skip, &w->c_out, &w->c_in, &w->c_noise, &w->weight, &w->sigma, sigma_data));
    VFM_TRY(op_edm_add_noise(&w->x_t, &w->net_in, &w->x0, &w->noise, &w->sigma, &w->c_in, &w->cond.tok2sample));
    w->cond.in.x = &w->net_in;
    w->cond.in.c_noise = &w->c_noise;
    return VFM_OK;
}

static void edm_work_free(EdmWork *w) {
    free(w->buf);
    pack_conditioning_free(&w->cond);
}

static vfm_status edm_forward_loss(DiT *model, const Pack *p, EdmWork *w, EdmStepResult *res) {
    VFM_TRY(dit_reserve(model, p->n_tokens, p->n_text, p->n_samples));
    VFM_TRY(dit_forward(model, &w->cond.in, &w->F));
    VFM_TRY(op_edm_denoise(&w->denoised, &w->x_t, &w->F, &w->c_skip, &w->c_out, &w->cond.tok2sample));
    VFM_TRY(op_weighted_mse_forward(&w->loss, &w->sample_sum, &w->sample_count, &w->denoised, &w->x0, &w->weight,
                                    &w->cond.mask, &w->cond.tok2sample));
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
    if (s == VFM_OK && grad_scale > 0) {
        s = op_weighted_mse_backward(&w.d_denoised, grad_scale, &w.denoised, &w.x0, &w.weight, &w.cond.mask,
                                     &w.cond.tok2sample);
        if (s == VFM_OK) s = op_edm_denoise_backward(&w.dF, &w.d_denoised, &w.c_out, &w.cond.tok2sample);
        if (s == VFM_OK) s = dit_backward(model, &w.cond.in, &w.dF);
    }
    if (s == VFM_OK && res->F) {
        Tensor out = TF32(res->F, p->n_tokens, p->token_dim);
        s = op_copy(&out, &w.F);
    }
    edm_work_free(&w);
    return s;
}

vfm_status edm_loss_given(DiT *model, float sigma_data, const Pack *p, const EdmDraws *draws, EdmStepResult *res) {
    return edm_loss_and_grad_given(model, sigma_data, p, draws, 0.0, res);
}
