/* MovieGen's learned factorized 3-D position (NeMo's FactorizedLearnable3DEmbedding): three tables
 * of rows of D values, one per axis, and per token
 *   pos(t, h, w) = E_t[t] + E_h[h] + E_w[w]
 * added to the residual stream at the start of every block (block.h add_pos), not once after the
 * patch embedding. The sum is made once per forward (pe [Rl, D], this rank's rows); its gradient is
 * the sum over the blocks of d(block input), gathered in d_pe and scattered into the tables once per
 * backward. Parallel layout: token-local (SP and CP give each rank its rows); the tables are on every
 * pipeline stage (every stage's blocks add them: REDUCE_PP) and replicated over TP (sums over
 * tokens: REDUCE_TP_SP); they belong to the embedders' FSDP unit, which is never sharded. */
#ifndef VFM_MODEL_POS_LEARNED_H
#define VFM_MODEL_POS_LEARNED_H

#include "model/layer.h"

typedef struct PosLearnedLayer {
    int on;
    int tab[3];       /* entries [rows[k], D]: t, h, w */
    int64_t rows[3];
} PosLearnedLayer;

/* pe [Rl, D] and its gradient d_pe [Rl, D] (the backward's, zeroed when it starts). */
typedef struct PosActs {
    Tensor pe, d_pe;
} PosActs;

/* "<prefix>.emb_t.weight" [rows[0], D], ".emb_h.weight", ".emb_w.weight": N(0, std²). */
void pos_learned_add(PosLearnedLayer *pl, ParamTable *t, const char *prefix, const int rows[3], int64_t D, float std);
void pos_learned_handles(PosLearnedLayer *pl, const HandleVisitor *v);
/* VFM_ERR_USAGE naming the sample and the key when a real token's (t, h, w) of the pack is outside
 * the tables (positions in host memory; the caller's pack is checked before it moves to a GPU). */
vfm_status pos_learned_check(const PosLearnedLayer *pl, const struct DiTInputs *in);
/* pe from this rank's positions pos [Rl, 3] and tok2sample [Rl]; d_pe = 0. Nothing when off. */
vfm_status pos_learned_forward(const struct DiT *m, const PosLearnedLayer *pl, PosActs *a, const Tensor *pos,
                               const Tensor *t2s);
vfm_status pos_learned_backward_begin(const PosLearnedLayer *pl, PosActs *a);
/* The tables' gradients from d_pe (what the blocks added to it). */
vfm_status pos_learned_backward(const struct DiT *m, const PosLearnedLayer *pl, PosActs *a, const Tensor *pos,
                                const Tensor *t2s);
vfm_status pos_learned_carve(const PosLearnedLayer *pl, ActCarver *cv, PosActs *a, int64_t rows, int64_t D);

#endif
