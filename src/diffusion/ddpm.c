/* DDPM: the (respaced) chain, the ε + VB loss over a pack, the DDPM/DDIM reverse process (see ddpm.h). */
#include "ddpm.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/philox.h"
#include "diffusion/objective_internal.h"

vfm_status ddpm_chain_init(DdpmChain *c, int steps) {
    const int T = DDPM_NUM_TIMESTEPS;
    if (steps == 0) steps = T;
    if (steps < 1 || steps > T)
        return vfm_fail(VFM_ERR_USAGE, "ddpm: %d sampling steps; expected 1 to %d", steps, T);
    /* the base schedule: np.linspace(1e-4, 0.02, T) and its cumulative product */
    double base_ac[DDPM_NUM_TIMESTEPS], step = (0.02 - 1e-4) / (T - 1), prod = 1.0;
    for (int t = 0; t < T; t++) {
        double beta = t == T - 1 ? 0.02 : t * step + 1e-4;
        prod *= 1.0 - beta;
        base_ac[t] = prod;
    }
    /* space_timesteps(T, [steps]): round(cur) with cur += (T−1)/(steps−1), Python's round (ties to even) */
    unsigned char use[DDPM_NUM_TIMESTEPS] = {0};
    double stride = steps <= 1 ? 1.0 : (double)(T - 1) / (double)(steps - 1), cur = 0.0;
    for (int i = 0; i < steps; i++) {
        use[(int)nearbyint(cur)] = 1;
        cur += stride;
    }
    /* respaced betas, then ᾱ recomputed from them */
    c->n = 0;
    double last = 1.0;
    for (int t = 0; t < T; t++) {
        if (!use[t]) continue;
        c->timestep[c->n] = t;
        c->beta[c->n] = 1.0 - base_ac[t] / last;
        last = base_ac[t];
        c->n++;
    }
    prod = 1.0;
    for (int i = 0; i < c->n; i++) {
        prod *= 1.0 - c->beta[i];
        c->alpha_bar[i] = prod;
    }
    return VFM_OK;
}

static double posterior_variance(const DdpmChain *c, int i) {
    double ac = c->alpha_bar[i], ac_prev = i > 0 ? c->alpha_bar[i - 1] : 1.0;
    return c->beta[i] * (1.0 - ac_prev) / (1.0 - ac);
}

/* log β̃ with β̃_0 replaced by β̃_1 (β̃_0 = 0) */
static double posterior_log_variance_clipped(const DdpmChain *c, int i) {
    return log(posterior_variance(c, i == 0 && c->n > 1 ? 1 : i));
}

void ddpm_vb_coef(const DdpmChain *c, int i, double k[DDPM_VB_NCOEF]) {
    double ac = c->alpha_bar[i], ac_prev = i > 0 ? c->alpha_bar[i - 1] : 1.0, beta = c->beta[i];
    memset(k, 0, sizeof(double) * DDPM_VB_NCOEF);
    k[DDPM_VB_RECIP_AC] = sqrt(1.0 / ac);
    k[DDPM_VB_RECIPM1_AC] = sqrt(1.0 / ac - 1.0);
    k[DDPM_VB_MEAN_C1] = beta * sqrt(ac_prev) / (1.0 - ac);
    k[DDPM_VB_MEAN_C2] = (1.0 - ac_prev) * sqrt(1.0 - beta) / (1.0 - ac);
    k[DDPM_VB_POST_LOGVAR] = posterior_log_variance_clipped(c, i);
    k[DDPM_VB_LOG_BETA] = log(beta);
    k[DDPM_VB_IS_T0] = i == 0 ? 1.0 : 0.0;
}

/* The working tensors of one pack, carved from the objective's memory (slot OW_MAIN). */
typedef struct DdpmTensors {
    int64_t S, C, out;
    int B;
    DType act;
    Tensor x_t, F, dF;            /* [S, C], [S, out], [S, out] activation dtype: the network's side */
    Tensor x_t32, F32, dF32;      /* their f32 twins (the same tensors in f32) */
    Tensor eps, v, deps, dv;      /* [S, C] f32: the learned-sigma halves of F and their gradients */
    Tensor per;                   /* [(4 + DDPM_VB_NCOEF)·B] f32: a, s, c_noise, weight, coef [B, NCOEF] */
    Tensor stats;                 /* [2 + 3B] f32: mse loss, vb loss, mse_sum [B], vb_sum [B], count [B] */
} DdpmTensors;

enum { DDPM_PER = 4 + DDPM_VB_NCOEF };

static void ddpm_layout(Carver *k, void *ctx) {
    DdpmTensors *d = ctx;
    int64_t S = d->S, C = d->C, B = d->B;
    d->x_t = CARVE(k, d->act, S, C);
    d->F = CARVE(k, d->act, S, d->out);
    d->dF = CARVE(k, d->act, S, d->out);
    d->x_t32 = objective_carve_f32_twin(k, &d->x_t);
    d->F32 = objective_carve_f32_twin(k, &d->F);
    d->dF32 = objective_carve_f32_twin(k, &d->dF);
    d->eps = CARVE(k, DT_F32, S, C);
    d->v = CARVE(k, DT_F32, S, C);
    d->deps = CARVE(k, DT_F32, S, C);
    d->dv = CARVE(k, DT_F32, S, C);
    d->per = CARVE(k, DT_F32, DDPM_PER * B);
    d->stats = CARVE(k, DT_F32, 2 + 3 * B);
}

/* The per-sample inputs on the host: a = √ᾱ_t, s = √(1−ᾱ_t), c_noise = t, weight 1, the VB coefficients. */
static vfm_status ddpm_per_sample(float *h, const DiffusionDraws *draws, int B) {
    DdpmChain chain; /* the 1000-step chain (microseconds to build) */
    VFM_TRY(ddpm_chain_init(&chain, 0));
    float *A = h, *Sg = A + B, *CN = Sg + B, *W = CN + B, *K = W + B;
    for (int i = 0; i < B; i++) {
        int t = (int)draws->t[i];
        if (t < 0 || t >= chain.n || (float)t != draws->t[i])
            return vfm_fail(VFM_ERR_INTERNAL, "ddpm: timestep %g is not an integer in [0, %d)", draws->t[i], chain.n);
        double ac = chain.alpha_bar[t], k[DDPM_VB_NCOEF];
        A[i] = (float)sqrt(ac);
        Sg[i] = (float)sqrt(1.0 - ac);
        CN[i] = (float)chain.timestep[t];
        W[i] = 1.0f;
        ddpm_vb_coef(&chain, t, k);
        for (int j = 0; j < DDPM_VB_NCOEF; j++) K[i * DDPM_VB_NCOEF + j] = (float)k[j];
    }
    return VFM_OK;
}

static vfm_status ddpm_tensors(DiT *model, ObjectiveBatch *b, DdpmTensors *d) {
    const Pack *p = b->pack;
    *d = (DdpmTensors){.S = p->n_tokens, .C = p->token_dim, .out = dit_out_dim(&model->cfg), .B = p->n_samples,
                       .act = b->act};
    if (d->out != 2 * d->C && d->out != d->C)
        return vfm_fail(VFM_ERR_USAGE, "ddpm needs out_channels equal to in_channels, or twice that with learned sigma "
                        "(model gives %lld values per token, data %lld)", (long long)d->out, (long long)d->C);
    return carve_slot(b->work, b->device, OW_MAIN, ddpm_layout, d);
}

static vfm_status ddpm_prepare(DiT *model, const Objective *o, ObjectiveBatch *b) {
    (void)o;
    DdpmTensors d;
    VFM_TRY(ddpm_tensors(model, b, &d));
    int B = d.B;
    void *hv;
    VFM_TRY(objective_work_host(b->work, (size_t)(DDPM_PER * B + 1) * sizeof(float), &hv));
    VFM_TRY(ddpm_per_sample(hv, b->draws, B));
    VFM_TRY(objective_put(&d.per, hv));
    Tensor a = objective_slice(&d.per, 0, B), s = objective_slice(&d.per, B, B);
    VFM_TRY(op_noise_mix(&d.x_t32, &b->pt->tokens, &b->noise, &a, &s, &b->cond.tok2sample));
    VFM_TRY(objective_convert(&d.x_t, &d.x_t32));
    b->in_x = d.x_t;
    b->in_c_noise = objective_slice(&d.per, 2 * B, B);
    b->F = d.F;
    b->dF = d.dF;
    return VFM_OK;
}

static vfm_status ddpm_finish(DiT *model, ObjectiveBatch *b, double grad_scale, ObjectiveResult *res) {
    DdpmTensors d;
    VFM_TRY(ddpm_tensors(model, b, &d));
    int B = d.B, learned = d.out == 2 * d.C;
    Tensor weight = objective_slice(&d.per, 3 * B, B);
    Tensor coef = TENSOR((float *)d.per.data + 4 * B, DT_F32, b->device, B, DDPM_VB_NCOEF);
    Tensor mse_loss = objective_slice(&d.stats, 0, 1), vb_loss = objective_slice(&d.stats, 1, 1);
    Tensor mse_sum = objective_slice(&d.stats, 2, B), vb_sum = objective_slice(&d.stats, 2 + B, B);
    Tensor count = objective_slice(&d.stats, 2 + 2 * B, B);
    const Tensor *x0 = &b->pt->tokens, *noise = &b->noise, *t2s = &b->cond.tok2sample, *mask = &b->cond.mask;
    VFM_TRY(objective_convert(&d.F32, &d.F));
    /* ε̂ (and v): the first C channels of each position, then the next C */
    const Tensor *eps = &d.F32;
    if (learned) {
        VFM_TRY(op_channel_halves_split(&d.eps, &d.v, &d.F32, model->cfg.in_channels));
        eps = &d.eps;
    }
    VFM_TRY(op_weighted_mse_forward(&mse_loss, &mse_sum, &count, eps, noise, &weight, mask, t2s));
    if (learned) VFM_TRY(op_ddpm_vb_forward(&vb_loss, &vb_sum, &d.v, eps, &d.x_t32, x0, &coef, mask, t2s));
    if (grad_scale > 0) {
        Tensor *deps = learned ? &d.deps : &d.dF32;
        VFM_TRY(op_weighted_mse_backward(deps, grad_scale, eps, noise, &weight, mask, t2s));
        if (learned) {
            VFM_TRY(op_ddpm_vb_backward(&d.dv, grad_scale, &d.v, eps, &d.x_t32, x0, &coef, mask, t2s));
            VFM_TRY(op_channel_halves_merge(&d.dF32, &d.deps, &d.dv, model->cfg.in_channels));
        }
        VFM_TRY(objective_convert(&d.dF, &d.dF32));
    }
    int on_device; /* without learned sigma only the MSE term (the VB one is 0) */
    VFM_TRY(objective_loss_on_device(&d.stats, learned ? 2 : 1, B, res, &on_device));
    if (on_device) return VFM_OK;
    const float *st;
    VFM_TRY(objective_fetch(b, &d.stats, &st));
    /* without learned sigma the VB values are 0 (the stats' VB entries are not written) */
    res->loss = (double)st[0] + (learned ? (double)st[1] : 0.0);
    res->n_samples = B;
    const float *ms = st + 2, *vs = st + 2 + B, *cnt = st + 2 + 2 * B;
    for (int i = 0; res->sample_loss && i < B; i++)
        res->sample_loss[i] = cnt[i] > 0 ? ((double)ms[i] + (learned ? (double)vs[i] : 0.0)) / cnt[i] : 0.0;
    if (res->F) VFM_TRY(objective_get(res->F, &d.F32));
    return VFM_OK;
}

vfm_status ddpm_reverse_sample(int n_steps, int ddim, int learned, EpsFn eps_fn, StepNoiseFn noise, void *ctx,
                               Tensor *x, void (*progress)(void *, int, int), void *progress_ctx) {
    if (n_steps < 2) return vfm_fail(VFM_ERR_USAGE, "ddpm sampling needs at least 2 steps (got %d)", n_steps);
    DdpmChain *c = malloc(sizeof *c);
    int64_t numel = tensor_numel(x);
    float *buf = calloc((size_t)numel * 3, sizeof(float));
    vfm_status s = c && buf ? ddpm_chain_init(c, n_steps) : vfm_fail(VFM_ERR_NOMEM, "ddpm sampler: working memory");
    Tensor eps = *x, v = *x, z = *x;
    eps.data = buf;
    v.data = buf + numel;
    z.data = buf + 2 * numel;
    for (int i = n_steps - 1, done = 0; i >= 0 && s == VFM_OK; i--, done++) {
        s = eps_fn(ctx, x, c->timestep[i], &eps, learned ? &v : NULL);
        double k[DDPM_VB_NCOEF];
        ddpm_vb_coef(c, i, k);
        double ac_prev = i > 0 ? c->alpha_bar[i - 1] : 1.0;
        DdpmStepCoef sc = {k[DDPM_VB_RECIP_AC], k[DDPM_VB_RECIPM1_AC], 0, 0, 0, k[DDPM_VB_POST_LOGVAR],
                           k[DDPM_VB_LOG_BETA], 0};
        int add_noise = 0;
        if (ddim) { /* η = 0: x_{prev} = √ᾱ_prev·x̂0 + √(1−ᾱ_prev)·ε̂ */
            sc.c_x0 = sqrt(ac_prev);
            sc.c_eps = sqrt(1.0 - ac_prev);
        } else {    /* posterior mean + σ·z; fixed variance: β_t ("fixed large", β̃_1 at step 0) */
            sc.c_x0 = k[DDPM_VB_MEAN_C1];
            sc.c_xt = k[DDPM_VB_MEAN_C2];
            sc.fixed_logvar = i == 0 ? log(posterior_variance(c, 1)) : log(c->beta[i]);
            add_noise = i > 0;
        }
        if (s == VFM_OK && add_noise) s = noise(ctx, done, &z);
        if (s == VFM_OK) s = op_ddpm_step(x, x, &eps, learned ? &v : NULL, add_noise ? &z : NULL, &sc);
        if (s == VFM_OK && progress) progress(progress_ctx, done + 1, n_steps);
    }
    free(c);
    free(buf);
    return s;
}

/* t uniform over the DDPM_NUM_TIMESTEPS integer timesteps */
static double ddpm_draw_time(const Objective *o, uint32_t step, uint64_t uid, int64_t tokens) {
    (void)tokens;
    double u = philox_uniform_at(o->seed, RNG_STREAM_SIGMA, step, uid, 0);
    int t = (int)(u * DDPM_NUM_TIMESTEPS);
    return t < DDPM_NUM_TIMESTEPS ? t : DDPM_NUM_TIMESTEPS - 1;
}

const ObjectiveLoss ddpm_loss = {"ddpm", ddpm_draw_time, ddpm_prepare, ddpm_finish};
