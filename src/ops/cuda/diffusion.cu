// CUDA backend of the flow-matching and DDPM ops: per-sample noise mixing (f32 math, x_t in the
// activation dtype; in f32 the CPU's bits: explicitly rounded operations in its order), the
// learned-sigma channel halves (copies), the DDPM variational-bound term with its gradient (double
// math per element as the CPU, row terms reduced in a fixed order with the weighted MSE's kernels)
// and the elementwise reverse step (double math; without noise the CPU's bits in f32). Padding
// rows (tok2sample < 0) are never read and get 0.
#include "cuda_common.h"
#include "ops/ddpm_vb_element.h"

#define CF32(t) ((const float *)(t)->data)
#define T2S(t) ((const int32_t *)(t)->data)

// x_t = a[b]·x0 + s[b]·noise
template <typename A>
__global__ void noise_mix_kernel(A *x_t, const float *x0, const float *noise, const float *a, const float *s,
                                 const int32_t *t2s, int64_t S, int64_t C) {
    GRID_STRIDE(i, S * C) {
        int b = t2s[i / C];
        float v = b < 0 ? 0.f : __fadd_rn(__fmul_rn(a[b], x0[i]), __fmul_rn(s[b], noise[i]));
        x_t[i] = from_f32<A>(v);
    }
}

extern "C" vfm_status cuda_noise_mix(Tensor *x_t, const Tensor *x0, const Tensor *noise, const Tensor *a,
                                     const Tensor *s, const Tensor *tok2sample) {
    int64_t S = tensor_dim(x0, 0), C = tensor_dim(x0, 1);
    if (S * C == 0) return VFM_OK;
    FLOAT_DISPATCH("noise_mix", "x_t", x_t, A,
                   CUDA_LAUNCH(noise_mix_kernel<A>, cuda_blocks(S * C), CUDA_THREADS, 0, (A *)x_t->data, CF32(x0),
                               CF32(noise), CF32(a), CF32(s), T2S(tok2sample), S, C));
    return VFM_OK;
}

// Rows of x [S, n·2g] ↔ first, second [S, n·g]: split = 1 copies out of x, else into x (a NULL
// second half writes zeros into x).
template <typename T>
__global__ void channel_halves_kernel(T *x, T *first, T *second, int64_t S, int64_t W, int64_t g, int split) {
    int64_t half = W / 2;
    GRID_STRIDE(i, S * half) {
        int64_t r = i / half, k = i % half, j = k / g, c = k % g;
        int64_t xf = r * W + j * 2 * g + c, xs = xf + g;
        if (split) {
            first[i] = x[xf];
            if (second) second[i] = x[xs];
        } else {
            x[xf] = first[i];
            x[xs] = second ? second[i] : from_f32<T>(0.f);
        }
    }
}

static vfm_status channel_halves(const char *op, Tensor *x, const Tensor *first, const Tensor *second, int64_t group,
                                 int split) {
    int64_t S = tensor_dim(x, 0), W = tensor_dim(x, 1);
    if (S * W == 0) return VFM_OK;
    FLOAT_DISPATCH(op, "x", x, T,
                   CUDA_LAUNCH(channel_halves_kernel<T>, cuda_blocks(S * W / 2), CUDA_THREADS, 0, (T *)x->data,
                               (T *)first->data, second ? (T *)second->data : (T *)NULL, S, W, group, split));
    return VFM_OK;
}

extern "C" vfm_status cuda_channel_halves_split(Tensor *first, Tensor *second, const Tensor *x, int64_t group) {
    return channel_halves("channel_halves_split", (Tensor *)x, first, second, group, 1);
}

extern "C" vfm_status cuda_channel_halves_merge(Tensor *x, const Tensor *first, const Tensor *second, int64_t group) {
    return channel_halves("channel_halves_merge", x, first, second, group, 0);
}

// ---- the variational bound (ops/ddpm_vb_element.h, the CPU's code) ----------------------------

// term[s] = mask·mean_c vb (when term), masks[s] = mask (0 on padding): the row terms of the reduction.
__global__ void vb_row_kernel(double *term, double *masks, const float *v, const float *eps, const float *x_t,
                              const float *x0, const float *coef, const float *mask, const int32_t *t2s, int64_t S,
                              int64_t C) {
    GRID_STRIDE(s, S) {
        int b = t2s[s];
        double m = b < 0 ? 0.0 : (double)mask[s], t = 0.0;
        if (term && m != 0) {
            double sum = 0;
            DdpmVbCoef k = DDPM_VB_COEF(coef + (int64_t)b * DDPM_VB_NCOEF);
            for (int64_t c = 0; c < C; c++) {
                int64_t i = s * C + c;
                sum += ddpm_vb_element(v[i], eps[i], x_t[i], x0[i], &k, NULL);
            }
            t = m * (sum / (double)C);
        }
        if (term) term[s] = t;
        masks[s] = m;
    }
}

// Row terms (or only the masks) and their totals into scratch.
static vfm_status vb_sums(double **term, double **masks, double **totals, const Tensor *v,
                          const Tensor *eps, const Tensor *x_t, const Tensor *x0, const Tensor *coef, const Tensor *mask,
                          const Tensor *tok2sample, int want_terms) {
    int64_t S = tensor_dim(v, 0), C = tensor_dim(v, 1);
    double *buf = NULL;
    VFM_TRY(cuda_scratch(SCRATCH_REDUCE, (size_t)(2 * S + 1) * sizeof(double), (void **)&buf));
    VFM_TRY(cuda_scratch(SCRATCH_REDUCE2, 2 * sizeof(double), (void **)totals));
    *term = want_terms ? buf : NULL;
    *masks = buf + S;
    if (S > 0)
        CUDA_LAUNCH(vb_row_kernel, cuda_blocks(S), CUDA_THREADS, 0, *term, *masks, CF32(v), CF32(eps), CF32(x_t),
                    CF32(x0), CF32(coef), CF32(mask), T2S(tok2sample), S, C);
    CUDA_LAUNCH(row_terms_total_kernel, 1, ROW_TERMS_THREADS, 0, *term, *masks, S, *totals);
    return VFM_OK;
}

extern "C" vfm_status cuda_ddpm_vb_forward(Tensor *loss, Tensor *sample_sum, const Tensor *v, const Tensor *eps,
                                           const Tensor *x_t, const Tensor *x0, const Tensor *coef, const Tensor *mask,
                                           const Tensor *tok2sample) {
    double *term, *masks, *totals;
    VFM_TRY(vb_sums(&term, &masks, &totals, v, eps, x_t, x0, coef, mask, tok2sample, 1));
    CUDA_LAUNCH(row_terms_loss_kernel, 1, 1, 0, (float *)loss->data, totals);
    int64_t B = tensor_dim(coef, 0), S = tensor_dim(v, 0);
    if (sample_sum && B > 0)
        CUDA_LAUNCH(row_terms_sample_kernel, (unsigned)B, CUDA_THREADS, 0, (float *)sample_sum->data, NULL, term, masks,
                    T2S(tok2sample), S);
    return VFM_OK;
}

// dv = dloss·mask·∂vb/∂v/(C·Σmask); 0 on padding and mask-0 rows.
__global__ void vb_backward_kernel(float *dv, double dloss, const float *v, const float *eps, const float *x_t,
                                   const float *x0, const float *coef, const float *mask, const int32_t *t2s,
                                   const double *totals, int64_t S, int64_t C) {
    double masks = totals[1];
    GRID_STRIDE(i, S * C) {
        int64_t s = i / C;
        int b = t2s[s];
        double m = b < 0 ? 0.0 : (double)mask[s];
        double coefficient = (m == 0 || masks == 0) ? 0.0 : dloss * m / ((double)C * masks);
        double g = 0;
        if (coefficient != 0) {
            DdpmVbCoef k = DDPM_VB_COEF(coef + (int64_t)b * DDPM_VB_NCOEF);
            ddpm_vb_element(v[i], eps[i], x_t[i], x0[i], &k, &g);
        }
        dv[i] = (float)(coefficient * g);
    }
}

extern "C" vfm_status cuda_ddpm_vb_backward(Tensor *dv, double dloss, const Tensor *v, const Tensor *eps,
                                            const Tensor *x_t, const Tensor *x0, const Tensor *coef, const Tensor *mask,
                                            const Tensor *tok2sample) {
    double *term, *masks, *totals;
    VFM_TRY(vb_sums(&term, &masks, &totals, v, eps, x_t, x0, coef, mask, tok2sample, 0));
    int64_t S = tensor_dim(v, 0), C = tensor_dim(v, 1);
    if (S * C == 0) return VFM_OK;
    CUDA_LAUNCH(vb_backward_kernel, cuda_blocks(S * C), CUDA_THREADS, 0, (float *)dv->data, dloss, CF32(v), CF32(eps),
                CF32(x_t), CF32(x0), CF32(coef), CF32(mask), T2S(tok2sample), totals, S, C);
    return VFM_OK;
}

// ---- the reverse step -------------------------------------------------------------------------

// The step's coefficients by value (a kernel argument).
struct StepCoef {
    double recip_ac, recipm1_ac, c_x0, c_xt, c_eps, min_log, max_log, fixed_logvar;
};

template <typename T>
__global__ void ddpm_step_kernel(T *out, const T *x, const T *eps, const T *v, const T *z, StepCoef c, int64_t n) {
    GRID_STRIDE(i, n) {
        double xi = to_f32(x[i]), ei = to_f32(eps[i]);
        double pred_x0 = __dsub_rn(__dmul_rn(c.recip_ac, xi), __dmul_rn(c.recipm1_ac, ei));
        double mean = __dadd_rn(__dadd_rn(__dmul_rn(c.c_x0, pred_x0), __dmul_rn(c.c_xt, xi)), __dmul_rn(c.c_eps, ei));
        if (z) {
            double logvar = c.fixed_logvar;
            if (v) {
                double f = 0.5 * ((double)to_f32(v[i]) + 1.0);
                logvar = f * c.max_log + (1.0 - f) * c.min_log;
            }
            mean += exp(0.5 * logvar) * (double)to_f32(z[i]);
        }
        out[i] = from_f32<T>((float)mean);
    }
}

extern "C" vfm_status cuda_ddpm_step(Tensor *out, const Tensor *x, const Tensor *eps, const Tensor *v, const Tensor *z,
                                     const DdpmStepCoef *c) {
    int64_t n = tensor_numel(x);
    if (n == 0) return VFM_OK;
    StepCoef k = {c->recip_ac, c->recipm1_ac, c->c_x0, c->c_xt, c->c_eps, c->min_log, c->max_log, c->fixed_logvar};
    FLOAT_DISPATCH("ddpm_step", "x", x, T,
                   CUDA_LAUNCH(ddpm_step_kernel<T>, cuda_blocks(n), CUDA_THREADS, 0, (T *)out->data, (const T *)x->data,
                               (const T *)eps->data, v ? (const T *)v->data : (const T *)NULL,
                               z ? (const T *)z->data : (const T *)NULL, k, n));
    return VFM_OK;
}
