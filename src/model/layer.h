/* What every layer of the model shares (docs/models.md "Layers"):
 *  - Linear: a linear layer's parameters in the table, how they are initialised and split over TP
 *    (LinearSpec), and its forward/backward over the op API (linear.c);
 *  - the tensor-parallel region every token mixer (attention, MLP) runs in: Megatron's
 *    column-parallel linears in, a row-parallel linear out, the rows gathered and scattered under
 *    sequence parallelism (region.c);
 *  - ActCarver: a layer lays out its activations in the model's arena, or counts their bytes (carve.c);
 *  - HandleVisitor: every parameter handle of a layer, for the passes that rewrite them (the TP
 *    shard's rows, the pipeline stage's entries);
 *  - FlopShape: the sizes of a pack a layer's FLOPs depend on.
 * A layer's functions take the model (struct DiT, dit.h) and its activations (struct Acts,
 * dit_internal.h): weights and gradients are read through the model, wherever they live. */
#ifndef VFM_MODEL_LAYER_H
#define VFM_MODEL_LAYER_H

#include "core/arena.h"
#include "model/params.h"
#include "ops/ops.h"

struct DiT;
struct DiTConfig;
struct DiTInputs;
struct Acts;

/* A linear layer's parameters: weight entry w (rows [row0, row0 + out) of it) and bias entry b
 * (elements [row0, row0 + out)), or -1. w = -1: the layer is absent. Fused weights (qkv) hand out
 * row blocks of one entry. */
typedef struct Linear {
    int w, b;
    int64_t row0, out;
} Linear;
#define LINEAR_NONE ((Linear){-1, -1, 0, 0})

/* How a linear layer's weight and bias are initialised and distributed. */
typedef struct LinearSpec {
    ParamInit w_init;
    float w_scale;
    int bias;
    ParamInit b_init;
    float b_scale;
    unsigned groups; /* reduce groups besides DP×CP */
    int tp_dim;      /* 0 column-parallel (the bias splits too), 1 row-parallel, -1 replicated */
} LinearSpec;

/* PyTorch nn.Linear's default: U(±1/√fan_in) for weight and bias, replicated. */
LinearSpec linear_torch_default(int64_t fan_in, unsigned groups);
/* Zero weight (and bias), replicated: the adaLN projections and the DiT reference's output head. */
LinearSpec linear_zeros(int bias, unsigned groups);
/* Megatron's N(0, std²) weight, zero bias (when bias); the DiT reference's xavier-uniform weight,
 * zero bias. No reduce groups; the layer sets the TP split. */
LinearSpec linear_normal(float std, int bias);
LinearSpec linear_xavier(int bias);
/* Appends "<name>.weight" [out, in] and, when the spec has one, "<name>.bias" [out]. A row-parallel
 * layer's bias is replicated and added by TP rank 0 only (linear.c): its gradient sums over TP. */
Linear linear_add(ParamTable *t, const char *name, int64_t out, int64_t in, LinearSpec s);
/* The row block [row0, row0 + out) of a fused linear. */
Linear linear_rows(Linear l, int64_t row0, int64_t out);
/* Appends a vector parameter [n] named `name` (norm weights). */
int vector_add(ParamTable *t, ParamInit init, int64_t n, unsigned groups, const char *name);

/* Entry `entry` as the ops read it (the act-dtype copy, the fp32 master or its FSDP unit), and its
 * fp32 gradient, in the entry's shape. */
Tensor layer_param(const struct DiT *m, int entry);
Tensor layer_grad(const struct DiT *m, int entry);
/* y[N, out] = act(x·Wᵀ + b); pre keeps the pre-activation when act is not ACT_NONE. */
vfm_status linear_forward(const struct DiT *m, Tensor *y, Tensor *pre, const Tensor *x, const Linear *l,
                          Activation act);
/* dW += dpreᵀ·x, db += Σ dpre, dx = (or += when accumulate) dpre·W; dx may be NULL. */
vfm_status linear_backward(const struct DiT *m, Tensor *dx, int accumulate, Tensor *dy, const Tensor *x,
                           const Linear *l, const Tensor *pre, Activation act);
/* This TP rank's rows of a column-parallel linear (out/TP rows from row0/TP); others unchanged. */
void linear_localize(const struct DiT *m, Linear *l);
/* 2 FLOPs per multiply-add of the linear over `rows` rows, at the widths of the model's table (a
 * one-rank model's: the whole layer). */
double linear_flops(const struct DiT *m, const Linear *l, double rows);

/* ---- a parameter vector as per-sample rows (vector_rows.c) -------------------------------------
 * Wan's learned tables (the blocks' and the head's scale_shift_table, the cross-attention norm's
 * weight and bias) enter the per-sample modulation: out[B, n] = entry (its n values) in every row,
 * through the row lookup with index 0 (zeros [B] i32 holds zeros). */
vfm_status vector_rows(const struct DiT *m, Tensor *out, int entry, const Tensor *zeros);
/* entry's gradient += Σ_b d[b] (d [B, n]). */
vfm_status vector_rows_backward(const struct DiT *m, const Tensor *d, int entry, const Tensor *zeros);

/* ---- the TP region of a token mixer (region.c) -------------------------------------------------
 * Between regions each rank holds its Rl rows of the residual stream; inside, the R rows of its CP
 * chunk (all TP ranks alike) and 1/TP of the heads or MLP units. */
/* full: the rows the region's column-parallel linears read: xm itself, or (SP) every TP rank's rows
 * gathered into the region scratch. The backward calls it again (Megatron's re-gather under SP). */
vfm_status region_enter(const struct DiT *m, const struct Acts *a, const Tensor *xm, Tensor *full);
/* local[Rl, D] = the row-parallel linear l of x[R, in] summed over TP (all-reduce, or SP:
 * reduce-scatter to this rank's rows). skip: the broken variant of the tests (no sum). */
vfm_status region_exit(const struct DiT *m, const struct Acts *a, Tensor *local, const Tensor *x, const Linear *l,
                       int skip);
/* The gradient rows of the row-parallel linear's output: a->d_branch, or (SP) every rank's rows. */
vfm_status region_exit_backward(const struct DiT *m, struct Acts *a, Tensor *dpartial);
/* a->d_xm[Rl, D] = the local rows' gradient from the region's summed column-parallel input
 * gradient a->d_xm_full (all-reduce, or SP: reduce-scatter). */
vfm_status region_enter_backward(const struct DiT *m, struct Acts *a);
/* Bytes one rank sends for one region over a pack of r rows per CP rank of D values of b bytes:
 * forward (an all-reduce, or an all-gather and a reduce-scatter) and backward (+ the re-gather). */
void region_comm_bytes(const struct DiT *m, double r, double b, double *fwd, double *bwd);

/* ---- every parameter handle of a layer ---------------------------------------------------------- */
typedef struct HandleVisitor {
    void (*linear)(void *ctx, Linear *l); /* called for present layers only (w >= 0); NULL: none */
    void (*entry)(void *ctx, int *e);     /* called for present entries only (>= 0); NULL: none */
    void *ctx;
} HandleVisitor;
void visit_linear(const HandleVisitor *v, Linear *l);
void visit_entry(const HandleVisitor *v, int *e);

/* ---- activations in the arena (carve.c) ------------------------------------------------------- */
/* Carves tensors out of the arena, or only counts bytes (arena NULL). */
typedef struct ActCarver {
    Arena *arena;
    size_t bytes;
    Device device;
    DType act;  /* the activations' dtype */
    int spare;  /* rows kept after each attention operand (CUDA: ATTN_SPARE_ROWS) */
} ActCarver;
/* [d0, d1] (d1 = 0: [d0]): an activation in the act dtype; a statistic in f32; dtype dt; an
 * attention operand or its gradient (spare rows after it: cuDNN may read a tile past the end). */
vfm_status carve_act(ActCarver *cv, Tensor *t, int64_t d0, int64_t d1);
vfm_status carve_f32(ActCarver *cv, Tensor *t, int64_t d0, int64_t d1);
vfm_status carve_as(ActCarver *cv, Tensor *t, DType dt, int64_t d0, int64_t d1);
vfm_status carve_attn(ActCarver *cv, Tensor *t, int64_t d0, int64_t d1);

/* ---- FLOPs ------------------------------------------------------------------------------------- */
/* What a pack's FLOPs depend on (real rows only): token rows, text rows, samples, and Σ q², Σ q·l
 * over the samples (the attention score pairs of self- and cross-attention); ST-DiT's Σ t·n² and
 * Σ n·t² (spatial and temporal attention of samples of t frames of n tokens). */
typedef struct FlopShape {
    double tokens, text, samples, self_pairs, cross_pairs;
    double spatial_pairs, temporal_pairs;
} FlopShape;

#endif
