/* No silent keys, proven from the consuming code: for every registry key and every mode of a run
 * (mock or real data × each model variant × each objective, and the schedules, layouts, checkpoint
 * and EMA settings that decide what else is read), setting the key to another value must change
 * what the run's set-up derived (train_setup_from_config: the same function `vfm train` calls), or
 * produce a warning or an error naming the key. Set-up only, no training: the whole matrix runs in
 * a few seconds.
 *
 * "What the set-up derived" is its effect, not the stored number, wherever a stored number could
 * be ignored later: the model by its parameter table (names, shapes, init scales) and the loss it
 * gives with random weights on a fixed pack of labelled samples at two steps (so a key the model
 * or the objective reads but never uses changes nothing); the optimizer by its learning rate at
 * points over the run and its Adam settings; each sampler setting by the schedule its sampler runs
 * (EDM sigmas and churn, flow times, DDPM steps and DDIM). The rest of the set-up (data source,
 * layout, validation, checkpoints, logging) is compared field by field. A key read and then
 * ignored — the fault this test exists for — fails here. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capture.h"
#include "core/config.h"
#include "core/config_internal.h"
#include "core/hash.h"
#include "core/log.h"
#include "data/loader/mock.h"
#include "diffusion/flow.h"
#include "ops/ops.h"
#include "test.h"
#include "train/train_setup.h"

/* ---- the effects ---- */

static uint64_t mix(uint64_t h, const void *p, size_t n) { return hash_combine64(h, hash_bytes64(p, n, 7)); }

/* The model by its parameter table. */
static uint64_t table_effect(const DiTConfig *mc) {
    DiT m;
    dit_describe(&m, mc);
    uint64_t h = 1;
    for (int i = 0; i < m.table.count; i++) {
        const ParamEntry *e = &m.table.entries[i];
        h = mix(h, e->name, strlen(e->name));
        h = mix(h, e->shape, sizeof(int64_t) * (size_t)e->ndim);
        h = mix(h, &e->init, sizeof e->init);
        h = mix(h, &e->init_scale, sizeof e->init_scale);
    }
    dit_destroy(&m);
    return h;
}

/* The model and objective together: the loss of random weights on a pack of 12 labelled samples of
 * 4 tokens at steps 3 and 4 (every draw: σ or t, CFG coins, classes). */
static uint64_t loss_effect(const DiTConfig *mc, const Objective *o) {
    DiT m;
    uint64_t h = 1;
    if (dit_create(&m, mc, DEV_CPU) != VFM_OK) return hash_string64("model refused");
    float *w = malloc((size_t)m.table.total * sizeof(float));
    test_fill_uniform_f32(w, m.table.total, 11, -0.2f, 0.2f);
    vfm_status s = dit_params_from_host(&m, w);
    free(w);
    MockConfig fixed = {.channels = mc->in_channels, .pt = mc->patch_temporal, .ph = mc->patch_spatial,
                        .pw = mc->patch_spatial, .text_dim = mc->d_text, .text_len = 3, .max_per_pack = 12,
                        .pad_multiple = 1, .budget = 1 << 20, .seed = 5, .n_shapes = 1};
    fixed.shapes[0] = (MockShape){mc->in_channels, mc->patch_temporal, 2 * mc->patch_spatial, 2 * mc->patch_spatial};
    PackSource *src = NULL;
    Pack p;
    pack_init(&p, dit_token_dim(mc), mc->d_text, 1, 1);
    if (s == VFM_OK) s = mock_source_from(&src, &fixed, 0, 0, 1);
    if (s == VFM_OK) s = src->next(src, &p);
    for (int i = 0; s == VFM_OK && i < p.n_samples; i++)
        p.samples[i].class_label = mc->num_classes > 0 ? i % mc->num_classes : -1;
    if (s == VFM_OK) s = dit_reserve(&m, p.n_tokens, p.n_text, p.n_samples);
    for (uint32_t step = 3; s == VFM_OK && step <= 4; step++) {
        ObjectiveResult r;
        memset(&r, 0, sizeof r);
        s = objective_loss(&m, o, &p, step, &r);
        h = mix(h, &r.loss, sizeof r.loss);
    }
    if (s != VFM_OK) h = mix(h, "loss refused", 12);
    pack_free(&p);
    if (src) pack_source_destroy(src);
    dit_destroy(&m);
    return h;
}

/* Losses already computed, by model and objective (the modes share most of them). */
static struct {
    uint64_t key, value;
} g_losses[4096];
static int g_n_losses;

static uint64_t cached_loss(const DiTConfig *mc, const Objective *o) {
    uint64_t key = mix(mix(1, mc, sizeof *mc), o, sizeof *o);
    for (int i = 0; i < g_n_losses; i++)
        if (g_losses[i].key == key) return g_losses[i].value;
    uint64_t value = loss_effect(mc, o);
    if (g_n_losses < 4096) {
        g_losses[g_n_losses].key = key;
        g_losses[g_n_losses++].value = value;
    }
    return value;
}

static uint64_t optim_effect(const OptimConfig *oc, int64_t train_iters) {
    double v[6] = {oc->beta1, oc->beta2, oc->eps, oc->weight_decay, oc->clip_grad, 0};
    uint64_t h = mix(1, v, sizeof v);
    int64_t end = train_iters > oc->decay_iters ? train_iters : oc->decay_iters;
    int64_t marks[] = {0, 1, oc->warmup_iters / 2, oc->warmup_iters, oc->warmup_iters + 1};
    for (size_t i = 0; i < sizeof marks / sizeof marks[0]; i++) {
        double lr = lr_at_step(oc, marks[i]);
        h = mix(h, &lr, sizeof lr);
    }
    for (int64_t k = 0; k <= 1024; k++) { /* fine enough to fall inside a WSD annealing of 1/100 of the run */
        double lr = lr_at_step(oc, end * k / 1000);
        h = mix(h, &lr, sizeof lr);
    }
    return h;
}

/* What each sampler runs with (generate.c): EDM its σ schedule and churn, flow its time schedule,
 * DDPM its steps and whether DDIM. */
static uint64_t sampler_effect(const SampleSettings *s, ObjectiveKind kind) {
    int n = s->sampler.num_steps;
    uint64_t h = mix(1, &n, sizeof n);
    h = mix(h, &s->guidance, sizeof s->guidance);
    double *t = calloc((size_t)n + 2, sizeof(double));
    if (kind == OBJECTIVE_EDM) {
        edm_sigma_schedule(&s->sampler, t);
        h = mix(h, t, (size_t)(n + 1) * sizeof(double));
        h = mix(h, &s->sampler.s_churn, sizeof(double));
    } else if (kind == OBJECTIVE_FLOW && s->flow_unipc) { /* UniPC's own times: its order is what is set */
        h = mix(h, "unipc", 5);
        h = mix(h, &s->unipc_order, sizeof s->unipc_order);
    } else if (kind == OBJECTIVE_FLOW) {
        flow_time_schedule(n, s->flow_linear, t);
        h = mix(h, t, (size_t)(n + 1) * sizeof(double));
    } else {
        h = mix(h, &s->ddim, sizeof s->ddim);
    }
    free(t);
    return h;
}

/* The set-up as compared: the effects above in place of the structs they summarise. */
typedef struct Effect {
    TrainSetup rest;
    uint64_t table, loss, optim, validation, sample;
} Effect;

/* base: the mode's own set-up and effect, reused where the parts are bitwise equal (most keys
 * leave the model alone: no model built for them). */
static void effect_of(const TrainSetup *su, const TrainSetup *base_su, const Effect *base, Effect *e) {
    memset(e, 0, sizeof *e);
    e->rest = *su;
    memset(&e->rest.model, 0, sizeof e->rest.model);
    memset(&e->rest.objective, 0, sizeof e->rest.objective);
    memset(&e->rest.optim, 0, sizeof e->rest.optim);
    memset(&e->rest.validation.gen, 0, sizeof e->rest.validation.gen);
    memset(&e->rest.sample_defaults, 0, sizeof e->rest.sample_defaults);
    int same_model = base_su && !memcmp(&su->model, &base_su->model, sizeof su->model);
    int same_objective = base_su && !memcmp(&su->objective, &base_su->objective, sizeof su->objective);
    e->table = same_model ? base->table : table_effect(&su->model);
    /* the loss where the table alone does not tell (a model of another shape: no need to run it) */
    if (same_model && same_objective) e->loss = base->loss;
    else if (!base || e->table == base->table) e->loss = cached_loss(&su->model, &su->objective);
    e->optim = optim_effect(&su->optim, su->train_iters);
    e->validation = su->validation.interval ? sampler_effect(&su->validation.gen, su->objective.kind) : 0;
    e->sample = sampler_effect(&su->sample_defaults, su->objective.kind);
}

/* ---- the modes ---- */

#define MAX_OV 8
typedef struct Mode {
    const char *ov[MAX_OV];
} Mode;

static const char *const k_data[2] = {"dataset.mock=true", "dataset.path=/nonexistent/shards"};
static const char *const k_variant[5][2] = {{"model.variant=dfm", NULL},
                                            {"model.variant=nemo-adaln", NULL},
                                            {"model.variant=adaln-zero", NULL},
                                            {"model.variant=adaln-zero", "model.cross_attention=true"},
                                            {"model.variant=wan", NULL}};
static const char *const k_objective[3] = {"diffusion.objective=edm", "diffusion.objective=flow",
                                           "diffusion.objective=ddpm"};
/* beside dfm / mock / edm: the settings under which other keys are (or are not) read */
static const Mode k_extra[] = {
    {{"scheduler.lr_decay_style=constant"}},
    {{"scheduler.lr_decay_style=WSD", "scheduler.lr_wsd_decay_iters=100"}},
    {{"scheduler.lr_warmup_iters=0"}},
    {{"train.eval_interval=0"}},
    {{"checkpoint.save="}},
    {{"checkpoint.load=runs/before"}},
    {{"checkpoint.load=runs/before", "checkpoint.finetune=true"}},
    {{"ema.enabled=true"}},
    {{"ddp.use_megatron_fsdp=true"}},
    {{"model.pipeline_model_parallel_size=2", "model.virtual_pipeline_model_parallel_size=2"}},
    {{"model.tensor_model_parallel_size=2", "model.sequence_parallel=true"}},
    {{"model.context_parallel_size=2", "model.cp_comm_type=a2a+p2p", "model.hierarchical_context_parallel_sizes=[1, 2]"}},
    {{"model.recompute_granularity=full", "model.recompute_method=uniform", "model.recompute_num_layers=1"}},
    {{"model.num_classes=10"}},
    {{"diffusion.objective=flow", "sampler.flow_solver=unipc"}},
};

static int build_modes(Mode *out, int cap) {
    int n = 0;
    for (int d = 0; d < 2; d++)
        for (int v = 0; v < 5; v++)
            for (int o = 0; o < 3 && n < cap; o++) {
                Mode m = {{k_data[d], k_variant[v][0], k_objective[o], k_variant[v][1]}};
                out[n++] = m;
            }
    for (size_t e = 0; e < sizeof k_extra / sizeof k_extra[0] && n < cap; e++) {
        Mode m = {{k_data[0]}};
        for (int i = 0; i < MAX_OV - 1 && k_extra[e].ov[i]; i++) m.ov[i + 1] = k_extra[e].ov[i];
        out[n++] = m;
    }
    return n;
}

static int mode_overrides(const Mode *m, const char **ov) {
    int n = 0;
    ov[n++] = "model.preset=tiny"; /* a small model: its effect is built for the model keys */
    for (int i = 0; i < MAX_OV && m->ov[i]; i++) ov[n++] = m->ov[i];
    return n;
}

static void mode_text(const Mode *m, char *buf, size_t size) {
    size_t k = 0;
    buf[0] = 0;
    for (int i = 0; i < MAX_OV && m->ov[i] && k < size; i++)
        k += (size_t)snprintf(buf + k, size - k, "%s%s", i ? " " : "", m->ov[i]);
}

/* ---- another value for a key ---- */

static int accepts(const char *key, const char *value) {
    Config *scratch;
    if (config_load(&scratch, NULL, NULL, 0) != VFM_OK) return 0;
    LogLevel level = log_get_level();
    log_set_level(LOG_ERROR);
    int ok = config_set(scratch, key, value) == VFM_OK;
    log_set_level(level);
    config_free(scratch);
    return ok;
}

/* Values of the key's type other than `now` (its text in the mode), in out[0..return) (not all
 * valid for the key: accepts() tells). */
static int other_values(const CfgKeyDef *def, const char *now, char out[][160]) {
    char cand[16][160];
    int n = 0;
    switch (def->type) {
    case CFG_INT: {
        long long v = atoll(now);
        long long c[] = {v + 1, v - 1, 2 * v, v + 2, 2, 0};
        for (int i = 0; i < 6; i++) snprintf(cand[n++], 160, "%lld", c[i]);
        break;
    }
    case CFG_FLOAT: {
        double v = atof(now);
        double c[] = {10 * v, 2 * v, v / 2, v + 0.5, 0.25, 0};
        for (int i = 0; i < 6; i++) snprintf(cand[n++], 160, "%.17g", c[i]);
        break;
    }
    case CFG_BOOL: snprintf(cand[n++], 160, "%s", strcmp(now, "true") == 0 ? "false" : "true"); break;
    case CFG_STRING:
        if (def->choices) {
            for (int c = 0; def->choices[c] && n < 16; c++)
                snprintf(cand[n++], 160, "%s", def->choices[c][0] ? def->choices[c] : "null");
        } else {
            snprintf(cand[n++], 160, "elsewhere/x");
        }
        break;
    case CFG_INT_LIST: snprintf(cand[n++], 160, "[1, 1]"); break;
    case CFG_FLOAT_LIST: snprintf(cand[n++], 160, "[0.5]"); break;
    case CFG_STRING_LIST: snprintf(cand[n++], 160, "[\"4x1x16x16\"]"); break;
    case CFG_IGNORED: snprintf(cand[n++], 160, "x"); break;
    }
    int k = 0;
    for (int i = 0; i < n; i++) {
        int same = strcmp(cand[i], now) == 0 || (!strcmp(cand[i], "null") && !strcmp(now, "\"\"")) ||
                   (def->type == CFG_FLOAT && atof(cand[i]) == atof(now)) ||
                   (def->type == CFG_INT && atoll(cand[i]) == atoll(now));
        for (int j = 0; j < k && !same; j++) same = strcmp(out[j], cand[i]) == 0;
        if (!same) snprintf(out[k++], 160, "%s", cand[i]);
    }
    return k;
}

/* The set-up of a config, with what it printed to stderr (*err, malloc'd). */
static vfm_status setup_of(const char **ov, int n, TrainSetup *su, char **err) {
    Capture c;
    capture_begin(&c, 2);
    Config *cfg = NULL;
    vfm_status s = config_load(&cfg, NULL, ov, n);
    if (s == VFM_OK) s = train_setup_from_config(su, cfg, 1);
    if (s != VFM_OK) fprintf(stderr, "error: %s\n", vfm_last_error());
    config_free(cfg);
    *err = capture_end(&c);
    return s;
}

/* 1 when text names the key as a whole word ("model.num_layers", not "model.num_layers_x"). */
static int names_key(const char *text, const char *key) {
    size_t n = strlen(key);
    for (const char *p = strstr(text, key); p; p = strstr(p + 1, key)) {
        char after = p[n];
        if (!(after == '_' || (after >= 'a' && after <= 'z') || (after >= 'A' && after <= 'Z'))) return 1;
    }
    return 0;
}

TEST(config_registry_every_key_acts_or_is_named_in_every_mode) {
    ops_set_threads(1);
    log_set_level(LOG_WARN); /* the info lines are not what is looked for */
    Mode modes[64];
    int n_modes = build_modes(modes, 64);
    int problems = 0, checked = 0;
    for (int mi = 0; mi < n_modes; mi++) {
        const char *ov[MAX_OV + 4];
        int n = mode_overrides(&modes[mi], ov);
        char mtext[512];
        mode_text(&modes[mi], mtext, sizeof mtext);
        TrainSetup base;
        char *err = NULL;
        vfm_status s = setup_of(ov, n, &base, &err);
        CHECK_MSG(s == VFM_OK, "mode %s: the set-up fails: %s", mtext, err);
        free(err);
        if (s != VFM_OK) continue;
        Effect base_effect;
        effect_of(&base, NULL, NULL, &base_effect);
        Config *now;
        REQUIRE_OK(config_load(&now, NULL, ov, n));
        for (int k = 0; k < cfg_key_count; k++) {
            const CfgKeyDef *def = &cfg_key_defs[k];
            char current[256], values[16][160], assignment[512] = "", first[1024] = "";
            cfg_value_text(now, def->name, current, sizeof current);
            int n_values = other_values(def, current, values);
            /* some other value must act (or be named): a value the mode already resolves to (cross_attention
             * false where auto means off) changes nothing, and a refusal for another reason proves nothing */
            int acted = 0;
            int tried = 0;
            for (int v = 0; v < n_values && !acted; v++) {
                if (!accepts(def->name, values[v])) continue;
                tried++;
                snprintf(assignment, sizeof assignment, "%s=%s", def->name, values[v]);
                ov[n] = assignment;
                TrainSetup su;
                s = setup_of(ov, n + 1, &su, &err);
                acted = names_key(err, def->name);
                if (s == VFM_OK && !acted) {
                    Effect e;
                    effect_of(&su, &base, &base_effect, &e);
                    acted = memcmp(&e, &base_effect, sizeof e) != 0;
                }
                if (tried == 1) snprintf(first, sizeof first, "%s: %s", assignment, s == VFM_OK ? "no warning" : err);
                free(err);
            }
            if (!tried) continue; /* one value only: train.micro_batch_size, optimizer.optimizer */
            checked++;
            if (!acted && problems++ < 20)
                test_fail(__FILE__, __LINE__, "mode [%s]: no other value of %s changed what the run derived, and "
                          "nothing named it (%s)", mtext, def->name, first);
        }
        config_free(now);
    }
    CHECK(checked > 20 * cfg_key_count);
}

/* Every key says what a resume does when the checkpoint's value differs (docs/checkpoints.md). */
TEST(config_registry_every_key_has_a_resume_class) {
    for (int i = 0; i < config_registry_count(); i++) {
        CfgKeyInfo k;
        config_registry_key(i, &k);
        CHECK_MSG(k.resume == CFG_RESUME_REFUSE || k.resume == CFG_RESUME_NOTE || k.resume == CFG_RESUME_FREE,
                  "key '%s' has no resume class (refuse, note or free) in src/core/config_keys.c", k.name);
        if (!strncmp(k.name, "diffusion.", 10))
            CHECK_MSG(k.resume == CFG_RESUME_REFUSE, "'%s' changes the objective: a resume must refuse it", k.name);
    }
    static const char *refused[] = {"model.variant", "model.hidden_size", "model.num_layers", "model.adaln_lora_dim",
                                    "model.in_channels", "model.patch_spatial", "optimizer.optimizer"};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        CfgKeyInfo k;
        config_registry_key(config_registry_find(refused[i]), &k);
        CHECK_MSG(k.resume == CFG_RESUME_REFUSE, "'%s' makes another model: a resume must refuse it", refused[i]);
    }
}
