/* The conditioning c of every block's modulation (docs/models.md), per sample:
 *   c = norm?( t_embedder(c_noise) + pad(fps_embedder(fps)) + y_embedder(class) ),  then silu(c)
 * A timestep embedder is sinusoidal features of a scalar (TimestepEmbedder: width, order of sin
 * and cos, phase shift) through Linear → SiLU → Linear; the fps embedder is one of width F ≤ D,
 * added to c's first F columns; the class table has a row per label (and the null class); the
 * norm is NeMo's learnable RMSNorm (eps 1e-6). Parallel layout: every pipeline stage computes the
 * conditioning itself, so its weights are on every stage and their gradients sum over PP
 * (REDUCE_PP); replicated over TP (sums over tokens: REDUCE_TP_SP, dit_build.c).
 * Wan 2.1 (arch_wan.c) adds two parts: one modulation projection shared by every block,
 *   proj[B, nD] = Linear(silu(c))   (each block adds its own table: modulation.h),
 * and the text embedding MLP the cross-attentions read, text_emb[L, D] = Linear(gelu_tanh(Linear(text))),
 * whose gradient every cross-attention adds to (partial over TP: its weights sum over TP). */
#ifndef VFM_MODEL_CONDITIONING_H
#define VFM_MODEL_CONDITIONING_H

#include "model/layer.h"

typedef struct TimestepEmbedder {
    int freq_dim;     /* width of the sinusoidal features */
    int flip;         /* 1: [cos | sin] (the DiT reference); 0: [sin | cos] */
    float shift;      /* diffusers' downscale_freq_shift */
    int64_t width;    /* output width */
    Linear l1, l2;
} TimestepEmbedder;

typedef struct ConditioningLayer {
    TimestepEmbedder t;
    int has_fps;          /* an fps embedder (width fps.width) adds to c */
    TimestepEmbedder fps;
    int has_classes;      /* a class table [classes (+ the null class), D] adds to c */
    int class_table;
    int has_norm;         /* a learnable RMSNorm on c */
    int norm_w;
    int has_proj;         /* Wan: the shared modulation projection proj = Linear(silu(c)) */
    Linear proj;
    int has_text_mlp;     /* Wan: the text embedding MLP */
    Linear text1, text2;
} ConditioningLayer;

/* A timestep embedder's activations: features [B, freq], Linear 1's output before and after SiLU,
 * the embedding [B, width]; backward: d(embedding) (the fps embedder's own; the timestep's is c's),
 * d(hidden). */
typedef struct EmbedderActs {
    Tensor in, pre, h, emb, d_emb, d_h;
} EmbedderActs;

typedef struct CondActs {
    EmbedderActs t, fps;
    Tensor y_emb, raw, rstd, cond, silu;    /* [B,D]; raw = the sum, cond = norm(raw) (or raw), silu(cond) */
    Tensor d_silu, d_cond, d_raw;           /* [B,D] */
    Tensor zeros;                           /* [B] i32 zeros: the row index of vector_rows (layer.h) */
    Tensor d_c;                             /* [B,D] what reads c itself (Wan's head) adds to d(c) */
    Tensor proj, d_proj;                    /* [B,nD] the shared projection and its gradient (+= by the blocks) */
    Tensor text_pre, text_h, text_emb;      /* [L,D] the text MLP's */
    Tensor d_text, d_text_h;                /* [L,D] d(text_emb) (+= by the cross-attentions), d(hidden) */
} CondActs;

/* "<l1>.weight/bias" [width, freq] and "<l2>.weight/bias" [width, width]; init NULL: nn.Linear's
 * default, else that spec for both. */
void timestep_embedder_add(TimestepEmbedder *te, ParamTable *t, const char *l1, const char *l2, int freq_dim,
                           int64_t width, int flip, float shift, const LinearSpec *init);
/* The class table "<name>" [rows, D], N(0, std²). */
void class_table_add(ConditioningLayer *cl, ParamTable *t, const char *name, int64_t rows, int64_t D, float std);
/* The RMSNorm weight "<name>" [D], ones. */
void cond_norm_add(ConditioningLayer *cl, ParamTable *t, const char *name, int64_t D);
/* Wan: "<name>.weight/bias" [n·D, D] (nn.Linear's initialisation), the shared modulation projection. */
void cond_proj_add(ConditioningLayer *cl, ParamTable *t, const char *name, int64_t D, int n_chunks);
/* Wan: "<l1>.weight/bias" [D, d_text] and "<l2>.weight/bias" [D, D] (nn.Linear's), GELU-tanh between. */
void text_mlp_add(ConditioningLayer *cl, ParamTable *t, const char *l1, const char *l2, int64_t d_text, int64_t D);
void conditioning_handles(ConditioningLayer *cl, const HandleVisitor *v);

/* c and silu(c) from the pack's c_noise, fps and class rows (Wan: proj and the embedded text too;
 * the gradients the blocks and the head add to are zeroed). */
vfm_status conditioning_forward(const struct DiT *m, const ConditioningLayer *cl, CondActs *a,
                                const struct DiTInputs *in);
/* From a->d_silu (what every modulation added), a->d_proj, a->d_c and a->d_text: the embedders'
 * gradients. */
vfm_status conditioning_backward(const struct DiT *m, const ConditioningLayer *cl, CondActs *a,
                                 const struct DiTInputs *in);
vfm_status conditioning_carve(const ConditioningLayer *cl, ActCarver *cv, CondActs *a, int64_t D, int samples,
                              int64_t text_rows);
double conditioning_flops(const struct DiT *m, const ConditioningLayer *cl, const FlopShape *s);

#endif
