/* Internal to src/model: the activations one DiT forward keeps for its backward and the scratch
 * its backward reuses, carved from the model's arena (dit_acts.c; each layer carves its own:
 * block.h, conditioning.h, head.h); where a pack's rows live on this rank of a parallel layout
 * (dit_parallel.c); the model's own steps around its layers (which blocks this rank runs, FSDP,
 * recomputation, staging). Tensors a model does not use are left empty (data NULL).
 *
 * Row counts of one forward: S_in rows in the caller's whole pack; S rows in the internal whole
 * pack (the same pack, re-padded when a slot does not divide by CP, by TP·CP under SP); R = S/CP
 * rows inside TP regions (this CP rank's chunk of every sample); Rl rows between regions (R/TP
 * under SP, R otherwise). Widths per TP rank: Dq = heads/TP·hd, Dkv = kv_heads/TP·hd, ffn/TP. */
#ifndef VFM_DIT_INTERNAL_H
#define VFM_DIT_INTERNAL_H

#include "model/block.h"
#include "model/dit.h"
#include "parallel/st_layout.h"
#include "parallel/tp.h"

/* Where the caller's whole pack lives on this rank (dit_parallel.c). With one rank (and whenever
 * nothing moves) `identity` is 1 and x, t2s, pos are the caller's own tensors. */
typedef struct Placement {
    int identity;                  /* TP·CP = 1 or (no SP, CP = 1): the local rows are the whole pack */
    int repacked;                  /* the caller's slots did not divide: rows moved into new slots */
    int n;                         /* samples */
    int64_t S_in, S, R, Rl;
    int32_t *cu_real, *cu_in_pad;  /* host [n+1]: the caller's real and padded offsets */
    int32_t *cu_pad;               /* host [n+1]: the internal slots (= cu_in_pad unless repacked) */
    int32_t *t2s_host;             /* host [Rl] */
    int have_chunks;
    CpChunks ch;                   /* the internal pack in CP parts (parts = CP; 1 for SP alone) */
    int have_st;
    StLayout st;                   /* ST-DiT: the frame and position layouts of this rank (st_layout.h) */
    VarlenLayout self, cross;      /* the layouts this rank's ops see */
    Tensor x, t2s, pos;            /* [Rl, token_dim], [Rl] i32, [Rl, 3] i32 */
    Tensor pos_r;                  /* [R, 3] i32: the positions of a TP region's rows (RoPE; pos without SP) */
} Placement;

/* CUDA: the device copies of a pack given in host memory, and the DiTInputs that point at them
 * (dit.h "DiTInputs"; dit_stage.c). */
typedef struct Staging {
    int on;                               /* the last forward's inputs were in host memory */
    Tensor x, x32, text, text32;          /* [S,tok] act / f32, [L,d_text] act / f32 */
    Tensor c_noise, fps, labels;          /* [B] f32, f32, i32 */
    Tensor t2s, pos;                      /* [S] i32, [S,3] i32 */
    Tensor cu[8];                         /* [B+1] i32: self q, q padded, kv, kv padded; the same for cross */
    Tensor out, out32, dout;              /* [S,out] act, f32, act */
    DiTInputs in;
} Staging;

typedef struct Acts {
    int64_t S, R, Rl, L;           /* S here = the caller's S_in (what dit_backward checks) */
    int64_t Rt;                    /* rows of ST-DiT's temporal layout (R without one) */
    int B;
    Placement pl;
    Staging stage;
    /* parallel scratch: the whole pack in internal slots, a CP chunk set, the CP gather's staging,
     * this rank's output rows, a region's gathered input and a row-parallel output */
    Tensor w_whole, w_cp, w_gather;       /* [S, wmax], [R, wmax], [S, out] (wmax = max(token_dim, out, 3)) */
    Tensor out_local, dout_local;         /* [Rl, out] */
    Tensor xm_full, partial;              /* [R, D] */
    Tensor x_perm;                        /* [Rl, token_dim] tokens in conv column order (embed.h) */
    CondActs cond;
    PosActs pos;                          /* the learned position and its gradient (moviegen) */
    BlockActs *blocks;                    /* [layers], indexed by global block */
    Tensor h_final;                       /* [Rl,D] output of the last block */
    HeadActs head;
    /* backward scratch, reused by every block: the residual stream's gradient, a mixer's output
     * gradient and its normed input's, and (SP) the region's rows of both */
    Tensor d_res, d_branch, d_xm;         /* [Rl,D] */
    Tensor d_xm_full, d_partial;          /* [R,D] (SP; otherwise views of d_xm, d_branch) */
    AttnScratch attn;
    MlpScratch mlp;
    ModScratch mod;
    /* recomputation (dit_recompute.c), in the model's scratch arena: SELECTIVE blocks' attention
     * outputs, one pair per attention of a block, shared by every block; a FULL group's replayed
     * output, not needed again */
    int b0, b1;                           /* the chunk carved: global blocks [b0, b1) */
    int replaying;                        /* a FULL group's forward again: MoE layers reuse their routing */
    AttnActs rc[DIT_MAX_SUBLAYERS];       /* o [R,Dq], lse [R,H/TP] */
    Tensor rc_sink;                       /* [Rl,D] */
} Acts;

/* The saved activations of one chunk forward (dit.h "DiTSaved"): its tensors and their arena.
 * a.blocks has an entry per global block; only the chunk's blocks [b0, b1) are carved. */
struct DiTSaved {
    Acts a;
    Arena arena;
    int b0, b1;      /* the chunk of the forward that filled it (b1 = 0: none yet) */
};

/* ---- dit_layout.c: which blocks this rank runs, and how ---- */
/* The parameters of global block l (this rank must hold it). */
const DiTBlock *dit_block(const DiT *m, int l);
/* Global block l's recomputation plan in the chunk [b0, b1) (recompute_block; group bounds are
 * global blocks). */
RecomputeBlock dit_recompute_block(const DiT *m, int b0, int b1, int l);
/* 1 when one of this rank's blocks has a mixer of this kind. */
int dit_has_mixer(const DiT *m, MixerKind kind);

/* ---- weights.c: where the weights and gradients are ---- */
/* Element `at` of entry i's weights as the ops read them (*dt: their dtype): the act-dtype copy or
 * the fp32 master, or (m->fsdp) its unit's buffer, which must be gathered. */
void *dit_weight_ptr(const DiT *m, int entry, int64_t at, DType *dt);
/* Element `at` of entry i's fp32 gradient: the model's buffer, or (m->fsdp) its unit's, between
 * dit_fsdp_grads_begin and _end. */
float *dit_grad_ptr(const DiT *m, int entry, int64_t at);
/* The act-dtype copy of the table's elements [begin, end), read from src (element begin first), into
 * dst laid out by m->wplace from its element dst_at (the whole model's copy: 0). */
vfm_status dit_convert_placed(const DiT *m, void *dst, int64_t dst_at, const float *src, int64_t begin, int64_t end);

/* ---- dit_acts.c ---- */
/* Raises m->slot_bytes and the recomputation scratch to what this planned pack (a->pl) needs when
 * dit_reserve's bounds fell short (ST-DiT pads samples to whole frames per CP rank). */
vfm_status dit_fit_pack(DiT *m, const Acts *a, int64_t L, int B, int b0, int b1);
/* Sizes the slot's arena to m->slot_bytes when it is smaller (before carving a forward into it). */
vfm_status dit_saved_fit(DiT *m, DiTSaved *sv);
/* Lays out the activations of a pack (a->pl sized: S, R, Rl), L text rows and B samples, with
 * the BlockActs of blocks [b0, b1) (a->blocks is indexed by global block). With arena NULL only
 * counts *bytes (what dit_reserve needs); otherwise carves from the arena. */
vfm_status dit_carve_acts(const DiT *m, Arena *arena, size_t *bytes, Acts *a, int64_t L, int B, int b0, int b1);
/* Recomputation's scratch (m->rc_scratch, rewound): the activations of blocks [first, end) of a
 * FULL group — block first without its kept input h[0], the others whole — and a->rc_sink. */
vfm_status dit_carve_group(DiT *m, Acts *a, int first, int end);
/* The same for SELECTIVE: the attention outputs, which every block of the chunk then points at. */
vfm_status dit_carve_selective(DiT *m, Acts *a);

/* ---- dit_recompute.c ---- */
/* Forward, before block l: the scratch for l's group when l starts a FULL group. */
vfm_status dit_recompute_forward_begin(DiT *m, Acts *a, int l);
/* Backward, before block l: when l ends a FULL group, the group's forward again from its kept input
 * (the probes stay silent). */
vfm_status dit_recompute_backward_begin(DiT *m, Acts *a, const DiTInputs *in, int l);

/* ---- dit_fsdp.c: the ZeRO-2/3 hooks of the block loop ---- */
/* Around block l's forward: gather its unit (and prefetch block next's, when next >= 0: the next
 * block of the chunk); release it. */
vfm_status dit_fsdp_forward_begin(DiT *m, int l, int next);
vfm_status dit_fsdp_forward_end(DiT *m, int l);
/* Around block l's backward: gather (prefetch block next's unit: the chunk's block before it, or
 * -1), the unit's gradient buffer; then release and reduce it. */
vfm_status dit_fsdp_backward_begin(DiT *m, int l, int next);
vfm_status dit_fsdp_backward_end(DiT *m, int l);
/* The same for the unit holding `entry` outside the blocks (the embedders: 0, the final layer:
 * m->head_first), which is never sharded: the gradient buffer (kept when an earlier chunk of the
 * same backward began it: every chunk adds to the embedders), then the reduction. */
vfm_status dit_fsdp_grads_begin(DiT *m, int entry);
vfm_status dit_fsdp_grads_end(DiT *m, int entry);
/* bf16 weights: the whole units' copies from their fp32 parameters (dit_refresh_weights); and
 * every unit's copy freed (dit_destroy). */
vfm_status dit_fsdp_refresh_weights(DiT *m);
void dit_fsdp_wcopy_free(DiT *m);

/* ---- dit_stage.c ---- */
/* When the model is on CUDA and in's tensors are in host memory: copies them into a->stage (carved)
 * and sets *in to a->stage.in; otherwise leaves *in as it is. */
vfm_status dit_stage_inputs(DiT *m, Acts *a, const DiTInputs **in, const Tensor *out);
/* The output tensor the final layer writes: a->stage.out when staged, else out. */
Tensor *dit_stage_out(Acts *a, Tensor *out);
/* After the forward: out (host f32) from a->stage.out when staged. */
vfm_status dit_stage_output(DiT *m, Acts *a, Tensor *out);
/* Before the backward: *dout points at a->stage.dout filled from the host f32 dout when staged. */
vfm_status dit_stage_dout(DiT *m, Acts *a, const Tensor **dout);

/* ---- dit_parallel.c ---- */
/* The rows of the caller's pack: the placement's offsets and row counts (no tensors yet). */
vfm_status dit_place_plan(const DiT *m, const DiTInputs *in, Placement *pl);
/* Upper bounds of S, R, Rl for a pack of up to max_tokens rows and max_samples samples. */
void dit_place_bounds(const DiT *m, int64_t max_tokens, int max_samples, Placement *pl);
/* S, R, Rl of a pack as the encoder makes it: `rows` rows (rounded up to the slot multiple, TP·CP
 * under SP, CP otherwise), every sample already padded to that multiple, so nothing is re-padded. */
void dit_place_packed(const DiT *m, int64_t rows, Placement *pl);
void dit_place_free(Placement *pl);
/* After carving: this rank's x, tok2sample, positions and the layouts. */
vfm_status dit_place_inputs(DiT *m, Acts *a, const DiTInputs *in);
/* whole_out[S_in, out] on every rank from this rank's out_local[Rl, out]. */
vfm_status dit_gather_output(DiT *m, Acts *a, Tensor *whole_out);
/* dout_local[Rl, out] = this rank's rows of the whole dout[S_in, out]. */
vfm_status dit_scatter_dout(DiT *m, Acts *a, const Tensor *dout);
/* The TP regions with the model's TP context (tp.h), and the self-attention through CP. */
TpContext dit_tp_context(const DiT *m);
vfm_status dit_self_attention_forward(const DiT *m, const Acts *a, AttnSpan span, Tensor *o, Tensor *lse,
                                      const Tensor *q, const Tensor *k, const Tensor *v);
vfm_status dit_self_attention_backward(const DiT *m, const Acts *a, AttnSpan span, Tensor *dq, Tensor *dk, Tensor *dv,
                                       const Tensor *dout, const Tensor *q, const Tensor *k, const Tensor *v,
                                       const Tensor *o, const Tensor *lse);

/* ---- dit_stdit.c: ST-DiT's placement and row moves (parallel/st_layout.h) ---- */
/* Per-sample frames (t) and tokens per frame (n) of the caller's pack from its positions (t-major
 * frames of equal size: VFM_ERR_USAGE naming the sample otherwise); host arrays [n_samples]. */
vfm_status dit_st_shapes(const DiT *m, const DiTInputs *in, const Placement *pl, int *t, int *n);
/* Sample i's slot rows under ST-DiT: P·F frame slots of n tokens, F = ⌈t/P⌉ raised so F·n divides by
 * TP under sequence parallelism. */
int32_t dit_st_slot(const DiT *m, int t, int n);
/* pl->st from the placement (after its chunks): this rank's samples and the layouts. */
vfm_status dit_st_plan(const DiT *m, Placement *pl, const int *t, const int *n);
/* Spatial or temporal attention on this rank (local, or the ring under plain p2p). */
vfm_status dit_st_attention_forward(const DiT *m, const Acts *a, AttnSpan span, Tensor *o, Tensor *lse,
                                    const Tensor *q, const Tensor *k, const Tensor *v);
vfm_status dit_st_attention_backward(const DiT *m, const Acts *a, AttnSpan span, Tensor *dq, Tensor *dk, Tensor *dv,
                                     const Tensor *dout, const Tensor *q, const Tensor *k, const Tensor *v,
                                     const Tensor *o, const Tensor *lse);
/* The temporal layout of frame-layout rows and back (st_layout.h, over the CP group). */
vfm_status dit_st_to_positions(const DiT *m, const Acts *a, Tensor *y, const Tensor *x, int skip);
vfm_status dit_st_to_frames(const DiT *m, const Acts *a, Tensor *x, const Tensor *y);
/* The bytes this rank's CP comms have sent so far (comm.h bytes_sent; each comm once). */
double dit_cp_bytes_sent(const DiT *m);

#endif
