/* vfm import: a state dict (safetensors, or a torch.save file read by the safe unpickler) becomes a
 * vfm checkpoint (a run directory with iter_0000000) that fine-tunes (checkpoint.load +
 * checkpoint.finetune) or samples. For adaln-zero the configuration is read from the DiT
 * reference's shapes (docs/models.md); `pos_embed` is skipped (vfm computes the position embedding
 * for any size). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "commands.h"
#include "core/config.h"
#include "core/fileutil.h"
#include "data/formats/safetensors.h"
#include "diffusers_io.h"
#include "data/formats/torch_tensor.h"
#include "model/arch.h"
#include "model/dit_interop.h"
#include "train/checkpoint.h"

/* ---- a safetensors file as a WeightSource ---- */
static const char *st_name(void *ctx, int i) { return safetensors_name(ctx, i); }
static int st_shape(void *ctx, int i, int64_t *shape) {
    DType dt;
    int nd = 0;
    safetensors_info(ctx, i, &dt, &nd, shape);
    return nd;
}
static vfm_status st_read(void *ctx, int i, float *out, int64_t numel) { return safetensors_read_f32(ctx, i, out, numel); }

/* ---- a torch.save state dict as a WeightSource ---- */
static const char *pt_name(void *ctx, int i) { return ((TorchStateDict *)ctx)->names[i]; }
static int pt_shape(void *ctx, int i, int64_t *shape) {
    const TorchTensor *t = &((TorchStateDict *)ctx)->tensors[i];
    for (int d = 0; d < t->ndim && d < VFM_MAX_DIMS; d++) shape[d] = t->shape[d];
    return t->ndim;
}
static vfm_status pt_read(void *ctx, int i, float *out, int64_t numel) {
    const TorchTensor *t = &((TorchStateDict *)ctx)->tensors[i];
    if (t->numel != numel) return vfm_fail(VFM_ERR_SHAPE, "tensor %s: %lld values", pt_name(ctx, i), (long long)t->numel);
    torch_tensor_to_f32(t, out);
    return VFM_OK;
}

/* ---- the tensors under "<prefix>." of another source, named without it ---- */
typedef struct Prefixed {
    const WeightSource *inner;
    size_t len;
    int *index; /* [count] inner index of each kept tensor */
} Prefixed;
static const char *px_name(void *ctx, int i) {
    Prefixed *p = ctx;
    return p->inner->name(p->inner->ctx, p->index[i]) + p->len;
}
static int px_shape(void *ctx, int i, int64_t *shape) {
    Prefixed *p = ctx;
    return p->inner->shape(p->inner->ctx, p->index[i], shape);
}
static vfm_status px_read(void *ctx, int i, float *out, int64_t numel) {
    Prefixed *p = ctx;
    return p->inner->read_f32(p->inner->ctx, p->index[i], out, numel);
}
static vfm_status prefixed(WeightSource *out, Prefixed *p, const WeightSource *inner, const char *prefix) {
    char dotted[256];
    snprintf(dotted, sizeof dotted, "%s.", prefix);
    p->inner = inner;
    p->len = strlen(dotted);
    p->index = calloc((size_t)inner->count + 1, sizeof *p->index);
    if (!p->index) return vfm_fail(VFM_ERR_NOMEM, "import: %d names", inner->count);
    *out = (WeightSource){0, inner->what, p, px_name, px_shape, px_read};
    for (int i = 0; i < inner->count; i++)
        if (strncmp(inner->name(inner->ctx, i), dotted, p->len) == 0) p->index[out->count++] = i;
    if (out->count == 0)
        return vfm_fail_at(VFM_ERR_USAGE, NULL, "--prefix", prefix, "no tensor of %s is named '%s...'", inner->what, dotted);
    return VFM_OK;
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* The reference's shapes do not hold the head count: take it from a preset of the same width and
 * depth (the DiT paper's S/B/L/XL are vfm's dit-s/b/l/xl). */
static vfm_status heads_from_presets(Config *cfg) {
    if (cfg_is_set(cfg, "model.num_attention_heads")) return VFM_OK;
    int64_t D = cfg_int(cfg, "model.hidden_size"), L = cfg_int(cfg, "model.num_layers");
    for (const char *const *p = config_preset_names(); *p; p++) {
        char ov[64];
        snprintf(ov, sizeof ov, "model.preset=%s", *p);
        const char *ovs[1] = {ov};
        Config *pc;
        if (config_load(&pc, NULL, ovs, 1) != VFM_OK) continue;
        int match = cfg_int(pc, "model.hidden_size") == D && cfg_int(pc, "model.num_layers") == L;
        char heads[32];
        snprintf(heads, sizeof heads, "%lld", (long long)cfg_int(pc, "model.num_attention_heads"));
        config_free(pc);
        if (match) return config_set(cfg, "model.num_attention_heads", heads);
    }
    return vfm_fail(VFM_ERR_USAGE, "vfm import: the state dict is %lld wide and %lld deep, like no preset: set "
                    "model.num_attention_heads=H (its shapes do not say it)", (long long)D, (long long)L);
}

static vfm_status write_run(const char *run, Config *cfg, DiT *m) {
    VFM_TRY(config_set(cfg, "checkpoint.save", run));
    CheckpointState st;
    memset(&st, 0, sizeof st);
    st.seed = (uint64_t)cfg_int(cfg, "rng.seed");
    st.world_size = st.dp = st.tp = st.pp = st.cp = 1;
    VFM_TRY(config_to_yaml_string(cfg, &st.config_yaml));
    CheckpointData d = {&m->table, m->params, NULL};
    vfm_status s = checkpoint_save(run, &st, &d, 1);
    checkpoint_state_free(&st);
    return s;
}

/* A wan preset of the folder's sizes ("" when none): what the import says it is. */
static void matching_preset(char settings[16][96], int n, char *out, size_t size) {
    const char *ov[17];
    for (int i = 0; i < n; i++) ov[i] = settings[i];
    Config *mine;
    *out = 0;
    if (config_load(&mine, NULL, ov, n) != VFM_OK) return;
    static const char *const keys[] = {"model.hidden_size", "model.num_layers", "model.num_attention_heads",
                                       "model.ffn_hidden_size", "model.in_channels", "model.crossattn_emb_size"};
    for (const char *const *p = config_preset_names(); *p; p++) {
        char o[64];
        snprintf(o, sizeof o, "model.preset=%s", *p);
        const char *ovs[1] = {o};
        Config *pc;
        if (config_load(&pc, NULL, ovs, 1) != VFM_OK) continue;
        int match = strcmp(cfg_str(pc, "model.variant"), "wan") == 0;
        for (int k = 0; k < 6 && match; k++) match = cfg_int(pc, keys[k]) == cfg_int(mine, keys[k]);
        config_free(pc);
        if (match) snprintf(out, size, "%s", *p);
    }
    config_free(mine);
}

static vfm_status import_source(const WeightSource *src, const char *variant, const char *run, const ArgFlag *flags,
                                int nflags, const ArgList *pos, const char *folder) {
    const char *from = src->what;
    char settings[16][96], preset[128], var[64], found[64] = "";
    int n_settings = 0;
    vfm_status s = strcmp(variant, "adaln-zero") == 0 ? dit_reference_settings(src, settings, &n_settings) : VFM_OK;
    if (folder) {
        s = diffusers_wan_settings(folder, settings, &n_settings);
        if (s == VFM_OK) matching_preset(settings, n_settings, found, sizeof found);
    }
    const char *ov[300];
    int n = 0;
    const char *p = args_value(flags, nflags, "--preset", NULL);
    if (!p && *found) p = found;
    if (p) snprintf(preset, sizeof preset, "model.preset=%s", p), ov[n++] = preset;
    snprintf(var, sizeof var, "model.variant=%s", variant);
    ov[n++] = var;
    for (int i = 0; i < n_settings; i++) ov[n++] = settings[i];
    for (int i = 0; i < pos->n && n < 300; i++) ov[n++] = pos->items[i];
    Config *cfg = NULL;
    if (s == VFM_OK) s = config_load(&cfg, args_value(flags, nflags, "--config", NULL), ov, n);
    if (s == VFM_OK && n_settings && !folder) s = heads_from_presets(cfg);
    DiTConfig c;
    DiT m;
    memset(&m, 0, sizeof m);
    if (s == VFM_OK) s = dit_config_from(&c, cfg);
    if (s == VFM_OK) s = dit_create(&m, &c, DEV_CPU);
    int skipped = 0;
    if (s == VFM_OK) s = dit_load_weights(&m, src, &skipped);
    if (s == VFM_OK) s = write_run(run, cfg, &m);
    if (s == VFM_OK) {
        printf("imported %d tensors (%lld parameters)%s from %s into %s/iter_0000000: %s, hidden %d, %d layers, "
               "%d heads\n", m.table.count, (long long)m.table.total, skipped ? ", pos_embed skipped," : "", from, run,
               variant, c.hidden, c.layers, c.heads);
        if (*found) printf("the folder is preset %s\n", found);
        printf("fine-tune: vfm train --config FILE checkpoint.load=%s checkpoint.finetune=true (same model.* keys); "
               "sample: vfm sample --checkpoint %s ...\n", run, run);
    }
    if (m.params) dit_destroy(&m);
    config_free(cfg);
    return s;
}

/* A diffusers folder of Wan 2.1's transformer (diffusers_io.h). */
static vfm_status import_folder(const char *from, const char *run, const ArgFlag *flags, int nflags, const ArgList *pos) {
    DiffusersFolder f;
    vfm_status s = diffusers_folder_open(&f, from);
    if (s == VFM_OK) s = import_source(&f.src, "wan", run, flags, nflags, pos, from);
    diffusers_folder_close(&f);
    return s;
}

/* Opens the file (safetensors by its name, else torch.save), narrows it to --prefix, imports. */
static vfm_status import_file(const char *from, const char *variant, const char *run, const ArgFlag *flags, int nflags,
                              const ArgList *pos) {
    SafetensorsFile *f = NULL;
    TorchStateDict sd;
    memset(&sd, 0, sizeof sd);
    WeightSource src, narrowed;
    if (ends_with(from, ".safetensors")) {
        VFM_TRY(safetensors_open(&f, from));
        src = (WeightSource){safetensors_count(f), from, f, st_name, st_shape, st_read};
    } else {
        VFM_TRY(torch_load_state_dict(from, &sd));
        src = (WeightSource){(int)sd.n, from, &sd, pt_name, pt_shape, pt_read};
    }
    const char *prefix = args_value(flags, nflags, "--prefix", NULL);
    Prefixed px = {0};
    vfm_status s = prefix ? prefixed(&narrowed, &px, &src, prefix) : VFM_OK;
    for (int i = 0; !prefix && s == VFM_OK && strcmp(variant, "adaln-zero") == 0 && i < src.count; i++) {
        const char *name = src.name(src.ctx, i), *tail = strstr(name, ".x_embedder.proj.weight");
        if (tail && tail[strlen(".x_embedder.proj.weight")] == 0) /* a training checkpoint: {"model": .., "ema": ..} */
            s = vfm_fail(VFM_ERR_USAGE, "vfm import: %s nests its state dicts ('%s'): pass --prefix %.*s", from, name,
                         (int)(tail - name), name);
    }
    if (s == VFM_OK) s = import_source(prefix ? &narrowed : &src, variant, run, flags, nflags, pos, NULL);
    free(px.index);
    if (f) safetensors_close(f);
    torch_state_dict_free(&sd);
    return s;
}

int cmd_import(int argc, char **argv) {
    ArgFlag flags[] = {
        {"--from", "FILE|DIR", "the state dict: a .safetensors file, a torch.save file (.pt, .pth, .bin), or a "
         "diffusers folder of Wan 2.1's transformer (config.json and its safetensors)", NULL, 0},
        {"--prefix", "P", "take the tensors named P.* (a checkpoint holding {\"model\": ..., \"ema\": ...}: ema)", NULL, 0},
        {"--variant", "NAME", "the model it holds: adaln-zero (the DiT reference), or a model.variant of vfm's own names "
         "(a folder: wan)", NULL, 0},
        {"--out", "DIR", "the run directory to create (its checkpoint iter_0000000)", NULL, 0},
        {"--preset", "NAME", "a model preset (for what the shapes do not say)", NULL, 0},
        {"--config", "FILE", "a config file (its model.* keys, and the run's other settings)", NULL, 0},
    };
    int nflags = (int)(sizeof flags / sizeof flags[0]), help;
    ArgList pos;
    vfm_status s = args_parse("import", argc, argv, flags, nflags, &pos, &help);
    if (s != VFM_OK) return cli_report(s);
    if (help) {
        args_print_help("import --from F.safetensors|F.pt|DIR --variant adaln-zero --out RUN [--prefix P] [--preset NAME] "
                        "[--config FILE] [a.b=v ...]",
                        "Makes a vfm checkpoint (RUN/iter_0000000) from a state dict. For adaln-zero, a state dict\n"
                        "of the DiT reference (facebookresearch/DiT models.py) loads without renaming: width, depth,\n"
                        "channels, patch, classes, learned sigma and cross-attention come from its shapes, the head\n"
                        "count from a preset of the same size (or model.num_attention_heads=H), and pos_embed is\n"
                        "skipped. The other variants take their model.* keys from --preset/--config/overrides.\n"
                        "A diffusers folder of WanTransformer3DModel (save_pretrained: config.json and\n"
                        "diffusion_pytorch_model*.safetensors, sharded or not) imports as model.variant=wan with\n"
                        "the sizes of its config.json (a field vfm cannot honour is refused by name).\n"
                        "Every tensor must match the model: names and shapes, nothing missing, nothing extra.\n"
                        "torch.save files are read by a whitelist unpickler: a file can never run code.", flags,
                        nflags);
        return 0;
    }
    const char *from = args_value(flags, nflags, "--from", NULL), *variant = args_value(flags, nflags, "--variant", NULL);
    const char *run = args_value(flags, nflags, "--out", NULL);
    int folder = from && diffusers_folder_is(from);
    if (folder && !variant) variant = "wan";
    if (!from || !variant || !run) {
        fprintf(stderr, "vfm import: --from FILE, --variant NAME and --out DIR are required (see vfm import --help)\n");
        return 2;
    }
    char names[160];
    if (folder ? strcmp(variant, "wan") != 0 : !dit_arch_named(variant, names, sizeof names)) {
        fprintf(stderr, "vfm import: --variant '%s': expected %s\n", variant,
                folder ? "wan (a diffusers folder holds WanTransformer3DModel)" : names);
        return 2;
    }
    int found = 0;
    char latest[1200];
    if (path_exists(run) && checkpoint_find_latest(run, latest, sizeof latest, &found) == VFM_OK && found) {
        fprintf(stderr, "vfm import: --out %s already holds checkpoints (%s): choose a new run directory\n", run, latest);
        return 2;
    }
    if (folder) return cli_report(import_folder(from, run, flags, nflags, &pos));
    return cli_report(import_file(from, variant, run, flags, nflags, &pos));
}
