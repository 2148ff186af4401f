/* vfm bench (bench.h): mock packs, warm-up steps, timed training steps — the EDM loss forward and
 * backward of every micro-batch, the global gradient norm, clipping and AdamW — with the FLOP
 * count of perf-anchors.md (3 × the forward's matmul FLOPs, recomputation not counted), and the
 * forward check of the PyTorch peer. Its own small step loop over the calls the trainer makes
 * (objective_loss_and_grad, the global gradient norm, the step's decision, optimizer_step, the refresh of the
 * GPU's bf16 weights) on one rank, with a constant learning rate: the schedule does not change the
 * speed. */
#include "bench.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/config.h"
#include "core/cuda_runtime_shim.h"
#include "core/fileutil.h"
#include "core/log.h"
#include "core/philox.h"
#include "core/timer.h"
#include "data/formats/safetensors.h"
#include "data/loader/source.h"
#include "diffusion/objective.h"
#include "optim/optimizer.h"
#include "train/checkpoint.h"
#include "train/run_device.h"

/* ---- the device's peak ------------------------------------------------------------------- */

/* Dense (no sparsity) bf16 tensor-core peaks from the vendor's datasheets, TFLOP/s; the first row
 * whose name is part of the device name wins (so the longer names come first). */
static const struct {
    const char *name;
    double tflops;
} PEAKS[] = {
    {"H100 PCIe", 756.0}, {"H100 NVL", 835.0}, {"GH200", 989.4}, {"H200", 989.4}, {"H100", 989.4},
    {"H800", 989.4},      {"H20", 148.0},      {"GB200", 2500.0}, {"B200", 2250.0}, {"B100", 1750.0},
    {"A100", 312.0},      {"A800", 312.0},     {"L40S", 362.05},  {"L40", 181.05},  {"L4", 121.0},
};

double bench_peak_tflops(const char *device_name, const char **source) {
    static char buf[128];
    for (size_t i = 0; i < sizeof PEAKS / sizeof PEAKS[0]; i++)
        if (device_name && strstr(device_name, PEAKS[i].name)) {
            snprintf(buf, sizeof buf, "%s dense bf16 (datasheet)", PEAKS[i].name);
            *source = buf;
            return PEAKS[i].tflops;
        }
    *source = "device not in the table: the H100 SXM's dense bf16 peak";
    return 989.4;
}

/* ---- configuration -------------------------------------------------------------------------- */

static vfm_status set_value(Config *cfg, const char *key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static vfm_status set_value(Config *cfg, const char *key, const char *fmt, ...) {
    char v[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v, sizeof v, fmt, ap);
    va_end(ap);
    return config_set(cfg, key, v);
}

/* One mock sample of `tokens` tokens (grid 1 × h × w, h the largest divisor of tokens up to its
 * square root) and `text` rows per pack. */
static vfm_status set_one_sample(Config *cfg, int64_t tokens, int text) {
    int64_t h = (int64_t)sqrt((double)tokens);
    while (h > 1 && tokens % h) h--;
    int64_t w = tokens / h, pad = cfg_int(cfg, "dataset.pad_multiple");
    int p = (int)cfg_int(cfg, "model.patch_spatial"), pt = (int)cfg_int(cfg, "model.patch_temporal");
    VFM_TRY(set_value(cfg, "dataset.mock_shapes", "[\"%lldx%dx%lldx%lld\"]", (long long)cfg_int(cfg, "model.in_channels"),
                      pt, (long long)(h * p), (long long)(w * p)));
    VFM_TRY(set_value(cfg, "dataset.task_encoder_seq_length", "%lld", (long long)((tokens + pad - 1) / pad * pad)));
    VFM_TRY(config_set(cfg, "dataset.number_packed_samples", "1"));
    VFM_TRY(set_value(cfg, "dataset.context_seq_len", "%d", text));
    VFM_TRY(set_value(cfg, "dataset.context_embeddings_dim", "%lld", (long long)cfg_int(cfg, "model.crossattn_emb_size")));
    return VFM_OK;
}

static vfm_status bench_config(const BenchOptions *o, Config **out) {
    VFM_TRY(config_load(out, o->config_path, o->overrides, o->n_overrides));
    Config *cfg = *out;
    VFM_TRY(config_set(cfg, "dataset.mock", "true"));
    /* every step trains with the whole text, so the FLOPs counted are the FLOPs done */
    VFM_TRY(config_set(cfg, "diffusion.cfg_dropout", "0"));
    if (o->seq > 0) {
        VFM_TRY(set_one_sample(cfg, o->seq, o->text));
        if (!cfg_is_set(cfg, "train.global_batch_size")) VFM_TRY(config_set(cfg, "train.global_batch_size", "1"));
    }
    return VFM_OK;
}

/* ---- FLOPs -------------------------------------------------------------------------------- */

/* Attention's share of 3 × the forward FLOPs: scores and values, 4·(H·hd) per (query, key) pair
 * per layer, self-attention within each sample and cross-attention to its text. */
static double attention_flops(const DiTConfig *c, const Pack *p) {
    double self = 0, cross = 0;
    for (int i = 0; i < p->n_samples; i++) {
        double q = p->cu_seqlens[i + 1] - p->cu_seqlens[i], l = p->cu_text[i + 1] - p->cu_text[i];
        self += q * q;
        cross += q * l;
    }
    double width = (double)c->heads * c->head_dim;
    return 3.0 * c->layers * 4.0 * width * (self + (c->f.cross_attn ? cross : 0.0));
}

/* ---- the forward check for bench/torch_peer.py ------------------------------------------------ */

static json_t *model_json(const DiTConfig *c) {
    json_t *cross = c->cross_attention == DIT_AUTO ? json_null() : json_boolean(c->cross_attention == DIT_ON);
    json_t *pos = c->pos_embedding == DIT_POS_AUTO      ? json_null()
                  : c->pos_embedding == DIT_POS_SINCOS_2D ? json_string("sincos2d")
                                                          : json_string("sincos3d");
    return json_pack("{s:s,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:f,s:b,s:o,s:i,s:f,s:b,s:o}", "variant",
                     dit_variant_name(c->variant), "hidden", c->hidden, "layers", c->layers, "heads", c->heads,
                     "kv_heads", c->kv_heads, "ffn", c->ffn, "in_channels", c->in_channels, "out_channels",
                     c->out_channels, "patch_spatial", c->patch_spatial, "patch_temporal", c->patch_temporal,
                     "d_text", c->d_text, "adaln_lora", c->adaln_lora, "fps_dim", c->fps_dim, "ln_eps", (double)c->ln_eps,
                     "qk_norm", c->qk_norm, "cross_attention", cross, "num_classes", c->num_classes,
                     "class_dropout_prob", (double)c->class_dropout_prob, "learn_sigma", c->learn_sigma,
                     "pos_embedding", pos);
}

typedef struct Bench {
    Config *cfg;
    DiT model;
    int have_model;
    Objective obj;
    Optimizer opt;
    int have_opt;
    PackSource *source;
    Pack *packs;      /* [accum] the packs of one step */
    PackTensors *pts; /* [accum] their tensors on the model's device (copied up with the fetch) */
    ObjectiveWork work;
    int64_t accum;
    Device device;
    double lr;
    Tensor state; /* the step's scalars on the device, as the trainer keeps them (ops.h); 1 record */
} Bench;

/* A fixed input (one mock sample of 1 × 16 × 16 tokens with 32 text rows, σ = 0.8, no CFG drop)
 * through the EDM loss: dir/model.safetensors (the initial weights, named as the PyTorch twin),
 * dir/check.safetensors (its tokens, noise, text, σ, fps and vfm's network output F) and
 * dir/bench.json (the model and the benchmark's pack, for the peer). */
static vfm_status write_check(Bench *b, const char *dir, const Pack *timed_pack, const BenchResult *r) {
    const DiTConfig *mc = &b->model.cfg;
    Config *c2 = NULL;
    PackSource *src = NULL;
    Pack p;
    memset(&p, 0, sizeof p);
    float sigma[1] = {0.8f}, fps[1];
    int drop[1] = {0};
    int32_t class_row[1] = {0};
    DiffusionDraws d;
    memset(&d, 0, sizeof d);
    d.sigma = sigma, d.drop = drop, d.class_row = mc->num_classes > 0 ? class_row : NULL;
    ObjectiveResult res;
    memset(&res, 0, sizeof res);
    float *host_params = NULL;
    char path[1400];
    if (b->obj.kind != OBJECTIVE_EDM)
        return vfm_fail_at(VFM_ERR_USAGE, NULL, "diffusion.objective", objective_name(b->obj.kind),
                           "--check: the PyTorch peer trains the EDM objective (diffusion.objective=edm)");
    VFM_TRY(mkdir_p(dir));
    vfm_status s = config_copy(&c2, b->cfg);
    if (s == VFM_OK) s = set_one_sample(c2, 256, 32);
    if (s == VFM_OK) s = config_set(c2, "dataset.mock_samples", "1");
    if (s == VFM_OK) s = pack_source_create(&src, c2, 0, 1);
    if (s == VFM_OK) s = pack_init(&p, src->token_dim, src->text_dim, 1, 1);
    if (s == VFM_OK) s = src->next(src, &p);
    int64_t S = p.n_tokens, C = p.token_dim, od = dit_out_dim(mc);
    if (s == VFM_OK) {
        d.noise = calloc((size_t)(S * C), sizeof(float));
        res.F = calloc((size_t)(S * od), sizeof(float));
        host_params = malloc((size_t)b->model.table.total * sizeof(float));
        if (!d.noise || !res.F || !host_params) s = vfm_fail(VFM_ERR_NOMEM, "bench check: %lld tokens", (long long)S);
    }
    if (s == VFM_OK) s = diffusion_pack_noise(d.noise, &p, mc, b->obj.seed, RNG_STREAM_NOISE, 0);
    if (s == VFM_OK) s = objective_loss_given(&b->model, &b->obj, &p, &d, 0.0, &res);
    if (s == VFM_OK) s = dit_params_to_host(&b->model, host_params);
    if (s == VFM_OK) {
        fps[0] = p.samples[0].fps > 0 ? p.samples[0].fps : 30.0f;
        path_join(path, sizeof path, dir, "model.safetensors");
        s = save_named_tensors(path, &b->model.table, "", host_params, NULL);
    }
    if (s == VFM_OK) {
        char grid[64], loss[64], sd[64];
        snprintf(grid, sizeof grid, "%d,%d,%d", p.samples[0].grid[0], p.samples[0].grid[1], p.samples[0].grid[2]);
        snprintf(loss, sizeof loss, "%.9g", res.loss);
        snprintf(sd, sizeof sd, "%.9g", (double)b->obj.sigma_data);
        const char *meta[] = {"grid", grid, "loss", loss, "sigma_data", sd, "device", r->device, NULL};
        SafetensorsEntry e[] = {
            {"latent_tokens", DT_F32, 2, {S, C}, p.tokens},
            {"noise", DT_F32, 2, {S, C}, d.noise},
            {"text", DT_F32, 2, {p.n_text, p.text_dim}, p.text},
            {"F", DT_F32, 2, {S, od}, res.F},
            {"sigma", DT_F32, 1, {1}, sigma},
            {"fps", DT_F32, 1, {1}, fps},
        };
        path_join(path, sizeof path, dir, "check.safetensors");
        s = safetensors_write(path, e, (int)(sizeof e / sizeof e[0]), meta);
    }
    if (s == VFM_OK) {
        json_t *samples = json_array();
        for (int i = 0; i < timed_pack->n_samples; i++) {
            const PackSample *ps = &timed_pack->samples[i];
            json_array_append_new(samples, json_pack("{s:[iii],s:i,s:f}", "grid", ps->grid[0], ps->grid[1], ps->grid[2],
                                                     "text", timed_pack->cu_text[i + 1] - timed_pack->cu_text[i],
                                                     "fps", (double)(ps->fps > 0 ? ps->fps : 30.0f)));
        }
        json_t *j = json_pack("{s:o,s:{s:o,s:I,s:f,s:f,s:i,s:i,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:s,s:s},s:{s:f}}",
                              "model", model_json(mc), "bench", "samples", samples, "packs_per_step", (json_int_t)b->accum,
                              "flops_per_step", r->flops_per_step, "attn_flops_per_step", r->attn_flops_per_step,
                              "warmup", r->warmup, "steps", r->steps, "sigma_data", (double)b->obj.sigma_data,
                              "lr", b->lr, "beta1", b->opt.cfg.beta1, "beta2", b->opt.cfg.beta2, "eps", b->opt.cfg.eps,
                              "weight_decay", b->opt.cfg.weight_decay, "clip_grad", b->opt.cfg.clip_grad,
                              "peak_tflops", r->peak_tflops, "peak_source", r->peak_source, "vfm_device", r->device,
                              "check", "loss", res.loss);
        char *text = j ? json_dumps(j, JSON_INDENT(1) | JSON_PRESERVE_ORDER) : NULL;
        json_decref(j);
        path_join(path, sizeof path, dir, "bench.json");
        s = text ? write_file_atomic(path, text, strlen(text)) : vfm_fail(VFM_ERR_INTERNAL, "bench.json: cannot format");
        free(text);
    }
    if (s == VFM_OK) log_info("wrote the forward check for bench/torch_peer.py to %s (loss %.6f)", dir, res.loss);
    free(d.noise);
    free(res.F);
    free(host_params);
    pack_free(&p);
    if (src) pack_source_destroy(src);
    config_free(c2);
    return s;
}

/* ---- set-up and the step ------------------------------------------------------------------ */

static void optim_settings(OptimConfig *o, const Config *cfg) {
    memset(o, 0, sizeof *o);
    o->lr = o->min_lr = cfg_float(cfg, "optimizer.lr");
    o->beta1 = cfg_float(cfg, "optimizer.adam_beta1");
    o->beta2 = cfg_float(cfg, "optimizer.adam_beta2");
    o->eps = cfg_float(cfg, "optimizer.adam_eps");
    o->weight_decay = cfg_float(cfg, "optimizer.weight_decay");
    o->clip_grad = cfg_float(cfg, "optimizer.clip_grad");
    o->decay_style = LR_DECAY_CONSTANT;
}

static vfm_status bench_setup(Bench *b, const BenchOptions *o, BenchResult *r) {
    VFM_TRY(bench_config(o, &b->cfg));
    const Config *cfg = b->cfg;
    const char *why;
    VFM_TRY(run_select_device(cfg, &b->device, &why));
    int threads = (int)cfg_int(cfg, "train.threads");
    ops_set_threads(threads > 0 ? threads : (int)sysconf(_SC_NPROCESSORS_ONLN));
    if (b->device == DEV_CUDA) {
        snprintf(r->device, sizeof r->device, "%s", vfm_cuda_device_name());
        snprintf(r->precision, sizeof r->precision, "bf16 activations and weights, fp32 master weights and Adam moments");
    } else {
        snprintf(r->device, sizeof r->device, "cpu, %d thread%s", ops_get_threads(), ops_get_threads() > 1 ? "s" : "");
        snprintf(r->precision, sizeof r->precision, "fp32 (the CPU backend)");
    }
    const char *src;
    r->peak_tflops = o->peak_tflops > 0 ? o->peak_tflops : bench_peak_tflops(r->device, &src);
    snprintf(r->peak_source, sizeof r->peak_source, "%s", o->peak_tflops > 0 ? "--peak-tflops" : src);
    log_info("bench on %s (%s)", r->device, why);

    DiTConfig mc;
    VFM_TRY(dit_config_from(&mc, cfg));
    VFM_TRY(objective_from_config(&b->obj, cfg, &mc));
    VFM_TRY(objective_check_model(&b->obj, &mc));
    b->accum = cfg_int(cfg, "train.global_batch_size");
    VFM_TRY(pack_source_create(&b->source, cfg, 0, 1));
    if (b->source->token_dim != dit_token_dim(&mc))
        return vfm_fail(VFM_ERR_USAGE, "the mock data has %d values per token but the model expects %d",
                        b->source->token_dim, dit_token_dim(&mc));
    if (mc.f.cross_attn && b->source->text_dim != mc.d_text)
        return vfm_fail_at(VFM_ERR_USAGE, NULL, "dataset.context_embeddings_dim", NULL,
                           "the mock text is %d wide but model.crossattn_emb_size is %d", b->source->text_dim, mc.d_text);
    b->packs = calloc((size_t)b->accum, sizeof *b->packs);
    b->pts = calloc((size_t)b->accum, sizeof *b->pts);
    if (!b->packs || !b->pts) return vfm_fail(VFM_ERR_NOMEM, "bench: %lld packs", (long long)b->accum);
    for (int64_t k = 0; k < b->accum; k++) VFM_TRY(pack_init(&b->packs[k], b->source->token_dim, b->source->text_dim, 1, 1));

    VFM_TRY(dit_create(&b->model, &mc, b->device));
    b->have_model = 1;
    RecomputeConfig recompute; /* model.recompute_*: the activation memory and the time they cost */
    VFM_TRY(recompute_from_config(cfg, &recompute));
    VFM_TRY(dit_set_recompute(&b->model, &recompute));
    VFM_TRY(dit_init_weights(&b->model, (uint64_t)cfg_int(cfg, "rng.seed")));
    OptimConfig oc;
    optim_settings(&oc, cfg);
    b->lr = oc.lr;
    b->opt.cfg = oc;
    if (o->check_only) return VFM_OK;
    VFM_TRY(dit_reserve(&b->model, b->source->max_tokens, b->source->max_text, b->source->max_samples));
    VFM_TRY(optimizer_init_on(&b->opt, &oc, &b->model.table, 0, b->model.table.total, b->device));
    b->have_opt = 1;
    void *state = NULL;
    VFM_TRY(device_malloc(b->device, (STEP_SLOTS + 3) * sizeof(double), &state));
    b->state = TENSOR(state, DT_F64, b->device, STEP_SLOTS + 3);
    VFM_TRY(device_memset0(b->device, state, (STEP_SLOTS + 3) * sizeof(double)));
    b->opt.gate = &b->state;
    r->model = mc;
    r->params = param_table_trainable(&b->model.table);
    r->weights_bytes = (size_t)b->model.table.total * (sizeof(float) * 4 + (b->model.wcopy ? 2 : 0));
    /* fp32 weights, gradients, m, v (+ the bf16 copy the GPU ops read) */
    return VFM_OK;
}

static void bench_teardown(Bench *b) {
    objective_work_free(&b->work);
    for (int64_t k = 0; b->pts && k < b->accum; k++) pack_tensors_free(&b->pts[k]);
    free(b->pts);
    for (int64_t k = 0; b->packs && k < b->accum; k++) pack_free(&b->packs[k]);
    free(b->packs);
    if (b->source) pack_source_destroy(b->source);
    if (b->have_opt) optimizer_free(&b->opt);
    device_free(b->device, b->state.data);
    if (b->have_model) dit_destroy(&b->model);
    config_free(b->cfg);
}

/* One training step over the packs already fetched, as the trainer runs it (the loss, the norm and
 * the decision to apply the update stay on the device: no host wait inside the step), then one wait
 * for the GPU to time it, and *loss (their mean) read with the norm. */
static vfm_status bench_step(Bench *b, uint32_t step, double *loss) {
    DiT *m = &b->model;
    int64_t n = m->table.total;
    Tensor grads = TENSOR(m->grads, DT_F32, m->device, n);
    VFM_TRY(op_fill(&grads, 0.0));
    for (int64_t k = 0; k < b->accum; k++) {
        ObjectiveResult res;
        memset(&res, 0, sizeof res);
        res.loss_into = &b->state;
        VFM_TRY(objective_loss_and_grad_on(m, &b->obj, &b->packs[k], &b->pts[k], &b->work, step,
                                           1.0 / (double)b->accum, &res));
    }
    VFM_TRY(op_f64_div(&b->state, STEP_LOSS, (double)b->accum));
    VFM_TRY(op_sum_squares_into(&b->state, STEP_SUMSQ, &grads));
    StepDecideHyper h = {b->opt.cfg.clip_grad, (float)b->lr, (float)b->opt.cfg.beta1, (float)b->opt.cfg.beta2, 0};
    VFM_TRY(op_step_decide(&b->state, &h));
    VFM_TRY(optimizer_step(&b->opt, m->params, m->grads, b->lr, 1.0));
    VFM_TRY(dit_refresh_weights(m));
    double rec[STEP_SLOTS + 3];
    VFM_TRY(device_synchronize(m->device));
    VFM_TRY(device_memcpy(rec, DEV_CPU, b->state.data, b->device, sizeof rec));
    if (rec[STEP_SLOTS + 2] == 0)
        return vfm_fail(VFM_ERR_NUMERIC, "bench: step %u has a non-finite loss or gradient norm (%g, %g)", step,
                        rec[STEP_SLOTS], rec[STEP_SLOTS + 1]);
    *loss = rec[STEP_SLOTS];
    return VFM_OK;
}

static vfm_status fetch_packs(Bench *b, BenchResult *r, double *seconds) {
    double t0 = time_now();
    r->packs_per_step = b->accum;
    r->samples_per_step = r->tokens_per_step = r->padded_tokens_per_step = r->text_rows_per_step = 0;
    r->flops_per_step = r->attn_flops_per_step = 0;
    for (int64_t k = 0; k < b->accum; k++) {
        Pack *p = &b->packs[k];
        VFM_TRY(b->source->next(b->source, p));
        VFM_TRY(pack_tensors_upload(&b->pts[k], b->device, p, ops_stream()));
        r->samples_per_step += p->n_samples;
        r->tokens_per_step += p->cu_seqlens[p->n_samples];
        r->padded_tokens_per_step += p->n_tokens;
        r->text_rows_per_step += p->cu_text[p->n_samples];
        r->flops_per_step += 3.0 * dit_forward_flops(&b->model.cfg, p->n_samples, p->cu_seqlens, p->cu_text);
        r->attn_flops_per_step += attention_flops(&b->model.cfg, p);
    }
    *seconds += time_now() - t0;
    return VFM_OK;
}

/* On CUDA: the attention implementation asked for, and after the timed steps whether the reference
 * kernel served any of their attention calls — its figures (tens of seconds per step at 8k tokens)
 * are not vfm's speed, so they are refused unless it was asked for. */
static vfm_status check_attention(const Bench *b, const BenchOptions *o, int64_t reference_calls, BenchResult *r) {
    if (b->device != DEV_CUDA) return VFM_OK;
    int asked_reference = o->attention && strcmp(o->attention, "reference") == 0;
    snprintf(r->attention, sizeof r->attention, "%s", reference_calls == 0 ? "cuDNN" : asked_reference ? "reference kernel (asked)" : "reference kernel");
    if (reference_calls > 0 && !asked_reference)
        return vfm_fail(VFM_ERR_UNSUPPORTED,
                        "bench: %lld attention calls of the timed steps ran on the reference kernel, not cuDNN (the log "
                        "names each shape bucket and why); its figures are not reported unless asked for with "
                        "--attention reference",
                        (long long)reference_calls);
    return VFM_OK;
}

static vfm_status bench_loop(Bench *b, const BenchOptions *o, BenchResult *r) {
    double data_s = 0, flops = 0, attn = 0;
    int64_t tokens = 0, samples = 0, reference_calls = 0;
    for (int it = 0; it < o->warmup + o->steps; it++) {
        int timed = it >= o->warmup;
        if (o->profile) ops_profile_pause(1); /* making the packs is not part of the step */
        VFM_TRY(fetch_packs(b, r, &data_s));
        if (o->profile) ops_profile_pause(0);
        if (it == 0 && o->check_dir) VFM_TRY(write_check(b, o->check_dir, &b->packs[0], r));
        if (it == o->warmup && o->profile) ops_profile_enable(1);
        double loss = 0, t0 = time_now();
        int64_t ref0 = ops_attention_reference_calls();
        vfm_status s = bench_step(b, (uint32_t)it, &loss);
        double dt = time_now() - t0;
        if (timed) reference_calls += ops_attention_reference_calls() - ref0;
        if (s == VFM_OK && o->profile && timed) s = ops_profile_collect();
        VFM_TRY(s);
        log_info("%s step %d/%d: %.1f ms, loss %.4f", timed ? "timed" : "warm-up", timed ? it - o->warmup + 1 : it + 1,
                 timed ? o->steps : o->warmup, 1e3 * dt, loss);
        if (!timed) continue;
        r->seconds += dt;
        flops += r->flops_per_step;
        attn += r->attn_flops_per_step;
        tokens += r->tokens_per_step;
        samples += r->samples_per_step;
        if (it == o->warmup) r->loss_first = loss;
        r->loss_last = loss;
    }
    if (o->profile) {
        r->n_profile = ops_profile_entries(r->profile, BENCH_MAX_PROFILE);
        ops_profile_enable(0);
    }
    VFM_TRY(check_attention(b, o, reference_calls, r));
    double secs = r->seconds > 0 ? r->seconds : 1e-9;
    r->ms_per_step = 1e3 * secs / o->steps;
    r->tokens_per_s = (double)tokens / secs;
    r->samples_per_s = (double)samples / secs;
    r->tflops = flops / secs / 1e12;
    r->mfu = r->tflops / r->peak_tflops;
    r->mfu_no_attn = (flops - attn) / secs / 1e12 / r->peak_tflops;
    r->data_ms_per_step = 1e3 * data_s / (o->warmup + o->steps);
    r->acts_bytes = b->model.slot_bytes + b->model.rc_scratch.size; /* the slot and the recomputation scratch */
    VFM_TRY(device_memory(b->device, &r->mem));
    DeviceMemory host;
    VFM_TRY(device_memory(DEV_CPU, &host));
    r->host_peak = host.peak;
    return VFM_OK;
}

vfm_status bench_run(const BenchOptions *o, BenchResult *r) {
    memset(r, 0, sizeof *r);
    r->warmup = o->warmup;
    r->steps = o->steps;
    if (o->steps < 1) return vfm_fail(VFM_ERR_USAGE, "--steps %d: at least one timed step", o->steps);
    if (o->check_only && !o->check_dir) return vfm_fail(VFM_ERR_USAGE, "--check-only needs --check DIR");
    if (o->warmup < 0) return vfm_fail(VFM_ERR_USAGE, "--warmup %d: must be 0 or more", o->warmup);
    if (o->attention) VFM_TRY(ops_set_attention_impl(o->attention));
    Bench b;
    memset(&b, 0, sizeof b);
    vfm_status s = bench_setup(&b, o, r);
    if (s == VFM_OK && o->check_only) {
        double data_s = 0;
        s = fetch_packs(&b, r, &data_s);
        if (s == VFM_OK) s = write_check(&b, o->check_dir, &b.packs[0], r);
    } else if (s == VFM_OK) {
        s = bench_loop(&b, o, r);
    }
    s = run_memory_hint(s, b.cfg, 1); /* one rank */
    bench_teardown(&b);
    return s;
}
