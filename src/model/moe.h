/* The mixture-of-experts layer (docs/models.md "The MoE layer"), in the MLP slot of any
 * architecture (mlp.h: an MlpLayer with moe.experts > 0 is one). E experts, each a GELU MLP
 * fc1 [F, D], fc2 [D, F] without bias, stored as one entry per kind with expert e's rows at
 * [e·F, (e+1)·F) and [e·D, (e+1)·D) (checkpoints hold them whole, by expert index), and a router
 * Linear(D → E) without bias. Per sample of the pack (never across samples), with T_b real tokens:
 *   logits = router(x) (fp32), probs = softmax over experts (pre-softmax router)
 *   expert choice   each expert takes the top C_b tokens of the sample by its probability
 *   token choice    each token's top-k experts are its candidates; each expert keeps the top C_b
 *                   candidates by probability (drop-and-pad: the rest pass through the residual)
 *   C_b = min(T_b, ceil(T_b·k·f/E)) (f = 0: T_b, dropless); ties by (score desc, token asc)
 *   y[t] = Σ_{e holds t} probs[t,e]·expert_e(x[t]), experts in ascending order
 * The experts run as one grouped GEMM over E fixed-capacity slot blocks of C = Σ_b C_b rows
 * (ops.h "mixture of experts"). Token choice adds aux·E·Σ_e f_e·P_e (load balancing) and, both
 * routers, z·mean_t lse_t² to the loss through the router's gradient. One rank (and data
 * parallelism) only so far: dit_check_parallel refuses TP, CP and sequence parallelism with it. */
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
    Activation act;
    LinearSpec router, in, out; /* initialisation of the router and of fc1, fc2 (replicated) */
} MoeSpec;

typedef struct MoeLayer {
    MoeSpec s;
    Linear router;          /* [E, D] */
    int fc1, fc2;           /* entries [E·F, D] and [E·D, F] */
} MoeLayer;

/* What the forward keeps (C the capacity bound of the carve; the forward uses its first C_used):
 * probs, masked [R,E], lse [R] f32; the slots slot_tok, slot_w [E,C]; tok_slot [R,E]; xe, ye
 * [E·C, D], pre, h [E·C, F]; cu_tok, cu_cap [B+1]; losses [2] (raw load-balancing and z losses). */
typedef struct MoeActs {
    Tensor probs, masked, lse, slot_tok, slot_w, tok_slot, xe, pre, h, ye, cu_tok, cu_cap, losses;
    int64_t C_used;
} MoeActs;

/* Scratch shared by every MoE layer: the router's output in the act dtype and in f32 (then its
 * gradient) [R,E], dw [E·C], dye and dxe [E·C, D], dh [E·C, F]. */
typedef struct MoeScratch {
    Tensor logits_act, logits, dw, dye, dxe, dh;
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
vfm_status moe_carve(const struct DiT *m, const MoeLayer *ml, ActCarver *cv, MoeActs *b, const struct Acts *a);
vfm_status moe_carve_scratch(const struct DiT *m, const MoeLayer *ml, ActCarver *cv, MoeScratch *s,
                             const struct Acts *a);
/* FLOPs over the pack's samples: the router over every token, the experts over Σ_b E·C_b slots
 * (s->samples samples of s->tokens/s->samples tokens each, as FlopShape gives no lengths). */
double moe_flops(const struct DiT *m, const MoeLayer *ml, const FlopShape *s);

#endif
