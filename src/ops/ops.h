/* The op API: every computation on tensor data that model, diffusion, trainer and parallel
 * code needs, at the granularity a GPU wants (fused layernorm+modulate, gate+residual, linear
 * with bias/GELU epilogue, varlen attention returning its log-sum-exp). Each op dispatches on
 * the device of its tensors: cpu/ is the fp32 oracle (also built in f64 for gradient checks),
 * cuda/ the bf16 fast path. Model code never loops over tensor data itself.
 *
 * Conventions (docs/ops.md says more):
 *  - Shapes are written [rows, cols] in the comment of each argument. S = tokens of a pack
 *    (padding rows included), B = samples in the pack, D = hidden size, C = channels.
 *  - tok2sample: i32 [S], the pack's token -> sample map; -1 marks a padding row. Per-token
 *    ops write 0 to padding rows and never read them, so NaN there changes nothing.
 *  - Gradients of parameters ACCUMULATE (+=) so micro-batches add up; gradients of
 *    activations are OVERWRITTEN (=) unless the argument says "(+=)".
 *  - On the CPU all floating tensors of one call share one dtype: f32, or f64 (the double
 *    build used by the finite-difference tests). Index tensors are i32.
 *  - On CUDA (the mixed-precision contract) every float argument is of one of two kinds:
 *      ACT  the activation side: bf16, or f32 (then the whole call runs in f32: tests, debugging).
 *           All ACT arguments of one call share the dtype of the op's first ACT input.
 *      F32  always f32 on CUDA, marked "[f32]" below: statistics (LayerNorm mean/rstd, RMSNorm
 *           rstd, attention lse), per-sample scalars [B] (σ, t, c_skip/c_out/c_in/c_noise, loss
 *           weights), the loss, its mask and per-sample sums, the EDM math (x0, noise, x_t,
 *           denoised and its gradient), parameter gradients (linear dw/db, RMSNorm dw, the class
 *           table's dtable: an fp32 buffer that accumulates over micro-batches) and AdamW's param
 *           (fp32 master), m, v, grad.
 *    Kernels read ACT values as f32, compute and accumulate in f32 (or f64 where the CPU does), and
 *    round once on the store. On the CPU "[f32]" arguments simply have the call's dtype. A wrong
 *    dtype is an error naming the op and the argument.
 *  - Reductions run in a fixed order that does not depend on the thread count (no OpenMP
 *    reduction clauses; on CUDA no floating-point atomics): the same inputs give the same bits. */
#ifndef VFM_OPS_H
#define VFM_OPS_H

#include <stdint.h>

#include "../core/error.h"
#include "../core/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Threads used by CPU ops and OpenBLAS (pinned, so results are reproducible). */
void ops_set_threads(int n);
int ops_get_threads(void);
/* Call first thing in main(): when OpenBLAS did not know this CPU and took its slowest (Prescott)
 * kernels although the CPU has AVX2 or AVX-512, runs the program again (execv of argv) with
 * OPENBLAS_CORETYPE naming the kernels it supports (ops_blas_core.c). Returns when nothing is to
 * be done, when OPENBLAS_CORETYPE is already set, or when the exec failed. */
void ops_blas_pick_core(char **argv);
/* The GPU libraries the CUDA ops load at run time (cuBLASLt, cuDNN), one line each: the file and
 * version loaded, or why not; "" in a build without CUDA. Tries to load them. */
const char *ops_describe_libraries(void);
/* The attention implementation of the CUDA ops by name: "auto" (cuDNN, the reference kernel where
 * cuDNN cannot), "reference", "cudnn" (an error where cuDNN cannot); VFM_ERR_USAGE for another
 * name. Nothing to choose in a build without CUDA (VFM_OK). */
vfm_status ops_set_attention_impl(const char *name);
/* On CUDA the lookup and gather ops (op_embedding_*, op_gather_columns*) check their indices on the
 * GPU without the host waiting: an index outside gives 0 (its gradient is dropped) and the first
 * one is kept; this reports it (VFM_ERR_SHAPE naming the op, the position and the value) and
 * clears it, waiting for the GPU. VFM_OK on the CPU, whose ops refuse such an index at once. */
vfm_status ops_check_index_errors(void);
/* Attention calls (forward or backward) the CUDA reference kernel has served so far; 0 without CUDA. */
int64_t ops_attention_reference_calls(void);
/* The CUDA stream the ops are issued on (a cudaStream_t; NULL = the legacy default stream, and in a
 * build without CUDA): what copies that overlap compute order themselves against, by events. */
void *ops_stream(void);

typedef enum { ACT_NONE = 0, ACT_GELU_ERF = 1, ACT_GELU_TANH = 2 } Activation;

/* ---- linear --------------------------------------------------------------------------- */
/* y[N,out] = act(pre), pre[N,out] = x[N,in]·w[out,in]ᵀ + b[out]; all ACT (bf16 weights on CUDA).
 * b may be NULL. pre is required when act != ACT_NONE (the backward needs it), else NULL. */
vfm_status op_linear_forward(Tensor *y, Tensor *pre, const Tensor *x, const Tensor *w, const Tensor *b,
                             Activation act);
/* From dy[N,out]: dx[N,in] = dpre·w (overwritten, or added when dx_accumulate), dw[out,in] +=
 * dpreᵀ·x, db[out] += Σ_rows dpre, where dpre = dy·act'(pre). When act != ACT_NONE, dy is
 * overwritten with dpre. dx, dw, db may each be NULL (not needed / frozen / no bias).
 * dw, db [f32]; dx, dy, x, w, pre ACT. */
vfm_status op_linear_backward(Tensor *dx, Tensor *dw, Tensor *db, Tensor *dy, const Tensor *x, const Tensor *w,
                              const Tensor *pre, Activation act, int dx_accumulate);

/* ---- pointwise activations ------------------------------------------------------------ */
/* y = gelu(x), kind ACT_GELU_ERF (exact) or ACT_GELU_TANH; any shape, y and x same shape.
 * All pointwise activations: every argument ACT. */
vfm_status op_gelu_forward(Tensor *y, const Tensor *x, Activation kind);
vfm_status op_gelu_backward(Tensor *dx, const Tensor *dy, const Tensor *x, Activation kind);
/* y = x·sigmoid(x) */
vfm_status op_silu_forward(Tensor *y, const Tensor *x);
vfm_status op_silu_backward(Tensor *dx, const Tensor *dy, const Tensor *x);
/* y[N,F] = silu(x[:, :F]) · x[:, F:], x[N,2F] (gate half first, then the value half). */
vfm_status op_swiglu_forward(Tensor *y, const Tensor *x);
vfm_status op_swiglu_backward(Tensor *dx, const Tensor *dy, const Tensor *x);

/* ---- normalisation + adaLN ------------------------------------------------------------ */
/* Non-affine LayerNorm fused with adaLN modulate:
 *   y[s] = (x[s]-mean)·rstd · (1 + scale[b]) + shift[b],  b = tok2sample[s]
 * x[S,D], shift[B,D], scale[B,D] (either may be NULL: no shift / no scale), mean[S], rstd[S]
 * saved for the backward; padding rows: y = 0, mean = rstd = 0.
 * mean, rstd [f32]; x, y, shift, scale ACT (per-sample chunks in the activation dtype). */
vfm_status op_layernorm_modulate_forward(Tensor *y, Tensor *mean, Tensor *rstd, const Tensor *x,
                                         const Tensor *shift, const Tensor *scale, const Tensor *tok2sample,
                                         float eps);
/* dx[S,D] (+=: it feeds the residual stream), dshift[B,D] +=, dscale[B,D] += (NULL when the
 * forward had none). mean, rstd [f32]; the rest ACT (per-sample sums accumulate in f32 inside). */
vfm_status op_layernorm_modulate_backward(Tensor *dx, Tensor *dshift, Tensor *dscale, const Tensor *dy,
                                          const Tensor *x, const Tensor *mean, const Tensor *rstd,
                                          const Tensor *scale, const Tensor *tok2sample);

/* Gated residual: out[s] = x[s] + gate[b] ⊙ y[s]  (x[S,D], y[S,D], gate[B,D] or NULL for a plain
 * sum). out may alias x. Padding rows: out = x. Forward and backward: every argument ACT. */
vfm_status op_gated_residual_forward(Tensor *out, const Tensor *x, const Tensor *y, const Tensor *gate,
                                     const Tensor *tok2sample);
/* dy[S,D] = gate ⊙ dout (=); dgate[B,D] += Σ_s dout ⊙ y; dx[S,D] += dout unless dx is NULL or
 * aliases dout (the usual case: the residual-stream gradient passes through unchanged). */
vfm_status op_gated_residual_backward(Tensor *dx, Tensor *dy, Tensor *dgate, const Tensor *dout,
                                      const Tensor *y, const Tensor *gate, const Tensor *tok2sample);

/* RMSNorm with weight: y[n] = x[n]·rsqrt(mean(x[n]²) + eps) ⊙ w, x[N,d], w[d] (NULL: no weight),
 * rstd[N] [f32]; x, y, w ACT. The per-head QK-norm is this op on q viewed as [S·H, head_dim]. */
vfm_status op_rmsnorm_forward(Tensor *y, Tensor *rstd, const Tensor *x, const Tensor *w, float eps);
/* dx[N,d] (=), dw[d] += [f32]; rstd [f32]; dx, dy, x, w ACT. */
vfm_status op_rmsnorm_backward(Tensor *dx, Tensor *dw, const Tensor *dy, const Tensor *x, const Tensor *rstd,
                               const Tensor *w);

/* ---- attention over packed variable-length sequences (THD) ---------------------------- */
/* Sample i has queries at rows [cu_q_padded[i], cu_q_padded[i] + (cu_q[i+1]-cu_q[i])) and keys/
 * values at rows [cu_kv_padded[i], cu_kv_padded[i] + (cu_kv[i+1]-cu_kv[i])). Rows between a
 * sample's real length and the next padded offset are padding: never read, written as 0.
 * Self-attention passes the same tensors for q and kv offsets. All four arrays i32 [n+1]. */
typedef struct VarlenLayout {
    int n_samples;
    Tensor cu_q, cu_q_padded, cu_kv, cu_kv_padded;
    int max_q, max_kv; /* longest real sequence, or more (kernels size their tiles and grids with it;
                        * checked on the CPU, trusted on CUDA where the offsets live on the GPU) */
} VarlenLayout;

/* o[Sq,H,hd] = softmax(q·kᵀ/√hd)·v per sample and head; q[Sq,H,hd], k,v[Skv,Hkv,hd] with Hkv
 * dividing H (grouped-query: head h reads kv head h/(H/Hkv)); lse[Sq,H] = log-sum-exp of the
 * scaled scores (0 on padding rows). A sample with no keys gives o = 0 and lse = -inf (the log of
 * an empty sum: a log-sum-exp merge gives it weight 0). lse [f32]; q, k, v, o ACT. On CUDA the
 * layout's cu arrays live on the GPU; bf16 runs cuDNN's fused attention (f32 and the shapes cuDNN
 * declines run a reference kernel); head_dim <= 256; cuDNN may read (never write) up to a tile
 * past a sample's real rows, so CUDA buffers of q, k, v, o, dout and the gradients should have
 * ATTN_SPARE_ROWS rows after the last sample's slot (padding rows; not checked: the offsets
 * live on the GPU), and their padding rows must be finite, as the model's are (a NaN read there
 * may leak through a zero probability: docs/design-amendments.md §3; test
 * cuda_attention_cudnn_zero_padding_and_keyless_neighbours). */
#define ATTN_SPARE_ROWS 128
vfm_status op_attention_forward(Tensor *o, Tensor *lse, const Tensor *q, const Tensor *k, const Tensor *v,
                                const VarlenLayout *layout);
/* dq[Sq,H,hd], dk[Skv,Hkv,hd], dv[Skv,Hkv,hd] (all =), using the forward's o and lse [f32];
 * the rest ACT. Deterministic on both backends. */
vfm_status op_attention_backward(Tensor *dq, Tensor *dk, Tensor *dv, const Tensor *dout, const Tensor *q,
                                 const Tensor *k, const Tensor *v, const Tensor *o, const Tensor *lse,
                                 const VarlenLayout *layout);

/* Exact log-sum-exp merge of two attentions of the same queries over disjoint key sets (ring
 * attention, design §4): per real query row and head, with m = max(lse, lse_part),
 *   w = e^(lse-m), w_p = e^(lse_part-m),  o <- (w·o + w_p·o_part) / (w + w_p),  lse <- m + log(w + w_p)
 * in place into o[Sq,H,hd] and lse[Sq,H]; o_part[Sq,H,hd], lse_part[Sq,H] as op_attention_forward
 * writes them. A side with lse = -inf (no keys) gets weight 0; when both are -inf, o = 0 and
 * lse = -inf. Only the real query rows of layout's q side (cu_q, cu_q_padded) are read; padding
 * rows are written 0. No backward: ring attention's backward runs each block's
 * op_attention_backward with the merged o and lse, which gives the exact gradient directly.
 * lse, lse_part [f32]; o, o_part ACT (merged in f32, rounded once). */
vfm_status op_attention_merge(Tensor *o, Tensor *lse, const Tensor *o_part, const Tensor *lse_part,
                              const VarlenLayout *layout);

/* ---- embeddings ----------------------------------------------------------------------- */
/* Sinusoidal timestep embedding (diffusers' get_timestep_embedding): half = dim/2,
 * f_i = exp(-ln(max_period)·i/(half - shift)), out[b] = [sin(t_b f) | cos(t_b f)] or, with
 * flip_sin_to_cos, [cos | sin]. t[B] [f32], out[B,dim] ACT, dim even. */
vfm_status op_timestep_embedding_forward(Tensor *out, const Tensor *t, int flip_sin_to_cos, float shift,
                                         float max_period);
/* dt[B] (=) [f32] = Σ_i dout[b,i]·∂out[b,i]/∂t_b; dout ACT. */
vfm_status op_timestep_embedding_backward(Tensor *dt, const Tensor *dout, const Tensor *t, int flip_sin_to_cos,
                                          float shift, float max_period);
/* x[S,D] += fixed 3-D sin-cos position embedding of pos[S,3] = (t,h,w) token indices, for rows
 * with tok2sample >= 0. Layout per row: [temporal D/4 | w-part 3D/8 | h-part 3D/8], each part
 * [sin(p·ω) | cos(p·ω)], ω_k = 10000^(-k/(d/2)) for a part of width d (research/dfm.md §1.3,
 * diffusers' get_3d_sincos_pos_embed). Any (t,h,w): no table. D must be a multiple of 16. x ACT. */
vfm_status op_pos_embed_3d_add(Tensor *x, const Tensor *pos, const Tensor *tok2sample);

/* x[S,D] += fixed 2-D sin-cos position embedding of (h, w) = (pos[s,1], pos[s,2]) for rows with
 * tok2sample >= 0 (pos[s,0], the frame, is not read). Layout per row, as the DiT reference
 * (facebookresearch/DiT, MAE's get_2d_sincos_pos_embed): [w part D/2 | h part D/2], each part
 * [sin(p·ω) | cos(p·ω)], ω_k = 10000^(-k/(D/4)), k < D/4 — the first half encodes the column
 * because the reference builds its grid with meshgrid(w, h). D must be a multiple of 4. x ACT. */
vfm_status op_pos_embed_2d_add(Tensor *x, const Tensor *pos, const Tensor *tok2sample);

/* Row lookup (class-label embedding): out[B,D] = table[idx[b]], table[N,D], idx[B] i32 in [0, N)
 * (an index outside is VFM_ERR_SHAPE, nothing written; on CUDA it is found on the GPU without a
 * wait: its row is 0, and ops_check_index_errors reports it).
 * table, out ACT. */
vfm_status op_embedding_forward(Tensor *out, const Tensor *table, const Tensor *idx);
/* dtable[N,D] += Σ_{b: idx[b] = n} dout[b], each row's terms added in order of b (the same bits
 * at any thread count, repeated indices included). dtable [f32] (a parameter gradient); dout ACT. */
vfm_status op_embedding_backward(Tensor *dtable, const Tensor *dout, const Tensor *idx);

/* ---- column permutation --------------------------------------------------------------- */
/* out[N,K] = in[N, idx[k]] (in[N,M], idx[K] i32 in [0, M)): e.g. token columns (ph pw pt C) to
 * the (C pt ph pw) order of a convolution weight [D, C, pt, ph, pw]. in, out: one float dtype (any
 * on CUDA); an index outside is VFM_ERR_SHAPE (on CUDA: 0 there, reported by ops_check_index_errors). */
vfm_status op_gather_columns(Tensor *out, const Tensor *in, const Tensor *idx);
/* din[N,M] += scatter of dout[N,K]: din[n, idx[k]] += dout[n,k], in order of k. din, dout: one
 * float dtype. */
vfm_status op_gather_columns_backward(Tensor *din, const Tensor *dout, const Tensor *idx);

/* ---- patchify ------------------------------------------------------------------------- */
/* latent[C, T'·pt, H'·ph, W'·pw] -> tokens[T'·H'·W', ph·pw·pt·C]: tokens t-major, then h, then
 * w; inside a token C fastest, then pt, then pw, then ph (einops "C (T pt)(H ph)(W pw) ->
 * (T H W)(ph pw pt C)"). unpatchify is the inverse (and each is the other's backward).
 * tokens and latent share one float dtype (f32 or bf16 on CUDA). */
vfm_status op_patchify(Tensor *tokens, const Tensor *latent, int pt, int ph, int pw);
vfm_status op_unpatchify(Tensor *latent, const Tensor *tokens, int pt, int ph, int pw);

/* ---- EDM ------------------------------------------------------------------------------ */
/* Per-sample coefficients from sigma[B]: c_skip = σd²/(σ²+σd²), c_out = σσd/√(σ²+σd²),
 * c_in = 1/√(σ²+σd²), c_noise = ¼ ln σ, weight = (σ²+σd²)/(σσd)². Any output may be NULL.
 * Every argument [f32]. */
vfm_status op_edm_precondition(Tensor *c_skip, Tensor *c_out, Tensor *c_in, Tensor *c_noise, Tensor *weight,
                               const Tensor *sigma, float sigma_data);
/* x_t[S,C] = x0 + σ[b]·noise; net_in[S,C] = c_in[b]·x_t (either output may be NULL); padding 0.
 * x_t, x0, noise, sigma, c_in [f32]; net_in ACT (what the network reads). */
vfm_status op_edm_add_noise(Tensor *x_t, Tensor *net_in, const Tensor *x0, const Tensor *noise,
                            const Tensor *sigma, const Tensor *c_in, const Tensor *tok2sample);
/* denoised[S,C] = c_skip[b]·x_t + c_out[b]·F; padding rows 0. F ACT (the network's output); the
 * rest [f32]. */
vfm_status op_edm_denoise(Tensor *denoised, const Tensor *x_t, const Tensor *F, const Tensor *c_skip,
                          const Tensor *c_out, const Tensor *tok2sample);
/* dF[S,C] (=) = c_out[b]·ddenoised; padding rows 0. dF ACT; ddenoised, c_out [f32]. */
vfm_status op_edm_denoise_backward(Tensor *dF, const Tensor *ddenoised, const Tensor *c_out,
                                   const Tensor *tok2sample);

/* Masked, per-sample-weighted MSE:
 *   loss[1] = Σ_s mask[s]·w[b]·mean_c (pred[s,c]-target[s,c])² / Σ_s mask[s]
 * over rows with tok2sample >= 0; pred, target [S,C]; weight[B]; mask[S]. sample_sum[B]
 * (optional) receives each sample's Σ_s mask·w·mean_c(err²) and sample_count[B] (optional)
 * its Σ_s mask. Padding rows are never read. Every argument [f32]. */
vfm_status op_weighted_mse_forward(Tensor *loss, Tensor *sample_sum, Tensor *sample_count, const Tensor *pred,
                                   const Tensor *target, const Tensor *weight, const Tensor *mask,
                                   const Tensor *tok2sample);
/* dpred[S,C] (=) = dloss·mask·w·2(pred-target)/(C·Σmask); padding rows 0. Every argument [f32]. */
vfm_status op_weighted_mse_backward(Tensor *dpred, double dloss, const Tensor *pred, const Tensor *target,
                                    const Tensor *weight, const Tensor *mask, const Tensor *tok2sample);

/* ---- flow matching and DDPM (docs/diffusion.md) --------------------------------------- */
/* x_t[S,C] = a[b]·x0 + s[b]·noise per sample b = tok2sample[row]; padding rows 0. a, s [B].
 * Flow: a = 1−σ, s = σ (and the target ε − x0 with a = −1, s = 1); DDPM: a = √ᾱ_t, s = √(1−ᾱ_t). */
vfm_status op_noise_mix(Tensor *x_t, const Tensor *x0, const Tensor *noise, const Tensor *a, const Tensor *s,
                        const Tensor *tok2sample);

/* Rows of x[S, n·2g] hold n groups of 2g values: the first g go to first[S, n·g], the last g to
 * second[S, n·g] (second may be NULL). With the token layout's channels fastest and g = C, this
 * splits a learned-sigma output of 2C channels into ε (channels 0..C-1) and the variance value
 * (channels C..2C-1). merge is the inverse (=; a NULL second half writes zeros) and the backward. */
vfm_status op_channel_halves_split(Tensor *first, Tensor *second, const Tensor *x, int64_t group);
vfm_status op_channel_halves_merge(Tensor *x, const Tensor *first, const Tensor *second, int64_t group);

/* Per-sample coefficients of the DDPM variational bound, coef[B, DDPM_VB_NCOEF] at each
 * sample's timestep t (computed in double by diffusion/ddpm.c). */
enum {
    DDPM_VB_RECIP_AC = 0,   /* √(1/ᾱ_t) */
    DDPM_VB_RECIPM1_AC = 1, /* √(1/ᾱ_t − 1) */
    DDPM_VB_MEAN_C1 = 2,    /* posterior mean = C1·x0 + C2·x_t */
    DDPM_VB_MEAN_C2 = 3,
    DDPM_VB_POST_LOGVAR = 4,/* log β̃_t, clipped (t = 0 uses β̃_1) */
    DDPM_VB_LOG_BETA = 5,   /* log β_t */
    DDPM_VB_IS_T0 = 6,      /* 1 at t = 0: the decoder NLL replaces the KL */
    DDPM_VB_NCOEF = 8
};
/* The variational-bound term of a learned-range DDPM (Nichol & Dhariwal; the DiT code): per element
 *   model log-variance = f·log β_t + (1−f)·log β̃_t,  f = (v+1)/2,
 *   model mean from x̂0 = √(1/ᾱ)x_t − √(1/ᾱ−1)·ε̂ (ε̂ enters detached: this term trains only v),
 *   vb = KL(q(x_{t−1}|x_t,x0) ‖ p(x_{t−1}|x_t)) / ln 2, or at t = 0 the discretised-Gaussian
 *   decoder NLL of x0 (bins of 2/255, edges at ±0.999) / ln 2;
 *   loss[1] = Σ_s mask·mean_c vb / Σ_s mask over real rows (the weighted-MSE reduction);
 *   sample_sum[B] (optional) = each sample's Σ_s mask·mean_c vb.
 * v, eps, x_t, x0 [S,C]; coef [B, DDPM_VB_NCOEF]; mask [S]. */
vfm_status op_ddpm_vb_forward(Tensor *loss, Tensor *sample_sum, const Tensor *v, const Tensor *eps,
                              const Tensor *x_t, const Tensor *x0, const Tensor *coef, const Tensor *mask,
                              const Tensor *tok2sample);
/* dv[S,C] (=) = dloss·mask·∂vb/∂v/(C·Σmask); padding rows 0. */
vfm_status op_ddpm_vb_backward(Tensor *dv, double dloss, const Tensor *v, const Tensor *eps, const Tensor *x_t,
                               const Tensor *x0, const Tensor *coef, const Tensor *mask, const Tensor *tok2sample);

/* One reverse step of a DDPM/DDIM sampler, elementwise over x[N], eps[N] (all samples at one t):
 *   x̂0 = recip_ac·x − recipm1_ac·ε;  mean = c_x0·x̂0 + c_xt·x + c_eps·ε;
 *   out = mean + exp(½·logvar)·z, logvar = f·max_log + (1−f)·min_log with f = (v+1)/2 when v is
 *   given (learned range), else fixed_logvar; no noise term when z is NULL.
 * out may alias x. */
typedef struct DdpmStepCoef {
    double recip_ac, recipm1_ac, c_x0, c_xt, c_eps;
    double min_log, max_log, fixed_logvar;
} DdpmStepCoef;
vfm_status op_ddpm_step(Tensor *out, const Tensor *x, const Tensor *eps, const Tensor *v, const Tensor *z,
                        const DdpmStepCoef *c);

/* ---- the training step's scalars, kept on the device ------------------------------------- */
/* Slots of a step state: an f64 tensor [STEP_SLOTS + 3·records] on the model's device, so that the
 * training step decides on the device whether its update applies and how far it is clipped, and
 * the host never waits for the GPU inside a step (docs/training.md "No host round trips"). After
 * the slots, one record (loss, norm, ok) per step since the host last read the state. */
typedef enum {
    STEP_LOSS = 0,  /* the step's loss: Σ of its packs' losses, then their mean (the decision resets it) */
    STEP_SUMSQ,     /* Σ g² of the reduced gradients */
    STEP_NORM,      /* √STEP_SUMSQ */
    STEP_OK,        /* 1: loss and norm finite, the update applies; 0: the step is skipped */
    STEP_SCALE,     /* the clip factor min(1, clip / (norm + 1e-6)), 1 without clipping */
    STEP_ADAM_T,    /* AdamW updates applied so far (a skipped step leaves it) */
    STEP_STEP_SIZE, /* lr / (1 − β1^t) of this step's update (t = STEP_ADAM_T after it) */
    STEP_BC2_SQRT,  /* √(1 − β2^t) */
    STEP_SLOTS
} StepSlot;
/* acc[at] += Σ_{i<n} x[i], the x (f32) summed in double in order first (n <= 8): a pack's loss
 * from the loss op's output into the step's, without a host read. acc f64 on x's device. */
vfm_status op_f64_accumulate(Tensor *acc, int64_t at, const Tensor *x, int n);
/* acc[at] = Σ x², the bits of op_sum_squares, left on the device (acc f64 on x's device). */
vfm_status op_sum_squares_into(Tensor *acc, int64_t at, const Tensor *x);
/* dst[at] = Σ_{i<n} src[i] in order (0 + src[0] + src[1] + …), f64, on the device. */
vfm_status op_f64_sum_into(Tensor *dst, int64_t at, const Tensor *src, int64_t n);
/* buf[at] = buf[at] / divisor (f64, on the device). */
vfm_status op_f64_div(Tensor *buf, int64_t at, double divisor);
/* The step's decision, on the device, from STEP_LOSS (already the mean) and STEP_SUMSQ: STEP_NORM,
 * STEP_OK = isfinite(loss) && isfinite(norm), STEP_SCALE (clip_scale of optim/optimizer.h, from
 * the norm), and when ok STEP_ADAM_T += 1 with the bias corrections of that t formed in double from
 * the f32 lr and betas exactly as op_adamw_step forms them; then record `record` (0-based: the
 * slots STEP_SLOTS + 3·record …) = (loss, norm, ok) and STEP_LOSS = 0. */
typedef struct StepDecideHyper {
    double clip;             /* optimizer.clip_grad; <= 0: no clipping */
    float lr, beta1, beta2;  /* this step's learning rate and AdamW's betas */
    int64_t record;
} StepDecideHyper;
vfm_status op_step_decide(Tensor *state, const StepDecideHyper *h);

/* ---- optimizer and numerics ----------------------------------------------------------- */
typedef struct AdamWHyper {
    float lr, beta1, beta2, eps, weight_decay;
    int step;         /* 1-based step count for bias correction */
    float grad_scale; /* gradients are multiplied by this first (clipping), 1 = none */
    /* NULL, or a step state (above) on the param's device: the update applies only when its
     * STEP_OK is set (else nothing is written), with its STEP_SCALE (rounded to f32, as grad_scale)
     * and bias corrections instead of grad_scale and step */
    const Tensor *step_state;
} AdamWHyper;
/* torch.optim.AdamW: p ← p·(1 - lr·wd); m ← β1 m + (1-β1) g; v ← β2 v + (1-β2) g²;
 * p ← p - lr·(m/(1-β1^t)) / (√v/√(1-β2^t) + eps), with g = grad_scale·grad.
 * param, m, v, grad: same shape, all [f32]; weight decay only when h->weight_decay != 0. On CUDA the
 * f32 arithmetic is done in the CPU's order without fused multiply-adds: the same bits as the CPU. */
vfm_status op_adamw_step(Tensor *param, Tensor *m, Tensor *v, const Tensor *grad, const AdamWHyper *h);
/* *out = Σ x² (accumulated in double, fixed order): global grad norm = √ of the sum. Any float x;
 * on CUDA the call waits for the GPU. */
vfm_status op_sum_squares(double *out, const Tensor *x);
/* out[i] = std · N(0,1) drawn from Philox at key (seed, stream), counter (step, uid,
 * element_offset + i) — see core/philox.h. Any float dtype. */
vfm_status op_randn_fill(Tensor *out, uint64_t seed, uint32_t stream, uint32_t step, uint64_t uid,
                         uint64_t element_offset, float std);
/* *count = number of NaN/Inf elements of x (any float dtype; on CUDA the call waits for the GPU). */
vfm_status op_count_nonfinite(int64_t *count, const Tensor *x);

/* ---- small utilities ------------------------------------------------------------------ */
/* Any float dtype; the tensors of one call share it (except op_convert). */
vfm_status op_fill(Tensor *x, double value);
/* dst = src (any devices; same dtype and element count) */
vfm_status op_copy(Tensor *dst, const Tensor *src);
/* dst = the tensor_bytes(dst) bytes at host, issued on the ops' stream without waiting for the GPU
 * (a blocking copy to the GPU would first wait for all the work before it): for the small per-pack
 * values the training step uploads. host must be pageable memory (malloc'd: the runtime stages it
 * at the call, so it may be reused at once), not page-locked. On the CPU a plain copy. */
vfm_status op_upload(Tensor *dst, const void *host);
/* dst = src with dtype conversion (e.g. f32 master -> bf16 weights); same element count. On CUDA:
 * f32 <-> bf16 (round to nearest even), both tensors on the GPU. */
vfm_status op_convert(Tensor *dst, const Tensor *src);
/* out = a + b (out may alias a or b) */
vfm_status op_add(Tensor *out, const Tensor *a, const Tensor *b);
/* x *= alpha */
vfm_status op_scale(Tensor *x, double alpha);
/* y += alpha·x */
vfm_status op_axpy(Tensor *y, double alpha, const Tensor *x);
/* ema = decay·ema + (1-decay)·param */
vfm_status op_ema_update(Tensor *ema, const Tensor *param, double decay);
/* op_ema_update when the step state's STEP_OK is set (a skipped step leaves the EMA), on the device. */
vfm_status op_ema_update_if(Tensor *ema, const Tensor *param, double decay, const Tensor *step_state);
/* out[R,d] = in[R, col0 : col0+d]  (in[R,D]) — e.g. one chunk of the adaLN modulation */
vfm_status op_columns_get(Tensor *out, const Tensor *in, int64_t col0);
/* out[R, col0 : col0+d] += in[R,d]  (out[R,D]) — the backward of op_columns_get, and zero-padding adds */
vfm_status op_columns_add(Tensor *out, const Tensor *in, int64_t col0);

/* ---- MovieGen's block norm and position (docs/models.md "moviegen") -------------------- */
/* RMSNorm with a weight fused with adaLN modulate, per row (NeMo's AdaLN.modulated_layernorm with
 * TENorm as RMSNorm, MovieGen's block norm):
 *   y[s] = x[s]·rstd[s] ⊙ w ⊙ (1 + scale[b]) + shift[b],  rstd[s] = 1/√(mean_d x[s]² + eps),  b = tok2sample[s]
 * x[S,D], w[D] (NULL: no weight), shift[B,D], scale[B,D] (either NULL: none); rstd[S] saved for the
 * backward; padding rows: y = 0, rstd = 0. rstd [f32]; x, y, w, shift, scale ACT. (Over one row of
 * D values; a norm over all heads of a TP-split q is another op.) */
vfm_status op_rmsnorm_modulate_forward(Tensor *y, Tensor *rstd, const Tensor *x, const Tensor *w, const Tensor *shift,
                                       const Tensor *scale, const Tensor *tok2sample, float eps);
/* dx[S,D] (+=: it feeds the residual stream), dw[D] += [f32], dshift[B,D] +=, dscale[B,D] += (any of
 * the four NULL: not wanted). rstd [f32]; the rest ACT. Sums over rows in a fixed order. */
vfm_status op_rmsnorm_modulate_backward(Tensor *dx, Tensor *dw, Tensor *dshift, Tensor *dscale, const Tensor *dy,
                                        const Tensor *x, const Tensor *rstd, const Tensor *w, const Tensor *scale,
                                        const Tensor *tok2sample);
/* Learned factorized 3-D position (NeMo's FactorizedLearnable3DEmbedding): for rows with
 * tok2sample >= 0
 *   out[s] = tab_t[pos[s,0]] + tab_h[pos[s,1]] + tab_w[pos[s,2]]    (added in this order)
 * and 0 on padding rows. tab_t[T,D], tab_h[H,D], tab_w[W,D], pos[S,3] i32 (t, h, w). A position
 * outside its table is VFM_ERR_SHAPE on the CPU (nothing written); on CUDA its term is 0 (the model
 * checks the pack's positions on the host first). out and the tables ACT. */
vfm_status op_pos_embed_learned_forward(Tensor *out, const Tensor *tab_t, const Tensor *tab_h, const Tensor *tab_w,
                                        const Tensor *pos, const Tensor *tok2sample);
/* dtab_k[n] += Σ dout[s] over real rows s with pos[s,k] = n, s ascending (the same bits at any thread
 * count). dtab_t, dtab_h, dtab_w [f32] (parameter gradients); dout ACT. */
vfm_status op_pos_embed_learned_backward(Tensor *dtab_t, Tensor *dtab_h, Tensor *dtab_w, const Tensor *dout,
                                         const Tensor *pos, const Tensor *tok2sample);

/* ---- Wan 2.1: 3-D rotary position and RMSNorm over a row split across ranks ---------- */
/* 3-D rotary position embedding (Wan 2.1; diffusers' WanRotaryPosEmbed): each head's hd values
 * are three parts [frames dt | rows dh | columns dw], dh = dw = 2·⌊hd/6⌋, dt = hd − dh − dw, each a
 * run of pairs (2k, 2k+1) rotated by the angle p·θ^(−2k/d) (d the part's width, p = pos[n, 0], 1 or
 * 2: the token's frame, row or column):
 *   y[2k] = x[2k]·cos − x[2k+1]·sin,  y[2k+1] = x[2k]·sin + x[2k+1]·cos
 * (angles and their cos/sin in double, rounded once). inverse = 1 rotates by −angle: the backward
 * (dx from dy). x, y [N, H, hd] (y may be x), pos [N, 3] i32; hd even. Every row is rotated:
 * padding rows hold finite values and stay finite. x, y ACT. */
vfm_status op_rope_3d(Tensor *y, const Tensor *x, const Tensor *pos, float theta, int inverse);
/* RMSNorm of rows that several ranks hold a column block of (Wan's QK-norm over all heads, the
 * heads split over TP): the caller sums the per-row statistic over the ranks between the calls.
 *   sumsq[N] = Σ_j x[n,j]²  (this rank's columns)
 *   y = x·rstd ⊙ w, rstd[N] = 1/√(sumsq/n + eps)  (sumsq summed over the ranks; rstd may be sumsq)
 *   dot[N] = Σ_j dy·w·x  (this rank's columns)
 *   dx = rstd·(dy ⊙ w − x·rstd²·dot/n) (=), dw[d] += Σ_rows dy·x·rstd  (dot summed over the ranks)
 * n is the whole row's width (every rank's columns). x, y, dx, dy, w [N, d] / [d] ACT; sumsq,
 * rstd, dot, dw [f32]. With one rank this is op_rmsnorm_forward/_backward. */
vfm_status op_rmsnorm_sumsq(Tensor *sumsq, const Tensor *x);
vfm_status op_rmsnorm_split_forward(Tensor *y, Tensor *rstd, const Tensor *x, const Tensor *w, const Tensor *sumsq,
                                    int64_t n, float eps);
vfm_status op_rmsnorm_dot(Tensor *dot, const Tensor *dy, const Tensor *x, const Tensor *w);
vfm_status op_rmsnorm_split_backward(Tensor *dx, Tensor *dw, const Tensor *dy, const Tensor *x, const Tensor *rstd,
                                     const Tensor *w, const Tensor *dot, int64_t n);

/* ---- mixture of experts (docs/models.md "The MoE layer") -------------------------------------
 * E experts, a pack of S rows and B samples. The slots: each expert has C rows (C = Σ_b C_b, the
 * pack's capacity), sample b's at [cu_cap[b], cu_cap[b+1]) of them; slot s = e·C + c. slot_tok
 * [E,C] i32 names the token of each slot (-1: an empty slot, which reads zeros and takes no
 * gradient); tok_slot [S,E] i32 is its inverse (-1: token t is not in expert e). Every float
 * argument not said to be ACT is [f32]. Ties are broken by (score desc, index asc) everywhere. */
/* probs[S,E] = softmax of each real row of logits[S,E]; lse[S] its log-sum-exp. Padding rows: 0. */
vfm_status op_moe_softmax(Tensor *probs, Tensor *lse, const Tensor *logits, const Tensor *tok2sample);
/* masked[S,E] = scores where the entry is among its row's top k (score desc, expert asc), -inf
 * elsewhere and on padding rows: token choice's candidates (expert choice passes probs itself). */
vfm_status op_moe_topk_mask(Tensor *masked, const Tensor *scores, const Tensor *tok2sample, int k);
/* Per sample b (rows [cu_tok[b], cu_tok[b+1])) and expert e, the top C_b = cu_cap[b+1] - cu_cap[b]
 * rows by scores[:, e] (score desc, row asc; -inf never taken): slot_tok, slot_w[E,C] (the score
 * of each filled slot, 0 for an empty one) and tok_slot[S,E]. Never crosses samples. */
vfm_status op_moe_topc(Tensor *slot_tok, Tensor *slot_w, Tensor *tok_slot, const Tensor *scores,
                       const Tensor *cu_tok, const Tensor *cu_cap);
/* xe[E·C, D] = x[slot_tok] (rows; an empty slot is 0): the tokens in their experts' slots. ACT. */
vfm_status op_moe_permute(Tensor *xe, const Tensor *x, const Tensor *slot_tok);
/* y[S,D] = Σ_e w[tok_slot[t,e]]·ye[tok_slot[t,e]], e ascending (w NULL: weights 1 — the
 * permute's backward); rows in no slot are 0. ye, y ACT; w [f32] [E·C]. The segmented sum of
 * the combine: one fixed order whatever the layout, so the same bits every run. */
vfm_status op_moe_combine(Tensor *y, const Tensor *ye, const Tensor *w, const Tensor *tok_slot);
/* Of op_moe_combine with weights: dye[s] = w[s]·dy[t], dw[s] = <dy[t], ye[s]> (t = slot_tok[s];
 * empty slots 0). dy, ye, dye ACT; w, dw [f32]. */
vfm_status op_moe_combine_backward(Tensor *dye, Tensor *dw, const Tensor *dy, const Tensor *ye, const Tensor *w,
                                   const Tensor *slot_tok);
/* The router's losses over the pack's T real rows: out[2] = {E·Σ_e f_e·P_e, (1/T)·Σ_t lse_t²},
 * f_e = (rows whose masked[t,e] > -inf)/(T·k), P_e = (1/T)·Σ_t probs[t,e] (the raw load-balancing
 * and z losses, before their coefficients). Sums in double, in row order. */
vfm_status op_moe_router_losses(Tensor *out, const Tensor *probs, const Tensor *lse, const Tensor *masked,
                                const Tensor *tok2sample, int k);
/* dlogits[S,E] = the softmax backward of dprobs[t,e] = dw[tok_slot[t,e]] (0 when -1)
 * + aux·E·f_e/T, plus z·2·lse_t·probs[t,e]/T: the gradient of the gates and of aux·(load
 * balancing loss) + z·(z loss) (f_e as op_moe_router_losses; aux = 0 skips it, masked may then
 * be NULL). Padding rows 0. */
vfm_status op_moe_router_backward(Tensor *dlogits, const Tensor *dw, const Tensor *tok_slot, const Tensor *probs,
                                  const Tensor *lse, const Tensor *masked, const Tensor *tok2sample, int k, float aux,
                                  float z);
/* The experts' GEMMs over their fixed-capacity slots, one grouped call: group g's rows
 * [g·C, (g+1)·C) of x[G·C, in] by its weight rows [g·out, (g+1)·out) of w[G·out, in]:
 * y[G·C, out] = act(x_g·w_gᵀ) (pre kept as op_linear_forward keeps it). No bias. */
vfm_status op_grouped_linear_forward(Tensor *y, Tensor *pre, const Tensor *x, const Tensor *w, int groups,
                                     Activation act);
/* dx (= or +=), dw (+=, [f32] on CUDA) per group, as op_linear_backward (dy becomes dpre). dx may be NULL. */
vfm_status op_grouped_linear_backward(Tensor *dx, Tensor *dw, Tensor *dy, const Tensor *x, const Tensor *w,
                                      const Tensor *pre, int groups, Activation act, int dx_accumulate);

#ifdef __cplusplus
}
#endif
#endif
