/* Internal to src/model: the activation tensors one DiT forward keeps for its backward, and the
 * scratch its backward reuses, carved from the model's arena (dit_acts.c). Tensors a variant does
 * not use are left empty (data NULL). */
#ifndef VFM_DIT_INTERNAL_H
#define VFM_DIT_INTERNAL_H

#include "model/dit.h"

enum { DIT_MAX_CHUNKS = 9 };

typedef struct BlockActs {
    Tensor h0, h1, h2;                    /* [S,D] residual stream before each sub-layer (h2 = h1 without cross) */
    Tensor mean[3], rstd[3];              /* [S] LayerNorm statistics per site (sa, ca, mlp) */
    Tensor xm[3];                         /* [S,D] modulated LayerNorm outputs */
    Tensor q, k, v, qn, kn, q_rstd, k_rstd; /* q,qn [S,D]; k,v,kn [S,Dkv]; rstd [S·H], [S·Hkv] */
    Tensor o, lse, a;                     /* o,a [S,D]; lse [S,H] */
    Tensor cq, cqn, cq_rstd;              /* [S,D], [S·H] */
    Tensor ck, cv, ckn, ck_rstd;          /* [L,D], [L·H] */
    Tensor co, clse, c;                   /* [S,D], [S,H], [S,D] */
    Tensor f_pre, f, mo;                  /* [S,ffn], [S,ffn], [S,D] */
    Tensor u, mod, chunk[DIT_MAX_CHUNKS]; /* [B,R] (LoRA), [B,nD], [B,D] each */
} BlockActs;

typedef struct Acts {
    int64_t S, L;
    int B;
    Tensor x_perm;                        /* [S, token_dim] tokens in conv column order (conv_patch) */
    Tensor t_in, t1_pre, t1, t_emb;       /* [B,tf], [B,D], [B,D], [B,D] */
    Tensor f_in, f1_pre, f1, f_emb;       /* [B,F] (fps embedder) */
    Tensor y_emb;                         /* [B,D] class embedding */
    Tensor cond_raw, cond_rstd, cond;     /* [B,D], [B], [B,D]: cond = RMSNorm(cond_raw) or cond_raw itself */
    Tensor cond_silu;                     /* [B,D] */
    Tensor h_final;                       /* [S,D] output of the last block */
    Tensor fmod, fshift, fscale, fmean, frstd, fxm; /* final adaLN: [B,2D], [B,D], [B,D], [S], [S], [S,D] */
    BlockActs *blocks;
    /* backward scratch, reused by every block */
    Tensor d_res, d_branch, d_xm, d_attn_o;             /* [S,D] */
    Tensor d_q, d_qn, d_k, d_kn, d_v;                    /* [S,D] / [S,Dkv] */
    Tensor d_ffn;                                        /* [S,ffn] */
    Tensor d_ck, d_ckn, d_cv;                            /* [L,D] */
    Tensor d_mod, d_chunk[DIT_MAX_CHUNKS], d_u;          /* [B,nD], [B,D], [B,R] */
    Tensor d_cond_silu, d_cond, d_cond_raw, d_t1, d_f_emb, d_f1; /* [B,D] / [B,F] */
} Acts;

/* Lays out the activations of a pack of S token rows, L text rows and B samples. With arena NULL
 * only counts *bytes (what dit_reserve needs); otherwise carves from the arena. */
vfm_status dit_carve_acts(const DiT *m, Arena *arena, size_t *bytes, Acts *a, int64_t S, int64_t L, int B);

#endif
