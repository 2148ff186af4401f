/* vfm model info: parameters (by group) and FLOPs of a model configuration;
 * vfm model presets: the parameter count of every preset in every variant (docs/models.md);
 * vfm model forward: see cmd_model_forward.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "commands.h"
#include "core/config.h"
#include "model/dit.h"
#include "parallel/dp.h"
#include "parallel/sharding.h"
#include "train/train_parallel.h"

/* The DiT paper's setting for adaln-zero (references.md B5): 4 latent channels, 1000 classes,
 * learned sigma (patch 2 comes with every preset). */
static const char *const DIT_PAPER[] = {"model.variant=adaln-zero", "model.in_channels=4", "model.out_channels=4",
                                        "model.num_classes=1000", "model.learn_sigma=true"};
enum { N_DIT_PAPER = 5 };

static int64_t count_group(const ParamTable *t, int group) {
    int64_t n = 0;
    for (int i = 0; i < t->count; i++)
        if (t->entries[i].group == group) n += t->entries[i].numel;
    return n;
}

static void print_info(const Config *cfg, const DiTConfig *c, const ParamTable *t, int seq, int text, int frames) {
    const DiTFeatures *f = &c->f;
    const char *preset = cfg_str(cfg, "model.preset");
    printf("model %s (preset %s): hidden %d, layers %d, heads %d (head dim %d, kv heads %d), ffn %d, patch %dx%dx%d, "
           "in %d / out %d channels%s\n",
           dit_variant_name(c->variant), preset[0] ? preset : "none", c->hidden, c->layers, c->heads, c->head_dim,
           c->kv_heads, c->ffn, c->patch_temporal, c->patch_spatial, c->patch_spatial, c->in_channels, c->out_channels,
           c->learn_sigma ? " (+ as many for the learned variance)" : "");
    printf("blocks: %s, adaLN %s, %d chunks%s; %s self-attention%s; %s; MLP %s%s\n",
           f->block_rms ? "RMSNorm with a learnable weight" : "LayerNorm",
           f->mod_table ? "shared projection + per-block table" : f->adaln_full ? "full-rank" : "LoRA",
           f->n_chunks, f->adaln_bias ? " with bias" : "", f->fused_qkv ? "fused-qkv" : "q/k/v",
           f->self_qk_norm ? " with QK-norm" : "",
           !f->cross_attn         ? "no cross-attention"
           : f->cross_feeds_mlp   ? "cross-attention to the text without norm or residual, feeding the MLP"
                                  : "cross-attention to the text",
           f->swiglu ? "SwiGLU" : f->mlp_act == ACT_GELU_TANH ? "tanh GELU" : "erf GELU",
           f->linear_bias ? "; linears with biases" : "");
    if (f->factorised) {
        printf("ST-DiT: %d layers of a spatial and a temporal block", c->layers / 2);
        if (c->stdit_full_every > 0)
            printf("; the spatial block of every layer k·%d attends over the whole sample", c->stdit_full_every);
        printf("\n");
    }
    if (f->cross_attn) printf("text width %d%s\n", c->d_text, f->cross_qk_norm ? ", cross-attention QK-norm" : "");
    if (c->num_classes > 0)
        printf("classes: %d%s\n", c->num_classes, c->class_dropout_prob > 0 ? " + the null class" : "");
    if (f->pos == DIT_POS_LEARNED_3D)
        printf("position: learned, factorized t/h/w tables of %d/%d/%d rows, added before every block; ",
               c->pos_rows[0], c->pos_rows[1], c->pos_rows[2]);
    else if (f->pos == DIT_POS_ROPE_3D) printf("position: 3-D RoPE on q and k (QK-norm over all heads); ");
    else printf("position: %s sin-cos; ", f->pos == DIT_POS_SINCOS_2D ? "2-D" : "3-D");
    printf("final layer: %s\n", f->final_adaln ? "LayerNorm + shift/scale + Linear" : "Linear");
    int64_t trainable = param_table_trainable(t);
    printf("parameters: %lld (%.1f M), trainable %lld (%.1f M)\n", (long long)t->total, t->total / 1e6,
           (long long)trainable, trainable / 1e6);
    for (int g = 0; g < DIT_N_GROUPS; g++) {
        int64_t n = count_group(t, g);
        if (n) printf("  %-30s %14lld  (%5.2f%%)\n", dit_group_name(g), (long long)n, 100.0 * n / (double)t->total);
    }
    if (c->moe.experts > 0) { /* docs/models.md "The MoE layer" */
        const MoeSpec *e = &c->moe;
        static const char *const ROUTING[] = {"expert choice", "token choice with the load-balancing loss",
                                              "token choice"};
        double used = e->routing == MOE_EXPERT_CHOICE ? (e->capacity_factor > 0 ? e->capacity_factor : e->experts)
                                                      : e->topk; /* experts a token passes through, at most */
        if (used > e->experts) used = e->experts;
        double per_expert = (c->f.swiglu ? 3.0 : 2.0) * c->hidden * (double)e->ffn; /* fc1 (SwiGLU: 2F rows), fc2 */
        double active = (double)t->total - (double)c->layers * (e->experts - used) * per_expert;
        printf("mixture of experts: %d experts of width %lld in every block, %s (top-%d), capacity factor %g; "
               "active parameters per token %.0f (%.1f M: %g of the %d experts)\n",
               e->experts, (long long)e->ffn, ROUTING[e->routing], e->routing == MOE_EXPERT_CHOICE ? 1 : e->topk,
               e->capacity_factor, active, active / 1e6, used, e->experts);
    }
    int32_t cu_q[2] = {0, seq}, cu_t[2] = {0, f->cross_attn ? text : 0};
    int32_t t_frames = frames;
    double fwd = dit_forward_flops_frames(c, 1, cu_q, cu_t, &t_frames);
    char in_frames[48] = "";
    if (f->factorised) snprintf(in_frames, sizeof in_frames, " in %d frame%s", frames, frames > 1 ? "s" : "");
    printf("FLOPs for one sample of %d tokens%s%s: forward %.4g (%.4g per token), training step %.4g (%.4g per token)\n",
           seq, in_frames, f->cross_attn ? "" : " (no text)", fwd, fwd / seq, 3 * fwd, 3 * fwd / seq);
    if (f->cross_attn) printf("  (with %d text rows)\n", text);
}

static double mb(double bytes) { return bytes / 1e6; }

/* One rank's share (stage `stage` under PP) at layout l with n = DP×CP ranks: parameters, memory under
 * the sharding strategy (activations with the recomputation rc), bytes sent per micro-batch and per
 * step. */
/* ST-DiT: what one block of each span sends over CP for one sample of `frames` frames of seq/frames
 * tokens (dit_st_block_bytes), the mean over the CP ranks. */
static void print_st_bytes(const DiT *m, int seq, int frames, const char *in) {
    int counts[3], t = frames, tokens = seq / frames;
    double mean[3][2] = {{0}};
    dit_st_span_blocks(m, counts);
    for (int r = 0; r < m->par.cp; r++) {
        double b[3][2];
        dit_st_block_bytes(m, 1, &t, &tokens, r, 2, b);
        for (int k = 0; k < 3; k++) mean[k][0] += b[k][0] / m->par.cp, mean[k][1] += b[k][1] / m->par.cp;
    }
    static const char *const SPAN[] = {"full", "spatial", "temporal"};
    printf("%sCP bytes per block (one sample of %d frames of %d tokens, bf16, mean over the CP ranks):", in, t, tokens);
    for (int k = 0, first = 1; k < 3; k++)
        if (counts[k]) {
            printf("%s %s %.2f + %.2f MB (%d blocks)", first ? "" : ",", SPAN[k], mb(mean[k][0]), mb(mean[k][1]), counts[k]);
            first = 0;
        }
    printf("\n");
}

static vfm_status print_rank(const DiTConfig *c, const TrainLayout *l, const RecomputeConfig *rc, int stage, int n,
                             DpSharding sharding, int seq, int text, int frames) {
    DiTParallel par = {.tp = l->tp, .sequence_parallel = l->sp, .cp = l->cp, .pp = l->pp, .pp_rank = stage, .vp = l->vp};
    par.cpa.type = l->cp_type;
    par.st_hybrid = l->hybrid;
    par.cpa.A = l->cp_type == CP_COMM_A2A ? l->cp : l->a2a_size;
    DiT m;
    VFM_TRY(dit_describe_parallel(&m, c, &par));
    vfm_status s = dit_set_recompute(&m, rc);
    if (s != VFM_OK) {
        dit_destroy(&m);
        return s;
    }
    int64_t local = m.table.total, full = m.full_table->total, tp_summed = 0, pp_summed = 0;
    for (int i = 0; i < m.table.count; i++) {
        if (dp_entry_reduces_over_tp(&m.table.entries[i], l->sp)) tp_summed += m.table.entries[i].numel;
        if (m.table.entries[i].reduce_groups & REDUCE_PP) pp_summed += m.table.entries[i].numel;
    }
    int *first = malloc((size_t)(m.n_blocks > 0 ? m.n_blocks : 1) * sizeof *first);
    if (!first) {
        dit_destroy(&m);
        return vfm_fail(VFM_ERR_NOMEM, "model info: %d blocks", c->layers);
    }
    PpBlocks blocks = {first, 0, 0};
    dit_block_layout(&m, first, &blocks.n_blocks, &blocks.head_first);
    int64_t block_elems = 0; /* what ZeRO-3 gathers */
    for (int i = blocks.n_blocks ? first[0] : 0; i < blocks.head_first; i++) block_elems += m.table.entries[i].numel;
    DpMemory mem;
    s = dp_memory_bytes(sharding, &m.table, &blocks, n, DEV_CPU, &mem);
    free(first);
    if (s != VFM_OK) {
        dit_destroy(&m);
        return s;
    }
    const char *in = l->pp > 1 ? "    " : "  ";
    if (l->pp > 1) {
        printf("  stage %d: %d block%s (", stage, m.n_blocks, m.n_blocks == 1 ? "" : "s");
        for (int v = 0; v < (l->vp > 1 ? l->vp : 1); v++) {
            int b0, b1;
            dit_chunk_blocks(&m, v, &b0, &b1);
            printf("%s%d-%d", v ? ", " : "", b0, b1 - 1);
        }
        printf(")%s%s\n", stage == 0 ? ", patch embedder" : "", stage == l->pp - 1 ? ", final layer and loss" : "");
    }
    static const char *const zero[] = {"plain DP", "ZeRO-1", "ZeRO-2", "ZeRO-3"};
    int sharded = sharding != DP_SHARD_NO_SHARD;
    printf("%sparameters: %lld of %lld (%.1f%%)\n", in, (long long)local, (long long)full,
           100.0 * (double)local / (double)full);
    printf("%smemory, %s (%s) over DP×CP = %d rank%s (f32, this CPU implementation): parameters %.1f MB, gradients "
           "%.1f MB, optimizer state %.1f MB (Adam m, v%s), transient %.1f MB; activations of one micro-batch %.1f MB%s\n",
           in, dp_sharding_name(sharding), zero[sharding], n, n > 1 ? "s" : "", mb((double)mem.params),
           mb((double)mem.grads), mb((double)mem.optimizer), sharding == DP_SHARD_OPTIM_GRADS_PARAMS ? ", fp32 master" : "",
           mb((double)mem.transient), mb((double)dit_activation_bytes(&m, seq, text, 1)),
           rc->granularity == RECOMPUTE_NONE ? "" : " (with model.recompute_*)");
    DiTCommBytes cb;
    dit_comm_bytes(&m, seq, text, 2, &cb);
    printf("%ssent per micro-batch (one sample of %d tokens, bf16 activations): TP regions %.1f MB forward + %.1f MB "
           "backward, CP attention %.1f + %.1f MB, output rows %.1f MB", in, seq, mb(cb.tp_forward), mb(cb.tp_backward),
           mb(cb.cp_forward), mb(cb.cp_backward), mb(cb.output));
    if (l->pp > 1) printf(", to the next/previous stage %.1f + %.1f MB", mb(cb.pp_forward), mb(cb.pp_backward));
    printf("\n");
    if (c->f.factorised && l->cp > 1) print_st_bytes(&m, seq, frames, in);
    double share = n > 1 ? 2.0 * (n - 1) / n : 0, tshare = l->tp > 1 ? 2.0 * (l->tp - 1) / l->tp : 0;
    double pshare = l->pp > 1 ? 2.0 * (l->pp - 1) / l->pp : 0;
    printf("%ssent per step (f32 gradients): DP×CP reduction over %d rank%s %.1f MB%s, TP sums of replicated weights "
           "%.1f MB", in, n, n > 1 ? "s" : "", mb(share * 4.0 * local),
           sharded && n > 1 ? " (reduce-scatter + parameter all-gather)" : "", mb(tshare * 4.0 * tp_summed));
    if (l->pp > 1) printf(", PP sum of the replicated embedders %.1f MB", mb(pshare * 4.0 * pp_summed));
    printf("\n");
    if (sharding == DP_SHARD_OPTIM_GRADS_PARAMS && n > 1)
        printf("%sZeRO-3 also gathers every block's parameters twice per micro-batch (forward, backward): %.1f MB\n", in,
               mb(2.0 * (n - 1) / n * 4.0 * (double)block_elems));
    dit_destroy(&m);
    return VFM_OK;
}

/* Per rank at the layout of the config's parallel keys (and `world` ranks), stage by stage under PP. */
static vfm_status print_per_rank(const DiTConfig *c, const TrainLayout *l, const RecomputeConfig *rc, DpSharding sharding,
                                 int world, int seq, int text, int frames) {
    int dp = world / (l->tp * l->pp * l->cp), n = dp * l->cp;
    char name[128];
    train_layout_describe(l, dp, name, sizeof name);
    printf("per rank at %s (%d rank%s)%s:\n", name, world, world > 1 ? "s" : "", l->pp > 1 ? ", by pipeline stage" : "");
    for (int p = 0; p < l->pp; p++) VFM_TRY(print_rank(c, l, rc, p, n, sharding, seq, text, frames));
    return VFM_OK;
}

static void print_list(const ParamTable *t) {
    for (int i = 0; i < t->count; i++) {
        const ParamEntry *e = &t->entries[i];
        printf("  %-48s [", e->name);
        for (int d = 0; d < e->ndim; d++) printf("%s%lld", d ? ", " : "", (long long)e->shape[d]);
        printf("]%s\n", e->weight_decay ? "" : "  (no weight decay)");
    }
}

/* Trainable parameters of a preset with extra settings; -1 (message set) when it does not build. */
static int64_t preset_count(const char *preset, const char *const *extra, int n_extra) {
    char ov[64];
    snprintf(ov, sizeof ov, "model.preset=%s", preset);
    const char *ovs[8] = {ov};
    for (int i = 0; i < n_extra; i++) ovs[1 + i] = extra[i];
    Config *cfg;
    if (config_load(&cfg, NULL, ovs, 1 + n_extra) != VFM_OK) return -1;
    DiTConfig c;
    int64_t n = -1;
    if (dit_config_from(&c, cfg) == VFM_OK) {
        DiT m;
        dit_describe(&m, &c);
        n = param_table_trainable(&m.table);
        dit_destroy(&m);
    }
    config_free(cfg);
    return n;
}

static void print_count(int64_t n, int markdown) {
    if (n < 0) printf(markdown ? " — |" : " %14s", "-");
    else if (markdown && n >= 1000000000) printf(" %lld (%.2f B) |", (long long)n, n / 1e9);
    else if (markdown) printf(" %lld (%.1f M) |", (long long)n, n / 1e6);
    else printf(" %14lld", (long long)n);
}

static int cmd_model_presets(int markdown) {
    static const char *const variant_ov[3] = {"model.variant=dfm", "model.variant=nemo-adaln", "model.variant=adaln-zero"};
    static const char *const moviegen_ov[1] = {"model.variant=moviegen"};
    static const char *const stdit_ov[1] = {"model.variant=stdit"}; /* L: ST-DiT layers of two blocks */
    static const char *const wan_ov[1] = {"model.variant=wan"};
    if (markdown) {
        printf("| preset | D | L | H | dfm | nemo-adaln | adaln-zero | adaln-zero, DiT paper setting | moviegen | stdit | wan |\n");
        printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
    } else {
        printf("%-12s %5s %3s %3s %14s %14s %14s %14s %14s %14s %14s\n", "preset", "D", "L", "H", "dfm", "nemo-adaln",
               "adaln-zero", "adaln-zero-DiT", "moviegen", "stdit", "wan");
    }
    for (const char *const *p = config_preset_names(); *p; p++) {
        char ov[64];
        snprintf(ov, sizeof ov, "model.preset=%s", *p);
        const char *ovs[1] = {ov};
        Config *cfg;
        if (config_load(&cfg, NULL, ovs, 1) != VFM_OK) return cli_report(VFM_ERR_USAGE);
        int D = (int)cfg_int(cfg, "model.hidden_size"), L = (int)cfg_int(cfg, "model.num_layers");
        int H = (int)cfg_int(cfg, "model.num_attention_heads");
        config_free(cfg);
        if (markdown) printf("| `%s` | %d | %d | %d |", *p, D, L, H);
        else printf("%-12s %5d %3d %3d", *p, D, L, H);
        for (int v = 0; v < 3; v++) print_count(preset_count(*p, &variant_ov[v], 1), markdown);
        print_count(preset_count(*p, DIT_PAPER, N_DIT_PAPER), markdown);
        print_count(preset_count(*p, moviegen_ov, 1), markdown);
        print_count(preset_count(*p, stdit_ov, 1), markdown);
        print_count(preset_count(*p, wan_ov, 1), markdown);
        printf("\n");
    }
    return 0;
}

int cmd_model(int argc, char **argv) {
    if (argc > 0 && strcmp(argv[0], "forward") == 0) return cmd_model_forward(argc - 1, argv + 1);
    ArgFlag flags[] = {
        {"--preset", "NAME", "a model preset (vfm model presets lists them)", NULL, 0},
        {"--config", "FILE", "a config file (its model.* keys)", NULL, 0},
        {"--seq", "N", "tokens of one sample for the FLOP count (default 1024)", NULL, 0},
        {"--text", "L", "text rows of one sample (default 512, DFM's T5 length)", NULL, 0},
        {"--frames", "T", "stdit: the sample's frames (it is T frames of N/T tokens; default 1)", NULL, 0},
        {"--list", NULL, "print every parameter tensor", NULL, 0},
        {"--world", "N", "ranks of the job for the per-rank figures (default TP·CP)", NULL, 0},
        {"--dit-paper", NULL, "adaln-zero in the DiT paper's setting (4 channels, 1000 classes, learned sigma)", NULL, 0},
        {"--markdown", NULL, "presets: print a Markdown table (for docs/models.md)", NULL, 0},
    };
    int nflags = (int)(sizeof flags / sizeof flags[0]), help;
    ArgList pos;
    vfm_status s = args_parse("model", argc, argv, flags, nflags, &pos, &help);
    if (s != VFM_OK) return cli_report(s);
    if (help || pos.n == 0) {
        args_print_help("model info [--preset NAME | --config FILE] [--seq N] [--text L] [--dit-paper] [a.b=v ...]\n"
                        "       vfm model presets [--markdown]\n"
                        "       vfm model forward --checkpoint DIR --latent X.npy --t T --out Y.npy ... (see its --help)",
                        "info: the parameter count (total and by group), the variant's structure, and the FLOPs of\n"
                        "one sample of N tokens: forward, and a training step (forward + backward = 3x the forward's\n"
                        "matmul FLOPs), also per token. With parallel keys (model.tensor_model_parallel_size,\n"
                        "model.sequence_parallel, model.context_parallel_size, model.cp_comm_type, ...), sharding keys\n"
                        "(ddp.use_megatron_fsdp, ddp.data_parallel_sharding_strategy) or --world: per rank, the\n"
                        "parameters, the bytes of parameters, gradients and optimizer state under the resolved\n"
                        "sharding strategy, and bytes sent per micro-batch and per step.\n"
                        "presets: the trainable parameters of every preset in every variant.\n"
                        "forward: one call of a checkpoint's network on one latent (to compare implementations).",
                        flags, nflags);
        return help ? 0 : 2;
    }
    if (strcmp(pos.items[0], "presets") == 0) {
        if (pos.n > 1) {
            fprintf(stderr, "vfm model presets: takes no settings (got '%s')\n", pos.items[1]);
            return 2;
        }
        return cmd_model_presets(args_flag(flags, nflags, "--markdown")->present);
    }
    if (strcmp(pos.items[0], "info") != 0) {
        fprintf(stderr, "vfm model: unknown subcommand '%s' (expected info, presets or forward)\n", pos.items[0]);
        return 2;
    }
    const char *ov[270];
    int n = 0;
    char preset[128];
    const char *p = args_value(flags, nflags, "--preset", NULL);
    if (p) {
        snprintf(preset, sizeof preset, "model.preset=%s", p);
        ov[n++] = preset;
    }
    if (args_flag(flags, nflags, "--dit-paper")->present)
        for (int i = 0; i < N_DIT_PAPER; i++) ov[n++] = DIT_PAPER[i];
    for (int i = 1; i < pos.n && n < 270; i++) ov[n++] = pos.items[i];
    int seq = atoi(args_value(flags, nflags, "--seq", "1024")), text = atoi(args_value(flags, nflags, "--text", "512"));
    int frames = atoi(args_value(flags, nflags, "--frames", "1"));
    if (seq < 1 || text < 0 || frames < 1 || seq % frames != 0) {
        fprintf(stderr, "vfm model info: --seq must be >= 1, --text >= 0 and --frames >= 1 dividing --seq\n");
        return 2;
    }
    Config *cfg;
    if ((s = config_load(&cfg, args_value(flags, nflags, "--config", NULL), ov, n)) != VFM_OK) return cli_report(s);
    DiTConfig c;
    if ((s = dit_config_from(&c, cfg)) != VFM_OK) {
        config_free(cfg);
        return cli_report(s);
    }
    /* the layout first: a bad one is refused before anything is printed */
    if (cfg_int(cfg, "model.expert_model_parallel_size") > 1) {
        config_free(cfg);
        fprintf(stderr, "vfm model info: model.expert_model_parallel_size: the per-rank figures do not split the experts "
                        "over expert parallelism yet (vfm train does; docs/parallel.md)\n");
        return 2;
    }
    int world = atoi(args_value(flags, nflags, "--world", "0"));
    int per_rank = world > 0 || cfg_int(cfg, "model.tensor_model_parallel_size") > 1 ||
                   cfg_int(cfg, "model.context_parallel_size") > 1 || cfg_int(cfg, "model.pipeline_model_parallel_size") > 1 ||
                   cfg_is_set(cfg, "ddp.use_megatron_fsdp") || cfg_is_set(cfg, "ddp.data_parallel_sharding_strategy");
    TrainLayout l;
    DpSharding sharding = DP_SHARD_OPTIM;
    s = dp_sharding_from_config(cfg, &sharding); /* contradictory keys: exit 2 */
    if (s == VFM_OK && per_rank && (s = train_layout_from(&l, cfg, 1)) == VFM_OK) {
        if (world <= 0) world = l.tp * l.pp * l.cp;
        s = train_layout_check(&l, &c, world);
    }
    RecomputeConfig rc; /* and the recomputation keys (their chunk bound is the layout's) */
    if (s == VFM_OK) s = recompute_from_config(cfg, &rc);
    if (s != VFM_OK) {
        config_free(cfg);
        return cli_report(s);
    }
    DiT m;
    dit_describe(&m, &c);
    print_info(cfg, &m.cfg, &m.table, seq, text, frames);
    if (args_flag(flags, nflags, "--list")->present) print_list(&m.table);
    dit_destroy(&m);
    if (per_rank) s = print_per_rank(&c, &l, &rc, sharding, world, seq, text, frames);
    config_free(cfg);
    return s == VFM_OK ? 0 : cli_report(s);
}
