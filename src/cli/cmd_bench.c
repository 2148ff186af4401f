/* vfm bench: parses the command line, runs train/bench.c and prints its figures — a block for
 * people, the per-op table with --profile, and one `bench-json: {...}` line for scripts
 * (bench/run_pair.sh). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "commands.h"
#include "ops/ops.h"
#include "train/bench.h"

static double mib(size_t b) { return (double)b / (1024.0 * 1024.0); }

static void print_result(const BenchResult *r) {
    const DiTConfig *c = &r->model;
    printf("device:        %s; %s\n", r->device, r->precision);
    printf("model:         DiT %s, hidden %d, %d layers, %d heads (head dim %d), %.1f M parameters\n",
           dit_variant_name(c->variant), c->hidden, c->layers, c->heads, c->head_dim, r->params / 1e6);
    printf("step:          %lld pack%s, %lld sample%s, %lld tokens (%lld rows with padding), %lld text rows; "
           "mock data, full text (no CFG drop)\n",
           (long long)r->packs_per_step, r->packs_per_step == 1 ? "" : "s", (long long)r->samples_per_step,
           r->samples_per_step == 1 ? "" : "s", (long long)r->tokens_per_step, (long long)r->padded_tokens_per_step,
           (long long)r->text_rows_per_step);
    printf("steps:         %d warm-up, %d timed (forward, backward, clipping, AdamW); loss %.4f -> %.4f\n", r->warmup,
           r->steps, r->loss_first, r->loss_last);
    if (r->attention[0]) printf("attention:     %s\n", r->attention);
    printf("ms/step:       %.2f\n", r->ms_per_step);
    printf("tokens/s:      %.1f\n", r->tokens_per_s);
    printf("samples/s:     %.3f\n", r->samples_per_s);
    printf("model TFLOP/s: %.4f (%.4g FLOPs per step: 3 x the forward's matmuls, recomputation not counted; "
           "attention %.1f%%)\n",
           r->tflops, r->flops_per_step, 100.0 * r->attn_flops_per_step / (r->flops_per_step > 0 ? r->flops_per_step : 1));
    printf("MFU:           %.2f%% of %.1f TFLOP/s (%s); without attention FLOPs %.2f%%\n", 100.0 * r->mfu,
           r->peak_tflops, r->peak_source, 100.0 * r->mfu_no_attn);
    if (r->mem.total)
        printf("peak memory:   device %.1f MiB held by vfm at most (weights+grads+Adam %.1f MiB, activations %.1f MiB); "
               "%.1f MiB of %.1f MiB in use at the end; host %.1f MiB\n",
               mib(r->mem.peak), mib(r->weights_bytes), mib(r->acts_bytes), mib(r->mem.total - r->mem.free),
               mib(r->mem.total), mib(r->host_peak));
    else
        printf("peak memory:   %.1f MiB resident (weights+grads+Adam %.1f MiB, activations %.1f MiB)\n", mib(r->host_peak),
               mib(r->weights_bytes), mib(r->acts_bytes));
    printf("data:          %.2f ms per step to make the mock packs (not timed)\n", r->data_ms_per_step);
}

static void print_profile(const BenchResult *r) {
    double step = r->seconds / r->steps, in_ops = 0;
    printf("\nper-op time (%s, per timed step):\n", r->mem.total ? "CUDA events: time on the GPU" : "wall clock");
    printf("  %-30s %6s %10s %9s %9s\n", "op", "device", "calls", "ms", "share");
    for (int i = 0; i < r->n_profile; i++) {
        const OpsProfileEntry *e = &r->profile[i];
        double s = e->seconds / r->steps;
        in_ops += s;
        printf("  %-30s %6s %10.1f %9.3f %8.1f%%\n", e->name, device_name(e->device), (double)e->calls / r->steps,
               1e3 * s, 100.0 * s / (step > 0 ? step : 1));
    }
    printf("  %-30s %6s %10s %9.3f %8.1f%%\n", "(outside ops: host work, idle)", "", "", 1e3 * (step - in_ops),
           100.0 * (step - in_ops) / (step > 0 ? step : 1));
}

static void print_json(const BenchResult *r) {
    json_t *j = json_pack("{s:s,s:s,s:I,s:I,s:I,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:I,s:I}", "impl", "vfm", "device",
                          r->device, "params", (json_int_t)r->params, "tokens_per_step", (json_int_t)r->tokens_per_step,
                          "samples_per_step", (json_int_t)r->samples_per_step, "ms_per_step", r->ms_per_step,
                          "tokens_per_s", r->tokens_per_s, "samples_per_s", r->samples_per_s, "tflops", r->tflops,
                          "mfu", r->mfu, "mfu_no_attn", r->mfu_no_attn, "peak_tflops", r->peak_tflops,
                          "flops_per_step", r->flops_per_step, "peak_device_bytes", (json_int_t)r->mem.peak,
                          "peak_host_bytes", (json_int_t)r->host_peak);
    if (j && r->attention[0]) json_object_set_new(j, "attention", json_string(r->attention));
    if (j) json_object_set_new(j, "attn_flops_per_step", json_real(r->attn_flops_per_step));
    if (j && r->n_profile) { /* --profile: what `vfm plan --calibrate` reads (GEMM and attention rates) */
        json_t *rows = json_array();
        for (int i = 0; i < r->n_profile; i++) {
            const OpsProfileEntry *e = &r->profile[i];
            json_array_append_new(rows, json_pack("{s:s,s:s,s:f,s:f}", "op", e->name, "device", device_name(e->device),
                                                  "calls_per_step", (double)e->calls / r->steps, "seconds_per_step",
                                                  e->seconds / r->steps));
        }
        json_object_set_new(j, "profile", rows);
    }
    char *text = j ? json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    if (text) printf("bench-json: %s\n", text);
    free(text);
    json_decref(j);
}

int cmd_bench(int argc, char **argv) {
    ArgFlag flags[] = {
        {"--config", "FILE", "YAML config (merged as preset -> file -> overrides)", NULL, 0},
        {"--preset", "NAME", "model size preset (the same as model.preset=NAME)", NULL, 0},
        {"--seq", "N", "every pack is one mock sample of N tokens (grid 1 x h x w)", NULL, 0},
        {"--text", "L", "with --seq: text rows of that sample (default 512)", NULL, 0},
        {"--warmup", "N", "untimed steps first (default 2)", NULL, 0},
        {"--steps", "N", "timed steps (default 5)", NULL, 0},
        {"--profile", NULL, "time of every op over the timed steps (CUDA events on the GPU, wall clock on the CPU)", NULL,
         0},
        {"--check", "DIR", "write the fixed-input forward check bench/torch_peer.py compares itself with", NULL, 0},
        {"--check-only", NULL, "with --check: write it and time nothing (the peer alone, e.g. vfm on the CPU)", NULL, 0},
        {"--peak-tflops", "X", "the peak MFU is measured against (default: the device's dense bf16 peak from a table)",
         NULL, 0},
        {"--attention", "IMPL", "CUDA attention: auto (default), cudnn, or reference (the slow reference kernel: its "
         "figures are refused unless asked for this way)", NULL, 0},
    };
    int nflags = (int)(sizeof flags / sizeof flags[0]), help;
    ArgList pos;
    vfm_status s = args_parse("bench", argc, argv, flags, nflags, &pos, &help);
    if (s != VFM_OK) return cli_report(s);
    if (help) {
        args_print_help("bench [--config FILE | --preset NAME] [--seq N] [--profile] [a.b.c=value ...]",
                        "Times full training steps (forward, backward, gradient clipping, AdamW) of a model on mock\n"
                        "data on the device train.device selects, after warm-up steps, and prints ms/step, tokens/s,\n"
                        "samples/s, the model's TFLOP/s (3 x the forward's matmul FLOPs), MFU against the device's\n"
                        "dense bf16 peak with and without attention FLOPs, and peak memory. The last line,\n"
                        "`bench-json: {...}`, holds the same figures for scripts. Examples:\n"
                        "  vfm bench --preset dit-xl --seq 8192\n"
                        "  vfm bench --config bench/dit-xl.yaml --profile\n"
                        "  vfm bench --config configs/tiny-mock.yaml train.threads=2", flags, nflags);
        return 0;
    }
    const char *overrides[260];
    int n = 0;
    const char *preset = args_value(flags, nflags, "--preset", NULL);
    char preset_ov[128];
    if (preset) {
        snprintf(preset_ov, sizeof preset_ov, "model.preset=%s", preset);
        overrides[n++] = preset_ov;
    }
    for (int i = 0; i < pos.n; i++) {
        if (!strchr(pos.items[i], '=')) {
            fprintf(stderr, "vfm bench: unexpected argument '%s' (overrides look like a.b.c=value)\n", pos.items[i]);
            return 2;
        }
        overrides[n++] = pos.items[i];
    }
    BenchOptions o = {args_value(flags, nflags, "--config", NULL), overrides, n, 0, 512, 2, 5,
                      args_flag(flags, nflags, "--profile")->present, args_value(flags, nflags, "--check", NULL),
                      args_flag(flags, nflags, "--check-only")->present, 0,
                      args_value(flags, nflags, "--attention", NULL)};
    if (!o.config_path && !preset && !args_value(flags, nflags, "--seq", NULL)) {
        fprintf(stderr, "vfm bench: give --config FILE, or --preset NAME (with --seq N); see --help\n");
        return 2;
    }
    const char *v;
    int64_t iv;
    if (s == VFM_OK && (s = args_int("bench", flags, nflags, "--seq", o.seq, 1, 1 << 30, &iv)) == VFM_OK) o.seq = (int)iv;
    if (s == VFM_OK && (s = args_int("bench", flags, nflags, "--text", o.text, 1, 1 << 24, &iv)) == VFM_OK) o.text = (int)iv;
    if (s == VFM_OK && (s = args_int("bench", flags, nflags, "--warmup", o.warmup, 0, 1000000, &iv)) == VFM_OK)
        o.warmup = (int)iv;
    if (s == VFM_OK && (s = args_int("bench", flags, nflags, "--steps", o.steps, 1, 1000000, &iv)) == VFM_OK) o.steps = (int)iv;
    if (s == VFM_OK && (v = args_value(flags, nflags, "--peak-tflops", NULL))) {
        char *end;
        o.peak_tflops = strtod(v, &end);
        if (end == v || *end || !(o.peak_tflops > 0))
            s = vfm_fail(VFM_ERR_USAGE, "--peak-tflops %s: expected a positive number", v);
    }
    if (s == VFM_OK && o.attention) s = ops_set_attention_impl(o.attention); /* a bad name: exit 2 before any work */
    if (s == VFM_OK && args_value(flags, nflags, "--text", NULL) && !o.seq)
        s = vfm_fail(VFM_ERR_USAGE, "--text needs --seq (without it the config's dataset.context_seq_len is used)");
    if (s != VFM_OK) return cli_report(s);
    BenchResult r;
    s = bench_run(&o, &r);
    if (s != VFM_OK) return cli_report(s);
    if (o.check_only) {
        printf("wrote the forward check to %s (vfm on %s); nothing timed (--check-only)\n", o.check_dir, r.device);
        return 0;
    }
    print_result(&r);
    if (o.profile) print_profile(&r);
    print_json(&r);
    return 0;
}
