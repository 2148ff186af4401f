/* THE key registry: every configuration key vfm knows (name, type, default, range or choices,
 * help, "not used by vfm" flag), and the lookups built on it (find, nearest-name suggestion,
 * "allowed" phrases, the public registry query API). Names follow DFM / Megatron-Bridge so DFM
 * override lines work. Keys of one group stay contiguous: the YAML writer relies on it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config_internal.h"

#define CHOICES(...) ((const char *const[]){__VA_ARGS__, NULL})
/* Each key ends with its resume class (REFUSE, NOTE or FREE: docs/checkpoints.md "Resuming with
 * another config") and, for keys that give the model its shape, SHAPE (set but not read by a
 * run's set-up: refused, not only warned; docs/config.md "Keys a run does not use"). */
#define REFUSE .resume = CFG_RESUME_REFUSE
#define NOTE .resume = CFG_RESUME_NOTE
#define FREE .resume = CFG_RESUME_FREE
#define SHAPE .shape = 1
#define KINT(n, d, r, h, ...) {.name = n, .type = CFG_INT, .def = d, .range = r, .help = h, __VA_ARGS__}
#define KFLT(n, d, r, h, ...) {.name = n, .type = CFG_FLOAT, .def = d, .range = r, .help = h, __VA_ARGS__}
#define KBOOL(n, d, h, ...) {.name = n, .type = CFG_BOOL, .def = d, .help = h, __VA_ARGS__}
#define KSTR(n, d, h, ...) {.name = n, .type = CFG_STRING, .def = d, .help = h, __VA_ARGS__}
#define KCHOICE(n, d, c, h, ...) {.name = n, .type = CFG_STRING, .def = d, .choices = c, .help = h, __VA_ARGS__}
#define KLIST(n, t, d, h, ...) {.name = n, .type = t, .def = d, .help = h, __VA_ARGS__}
/* Accepted so DFM configs run; a warning when set; no effect (so free on resume). */
#define XINT(n, d, r, h) {.name = n, .type = CFG_INT, .def = d, .range = r, .unused = 1, .help = h, FREE}
#define XFLT(n, d, r, h) {.name = n, .type = CFG_FLOAT, .def = d, .range = r, .unused = 1, .help = h, FREE}
#define XBOOL(n, d, h) {.name = n, .type = CFG_BOOL, .def = d, .unused = 1, .help = h, FREE}
#define XSTR(n, d, h) {.name = n, .type = CFG_STRING, .def = d, .unused = 1, .help = h, FREE}
#define XANY(n, h) {.name = n, .type = CFG_IGNORED, .def = "null", .unused = 1, .help = h, FREE}

const CfgKeyDef cfg_key_defs[] = {
    /* model */
    KCHOICE("model.variant", "dfm", CHOICES("dfm", "nemo-adaln", "adaln-zero", "moviegen", "stdit", "wan"),
            "DiT variant: dfm (DFM, adaLN-LoRA), nemo-adaln (NeMo, full-rank adaLN), adaln-zero (original DiT), "
            "moviegen (NeMo's MovieGen/DiT-Llama), stdit (spatial and temporal blocks), wan (Wan 2.1)", REFUSE),
    KCHOICE("model.preset", "\"\"",
            CHOICES("", "tiny", "tiny-demo", "dit-s", "dit-b", "dit-l", "dit-xl", "dit-7b", "dit-7b-nemo", "dit-28b",
                    "moviegen-1b", "moviegen-5b", "moviegen-30b", "ecdit-1b", "stdit3-xl", "stdit-xl", "stdit-3b", "wan2.1-1.3b",
                    "wan2.1-14b"),
            "model size preset, applied before the file and overrides (\"\" = none)", FREE),
    KINT("model.hidden_size", "384", "[8, 65536]", "transformer width D", REFUSE),
    KINT("model.num_layers", "12", "[1, 1024]", "number of DiT blocks (stdit: of layers, a spatial and a temporal block each)", REFUSE),
    KINT("model.num_attention_heads", "6", "[1, 1024]", "attention heads (head dim = hidden_size / heads)", REFUSE),
    KINT("model.num_query_groups", "0", "[0, 1024]", "key/value head groups (0 = same as heads)", REFUSE),
    KINT("model.ffn_hidden_size", "0", "[0, 1048576]", "MLP width (0 = 4 * hidden_size)", REFUSE),
    KINT("model.in_channels", "16", "[1, 1024]", "latent channels in", REFUSE),
    KINT("model.out_channels", "16", "[1, 1024]", "latent channels out", REFUSE),
    KINT("model.patch_spatial", "2", "[1, 64]", "patch size over H and W", REFUSE),
    KINT("model.patch_temporal", "1", "[1, 64]", "patch size over T", REFUSE),
    KINT("model.crossattn_emb_size", "1024", "[1, 65536]", "text embedding width (cross-attention input)", REFUSE),
    KINT("model.adaln_lora_dim", "256", "[1, 65536]", "dfm: rank of the adaLN-LoRA modulation (the other variants have none)", REFUSE, SHAPE),
    KFLT("model.layernorm_epsilon", "1e-5", "(0, 1]",
         "layer norm epsilon (adaln-zero: QK-norm only; its LayerNorms use DiT's 1e-6)", REFUSE),
    KBOOL("model.qk_layernorm", "true", "normalise q and k per head before attention (adaln-zero: cross-attention only)", REFUSE, SHAPE),
    KCHOICE("model.cross_attention", "auto", CHOICES("auto", "true", "false"),
            "cross-attention to the text in every block (auto = on for dfm and nemo-adaln, off for adaln-zero)", REFUSE),
    KINT("model.num_classes", "0", "[0, 10000000]", "class labels of a class-conditional model (0 = no class input)", REFUSE),
    KFLT("model.class_dropout_prob", "0.1", "[0, 1]",
         "with num_classes > 0: probability a training label becomes the null class (> 0 also gives the class "
         "table its null row)", REFUSE),
    KBOOL("model.learn_sigma", "false", "predict the variance too: 2x output channels (prediction, then variance)", REFUSE),
    KCHOICE("model.pos_embedding", "auto", CHOICES("auto", "sincos3d", "sincos2d"),
            "fixed position embedding: 3-D (t,h,w) or 2-D (h,w) sin-cos (auto = 2-D for adaln-zero, else 3-D)", REFUSE),
    KINT("model.num_moe_experts", "0", "[0, 4096]",
         "experts of a mixture-of-experts MLP in every block (0 = dense MLP); alone it gives expert choice, "
         "capacity factor 1, expert width ffn_hidden_size: the dense MLP's FLOPs, balanced by construction", REFUSE),
    KINT("model.moe_router_topk", "1", "[1, 4096]", "experts per token (token choice; expert choice uses 1)", REFUSE),
    KINT("model.moe_ffn_hidden_size", "0", "[0, 1048576]", "each expert's MLP width (0 = ffn_hidden_size)", REFUSE, SHAPE),
    KFLT("model.moe_expert_capacity_factor", "1.0", "[0, 1024]",
         "slots per expert and sample = ceil(tokens * topk * factor / experts), at most the tokens "
         "(0 = no drop: every token fits)", REFUSE),
    KCHOICE("model.moe_router_load_balancing_type", "expert_choice", CHOICES("expert_choice", "aux_loss", "none"),
            "expert_choice: each expert takes its top tokens of a sample; aux_loss: token choice (top-k) with "
            "the load-balancing loss; none: token choice without it", REFUSE),
    KFLT("model.moe_aux_loss_coeff", "0.01", "[0, 100]", "weight of the load-balancing loss (aux_loss routing)", REFUSE),
    KFLT("model.moe_z_loss_coeff", "0", "[0, 100]", "weight of the router z-loss (mean squared log-sum-exp)", REFUSE),
    KBOOL("model.moe_router_pre_softmax", "true",
          "token choice: softmax over all experts before the top-k (required: false is refused, see docs/models.md)", REFUSE),
    KFLT("model.init_method_std", "0.02", "[0, 10]", "dfm, nemo-adaln: std of the normal weight init (adaln-zero: DiT's own init)", NOTE),
    KINT("model.fps_embedding_dim", "256", "[2, 65536]", "dfm, nemo-adaln: width of the sinusoidal fps embedding (adaln-zero has none)", REFUSE, SHAPE),
    KINT("model.tensor_model_parallel_size", "1", "[1, 4096]", "TP size (heads, kv heads and MLP units split over TP)", NOTE),
    KINT("model.pipeline_model_parallel_size", "1", "[1, 4096]", "PP size", NOTE),
    KINT("model.context_parallel_size", "1", "[1, 4096]", "CP size", NOTE),
    KINT("model.expert_model_parallel_size", "1", "[1, 4096]",
         "EP size: experts split over this many ranks of DP×CP (EP within DP×CP; divides num_moe_experts and DP·CP)", NOTE),
    KBOOL("model.sequence_parallel", "false", "sequence parallelism: token rows split over TP between TP regions", NOTE),
    KCHOICE("model.cp_comm_type", "p2p", CHOICES("p2p", "a2a", "a2a+p2p", "all_gather", "hybrid"),
            "context-parallel attention: p2p ring, a2a (Ulysses), a2a+p2p (hierarchical), all_gather; hybrid (stdit's "
            "default): spatial attention local, temporal by all-to-all, full attention by stdit_full_cp_comm_type", NOTE),
    /* ST-DiT (docs/models.md "ST-DiT") */
    KINT("model.stdit_full_attention_every", "0", "[0, 1024]",
         "stdit: every k-th layer's spatial block attends over the whole sample (0 = never)", REFUSE, SHAPE),
    KCHOICE("model.stdit_full_cp_comm_type", "p2p", CHOICES("p2p", "a2a", "a2a+p2p"),
            "stdit with cp_comm_type hybrid: the CP scheme of the full-attention layers", NOTE),
    KLIST("model.hierarchical_context_parallel_sizes", CFG_INT_LIST, "[]",
          "a2a+p2p: [all-to-all group size, ring size], product = context_parallel_size", NOTE),
    KINT("model.virtual_pipeline_model_parallel_size", "1", "[1, 1024]", "interleaved PP: model chunks per pipeline stage (needs pipeline_model_parallel_size > 1)", NOTE),
    KCHOICE("model.recompute_granularity", "null", CHOICES("", "full", "selective"),
            "activation recomputation: full (a group of blocks keeps only its input) or selective (the attention "
            "output and log-sum-exp); bitwise the same training, less activation memory", NOTE),
    KCHOICE("model.recompute_method", "null", CHOICES("", "uniform", "block"),
            "full recomputation of groups of recompute_num_layers blocks (uniform) or of the first ones of each "
            "pipeline chunk (block)", NOTE),
    KINT("model.recompute_num_layers", "0", "[0, 1024]",
         "blocks per recomputed group (uniform) or recomputed per pipeline chunk (block); 0 = unset", NOTE),
    KFLT("model.val_generation_guidance", "7.0", "[0, 100]", "CFG guidance g of the sample each rank generates at validation", NOTE),
    KINT("model.val_generation_num_steps", "35", "[1, 10000]", "sampler steps of the sample each rank generates at validation", NOTE),
    KFLT("model.sigma_data", "0.5", "(0, 100]", "EDM sigma_data", REFUSE),
    XINT("model.seq_length", "2048", "[1, inf)", "DFM: maximum sequence length (not used by vfm)"),
    KINT("model.max_img_h", "80", "[1, 1e6]", "moviegen: latent height its learned position covers (/ patch_spatial rows)", REFUSE),
    KINT("model.max_img_w", "80", "[1, 1e6]", "moviegen: latent width its learned position covers (/ patch_spatial rows)", REFUSE),
    KINT("model.max_frames", "34", "[1, 1e6]", "moviegen: latent frames its learned position covers (/ patch_temporal rows)", REFUSE),
    XSTR("model.qkv_format", "thd", "DFM: attention layout; vfm always packs (THD) (not used by vfm)"),
    XSTR("model.vae_cache_folder", "\"\"", "DFM: VAE cache for validation decoding (not used by vfm)"),
    XSTR("model.pipeline_dtype", "bf16", "DFM: PP communication dtype (not used by vfm)"),

    /* diffusion */
    KCHOICE("diffusion.objective", "edm", CHOICES("edm", "flow", "ddpm"),
            "training objective: EDM (DFM), flow matching, or DDPM (the DiT paper)", REFUSE),
    KFLT("diffusion.p_mean", "0.0", "[-10, 10]", "mean of log sigma (edm) or of logit sigma (flow) at training", REFUSE),
    KFLT("diffusion.p_std", "1.0", "(0, 10]", "std of log sigma (edm) or of logit sigma (flow) at training", REFUSE),
    KCHOICE("diffusion.sigma_per", "sample", CHOICES("sample", "pack"), "draw sigma per sample, or one per pack (DFM)", REFUSE),
    KFLT("diffusion.cfg_dropout", "0.2", "[0, 1]", "probability of dropping the text condition (models with cross-attention)", REFUSE),
    KFLT("diffusion.sigma_min", "0", "[0, 1e6)", "clamp the training sigma (edm, flow) from below (0 = no clamp)", REFUSE),
    KFLT("diffusion.sigma_max", "0", "[0, 1e6)", "clamp the training sigma (edm, flow) from above (0 = no clamp)", REFUSE),
    KFLT("diffusion.flow_shift", "1.0", "(0, 100]", "flow: time shift s, sigma' = s*sigma/(1+(s-1)*sigma) (1 = none; Wan/DFM 3)", REFUSE),
    KINT("diffusion.flow_shift_base_tokens", "0", "[0, 1e9]",
         "flow: tokens at which flow_shift holds; other sizes use flow_shift*sqrt(tokens/base) (0 = same shift)", REFUSE),
    KFLT("diffusion.flow_sigma_min", "0", "[0, 0.5]",
         "flow: Movie Gen's sigma_min, x = (1-s)*x0 + (s + sigma_min*(1-s))*eps, target (1-sigma_min)*eps - x0 (Movie Gen 1e-5)", REFUSE),

    /* sampler */
    KINT("sampler.num_steps", "35", "[1, 100000]", "vfm sample: sampler steps (validation uses model.val_generation_num_steps)", NOTE),
    KFLT("sampler.guidance", "7.0", "[0, 1000]", "vfm sample: CFG guidance g: x = c + g * (c - u) (validation uses model.val_generation_guidance)", NOTE),
    KFLT("sampler.rho", "7.0", "(0, 100]", "edm: time-step exponent", NOTE),
    KFLT("sampler.s_churn", "0.0", "[0, 1000]", "edm: stochastic churn", NOTE),
    KFLT("sampler.sigma_min", "0.002", "(0, 1e6)", "edm: smallest sampling sigma", NOTE),
    KFLT("sampler.sigma_max", "80", "(0, 1e6)", "edm: largest sampling sigma", NOTE),
    KCHOICE("sampler.flow_schedule", "linear-quadratic", CHOICES("linear-quadratic", "linear"),
            "flow: time steps of the Euler sampler (MovieGen's linear-quadratic, or uniform)", NOTE),
    KCHOICE("sampler.flow_solver", "euler", CHOICES("euler", "unipc"),
            "flow: Euler steps on sampler.flow_schedule, or UniPC multistep (Wan 2.1's sampler: diffusers' "
            "UniPCMultistepScheduler for flow, with its own times)", NOTE),
    KINT("sampler.unipc_order", "2", "[1, 3]", "flow, unipc: the solver order (Wan: 2)", NOTE),
    KBOOL("sampler.ddim", "false", "ddpm: deterministic DDIM (eta 0) instead of ancestral DDPM steps", NOTE),

    /* train */
    KINT("train.train_iters", "10000", "[0, 1e12]", "optimizer steps to train", NOTE),
    KINT("train.global_batch_size", "2", "[1, 1e9]", "packs per optimizer step, over all data-parallel ranks", NOTE),
    KINT("train.micro_batch_size", "1", "[1, 1]", "packs per forward pass (a micro-batch is one pack)", NOTE),
    KINT("train.eval_interval", "1000", "[0, inf)", "steps between validations (0 = never)", NOTE),
    KINT("train.eval_iters", "32", "[0, inf)", "global batches of the validation split per validation", NOTE),
    KCHOICE("train.device", "auto", CHOICES("auto", "cpu", "cuda"), "where to train (auto = cuda when present)", NOTE),
    KINT("train.threads", "0", "[0, 1024]", "CPU threads (0 = all cores)", FREE),
    KINT("train.max_nonfinite_steps", "5", "[1, 1e6]",
         "NaN/Inf steps in a row that stop the run (with a checkpoint), checked when the step counters are read: up to one log interval later", NOTE),
    KINT("train.fixed_pack_length", "0", "[0, 1e9]", "pad every pack to this many tokens, padding masked (0 = as packed; under pipeline parallelism the pack budget)", NOTE),
    XBOOL("train.manual_gc", "true", "DFM: Python garbage collection (not used by vfm)"),
    XINT("train.manual_gc_interval", "100", "[0, inf)", "DFM: Python garbage collection (not used by vfm)"),
    XINT("train.manual_gc_eval", "100", "[0, inf)", "DFM: Python garbage collection (not used by vfm)"),

    /* optimizer */
    KCHOICE("optimizer.optimizer", "adam", CHOICES("adam"), "optimizer (Adam with decoupled weight decay)", REFUSE),
    KFLT("optimizer.lr", "9e-5", "[0, 10]", "peak learning rate", NOTE),
    KFLT("optimizer.min_lr", "9e-6", "[0, 10]", "learning rate at the end of the decay (not with lr_decay_style constant)", NOTE),
    KFLT("optimizer.weight_decay", "0.033", "[0, 10]", "decoupled weight decay", NOTE),
    KFLT("optimizer.adam_beta1", "0.9", "[0, 1)", "Adam beta1", NOTE),
    KFLT("optimizer.adam_beta2", "0.95", "[0, 1)", "Adam beta2", NOTE),
    KFLT("optimizer.adam_eps", "1e-5", "(0, 1)", "Adam epsilon", NOTE),
    KFLT("optimizer.clip_grad", "1.0", "[0, 1e9]", "global gradient-norm clip (0 = no clipping)", NOTE),
    XBOOL("optimizer.bf16", "true", "DFM: bf16 parameters (not used by vfm)"),
    XBOOL("optimizer.fp16", "false", "DFM: fp16 parameters (not used by vfm)"),
    XBOOL("optimizer.use_precision_aware_optimizer", "false", "DFM: Transformer Engine optimizer (not used by vfm)"),

    /* scheduler */
    KINT("scheduler.lr_warmup_iters", "2000", "[0, inf)", "linear warmup steps", NOTE),
    KFLT("scheduler.lr_warmup_init", "0.0", "[0, 10]", "learning rate at step 0 (with lr_warmup_iters > 0)", NOTE),
    KINT("scheduler.lr_decay_iters", "0", "[0, inf)", "steps of the decay (0 = train.train_iters; not with lr_decay_style constant)", NOTE),
    KCHOICE("scheduler.lr_decay_style", "cosine", CHOICES("cosine", "constant", "linear", "WSD"),
            "decay after warmup (WSD: warmup-stable-decay)", NOTE),
    KCHOICE("scheduler.lr_wsd_decay_style", "exponential", CHOICES("exponential", "linear", "cosine", "minus_sqrt"),
            "WSD: shape of the final annealing", NOTE),
    KINT("scheduler.lr_wsd_decay_iters", "0", "[0, inf)", "WSD: steps of the final annealing (required with WSD)", NOTE),
    XFLT("scheduler.start_weight_decay", "0.033", "[0, 10]", "DFM: weight decay schedule (not used by vfm)"),
    XFLT("scheduler.end_weight_decay", "0.033", "[0, 10]", "DFM: weight decay schedule (not used by vfm)"),
    XSTR("scheduler.weight_decay_incr_style", "constant", "DFM: weight decay schedule (not used by vfm)"),
    XBOOL("scheduler.override_opt_param_scheduler", "true", "DFM: scheduler state on load (not used by vfm)"),

    /* dataset */
    KSTR("dataset.path", "\"\"", "dataset folder (WebDataset shards, Energon metadata) or metadataset .yaml", NOTE),
    KBOOL("dataset.mock", "false", "train on random mock samples instead of dataset.path", NOTE),
    KINT("dataset.mock_samples", "0", "[0, 1e9]", "mock set size (0 = fresh random samples every time)", NOTE),
    KLIST("dataset.mock_shapes", CFG_STRING_LIST, "[]", "mock latent shapes \"CxTxHxW\" (empty = one from *_latents)", NOTE),
    KINT("dataset.F_latents", "1", "[1, 100000]", "mock latent frames", NOTE),
    KINT("dataset.H_latents", "32", "[1, 100000]", "mock latent height", NOTE),
    KINT("dataset.W_latents", "32", "[1, 100000]", "mock latent width", NOTE),
    KINT("dataset.context_seq_len", "16", "[1, 100000]", "mock text length", NOTE),
    KINT("dataset.context_embeddings_dim", "1024", "[1, 65536]", "text embedding width; must equal model.crossattn_emb_size (DFM's key)", NOTE),
    KINT("dataset.number_packed_samples", "1", "[1, 1e6]", "mock samples per pack", NOTE),
    KINT("dataset.task_encoder_seq_length", "8000", "[1, 1e9]", "token budget of one pack", NOTE),
    KINT("dataset.packing_buffer_size", "40", "[1, 1e7]", "real data: samples the packer chooses from", NOTE),
    KINT("dataset.num_workers", "4", "[0, 1024]", "real data: reader threads", FREE),
    KINT("dataset.pad_multiple", "64", "[1, 1e6]", "pad each sample's tokens to a multiple of lcm(this, TP*CP)", NOTE),
    KINT("dataset.max_text_len", "512", "[1, 1e6]", "real data: longest text embedding kept", NOTE),
    KBOOL("dataset.keep_text_padding", "false", "real data: keep the zero-padded text rows (DFM parity)", NOTE),
    KINT("dataset.pad_text_to", "-1", "[-1, 1e6]",
         "real data and vfm sample's prompts: zero-pad (or cut) every text to this many rows; -1 = the model's: 512 "
         "for model.variant=wan (Wan attends to its padded umT5 rows without a mask), none otherwise; 0 = none", NOTE),
    KINT("dataset.max_frames", "0", "[0, 1e6]", "real data: crop videos to this many latent frames (0 = no crop)", NOTE),
    KFLT("dataset.default_fps", "30", "(0, 1e6)", "real data, models with an fps embedding: fps of samples whose metadata has none", NOTE),
    KBOOL("dataset.shuffle", "true", "real data: shuffle the training stream", NOTE),
    KSTR("dataset.split", "train", "split to train on (Energon split.yaml part; no split file: train only)", NOTE),
    KBOOL("dataset.use_train_split_for_val", "false", "validation reads the train split (DFM) instead of the val split", NOTE),
    KFLT("dataset.max_skip_fraction", "0.1", "[0, 1]",
         "real data: stop (exit 2) when more than this share of the samples read is skipped when read, counted from "
         "100 read on (1 = only a whole pass without a usable sample stops)", NOTE),
    XINT("dataset.seq_length", "2048", "[1, inf)", "DFM: data module sequence length (not used by vfm)"),
    XINT("dataset.micro_batch_size", "1", "[1, inf)", "DFM: set from train.micro_batch_size (not used by vfm)"),
    XINT("dataset.global_batch_size", "2", "[1, inf)", "DFM: set from train.global_batch_size (not used by vfm)"),

    /* checkpoint */
    KSTR("checkpoint.save", "runs/default", "run directory: checkpoints, metrics, TensorBoard (null = save nothing, DFM)", FREE),
    KSTR("checkpoint.load", "\"\"", "checkpoint or run directory to start from (\"\" = none)", FREE),
    KBOOL("checkpoint.load_optim", "true", "with checkpoint.load (not finetune): also load the Adam moments (false: fresh moments; the step, "
          "learning rate, samples seen and data position are restored either way)", FREE),
    KINT("checkpoint.save_interval", "1000", "[0, inf)", "steps between checkpoints (0 = only at the end)", NOTE),
    KINT("checkpoint.keep", "3", "[1, 1e6]", "checkpoints kept in the run directory", NOTE),
    KBOOL("checkpoint.finetune", "false", "load weights only and start a new run at step 0", FREE),
    XSTR("checkpoint.ckpt_format", "torch_dist", "DFM: checkpoint format (not used by vfm)"),
    XBOOL("checkpoint.fully_parallel_save", "true", "DFM: checkpoint writing (not used by vfm)"),

    /* ema */
    KBOOL("ema.enabled", "false", "keep an exponential moving average of the weights", NOTE),
    KFLT("ema.decay", "0.9999", "[0, 1]", "EMA decay per step (with ema.enabled)", NOTE),

    /* logger */
    KINT("logger.log_interval", "10", "[1, inf)", "steps between log lines", FREE),
    KCHOICE("logger.level", "info", CHOICES("error", "warn", "info", "debug"), "log level", FREE),
    KSTR("logger.tensorboard_dir", "\"\"", "TensorBoard directory (\"\" = <checkpoint.save>/tb_logs)", FREE),
    XBOOL("logger.log_timers_to_tensorboard", "true", "DFM: timers in TensorBoard (not used by vfm)"),
    XSTR("logger.wandb_project", "\"\"", "DFM: Weights & Biases (not used by vfm)"),
    XSTR("logger.wandb_exp_name", "\"\"", "DFM: Weights & Biases (not used by vfm)"),
    XSTR("logger.wandb_entity", "\"\"", "DFM: Weights & Biases (not used by vfm)"),

    /* rng */
    KINT("rng.seed", "1234", "[0, inf)", "seed of every random stream", NOTE),

    /* ddp */
    KBOOL("ddp.use_distributed_optimizer", "true", "shard optimizer state over data-parallel ranks (ZeRO-1)", NOTE),
    KBOOL("ddp.overlap_grad_reduce", "false", "issue gradient buckets during backward as they complete (else after it)", NOTE),
    KFLT("ddp.bucket_size_mb", "40", "(0, 1e6)", "gradient bucket size in MiB", NOTE),
    KBOOL("ddp.check_for_nan_in_grad", "true", "check gradients for NaN/Inf before the update (vfm always does)", NOTE),
    XBOOL("ddp.grad_reduce_in_fp32", "true", "DFM: gradients reduce in fp32 in vfm anyway (not used by vfm)"),
    XBOOL("ddp.overlap_param_gather", "false", "DFM: parameter all-gather overlap (not used by vfm)"),
    XBOOL("ddp.average_in_collective", "true", "DFM: averaging inside the collective (not used by vfm)"),
    KBOOL("ddp.use_megatron_fsdp", "false",
          "Megatron FSDP: shard by ddp.data_parallel_sharding_strategy (default optim_grads_params)", NOTE),
    KCHOICE("ddp.data_parallel_sharding_strategy", "null",
            CHOICES("", "no_shard", "optim", "optim_grads", "optim_grads_params", "MODEL_AND_OPTIMIZER_STATES"),
            "what data parallelism shards: no_shard, optim (ZeRO-1), optim_grads (ZeRO-2), optim_grads_params (ZeRO-3; "
            "alias MODEL_AND_OPTIMIZER_STATES); unset: from use_distributed_optimizer / use_megatron_fsdp", NOTE),
    KBOOL("ddp.fsdp_unsharded_accumulation", "false",
          "ZeRO-2/3 with several micro-batches: accumulate each unit's gradient unsharded and reduce it once per step "
          "(ZeRO-1's bits, ZeRO-1's gradient memory), else reduce-scatter every micro-batch (1/n gradient memory)", NOTE),
    XSTR("mixed_precision", "bf16_mixed", "DFM: precision recipe (not used by vfm)"),
    XSTR("tokenizer.tokenizer_type", "NullTokenizer", "DFM: tokenizer (not used by vfm)"),
    XINT("tokenizer.vocab_size", "0", "[0, inf)", "DFM: tokenizer (not used by vfm)"),
    XANY("comm_overlap", "DFM: TP communication overlap settings, any value (not used by vfm)"),

    /* plan (read by vfm plan only; docs/plan.md) */
    KFLT("plan.intra_node_bandwidth", "0", "[0, 1e6]",
         "vfm plan: NVLink bandwidth per GPU and direction inside a node, GB/s (0: the --gpu system's; DGX H100: 450)", FREE),
    KFLT("plan.inter_node_bandwidth", "0", "[0, 1e6]",
         "vfm plan: network bandwidth per GPU and direction between nodes, GB/s (0: the --gpu system's; DGX H100: 50)", FREE),
};
const int cfg_key_count = (int)(sizeof cfg_key_defs / sizeof cfg_key_defs[0]);

int cfg_find_key(const char *name) {
    for (int i = 0; i < cfg_key_count; i++)
        if (strcmp(cfg_key_defs[i].name, name) == 0) return i;
    return -1;
}

int cfg_find_ignored_parent(const char *name) {
    for (int i = 0; i < cfg_key_count; i++) {
        if (cfg_key_defs[i].type != CFG_IGNORED) continue;
        size_t len = strlen(cfg_key_defs[i].name);
        if (strncmp(name, cfg_key_defs[i].name, len) == 0 && (name[len] == 0 || name[len] == '.')) return i;
    }
    return -1;
}

int cfg_is_group(const char *name) {
    size_t len = strlen(name);
    if (len == 0) return 0;
    for (int i = 0; i < cfg_key_count; i++)
        if (strncmp(cfg_key_defs[i].name, name, len) == 0 && cfg_key_defs[i].name[len] == '.') return 1;
    return 0;
}

const char *cfg_type_name(CfgType type) {
    switch (type) {
    case CFG_INT: return "int";
    case CFG_FLOAT: return "float";
    case CFG_BOOL: return "bool";
    case CFG_STRING: return "string";
    case CFG_INT_LIST: return "int list";
    case CFG_FLOAT_LIST: return "float list";
    case CFG_STRING_LIST: return "string list";
    case CFG_IGNORED: return "any";
    }
    return "?";
}

/* "[8, 65536]" → "in [8, 65536]"; "[0, inf)" → ">= 0"; "(0, inf)" → "> 0". */
static void range_phrase(const char *range, char *buf, size_t size) {
    const char *comma = strchr(range, ',');
    if (comma && strncmp(comma + 1, " inf)", 5) == 0)
        snprintf(buf, size, "%s %.*s", range[0] == '(' ? ">" : ">=", (int)(comma - range - 1), range + 1);
    else
        snprintf(buf, size, "in %s", range);
}

void cfg_allowed_text(const CfgKeyDef *def, char *buf, size_t size) {
    char range[96] = "";
    if (def->range) range_phrase(def->range, range, sizeof range);
    switch (def->type) {
    case CFG_INT: snprintf(buf, size, "an integer%s%s", range[0] ? " " : "", range); return;
    case CFG_FLOAT: snprintf(buf, size, "a number%s%s", range[0] ? " " : "", range); return;
    case CFG_BOOL: snprintf(buf, size, "true or false (also yes/no, on/off)"); return;
    case CFG_INT_LIST: snprintf(buf, size, "a list of integers, like [1, 2]"); return;
    case CFG_FLOAT_LIST: snprintf(buf, size, "a list of numbers, like [0.5, 1e-3]"); return;
    case CFG_STRING_LIST: snprintf(buf, size, "a list of strings, like [a, b]"); return;
    case CFG_IGNORED: snprintf(buf, size, "any value (ignored)"); return;
    case CFG_STRING:
        if (!def->choices) {
            snprintf(buf, size, "a string");
            return;
        }
        size_t n = (size_t)snprintf(buf, size, "one of ");
        for (int c = 0; def->choices[c] && n < size; c++)
            n += (size_t)snprintf(buf + n, size - n, "%s%s", c ? ", " : "", def->choices[c][0] ? def->choices[c] : "\"\"");
        return;
    }
}

static int edit_distance(const char *a, const char *b) {
    enum { MAXLEN = 255 };
    int la = (int)strlen(a), lb = (int)strlen(b);
    if (la > MAXLEN) la = MAXLEN;
    if (lb > MAXLEN) lb = MAXLEN;
    int prev[MAXLEN + 1], cur[MAXLEN + 1];
    for (int j = 0; j <= lb; j++) prev[j] = j;
    for (int i = 1; i <= la; i++) {
        cur[0] = i;
        for (int j = 1; j <= lb; j++) {
            int sub = prev[j - 1] + (a[i - 1] != b[j - 1]);
            int del = prev[j] + 1, ins = cur[j - 1] + 1;
            cur[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
        }
        memcpy(prev, cur, sizeof(int) * (size_t)(lb + 1));
    }
    return prev[lb];
}

static const char *leaf_of(const char *name) {
    const char *dot = strrchr(name, '.');
    return dot ? dot + 1 : name;
}

/* The last name part as Megatron and NeMo users spell it, and vfm's (DFM's) part for it. */
static const char *const leaf_aliases[][2] = {
    {"learning_rate", "lr"},          {"max_steps", "train_iters"},        {"max_iters", "train_iters"},
    {"warmup_steps", "lr_warmup_iters"}, {"warmup_iters", "lr_warmup_iters"}, {"batch_size", "global_batch_size"},
    {"val_check_interval", "eval_interval"}, {"limit_val_batches", "eval_iters"}, {"gradient_clip_val", "clip_grad"},
    {"betas", "adam_beta1"},          {"eps", "adam_eps"},                 {"name", "optimizer"},
    {"log_every_n_steps", "log_interval"}, {"every_n_train_steps", "save_interval"}, {"save_top_k", "keep"},
};

/* Nearest by edit distance over the full dotted name (first in registry order on ties). When
 * nothing is within 2 edits, a key with the same last part wins (lr → optimizer.lr), its last part
 * also read through the spellings of Megatron and NeMo (learning_rate → lr, max_steps →
 * train_iters, micro_batch_size → train.micro_batch_size): among those, a key vfm uses, then the
 * nearest. */
const char *cfg_suggest_key(const char *name) {
    const char *leaf = leaf_of(name);
    for (size_t a = 0; a < sizeof leaf_aliases / sizeof leaf_aliases[0]; a++)
        if (strcmp(leaf, leaf_aliases[a][0]) == 0) leaf = leaf_aliases[a][1];
    int best = -1, best_d = 1 << 30, same_leaf = -1, same_leaf_d = 1 << 30;
    for (int i = 0; i < cfg_key_count; i++) {
        int d = edit_distance(name, cfg_key_defs[i].name);
        if (d < best_d) { best_d = d; best = i; }
        if (strcmp(leaf, leaf_of(cfg_key_defs[i].name)) != 0) continue;
        int rank = d + (cfg_key_defs[i].unused ? 1000 : 0); /* a key that does nothing is a poor suggestion */
        if (rank < same_leaf_d) {
            same_leaf_d = rank;
            same_leaf = i;
        }
    }
    if (best_d > 2 && same_leaf >= 0) best = same_leaf;
    return cfg_key_defs[best].name;
}

int config_registry_count(void) { return cfg_key_count; }

int config_registry_find(const char *key) { return cfg_find_key(key); }

void config_registry_key(int i, CfgKeyInfo *info) {
    const CfgKeyDef *def = &cfg_key_defs[i];
    info->name = def->name;
    info->type = def->type;
    info->type_name = cfg_type_name(def->type);
    info->default_text = def->def;
    cfg_allowed_text(def, info->allowed, sizeof info->allowed);
    info->help = def->help;
    info->unused = def->unused;
    info->resume = def->resume;
    info->shape = def->shape;
}

const char *config_resume_class_name(CfgResumeClass c) {
    return c == CFG_RESUME_REFUSE ? "refuse" : c == CFG_RESUME_NOTE ? "note" : c == CFG_RESUME_FREE ? "free" : "none";
}
