/* Config: a table of good and bad inputs (YAML files and overrides) with the exact message of each
 * bad one and the values of each good one; YAML output that reads back to the same config; the DFM
 * recipe YAML; the registry's own consistency; accessors; and `vfm config`. */
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/commands.h"
#include "core/config.h"
#include "core/config_internal.h"
#include "core/fileutil.h"
#include "core/log.h"
#include "capture.h"
#include "test.h"

/* ---- helpers ---- */

static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    size_t n = 0, cap = 0, got;
    char chunk[4096];
    while ((got = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (n + got + 1 > cap) {
            cap = 2 * (n + got + 1);
            buf = realloc(buf, cap);
        }
        memcpy(buf + n, chunk, got);
        n += got;
    }
    fclose(f);
    if (!buf) buf = calloc(1, 1);
    else buf[n] = 0;
    return buf;
}

static const char *write_temp(const char *name, const char *text) {
    static char path[8][1400];
    static int k;
    k = (k + 1) % 8;
    snprintf(path[k], sizeof path[k], "%s/%s", test_tmpdir(), name);
    FILE *f = fopen(path[k], "wb");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
    return path[k];
}

/* "@" in a pattern stands for path. */
static void expand_path(const char *pattern, const char *path, char *out, size_t size) {
    size_t n = 0;
    for (const char *p = pattern; *p && n + 1 < size; p++) {
        if (*p == '@') n += (size_t)snprintf(out + n, size - n, "%s", path ? path : "");
        else out[n++] = *p;
        if (n >= size) n = size - 1;
    }
    out[n] = 0;
}

/* ---- the table ---- */

#define MISSING_FILE "<missing>"

typedef struct {
    const char *yaml;          /* file contents; NULL: no file; MISSING_FILE: a path that does not exist */
    const char *overrides[4];
    vfm_status code;           /* VFM_OK: must load */
    const char *error;         /* exact vfm_last_error(), "@" = the file path */
    const char *expect[10];    /* "key=value as cfg_value_text writes it"; "?key": cfg_is_set; "!key": not set */
} LoadCase;

static const LoadCase k_cases[] = {
    /* ---- good ---- */
    {"", {0}, VFM_OK, NULL, {"model.hidden_size=384", "optimizer.lr=9e-5", "!model.hidden_size", "!model.preset"}},
    {"# only a comment\n", {0}, VFM_OK, NULL, {"train.train_iters=10000"}},
    {"model:\n  hidden_size: 256\n", {0}, VFM_OK, NULL, {"model.hidden_size=256", "?model.hidden_size", "!model.num_layers"}},
    {"optimizer:\n  lr: 1e-4\n  min_lr: 0.9e-4\n  weight_decay: .5\n  adam_eps: 1E-8\n", {0}, VFM_OK, NULL,
     {"optimizer.lr=0.0001", "optimizer.min_lr=9e-5", "optimizer.weight_decay=0.5", "optimizer.adam_eps=1e-8"}},
    {"optimizer:\n  clip_grad: 2\ndiffusion:\n  p_mean: -1\n", {0}, VFM_OK, NULL,
     {"optimizer.clip_grad=2.0", "diffusion.p_mean=-1.0"}},
    {"model:\n  qk_layernorm: no\n  sequence_parallel: on\nema:\n  enabled: True\ndataset:\n  shuffle: OFF\n", {0},
     VFM_OK, NULL, {"model.qk_layernorm=false", "model.sequence_parallel=true", "ema.enabled=true", "dataset.shuffle=false"}},
    {"checkpoint:\n  save: 'runs/a b'\n  load: \"x: y # z\"\ndataset:\n  split: yes\n  path: 2024\n", {0}, VFM_OK, NULL,
     {"checkpoint.save=runs/a b", "checkpoint.load=\"x: y # z\"", "dataset.split=\"yes\"", "dataset.path=\"2024\""}},
    {"model:\n  vae_cache_folder: null\ndataset:\n  path: ~\ncheckpoint:\n  load:\n", {0}, VFM_OK, NULL,
     {"model.vae_cache_folder=\"\"", "dataset.path=\"\"", "checkpoint.load=\"\"", "?model.vae_cache_folder"}},
    {"dataset:\n  mock_shapes: [4x1x8x8, \"2x1x4x4\"]\n", {0}, VFM_OK, NULL,
     {"dataset.mock_shapes=[\"4x1x8x8\", \"2x1x4x4\"]"}},
    {"dataset:\n  mock_shapes:\n    - 1x1x2x2\n    - 'a,b'\n", {0}, VFM_OK, NULL,
     {"dataset.mock_shapes=[\"1x1x2x2\", \"a,b\"]"}},
    {"dataset:\n  mock_shapes:\n", {0}, VFM_OK, NULL, {"dataset.mock_shapes=[]", "?dataset.mock_shapes"}},
    {NULL, {"dataset.mock_shapes=[1x1x2x2,3x1x4x4]"}, VFM_OK, NULL,
     {"dataset.mock_shapes=[\"1x1x2x2\", \"3x1x4x4\"]"}},
    {"dataset:\n  mock_shapes: [a, b]\n", {"dataset.mock_shapes=[]"}, VFM_OK, NULL, {"dataset.mock_shapes=[]"}},
    {NULL, {"optimizer.lr=1e-4", "ema.enabled=true", "dataset.split=hello", "checkpoint.save=\"quoted # text\""}, VFM_OK,
     NULL, {"optimizer.lr=0.0001", "ema.enabled=true", "dataset.split=hello", "checkpoint.save=\"quoted # text\""}},
    {"model:\n  preset: tiny\n", {0}, VFM_OK, NULL,
     {"model.hidden_size=64", "model.num_layers=2", "model.in_channels=4", "?model.num_layers", "!model.qk_layernorm"}},
    /* precedence: preset → file → override */
    {"model:\n  preset: tiny\n  hidden_size: 96\n  num_attention_heads: 8\n", {"model.hidden_size=128"}, VFM_OK, NULL,
     {"model.hidden_size=128", "model.num_attention_heads=8", "model.num_layers=2"}},
    /* the override picks the preset; the file still beats the preset */
    {"model:\n  preset: dit-s\n  hidden_size: 100\n", {"model.preset=tiny"}, VFM_OK, NULL,
     {"model.preset=tiny", "model.num_layers=2", "model.hidden_size=100", "model.crossattn_emb_size=32"}},
    {"model:\n  preset: tiny\n", {"model.preset="}, VFM_OK, NULL, {"model.preset=\"\"", "model.hidden_size=384"}},
    {"model.hidden_size: 72\ntrain.train_iters: 5\n", {0}, VFM_OK, NULL, {"model.hidden_size=72", "train.train_iters=5"}},
    {"ema:\nmodel:\n  hidden_size: 64\n", {0}, VFM_OK, NULL, {"model.hidden_size=64", "!ema.enabled"}},
    {"comm_overlap:\n  tp_comm_overlap: true\n  bootstrap: [1, 2]\n", {0}, VFM_OK, NULL, {"comm_overlap=null", "?comm_overlap"}},
    {NULL, {"+train.train_iters = 5", "comm_overlap.tp_comm_overlap=false"}, VFM_OK, NULL,
     {"train.train_iters=5", "comm_overlap=\"false\""}},
    {"model:\n  hidden_size: \"64\"\n", {0}, VFM_OK, NULL, {"model.hidden_size=64"}},
    {NULL, {"train.train_iters=5", "train.train_iters=7", "checkpoint.load=null"}, VFM_OK, NULL,
     {"train.train_iters=7", "checkpoint.load=\"\"", "?checkpoint.load"}},

    /* ---- bad ---- */
    {"modle:\n  hidden_size: 1\n", {0}, VFM_ERR_USAGE, "@:2: unknown key 'modle.hidden_size'; did you mean 'model.hidden_size'?", {0}},
    {NULL, {"modle.hidden_size=1"}, VFM_ERR_USAGE,
     "command line: unknown key 'modle.hidden_size'; did you mean 'model.hidden_size'?", {0}},
    {NULL, {"lr=1e-4"}, VFM_ERR_USAGE, "command line: unknown key 'lr'; did you mean 'optimizer.lr'?", {0}},
    {"modle:\n  x: 1\n", {"zzz=1"}, VFM_ERR_USAGE, "@:2: unknown key 'modle.x'; did you mean 'model.preset'?", {0}},
    {"model:\n  hidden_size: abc\n", {0}, VFM_ERR_USAGE,
     "@:2: key 'model.hidden_size': value 'abc': expected an integer in [8, 65536]", {0}},
    {"model:\n  hidden_size: 64.5\n", {0}, VFM_ERR_USAGE,
     "@:2: key 'model.hidden_size': value '64.5': expected an integer in [8, 65536]", {0}},
    {"model:\n  qk_layernorm: maybe\n", {0}, VFM_ERR_USAGE,
     "@:2: key 'model.qk_layernorm': value 'maybe': expected true or false (also yes/no, on/off)", {0}},
    {NULL, {"ema.enabled=1"}, VFM_ERR_USAGE,
     "command line: key 'ema.enabled': value '1': expected true or false (also yes/no, on/off)", {0}},
    {"model:\n  hidden_size: 4\n", {0}, VFM_ERR_USAGE,
     "@:2: key 'model.hidden_size': value '4': out of range; expected an integer in [8, 65536]", {0}},
    {NULL, {"optimizer.adam_beta1=1.0"}, VFM_ERR_USAGE,
     "command line: key 'optimizer.adam_beta1': value '1.0': out of range; expected a number in [0, 1)", {0}},
    {NULL, {"model.layernorm_epsilon=0"}, VFM_ERR_USAGE,
     "command line: key 'model.layernorm_epsilon': value '0': out of range; expected a number in (0, 1]", {0}},
    {NULL, {"scheduler.lr_decay_style=step"}, VFM_ERR_USAGE,
     "command line: key 'scheduler.lr_decay_style': value 'step': expected one of cosine, constant, linear, WSD", {0}},
    {"model:\n  preset: huge\n", {0}, VFM_ERR_USAGE,
     "@:2: key 'model.preset': value 'huge': expected one of \"\", tiny, tiny-demo, dit-s, dit-b, dit-l, dit-xl, dit-7b, "
     "dit-7b-nemo, dit-28b, moviegen-1b, moviegen-5b, moviegen-30b, ecdit-1b, stdit3-xl, stdit-xl, stdit-3b, wan2.1-1.3b, "
     "wan2.1-14b", {0}},
    {"model:\n  preset: tiny\n", {"model.preset=dit-m"}, VFM_ERR_USAGE,
     "command line: key 'model.preset': value 'dit-m': expected one of \"\", tiny, tiny-demo, dit-s, dit-b, dit-l, dit-xl, "
     "dit-7b, dit-7b-nemo, dit-28b, moviegen-1b, moviegen-5b, moviegen-30b, ecdit-1b, stdit3-xl, stdit-xl, stdit-3b, wan2.1-1.3b, "
     "wan2.1-14b", {0}},
    {"model:\n  hidden_size: 64\n  hidden_size: 128\n", {0}, VFM_ERR_USAGE,
     "@:3: duplicate key 'model.hidden_size' (first on line 2)", {0}},
    {"model:\n  hidden_size: 64\ntrain:\n  train_iters: 1\nmodel:\n  num_layers: 2\n", {0}, VFM_ERR_USAGE,
     "@:5: duplicate key 'model' (first on line 1)", {0}},
    {"model:\n  hidden_size: 64\nmodel.hidden_size: 65\n", {0}, VFM_ERR_USAGE,
     "@:3: duplicate key 'model.hidden_size' (first on line 2)", {0}},
    {"model:\n  hidden_size: 64\n num_layers: 2\n", {0}, VFM_ERR_USAGE,
     "@:3: YAML syntax error: did not find expected key (while parsing a block mapping at line 1)", {0}},
    {"model:\n\thidden_size: 64\n", {0}, VFM_ERR_USAGE,
     "@:2: YAML syntax error: found character that cannot start any token (while scanning for the next token at line 2)", {0}},
    {"dataset:\n  mock_shapes: [a, b\n", {0}, VFM_ERR_USAGE,
     "@:3: YAML syntax error: did not find expected ',' or ']' (while parsing a flow sequence at line 2)", {0}},
    {"a: 1\n---\nb: 2\n", {0}, VFM_ERR_USAGE, "@:2: more than one YAML document; vfm reads one", {0}},
    {MISSING_FILE, {0}, VFM_ERR_USAGE, "cannot read config file '@': No such file or directory", {0}},
    {"model:\n  hidden_size: null\n", {0}, VFM_ERR_USAGE,
     "@:2: key 'model.hidden_size': value 'null': expected an integer in [8, 65536]", {0}},
    {"model:\n  hidden_size: [1, 2]\n", {0}, VFM_ERR_USAGE,
     "@:2: key 'model.hidden_size': value '[1, 2]': expected an integer in [8, 65536]", {0}},
    {"model:\n  hidden_size: {a: 1}\n", {0}, VFM_ERR_USAGE,
     "@:2: key 'model.hidden_size': value '{...}': expected an integer in [8, 65536]", {0}},
    {NULL, {"dataset.mock_shapes=4x1x8x8"}, VFM_ERR_USAGE,
     "command line: key 'dataset.mock_shapes': value '4x1x8x8': expected a list of strings, like [a, b]", {0}},
    {NULL, {"model.hidden_size"}, VFM_ERR_USAGE,
     "command line: expected key=value (like model.hidden_size=256), got 'model.hidden_size'", {0}},
    {NULL, {"dataset.mock_shapes=[a, b"}, VFM_ERR_USAGE,
     "command line: key 'dataset.mock_shapes': value '[a, b': YAML syntax error: did not find expected ',' or ']'", {0}},
    {"model: 5\n", {0}, VFM_ERR_USAGE, "@:1: key 'model': value '5': expected a mapping of model.* keys", {0}},
    {"- a\n- b\n", {0}, VFM_ERR_USAGE, "@:1: the top level must be a mapping (key: value lines)", {0}},
    {NULL, {"rng.seed=99999999999999999999"}, VFM_ERR_USAGE,
     "command line: key 'rng.seed': value '99999999999999999999': expected an integer >= 0", {0}},
    {NULL, {"rng.seed=-1"}, VFM_ERR_USAGE, "command line: key 'rng.seed': value '-1': out of range; expected an integer >= 0", {0}},
    {NULL, {"optimizer.lr=.inf"}, VFM_ERR_USAGE, "command line: key 'optimizer.lr': value '.inf': expected a number in [0, 10]", {0}},
    {NULL, {"optimizer.lr=fast"}, VFM_ERR_USAGE, "command line: key 'optimizer.lr': value 'fast': expected a number in [0, 10]", {0}},
    {NULL, {"optimizer.lr=1e"}, VFM_ERR_USAGE, "command line: key 'optimizer.lr': value '1e': expected a number in [0, 10]", {0}},
    {NULL, {"checkpoint.save=\xff"}, VFM_ERR_USAGE,
     "command line: key 'checkpoint.save': value '\xff': not valid UTF-8; expected a string", {0}},
    {"model:\n  hidden_size: &x 64\n  num_layers: *x\n", {0}, VFM_ERR_USAGE,
     "@:3: key 'model.num_layers': YAML aliases (*name) are not supported", {0}},
};

static void check_expectations(const Config *cfg, const char *const *expect, int case_index) {
    for (int e = 0; e < 10 && expect[e]; e++) {
        const char *x = expect[e];
        if (x[0] == '?' || x[0] == '!') {
            int want = x[0] == '?';
            CHECK_MSG(cfg_is_set(cfg, x + 1) == want, "case %d: cfg_is_set(%s) != %d", case_index, x + 1, want);
            continue;
        }
        const char *eq = strchr(x, '=');
        char key[128], got[512];
        snprintf(key, sizeof key, "%.*s", (int)(eq - x), x);
        cfg_value_text(cfg, key, got, sizeof got);
        CHECK_MSG(strcmp(got, eq + 1) == 0, "case %d: %s = %s, expected %s", case_index, key, got, eq + 1);
    }
}

TEST(config_table_of_good_and_bad_inputs) {
    int ncases = (int)(sizeof k_cases / sizeof k_cases[0]), nbad = 0;
    log_set_level(LOG_ERROR); /* the "not used" warnings have their own test */
    for (int c = 0; c < ncases; c++) {
        const LoadCase *t = &k_cases[c];
        char name[32];
        snprintf(name, sizeof name, "case%d.yaml", c);
        const char *path = NULL;
        char missing[1400];
        if (t->yaml && strcmp(t->yaml, MISSING_FILE) == 0) {
            snprintf(missing, sizeof missing, "%s/no_such_file.yaml", test_tmpdir());
            path = missing;
        } else if (t->yaml) {
            path = write_temp(name, t->yaml);
        }
        int n = 0;
        while (n < 4 && t->overrides[n]) n++;
        Config *cfg = NULL;
        vfm_clear_error();
        vfm_status s = config_load(&cfg, path, t->overrides, n);
        if (t->code == VFM_OK) {
            CHECK_MSG(s == VFM_OK, "case %d: failed: %s", c, vfm_last_error());
            if (s == VFM_OK) check_expectations(cfg, t->expect, c);
        } else {
            nbad++;
            char want[1600];
            expand_path(t->error, path, want, sizeof want);
            CHECK_MSG(s == t->code, "case %d: status %s, expected %s (%s)", c, vfm_status_name(s),
                      vfm_status_name(t->code), vfm_last_error());
            CHECK_MSG(strcmp(vfm_last_error(), want) == 0, "case %d:\n      got      %s\n      expected %s", c,
                      vfm_last_error(), want);
            CHECK_MSG(cfg == NULL, "case %d: a failed load must leave *out NULL", c);
        }
        config_free(cfg);
    }
    CHECK(ncases >= 30 && nbad >= 15);
    log_set_level(LOG_INFO);
}

/* ---- warnings ---- */

TEST(config_unused_key_warns_once_per_key) {
    const char *path = write_temp("w.yaml", "logger:\n  wandb_project: DiT\nmodel:\n  qkv_format: thd\n  hidden_size: 64\n");
    const char *ov[] = {"logger.wandb_project=other", "model.qkv_format=sbhd"};
    Capture cap;
    Config *cfg = NULL;
    log_set_level(LOG_INFO);
    capture_begin(&cap, 2);
    vfm_status s = config_load(&cfg, path, ov, 2);
    char *err = capture_end(&cap);
    REQUIRE_OK(s);
    CHECK_MSG(strcmp(err, "warning: config: 'logger.wandb_project' is not used by vfm (ignored)\n"
                          "warning: config: 'model.qkv_format' is not used by vfm (ignored)\n") == 0,
              "stderr was:\n%s", err);
    CHECK(strcmp(cfg_str(cfg, "logger.wandb_project"), "other") == 0);
    free(err);
    /* config_set on the same Config does not warn again; on a fresh key it does, once */
    capture_begin(&cap, 2);
    CHECK_OK(config_set(cfg, "logger.wandb_project", "third"));
    CHECK_OK(config_set(cfg, "logger.wandb_entity", "me"));
    CHECK_OK(config_set(cfg, "logger.wandb_entity", "you"));
    err = capture_end(&cap);
    CHECK_MSG(strcmp(err, "warning: config: 'logger.wandb_entity' is not used by vfm (ignored)\n") == 0, "stderr:\n%s", err);
    free(err);
    config_free(cfg);
}

TEST(config_dfm_recipe_yaml_loads_with_warnings_only_for_unused_keys) {
    Capture cap;
    Config *cfg = NULL;
    log_set_level(LOG_INFO);
    capture_begin(&cap, 2);
    vfm_status s = config_load(&cfg, test_fixture("dfm/dit_pretrain.yaml"), NULL, 0);
    char *err = capture_end(&cap);
    REQUIRE_OK(s);
    CHECK_MSG(strcmp(err, "warning: config: 'model.qkv_format' is not used by vfm (ignored)\n"
                          "warning: config: 'model.vae_cache_folder' is not used by vfm (ignored)\n"
                          "warning: config: 'logger.wandb_project' is not used by vfm (ignored)\n"
                          "warning: config: 'logger.wandb_exp_name' is not used by vfm (ignored)\n") == 0,
              "stderr was:\n%s", err);
    free(err);
    CHECK(cfg_int(cfg, "model.tensor_model_parallel_size") == 1);
    CHECK(cfg_bool(cfg, "model.sequence_parallel") == 0 && cfg_is_set(cfg, "model.sequence_parallel"));
    CHECK(cfg_int(cfg, "model.context_parallel_size") == 1);
    CHECK(strcmp(cfg_str(cfg, "model.qkv_format"), "thd") == 0);
    CHECK(cfg_int(cfg, "model.num_attention_heads") == 16);
    CHECK(strcmp(cfg_str(cfg, "model.vae_cache_folder"), "") == 0 && cfg_is_set(cfg, "model.vae_cache_folder"));
    CHECK(strcmp(cfg_str(cfg, "dataset.path"), "DATASET_FOLDER") == 0);
    CHECK(cfg_int(cfg, "dataset.task_encoder_seq_length") == 15360);
    CHECK(cfg_int(cfg, "dataset.packing_buffer_size") == 100);
    CHECK(cfg_int(cfg, "dataset.num_workers") == 20);
    CHECK(strcmp(cfg_str(cfg, "checkpoint.save"), "dfm_experiment") == 0);
    CHECK(strcmp(cfg_str(cfg, "checkpoint.load"), "dfm_experiment") == 0);
    CHECK(cfg_bool(cfg, "checkpoint.load_optim") == 1 && cfg_is_set(cfg, "checkpoint.load_optim"));
    CHECK(cfg_int(cfg, "checkpoint.save_interval") == 1000);
    CHECK(cfg_int(cfg, "train.eval_interval") == 1000);
    CHECK(cfg_int(cfg, "train.train_iters") == 10000);
    CHECK(cfg_int(cfg, "train.eval_iters") == 32);
    CHECK(cfg_int(cfg, "train.global_batch_size") == 8);
    CHECK(cfg_int(cfg, "train.micro_batch_size") == 1);
    CHECK(cfg_int(cfg, "logger.log_interval") == 10);
    CHECK(strcmp(cfg_str(cfg, "logger.wandb_project"), "DiT") == 0);
    CHECK(strcmp(cfg_str(cfg, "logger.wandb_exp_name"), "dfm_experiment") == 0);
    /* untouched keys keep the registry defaults */
    CHECK(cfg_int(cfg, "model.hidden_size") == 384 && !cfg_is_set(cfg, "model.hidden_size"));
    CHECK(cfg_float(cfg, "optimizer.lr") == 9e-5);
    config_free(cfg);
}

/* ---- YAML output reads back ---- */

/* Writes cfg, reads it back (stderr captured into *warnings), checks every key is identical. */
static void check_round_trip(const Config *cfg, char **warnings) {
    char *text = NULL;
    REQUIRE_OK(config_to_yaml_string(cfg, &text));
    Capture cap;
    Config *back = NULL;
    capture_begin(&cap, 2);
    vfm_status s = config_from_yaml_string(&back, text, "emitted");
    *warnings = capture_end(&cap);
    if (s != VFM_OK) {
        test_fail(__FILE__, __LINE__, "emitted YAML does not load: %s\n%s", vfm_last_error(), text);
        free(text);
        return;
    }
    char diff[128] = "";
    CHECK_MSG(config_equal(cfg, back, diff, sizeof diff), "key %s differs after the round trip", diff);
    for (int i = 0; i < config_registry_count(); i++) {
        CfgKeyInfo info;
        config_registry_key(i, &info);
        char a[1024], b[1024];
        cfg_value_text(cfg, info.name, a, sizeof a);
        cfg_value_text(back, info.name, b, sizeof b);
        CHECK_MSG(strcmp(a, b) == 0, "%s: %s became %s", info.name, a, b);
    }
    /* written through a FILE* as well: the same text */
    const char *path = write_temp("emitted.yaml", "");
    FILE *f = fopen(path, "wb");
    REQUIRE(f);
    CHECK_OK(config_write_yaml(cfg, f));
    fclose(f);
    char *file_text = read_text(path);
    CHECK(file_text && strcmp(file_text, text) == 0);
    free(file_text);
    config_free(back);
    free(text);
}

TEST(config_yaml_round_trip_defaults) {
    Config *cfg;
    REQUIRE_OK(config_load(&cfg, NULL, NULL, 0));
    char *warnings = NULL;
    check_round_trip(cfg, &warnings);
    CHECK_MSG(warnings && warnings[0] == 0, "reloading the defaults warned:\n%s", warnings ? warnings : "");
    free(warnings);
    config_free(cfg);
}

TEST(config_yaml_round_trip_preset) {
    const char *ov[] = {"model.preset=dit-xl", "train.train_iters=123", "logger.wandb_project=proj"};
    Config *cfg;
    log_set_level(LOG_ERROR);
    REQUIRE_OK(config_load(&cfg, NULL, ov, 3));
    log_set_level(LOG_INFO);
    CHECK(cfg_int(cfg, "model.hidden_size") == 1152 && cfg_int(cfg, "model.num_layers") == 28);
    char *warnings = NULL;
    check_round_trip(cfg, &warnings);
    /* the only warning on reload is for the unused key the user set */
    CHECK_MSG(warnings && strcmp(warnings, "warning: config: 'logger.wandb_project' is not used by vfm (ignored)\n") == 0,
              "reload warned:\n%s", warnings ? warnings : "");
    free(warnings);
    config_free(cfg);
}

TEST(config_yaml_round_trip_lists_odd_strings_and_floats) {
    const char *yaml =
        "checkpoint:\n"
        "  save: \"a: b # c\"\n"
        "  load: \"\\\"quoted\\\" 'single' \\\\ back\"\n"
        "dataset:\n"
        "  path: \"line1\\nline2\\ttab \\u00e9 \\u65e5\\u672c \\U0001F600 \\x01 end\"\n"
        "  split: \" leading and trailing \"\n"
        "  mock_shapes: [\"x, y\", \"[z]\", \"\", \"null\", \"true\", \"123\", \"1e5\", \"-dash\", \"#hash\", \"a:b\", "
        "\"'\", \"0x1F\", \"~\", \"y\"]\n"
        "  default_fps: 29.97\n"
        "logger:\n"
        "  tensorboard_dir: \"null\"\n"
        "  wandb_entity: \"~\"\n"
        "diffusion:\n"
        "  p_mean: 0.30000000000000004\n"
        "  sigma_min: 5e-324\n"
        "ddp:\n"
        "  bucket_size_mb: 123456.78901234567\n"
        "sampler:\n"
        "  sigma_max: 999999.9999999999\n"
        "rng:\n"
        "  seed: 9223372036854775807\n"
        "comm_overlap: something\n";
    log_set_level(LOG_ERROR);
    Config *cfg;
    REQUIRE_OK(config_from_yaml_string(&cfg, yaml, "odd"));
    log_set_level(LOG_INFO);
    CHECK(strcmp(cfg_str(cfg, "checkpoint.save"), "a: b # c") == 0);
    CHECK(strcmp(cfg_str(cfg, "checkpoint.load"), "\"quoted\" 'single' \\ back") == 0);
    CHECK(strcmp(cfg_str(cfg, "dataset.path"), "line1\nline2\ttab \xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80 \x01 end") == 0);
    CHECK(strcmp(cfg_str(cfg, "dataset.split"), " leading and trailing ") == 0);
    REQUIRE(cfg_list_len(cfg, "dataset.mock_shapes") == 14);
    CHECK(strcmp(cfg_list_str(cfg, "dataset.mock_shapes", 0), "x, y") == 0);
    CHECK(strcmp(cfg_list_str(cfg, "dataset.mock_shapes", 2), "") == 0);
    CHECK(strcmp(cfg_list_str(cfg, "dataset.mock_shapes", 3), "null") == 0);
    CHECK(cfg_float(cfg, "diffusion.p_mean") == 0.1 + 0.2);
    CHECK(cfg_float(cfg, "diffusion.sigma_min") == 5e-324);
    CHECK(cfg_int(cfg, "rng.seed") == INT64_MAX);
    char *warnings = NULL;
    check_round_trip(cfg, &warnings);
    free(warnings);
    config_free(cfg);
}

static const CfgKeyDef k_float_list_def = {.name = "test.floats", .type = CFG_FLOAT_LIST, .def = "[]", .help = "t"};
static const CfgKeyDef k_int_list_def = {.name = "test.ints", .type = CFG_INT_LIST, .def = "[]", .help = "t"};
static const CfgKeyDef k_float_def = {.name = "test.float", .type = CFG_FLOAT, .def = "0", .help = "t"};

/* Formats, re-reads and compares; returns the text (malloc'd). */
static char *format_and_reread(const CfgKeyDef *def, const CfgValue *v, CfgValue *back) {
    char *text = cfg_value_format(def, v);
    if (!text || cfg_value_from_text(def, text, "test", back) != VFM_OK) {
        test_fail(__FILE__, __LINE__, "%s: '%s' does not read back: %s", def->name, text ? text : "(null)", vfm_last_error());
        memset(back, 0, sizeof *back);
    }
    return text;
}

TEST(config_int_and_float_lists_read_format_and_read_back) {
    CfgValue v, back;
    REQUIRE_OK(cfg_value_from_text(&k_int_list_def, "[1, -2, 9223372036854775807]", "test", &v));
    REQUIRE(v.n == 3);
    CHECK(v.ints[0] == 1 && v.ints[1] == -2 && v.ints[2] == INT64_MAX);
    char *text = format_and_reread(&k_int_list_def, &v, &back);
    CHECK(text && strcmp(text, "[1, -2, 9223372036854775807]") == 0);
    CHECK(back.n == 3 && memcmp(back.ints, v.ints, sizeof(int64_t) * 3) == 0);
    free(text);
    cfg_value_clear(&v);
    cfg_value_clear(&back);

    REQUIRE_OK(cfg_value_from_text(&k_float_list_def, "[0.1, 1e-4, .5, 3, -0.0]", "test", &v));
    REQUIRE(v.n == 5);
    text = format_and_reread(&k_float_list_def, &v, &back);
    CHECK_MSG(text && strcmp(text, "[0.1, 0.0001, 0.5, 3.0, -0.0]") == 0, "got %s", text);
    CHECK(back.n == 5 && memcmp(back.floats, v.floats, sizeof(double) * 5) == 0);
    free(text);
    cfg_value_clear(&v);
    cfg_value_clear(&back);

    /* YAML block style through the file reader is covered by the string list; null is the empty list */
    REQUIRE_OK(cfg_value_from_text(&k_int_list_def, "null", "test", &v));
    CHECK(v.n == 0);
    cfg_value_clear(&v);
    CHECK(cfg_value_from_text(&k_int_list_def, "[1, x]", "command line", &v) == VFM_ERR_USAGE);
    CHECK_MSG(strcmp(vfm_last_error(), "command line: key 'test.ints': value '[1, x]': expected a list of integers, like "
                                       "[1, 2]") == 0, "%s", vfm_last_error());
    CHECK(cfg_value_from_text(&k_float_list_def, "[1, [2]]", "command line", &v) == VFM_ERR_USAGE);
    CHECK_MSG(strcmp(vfm_last_error(), "command line: key 'test.floats': a list may only hold plain values (no nested "
                                       "lists, mappings or aliases)") == 0, "%s", vfm_last_error());
}

TEST(config_floats_print_shortest_and_read_back_bit_identically) {
    static const struct {
        double v;
        const char *text;
    } cases[] = {
        {80, "80.0"}, {1e-5, "1e-5"}, {9e-5, "9e-5"}, {0.1, "0.1"}, {1e17, "1e17"}, {1e16, "10000000000000000.0"},
        {123456.789, "123456.789"}, {-0.0, "-0.0"}, {5e-324, "5e-324"}, {0.30000000000000004, "0.30000000000000004"},
        {1.7976931348623157e308, "1.7976931348623157e308"}, {-2.5e-8, "-2.5e-8"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        CfgValue v = {.f = cases[i].v}, back;
        char *text = format_and_reread(&k_float_def, &v, &back);
        CHECK_MSG(text && strcmp(text, cases[i].text) == 0, "%.17g printed as %s, expected %s", cases[i].v, text,
                  cases[i].text);
        CHECK_MSG(memcmp(&back.f, &v.f, sizeof(double)) == 0, "%s read back as %.17g", text, back.f);
        free(text);
    }
    /* random finite bit patterns */
    uint64_t state = 0x9E3779B97F4A7C15ull;
    int bad = 0;
    for (int i = 0; i < 20000; i++) {
        state ^= state << 13, state ^= state >> 7, state ^= state << 17;
        double d;
        memcpy(&d, &state, sizeof d);
        if (!isfinite(d)) continue;
        CfgValue v = {.f = d}, back;
        char *text = cfg_value_format(&k_float_def, &v);
        if (!text || cfg_value_from_text(&k_float_def, text, "test", &back) != VFM_OK ||
            memcmp(&back.f, &d, sizeof d) != 0) {
            if (bad++ < 3) test_fail(__FILE__, __LINE__, "%.17g printed as %s does not read back", d, text ? text : "");
        }
        free(text);
    }
    CHECK(bad == 0);
}

/* ---- registry ---- */

TEST(config_registry_is_consistent) {
    int n = config_registry_count();
    CHECK(n > 100);
    Config *cfg;
    REQUIRE_OK(config_load(&cfg, NULL, NULL, 0)); /* every default reads and lies in its own range */
    for (int i = 0; i < n; i++) {
        CfgKeyInfo info;
        config_registry_key(i, &info);
        CHECK_MSG(!cfg_is_set(cfg, info.name), "%s set with no input", info.name);
        CHECK_MSG(info.help && info.help[0] && info.allowed[0], "%s: no help or allowed text", info.name);
        int says_unused = strstr(info.help, "(not used by vfm)") != NULL;
        CHECK_MSG(says_unused == info.unused, "%s: help and unused flag disagree", info.name);
        CHECK_MSG(config_registry_find(info.name) == i, "%s is registered twice", info.name);
        /* no key is also a group, and each group's keys are contiguous (the YAML writer needs it) */
        CHECK_MSG(!cfg_is_group(info.name), "%s is both a key and a group", info.name);
        for (const char *dot = strchr(info.name, '.'); dot; dot = strchr(dot + 1, '.')) {
            size_t len = (size_t)(dot - info.name) + 1;
            int first = -1, last = -1, count = 0;
            for (int j = 0; j < n; j++)
                if (strncmp(cfg_key_defs[j].name, info.name, len) == 0) {
                    if (first < 0) first = j;
                    last = j;
                    count++;
                }
            CHECK_MSG(last - first + 1 == count, "group %.*s is split in the registry", (int)len - 1, info.name);
        }
    }
    /* model.preset's choices are exactly the presets, plus "" */
    const CfgKeyDef *preset = &cfg_key_defs[config_registry_find("model.preset")];
    const char *const *names = config_preset_names();
    int np = 0;
    while (names[np]) np++;
    int nc = 0;
    while (preset->choices[nc]) nc++;
    CHECK(nc == np + 1 && strcmp(preset->choices[0], "") == 0);
    for (int i = 0; i < np && i + 1 < nc; i++) CHECK(strcmp(preset->choices[i + 1], names[i]) == 0);
    config_free(cfg);
}

TEST(config_presets_load_with_their_sizes) {
    static const struct {
        const char *name;
        int64_t hidden, layers, heads;
    } sizes[] = {{"tiny", 64, 2, 4},      {"tiny-demo", 128, 4, 4}, {"dit-s", 384, 12, 6},   {"dit-b", 768, 12, 12},
                 {"dit-l", 1024, 24, 16}, {"dit-xl", 1152, 28, 16}, {"dit-7b", 4096, 28, 32},
                 {"dit-7b-nemo", 3072, 32, 24}, {"dit-28b", 6144, 48, 48}};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        char ov[64];
        snprintf(ov, sizeof ov, "model.preset=%s", sizes[i].name);
        const char *ovs[] = {ov};
        Config *cfg;
        REQUIRE_OK(config_load(&cfg, NULL, ovs, 1));
        CHECK_MSG(cfg_int(cfg, "model.hidden_size") == sizes[i].hidden && cfg_int(cfg, "model.num_layers") == sizes[i].layers &&
                      cfg_int(cfg, "model.num_attention_heads") == sizes[i].heads,
                  "preset %s", sizes[i].name);
        CHECK(sizes[i].hidden % sizes[i].heads == 0);
        CHECK(cfg_is_set(cfg, "model.hidden_size") && cfg_is_set(cfg, "model.num_layers"));
        config_free(cfg);
    }
    CHECK(cfg_preset_settings("nope") == NULL);
}

TEST(config_suggestions_pick_the_nearest_key) {
    CHECK(strcmp(cfg_suggest_key("modle.hidden_size"), "model.hidden_size") == 0);
    CHECK(strcmp(cfg_suggest_key("model.hiden_size"), "model.hidden_size") == 0);
    CHECK(strcmp(cfg_suggest_key("train.lr"), "optimizer.lr") == 0);
    CHECK(strcmp(cfg_suggest_key("train_iters"), "train.train_iters") == 0);
    CHECK(strcmp(cfg_suggest_key("dataset.seq_len"), "dataset.seq_length") == 0);
}

/* ---- accessors, set, copy ---- */

TEST(config_set_copy_and_equal) {
    Config *cfg, *copy;
    REQUIRE_OK(config_load(&cfg, NULL, NULL, 0));
    CHECK(!cfg_is_set(cfg, "model.hidden_size"));
    CHECK_OK(config_set(cfg, "model.hidden_size", "128"));
    CHECK(cfg_int(cfg, "model.hidden_size") == 128 && cfg_is_set(cfg, "model.hidden_size"));
    CHECK(config_set(cfg, "model.hidden_size", "x") == VFM_ERR_USAGE);
    CHECK_MSG(strcmp(vfm_last_error(), "key 'model.hidden_size': value 'x': expected an integer in [8, 65536]") == 0, "%s",
              vfm_last_error());
    CHECK(cfg_int(cfg, "model.hidden_size") == 128); /* a failed set changes nothing */
    CHECK(config_set(cfg, "modle.hidden_size", "1") == VFM_ERR_USAGE);
    CHECK_MSG(strcmp(vfm_last_error(), "unknown key 'modle.hidden_size'; did you mean 'model.hidden_size'?") == 0, "%s",
              vfm_last_error());
    CHECK_OK(config_set(cfg, "dataset.mock_shapes", "[4x1x8x8, 4x2x8x8]"));
    REQUIRE(cfg_list_len(cfg, "dataset.mock_shapes") == 2);
    CHECK(strcmp(cfg_list_str(cfg, "dataset.mock_shapes", 1), "4x2x8x8") == 0);
    CHECK_OK(config_set(cfg, "optimizer.lr", "0.9e-4"));
    CHECK(cfg_float(cfg, "optimizer.lr") == 9e-5);

    REQUIRE_OK(config_copy(&copy, cfg));
    char diff[128] = "";
    CHECK(config_equal(cfg, copy, diff, sizeof diff));
    CHECK(cfg_is_set(copy, "model.hidden_size") && !cfg_is_set(copy, "model.num_layers"));
    CHECK_OK(config_set(copy, "dataset.mock_shapes", "[a]"));
    CHECK_OK(config_set(copy, "model.num_layers", "3"));
    CHECK(cfg_list_len(cfg, "dataset.mock_shapes") == 2 && cfg_int(cfg, "model.num_layers") == 12);
    CHECK(!config_equal(cfg, copy, diff, sizeof diff));
    CHECK_MSG(strcmp(diff, "model.num_layers") == 0, "first difference %s", diff);
    config_free(copy);
    config_free(cfg);

    /* in-memory YAML names its source in messages */
    CHECK(config_from_yaml_string(&cfg, "model:\n  hidden_size: x\n", "checkpoint meta") == VFM_ERR_USAGE);
    CHECK_MSG(strcmp(vfm_last_error(), "checkpoint meta:2: key 'model.hidden_size': value 'x': expected an integer in [8, "
                                       "65536]") == 0, "%s", vfm_last_error());
}

/* Runs fn in a child with stderr captured; the child must die of SIGABRT. Returns its stderr. */
static char *expect_abort(void (*fn)(const Config *), const Config *cfg) {
    char path[1400];
    snprintf(path, sizeof path, "%s/abort.txt", test_tmpdir());
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        struct rlimit no_core = {0, 0};
        setrlimit(RLIMIT_CORE, &no_core);
        int f = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(f, 2);
        close(f);
        fn(cfg);
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK_MSG(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT, "child did not abort (status %d)", status);
    return read_text(path);
}

static void ask_unknown_key(const Config *cfg) { (void)cfg_int(cfg, "model.hiden_size"); }
static void ask_wrong_type(const Config *cfg) { (void)cfg_float(cfg, "model.hidden_size"); }
static void ask_past_the_end(const Config *cfg) { (void)cfg_list_str(cfg, "dataset.mock_shapes", 0); }

TEST(config_accessor_misuse_aborts_naming_the_key) {
    Config *cfg;
    REQUIRE_OK(config_load(&cfg, NULL, NULL, 0));
    char *err = expect_abort(ask_unknown_key, cfg);
    CHECK_MSG(err && strcmp(err, "error: config: cfg_int(\"model.hiden_size\"): no such key in the registry\n") == 0, "%s", err);
    free(err);
    err = expect_abort(ask_wrong_type, cfg);
    CHECK_MSG(err && strcmp(err, "error: config: cfg_float(\"model.hidden_size\"): the key's type is int\n") == 0, "%s", err);
    free(err);
    err = expect_abort(ask_past_the_end, cfg);
    CHECK_MSG(err && strcmp(err, "error: config: cfg_list_str(\"dataset.mock_shapes\", 0): index out of range (the list "
                                 "has 0 items)\n") == 0, "%s", err);
    free(err);
    config_free(cfg);
}

/* ---- vfm config ---- */

TEST(config_cli_show_merges_file_and_overrides) {
    char example[1400];
    snprintf(example, sizeof example, "%s", test_fixture("../../configs/tiny-mock.yaml"));
    const char *args[] = {"config", "show", "--config", example, "model.hidden_size=256"};
    char *out, *err;
    int rc = run_vfm(args, 5, &out, &err);
    CHECK_MSG(rc == 0, "rc %d, stderr: %s", rc, err);
    CHECK_MSG(err[0] == 0, "stderr: %s", err);
    CHECK(strstr(out, "\nmodel:\n  variant: dfm\n  preset: tiny\n  hidden_size: 256\n  num_layers: 2\n") != NULL);
    CHECK(strstr(out, "  mock_shapes: [\"4x1x16x16\", \"4x2x8x8\", \"4x1x8x16\"]\n") != NULL);
    CHECK(strstr(out, "  lr: 0.002\n") != NULL && strstr(out, "  save: runs/tiny-mock\n") != NULL);
    /* what show prints is the config itself */
    Config *shown, *loaded;
    const char *ov[] = {"model.hidden_size=256"};
    REQUIRE_OK(config_from_yaml_string(&shown, out, "show output"));
    REQUIRE_OK(config_load(&loaded, example, ov, 1));
    char diff[128] = "";
    CHECK_MSG(config_equal(shown, loaded, diff, sizeof diff), "differs at %s", diff);
    CHECK(cfg_int(loaded, "train.train_iters") == 300 && cfg_int(loaded, "dataset.mock_samples") == 8 &&
          cfg_int(loaded, "dataset.task_encoder_seq_length") == 512 && cfg_int(loaded, "checkpoint.save_interval") == 100);
    config_free(shown);
    config_free(loaded);
    free(out);
    free(err);
}

TEST(config_cli_errors_exit_2_with_one_line) {
    static const struct {
        const char *args[4];
        int n, rc;
        const char *err;
    } cases[] = {
        {{"config", "show", "modle.hidden_size=1"}, 3, 2,
         "vfm: command line: unknown key 'modle.hidden_size'; did you mean 'model.hidden_size'?\n"},
        {{"config", "show", "--bogus"}, 3, 2, "vfm config show: unknown option '--bogus' (see vfm config show --help)\n"},
        {{"config"}, 1, 2, "vfm config: expected a subcommand: show or keys (see vfm config --help)\n"},
        {{"config", "list"}, 2, 2, "vfm config: unknown subcommand 'list' (expected show or keys; see vfm config --help)\n"},
        {{"config", "keys", "extra"}, 3, 2, "vfm config keys: unexpected argument 'extra'\n"},
        {{"config", "show", "--config", "/nonexistent/x.yaml"}, 4, 2,
         "vfm: cannot read config file '/nonexistent/x.yaml': No such file or directory\n"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *out, *err;
        int rc = run_vfm(cases[i].args, cases[i].n, &out, &err);
        CHECK_MSG(rc == cases[i].rc, "case %zu: rc %d", i, rc);
        CHECK_MSG(strcmp(err, cases[i].err) == 0, "case %zu: stderr\n      got      %s      expected %s", i, err, cases[i].err);
        CHECK_MSG(out[0] == 0, "case %zu: stdout not empty", i);
        free(out);
        free(err);
    }
}

TEST(config_cli_keys_and_help) {
    const char *keys[] = {"config", "keys"};
    char *out, *err;
    CHECK(run_vfm(keys, 2, &out, &err) == 0);
    int lines = 0;
    for (const char *p = out; *p; p++) lines += *p == '\n';
    CHECK(lines == config_registry_count() + 1);
    const char *row = strstr(out, "\nmodel.hidden_size ");
    REQUIRE(row);
    const char *end = strchr(row + 1, '\n');
    char line[512];
    snprintf(line, sizeof line, "%.*s", (int)(end - row - 1), row + 1);
    CHECK_MSG(strstr(line, " int ") && strstr(line, " 384 ") && strstr(line, " an integer in [8, 65536] ") &&
                  strstr(line, "transformer width D"),
              "row: %s", line);
    free(out);
    free(err);

    const char *md[] = {"config", "keys", "--markdown"};
    CHECK(run_vfm(md, 3, &out, &err) == 0);
    const char *head = "| key | type | default | allowed | on resume | meaning |\n|---|---|---|---|---|---|\n";
    CHECK(strncmp(out, head, strlen(head)) == 0);
    CHECK(strstr(out, "| `model.hidden_size` | int | `384` | an integer in [8, 65536] | refuse | transformer width D |\n"));
    CHECK(strstr(out, "| `logger.wandb_project` \\* | string | `\"\"` | a string | free |") != NULL);
    free(out);
    free(err);
    /* docs/config.md holds that table as printed (the help texts, defaults and resume classes agree) */
    CHECK(run_vfm(md, 3, &out, &err) == 0);
    char *doc;
    size_t doc_len;
    REQUIRE_OK(read_file_all(test_fixture("../../docs/config.md"), &doc, &doc_len));
    CHECK_MSG(strstr(doc, out) != NULL, "docs/config.md's key table differs from `vfm config keys --markdown`: "
              "paste its output there");
    free(doc);
    free(out);
    free(err);

    const char *help[] = {"config", "--help"};
    CHECK(run_vfm(help, 2, &out, &err) == 0);
    CHECK(strstr(out, "usage: vfm config show [--config FILE] [a.b.c=value ...]") != NULL);
    free(out);
    free(err);
    const char *show_help[] = {"config", "show", "--help"};
    CHECK(run_vfm(show_help, 3, &out, &err) == 0);
    CHECK(strstr(out, "--config FILE") != NULL);
    free(out);
    free(err);
}
