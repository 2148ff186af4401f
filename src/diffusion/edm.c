/* EDM loss over a pack (see edm.h), on the model's device (objective_internal.h). */
#include "edm.h"

#include <math.h>
#include <string.h>

#include "core/philox.h"
#include "diffusion/objective_internal.h"

/* The working tensors of one pack, carved from the objective's memory (slot OW_MAIN). */
typedef struct EdmTensors {
    int64_t S, C;
    int B;
    DType act;
    Tensor x0, x_t, denoised, d_denoised; /* [S, C] f32 */
    Tensor net_in, F, dF;                 /* [S, C] activation dtype */
    Tensor sigma, c_skip, c_out, c_in, c_noise, weight; /* [B] f32 */
    Tensor stats;                         /* [1 + 2B] f32: the loss, then sample_sum [B], sample_count [B] */
} EdmTensors;

static void edm_layout(Carver *k, void *ctx) {
    EdmTensors *e = ctx;
    int64_t S = e->S, C = e->C, B = e->B;
    e->x0 = CARVE(k, DT_F32, S, C);
    e->x_t = CARVE(k, DT_F32, S, C);
    e->denoised = CARVE(k, DT_F32, S, C);
    e->d_denoised = CARVE(k, DT_F32, S, C);
    e->net_in = CARVE(k, e->act, S, C);
    e->F = CARVE(k, e->act, S, C);
    e->dF = CARVE(k, e->act, S, C);
    e->sigma = CARVE(k, DT_F32, B);
    e->c_skip = CARVE(k, DT_F32, B);
    e->c_out = CARVE(k, DT_F32, B);
    e->c_in = CARVE(k, DT_F32, B);
    e->c_noise = CARVE(k, DT_F32, B);
    e->weight = CARVE(k, DT_F32, B);
    e->stats = CARVE(k, DT_F32, 1 + 2 * B);
}

/* The working tensors of b's pack (the same every call: carve_slot is deterministic). */
static vfm_status edm_tensors(DiT *model, ObjectiveBatch *b, EdmTensors *e) {
    const Pack *p = b->pack;
    *e = (EdmTensors){.S = p->n_tokens, .C = p->token_dim, .B = p->n_samples, .act = b->act};
    if (dit_out_dim(&model->cfg) != e->C)
        return vfm_fail(VFM_ERR_USAGE, "EDM needs out_channels == in_channels (model gives %d values per token, data %lld)",
                        dit_out_dim(&model->cfg), (long long)e->C);
    return carve_slot(b->work, b->device, OW_MAIN, edm_layout, e);
}

static vfm_status edm_prepare(DiT *model, const Objective *o, ObjectiveBatch *b) {
    float sigma_data = o->sigma_data;
    EdmTensors e;
    VFM_TRY(edm_tensors(model, b, &e));
    /* x0 = σ_data·latent; preconditioning; x_t and the network input */
    VFM_TRY(objective_put(&e.sigma, b->draws->sigma));
    VFM_TRY(op_copy(&e.x0, &b->pt->tokens));
    VFM_TRY(op_scale(&e.x0, sigma_data));
    VFM_TRY(op_edm_precondition(&e.c_skip, &e.c_out, &e.c_in, &e.c_noise, &e.weight, &e.sigma, sigma_data));
    VFM_TRY(op_edm_add_noise(&e.x_t, &e.net_in, &e.x0, &b->noise, &e.sigma, &e.c_in, &b->cond.tok2sample));
    b->in_x = e.net_in;
    b->in_c_noise = e.c_noise;
    b->F = e.F;
    b->dF = e.dF;
    return VFM_OK;
}

static vfm_status edm_finish(DiT *model, ObjectiveBatch *b, double grad_scale, ObjectiveResult *res) {
    EdmTensors e;
    VFM_TRY(edm_tensors(model, b, &e));
    Tensor loss = objective_slice(&e.stats, 0, 1), sample_sum = objective_slice(&e.stats, 1, e.B);
    Tensor sample_count = objective_slice(&e.stats, 1 + e.B, e.B);
    const Tensor *t2s = &b->cond.tok2sample;
    VFM_TRY(op_edm_denoise(&e.denoised, &e.x_t, &e.F, &e.c_skip, &e.c_out, t2s));
    VFM_TRY(op_weighted_mse_forward(&loss, &sample_sum, &sample_count, &e.denoised, &e.x0, &e.weight, &b->cond.mask,
                                    t2s));
    if (grad_scale > 0) {
        VFM_TRY(op_weighted_mse_backward(&e.d_denoised, grad_scale, &e.denoised, &e.x0, &e.weight, &b->cond.mask, t2s));
        VFM_TRY(op_edm_denoise_backward(&e.dF, &e.d_denoised, &e.c_out, t2s));
    }
    int on_device;
    VFM_TRY(objective_loss_on_device(&e.stats, 1, e.B, res, &on_device));
    if (on_device) return VFM_OK;
    const float *st;
    VFM_TRY(objective_fetch(b, &e.stats, &st));
    res->loss = st[0];
    res->n_samples = e.B;
    const float *sum = st + 1, *cnt = st + 1 + e.B;
    for (int i = 0; res->sample_loss && i < e.B; i++) res->sample_loss[i] = cnt[i] > 0 ? sum[i] / cnt[i] : 0.0;
    return objective_output_to_host(res, &e.F, &e.d_denoised);
}

/* σ = exp(P_mean + P_std·z), computed in float as EDM always drew it */
static double edm_draw_time(const Objective *o, uint32_t step, uint64_t uid, int64_t tokens) {
    (void)tokens;
    float z = philox_normal_at(o->seed, RNG_STREAM_SIGMA, step, uid, 0);
    return expf((float)o->p_mean + (float)o->p_std * z);
}

const ObjectiveLoss edm_loss = {"edm", edm_draw_time, edm_prepare, edm_finish};
