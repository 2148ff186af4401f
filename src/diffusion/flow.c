/* Flow matching: the loss over a pack, the time shift and schedule, the Euler sampler (see flow.h). */
#include "flow.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/philox.h"
#include "diffusion/objective_internal.h"

double flow_shift_sigma(double sigma, double shift) { return shift * sigma / (1.0 + (shift - 1.0) * sigma); }

double flow_shift_for(const Objective *o, int64_t tokens) {
    if (o->flow_shift_base <= 0) return o->flow_shift;
    return o->flow_shift * sqrt((double)tokens / (double)o->flow_shift_base);
}

/* The working tensors of one pack, carved from the objective's memory (slot OW_MAIN). */
typedef struct FlowTensors {
    int64_t S, C;
    int B;
    DType act;
    Tensor x_t, F, dF;      /* [S, C] activation dtype: the network's input, output and its gradient */
    Tensor F32, dF32;       /* [S, C] f32 twins of F and dF (the same tensors in f32) */
    Tensor target;          /* [S, C] f32 */
    Tensor per;             /* [6B] f32: a, s, c_noise, weight, minus_one, noise coefficient of the target */
    Tensor stats;           /* [1 + 2B] f32: the loss, sample_sum [B], sample_count [B] */
} FlowTensors;

static void flow_layout(Carver *k, void *ctx) {
    FlowTensors *f = ctx;
    f->x_t = CARVE(k, f->act, f->S, f->C);
    f->F = CARVE(k, f->act, f->S, f->C);
    f->dF = CARVE(k, f->act, f->S, f->C);
    f->F32 = objective_carve_f32_twin(k, &f->F);
    f->dF32 = objective_carve_f32_twin(k, &f->dF);
    f->target = CARVE(k, DT_F32, f->S, f->C);
    f->per = CARVE(k, DT_F32, 6 * (int64_t)f->B);
    f->stats = CARVE(k, DT_F32, 1 + 2 * (int64_t)f->B);
}

static vfm_status flow_tensors(DiT *model, ObjectiveBatch *b, FlowTensors *f) {
    const Pack *p = b->pack;
    *f = (FlowTensors){.S = p->n_tokens, .C = p->token_dim, .B = p->n_samples, .act = b->act};
    if (dit_out_dim(&model->cfg) != f->C)
        return vfm_fail(VFM_ERR_USAGE, "flow matching needs out_channels == in_channels (model gives %d values per "
                        "token, data %lld)", dit_out_dim(&model->cfg), (long long)f->C);
    return carve_slot(b->work, b->device, OW_MAIN, flow_layout, f);
}

static vfm_status flow_prepare(DiT *model, const Objective *o, ObjectiveBatch *b) {
    FlowTensors f;
    VFM_TRY(flow_tensors(model, b, &f));
    int B = f.B;
    void *hv;
    VFM_TRY(objective_work_host(b->work, (size_t)(6 * B + 1) * sizeof(float), &hv));
    float *A = hv, *Sg = A + B, *CN = Sg + B, *W = CN + B, *M1 = W + B, *NC = M1 + B;
    double smin = o->flow_sigma_min; /* 0: DFM's path exactly */
    for (int i = 0; i < B; i++) {
        double sigma = b->draws->t[i];
        A[i] = (float)(1.0 - sigma);
        Sg[i] = (float)(sigma + smin * (1.0 - sigma));
        CN[i] = (float)(1000.0 * sigma);
        W[i] = 1.0f;
        M1[i] = -1.0f;
        NC[i] = (float)(1.0 - smin);
    }
    VFM_TRY(objective_put(&f.per, hv));
    Tensor a = objective_slice(&f.per, 0, B), s = objective_slice(&f.per, B, B);
    Tensor minus_one = objective_slice(&f.per, 4 * B, B), noise_coef = objective_slice(&f.per, 5 * B, B);
    const Tensor *x0 = &b->pt->tokens, *t2s = &b->cond.tok2sample;
    /* x_σ = (1−σ)·x0 + (σ + σ_min(1−σ))·ε; target (1−σ_min)·ε − x0 (Movie Gen's X_t and −V with t = 1−σ) */
    VFM_TRY(op_noise_mix(&f.x_t, x0, &b->noise, &a, &s, t2s));
    VFM_TRY(op_noise_mix(&f.target, x0, &b->noise, &minus_one, &noise_coef, t2s));
    b->in_x = f.x_t;
    b->in_c_noise = objective_slice(&f.per, 2 * B, B);
    b->F = f.F;
    b->dF = f.dF;
    return VFM_OK;
}

static vfm_status flow_finish(DiT *model, ObjectiveBatch *b, double grad_scale, ObjectiveResult *res) {
    FlowTensors f;
    VFM_TRY(flow_tensors(model, b, &f));
    int B = f.B;
    Tensor weight = objective_slice(&f.per, 3 * B, B);
    Tensor loss = objective_slice(&f.stats, 0, 1), sample_sum = objective_slice(&f.stats, 1, B);
    Tensor sample_count = objective_slice(&f.stats, 1 + B, B);
    const Tensor *t2s = &b->cond.tok2sample;
    VFM_TRY(objective_convert(&f.F32, &f.F));
    VFM_TRY(op_weighted_mse_forward(&loss, &sample_sum, &sample_count, &f.F32, &f.target, &weight, &b->cond.mask,
                                    t2s));
    if (grad_scale > 0) {
        VFM_TRY(op_weighted_mse_backward(&f.dF32, grad_scale, &f.F32, &f.target, &weight, &b->cond.mask, t2s));
        VFM_TRY(objective_convert(&f.dF, &f.dF32));
    }
    int on_device;
    VFM_TRY(objective_loss_on_device(&f.stats, 1, B, res, &on_device));
    if (on_device) return VFM_OK;
    const float *st;
    VFM_TRY(objective_fetch(b, &f.stats, &st));
    res->loss = st[0];
    res->n_samples = B;
    const float *sum = st + 1, *cnt = st + 1 + B;
    for (int i = 0; res->sample_loss && i < B; i++) res->sample_loss[i] = cnt[i] > 0 ? sum[i] / cnt[i] : 0.0;
    if (res->F) VFM_TRY(objective_get(res->F, &f.F32));
    return VFM_OK;
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

/* σ = shift(sigmoid(n)), n = P_mean + P_std·z: the logit-normal time, shifted for the sample's length */
static double flow_draw_time(const Objective *o, uint32_t step, uint64_t uid, int64_t tokens) {
    float z = philox_normal_at(o->seed, RNG_STREAM_SIGMA, step, uid, 0);
    double n = o->p_mean + o->p_std * (double)z;
    return flow_shift_sigma(1.0 / (1.0 + exp(-n)), flow_shift_for(o, tokens));
}

const ObjectiveLoss flow_loss = {"flow", flow_draw_time, flow_prepare, flow_finish};
