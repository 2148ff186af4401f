/* The output head (docs/models.md): DFM's plain Linear(D → out), or the DiT reference's
 *   out = Linear(LN(h)·(1 + scale) + shift),  (shift, scale) = Linear(silu(c))
 * (the LayerNorm without affine, every weight zero-initialised), or Wan 2.1's
 *   out = Linear(LN(h)·(1 + scale) + shift),  (shift, scale) = table[1, 2, D] + c   (c itself, not silu(c)).
 * Parallel layout: replicated over TP, token-local; under PP only the last stage holds it. */
#ifndef VFM_MODEL_HEAD_H
#define VFM_MODEL_HEAD_H

#include "model/conditioning.h"
#include "model/layer.h"
#include "model/modulation.h"

typedef struct FinalLayer {
    int adaln;        /* 1: LayerNorm + shift/scale before the Linear */
    float norm_eps;
    Linear ada, out;  /* ada [2D, D] (adaln), out [out, D] */
    int table;        /* Wan: (shift, scale) = table [1, 2, D] + c (adaln set, ada absent), or -1 */
} FinalLayer;

typedef struct HeadActs {
    Tensor mod, shift, scale, mean, rstd, xm; /* [B,2D], [B,D], [B,D], [Rl], [Rl], [Rl,D] */
} HeadActs;

/* "<name>.weight" [out, D] and its bias (nn.Linear's initialisation). */
void head_add_linear(FinalLayer *hl, ParamTable *t, const char *name, int64_t D, int64_t out);
/* "<linear>.weight/bias" [out, D] and then "<ada>.weight/bias" [2D, D], all zero. */
void head_add_adaln(FinalLayer *hl, ParamTable *t, const char *linear, const char *ada, int64_t D, int64_t out,
                    float eps);
/* Wan: "<linear>.weight/bias" [out, D] (nn.Linear's) and then "<table>" [1, 2, D], N(0, 1/D). */
void head_add_table(FinalLayer *hl, ParamTable *t, const char *linear, const char *table, int64_t D, int64_t out,
                    float eps);
void head_handles(FinalLayer *hl, const HandleVisitor *v);
/* out from the last block's h[Rl, D] and the conditioning (silu(c) [B, D], or c). */
vfm_status head_forward(const struct DiT *m, const FinalLayer *hl, HeadActs *b, const Tensor *h,
                        const CondActs *ca, const Tensor *t2s, Tensor *out);
/* From dout: d_h = d(h), ca->d_silu = the head's share of d(silu(c)) (=), and ca->d_c += its share of
 * d(c) (the table form); s: the modulation scratch. */
vfm_status head_backward(const struct DiT *m, const FinalLayer *hl, const HeadActs *b, ModScratch *s, const Tensor *h,
                         CondActs *ca, const Tensor *t2s, const Tensor *dout, Tensor *d_xm, Tensor *d_h);
vfm_status head_carve(const FinalLayer *hl, ActCarver *cv, HeadActs *b, int64_t D, int64_t rows, int samples);
double head_flops(const struct DiT *m, const FinalLayer *hl, const FlopShape *s);

#endif
