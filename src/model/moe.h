/* The mixture-of-experts layer (docs/models.md "The MoE layer"), in the MLP slot of any
 * architecture (mlp.h: an MlpLayer with moe.experts > 0 is one). E experts, each the slot's MLP
 * kind — GELU, fc1 [F, D], or SwiGLU, fc1 [2F, D] (gate rows, then value rows) — and fc2 [D, F],
 * without bias, stored as one entry per kind with expert e's rows at [e·F, (e+1)·F) (SwiGLU
 * [e·2F, (e+1)·2F)) and [e·D, (e+1)·D) (checkpoints hold them whole, by expert index), and a
 * router Linear(D → E) without bias. Per sample of the pack (never across samples), with T_b real tokens:
 *   logits = router(x) (fp32), probs = softmax over experts (pre-softmax router)
 *   expert choice   each expert takes the top C_b tokens of the sample by its probability
 *   token choice    each token's top-k experts are its candidates; each expert keeps the top C_b
 *                   candidates by probability (drop-and-pad: the rest pass through the residual)
 *   C_b = min(T_b, ceil(T_b·k·f/E)) (f = 0: T_b, dropless); ties by (score desc, token asc)
 *   y[t] = Σ_{e holds t} probs[t,e]·expert_e(x[t]), experts in ascending order
 * The experts run as one grouped GEMM over E fixed-capacity slot blocks of C = Σ_b C_b rows
 * (ops.h "mixture of experts"). Token choice adds aux·E·Σ_e f_e·P_e (load balancing) and, both
 * routers, z·mean_t lse_t² to the loss through the router's gradient.
 *
 * Expert parallelism (DiTParallel.ep, within DP or DP×CP as in Megatron): EP rank r holds experts
 * [r·E/EP, (r+1)·E/EP) (the fc1/fc2 rows, REDUCE_EXPERT: tp_shard.h splits them, checkpoints name
 * them by global index). Every rank routes its own tokens over all E experts (the router is
 * replicated) into slots of C = the carve's bound per expert (the slots past the pack's Σ_b C_b
 * empty), so the dispatch — an all-to-all over ep_comm of E/EP experts' slots to each rank — and
 * the reverse combine have one size on every rank and step: no rank waits for another's counts,
 * no device-to-host copy. The owner runs one grouped GEMM per sender block; its expert gradients
 * then hold every EP rank's tokens, and are summed over the expert-data-parallel group only.
 *
 * Tensor parallelism: every expert is split over TP like the dense MLP (expert tensor parallelism
 * = TP): fc1 by hidden units (tp_parts E, SwiGLU 2E: each expert's gate and value rows split
 * separately), fc2 by its input columns. The layer is a TP region (layer.h): under SP its rows are
 * gathered on the way in, so every TP rank routes the same rows identically (the router is
 * replicated), each runs its F/TP units of every expert, and the region's exit sums the partial
 * combine over TP. The gate gradients are partial over TP, and so the router's gradient
 * (REDUCE_TP_HEADS); the losses' terms come from TP rank 0. Context parallelism: the router's fp32
 * logits are gathered over CP into the whole pack, every CP rank selects over whole samples (the
 * same slots on every rank), and fills the slots of its own rows (the others' slots are zero rows
 * on this rank: the experts run over the whole pack's C slots on every CP rank). */
#ifndef VFM_MODEL_MOE_H
#define VFM_MODEL_MOE_H

#include "model/layer.h"

typedef enum { MOE_EXPERT_CHOICE, MOE_TOKEN_AUX_LOSS, MOE_TOKEN_NONE } MoeRouting;

typedef struct MoeSpec {
    int experts;            /* E (0: a dense MLP) */
    int topk;               /* k: experts per token (token choice); expert choice: 1 (C_b = T_b·f/E) */
    int64_t ffn;            /* F: each expert's hidden units */
    float capacity_factor;  /* f */
    MoeRouting routing;
    float aux_coeff, z_coeff;
    int swiglu;             /* 1: SwiGLU experts (fc1 [E·2F, D], each expert's gate rows then its value rows) */
    Activation act;         /* GELU experts' kind (swiglu 0) */
    LinearSpec router, in, out; /* initialisation of the router and of fc1, fc2 (replicated) */
} MoeSpec;

typedef struct MoeLayer {
    MoeSpec s;
    Linear router;          /* [E, D] */
    int fc1, fc2;           /* entries [E·F, D] and [E·D, F] */
} MoeLayer;

/* What the forward keeps (C the capacity bound of the carve; the forward uses its first C_used;
 * RW the routed rows: the region's R, under CP the whole pack's R·CP): probs, masked [RW,E], lse
 * [RW] f32; the slots slot_tok, slot_w [E,C]; tok_slot [RW,E] and this rank's rows of it, tok_local
 * [R,E] (CP; otherwise tok_slot); t2s [RW] the routed rows' samples (unless one rank); xe, ye
 * [E·C, D], pre [E·C, F/TP] (SwiGLU 2F/TP), h [E·C, F/TP]; cu_tok, cu_cap [B+1]; losses [2] (raw
 * load-balancing and z losses). */
typedef struct MoeActs {
    Tensor probs, masked, lse, slot_tok, slot_w, tok_slot, tok_local, t2s, xe, pre, h, ye, cu_tok, cu_cap, losses;
    int64_t C_used;
} MoeActs;

/* Scratch shared by every MoE layer: the router's output in the act dtype [R,E], in f32 (then its
 * gradient) for the routed rows [RW,E] and (CP) for this rank's rows [R,E] with the CP gather's
 * [CP·R,E]; dw [E·C], dye and dxe [E·C, D], dh [E·C, F/TP], SwiGLU's dpre [E·C, 2F/TP]; under EP
 * xa [E·C, D], the all-to-alls' other side; under CP xw [RW, D], the whole pack's rows (this
 * rank's, the rest zero) that the permute reads and the combine's backward. */
typedef struct MoeScratch {
    Tensor logits_act, logits, logits_mine, logits_all, dw, dye, dxe, dh, dpre, xa, xw;
} MoeScratch;

/* Appends "<prefix>.router" [E, D], "<prefix>.experts.fc1.weight" [E·F, D] and
 * "<prefix>.experts.fc2.weight" [E·D, F]. */
void moe_add(MoeLayer *ml, ParamTable *t, const char *prefix, int64_t D, const MoeSpec *s);
void moe_handles(MoeLayer *ml, const HandleVisitor *v);
/* C_b of a sample of T real tokens. */
int64_t moe_capacity(const MoeSpec *s, int64_t T);
vfm_status moe_forward(const struct DiT *m, const MoeLayer *ml, MoeActs *b, struct Acts *a, const Tensor *xm,
                       Tensor *out);
/* From a->d_branch to a->d_xm; the router's share includes the aux and z losses' gradients. */
vfm_status moe_backward(const struct DiT *m, const MoeLayer *ml, const MoeActs *b, struct Acts *a, const Tensor *xm);
/* The routing a FULL recomputation group keeps in the slot (block.h CARVE_ROUTING): probs, masked,
 * lse, the slots, tok_slot, cu_tok, cu_cap, losses; moe_carve the rest (xe, pre, h, ye). */
vfm_status moe_carve_routing(const struct DiT *m, const MoeLayer *ml, ActCarver *cv, MoeActs *b, const struct Acts *a);
vfm_status moe_carve(const struct DiT *m, const MoeLayer *ml, ActCarver *cv, MoeActs *b, const struct Acts *a);
vfm_status moe_carve_scratch(const struct DiT *m, const MoeLayer *ml, ActCarver *cv, MoeScratch *s,
                             const struct Acts *a);
/* FLOPs over the pack's samples: the router over every token, the experts over Σ_b E·C_b slots
 * (s->samples samples of s->tokens/s->samples tokens each, as FlopShape gives no lengths). */
double moe_flops(const struct DiT *m, const MoeLayer *ml, const FlopShape *s);

#endif
