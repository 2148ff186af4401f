/* The DiT family (docs/models.md): a model is an architecture's list of layers (arch.h) — patch
 * embedding, conditioning, blocks of residual sub-layers, output head — run by one loop over
 * its blocks (dit.c) that places the pack's rows on this rank's layout, gathers and releases
 * FSDP units, and recomputes. The architectures:
 *   dfm         DFM's cross-attention DiT (research/dfm.md §1.1–1.4): adaLN-LoRA, 9 chunks,
 *               per-head RMSNorm QK-norm, no biases, erf-GELU, 3-D sin-cos position, plain final Linear;
 *   nemo-adaln  NeMo's full-rank form of it (dfm.md §1.6): one Linear(D → 9D) modulation and a
 *               learnable RMSNorm on the conditioning t + fps;
 *   adaln-zero  the original DiT (references.md B1–B4, facebookresearch/DiT models.py): 6-chunk
 *               adaLN with bias, fused qkv and MLP with biases, tanh-GELU, cos-first 256-wide
 *               timestep features, class embedding with a null class, 2-D sin-cos position, conv
 *               patch layout, final LayerNorm + shift/scale + Linear; optionally cross-attention
 *               to the text with QK-norm (9 chunks);
 *   moviegen    MovieGen as NeMo builds it (dit_llama, research/pp-fsdp-moe-moviegen.md §4): 6 chunks
 *               from one Linear(D → 6D), RMSNorm blocks with a learnable weight, GQA self-attention,
 *               cross-attention without norm or residual feeding the SwiGLU MLP, a learned factorized
 *               3-D position re-added before every block, plain final Linear;
 *   wan         Wan 2.1 (diffusers' WanTransformer3DModel, arch_wan.c): 3-D RoPE, QK-norm over all heads,
 *               a shared modulation projection plus per-block tables, the text MLP, affine cross-attention norm.
 * Parameter names follow reference/model_torch.py (for adaln-zero: the DiT reference's own names).
 * Built only from the op API. One call handles one pack: tokens of several samples of any size,
 * attention never crossing samples, padding rows never read. */
#ifndef VFM_DIT_H
#define VFM_DIT_H

#include "core/arena.h"
#include "model/conditioning.h"
#include "model/embed.h"
#include "model/head.h"
#include "model/moe.h"
#include "model/params.h"
#include "model/pos_learned.h"
#include "ops/ops.h"
#include "parallel/cp_attention.h"
#include "parallel/recompute.h"
#include "parallel/tp_shard.h"

typedef struct Config Config;
/* The activations one chunk forward keeps for its backward (opaque; dit_saved_create). */
typedef struct DiTSaved DiTSaved;

typedef enum {
    DIT_VARIANT_DFM,
    DIT_VARIANT_NEMO_ADALN,
    DIT_VARIANT_ADALN_ZERO,
    DIT_VARIANT_MOVIEGEN,
    DIT_VARIANT_STDIT, /* ST-DiT: spatial and temporal blocks (arch_stdit.c) */
    DIT_VARIANT_WAN
} DiTVariant;
enum { DIT_AUTO = 0, DIT_ON = 1, DIT_OFF = 2 }; /* DiTConfig.cross_attention */

/* What a variant is made of: its architecture (arch.h) derives it from the options, and builds
 * its layers from it; `vfm model info` prints it. */
typedef struct DiTFeatures {
    int adaln_full;       /* 1: one Linear(D → n·D) modulation; 0: adaLN-LoRA W2·W1 (rank adaln_lora) */
    int adaln_bias;       /* the modulation Linear has a bias */
    int cross_attn;       /* cross-attention to the text in every block */
    int n_chunks;         /* modulation chunks per block: 9 with cross-attention, 6 without */
    int linear_bias;      /* attention and MLP linears have biases */
    int fused_qkv;        /* self-attention q|k|v in one weight [3D, D] (the DiT reference), else three */
    Activation mlp_act;   /* ACT_GELU_ERF (Megatron) or ACT_GELU_TANH (DiT) */
    int self_qk_norm, cross_qk_norm; /* per-head RMSNorm on q and k */
    float block_ln_eps;   /* eps of the block and final LayerNorms */
    int t_freq_dim;       /* width of the sinusoidal timestep features (D for DFM, 256 for DiT) */
    int t_flip;           /* 1: features [cos | sin] (DiT); 0: [sin | cos] (diffusers' default, DFM) */
    int fps_embedder;     /* an fps embedding is added to the conditioning */
    int cond_norm;        /* learnable RMSNorm (eps 1e-6) on the conditioning (NeMo's affline_norm) */
    int final_adaln;      /* final LayerNorm + shift/scale from Linear(D → 2D) before the output Linear */
    int conv_patch;       /* x_embedder is a conv weight [D, C, (pt,) p, p]: token columns are permuted */
    DiTPosEmbedding pos;  /* resolved: 3-D or 2-D sin-cos, learned 3-D (before every block), or 3-D RoPE (Wan) */
    /* MovieGen's (arch_moviegen.c) */
    int swiglu;           /* SwiGLU MLP (fc1 [2F, D]: gate, value) instead of GELU */
    int block_rms;        /* block norms: RMSNorm with one learnable weight per block, not LayerNorm */
    int cross_feeds_mlp;  /* cross-attention without norm, modulation or residual: the MLP normalises its output */
    int factorised;       /* ST-DiT: blocks alternate spatial and temporal self-attention (attention.h AttnSpan) */
    /* Wan's (arch_wan.c) */
    int mod_table;        /* one modulation projection shared by the blocks plus each block's table */
} DiTFeatures;

typedef struct DiTConfig {
    DiTVariant variant;
    int hidden;        /* D */
    int layers;        /* L: blocks (an ST-DiT layer is two: model.num_layers counts layers) */
    int heads;         /* H */
    int kv_heads;      /* Hkv (grouped-query when < H) */
    int head_dim;      /* D / H */
    int ffn;           /* MLP width (4D by default) */
    int in_channels, out_channels; /* latent channels in and out (the prediction's; see learn_sigma) */
    int patch_spatial, patch_temporal;
    int d_text;        /* width of the text embedding rows */
    int adaln_lora;    /* rank of the adaLN-LoRA bottleneck (dfm) */
    int fps_dim;       /* width of the fps embedding (zero-padded to D) */
    int qk_norm;       /* per-head RMSNorm on q and k (adaln-zero: cross-attention only) */
    float ln_eps;      /* LayerNorm and RMSNorm epsilon (adaln-zero: QK-norm only; its LayerNorms use 1e-6) */
    float init_std;    /* N(0, std) for input projections; std/√(2L) for output projections (dfm, nemo-adaln) */
    int cross_attention;       /* DIT_AUTO (dfm/nemo-adaln on, adaln-zero off), DIT_ON or DIT_OFF */
    int num_classes;           /* > 0: class-label embedding (y_embedder) added to the conditioning */
    float class_dropout_prob;  /* > 0: the class table has a null row, index num_classes (DiT's rule) */
    int learn_sigma;           /* output 2·out_channels per element: channels [0, C) the prediction,
                                * [C, 2C) the variance (token layout (ph pw pt 2C), C fastest) */
    DiTPosEmbedding pos_embedding; /* DIT_POS_AUTO: 2-D for adaln-zero, learned for moviegen, 3-D otherwise */
    int pos_rows[3];           /* rows of the learned position's t, h, w tables (0: 34, 40, 40, DFM's
                                * max_frames 34 / pt 1, max_img 80 / p 2) */
    int stdit_full_every;      /* ST-DiT: every k-th layer's spatial block attends over the whole sample (0 = never) */
    /* Mixture of experts in every block's MLP slot (moe.h; Megatron's model.moe_* keys): moe.experts
     * = model.num_moe_experts (0: dense); moe.ffn 0 = ffn; the rest as moe.h's MoeSpec. */
    MoeSpec moe;
    DiTFeatures f;             /* derived by dit_config_resolve */
} DiTConfig;

/* Reads model.* keys (after presets) into a DiTConfig and resolves it. */
vfm_status dit_config_from(DiTConfig *c, const Config *cfg);
/* Derives head_dim, the default ffn and the features from the variant and the options, and checks
 * that the configuration builds (divisibility, widths). Call after filling a DiTConfig by hand. */
vfm_status dit_config_resolve(DiTConfig *c);
const char *dit_variant_name(DiTVariant v);
int dit_token_dim(const DiTConfig *c);  /* C_in·p²·pt */
int dit_out_dim(const DiTConfig *c);    /* p²·pt·C_out, doubled with learn_sigma */
/* The class-table row of a sample: its label, or the null class (num_classes) when the label is
 * dropped for CFG or absent (< 0). -1 when that needs a null class the model does not have
 * (class_dropout_prob = 0), when a kept label is >= num_classes, or without classes. */
int32_t dit_class_row(const DiTConfig *c, int32_t label, int drop);

/* How one DiT is split over ranks (docs/parallel.md "The DiT under TP, SP and CP"):
 *  TP  heads, kv heads and MLP units split over tp ranks: q, k, v (or the fused qkv, by parts),
 *      the text k/v and fc1 column-parallel, attention proj and fc2 row-parallel (their bias is
 *      added by TP rank 0 only, so it counts once; its gradient is summed over TP like QK-norm's);
 *  SP  between TP regions each TP rank holds 1/tp of the token rows;
 *  CP  each CP rank holds chunk cp_rank of every sample (cp_layout.h); self-attention runs
 *      cp_attention_forward/backward, cross-attention sees the whole text.
 * The model's interface does not change: dit_forward takes the whole pack and returns the whole
 * output on every rank (the output rows are gathered, a few values per token), dit_backward takes
 * the whole dout. So the objective, validation and sampling run unchanged under any layout. A pack
 * whose slots do not divide by CP (by TP·CP under SP) is re-padded internally. Parameter
 * gradients come out as this rank's share: partial over CP (dp.c sums them over CP) and, for the
 * flagged replicated weights, over TP. The comms belong to the caller. */
typedef struct DiTParallel {
    int tp, tp_rank;          /* model.tensor_model_parallel_size and this rank's place in the TP group */
    int sequence_parallel;    /* model.sequence_parallel */
    Comm *tp_comm;            /* the TP group (NULL when tp = 1) */
    int cp, cp_rank;          /* model.context_parallel_size and this rank's place (= its chunk) */
    Comm *cp_comm;            /* the CP group, for the output gather (NULL when cp = 1) */
    CpAttention cpa;          /* the self-attention's CP mode and comms (cp > 1) */
    int pp, pp_rank;          /* model.pipeline_model_parallel_size (0 or 1: none) and this rank's stage */
    int vp;                   /* model.virtual_pipeline_model_parallel_size: chunks per stage (0 or 1: one) */
    Comm *pp_comm;            /* the PP group (the caller's pipeline runner uses it; NULL when pp = 1) */
    /* Tests only: k >= 1 skips the TP reduction that closes block k-1's self-attention (a broken
     * variant the equivalence tests must catch). */
    int test_skip_tp_reduce;
    /* Tests only: 1 leaves the row statistics of the QK-norm over all heads (Wan) unsummed over TP. */
    int test_skip_qk_norm_sum;
    /* ST-DiT under CP (st_attention.h): 1 = model.cp_comm_type hybrid (spatial attention local,
     * temporal attention an all-to-all from frames to positions and back, full attention through
     * cpa); 0 = every self-attention through cpa's ring. Tests only: k >= 1 skips the all-to-all
     * that brings block k-1's temporal attention input to its positions. */
    int st_hybrid;
    int test_skip_st_a2a;
    /* Expert parallelism (model.expert_model_parallel_size, within DP as in Megatron): this rank
     * holds experts [ep_rank·E/ep, (ep_rank+1)·E/ep) of every MoE layer; ep_comm joins the ep
     * ranks that share their tokens with each other's experts (moe.h). 0 or 1: none. Tests only:
     * test_permute_ep_a2a = 1 swaps two rows of the first dispatch all-to-all's result (a broken
     * variant the EP tests must catch). */
    int ep, ep_rank;
    Comm *ep_comm;
    int test_permute_ep_a2a;
    /* Tests only: 1 makes every CP rank route its own chunk's tokens alone (the MoE router's logits
     * not gathered over CP: a broken variant the MoE × CP tests must catch). */
    int test_moe_local_logits;
} DiTParallel;

/* Before any work: VFM_ERR_USAGE with one line naming the key and the numbers when the model does
 * not split this way: model.num_attention_heads, model.num_query_groups (kv heads are split like
 * q heads, never replicated over TP) or the MLP width not divisible by TP; the CP mode's head
 * rules with the heads per TP rank (cp_check_config). */
vfm_status dit_check_parallel(const DiTConfig *c, int tp, int sequence_parallel, int cp, CpCommType cp_type,
                              int a2a_size);

/* Parameter groups (ParamEntry.group), for `vfm model info`. */
typedef enum {
    DIT_GROUP_PATCH, DIT_GROUP_COND, DIT_GROUP_ADALN, DIT_GROUP_SELF_ATTN, DIT_GROUP_CROSS_ATTN, DIT_GROUP_MLP,
    DIT_GROUP_FINAL, DIT_N_GROUPS
} DiTParamGroup;
const char *dit_group_name(int group);

typedef struct DiT {
    DiTConfig cfg;
    ParamTable table;   /* this rank's entries: the single-rank shapes at TP 1, the TP shards otherwise;
                         * under PP only the stage's entries (pp_stage.h), in the whole table's order */
    Device device;
    float *params; /* [table.total] fp32 master weights, on the model's device */
    float *grads;  /* [table.total] fp32, accumulated by dit_backward, on the model's device */
    /* The dtype of the activations and of the weights the ops read (ops.h's ACT): f32 on the CPU;
     * on CUDA bf16 (the default) or f32 (dit_set_act_dtype: every op in f32, for tests). With bf16
     * the ops read wcopy, a bf16 copy of params that dit_refresh_weights makes after every change
     * of the master weights (the optimizer step, a load); gradients stay fp32. wcopy is laid out by
     * wplace, every entry at a 256-byte boundary (params.h ParamPlacement), so the GEMMs and the
     * kernels' 16-byte accesses always apply; the master layout (params, grads, checkpoints) is the
     * table's. */
    DType act_dtype;
    void *wcopy;   /* [wplace.total] act_dtype copy of params, or NULL (the ops read params) */
    ParamPlacement wplace;
    DiTParallel par;    /* tp = cp = 1 for a one-rank model */
    int heads_local, kv_heads_local, ffn_local; /* per TP rank: heads/TP, kv_heads/TP, ffn/TP */
    ParamTable *full_table; /* the single-rank table of the whole model (names and shapes of the checkpoint files) */
    TpShardMap *shards;     /* where this rank's entries sit in the full tensors (identity at TP 1); under
                             * PP it shards the stage's table and maps its entries into full_table */
    /* The layers (their handles index `table`; under PP a layer on another stage has -1) */
    PatchEmbedLayer patch;
    PosLearnedLayer pos;     /* the learned position (moviegen; pos.on = 0 otherwise) */
    ConditioningLayer cond;
    struct DiTBlock *blocks; /* [n_blocks] (block.h): this rank's blocks (all L without PP), in global order */
    FinalLayer head;
    int head_first;  /* first table entry after the blocks (the final layer's) */
    int n_blocks;
    int *block_ids;         /* [n_blocks]: their global numbers (names and keyed draws use these) */
    int *block_local;       /* [L]: global block → index in blocks, -1 when another stage holds it */
    struct PpStageMap *stage; /* PP: this stage's entries in the whole model's table, or NULL */
    /* Activation recomputation (dit_set_recompute; none by default), and the scratch arena that
     * every slot's chunks share for what they recompute (sized by dit_reserve) */
    RecomputeConfig recompute;
    int64_t rc_replays; /* blocks replayed in a backward (full) or whose attention was recomputed
                         * (selective), since the model was made: the log line's proof it ran */
    Arena rc_scratch;
    size_t rc_scratch_bytes;
    DiTSaved *saved;    /* the activations of the last dit_forward (the default slot) */
    DiTSaved *running;  /* internal: the slot of the chunk forward/backward under way (probes) */
    size_t slot_bytes;  /* the arena of one slot (dit_reserve) */
    /* Optional: called during dit_backward each time the gradients of every table entry with
     * index >= first_entry are complete (after the final layer, after each block, then with 0),
     * so data parallelism can reduce those buckets while backward goes on. */
    void (*on_grads_final)(void *ctx, int first_entry);
    void *on_grads_final_ctx;
    /* Optional (tests): called on every rank with this rank's rows [rows, D] of the residual stream
     * after each sub-layer ("self_attn", "cross_attn", "mlp" in the forward) and of its gradient
     * before it ("d.mlp", "d.cross_attn", "d.self_attn" in the backward: the input gradient of that
     * sub-layer). dit_gather_rows turns the rows into the whole pack's. */
    void (*probe)(void *ctx, const char *site, int layer, const Tensor *rows);
    void *probe_ctx;
    /* Optional (tests, vfm model info): when set, [span][0 forward, 1 backward] gains the bytes this
     * rank sends over CP in the self-attentions of each AttnSpan (attention.h; comm.h bytes_sent). */
    double (*cp_sent)[2];
    /* ZeRO-2/3 (dit_fsdp.c, parallel/fsdp.h): when set, the weights and gradients live in its units
     * (params and grads are NULL) and the forward and backward gather, release and reduce them
     * around each block. */
    struct Fsdp *fsdp;
    int *fsdp_unit;            /* [table.count] the unit of each entry */
    /* With bf16 weights (CUDA): each unit's act-dtype copy, which the ops read, laid out by wplace
     * from the unit's first entry — kept for the whole units (all of them under ZeRO-2), made after
     * each gather and freed after each use for ZeRO-3's block units; NULL otherwise. */
    void **fsdp_wcopy;         /* [fsdp_n_units] */
    int fsdp_n_units;
    uint64_t fsdp_wversion;    /* the fsdp->params_version the whole units' copies were made from */
    int fsdp_last_microbatch;  /* the caller sets it: this backward is the step's last micro-batch */
    /* The weight of the model's own loss terms (the MoE router's load-balancing and z losses) in
     * its backward: the objective sets its grad_scale (1/micro-batches) before each backward, so they
     * accumulate like the loss; 0 (unset) is 1. */
    double loss_grad_scale;
    /* Expert parallelism: the rows and samples of the largest pack reserved for (dit_reserve, the
     * largest so far), from which every MoE layer's slots per expert, and so the size of its
     * all-to-alls, follow: the same on every EP rank when they reserve the same bounds. */
    int64_t moe_ep_rows;
    int moe_ep_samples;
} DiT;

/* Builds the table (names as reference/model_torch.py) and allocates params and grads (zero).
 * Call dit_init_weights or load weights next. */
vfm_status dit_create(DiT *m, const DiTConfig *cfg, Device device);
/* The same for this rank of a parallel layout (par NULL: one rank): the table holds this rank's
 * TP shards (dit_check_parallel must pass), params and grads are laid out by it. */
vfm_status dit_create_parallel(DiT *m, const DiTConfig *cfg, Device device, const DiTParallel *par);
void dit_destroy(DiT *m);
/* Only the parameter table and block indices (no memory for weights): sizes and names of a
 * configuration, e.g. for `vfm model info`. Free with dit_destroy. */
void dit_describe(DiT *m, const DiTConfig *cfg);
/* Only this rank's table and dimensions at a layout (no memory for weights; comms may be NULL):
 * per-rank sizes for `vfm model info`. Free with dit_destroy. */
vfm_status dit_describe_parallel(DiT *m, const DiTConfig *cfg, const DiTParallel *par);
/* Bytes of activations (kept for the backward, and its scratch) that one rank's forward and
 * backward over a pack of `tokens` rows, `text` text rows and `samples` samples use (f32), with the
 * model's recomputation plan (dit_set_recompute). */
size_t dit_activation_bytes(const DiT *m, int64_t tokens, int64_t text, int samples);
/* The same, laid out by the code that carves the arena, for packs as the encoder makes them (every
 * sample padded to the slot multiple, so nothing is re-padded; `rows` rounded up to it) in the
 * model's device and act_dtype (a described model may be given DEV_CUDA and DT_BF16: nothing is
 * allocated): *slot one slot's bytes (dit_reserve's, dit_saved_create's), *scratch the
 * recomputation scratch. What `vfm plan` counts (src/plan/plan_memory.c). */
vfm_status dit_activation_plan(const DiT *m, int64_t rows, int64_t text, int samples, size_t *slot, size_t *scratch);

/* What one rank sends per micro-batch (a pack of `tokens` rows, `text` text rows), in bytes with
 * activations of `elem` bytes (lse in f32), as the implementation moves them, for the rank's blocks
 * (its pipeline stage's under PP): the TP regions
 * (ring-equivalent volumes of the all-reduces, all-gathers and reduce-scatters, the backward's
 * re-gather under SP included), the CP self-attention (ring hops, all-to-alls, all-gathers) and the
 * gather of the output rows to every rank (the last stage), and under PP the hidden states sent to the
 * next stage and their gradients to the previous one. docs/parallel.md has the formulas. */
typedef struct DiTCommBytes {
    double tp_forward, tp_backward, cp_forward, cp_backward, output, pp_forward, pp_backward;
} DiTCommBytes;
void dit_comm_bytes(const DiT *m, int64_t tokens, int64_t text, int elem, DiTCommBytes *out);
/* ST-DiT (docs/parallel.md "ST-DiT's hybrid parallelism"): the bytes CP rank `cp_rank` sends over CP
 * in ONE self-attention of each span — out[span][0 forward, 1 backward], span 0 full, 1 spatial,
 * 2 temporal (attention.h AttnSpan) — for a pack of n samples of t[i] frames of tokens[i] tokens,
 * values of `elem` bytes; and how many of this rank's blocks have each span (counts[3]). */
void dit_st_block_bytes(const DiT *m, int n, const int *t, const int *tokens, int cp_rank, int elem, double out[3][2]);
void dit_st_span_blocks(const DiT *m, int counts[3]);

/* The variant's initialisation (docs/parameters.md), Philox-keyed by parameter name and seed: a
 * TP rank gets exactly the single-rank model's values at its elements (on any device: the values
 * are made on the host and copied; the weight copy is refreshed). */
vfm_status dit_init_weights(DiT *m, uint64_t seed);
/* CUDA: the activations' dtype, DT_BF16 (the default) or DT_F32; before the first dit_reserve. The
 * CPU runs f32 only. */
vfm_status dit_set_act_dtype(DiT *m, DType dt);
/* The ops' weight copy (wcopy) from the master weights: call after changing params on the device
 * (the optimizer step) — under ZeRO-2/3 after the FSDP parameters change (fsdp_optimizer_step, a
 * checkpoint read): the whole units' copies; a no-op without a copy. The functions below refresh it
 * themselves. */
vfm_status dit_refresh_weights(DiT *m);
/* The master weights (or a buffer laid out like them: EMA, gradients) between the model's device
 * and host memory host[table.total]. dit_params_from_host also refreshes the weight copy. */
vfm_status dit_params_to_host(const DiT *m, float *host);
vfm_status dit_params_from_host(DiT *m, const float *host);
/* Activation recomputation (docs/parallel.md "Activation recomputation"; Megatron's keys, plans in
 * recompute.h, made per chunk: dit_forward's chunk is every block). rc NULL or RECOMPUTE_NONE: none.
 * FULL: a group of blocks keeps only its input in the slot; its activations live in the model's
 * scratch arena, reused by every group (and every slot: one chunk runs at a time), and its forward
 * reruns in backward. SELECTIVE: every block keeps q, k, v but not the attention output and
 * log-sum-exp (self- and cross-attention): they live in the scratch and are recomputed before the
 * attention's backward. Outputs and gradients are bitwise those without (the block has no random
 * draws; the ops are deterministic). Call before dit_reserve. */
vfm_status dit_set_recompute(DiT *m, const RecomputeConfig *rc);
/* The activations' high-water mark: the model's own slot's arena and the recomputation scratch
 * (bytes on the model's device; slots made by dit_saved_create are the caller's to add). */
size_t dit_activation_peak(const DiT *m);
/* The high-water mark of a slot's arena (bytes). */
size_t dit_saved_peak(const DiTSaved *saved);
/* Reserves activation memory for packs of up to max_tokens rows, max_text rows and max_samples
 * samples (the trainer passes its pack budget). */
vfm_status dit_reserve(DiT *m, int64_t max_tokens, int64_t max_text, int max_samples);

/* One pack: every tensor on the model's device (activations in its act_dtype; c_noise and fps
 * f32), or every tensor in host memory (f32, i32 maps, the layouts' offsets on the host) with a
 * CUDA model: dit_forward then copies them to the GPU (the network input and the text converted
 * to the activation dtype), writes `out` to host memory in f32, and dit_backward takes its host
 * f32 dout the same way — so the objectives and samplers run unchanged on a GPU model. */
typedef struct DiTInputs {
    const Tensor *x;          /* [S, token_dim] network input (c_in·x_t) */
    const Tensor *c_noise;    /* [B] timestep input per sample (EDM: ¼ ln σ) */
    const Tensor *fps;        /* [B] frames per second per sample */
    const Tensor *text;       /* [L, d_text] text context rows */
    const Tensor *tok2sample; /* [S] i32, -1 on padding rows */
    const Tensor *pos;        /* [S, 3] i32 (t, h, w) token grid position */
    VarlenLayout self_layout; /* tokens vs tokens */
    VarlenLayout cross_layout;/* tokens vs text rows */
    /* [B] i32 class-table row per sample for class-conditional models (dit_class_row: the label,
     * or num_classes, the null class, when dropped or unlabelled); NULL when the model takes none. */
    const Tensor *class_labels;
} DiTInputs;

/* out[S, out_dim] = F(x; c_noise, fps, text, class). Keeps the activations for dit_backward. */
vfm_status dit_forward(DiT *m, const DiTInputs *in, Tensor *out);
/* Accumulates parameter gradients (m->grads +=) for dout[S, out_dim] of the last forward.
 * The inputs must be those of that forward. */
vfm_status dit_backward(DiT *m, const DiTInputs *in, const Tensor *dout);

/* ---- chunks (pipeline parallelism, docs/parallel.md "Pipeline parallelism") ----
 * dit_forward is the chunk of every block, [0, L). A chunk is the global blocks [b0, b1):
 *  - every chunk runs the conditioning (t, fps, class embedders) itself from `in`;
 *  - the first chunk (b0 = 0) starts from the pack: input placement and patch embedding (x NULL);
 *    any other takes x[Rl, D], the hidden state this rank's rows (dit_hidden_rows) after block b0-1;
 *  - the last chunk (b1 = L) ends in the final layer and writes out[S, out_dim] as dit_forward
 *    (y NULL); any other writes y[Rl, D], the hidden state after block b1-1.
 * The backward mirrors it: the last chunk starts from dout (dy NULL), any other from dy[Rl, D];
 * the first chunk ends in the patch embedding (dx NULL), any other writes dx[Rl, D]; each chunk
 * adds its blocks', its conditioning's (and the ends') gradients into m->grads. `saved` keeps the
 * activations from a chunk forward to its backward (NULL: the model's own slot, m->saved); x may
 * be reused by the caller once the forward returned. One chunk of every block gives dit_forward's
 * and dit_backward's bits. */
vfm_status dit_saved_create(DiT *m, DiTSaved **saved); /* a slot sized by dit_reserve (call it first) */
void dit_saved_destroy(DiT *m, DiTSaved *saved);
vfm_status dit_chunk_forward(DiT *m, DiTSaved *saved, const DiTInputs *in, int b0, int b1, const Tensor *x, Tensor *y,
                             Tensor *out);
vfm_status dit_chunk_backward(DiT *m, DiTSaved *saved, const DiTInputs *in, int b0, int b1, const Tensor *dy,
                              Tensor *dx, const Tensor *dout);
/* Global blocks [*b0, *b1) of this rank's local chunk `chunk` (pipeline stage pp_rank, chunk v of
 * vp; pp_schedule.h's split); without PP chunk 0 is every block. */
void dit_chunk_blocks(const DiT *m, int chunk, int *b0, int *b1);
/* Rows [Rl] of this rank's hidden state for a pack (what travels between pipeline stages). */
vfm_status dit_hidden_rows(const DiT *m, const DiTInputs *in, int64_t *rows);
/* Collective over the model's TP and CP groups: whole[S, w] (the last forward's whole pack) from
 * every rank's rows[rows, w] of it (as the probe hands them out); padding rows are written 0. */
vfm_status dit_gather_rows(DiT *m, const Tensor *rows, Tensor *whole);

/* ---- ZeRO-2 / ZeRO-3 (dit_fsdp.c) ---- */
struct Fsdp;
struct FsdpConfig;
/* This rank's blocks' first table entries (block_first[n_blocks], the caller's) as
 * parallel/pp_stage.h's PpBlocks wants them (fsdp_init, dp_memory_bytes). */
void dit_block_layout(const DiT *m, int *block_first, int *n_blocks, int *head_first);
/* Collective over comm (DP×CP): f = FSDP over this rank's table (one unit per block, the
 * embedders, the final layer), filled with the model's current weights; the model's own params and
 * grads are freed, and from here on its forward reads the weights, and its backward writes the
 * gradients, through f (gathered and released around each block under ZeRO-3, each unit reduced
 * after its backward: set m->fsdp_last_microbatch). With bf16 activations (CUDA) the ops read a
 * bf16 copy of each unit (m->fsdp_wcopy) made from its fp32 parameters: the whole model's copy
 * gives way to the units' copies. Free f with fsdp_free before dit_destroy. */
vfm_status dit_fsdp_create(DiT *m, struct Fsdp *f, const struct FsdpConfig *cfg, Comm *comm, Comm *tp_comm);
/* Bytes of the units' bf16 copies allocated now (the whole units' between steps). */
size_t dit_fsdp_wcopy_bytes(const DiT *m);

/* Matmul FLOPs of one forward over a pack (2 per multiply-add): token-wise layers and attention
 * from the cumulative real token and text lengths cu_q[n+1], cu_text[n+1] (padding rows are not
 * counted), plus the per-sample conditioning (embedders, modulation). */
double dit_forward_flops(const DiTConfig *c, int n, const int32_t *cu_q, const int32_t *cu_text);
/* One rank's share of a forward over a pack of `samples` samples of tokens/samples rows each (all of
 * the pack's `tokens` rows, `text` text rows over the samples), for a model made or described at its
 * layout (dit_describe_parallel): its TP widths, its CP chunk (S/CP query rows against every key), its
 * pipeline stage's blocks. *attention: the self- and cross-attention scores and values (4 per query-key
 * pair and head dimension); *matmul: every linear layer (2 per multiply-add). */
void dit_rank_forward_flops(const DiT *m, int64_t tokens, int64_t text, int samples, double *matmul, double *attention);
/* The same with sample i of frames[i] frames (ST-DiT's spatial and temporal attention; frames NULL:
 * every sample one frame, as dit_forward_flops counts them). */
double dit_forward_flops_frames(const DiTConfig *c, int n, const int32_t *cu_q, const int32_t *cu_text,
                                const int32_t *frames);

#endif
