/* The adaLN modulation of a block: n chunks of D values per sample from the conditioning c,
 *   mod[B, n·D] = W·silu(c) (+ b)            full rank (NeMo, the DiT reference), or
 *   mod[B, n·D] = W2·W1·silu(c)              adaLN-LoRA through rank R (DFM), or
 *   mod[B, n·D] = proj + table               Wan 2.1: the conditioning's shared projection
 *                                            (conditioning.h) plus the block's table [1, n, D],
 * then chunk k = mod[:, kD:(k+1)D], the (shift, scale, gate) of the block's sub-layers in order
 * (block.h). The chunks are per sample and broadcast over the sample's tokens. Parallel layout:
 * replicated over TP; its gradient is a sum over the sample's tokens, so under sequence parallelism
 * it is partial and sums over TP (REDUCE_TP_SP). Zero-initialised output: every block starts as
 * the identity. */
#ifndef VFM_MODEL_MODULATION_H
#define VFM_MODEL_MODULATION_H

#include "model/conditioning.h"
#include "model/layer.h"

enum { DIT_MAX_CHUNKS = 9 };

typedef struct ModulationLayer {
    int n_chunks;
    int64_t width;    /* D: the width of one chunk */
    Linear down, up;  /* LoRA: down [R, D], up [nD, R]; full rank: up [nD, D] only (down.w = -1) */
    int table;        /* Wan: the block's table [1, n, D] added to the shared projection (up.w = -1), or -1 */
} ModulationLayer;

/* What the forward keeps: the LoRA bottleneck u [B, R], mod [B, nD] and its chunks [B, D]. */
typedef struct ModActs {
    Tensor u, mod, chunk[DIT_MAX_CHUNKS];
} ModActs;

/* Backward scratch shared by every block: d(mod) (the final layer's 2-chunk modulation uses it
 * too), d(chunk k), d(u). */
typedef struct ModScratch {
    Tensor d_mod, d_chunk[DIT_MAX_CHUNKS], d_u;
} ModScratch;

/* "<name>.weight" [nD, D] (and "<name>.bias" with bias). */
void modulation_add_full(ModulationLayer *ml, ParamTable *t, const char *name, int64_t D, int n_chunks, int bias);
/* "<down>.weight" [R, D] (nn.Linear's initialisation) and "<up>.weight" [nD, R] (zero). */
void modulation_add_lora(ModulationLayer *ml, ParamTable *t, const char *down, const char *up, int64_t D, int n_chunks,
                         int64_t rank);
/* "<name>" [1, n, D], N(0, 1/D) (diffusers' randn/√D). */
void modulation_add_table(ModulationLayer *ml, ParamTable *t, const char *name, int64_t D, int n_chunks);
void modulation_handles(ModulationLayer *ml, const HandleVisitor *v);
/* b's chunks from the conditioning: silu(c) [B, D] (or, with a table, its shared projection). */
vfm_status modulation_forward(const struct DiT *m, const ModulationLayer *ml, ModActs *b, const CondActs *ca);
/* From s->d_chunk (every chunk's gradient, zero where unused): the weights' gradients, and
 * ca->d_silu += d(silu(c)) (with a table: ca->d_proj += d(mod)). */
vfm_status modulation_backward(const struct DiT *m, const ModulationLayer *ml, const ModActs *b, ModScratch *s,
                               CondActs *ca);
vfm_status modulation_carve(const ModulationLayer *ml, ActCarver *cv, ModActs *b, int samples);
/* d_mod is at least [B, 2D] wide (the final layer's). */
vfm_status modulation_carve_scratch(const ModulationLayer *ml, ActCarver *cv, ModScratch *s, int samples);
double modulation_flops(const struct DiT *m, const ModulationLayer *ml, const FlopShape *s);

#endif
