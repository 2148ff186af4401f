/* Declarations of the CPU backend: each op exists as cpu_<op>_f32 and cpu_<op>_f64 (see real.h)
 * with the same arguments as the public op in ops.h. Arguments are already checked by the
 * dispatcher (ops_*.c), so these functions only compute. */
#ifndef VFM_OPS_CPU_H
#define VFM_OPS_CPU_H

#include "../ops.h"

#define CPU_DECL(name, params)              \
    vfm_status cpu_##name##_f32 params;     \
    vfm_status cpu_##name##_f64 params;

CPU_DECL(linear_forward, (Tensor *y, Tensor *pre, const Tensor *x, const Tensor *w, const Tensor *b, Activation act))
CPU_DECL(linear_backward, (Tensor *dx, Tensor *dw, Tensor *db, Tensor *dy, const Tensor *x, const Tensor *w,
                           const Tensor *pre, Activation act, int dx_accumulate))
CPU_DECL(gelu_forward, (Tensor *y, const Tensor *x, Activation kind))
CPU_DECL(gelu_backward, (Tensor *dx, const Tensor *dy, const Tensor *x, Activation kind))
CPU_DECL(silu_forward, (Tensor *y, const Tensor *x))
CPU_DECL(silu_backward, (Tensor *dx, const Tensor *dy, const Tensor *x))
CPU_DECL(swiglu_forward, (Tensor *y, const Tensor *x))
CPU_DECL(swiglu_backward, (Tensor *dx, const Tensor *dy, const Tensor *x))
CPU_DECL(layernorm_modulate_forward, (Tensor *y, Tensor *mean, Tensor *rstd, const Tensor *x, const Tensor *shift,
                                      const Tensor *scale, const Tensor *tok2sample, float eps))
CPU_DECL(layernorm_modulate_backward, (Tensor *dx, Tensor *dshift, Tensor *dscale, const Tensor *dy, const Tensor *x,
                                       const Tensor *mean, const Tensor *rstd, const Tensor *scale,
                                       const Tensor *tok2sample))
CPU_DECL(gated_residual_forward, (Tensor *out, const Tensor *x, const Tensor *y, const Tensor *gate,
                                  const Tensor *tok2sample))
CPU_DECL(gated_residual_backward, (Tensor *dx, Tensor *dy, Tensor *dgate, const Tensor *dout, const Tensor *y,
                                   const Tensor *gate, const Tensor *tok2sample))
CPU_DECL(rmsnorm_forward, (Tensor *y, Tensor *rstd, const Tensor *x, const Tensor *w, float eps))
CPU_DECL(rmsnorm_backward, (Tensor *dx, Tensor *dw, const Tensor *dy, const Tensor *x, const Tensor *rstd,
                            const Tensor *w))
CPU_DECL(attention_forward, (Tensor *o, Tensor *lse, const Tensor *q, const Tensor *k, const Tensor *v,
                             const VarlenLayout *layout))
CPU_DECL(attention_backward, (Tensor *dq, Tensor *dk, Tensor *dv, const Tensor *dout, const Tensor *q,
                              const Tensor *k, const Tensor *v, const Tensor *o, const Tensor *lse,
                              const VarlenLayout *layout))
CPU_DECL(attention_merge, (Tensor *o, Tensor *lse, const Tensor *o_part, const Tensor *lse_part,
                           const VarlenLayout *layout))
CPU_DECL(timestep_embedding_forward, (Tensor *out, const Tensor *t, int flip_sin_to_cos, float shift,
                                      float max_period))
CPU_DECL(timestep_embedding_backward, (Tensor *dt, const Tensor *dout, const Tensor *t, int flip_sin_to_cos,
                                       float shift, float max_period))
CPU_DECL(pos_embed_3d_add, (Tensor *x, const Tensor *pos, const Tensor *tok2sample))
CPU_DECL(patchify, (Tensor *tokens, const Tensor *latent, int pt, int ph, int pw))
CPU_DECL(unpatchify, (Tensor *latent, const Tensor *tokens, int pt, int ph, int pw))
CPU_DECL(edm_precondition, (Tensor *c_skip, Tensor *c_out, Tensor *c_in, Tensor *c_noise, Tensor *weight,
                            const Tensor *sigma, float sigma_data))
CPU_DECL(edm_add_noise, (Tensor *x_t, Tensor *net_in, const Tensor *x0, const Tensor *noise, const Tensor *sigma,
                         const Tensor *c_in, const Tensor *tok2sample))
CPU_DECL(edm_denoise, (Tensor *denoised, const Tensor *x_t, const Tensor *F, const Tensor *c_skip,
                       const Tensor *c_out, const Tensor *tok2sample))
CPU_DECL(edm_denoise_backward, (Tensor *dF, const Tensor *ddenoised, const Tensor *c_out, const Tensor *tok2sample))
CPU_DECL(weighted_mse_forward, (Tensor *loss, Tensor *sample_sum, Tensor *sample_count, const Tensor *pred,
                                const Tensor *target, const Tensor *weight, const Tensor *mask,
                                const Tensor *tok2sample))
CPU_DECL(weighted_mse_backward, (Tensor *dpred, double dloss, const Tensor *pred, const Tensor *target,
                                 const Tensor *weight, const Tensor *mask, const Tensor *tok2sample))
CPU_DECL(adamw_step, (Tensor *param, Tensor *m, Tensor *v, const Tensor *grad, const AdamWHyper *h))
CPU_DECL(sum_squares, (double *out, const Tensor *x))
CPU_DECL(randn_fill, (Tensor *out, uint64_t seed, uint32_t stream, uint32_t step, uint64_t uid,
                      uint64_t element_offset, float std))
CPU_DECL(count_nonfinite, (int64_t *count, const Tensor *x))
CPU_DECL(fill, (Tensor *x, double value))
CPU_DECL(add, (Tensor *out, const Tensor *a, const Tensor *b))
CPU_DECL(scale, (Tensor *x, double alpha))
CPU_DECL(axpy, (Tensor *y, double alpha, const Tensor *x))
CPU_DECL(ema_update, (Tensor *ema, const Tensor *param, double decay))
CPU_DECL(columns_get, (Tensor *out, const Tensor *in, int64_t col0))
CPU_DECL(columns_add, (Tensor *out, const Tensor *in, int64_t col0))

#endif
