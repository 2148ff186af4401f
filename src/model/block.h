/* A transformer block: the adaLN modulation and a list of residual sub-layers, each
 *   h = h + gate ⊙ mixer(LN(h)·(1 + scale) + shift)
 * with (shift, scale, gate) the next three chunks of the block's modulation (any may be absent:
 * no shift or scale, a plain residual), LN a LayerNorm without affine, and the mixer
 * self-attention, cross-attention (attention.h) or the MLP (mlp.h). An architecture lists a
 * block's sub-layers in order (arch_*.c); docs/models.md "Adding an architecture".
 * MovieGen's forms (arch_moviegen.c): the norm may be an RMSNorm with the block's learnable weight
 * (one weight shared by the block's RMSNorms, as NeMo's AdaLN.ln), or none; a sub-layer may have no
 * residual: its output is not added to h but is what the next sub-layer normalises (MovieGen's
 * cross-attention feeds the MLP); and the block may first add the learned position (pos_learned.h)
 * to its input, h = h + pos.
 *
 * A block is the model's unit of everything that works per layer: its entries are contiguous in
 * the table (first_entry), so a pipeline stage holds whole blocks and ZeRO-3 gathers one block's
 * FSDP unit at a time; full recomputation replays whole blocks from their input; the probes of
 * the layout tests see the residual stream after each sub-layer. Under TP/SP the norm, modulation
 * and residual run on this rank's rows and each mixer is one TP region; under CP every op here is
 * row-local but self-attention's. */
#ifndef VFM_MODEL_BLOCK_H
#define VFM_MODEL_BLOCK_H

#include "model/attention.h"
#include "model/mlp.h"
#include "model/modulation.h"

enum { DIT_MAX_SUBLAYERS = 3 };

typedef enum { MIXER_SELF_ATTENTION, MIXER_CROSS_ATTENTION, MIXER_MLP } MixerKind;
/* The norm before a mixer: LayerNorm without affine; RMSNorm with the block's weight; none; LayerNorm
 * with the sub-layer's own weight and bias (block_affine_norm). */
typedef enum { NORM_LAYER, NORM_RMS, NORM_NONE, NORM_AFFINE } NormKind;

typedef struct SubLayer {
    MixerKind kind;
    NormKind norm;
    float norm_eps;          /* of the norm before the mixer */
    int residual;            /* 1: h = h + gate ⊙ out; 0: out is what the next sub-layer normalises */
    int shift, scale, gate;  /* the modulation's chunks, or -1 */
    int aff_w, aff_b;        /* NORM_AFFINE: the LayerNorm's weight and bias [D] (Wan's norm2), used instead
                              * of shift and scale; -1: none */
    AttentionLayer attn;     /* MIXER_SELF_ATTENTION, MIXER_CROSS_ATTENTION */
    MlpLayer mlp;            /* MIXER_MLP */
} SubLayer;

typedef struct DiTBlock {
    int first_entry;         /* the block's first table entry (its entries are contiguous) */
    int add_pos;             /* the block's input gets the learned position first (pos_learned.h) */
    int norm_w;              /* the RMSNorm weight [D] of its NORM_RMS sub-layers, or -1 */
    int chunks;              /* modulation chunks its sub-layers took so far */
    ModulationLayer mod;
    int n_sub;
    SubLayer sub[DIT_MAX_SUBLAYERS];
} DiTBlock;

/* A sub-layer's activations: the norm's statistics [Rl] (mean only for LayerNorm) and output
 * xm [Rl, D] (without a norm the mixer reads its input itself), the mixer's, and the mixer's output
 * [Rl, D] (before the gate). */
typedef struct SubActs {
    Tensor mean, rstd, xm;
    Tensor aff_shift, aff_scale; /* [B, D] an affine norm's bias and weight − 1 as per-sample rows */
    Tensor d_aff_shift, d_aff_scale; /* [B, D] their gradients */
    AttnActs attn;
    MlpActs mlp;
    Tensor out;
} SubActs;

/* h[k]: sub-layer k's input [Rl, D] (h[0] the block's; the last sub-layer writes the block's output
 * where the caller says); only after a sub-layer with a residual (the others leave h as it was).
 * hp [Rl, D]: h[0] + the position (add_pos). */
typedef struct BlockActs {
    Tensor h[DIT_MAX_SUBLAYERS], hp;
    ModActs mod;
    SubActs sub[DIT_MAX_SUBLAYERS];
} BlockActs;

/* "blocks.<l>.<part>", valid until the fourth call after. */
const char *block_name(int l, const char *part);
/* Starts a block at the table's end; its modulation is added next, then its sub-layers. */
void block_begin(DiTBlock *b, const ParamTable *t);
/* Appends a sub-layer taking the next three modulation chunks (shift, scale, gate); the caller
 * builds its mixer (attention_add, mlp_add) into the returned sub-layer (and may set other chunks). */
SubLayer *block_add(DiTBlock *b, MixerKind kind, float norm_eps);
/* Makes s's LayerNorm affine, "<name>.weight" (ones) and "<name>.bias" (zeros) [D], with no
 * modulation chunks and a plain residual (Wan's cross-attention: h = h + mixer(LN(h)·w + b)). */
void block_affine_norm(SubLayer *s, ParamTable *t, const char *name, int64_t D);
/* MovieGen's sub-layers (arch_moviegen.c): block_add with the RMSNorm of the block's weight
 * (block_norm_add first); and one without norm, modulation or residual whose output is what the
 * next sub-layer normalises (the next sub-layer's residual is this one's input). */
SubLayer *block_add_rms(DiTBlock *b, MixerKind kind, float norm_eps);
SubLayer *block_add_feeding(DiTBlock *b, MixerKind kind);
/* The block's RMSNorm weight "<name>" [D], ones; replicated, summed over tokens (REDUCE_TP_SP). */
void block_norm_add(DiTBlock *b, ParamTable *t, const char *name, int64_t D);
void block_handles(DiTBlock *b, const HandleVisitor *v);

/* Block l (global number) from b->h[0] into h_out. */
vfm_status block_forward(const struct DiT *m, int l, const DiTBlock *p, BlockActs *b, struct Acts *a,
                         const struct DiTInputs *in, Tensor *h_out);
/* Takes a->d_res = d(block output) (this rank's rows) and leaves d(block input) in it; adds the
 * block's modulation's share to the conditioning's gradient. */
vfm_status block_backward(const struct DiT *m, int l, const DiTBlock *p, const BlockActs *b, struct Acts *a,
                          const struct DiTInputs *in);

/* What of a block to carve: its input h[0], the rest, or both. */
/* CARVE_ROUTING: an MoE sub-layer's routing (moe_carve_routing), which a FULL recomputation group
 * keeps in the slot so its replay reuses it (never re-routes). */
enum { CARVE_INPUT = 1, CARVE_REST = 2, CARVE_ROUTING = 4, CARVE_ALL = 7 };
/* A block's activations (`what` of them); under selective recomputation (selective) its
 * attentions' o and lse are not carved (dit_carve_selective points them at the scratch's). */
vfm_status block_carve(const struct DiT *m, const DiTBlock *p, ActCarver *cv, BlockActs *b, const struct Acts *a,
                       int what, int selective);
/* 1 when the block has a sub-layer of this kind; its first MLP (NULL: none). */
int block_has(const DiTBlock *p, MixerKind kind);
const MlpLayer *block_mlp(const DiTBlock *p);
double block_flops(const struct DiT *m, const DiTBlock *p, const FlopShape *s);
/* Bytes one rank sends for the block: the TP regions and CP self-attention (layer.h, attention.h). */
void block_comm_bytes(const struct DiT *m, const DiTBlock *p, double r, double b, double *tp_fwd, double *tp_bwd,
                      double *cp_fwd, double *cp_bwd);

#endif
