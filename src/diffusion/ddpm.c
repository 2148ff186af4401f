/* DDPM: the (respaced) chain, the ε + VB loss over a pack, the DDPM/DDIM reverse process (see ddpm.h). */
#include "ddpm.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "diffusion/conditioning.h"

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

/* Working tensors of one step. */
typedef struct DdpmWork {
    float *buf;
    Tensor x_t, F, dF, eps, v, deps, dv;             /* [S, C·(1 or 2)], [S, C] */
    Tensor a, s, c_noise, weight, mse_sum, vb_sum, count, coef, mse_loss, vb_loss;
} DdpmWork;

vfm_status ddpm_loss_given(DiT *model, const Pack *p, const DiffusionDraws *draws, double grad_scale,
                           ObjectiveResult *res) {
    DdpmChain chain; /* the 1000-step chain (microseconds to build) */
    VFM_TRY(ddpm_chain_init(&chain, 0));
    int64_t S = p->n_tokens, C = p->token_dim;
    int B = p->n_samples, out = dit_out_dim(&model->cfg);
    int learned = out == 2 * C;
    if (!learned && out != C)
        return vfm_fail(VFM_ERR_USAGE, "ddpm needs out_channels equal to in_channels, or twice that with learned sigma "
                        "(model gives %d values per token, data %lld)", out, (long long)C);
    DdpmWork w;
    memset(&w, 0, sizeof w);
    size_t floats = (size_t)(S * C + 2 * S * out + 4 * S * C + (7 + DDPM_VB_NCOEF) * B + 2);
    w.buf = calloc(floats, sizeof(float));
    if (!w.buf) return vfm_fail(VFM_ERR_NOMEM, "ddpm: %zu floats of working memory", floats);
    float *f = w.buf;
#define TAKE2(t, r, c) (t = TF32(f, r, c), f += (r) * (c))
#define TAKE1(t, n) (t = TF32(f, n), f += (n))
    TAKE2(w.x_t, S, C); TAKE2(w.F, S, out); TAKE2(w.dF, S, out);
    TAKE2(w.eps, S, C); TAKE2(w.v, S, C); TAKE2(w.deps, S, C); TAKE2(w.dv, S, C);
    TAKE1(w.a, B); TAKE1(w.s, B); TAKE1(w.c_noise, B); TAKE1(w.weight, B); TAKE1(w.mse_sum, B); TAKE1(w.vb_sum, B);
    TAKE1(w.count, B); TAKE2(w.coef, B, DDPM_VB_NCOEF); TAKE1(w.mse_loss, 1); TAKE1(w.vb_loss, 1);
#undef TAKE1
#undef TAKE2
    float *A = w.a.data, *Sg = w.s.data, *CN = w.c_noise.data, *W = w.weight.data, *K = w.coef.data;
    vfm_status st = VFM_OK;
    for (int i = 0; i < B && st == VFM_OK; i++) {
        int t = (int)draws->t[i];
        if (t < 0 || t >= chain.n || (float)t != draws->t[i]) {
            st = vfm_fail(VFM_ERR_INTERNAL, "ddpm: timestep %g is not an integer in [0, %d)", draws->t[i], chain.n);
            break;
        }
        double ac = chain.alpha_bar[t], k[DDPM_VB_NCOEF];
        A[i] = (float)sqrt(ac);
        Sg[i] = (float)sqrt(1.0 - ac);
        CN[i] = (float)chain.timestep[t];
        W[i] = 1.0f;
        ddpm_vb_coef(&chain, t, k);
        for (int j = 0; j < DDPM_VB_NCOEF; j++) K[i * DDPM_VB_NCOEF + j] = (float)k[j];
        if (res->t) res->t[i] = draws->t[i];
        if (res->dropped) res->dropped[i] = draws->drop[i];
    }
    PackConditioning cond;
    memset(&cond, 0, sizeof cond);
    if (st == VFM_OK) st = pack_conditioning_build(&cond, p, draws->drop, draws->class_row);
    Tensor x0 = TF32(p->tokens, S, C), noise = TF32(draws->noise, S, C);
    if (st == VFM_OK) st = op_noise_mix(&w.x_t, &x0, &noise, &w.a, &w.s, &cond.tok2sample);
    cond.in.x = &w.x_t;
    cond.in.c_noise = &w.c_noise;
    if (st == VFM_OK) st = dit_reserve(model, S, p->n_text, B);
    if (st == VFM_OK) st = dit_forward(model, &cond.in, &w.F);
    /* ε̂ (and v): the first C channels of each position, then the next C */
    const Tensor *eps = &w.F;
    if (st == VFM_OK && learned) {
        st = op_channel_halves_split(&w.eps, &w.v, &w.F, model->cfg.in_channels);
        eps = &w.eps;
    }
    if (st == VFM_OK)
        st = op_weighted_mse_forward(&w.mse_loss, &w.mse_sum, &w.count, eps, &noise, &w.weight, &cond.mask,
                                     &cond.tok2sample);
    if (st == VFM_OK && learned)
        st = op_ddpm_vb_forward(&w.vb_loss, &w.vb_sum, &w.v, eps, &w.x_t, &x0, &w.coef, &cond.mask, &cond.tok2sample);
    if (st == VFM_OK) {
        res->loss = (double)((float *)w.mse_loss.data)[0] + (double)((float *)w.vb_loss.data)[0];
        res->n_samples = B;
        const float *ms = w.mse_sum.data, *vs = w.vb_sum.data, *cnt = w.count.data;
        for (int i = 0; res->sample_loss && i < B; i++)
            res->sample_loss[i] = cnt[i] > 0 ? ((double)ms[i] + (double)vs[i]) / cnt[i] : 0.0;
    }
    if (st == VFM_OK && grad_scale > 0) {
        Tensor *deps = learned ? &w.deps : &w.dF;
        st = op_weighted_mse_backward(deps, grad_scale, eps, &noise, &w.weight, &cond.mask, &cond.tok2sample);
        if (st == VFM_OK && learned)
            st = op_ddpm_vb_backward(&w.dv, grad_scale, &w.v, eps, &w.x_t, &x0, &w.coef, &cond.mask, &cond.tok2sample);
        if (st == VFM_OK && learned) st = op_channel_halves_merge(&w.dF, &w.deps, &w.dv, model->cfg.in_channels);
        if (st == VFM_OK) st = dit_backward(model, &cond.in, &w.dF);
    }
    if (st == VFM_OK && res->F) {
        Tensor o = TF32(res->F, S, out);
        st = op_copy(&o, &w.F);
    }
    pack_conditioning_free(&cond);
    free(w.buf);
    return st;
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
