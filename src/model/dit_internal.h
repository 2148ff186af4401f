/* Internal to src/model: the activation tensors one DiT forward keeps for its backward, and the
 * scratch its backward reuses, carved from the model's arena (dit_acts.c); where a pack's rows
 * live on this rank of a parallel layout (dit_parallel.c). Tensors a variant does not use are
 * left empty (data NULL).
 *
 * Row counts of one forward: S_in rows in the caller's whole pack; S rows in the internal whole
 * pack (the same pack, re-padded when a slot does not divide by CP, by TP·CP under SP); R = S/CP
 * rows inside TP regions (this CP rank's chunk of every sample); Rl rows between regions (R/TP
 * under SP, R otherwise). Widths per TP rank: Dq = heads/TP·hd, Dkv = kv_heads/TP·hd, ffn/TP. */
#ifndef VFM_DIT_INTERNAL_H
#define VFM_DIT_INTERNAL_H

#include "model/dit.h"
#include "parallel/tp.h"

enum { DIT_MAX_CHUNKS = 9 };

typedef struct BlockActs {
    Tensor h0, h1, h2;                    /* [Rl,D] residual stream before each sub-layer (h2 = h1 without cross) */
    Tensor mean[3], rstd[3];              /* [Rl] LayerNorm statistics per site (sa, ca, mlp) */
    Tensor xm[3];                         /* [Rl,D] modulated LayerNorm outputs */
    Tensor q, k, v, qn, kn, q_rstd, k_rstd; /* q,qn [R,Dq]; k,v,kn [R,Dkv]; rstd [R·H/TP], [R·Hkv/TP] */
    Tensor o, lse, a;                     /* o [R,Dq]; lse [R,H/TP]; a [Rl,D] */
    Tensor cq, cqn, cq_rstd;              /* [R,Dq], [R·H/TP] */
    Tensor ck, cv, ckn, ck_rstd;          /* [L,Dq], [L·H/TP] */
    Tensor co, clse, c;                   /* [R,Dq], [R,H/TP], [Rl,D] */
    Tensor f_pre, f, mo;                  /* [R,ffn/TP], [R,ffn/TP], [Rl,D] */
    Tensor u, mod, chunk[DIT_MAX_CHUNKS]; /* [B,R] (LoRA), [B,nD], [B,D] each */
} BlockActs;

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
    VarlenLayout self, cross;      /* the layouts this rank's ops see */
    Tensor x, t2s, pos;            /* [Rl, token_dim], [Rl] i32, [Rl, 3] i32 */
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
    int B;
    Placement pl;
    Staging stage;
    /* parallel scratch: the whole pack in internal slots, a CP chunk set, the CP gather's staging,
     * this rank's output rows, a region's gathered input and a row-parallel output */
    Tensor w_whole, w_cp, w_gather;       /* [S, wmax], [R, wmax], [S, out] (wmax = max(token_dim, out, 3)) */
    Tensor out_local, dout_local;         /* [Rl, out] */
    Tensor xm_full, partial;              /* [R, D] */
    Tensor x_perm;                        /* [Rl, token_dim] tokens in conv column order (conv_patch) */
    Tensor t_in, t1_pre, t1, t_emb;       /* [B,tf], [B,D], [B,D], [B,D] */
    Tensor f_in, f1_pre, f1, f_emb;       /* [B,F] (fps embedder) */
    Tensor y_emb;                         /* [B,D] class embedding */
    Tensor cond_raw, cond_rstd, cond;     /* [B,D], [B], [B,D]: cond = RMSNorm(cond_raw) or cond_raw itself */
    Tensor cond_silu;                     /* [B,D] */
    Tensor h_final;                       /* [Rl,D] output of the last block */
    Tensor fmod, fshift, fscale, fmean, frstd, fxm; /* final adaLN: [B,2D], [B,D], [B,D], [Rl], [Rl], [Rl,D] */
    BlockActs *blocks;
    /* backward scratch, reused by every block */
    Tensor d_res, d_branch, d_xm;                        /* [Rl,D] */
    Tensor d_xm_full, d_partial;                         /* [R,D] (SP; otherwise views of d_xm, d_branch) */
    Tensor d_attn_o;                                     /* [R,Dq] */
    Tensor d_q, d_qn, d_k, d_kn, d_v;                    /* [R,Dq] / [R,Dkv] */
    Tensor d_ffn;                                        /* [R,ffn/TP] */
    Tensor d_ck, d_ckn, d_cv;                            /* [L,Dq] */
    Tensor d_mod, d_chunk[DIT_MAX_CHUNKS], d_u;          /* [B,nD], [B,D], [B,R] */
    Tensor d_cond_silu, d_cond, d_cond_raw, d_t1, d_f_emb, d_f1; /* [B,D] / [B,F] */
} Acts;

/* The saved activations of one chunk forward (dit.h "DiTSaved"): its tensors and their arena.
 * a.blocks has an entry per global block; only the chunk's blocks [b0, b1) are carved. */
struct DiTSaved {
    Acts a;
    Arena arena;
    int b0, b1;      /* the chunk of the forward that filled it (b1 = 0: none yet) */
};

/* Lays out the activations of a pack (a->pl sized: S, R, Rl), L text rows and B samples, with
 * the BlockActs of blocks [b0, b1) (a->blocks is indexed by global block). With arena NULL only
 * counts *bytes (what dit_reserve needs); otherwise carves from the arena. */
/* Sizes the slot's arena to m->slot_bytes when it is smaller (before carving a forward into it). */
vfm_status dit_saved_fit(DiT *m, DiTSaved *sv);
/* The most blocks a chunk of this rank holds (dit_reserve sizes a slot for it). */
int dit_max_chunk_blocks(const DiT *m);
/* The parameters of global block l (this rank must hold it). */
const DiTBlockParams *dit_block(const DiT *m, int l);
vfm_status dit_carve_acts(const DiT *m, Arena *arena, size_t *bytes, Acts *a, int64_t L, int B, int b0, int b1);

/* ---- dit_fsdp.c: where the weights and gradients are, and the ZeRO-2/3 hooks ---- */
/* Element `at` of entry i's weights as the ops read them (*dt: their dtype): the act-dtype copy or
 * the fp32 master, or (m->fsdp) its unit's buffer, which must be gathered. */
void *dit_weight_ptr(const DiT *m, int entry, int64_t at, DType *dt);
/* Element `at` of entry i's fp32 gradient: the model's buffer, or (m->fsdp) its unit's, between
 * dit_fsdp_grads_begin and _end. */
float *dit_grad_ptr(const DiT *m, int entry, int64_t at);
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
void dit_place_free(Placement *pl);
/* After carving: this rank's x, tok2sample, positions and the layouts. */
vfm_status dit_place_inputs(DiT *m, Acts *a, const DiTInputs *in);
/* whole_out[S_in, out] on every rank from this rank's out_local[Rl, out]. */
vfm_status dit_gather_output(DiT *m, Acts *a, Tensor *whole_out);
/* dout_local[Rl, out] = this rank's rows of the whole dout[S_in, out]. */
vfm_status dit_scatter_dout(DiT *m, Acts *a, const Tensor *dout);
/* The TP regions with the model's TP context (tp.h), and the self-attention through CP. */
TpContext dit_tp_context(const DiT *m);
vfm_status dit_self_attention_forward(const DiT *m, const Acts *a, Tensor *o, Tensor *lse, const Tensor *q,
                                      const Tensor *k, const Tensor *v);
vfm_status dit_self_attention_backward(const DiT *m, const Acts *a, Tensor *dq, Tensor *dk, Tensor *dv,
                                       const Tensor *dout, const Tensor *q, const Tensor *k, const Tensor *v,
                                       const Tensor *o, const Tensor *lse);

#endif
