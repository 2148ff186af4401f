/* Flow matching: the loss over a pack, the time shift and schedule, the Euler sampler (see flow.h). */
#include "flow.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "diffusion/conditioning.h"

double flow_shift_sigma(double sigma, double shift) { return shift * sigma / (1.0 + (shift - 1.0) * sigma); }

double flow_shift_for(const Objective *o, int64_t tokens) {
    if (o->flow_shift_base <= 0) return o->flow_shift;
    return o->flow_shift * sqrt((double)tokens / (double)o->flow_shift_base);
}

vfm_status flow_loss_given(DiT *model, const Pack *p, const DiffusionDraws *draws, double grad_scale,
                           ObjectiveResult *res) {
    int64_t S = p->n_tokens, C = p->token_dim;
    int B = p->n_samples;
    if (dit_out_dim(&model->cfg) != C)
        return vfm_fail(VFM_ERR_USAGE, "flow matching needs out_channels == in_channels (model gives %d values per "
                        "token, data %lld)", dit_out_dim(&model->cfg), (long long)C);
    size_t floats = (size_t)(6 * S * C + 7 * B + 1);
    float *buf = calloc(floats, sizeof(float));
    if (!buf) return vfm_fail(VFM_ERR_NOMEM, "flow: %zu floats of working memory", floats);
    float *f = buf;
    Tensor x_t = TF32(f, S, C), target = TF32(f + S * C, S, C), F = TF32(f + 2 * S * C, S, C);
    Tensor dF = TF32(f + 3 * S * C, S, C);
    f += 6 * S * C;
    Tensor a = TF32(f, B), s = TF32(f + B, B), c_noise = TF32(f + 2 * B, B), weight = TF32(f + 3 * B, B);
    Tensor minus_one = TF32(f + 4 * B, B), sample_sum = TF32(f + 5 * B, B), sample_count = TF32(f + 6 * B, B);
    Tensor loss = TF32(f + 7 * B, 1);
    float *A = a.data, *Sg = s.data, *CN = c_noise.data, *W = weight.data, *M1 = minus_one.data;
    for (int i = 0; i < B; i++) {
        double sigma = draws->t[i];
        A[i] = (float)(1.0 - sigma);
        Sg[i] = (float)sigma;
        CN[i] = (float)(1000.0 * sigma);
        W[i] = 1.0f;
        M1[i] = -1.0f;
        if (res->t) res->t[i] = draws->t[i];
        if (res->dropped) res->dropped[i] = draws->drop[i];
    }
    PackConditioning cond;
    vfm_status st = pack_conditioning_build(&cond, p, draws->drop, draws->class_row);
    Tensor x0 = TF32(p->tokens, S, C), noise = TF32(draws->noise, S, C);
    /* x_σ = (1−σ)·x0 + σ·ε; target ε − x0 */
    if (st == VFM_OK) st = op_noise_mix(&x_t, &x0, &noise, &a, &s, &cond.tok2sample);
    if (st == VFM_OK) st = op_noise_mix(&target, &x0, &noise, &minus_one, &weight, &cond.tok2sample);
    cond.in.x = &x_t;
    cond.in.c_noise = &c_noise;
    if (st == VFM_OK) st = dit_reserve(model, S, p->n_text, B);
    if (st == VFM_OK) st = dit_forward(model, &cond.in, &F);
    if (st == VFM_OK)
        st = op_weighted_mse_forward(&loss, &sample_sum, &sample_count, &F, &target, &weight, &cond.mask, &cond.tok2sample);
    if (st == VFM_OK) {
        res->loss = ((float *)loss.data)[0];
        res->n_samples = B;
        const float *sum = sample_sum.data, *cnt = sample_count.data;
        for (int i = 0; res->sample_loss && i < B; i++) res->sample_loss[i] = cnt[i] > 0 ? sum[i] / cnt[i] : 0.0;
    }
    if (st == VFM_OK && grad_scale > 0) {
        st = op_weighted_mse_backward(&dF, grad_scale, &F, &target, &weight, &cond.mask, &cond.tok2sample);
        if (st == VFM_OK) st = dit_backward(model, &cond.in, &dF);
    }
    if (st == VFM_OK && res->F) {
        Tensor out = TF32(res->F, S, C);
        st = op_copy(&out, &F);
    }
    pack_conditioning_free(&cond);
    free(buf);
    return st;
}

void flow_time_schedule(int n, int linear, double *sigma) {
    /* t: 0 (noise) → 1 (data); σ = 1 − t */
    if (linear || n < 2) {
        for (int i = 0; i <= n; i++) sigma[i] = 1.0 - (double)i / (double)(n > 0 ? n : 1);
        return;
    }
    const double tau = 0.025;
    int L = n / 2, Q = n - L;
    double d = L - tau * n, a = d / ((double)L * Q * Q), b = tau / L - 2.0 * d / ((double)Q * Q), c = a * L * L;
    for (int i = 0; i <= n; i++) {
        double t = i < L ? i * tau / L : a * i * i + b * i + c;
        sigma[i] = 1.0 - t;
    }
    sigma[0] = 1.0;
    sigma[n] = 0.0;
}

vfm_status flow_euler_sample(int n_steps, int linear_schedule, int n_samples, const int64_t *row_begin,
                             const double *shift, VelocityFn velocity, void *ctx, Tensor *x,
                             void (*progress)(void *, int, int), void *progress_ctx) {
    if (n_steps < 1) return vfm_fail(VFM_ERR_USAGE, "sampler: num_steps must be at least 1");
    int64_t C = tensor_dim(x, 1);
    double *base = malloc((size_t)(n_steps + 1) * sizeof *base);
    double *cur = malloc((size_t)n_samples * 2 * sizeof *cur);
    float *vbuf = malloc((size_t)tensor_numel(x) * sizeof(float));
    vfm_status s = base && cur && vbuf ? VFM_OK : vfm_fail(VFM_ERR_NOMEM, "flow sampler: working memory");
    Tensor v = *x;
    v.data = vbuf;
    if (s == VFM_OK) flow_time_schedule(n_steps, linear_schedule, base);
    for (int i = 0; i < n_steps && s == VFM_OK; i++) {
        double *now = cur, *next = cur + n_samples;
        for (int b = 0; b < n_samples; b++) {
            now[b] = flow_shift_sigma(base[i], shift[b]);
            next[b] = flow_shift_sigma(base[i + 1], shift[b]);
        }
        s = velocity(ctx, x, now, &v);
        for (int b = 0; b < n_samples && s == VFM_OK; b++) {
            int64_t rows = row_begin[b + 1] - row_begin[b];
            Tensor xb = TF32((float *)x->data + row_begin[b] * C, rows, C);
            Tensor vb = TF32(vbuf + row_begin[b] * C, rows, C);
            s = op_axpy(&xb, next[b] - now[b], &vb);
        }
        if (s == VFM_OK && progress) progress(progress_ctx, i + 1, n_steps);
    }
    free(base);
    free(cur);
    free(vbuf);
    return s;
}
