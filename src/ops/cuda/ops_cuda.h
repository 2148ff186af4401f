/* Declarations of the CUDA backend (the .cu files of src/ops/cuda, extern "C"), present when vfm is
 * built with nvcc (VFM_CUDA). Each cuda_<op> takes the same arguments as its op in ops.h, already
 * checked by the dispatcher (dtypes by ops.h's mixed-precision contract), and works on GPU tensors
 * on the ops' stream. Also: the stream, the attention implementation switch, the library report. */
#ifndef VFM_OPS_CUDA_H
#define VFM_OPS_CUDA_H

#include "../ops.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CUDA_DECL(name, params) vfm_status cuda_##name params;

CUDA_DECL(linear_forward, (Tensor *y, Tensor *pre, const Tensor *x, const Tensor *w, const Tensor *b, Activation act))
CUDA_DECL(linear_backward, (Tensor *dx, Tensor *dw, Tensor *db, Tensor *dy, const Tensor *x, const Tensor *w,
                            const Tensor *pre, Activation act, int dx_accumulate))
CUDA_DECL(gelu_forward, (Tensor *y, const Tensor *x, Activation kind))
CUDA_DECL(gelu_backward, (Tensor *dx, const Tensor *dy, const Tensor *x, Activation kind))
CUDA_DECL(silu_forward, (Tensor *y, const Tensor *x))
CUDA_DECL(silu_backward, (Tensor *dx, const Tensor *dy, const Tensor *x))
CUDA_DECL(swiglu_forward, (Tensor *y, const Tensor *x))
CUDA_DECL(swiglu_backward, (Tensor *dx, const Tensor *dy, const Tensor *x))
CUDA_DECL(layernorm_modulate_forward, (Tensor *y, Tensor *mean, Tensor *rstd, const Tensor *x, const Tensor *shift,
                                       const Tensor *scale, const Tensor *tok2sample, float eps))
CUDA_DECL(layernorm_modulate_backward, (Tensor *dx, Tensor *dshift, Tensor *dscale, const Tensor *dy, const Tensor *x,
                                        const Tensor *mean, const Tensor *rstd, const Tensor *scale,
                                        const Tensor *tok2sample))
CUDA_DECL(gated_residual_forward, (Tensor *out, const Tensor *x, const Tensor *y, const Tensor *gate,
                                   const Tensor *tok2sample))
CUDA_DECL(gated_residual_backward, (Tensor *dx, Tensor *dy, Tensor *dgate, const Tensor *dout, const Tensor *y,
                                    const Tensor *gate, const Tensor *tok2sample))
CUDA_DECL(rmsnorm_forward, (Tensor *y, Tensor *rstd, const Tensor *x, const Tensor *w, float eps))
CUDA_DECL(rmsnorm_backward, (Tensor *dx, Tensor *dw, const Tensor *dy, const Tensor *x, const Tensor *rstd,
                             const Tensor *w))
CUDA_DECL(attention_forward, (Tensor *o, Tensor *lse, const Tensor *q, const Tensor *k, const Tensor *v,
                              const VarlenLayout *layout))
CUDA_DECL(attention_backward, (Tensor *dq, Tensor *dk, Tensor *dv, const Tensor *dout, const Tensor *q,
                               const Tensor *k, const Tensor *v, const Tensor *o, const Tensor *lse,
                               const VarlenLayout *layout))
CUDA_DECL(timestep_embedding_forward, (Tensor *out, const Tensor *t, int flip_sin_to_cos, float shift,
                                       float max_period))
CUDA_DECL(timestep_embedding_backward, (Tensor *dt, const Tensor *dout, const Tensor *t, int flip_sin_to_cos,
                                        float shift, float max_period))
CUDA_DECL(pos_embed_3d_add, (Tensor *x, const Tensor *pos, const Tensor *tok2sample))
CUDA_DECL(patchify, (Tensor *tokens, const Tensor *latent, int pt, int ph, int pw))
CUDA_DECL(unpatchify, (Tensor *latent, const Tensor *tokens, int pt, int ph, int pw))
CUDA_DECL(edm_precondition, (Tensor *c_skip, Tensor *c_out, Tensor *c_in, Tensor *c_noise, Tensor *weight,
                             const Tensor *sigma, float sigma_data))
CUDA_DECL(edm_add_noise, (Tensor *x_t, Tensor *net_in, const Tensor *x0, const Tensor *noise, const Tensor *sigma,
                          const Tensor *c_in, const Tensor *tok2sample))
CUDA_DECL(edm_denoise, (Tensor *denoised, const Tensor *x_t, const Tensor *F, const Tensor *c_skip,
                        const Tensor *c_out, const Tensor *tok2sample))
CUDA_DECL(edm_denoise_backward, (Tensor *dF, const Tensor *ddenoised, const Tensor *c_out, const Tensor *tok2sample))
CUDA_DECL(weighted_mse_forward, (Tensor *loss, Tensor *sample_sum, Tensor *sample_count, const Tensor *pred,
                                 const Tensor *target, const Tensor *weight, const Tensor *mask,
                                 const Tensor *tok2sample))
CUDA_DECL(weighted_mse_backward, (Tensor *dpred, double dloss, const Tensor *pred, const Tensor *target,
                                  const Tensor *weight, const Tensor *mask, const Tensor *tok2sample))
CUDA_DECL(adamw_step, (Tensor *param, Tensor *m, Tensor *v, const Tensor *grad, const AdamWHyper *h))
CUDA_DECL(sum_squares, (double *out, const Tensor *x))
CUDA_DECL(randn_fill, (Tensor *out, uint64_t seed, uint32_t stream, uint32_t step, uint64_t uid,
                       uint64_t element_offset, float std))
CUDA_DECL(count_nonfinite, (int64_t *count, const Tensor *x))
CUDA_DECL(fill, (Tensor *x, double value))
CUDA_DECL(convert, (Tensor *dst, const Tensor *src))
CUDA_DECL(add, (Tensor *out, const Tensor *a, const Tensor *b))
CUDA_DECL(scale, (Tensor *x, double alpha))
CUDA_DECL(axpy, (Tensor *y, double alpha, const Tensor *x))
CUDA_DECL(ema_update, (Tensor *ema, const Tensor *param, double decay))
CUDA_DECL(columns_get, (Tensor *out, const Tensor *in, int64_t col0))
CUDA_DECL(columns_add, (Tensor *out, const Tensor *in, int64_t col0))

/* The CUDA stream every op is issued on (a cudaStream_t; NULL = the legacy default stream, the
 * start value). Ops are asynchronous on it except those that return a host value. */
void cuda_ops_set_stream(void *stream);
void *cuda_ops_get_stream(void);

/* Which attention implementation the CUDA ops use. AUTO (the start value, or VFM_ATTENTION=auto):
 * cuDNN's fused SDPA for bf16, the reference kernel for f32 and for shapes cuDNN declines (each
 * declined shape bucket logged once). REFERENCE (VFM_ATTENTION=reference): always the reference
 * kernel. CUDNN (VFM_ATTENTION=cudnn): cuDNN only, an error where it cannot run (tests use it to
 * prove cuDNN ran). */
typedef enum { CUDA_ATTN_AUTO = 0, CUDA_ATTN_REFERENCE = 1, CUDA_ATTN_CUDNN = 2 } CudaAttnImpl;
void cuda_attention_set_impl(CudaAttnImpl impl);
CudaAttnImpl cuda_attention_get_impl(void);

/* What ops_describe_libraries returns (cuda_libs.cu). */
const char *cuda_describe_libraries(void);

#ifdef __cplusplus
}
#endif
#endif
