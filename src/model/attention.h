/* The attention layer: self-attention over the pack's tokens or cross-attention to the text rows,
 * multi-head or grouped-query, with an optional per-head RMSNorm on q and k (docs/models.md).
 *   q = x·Wqᵀ (+b), k, v = x·Wkᵀ, x·Wvᵀ (self) or text·Wkᵀ, text·Wvᵀ (cross)
 *   o = softmax(norm(q)·norm(k)ᵀ/√hd)·v per sample (packed, varlen), out = o·Wprojᵀ (+b)
 * Parallel layout: q, k, v are column-parallel and proj row-parallel (layer.h's TP region): each
 * TP rank holds heads/TP query heads and kv_heads/TP key/value heads; the QK-norm weights are
 * shared by the heads TP splits, so their gradient sums over TP. Self-attention runs through
 * context parallelism (cp_attention.h) on this CP rank's chunk of every sample; cross-attention
 * sees the whole text on every rank. Under selective recomputation o and the log-sum-exp are not
 * kept: the backward recomputes them.
 * Wan 2.1's form (arch_wan.c): the QK-norm is one RMSNorm over every head's values (weights
 * [H·hd], split over TP like q's rows, the row's sum of squares all-reduced over TP), 3-D RoPE
 * rotates the normed q and k of self-attention (the rows' (t, h, w) positions), and
 * cross-attention reads the model's embedded text (the conditioning's text MLP), whose gradient
 * it adds to. */
#ifndef VFM_MODEL_ATTENTION_H
#define VFM_MODEL_ATTENTION_H

#include "model/layer.h"

/* What a self-attention's tokens attend to (ST-DiT, parallel/st_layout.h): every token of their
 * sample, the tokens of their frame, or the tokens at their position in every frame. */
typedef enum { ATTN_SPAN_FULL, ATTN_SPAN_SPATIAL, ATTN_SPAN_TEMPORAL, ATTN_N_SPANS } AttnSpan;

/* The base of Wan's 3-D RoPE frequencies (diffusers' WanRotaryPosEmbed theta). */
#define DIT_ROPE_THETA 10000.0f

typedef struct AttentionLayer {
    int self;           /* 1: self-attention (k, v from the tokens, through CP); 0: cross-attention to the text */
    AttnSpan span;      /* self-attention: full (the default), spatial or temporal */
    int kv_heads;       /* key/value heads of the whole layer (grouped-query when < heads); TP splits them */
    Linear q, k, v, proj;
    int q_norm, k_norm; /* per-head RMSNorm weights [head_dim] ([H·hd] with norm_all), or -1 (no QK-norm) */
    float norm_eps;
    int norm_all;       /* the QK-norm is over every head at once (Wan) */
    int rope;           /* 3-D RoPE on the normed q and k (self-attention) */
    int text_embedded;  /* k, v read the conditioning's text MLP output and add to its gradient */
} AttentionLayer;

/* The names of a layer's parts: q, k, v, proj (fused: qkv instead of q, k, v), q_norm, k_norm. */
typedef struct AttentionNames {
    const char *q, *k, *v, *qkv, *proj, *q_norm, *k_norm;
} AttentionNames;

/* How attention_add builds a layer. */
typedef struct AttentionSpec {
    int self;
    int fused_qkv;      /* one "qkv" weight [3D, D] (self-attention without grouped-query heads), else q, k, v */
    int64_t kv_in;      /* width of what k and v read: D (self) or the text rows' */
    int kv_heads;
    int qk_norm;        /* per-head RMSNorm on q and k */
    int qk_norm_all;    /* with qk_norm: one RMSNorm over every head's values (Wan) */
    int rope;           /* 3-D RoPE on q and k (self-attention) */
    int text_embedded;  /* cross-attention to the conditioning's embedded text (Wan) */
    const AttentionNames *names; /* NULL: "q", "k", "v", "qkv", "proj", "q_norm.weight", "k_norm.weight" */
    float norm_eps;
    LinearSpec in, out; /* initialisation of q, k, v and of proj (their TP split is the layer's) */
} AttentionSpec;

/* What the forward keeps for the backward: q [R,Dq], k, v [Rkv,Dkv] (Rkv = R, or the text rows),
 * their normed forms (the same tensors without QK-norm) and RMS statistics, o [R,Dq], lse [R,H].
 * Temporal attention runs in the temporal layout of Rt rows (Acts.Rt): xt [Rt, D], its input,
 * q, k, v, o, lse there, and o_rows [R, Dq], o back in the frame layout (proj's input). */
typedef struct AttnActs {
    Tensor q, k, v, qn, kn, q_rstd, k_rstd, o, lse;
    Tensor xt, o_rows;
} AttnActs;

/* Backward scratch shared by every attention layer: d(o), d(q), d(norm q), and d(k), d(norm k),
 * d(v) of self-attention ([max(R, Rt), max(Dq, Dkv)]) and of cross-attention ([L, Dq]); with
 * temporal attention d(o_rows) [R, Dq] and d(xt) [Rt, D]. */
typedef struct AttnScratch {
    Tensor d_o, d_q, d_qn, d_k, d_kn, d_v, d_tk, d_tkn, d_tv;
    Tensor d_o_rows, d_xt;
    Tensor dot;         /* [max(R, L)] f32: the QK-norm over all heads' row statistic of the backward */
} AttnScratch;

/* Appends "<prefix>.q", ".k", ".v" (or ".qkv"), ".q_norm.weight", ".k_norm.weight" and ".proj"
 * (or s->names'). */
void attention_add(AttentionLayer *at, ParamTable *t, const char *prefix, int64_t D, int head_dim,
                   const AttentionSpec *s);
void attention_handles(AttentionLayer *at, const HandleVisitor *v);

/* out[Rl, D] = the layer on xm[Rl, D] (this rank's rows of the normed residual stream). skip: the
 * tests' broken variants (ATTN_SKIP_TP: the row-parallel sum left out; ATTN_SKIP_ST: temporal
 * attention's all-to-all left out). */
enum { ATTN_SKIP_TP = 1, ATTN_SKIP_ST = 2 };
vfm_status attention_forward(const struct DiT *m, const AttentionLayer *at, AttnActs *b, struct Acts *a,
                             const struct DiTInputs *in, const Tensor *xm, Tensor *out, int skip);
/* From a->d_branch = d(out): the weights' gradients, and a->d_xm = d(xm) (the text gets none). */
vfm_status attention_backward(const struct DiT *m, const AttentionLayer *at, const AttnActs *b, struct Acts *a,
                              const struct DiTInputs *in, const Tensor *xm);

/* The layer's activations (o and lse only when kept: not `selective`). */
vfm_status attention_carve(const struct DiT *m, const AttentionLayer *at, ActCarver *cv, AttnActs *b,
                           const struct Acts *a, int selective);
/* The recomputed o and lse of selective recomputation (one pair per attention of a block, of
 * `rows` rows: max(R, Rt) for the scratch every block shares), and a layer's o and lse as views of
 * such a pair with its own rows. */
vfm_status attention_carve_recomputed(const struct DiT *m, ActCarver *cv, AttnActs *b, int64_t rows);
void attention_use_recomputed(const struct DiT *m, const AttentionLayer *at, AttnActs *b, const AttnActs *rc,
                              const struct Acts *a);
/* The shared backward scratch; temporal: some block has temporal attention (its rows and frame-layout
 * gradients too). */
vfm_status attention_carve_scratch(const struct DiT *m, ActCarver *cv, AttnScratch *s, const struct Acts *a,
                                   int cross, int temporal);

double attention_flops(const struct DiT *m, const AttentionLayer *at, const FlopShape *s);
/* Bytes one rank sends for self-attention through CP with r rows per rank, b bytes per value. */
void attention_cp_bytes(const struct DiT *m, const AttentionLayer *at, double r, double b, double *fwd, double *bwd);

#endif
