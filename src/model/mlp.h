/* The MLP layer (docs/models.md):
 *   GELU    out = fc2(gelu(fc1(x)))                    fc1 [F, D], erf or tanh GELU
 *   SwiGLU  out = fc2(silu(g) ⊙ u), [g | u] = fc1(x)   fc1 [2F, D]: the gate rows, then the value rows
 * fc1 is column-parallel and fc2 row-parallel (layer.h's TP region): each TP rank holds F/TP units
 * (SwiGLU: F/TP gate and F/TP value rows, fc1 split in two parts). The slot of every architecture's
 * MLP: with MlpSpec.moe.experts > 0 the slot is a mixture-of-experts layer (moe.h), and every
 * function below hands it on. */
#ifndef VFM_MODEL_MLP_H
#define VFM_MODEL_MLP_H

#include "model/layer.h"
#include "model/moe.h"

typedef struct MlpLayer {
    int swiglu;         /* 1: SwiGLU; 0: GELU of kind act */
    Activation act;
    Linear fc1, fc2;
    MoeLayer moe;       /* moe.s.experts > 0: the slot is this MoE layer (fc1, fc2 unused) */
} MlpLayer;

typedef struct MlpSpec {
    int64_t ffn;        /* hidden units F */
    int swiglu;
    Activation act;     /* GELU kind (not SwiGLU) */
    LinearSpec in, out; /* initialisation of fc1 and fc2 (their TP split is the layer's) */
    const char *fc1_name, *fc2_name; /* NULL: "fc1", "fc2" */
    MoeSpec moe;        /* experts > 0: a mixture-of-experts layer instead (its in, out, act: the
                         * caller's in, out and act when left zero) */
} MlpSpec;

/* What the forward keeps: fc1's output [R, F/TP] (SwiGLU [R, 2F/TP]) and the hidden units [R, F/TP]. */
typedef struct MlpActs {
    Tensor pre, h;
    MoeActs moe;
} MlpActs;

/* Backward scratch shared by every MLP: d(h) [R, F/TP], and SwiGLU's d(fc1 output) [R, 2F/TP]. */
typedef struct MlpScratch {
    Tensor d_h, d_pre;
    MoeScratch moe;
} MlpScratch;

/* Appends "<prefix>.fc1" [F, D] (SwiGLU [2F, D]) and "<prefix>.fc2" [D, F]. */
void mlp_add(MlpLayer *ml, ParamTable *t, const char *prefix, int64_t D, const MlpSpec *s);
void mlp_handles(MlpLayer *ml, const HandleVisitor *v);
/* out[Rl, D] = the MLP of xm[Rl, D]; the backward from a->d_branch to a->d_xm. */
vfm_status mlp_forward(const struct DiT *m, const MlpLayer *ml, MlpActs *b, struct Acts *a, const Tensor *xm,
                       Tensor *out);
vfm_status mlp_backward(const struct DiT *m, const MlpLayer *ml, const MlpActs *b, struct Acts *a, const Tensor *xm);
vfm_status mlp_carve(const struct DiT *m, const MlpLayer *ml, ActCarver *cv, MlpActs *b, const struct Acts *a);
/* mlp_carve without an MoE layer's routing (moe_carve_routing: block.h CARVE_ROUTING carves it
 * where a recomputation group keeps it). */
vfm_status mlp_carve_rest(const struct DiT *m, const MlpLayer *ml, ActCarver *cv, MlpActs *b, const struct Acts *a);
vfm_status mlp_carve_scratch(const struct DiT *m, const MlpLayer *ml, ActCarver *cv, MlpScratch *s,
                             const struct Acts *a);
double mlp_flops(const struct DiT *m, const MlpLayer *ml, const FlopShape *s);

#endif
