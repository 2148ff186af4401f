/* vfm plan: the parallel layout for a model, a sequence length and a number of GPUs (src/plan,
 * docs/plan.md): the best layouts with their memory per GPU and step time, the overrides of the best
 * for `vfm train`; --explain shows how each figure was made, --json prints them for scripts. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "commands.h"
#include "core/config.h"
#include "plan/plan.h"

static double gib(double b) { return b / (1024.0 * 1024.0 * 1024.0); }

/* The keys the user fixed on the command line (overrides a.b=v): the search keeps them. */
static vfm_status fixed_keys(const Config *cfg, const char *const *items, int n_items, PlanFixed *f) {
    memset(f, 0, sizeof *f);
    int sharding = 0;
    for (int i = 0; i < n_items; i++) {
        const char *it = items[i], *eq = strchr(it, '=');
        size_t n = eq ? (size_t)(eq - it) : strlen(it);
#define IS(k) (n == strlen(k) && strncmp(it, k, n) == 0)
        if (IS("model.tensor_model_parallel_size")) f->tp = (int)cfg_int(cfg, "model.tensor_model_parallel_size");
        else if (IS("model.sequence_parallel")) f->sp = cfg_bool(cfg, "model.sequence_parallel") + 1;
        else if (IS("model.context_parallel_size")) f->cp = (int)cfg_int(cfg, "model.context_parallel_size");
        else if (IS("model.pipeline_model_parallel_size")) f->pp = (int)cfg_int(cfg, "model.pipeline_model_parallel_size");
        else if (IS("model.virtual_pipeline_model_parallel_size"))
            f->vp = (int)cfg_int(cfg, "model.virtual_pipeline_model_parallel_size");
        else if (IS("model.cp_comm_type") || IS("model.hierarchical_context_parallel_sizes")) {
            TrainLayout l;
            VFM_TRY(train_layout_from(&l, cfg, 0));
            f->cp_type = (int)l.cp_type + 1;
            if (l.cp_type == CP_COMM_A2A_P2P) f->a2a_size = l.a2a_size;
        } else if (IS("ddp.use_megatron_fsdp") || IS("ddp.data_parallel_sharding_strategy") ||
                   IS("ddp.use_distributed_optimizer"))
            sharding = 1;
        else if (IS("model.recompute_granularity") || IS("model.recompute_method") || IS("model.recompute_num_layers")) {
            f->recompute = 1;
            snprintf(f->rc_granularity, sizeof f->rc_granularity, "%s", cfg_str(cfg, "model.recompute_granularity"));
            snprintf(f->rc_method, sizeof f->rc_method, "%s", cfg_str(cfg, "model.recompute_method"));
            f->rc_layers = (int)cfg_int(cfg, "model.recompute_num_layers");
        } else if (IS("ddp.overlap_grad_reduce"))
            f->overlap_grad_reduce = cfg_bool(cfg, "ddp.overlap_grad_reduce") + 1;
#undef IS
    }
    if (sharding) {
        DpSharding s;
        VFM_TRY(dp_sharding_from_config(cfg, &s));
        f->sharding = (int)s + 1;
    }
    return VFM_OK;
}

static void print_row(int rank, const PlanResult *p) {
    char name[256];
    plan_layout_name(&p->layout, name, sizeof name);
    const PlanMemory *m = &p->mem;
    double state = m->params + m->grads + m->optimizer + m->ema + m->transient;
    double other = m->buffers + m->workspace + m->allowance;
    printf("%2d  %-58s %6.1f GiB (state %5.1f, act %5.1f, other %4.1f)", rank, name, gib(m->total), gib(state),
           gib(m->activations), gib(other));
    if (p->fits) printf("  %8.3f s  %9.0f  %6.0f  %s\n", p->time.step, p->time.tokens_per_second_per_gpu,
                        p->time.model_tflops_per_gpu, p->time.dominant);
    else printf("  does not fit: %.1f GiB over\n", gib(p->over_bytes));
}

static void print_explain(const PlanRequest *r, const PlanResult *p) {
    const PlanMemory *m = &p->mem;
    const PlanTime *t = &p->time;
    const char *act = r->dev.cpu ? "f32" : "bf16";
    int zero3 = p->layout.sharding == DP_SHARD_OPTIM_GRADS_PARAMS;
    printf("\nhow the figures of the best layout were made (docs/plan.md):\n");
    printf("memory per GPU, pipeline stage %d (the stage that holds the most):\n", m->stage);
    printf("  parameters     %8.2f GiB  dp_memory_bytes: fp32 weights (%s)%s\n", gib(m->params),
           zero3 ? "a piece of each block unit, the whole units" : "the master",
           r->dev.cpu ? "" : zero3 ? " + the whole units' bf16 copies the GPU ops read" : " + the bf16 copy the GPU ops read");
    printf("  gradients      %8.2f GiB  fp32, under %s\n", gib(m->grads), dp_sharding_name(p->layout.sharding));
    printf("  optimizer      %8.2f GiB  Adam m, v%s over DP×CP = %d\n", gib(m->optimizer),
           p->layout.sharding == DP_SHARD_OPTIM_GRADS_PARAMS ? " and the fp32 master shard" : "",
           p->layout.dp * p->layout.l.cp);
    printf("  EMA            %8.2f GiB  ema.enabled\n", gib(m->ema));
    printf("  transient      %8.2f GiB  ZeRO-2/3's unit gradients%s\n", gib(m->transient),
           !zero3 ? "" : r->dev.cpu ? " and gathered units" : ", a gathered block's bf16 copy and the next one's fp32 gather");
    printf("  activations    %8.2f GiB  %s: one slot %.2f GiB x (%d in flight%s) + recomputation scratch %.2f GiB "
           "(dit_activation_plan: every layer's carve for this rank's rows)\n",
           gib(m->activations), act, gib(m->slot), m->slots_in_flight, p->layout.l.pp > 1 ? " + the model's own" : "",
           gib(m->scratch));
    printf("  buffers        %8.2f GiB  NCCL 256 MiB per communicator; the pipeline's messages\n", gib(m->buffers));
    printf("  workspaces     %8.2f GiB  cuBLASLt 32 MiB + cuDNN attention 64 MiB\n", gib(m->workspace));
    printf("  allowance      %8.2f GiB  CUDA context and the libraries' kernels (stated, not measured)\n",
           gib(m->allowance));
    printf("  total          %8.2f GiB  of %.2f GiB (%s)\n", gib(m->total), gib(r->dev.memory_bytes), r->dev.label);
    printf("time per step, %lld micro-batch%s per replica:\n", (long long)p->layout.microbatches,
           p->layout.microbatches == 1 ? "" : "es");
    printf("  GEMMs          %8.4f s  the rank's linear FLOPs x 3 at %.3g TFLOP/s (%.3g%% of %.1f%s)\n", t->gemm,
           r->dev.peak_tflops * r->dev.gemm_efficiency, 100 * r->dev.gemm_efficiency, r->dev.peak_tflops,
           r->dev.calibrated ? ", calibrated" : "");
    printf("  attention      %8.4f s  forward at %.3g / backward (2.5 x) at %.3g TFLOP/s (head dim 64) … %.3g / %.3g (128)\n",
           t->attention, r->dev.attn_fwd_tflops[0], r->dev.attn_bwd_tflops[0], r->dev.attn_fwd_tflops[1],
           r->dev.attn_bwd_tflops[1]);
    printf("  elementwise    %8.4f s  3 passes over the kept activations at %.0f GB/s\n", t->elementwise, r->dev.hbm_gb_s);
    printf("  recomputation  %8.4f s  the replayed forward (full) or attention (selective)\n", t->recompute);
    printf("  TP collectives %8.4f s  dit_comm_bytes' TP regions, not overlapped\n", t->tp);
    printf("  CP traffic     %8.4f s  exposed (the p2p ring hides behind the attention)\n", t->cp);
    printf("  PP messages    %8.4f s  hidden states and gradients, not overlapped\n", t->pp_p2p);
    printf("  PP bubble      %8.4f s  (P-1)/V micro-batch times\n", t->bubble);
    printf("  DP traffic     %8.4f s  fp32 gradients and parameters, exposed part\n", t->dp);
    printf("  optimizer      %8.4f s  AdamW over the shard at %.0f GB/s\n", t->optimizer, r->dev.hbm_gb_s);
    printf("  step           %8.4f s  links: %.0f GB/s in a node, %.0f GB/s between nodes\n", t->step, r->intra_gb_s,
           r->inter_gb_s);
}

static json_t *layout_json(const PlanResult *p) {
    PlanOverride ov[PLAN_MAX_OVERRIDES];
    int n = plan_layout_overrides(&p->layout, ov);
    json_t *o = json_object();
    for (int i = 0; i < n; i++) json_object_set_new(o, ov[i].key, json_string(ov[i].value));
    char name[256];
    plan_layout_name(&p->layout, name, sizeof name);
    const PlanMemory *m = &p->mem;
    json_t *parts = json_pack("{s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:i}", "params", m->params, "grads", m->grads,
                              "optimizer", m->optimizer, "ema", m->ema, "transient", m->transient, "activations",
                              m->activations, "activation_peak", m->activation_peak, "buffers", m->buffers, "workspace",
                              m->workspace, "allowance", m->allowance, "slot", m->slot, "stage", m->stage);
    json_t *j = json_pack("{s:s,s:o,s:b,s:f,s:f,s:o,s:f,s:f,s:f,s:s}", "layout", name, "overrides", o, "fits", p->fits,
                          "memory_bytes_per_gpu", m->total, "over_bytes", p->over_bytes, "memory_parts", parts,
                          "step_seconds", p->time.step, "tokens_per_second_per_gpu", p->time.tokens_per_second_per_gpu,
                          "model_tflops_per_gpu", p->time.model_tflops_per_gpu, "dominant_cost", p->time.dominant);
    return j;
}

/* The numbers of the command line. */
typedef struct PlanArgs {
    const char *preset, *file, *gpu, *calibrate;
    long seq, text, gpus, gpn, gbs;
} PlanArgs;

/* The request of the command line with the overrides items[n] (a.b=v; they are also the fixed keys). */
static vfm_status make_request(const PlanArgs *a, const char *const *items, int n_items, PlanRequest *r) {
    memset(r, 0, sizeof *r);
    const char *ov[260];
    char pre[128];
    int n = 0;
    if (a->preset) {
        snprintf(pre, sizeof pre, "model.preset=%s", a->preset);
        ov[n++] = pre;
    }
    for (int i = 0; i < n_items && n < 260; i++) ov[n++] = items[i];
    Config *cfg;
    VFM_TRY(config_load(&cfg, a->file, ov, n));
    vfm_status s = dit_config_from(&r->model, cfg);
    if (s == VFM_OK && cfg_int(cfg, "model.expert_model_parallel_size") > 1)
        s = vfm_fail(VFM_ERR_USAGE, "vfm plan: model.expert_model_parallel_size: the planner does not split the experts over "
                                    "expert parallelism yet (vfm train does; docs/plan.md)");
    if (s == VFM_OK) s = fixed_keys(cfg, items, n_items, &r->fixed);
    if (s == VFM_OK) s = plan_device_find(a->gpu, &r->dev);
    if (s == VFM_OK && a->calibrate) s = plan_device_calibrate(&r->dev, a->calibrate);
    r->seq = a->seq, r->text = r->model.f.cross_attn ? a->text : 0, r->gpus = (int)a->gpus, r->gpus_per_node = (int)a->gpn;
    r->pad_multiple = (int)cfg_int(cfg, "dataset.pad_multiple");
    r->ema = cfg_bool(cfg, "ema.enabled");
    /* NeMo's pretrain_7b_pack recipe: 512 packs per step (../shared/research/dfm.md §4.5) */
    r->global_batch = a->gbs ? a->gbs : cfg_is_set(cfg, "train.global_batch_size") ? cfg_int(cfg, "train.global_batch_size") : 512;
    double intra = cfg_float(cfg, "plan.intra_node_bandwidth"), inter = cfg_float(cfg, "plan.inter_node_bandwidth");
    r->intra_gb_s = intra > 0 ? intra : r->dev.intra_gb_s;
    r->inter_gb_s = inter > 0 ? inter : r->dev.inter_gb_s;
    config_free(cfg);
    return s;
}

/* --versus: that layout's step beside the best's, the parts where it spends most more. */
static void print_versus(const PlanResult *best, const PlanResult *v) {
    char name[256];
    plan_layout_name(&v->layout, name, sizeof name);
    if (!v->fits) {
        printf("versus %s: does not fit, %.1f GiB over (%.1f GiB per GPU)\n", name, gib(v->over_bytes), gib(v->mem.total));
        return;
    }
    printf("versus %s: %.3f s per step against %.3f s (%.0f against %.0f TFLOP/s per GPU)", name, v->time.step,
           best->time.step, v->time.model_tflops_per_gpu, best->time.model_tflops_per_gpu);
    const char *names[PLAN_TIME_PARTS];
    double a[PLAN_TIME_PARTS], b[PLAN_TIME_PARTS];
    plan_time_parts(&v->time, names, a);
    plan_time_parts(&best->time, names, b);
    int used[PLAN_TIME_PARTS] = {0}, said = 0;
    for (int k = 0; k < 3; k++) { /* the three parts it spends most more time in */
        int m = -1;
        for (int i = 0; i < PLAN_TIME_PARTS; i++)
            if (!used[i] && a[i] - b[i] > 0.01 * best->time.step && (m < 0 || a[i] - b[i] > a[m] - b[m])) m = i;
        if (m < 0) break;
        used[m] = 1;
        printf("%s %s %.3f s against %.3f s", said++ ? "," : "; it spends more in:", names[m], a[m], b[m]);
    }
    printf("\n");
}

int cmd_plan(int argc, char **argv) {
    ArgFlag flags[] = {
        {"--preset", "NAME", "a model preset (vfm model presets lists them)", NULL, 0},
        {"--config", "FILE", "a config file (its model.* keys)", NULL, 0},
        {"--seq", "N", "tokens of one sample (a pack holds one)", NULL, 0},
        {"--text", "L", "text rows of one sample (default 512, DFM's T5 length)", NULL, 0},
        {"--gpus", "G", "GPUs of the job", NULL, 0},
        {"--gpu", "KIND", "h100-80gb (default), h200-141gb, b200-180gb, a100-80gb; cpu: vfm's CPU ranks (memory)", NULL, 0},
        {"--gpus-per-node", "N", "GPUs in a node's NVLink domain (default 8)", NULL, 0},
        {"--global-batch", "B", "packs per step (default: train.global_batch_size when set, else 512)", NULL, 0},
        {"--top", "K", "layouts to print (default 5)", NULL, 0},
        {"--calibrate", "FILE", "the output of vfm bench --profile on this GPU: its GEMM and attention rates", NULL, 0},
        {"--explain", NULL, "how each figure of the best layout was computed", NULL, 0},
        {"--versus", "\"K=V ...\"", "a layout's keys (space-separated): its step beside the best's, and where it differs", NULL, 0},
        {"--json", NULL, "print {\"layouts\": [...]}, best first, those that do not fit last", NULL, 0},
    };
    int nflags = (int)(sizeof flags / sizeof flags[0]), help;
    ArgList pos;
    vfm_status s = args_parse("plan", argc, argv, flags, nflags, &pos, &help);
    if (s != VFM_OK) return cli_report(s);
    if (help) {
        args_print_help("plan --preset NAME | --config F --seq N --gpus G [--gpu KIND] [--gpus-per-node 8] "
                        "[--global-batch B] [a.b=v ...]",
                        "Every layout vfm can train the model with on G GPUs (TP, SP, CP with each cp_comm_type, PP\n"
                        "with V, DP with each sharding strategy, recomputation), each with its peak memory per GPU\n"
                        "and its step time; the best few, and the `vfm train` overrides of the best. Parallel,\n"
                        "sharding and recompute keys given as a.b=v are kept fixed. Bandwidths:\n"
                        "plan.intra_node_bandwidth, plan.inter_node_bandwidth (GB/s per GPU). docs/plan.md.",
                        flags, nflags);
        return 0;
    }
    int64_t seq = 0, text = 512, gpus = 0, gpn = 8, gbs = 0, top = 5;
    if ((s = args_int("plan", flags, nflags, "--seq", seq, 1, 1L << 30, &seq)) != VFM_OK ||
        (s = args_int("plan", flags, nflags, "--text", text, 0, 1L << 20, &text)) != VFM_OK ||
        (s = args_int("plan", flags, nflags, "--gpus", gpus, 1, 1L << 20, &gpus)) != VFM_OK ||
        (s = args_int("plan", flags, nflags, "--gpus-per-node", gpn, 1, 1024, &gpn)) != VFM_OK ||
        (s = args_int("plan", flags, nflags, "--global-batch", gbs, 1, 1L << 30, &gbs)) != VFM_OK ||
        (s = args_int("plan", flags, nflags, "--top", top, 1, 1000, &top)) != VFM_OK)
        return cli_report(s);
    if (!seq || !gpus) {
        fprintf(stderr, "vfm plan: --seq N and --gpus G are required (vfm plan --help)\n");
        return 2;
    }
    const char *preset = args_value(flags, nflags, "--preset", NULL), *file = args_value(flags, nflags, "--config", NULL);
    if (!preset && !file) {
        fprintf(stderr, "vfm plan: give --preset NAME or --config FILE\n");
        return 2;
    }
    PlanArgs a = {preset, file, args_value(flags, nflags, "--gpu", "h100-80gb"), args_value(flags, nflags, "--calibrate", NULL),
                  seq, text, gpus, gpn, gbs};
    PlanRequest r;
    if ((s = make_request(&a, pos.items, pos.n, &r)) != VFM_OK) return cli_report(s);
    PlanList list;
    if ((s = plan_search(&r, &list)) != VFM_OK) return cli_report(s);
    int json = args_flag(flags, nflags, "--json")->present;
    if (json) {
        json_t *arr = json_array();
        for (int i = 0; i < list.n; i++) json_array_append_new(arr, layout_json(&list.items[i]));
        json_t *j = json_pack("{s:o}", "layouts", arr);
        char *text_out = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
        if (text_out) printf("%s\n", text_out);
        free(text_out);
        json_decref(j);
    }
    if (list.n_fit == 0) { /* a world too small: one line, the closest layout and by how much it misses (the
                            * JSON, when asked for, is printed first) */
        char name[256];
        plan_layout_name(&list.items[0].layout, name, sizeof name);
        fprintf(stderr, "vfm plan: no layout of %d x %s fits: the closest, %s, needs %.1f GiB per GPU, %.1f GiB more "
                "than the %.1f GiB it has (%lld layouts tried)\n", r.gpus, r.dev.name, name, gib(list.items[0].mem.total),
                gib(list.items[0].over_bytes), gib(r.dev.memory_bytes), (long long)list.considered);
        plan_list_free(&list);
        return 2;
    }
    if (json) {
        plan_list_free(&list);
        return 0;
    }
    printf("vfm plan: %s %s, %d layers, hidden %d; %lld tokens per sample, %lld text rows; %d x %s, %d per node; "
           "global batch %lld\n", dit_variant_name(r.model.variant), preset ? preset : file, r.model.layers,
           r.model.hidden, (long long)r.seq, (long long)r.text, r.gpus, r.dev.label, r.gpus_per_node,
           (long long)r.global_batch);
    printf("%lld layouts evaluated, %d fit in %.1f GiB%s\n\n", (long long)list.considered, list.n_fit,
           gib(r.dev.memory_bytes), r.dev.cpu ? " (the CPU: not checked)" : "");
    printf(" #  %-58s %-44s  %8s  %9s  %6s  %s\n", "layout", "memory per GPU", "step", "tok/s/GPU", "TFLOP/s", "dominant");
    int shown = 0;
    for (int i = 0; i < list.n && shown < top; i++)
        if (list.items[i].fits) print_row(++shown, &list.items[i]);
    const PlanResult *best = &list.items[0];
    PlanOverride ovs[PLAN_MAX_OVERRIDES];
    int k = plan_layout_overrides(&best->layout, ovs);
    printf("\n%s:\n  vfm train --config F", list.n_fit ? "the best layout" : "the closest layout");
    for (int i = 0; i < k; i++) printf(" %s=%s", ovs[i].key, ovs[i].value);
    printf("\n");
    const char *versus = args_value(flags, nflags, "--versus", NULL);
    if (versus) { /* that layout's keys, space-separated, beside the command line's */
        char buf[2048];
        const char *items[300];
        int n = 0;
        snprintf(buf, sizeof buf, "%s", versus);
        for (int i = 0; i < pos.n && n < 256; i++) items[n++] = pos.items[i];
        for (char *tok = strtok(buf, " "); tok && n < 300; tok = strtok(NULL, " ")) items[n++] = tok;
        PlanRequest vr;
        PlanList vl;
        s = make_request(&a, items, n, &vr);
        if (s == VFM_OK) s = plan_search(&vr, &vl);
        if (s != VFM_OK) {
            plan_list_free(&list);
            return cli_report(s);
        }
        print_versus(best, &vl.items[0]);
        plan_list_free(&vl);
    }
    if (args_flag(flags, nflags, "--explain")->present) print_explain(&r, best);
    plan_list_free(&list);
    return 0;
}
