/* The parameter list of every op that a backend implements, written once: the CPU backend
 * (cpu/ops_cpu.h, as cpu_<op>_f32 / cpu_<op>_f64) and the CUDA backend (cuda/ops_cuda.h, as
 * cuda_<op>) declare their functions from it, so the backends cannot drift from each other. The
 * arguments are those of the public op in ops.h, already checked by its dispatcher. */
#ifndef VFM_OPS_BACKEND_H
#define VFM_OPS_BACKEND_H

#include "ops.h"

/* X(name, (parameters)) for each op */
#define OPS_BACKEND_LIST(X) \
    X(linear_forward, (Tensor *y, Tensor *pre, const Tensor *x, const Tensor *w, const Tensor *b, Activation act)) \
    X(linear_backward, (Tensor *dx, Tensor *dw, Tensor *db, Tensor *dy, const Tensor *x, const Tensor *w, \
          const Tensor *pre, Activation act, int dx_accumulate)) \
    X(gelu_forward, (Tensor *y, const Tensor *x, Activation kind)) \
    X(gelu_backward, (Tensor *dx, const Tensor *dy, const Tensor *x, Activation kind)) \
    X(silu_forward, (Tensor *y, const Tensor *x)) \
    X(silu_backward, (Tensor *dx, const Tensor *dy, const Tensor *x)) \
    X(swiglu_forward, (Tensor *y, const Tensor *x)) \
    X(swiglu_backward, (Tensor *dx, const Tensor *dy, const Tensor *x)) \
    X(layernorm_modulate_forward, (Tensor *y, Tensor *mean, Tensor *rstd, const Tensor *x, const Tensor *shift, \
          const Tensor *scale, const Tensor *tok2sample, float eps)) \
    X(layernorm_modulate_backward, (Tensor *dx, Tensor *dshift, Tensor *dscale, const Tensor *dy, const Tensor *x, \
          const Tensor *mean, const Tensor *rstd, const Tensor *scale, const Tensor *tok2sample)) \
    X(gated_residual_forward, (Tensor *out, const Tensor *x, const Tensor *y, const Tensor *gate, \
          const Tensor *tok2sample)) \
    X(gated_residual_backward, (Tensor *dx, Tensor *dy, Tensor *dgate, const Tensor *dout, const Tensor *y, \
          const Tensor *gate, const Tensor *tok2sample)) \
    X(rmsnorm_forward, (Tensor *y, Tensor *rstd, const Tensor *x, const Tensor *w, float eps)) \
    X(rmsnorm_backward, (Tensor *dx, Tensor *dw, const Tensor *dy, const Tensor *x, const Tensor *rstd, \
          const Tensor *w)) \
    X(attention_forward, (Tensor *o, Tensor *lse, const Tensor *q, const Tensor *k, const Tensor *v, \
          const VarlenLayout *layout)) \
    X(attention_backward, (Tensor *dq, Tensor *dk, Tensor *dv, const Tensor *dout, const Tensor *q, \
          const Tensor *k, const Tensor *v, const Tensor *o, const Tensor *lse, const VarlenLayout *layout)) \
    X(attention_merge, (Tensor *o, Tensor *lse, const Tensor *o_part, const Tensor *lse_part, \
          const VarlenLayout *layout)) \
    X(timestep_embedding_forward, (Tensor *out, const Tensor *t, int flip_sin_to_cos, float shift, \
          float max_period)) \
    X(timestep_embedding_backward, (Tensor *dt, const Tensor *dout, const Tensor *t, int flip_sin_to_cos, \
          float shift, float max_period)) \
    X(pos_embed_3d_add, (Tensor *x, const Tensor *pos, const Tensor *tok2sample)) \
    X(pos_embed_2d_add, (Tensor *x, const Tensor *pos, const Tensor *tok2sample)) \
    X(embedding_forward, (Tensor *out, const Tensor *table, const Tensor *idx)) \
    X(embedding_backward, (Tensor *dtable, const Tensor *dout, const Tensor *idx)) \
    X(gather_columns, (Tensor *out, const Tensor *in, const Tensor *idx)) \
    X(gather_columns_backward, (Tensor *din, const Tensor *dout, const Tensor *idx)) \
    X(patchify, (Tensor *tokens, const Tensor *latent, int pt, int ph, int pw)) \
    X(unpatchify, (Tensor *latent, const Tensor *tokens, int pt, int ph, int pw)) \
    X(edm_precondition, (Tensor *c_skip, Tensor *c_out, Tensor *c_in, Tensor *c_noise, Tensor *weight, \
          const Tensor *sigma, float sigma_data)) \
    X(edm_add_noise, (Tensor *x_t, Tensor *net_in, const Tensor *x0, const Tensor *noise, const Tensor *sigma, \
          const Tensor *c_in, const Tensor *tok2sample)) \
    X(edm_denoise, (Tensor *denoised, const Tensor *x_t, const Tensor *F, const Tensor *c_skip, \
          const Tensor *c_out, const Tensor *tok2sample)) \
    X(edm_denoise_backward, (Tensor *dF, const Tensor *ddenoised, const Tensor *c_out, const Tensor *tok2sample)) \
    X(weighted_mse_forward, (Tensor *loss, Tensor *sample_sum, Tensor *sample_count, const Tensor *pred, \
          const Tensor *target, const Tensor *weight, const Tensor *mask, const Tensor *tok2sample)) \
    X(weighted_mse_backward, (Tensor *dpred, double dloss, const Tensor *pred, const Tensor *target, \
          const Tensor *weight, const Tensor *mask, const Tensor *tok2sample)) \
    X(noise_mix, (Tensor *x_t, const Tensor *x0, const Tensor *noise, const Tensor *a, const Tensor *s, \
          const Tensor *tok2sample)) \
    X(channel_halves_split, (Tensor *first, Tensor *second, const Tensor *x, int64_t group)) \
    X(channel_halves_merge, (Tensor *x, const Tensor *first, const Tensor *second, int64_t group)) \
    X(ddpm_vb_forward, (Tensor *loss, Tensor *sample_sum, const Tensor *v, const Tensor *eps, const Tensor *x_t, \
          const Tensor *x0, const Tensor *coef, const Tensor *mask, const Tensor *tok2sample)) \
    X(ddpm_vb_backward, (Tensor *dv, double dloss, const Tensor *v, const Tensor *eps, const Tensor *x_t, \
          const Tensor *x0, const Tensor *coef, const Tensor *mask, const Tensor *tok2sample)) \
    X(ddpm_step, (Tensor *out, const Tensor *x, const Tensor *eps, const Tensor *v, const Tensor *z, \
          const DdpmStepCoef *c)) \
    X(adamw_step, (Tensor *param, Tensor *m, Tensor *v, const Tensor *grad, const AdamWHyper *h)) \
    X(sum_squares, (double *out, const Tensor *x)) \
    X(randn_fill, (Tensor *out, uint64_t seed, uint32_t stream, uint32_t step, uint64_t uid, \
          uint64_t element_offset, float std)) \
    X(count_nonfinite, (int64_t *count, const Tensor *x)) \
    X(fill, (Tensor *x, double value)) \
    X(add, (Tensor *out, const Tensor *a, const Tensor *b)) \
    X(scale, (Tensor *x, double alpha)) \
    X(axpy, (Tensor *y, double alpha, const Tensor *x)) \
    X(ema_update, (Tensor *ema, const Tensor *param, double decay)) \
    X(ema_update_if, (Tensor *ema, const Tensor *param, double decay, const Tensor *step_state)) \
    X(f64_accumulate, (Tensor *acc, int64_t at, const Tensor *x, int n)) \
    X(sum_squares_into, (Tensor *acc, int64_t at, const Tensor *x)) \
    X(f64_sum_into, (Tensor *dst, int64_t at, const Tensor *src, int64_t n)) \
    X(f64_div, (Tensor *buf, int64_t at, double divisor)) \
    X(step_decide, (Tensor *state, const StepDecideHyper *h)) \
    X(columns_get, (Tensor *out, const Tensor *in, int64_t col0)) \
    X(columns_add, (Tensor *out, const Tensor *in, int64_t col0)) \
    X(rmsnorm_modulate_forward, (Tensor *y, Tensor *rstd, const Tensor *x, const Tensor *w, const Tensor *shift, \
          const Tensor *scale, const Tensor *tok2sample, float eps)) \
    X(rmsnorm_modulate_backward, (Tensor *dx, Tensor *dw, Tensor *dshift, Tensor *dscale, const Tensor *dy, \
          const Tensor *x, const Tensor *rstd, const Tensor *w, const Tensor *scale, const Tensor *tok2sample)) \
    X(pos_embed_learned_forward, (Tensor *out, const Tensor *tab_t, const Tensor *tab_h, const Tensor *tab_w, \
          const Tensor *pos, const Tensor *tok2sample)) \
    X(pos_embed_learned_backward, (Tensor *dtab_t, Tensor *dtab_h, Tensor *dtab_w, const Tensor *dout, \
          const Tensor *pos, const Tensor *tok2sample)) \
    X(moe_softmax, (Tensor *probs, Tensor *lse, const Tensor *logits, const Tensor *tok2sample)) \
    X(moe_topk_mask, (Tensor *masked, const Tensor *scores, const Tensor *tok2sample, int k)) \
    X(moe_topc, (Tensor *slot_tok, Tensor *slot_w, Tensor *tok_slot, const Tensor *scores, const Tensor *cu_tok, \
          const Tensor *cu_cap)) \
    X(moe_permute, (Tensor *xe, const Tensor *x, const Tensor *slot_tok)) \
    X(moe_combine, (Tensor *y, const Tensor *ye, const Tensor *w, const Tensor *tok_slot)) \
    X(moe_combine_backward, (Tensor *dye, Tensor *dw, const Tensor *dy, const Tensor *ye, const Tensor *w, \
          const Tensor *slot_tok)) \
    X(moe_router_losses, (Tensor *out, const Tensor *probs, const Tensor *lse, const Tensor *masked, \
          const Tensor *tok2sample, int k)) \
    X(moe_router_backward, (Tensor *dlogits, const Tensor *dw, const Tensor *tok_slot, const Tensor *probs, \
          const Tensor *lse, const Tensor *masked, const Tensor *tok2sample, int k, float aux, float z)) \
    X(rope_3d, (Tensor *y, const Tensor *x, const Tensor *pos, float theta, int inverse)) \
    X(rmsnorm_sumsq, (Tensor *sumsq, const Tensor *x)) \
    X(rmsnorm_split_forward, (Tensor *y, Tensor *rstd, const Tensor *x, const Tensor *w, const Tensor *sumsq, \
          int64_t n, float eps)) \
    X(rmsnorm_dot, (Tensor *dot, const Tensor *dy, const Tensor *x, const Tensor *w)) \
    X(rmsnorm_split_backward, (Tensor *dx, Tensor *dw, const Tensor *dy, const Tensor *x, const Tensor *rstd, \
          const Tensor *w, const Tensor *dot, int64_t n))

#endif
