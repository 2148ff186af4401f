// CUDA backend: EDM preconditioning, noising, the denoised output and its backward, and the masked
// per-sample-weighted MSE with its backward. The EDM math is f32 (net_in, F and dF may be bf16),
// written with explicitly rounded operations in the CPU's order, so f32 results are the CPU's bits.
// The loss sums per-row terms in double with fixed-order reductions. Padding rows (tok2sample < 0)
// are never read and get 0.
#include "cuda_common.h"

__global__ void edm_precondition_kernel(float *c_skip, float *c_out, float *c_in, float *c_noise, float *weight,
                                        const float *sigma, int64_t B, double sd) {
    GRID_STRIDE(b, B) {
        double s = sigma[b], s2 = s * s + sd * sd, root = sqrt(s2);
        if (c_skip) c_skip[b] = (float)(sd * sd / s2);
        if (c_out) c_out[b] = (float)(s * sd / root);
        if (c_in) c_in[b] = (float)(1.0 / root);
        if (c_noise) c_noise[b] = (float)(0.25 * log(s));
        if (weight) weight[b] = (float)(s2 / ((s * sd) * (s * sd)));
    }
}

// x_t = x0 + σ[b]·noise; net_in = c_in[b]·x_t (from the rounded f32 x_t, as the CPU)
template <typename A>
__global__ void edm_add_noise_kernel(float *x_t, A *net_in, const float *x0, const float *noise, const float *sigma,
                                     const float *c_in, const int32_t *t2s, int64_t S, int64_t C) {
    GRID_STRIDE(i, S * C) {
        int b = t2s[i / C];
        float xt = b < 0 ? 0.f : __fadd_rn(x0[i], __fmul_rn(sigma[b], noise[i]));
        if (x_t) x_t[i] = xt;
        if (net_in) net_in[i] = from_f32<A>(b < 0 ? 0.f : __fmul_rn(c_in[b], xt));
    }
}

// denoised = c_skip[b]·x_t + c_out[b]·F
template <typename A>
__global__ void edm_denoise_kernel(float *denoised, const float *x_t, const A *F, const float *c_skip,
                                   const float *c_out, const int32_t *t2s, int64_t S, int64_t C) {
    GRID_STRIDE(i, S * C) {
        int b = t2s[i / C];
        denoised[i] = b < 0 ? 0.f : __fadd_rn(__fmul_rn(c_skip[b], x_t[i]), __fmul_rn(c_out[b], to_f32(F[i])));
    }
}

template <typename A>
__global__ void edm_denoise_backward_kernel(A *dF, const float *ddenoised, const float *c_out, const int32_t *t2s,
                                            int64_t S, int64_t C) {
    GRID_STRIDE(i, S * C) {
        int b = t2s[i / C];
        dF[i] = from_f32<A>(b < 0 ? 0.f : __fmul_rn(c_out[b], ddenoised[i]));
    }
}

// Per row: term = mask·w·mean_c (pred−target)² in double (0 for padding and mask-0 rows, whose
// values are never read) and its mask (0 for padding).
__global__ void mse_row_kernel(double *term, double *masks, const float *pred, const float *target,
                               const float *weight, const float *mask, const int32_t *t2s, int64_t S, int64_t C,
                               int want_terms) {
    GRID_STRIDE(s, S) {
        int b = t2s[s];
        double m = b < 0 ? 0.0 : (double)mask[s], t = 0.0;
        if (want_terms && m != 0) {
            double sum = 0;
            for (int64_t c = 0; c < C; c++) {
                double d = (double)pred[s * C + c] - (double)target[s * C + c];
                sum += d * d;
            }
            t = m * (double)weight[b] * (sum / (double)C);
        }
        if (want_terms) term[s] = t;
        masks[s] = m;
    }
}

// The row-term reductions (cuda_common.h "masked per-row losses"), shared with the DDPM VB term.
__global__ void row_terms_total_kernel(const double *term, const double *masks, int64_t S, double *totals) {
    double t = 0, m = 0;
    for (int64_t s = threadIdx.x; s < S; s += blockDim.x) {
        if (term) t += term[s];
        m += masks[s];
    }
    t = block_sum<double>(t);
    m = block_sum<double>(m);
    if (threadIdx.x == 0) {
        totals[0] = t;
        totals[1] = m;
    }
}

__global__ void row_terms_loss_kernel(float *loss, const double *totals) {
    loss[0] = totals[1] != 0 ? (float)(totals[0] / totals[1]) : 0.f;
}

__global__ void row_terms_sample_kernel(float *sample_sum, float *sample_count, const double *term,
                                        const double *masks, const int32_t *t2s, int64_t S) {
    int b = blockIdx.x;
    double t = 0, m = 0;
    for (int64_t s = threadIdx.x; s < S; s += blockDim.x) {
        if (t2s[s] != b) continue;
        if (term) t += term[s];
        m += masks[s];
    }
    t = block_sum<double>(t);
    m = block_sum<double>(m);
    if (threadIdx.x == 0) {
        if (sample_sum) sample_sum[b] = (float)t;
        if (sample_count) sample_count[b] = (float)m;
    }
}

// dpred = dloss·mask·w·2(pred−target)/(C·Σmask), in double; 0 on padding and mask-0 rows.
__global__ void mse_backward_kernel(float *dpred, double dloss, const float *pred, const float *target,
                                    const float *weight, const float *mask, const int32_t *t2s, const double *totals,
                                    int64_t S, int64_t C) {
    double masks = totals[1];
    GRID_STRIDE(i, S * C) {
        int64_t s = i / C;
        int b = t2s[s];
        double m = b < 0 ? 0.0 : (double)mask[s];
        double coef = (m == 0 || masks == 0) ? 0.0 : dloss * m * (double)weight[b] * 2.0 / ((double)C * masks);
        dpred[i] = coef == 0 ? 0.f : (float)(coef * ((double)pred[i] - (double)target[i]));
    }
}

#define F32(t) ((t) ? (float *)(t)->data : (float *)NULL)
#define CF32(t) ((const float *)(t)->data)
#define T2S(t) ((const int32_t *)(t)->data)

extern "C" vfm_status cuda_edm_precondition(Tensor *c_skip, Tensor *c_out, Tensor *c_in, Tensor *c_noise,
                                            Tensor *weight, const Tensor *sigma, float sigma_data) {
    int64_t B = tensor_dim(sigma, 0);
    if (B == 0) return VFM_OK;
    CUDA_LAUNCH(edm_precondition_kernel, cuda_blocks(B), CUDA_THREADS, 0, F32(c_skip), F32(c_out), F32(c_in),
                F32(c_noise), F32(weight), CF32(sigma), B, (double)sigma_data);
    return VFM_OK;
}

extern "C" vfm_status cuda_edm_add_noise(Tensor *x_t, Tensor *net_in, const Tensor *x0, const Tensor *noise,
                                         const Tensor *sigma, const Tensor *c_in, const Tensor *tok2sample) {
    int64_t S = tensor_dim(x0, 0), C = tensor_dim(x0, 1);
    if (S * C == 0) return VFM_OK;
    const float *cin = net_in ? CF32(c_in) : NULL;
    if (!net_in || net_in->dtype == DT_F32)
        CUDA_LAUNCH(edm_add_noise_kernel<float>, cuda_blocks(S * C), CUDA_THREADS, 0, F32(x_t), F32(net_in), CF32(x0),
                    CF32(noise), CF32(sigma), cin, T2S(tok2sample), S, C);
    else
        FLOAT_DISPATCH("edm_add_noise", "net_in", net_in, A,
                       CUDA_LAUNCH(edm_add_noise_kernel<A>, cuda_blocks(S * C), CUDA_THREADS, 0, F32(x_t),
                                   (A *)net_in->data, CF32(x0), CF32(noise), CF32(sigma), cin, T2S(tok2sample), S, C));
    return VFM_OK;
}

extern "C" vfm_status cuda_edm_denoise(Tensor *denoised, const Tensor *x_t, const Tensor *F, const Tensor *c_skip,
                                       const Tensor *c_out, const Tensor *tok2sample) {
    int64_t S = tensor_dim(x_t, 0), C = tensor_dim(x_t, 1);
    if (S * C == 0) return VFM_OK;
    FLOAT_DISPATCH("edm_denoise", "F", F, A,
                   CUDA_LAUNCH(edm_denoise_kernel<A>, cuda_blocks(S * C), CUDA_THREADS, 0, F32(denoised), CF32(x_t),
                               (const A *)F->data, CF32(c_skip), CF32(c_out), T2S(tok2sample), S, C));
    return VFM_OK;
}

extern "C" vfm_status cuda_edm_denoise_backward(Tensor *dF, const Tensor *ddenoised, const Tensor *c_out,
                                                const Tensor *tok2sample) {
    int64_t S = tensor_dim(ddenoised, 0), C = tensor_dim(ddenoised, 1);
    if (S * C == 0) return VFM_OK;
    FLOAT_DISPATCH("edm_denoise_backward", "dF", dF, A,
                   CUDA_LAUNCH(edm_denoise_backward_kernel<A>, cuda_blocks(S * C), CUDA_THREADS, 0, (A *)dF->data,
                               CF32(ddenoised), CF32(c_out), T2S(tok2sample), S, C));
    return VFM_OK;
}

// Row terms and masks into scratch, then their totals (device doubles: term, mask).
static vfm_status mse_sums(double **term, double **masks, double **totals, const Tensor *pred,
                           const Tensor *target, const Tensor *weight, const Tensor *mask, const Tensor *tok2sample,
                           int want_terms) {
    int64_t S = tensor_dim(pred, 0), C = tensor_dim(pred, 1);
    double *buf = NULL;
    VFM_TRY(cuda_scratch(SCRATCH_REDUCE, (size_t)(2 * S + 1) * sizeof(double), (void **)&buf));
    VFM_TRY(cuda_scratch(SCRATCH_REDUCE2, 2 * sizeof(double), (void **)totals));
    *term = buf;
    *masks = buf + S;
    if (S > 0)
        CUDA_LAUNCH(mse_row_kernel, cuda_blocks(S), CUDA_THREADS, 0, *term, *masks, CF32(pred), CF32(target),
                    CF32(weight), CF32(mask), T2S(tok2sample), S, C, want_terms);
    CUDA_LAUNCH(row_terms_total_kernel, 1, ROW_TERMS_THREADS, 0, want_terms ? *term : NULL, *masks, S, *totals);
    return VFM_OK;
}

extern "C" vfm_status cuda_weighted_mse_forward(Tensor *loss, Tensor *sample_sum, Tensor *sample_count,
                                                const Tensor *pred, const Tensor *target, const Tensor *weight,
                                                const Tensor *mask, const Tensor *tok2sample) {
    double *term, *masks, *totals;
    VFM_TRY(mse_sums(&term, &masks, &totals, pred, target, weight, mask, tok2sample, 1));
    CUDA_LAUNCH(row_terms_loss_kernel, 1, 1, 0, F32(loss), totals);
    int64_t B = tensor_dim(weight, 0), S = tensor_dim(pred, 0);
    if ((sample_sum || sample_count) && B > 0)
        CUDA_LAUNCH(row_terms_sample_kernel, (unsigned)B, CUDA_THREADS, 0, F32(sample_sum), F32(sample_count), term,
                    masks, T2S(tok2sample), S);
    return VFM_OK;
}

extern "C" vfm_status cuda_weighted_mse_backward(Tensor *dpred, double dloss, const Tensor *pred, const Tensor *target,
                                                 const Tensor *weight, const Tensor *mask, const Tensor *tok2sample) {
    double *term, *masks, *totals;
    VFM_TRY(mse_sums(&term, &masks, &totals, pred, target, weight, mask, tok2sample, 0));
    int64_t S = tensor_dim(pred, 0), C = tensor_dim(pred, 1);
    if (S * C == 0) return VFM_OK;
    CUDA_LAUNCH(mse_backward_kernel, cuda_blocks(S * C), CUDA_THREADS, 0, F32(dpred), dloss, CF32(pred), CF32(target),
                CF32(weight), CF32(mask), T2S(tok2sample), totals, S, C);
    return VFM_OK;
}
