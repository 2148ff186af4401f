/* The MLP layer: out = fc2(act(fc1(x))) with erf- or tanh-GELU (docs/models.md). fc1 is
 * column-parallel and fc2 row-parallel (layer.h's TP region): each TP rank holds ffn/TP units.
 * The slot of every architecture's MLP: a SwiGLU MLP and the mixture-of-experts layer take this
 * place in a block (block.h MIXER_MLP) with the same interface. */
#ifndef VFM_MODEL_MLP_H
#define VFM_MODEL_MLP_H

#include "model/layer.h"

typedef struct MlpLayer {
    Activation act;
    Linear fc1, fc2;
} MlpLayer;

typedef struct MlpSpec {
    int64_t ffn;        /* hidden units */
    Activation act;
    LinearSpec in, out; /* initialisation of fc1 and fc2 (their TP split is the layer's) */
} MlpSpec;

/* What the forward keeps: fc1's output before and after the activation, [R, ffn/TP] each. */
typedef struct MlpActs {
    Tensor pre, h;
} MlpActs;

/* Appends "<prefix>.fc1" [ffn, D] and "<prefix>.fc2" [D, ffn]. */
void mlp_add(MlpLayer *ml, ParamTable *t, const char *prefix, int64_t D, const MlpSpec *s);
void mlp_handles(MlpLayer *ml, const HandleVisitor *v);
/* out[Rl, D] = the MLP of xm[Rl, D]; the backward from a->d_branch to a->d_xm. */
vfm_status mlp_forward(const struct DiT *m, const MlpLayer *ml, MlpActs *b, struct Acts *a, const Tensor *xm,
                       Tensor *out);
vfm_status mlp_backward(const struct DiT *m, const MlpLayer *ml, const MlpActs *b, struct Acts *a, const Tensor *xm);
vfm_status mlp_carve(const struct DiT *m, ActCarver *cv, MlpActs *b, const struct Acts *a);
/* Backward scratch shared by every MLP: d(h) [R, ffn/TP]. */
vfm_status mlp_carve_scratch(const struct DiT *m, ActCarver *cv, Tensor *d_h, const struct Acts *a);
double mlp_flops(const struct DiT *m, const MlpLayer *ml, const FlopShape *s);

#endif
