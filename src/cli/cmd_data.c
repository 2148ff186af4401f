/* vfm data: `index` (re)builds a dataset's length index, `inspect` says what a dataset holds and
 * how it packs under a config, `bench` measures the WebDataset loader. See docs/data-loading.md. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "args.h"
#include "commands.h"
#include "progress.h"
#include "core/config.h"
#include "core/timer.h"
#include "core/fileutil.h"
#include "data/loader/encode.h"
#include "data/energon/energon_meta.h"
#include "data/energon/metadataset.h"
#include "data/energon/energon_write.h"
#include "data/loader/inspect.h"
#include "data/loader/length_index.h"
#include "data/loader/loader.h"
#include "data/loader/plan.h"
#include "data/loader/source.h"
#include "data/prepare/prepare_output.h"

static const char *const k_data_usage = "data index PATH [--split T,V,S] [--force] [--threads N]\n"
                                        "       vfm data inspect PATH [--config FILE] [--quick] [--all] [a.b.c=value ...]\n"
                                        "       vfm data bench PATH [--seconds N] [--config FILE] [a.b.c=value ...]";
static const char *const k_data_about =
    "index:   reads every shard (*.tar) under PATH and writes the length index PATH/.vfm/length_index.bin\n"
    "         and the Energon metadata energon prepare writes (.tar.idx, .nv-meta/: .info.json, index.sqlite,\n"
    "         index.uuid, split.yaml by the --split ratio, dataset.yaml); lists the samples that cannot be read.\n"
    "inspect: shards and samples per shard, the split, every part's format, dtypes and shapes, every problem\n"
    "         (shard:key: reason), latent shapes, text lengths and a histogram of tokens against the pack\n"
    "         budget, under the model and dataset keys of the config.\n"
    "bench:   runs the loader for N seconds and prints samples/s, packs/s, tokens/s, MB/s read,\n"
    "         packing efficiency and the skipped count.";

/* Splits positionals into PATH (exactly one without '=') and overrides; prints the usage error. */
static int path_and_overrides(const char *cmd, const ArgList *pos, const char **path, const char **ov, int *n,
                              int allow_overrides) {
    *path = NULL;
    *n = 0;
    for (int i = 0; i < pos->n; i++) {
        const char *a = pos->items[i];
        if (strchr(a, '=') && allow_overrides) {
            ov[(*n)++] = a;
        } else if (!*path && !strchr(a, '=')) {
            *path = a;
        } else {
            fprintf(stderr, "vfm data %s: unexpected argument '%s' (see vfm data %s --help)\n", cmd, a, cmd);
            return 2;
        }
    }
    if (!*path) {
        fprintf(stderr, "vfm data %s: expected the dataset directory PATH (see vfm data %s --help)\n", cmd, cmd);
        return 2;
    }
    return 0;
}

/* Merges the config with dataset.path=PATH last. */
static vfm_status load_config(Config **cfg, const char *file, const char *path, const char **ov, int n) {
    static char path_override[4200];
    snprintf(path_override, sizeof path_override, "dataset.path=%s", path);
    ov[n++] = path_override;
    return config_load(cfg, file, ov, n);
}

static int parse_positive(const char *cmd, const char *flag, const char *text, double *out) {
    char *end;
    double v = strtod(text, &end);
    if (*end || !(v > 0) || v > 1e7) {
        fprintf(stderr, "vfm data %s: %s must be a positive number, got '%s'\n", cmd, flag, text);
        return 2;
    }
    *out = v;
    return 0;
}

static const char *origin_text(int origin) {
    return origin == LENGTH_INDEX_LOADED ? "up to date" : origin == LENGTH_INDEX_WRITTEN ? "written" : "in memory only";
}

/* ---- index ---- */

static int data_index(int argc, char **argv) {
    ArgFlag flags[] = {{"--threads", "N", "shards read in parallel (default 4)", NULL, 0},
                       {"--split", "T,V,S", "train,val,test shard ratio for .nv-meta/split.yaml, e.g. 8,1,1", NULL, 0},
                       {"--force", NULL, "replace an existing split.yaml (split.json) and dataset.yaml", NULL, 0}};
    int nflags = 3, help;
    ArgList pos;
    vfm_status s = args_parse("data index", argc, argv, flags, nflags, &pos, &help);
    if (s != VFM_OK) return cli_report(s);
    if (help) {
        args_print_help("data index PATH [--split T,V,S] [--force] [--threads N]",
                        "Reads every shard (*.tar) under PATH again and writes the length index\n"
                        "PATH/.vfm/length_index.bin (kept in memory when PATH is read-only) and the Energon\n"
                        "metadata `energon prepare` writes, so Energon and vfm both read the dataset: each shard's\n"
                        ".tar.idx, and .nv-meta/.info.json, index.sqlite, index.uuid, split.yaml (shards in sorted\n"
                        "order cut by the --split ratio; 1,0,0 when absent and no ratio is given) and dataset.yaml\n"
                        "(CrudeWebdataset). An existing split.yaml or dataset.yaml is kept unless --force is given\n"
                        "(with --split and an existing split file, --force is required). Lists the samples that\n"
                        "cannot be read, with their reasons.",
                        flags, nflags);
        return 0;
    }
    const char *path, *ov[1];
    int n, rc = path_and_overrides("index", &pos, &path, ov, &n, 0);
    if (rc) return rc;
    double threads = 4;
    const char *tv = args_value(flags, nflags, "--threads", NULL);
    if (tv && (rc = parse_positive("index", "--threads", tv, &threads))) return rc;
    EnergonWriteOptions opt = {0};
    const char *sv = args_value(flags, nflags, "--split", NULL);
    if (sv && (s = energon_parse_split(sv, opt.split)) != VFM_OK) return cli_report(s);
    opt.has_split = sv != NULL;
    opt.force = args_flag(flags, nflags, "--force")->present;
    double t0 = time_now();
    LengthIndex *li;
    s = length_index_open(&li, path, 1, (int)threads);
    if (s != VFM_OK) return cli_report(s);
    int64_t broken = 0;
    for (int64_t i = 0; i < li->n_samples; i++)
        if (li->samples[i].status != ENC_OK) {
            broken++;
            printf("skipping %s:%s: %s\n", length_index_shard_of(li, i), li->samples[i].key, li->samples[i].reason);
        }
    for (int i = 0; i < li->n_shards; i++)
        if (li->shards[i].error) printf("skipping shard %s: %s\n", li->shards[i].rel, li->shards[i].error);
    printf("length index: %lld samples in %d shards (%lld cannot be read) in %.2f s\n", (long long)li->n_samples,
           li->n_shards, (long long)broken, time_now() - t0);
    if (li->origin == LENGTH_INDEX_WRITTEN) printf("wrote %s\n", li->cache_path);
    else printf("could not write %s: the index was kept in memory only\n", li->cache_path);
    rc = li->origin == LENGTH_INDEX_WRITTEN ? 0 : 1;
    const char **rels = malloc((size_t)li->n_shards * sizeof *rels);
    for (int i = 0; rels && i < li->n_shards; i++) rels[i] = li->shards[i].rel;
    EnergonWriteReport rep;
    s = rels ? energon_write_index(path, rels, li->n_shards, &opt, &rep) : vfm_fail(VFM_ERR_NOMEM, "out of memory");
    free(rels);
    length_index_free(li);
    if (s != VFM_OK) {
        int code = cli_report(s);
        return code > rc ? code : rc;
    }
    printf("Energon metadata (format of megatron-energon %s): %s/%s/.info.json, index.sqlite, index.uuid "
           "(%d shards, %lld samples; %d .tar.idx rewritten)\n", ENERGON_FORMAT_VERSION, path, ENERGON_META_DIR,
           rep.n_shards, rep.n_samples, rep.idx_rewritten);
    if (rep.split_written) {
        printf("wrote split.yaml: train %lld, val %lld, test %lld shards\n", rep.split_shards[0], rep.split_shards[1],
               rep.split_shards[2]);
        /* a part the ratio asks for that got no shard: a run on it (validation on val) would fail */
        static const char *const part[3] = {"train", "val", "test"};
        for (int k = 0; k < 3; k++)
            if (opt.has_split && opt.split[k] > 0 && rep.split_shards[k] == 0)
                fprintf(stderr, "warning: --split %s: the %s part is empty: %d shard%s cannot be cut %s ways by shard "
                        "(write more, smaller shards: vfm prepare --samples-per-shard, or drop the part from the ratio)\n",
                        args_value(flags, nflags, "--split", ""), part[k], rep.n_shards, rep.n_shards == 1 ? "" : "s",
                        opt.split[0] > 0 && opt.split[1] > 0 && opt.split[2] > 0 ? "three" : "that many");
    } else
        printf("kept the existing split file (--split R --force replaces it)\n");
    printf(rep.dataset_written ? "wrote dataset.yaml (CrudeWebdataset)\n"
                               : "kept the existing dataset.yaml (--force replaces it with CrudeWebdataset)\n");
    return rc;
}

/* ---- inspect ---- */

typedef struct {
    int32_t shape[4];
    int64_t count;
} ShapeCount;

static int by_count(const void *a, const void *b) {
    const ShapeCount *x = a, *y = b;
    if (x->count != y->count) return x->count > y->count ? -1 : 1;
    return memcmp(x->shape, y->shape, sizeof x->shape);
}

static int by_shape(const void *a, const void *b) {
    const ShapeCount *x = a, *y = b;
    for (int d = 0; d < 4; d++)
        if (x->shape[d] != y->shape[d]) return x->shape[d] < y->shape[d] ? -1 : 1;
    return 0;
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static void inspect_progress(void *ctx, int64_t done, int64_t total) { cli_progress_update(ctx, done, total, NULL); }

/* Shards with their sample counts, and the per-shard spread. */
static void print_shards(const LengthIndex *li, int all) {
    int unreadable = 0;
    int64_t *counts = malloc((size_t)(li->n_shards ? li->n_shards : 1) * sizeof *counts);
    int n = 0;
    for (int i = 0; i < li->n_shards; i++) {
        unreadable += li->shards[i].error != NULL;
        if (!li->shards[i].error && counts) counts[n++] = li->shards[i].count;
    }
    printf("  shards: %d", li->n_shards);
    if (unreadable) printf(" (%d unreadable)", unreadable);
    if (n && counts) {
        qsort(counts, (size_t)n, sizeof *counts, cmp_i64);
        printf("; samples per shard: min %lld, median %lld, max %lld", (long long)counts[0], (long long)counts[n / 2],
               (long long)counts[n - 1]);
    }
    printf("\n");
    free(counts);
    const int limit = all || li->n_shards <= 16 ? li->n_shards : 8;
    for (int i = 0; i < li->n_shards; i++) {
        if (li->shards[i].error) printf("    %s: unreadable: %s\n", li->shards[i].rel, li->shards[i].error);
        else if (i < limit) printf("    %s  %lld sample%s\n", li->shards[i].rel, (long long)li->shards[i].count, li->shards[i].count == 1 ? "" : "s");
    }
    if (limit < li->n_shards) printf("    ... %d more shards (--all lists them)\n", li->n_shards - limit);
}

/* The Energon split parts with their shards and samples, and which one dataset.split trains on.
 * Returns 1 when training would refuse the split (a problem), else 0. */
static int print_split(const char *path, const Config *cfg, const LengthIndex *li) {
    const char *want = cfg_str(cfg, "dataset.split");
    EnergonMeta *m = NULL;
    if (energon_meta_read(&m, path, NULL, NULL) != VFM_OK) {
        printf("  split: problem: %s\n", vfm_last_error());
        return 1;
    }
    int bad = 0;
    if (!m->has_split) {
        bad = strcmp(want, "train") != 0;
        printf("  split: no Energon split file (%s/split.yaml): every shard is in \"train\"; dataset.split = %s%s\n",
               ENERGON_META_DIR, want, bad ? ": problem: there is no such split" : "");
        energon_meta_free(m);
        return bad;
    }
    printf("  split (%s/%s), dataset.split = %s:\n", ENERGON_META_DIR, m->split_file, want);
    int found = 0;
    for (int p = 0; p < m->n_parts; p++) {
        const EnergonSplitPart *part = &m->parts[p];
        int64_t shards = 0, samples = 0, missing = 0;
        for (int64_t k = 0; k < part->shards.n; k++) {
            const char *rel = part->shards.items[k];
            int excluded = 0;
            for (int64_t x = 0; x < m->excluded_shards.n && !excluded; x++) excluded = strcmp(m->excluded_shards.items[x], rel) == 0;
            if (excluded) continue;
            int s = 0;
            while (s < li->n_shards && strcmp(li->shards[s].rel, rel) != 0) s++;
            if (s == li->n_shards) {
                missing++;
                continue;
            }
            shards++;
            for (int64_t e = li->shards[s].first; e < li->shards[s].first + li->shards[s].count; e++)
                samples += !energon_sample_excluded(m, rel, li->samples[e].key);
        }
        const int chosen = strcmp(part->name, want) == 0;
        found |= chosen;
        printf("    %-8s %lld shard%s, %lld samples%s", part->name, (long long)shards, shards == 1 ? "" : "s", (long long)samples,
               chosen ? "  <- trained on" : "");
        if (missing) printf("  (problem: %lld listed shard%s not found)", (long long)missing, missing == 1 ? "" : "s");
        printf("\n");
        bad |= chosen && missing;
    }
    if (m->excluded_shards.n || m->excluded_samples.n)
        printf("    excluded: %lld shard%s, %lld single sample%s\n", (long long)m->excluded_shards.n,
               m->excluded_shards.n == 1 ? "" : "s", (long long)m->excluded_samples.n, m->excluded_samples.n == 1 ? "" : "s");
    if (!found) {
        printf("    problem: dataset.split = %s is not a part of %s\n", want, m->split_file);
        bad = 1;
    }
    printf("    (the rest of this report covers every shard, whatever its split)\n");
    energon_meta_free(m);
    return bad;
}

static void print_parts(const InspectReport *r, int all) {
    printf("  parts (%lld samples read whole):\n", (long long)r->samples_read);
    int width = 4;
    for (int i = 0; i < r->n_parts; i++)
        if ((int)strlen(r->parts[i].name) > width) width = (int)strlen(r->parts[i].name);
    for (int i = 0; i < r->n_parts; i++) {
        const InspectPart *p = &r->parts[i];
        printf("    %-*s  %lld sample%s  %s", width, p->name, (long long)p->count, p->count == 1 ? "" : "s", p->format);
        for (int k = 0; k < p->n_dtypes; k++) printf("%s%s", k ? ", " : "  ", p->dtypes[k].text);
        if (p->n_dtypes > 1)
            for (int k = 0; k < p->n_dtypes; k++) printf("%s%s x%lld", k ? ", " : " (", p->dtypes[k].text, (long long)p->dtypes[k].count);
        if (p->n_dtypes > 1) printf(")");
        const int limit = all ? p->n_shapes : p->n_shapes < 6 ? p->n_shapes : 6;
        for (int k = 0; k < limit; k++) printf("%s%s x%lld", k ? ", " : "  shapes ", p->shapes[k].text, (long long)p->shapes[k].count);
        if (limit < p->n_shapes) printf(", ... %d more", p->n_shapes - limit);
        if (p->unreadable) {
            printf("  (%lld unreadable", (long long)p->unreadable);
            if (p->refused) printf(", %lld refused: a pickle naming a global off the allow-list, see below", (long long)p->refused);
            printf(")");
        }
        printf("\n");
    }
}

/* Tokens per usable sample: one row per value when there are few, else ten equal bins. */
static void print_token_histogram(const int32_t *sorted, int64_t n) {
    if (n == 0) return;
    int32_t lo = sorted[0], hi = sorted[n - 1];
    int64_t distinct = 1;
    for (int64_t i = 1; i < n; i++) distinct += sorted[i] != sorted[i - 1];
    const int bins = distinct <= 12 ? (int)distinct : 10;
    int32_t edge[13];
    int64_t count[12] = {0};
    if (distinct <= 12) {
        int b = 0;
        edge[0] = lo;
        for (int64_t i = 1; i < n; i++)
            if (sorted[i] != sorted[i - 1]) edge[++b] = sorted[i];
        edge[bins] = hi + 1;
    } else {
        for (int b = 0; b <= bins; b++) edge[b] = lo + (int32_t)((int64_t)(hi + 1 - lo) * b / bins);
    }
    for (int64_t i = 0, b = 0; i < n; i++) {
        while (b < bins - 1 && sorted[i] >= edge[b + 1]) b++;
        count[b]++;
    }
    int64_t most = 0;
    for (int b = 0; b < bins; b++) most = count[b] > most ? count[b] : most;
    printf("  tokens per sample (histogram of the usable samples):\n");
    for (int b = 0; b < bins; b++) {
        char range[40];
        if (distinct <= 12) snprintf(range, sizeof range, "%d", edge[b]);
        else snprintf(range, sizeof range, "%d-%d", edge[b], edge[b + 1] - 1);
        int bar = (int)(count[b] * 40 / (most ? most : 1));
        if (count[b] && !bar) bar = 1;
        printf("    %13s  %-40.*s  %lld\n", range, bar, "########################################", (long long)count[b]);
    }
}

static int inspect_path(const char *path, const char *config_file, const char **user_ov, int n_user, int quick, int all);

static int is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int data_inspect(int argc, char **argv) {
    ArgFlag flags[] = {{"--config", "FILE", "YAML config: the model and dataset keys decide tokens and skips", NULL, 0},
                       {"--quick", NULL, "use the length index only: no whole-sample read (no parts table, no value checks)", NULL, 0},
                       {"--all", NULL, "list every shard and every shape", NULL, 0}};
    int nflags = 3, help;
    ArgList pos;
    vfm_status s = args_parse("data inspect", argc, argv, flags, nflags, &pos, &help);
    if (s != VFM_OK) return cli_report(s);
    if (help) {
        args_print_help("data inspect PATH [--config FILE] [--quick] [--all] [a.b.c=value ...]",
                        "Says what the WebDataset at PATH holds and how it trains under the config's model and dataset\n"
                        "keys (model.in_channels, model.patch_spatial, dataset.task_encoder_seq_length, ...): shards and\n"
                        "samples per shard, the split, every part name with its format, dtypes and shapes (npy,\n"
                        "safetensors, json; read from every sample), every problem found (shard:key: reason, exactly as\n"
                        "training would skip it: unreadable, missing part, bad json, NaN/Inf, |x| > 1000, wrong shape,\n"
                        "too long, ...), latent shapes, text rows, a histogram of tokens per sample against the pack\n"
                        "budget, and the packing of epoch 0. Builds the length index first when it is missing or stale.\n"
                        "Exit status 0 when every sample is usable, 1 when any problem was found.",
                        flags, nflags);
        return 0;
    }
    const char *path, *ov[260];
    int n, rc = path_and_overrides("inspect", &pos, &path, ov, &n, 1);
    if (rc) return rc;
    const int quick = args_flag(flags, nflags, "--quick")->present, all = args_flag(flags, nflags, "--all")->present;
    const char *config_file = args_value(flags, nflags, "--config", NULL);
    if (is_dir(path)) return inspect_path(path, config_file, ov, n, quick, all);
    /* a metadataset YAML, as vfm train and vfm data bench take it: each dataset it names, in turn */
    DatasetSpec *spec;
    if ((s = dataset_spec_resolve(&spec, path, "train")) != VFM_OK) return cli_report(s);
    printf("metadataset %s: %d dataset%s\n", path, spec->n_leaves, spec->n_leaves == 1 ? "" : "s");
    for (int i = 0; i < spec->n_leaves; i++) {
        int seen = 0; /* one dataset named twice (two splits, two subsets) is inspected once */
        for (int k = 0; k < i; k++) seen |= strcmp(spec->leaves[k].path, spec->leaves[i].path) == 0;
        if (seen) continue;
        int r = inspect_path(spec->leaves[i].path, config_file, ov, n, quick, all);
        if (r > rc) rc = r;
    }
    dataset_spec_free(spec);
    return rc;
}

/* vfm data inspect of one dataset directory (see data_inspect). */
static int inspect_path(const char *path, const char *config_file, const char **user_ov, int n_user, int quick, int all) {
    /* without a config the set is judged by its own description (vfm prepare writes it), not by
     * the default model's 16 channels */
    char own[16][160];
    const char *ov[280];
    int n_own = config_file ? 0 : prepare_read_train_keys(path, own, 16), n = 0;
    for (int i = 0; i < n_own; i++) ov[n++] = own[i];
    for (int i = 0; i < n_user && n < 280; i++) ov[n++] = user_ov[i];
    Config *cfg;
    vfm_status s = load_config(&cfg, config_file, path, ov, n);
    if (s != VFM_OK) return cli_report(s);
    EncodeConfig ec;
    LengthIndex *li = NULL;
    s = encode_config_from(&ec, cfg);
    int threads = (int)cfg_int(cfg, "dataset.num_workers");
    threads = threads > 0 ? threads : 1;
    if (s == VFM_OK) s = length_index_open(&li, path, 0, threads);
    InspectReport rep;
    memset(&rep, 0, sizeof rep);
    if (s == VFM_OK && !quick) {
        CliProgress progress;
        cli_progress_init(&progress, "inspect", "samples");
        s = inspect_dataset(li, &ec, threads, inspect_progress, &progress, &rep);
    }
    if (s != VFM_OK) {
        length_index_free(li);
        config_free(cfg);
        return cli_report(s);
    }
    int64_t ns = li->n_samples, usable = 0, count[ENC_SKIP_COUNT] = {0};
    int32_t *tokens = malloc((size_t)(ns ? ns : 1) * sizeof *tokens), *padded = malloc((size_t)(ns ? ns : 1) * sizeof *padded);
    int32_t *text = malloc((size_t)(ns ? ns : 1) * sizeof *text);
    ShapeCount *shapes = calloc((size_t)(ns ? ns : 1), sizeof *shapes);
    int64_t n_shapes = 0;
    printf("dataset %s (%s)\n", path, ec.dataset);
    if (config_file) {
        printf("  judged by %s\n", config_file);
    } else if (n_own) {
        printf("  judged by the dataset's own description (vfm_dataset.json, \"train\"):");
        for (int i = 0; i < n_own; i++) printf(" %s", own[i]);
        printf("\n");
    } else {
        printf("  judged by vfm's default keys (no --config, no vfm_dataset.json)\n");
    }
    print_shards(li, all);
    const int split_problem = print_split(path, cfg, li);
    if (!quick) print_parts(&rep, all);
    int printed_header = 0;
    for (int64_t i = 0; i < ns; i++) {
        const LengthEntry *e = &li->samples[i];
        EncodeLengths len;
        char reason[512];
        EncodeSkip skip = quick ? (EncodeSkip)e->status : (EncodeSkip)rep.skip[i];
        if (skip == ENC_OK)
            skip = encode_lengths(&ec, e->shape, e->text_width, e->text_len, e->text_real, &len, reason, sizeof reason);
        else
            snprintf(reason, sizeof reason, "%s", quick ? e->reason : rep.reason[i] ? rep.reason[i] : "?");
        if (e->status == ENC_OK) { /* the shape is known: count it even when the config skips it */
            memcpy(shapes[n_shapes].shape, e->shape, sizeof e->shape);
            shapes[n_shapes++].count = 1;
        }
        if (skip != ENC_OK) {
            if (!printed_header++) printf("  problems (shard:key: reason):\n");
            printf("    %s:%s: %s: %s\n", length_index_shard_of(li, i), e->key, encode_skip_name(skip), reason);
            count[skip]++;
            continue;
        }
        tokens[usable] = len.tokens;
        padded[usable] = len.tokens_padded;
        text[usable] = len.text_rows;
        usable++;
    }
    if (!printed_header) printf("  problems: none%s\n", quick ? " the length index sees (--quick: values not checked)" : "");
    printf("  samples: %lld, %lld usable under this config, %lld skipped\n", (long long)ns, (long long)usable,
           (long long)(ns - usable));
    for (int r = 1; r < ENC_SKIP_COUNT; r++)
        if (count[r]) printf("    %-12s %lld\n", encode_skip_name((EncodeSkip)r), (long long)count[r]);
    /* histogram: sort by shape, merge equal neighbours, then most common first */
    qsort(shapes, (size_t)n_shapes, sizeof *shapes, by_shape);
    int64_t distinct = 0;
    for (int64_t k = 0; k < n_shapes; k++) {
        if (distinct > 0 && memcmp(shapes[distinct - 1].shape, shapes[k].shape, sizeof shapes[k].shape) == 0)
            shapes[distinct - 1].count++;
        else
            shapes[distinct++] = shapes[k];
    }
    n_shapes = distinct;
    qsort(shapes, (size_t)n_shapes, sizeof *shapes, by_count);
    printf("  latent shapes (C x T x H x W), most common first:\n");
    const int64_t shape_limit = all ? n_shapes : 20;
    for (int64_t k = 0; k < n_shapes && k < shape_limit; k++)
        printf("    %d x %d x %d x %d%s  %lld\n", shapes[k].shape[0], shapes[k].shape[1], shapes[k].shape[2],
               shapes[k].shape[3], shapes[k].shape[1] == 1 ? " (image)" : "", (long long)shapes[k].count);
    if (n_shapes > shape_limit) printf("    ... %lld more shapes (--all lists them)\n", (long long)(n_shapes - shape_limit));
    if (usable > 0) {
        int64_t real_sum = 0, padded_sum = 0, text_sum = 0;
        for (int64_t i = 0; i < usable; i++) real_sum += tokens[i], padded_sum += padded[i], text_sum += text[i];
        PlanConfig pc = {(uint64_t)cfg_int(cfg, "rng.seed"), cfg_bool(cfg, "dataset.shuffle"),
                         cfg_int(cfg, "dataset.packing_buffer_size"), ec.budget};
        EpochPlan ep = {0};
        vfm_status ps = plan_epoch(&pc, padded, usable, 0, &ep);
        qsort(tokens, (size_t)usable, sizeof *tokens, cmp_i32);
        qsort(text, (size_t)usable, sizeof *text, cmp_i32);
        printf("  text rows per sample%s: min %d, median %d, mean %.1f, max %d (dataset.max_text_len %d)\n",
               ec.keep_text_padding ? " (padding kept)" : "", text[0], text[usable / 2], (double)text_sum / usable,
               text[usable - 1], ec.max_text_len);
        printf("  tokens per sample: min %d, median %d, max %d; padded to a multiple of %d: mean %.1f\n", tokens[0],
               tokens[usable / 2], tokens[usable - 1], ec.pad_multiple, (double)padded_sum / usable);
        print_token_histogram(tokens, usable);
        printf("  pack budget (dataset.task_encoder_seq_length): %lld tokens; the longest sample fills %.1f%%\n",
               (long long)ec.budget, 100.0 * tokens[usable - 1] / (double)ec.budget);
        if (ps == VFM_OK)
            printf("  epoch 0: %lld packs of %.2f samples on average; real tokens fill %.1f%% of the budget "
                   "(padding %.1f%%)\n", (long long)ep.n_packs, (double)usable / (double)ep.n_packs,
                   100.0 * (double)real_sum / ((double)ep.n_packs * (double)ec.budget),
                   100.0 * (double)(padded_sum - real_sum) / ((double)ep.n_packs * (double)ec.budget));
        epoch_plan_free(&ep);
    }
    const char *ps = length_index_pixel_space(li);
    printf("  pixel_space: %s\n", ps ? ps : "none");
    printf("  length index: %s (%s)\n", li->cache_path, origin_text(li->origin));
    int unreadable_shards = 0;
    for (int i = 0; i < li->n_shards; i++) unreadable_shards += li->shards[i].error != NULL;
    free(tokens);
    free(padded);
    free(text);
    free(shapes);
    inspect_report_free(&rep);
    length_index_free(li);
    config_free(cfg);
    return usable == ns && !unreadable_shards && !split_problem ? 0 : 1;
}

/* ---- bench ---- */

static int data_bench(int argc, char **argv) {
    ArgFlag flags[] = {{"--seconds", "N", "how long to run the loader (default 10)", NULL, 0},
                       {"--config", "FILE", "YAML config: model and dataset keys (num_workers, budget, ...)", NULL, 0}};
    int nflags = 2, help;
    ArgList pos;
    vfm_status s = args_parse("data bench", argc, argv, flags, nflags, &pos, &help);
    if (s != VFM_OK) return cli_report(s);
    if (help) {
        args_print_help("data bench PATH [--seconds N] [--config FILE] [a.b.c=value ...]",
                        "Runs the WebDataset loader over PATH for N seconds, taking packs as fast as it makes them,\n"
                        "and prints samples/s, packs/s, tokens/s, MB/s read, packing efficiency (real tokens over\n"
                        "the pack budget) and the skipped count. dataset.num_workers sets the reader threads.",
                        flags, nflags);
        return 0;
    }
    const char *path, *ov[260];
    int n, rc = path_and_overrides("bench", &pos, &path, ov, &n, 1);
    if (rc) return rc;
    double seconds = 10;
    const char *sv = args_value(flags, nflags, "--seconds", NULL);
    if (sv && (rc = parse_positive("bench", "--seconds", sv, &seconds))) return rc;
    Config *cfg;
    s = load_config(&cfg, args_value(flags, nflags, "--config", NULL), path, ov, n);
    if (s != VFM_OK) return cli_report(s);
    double t_open = time_now();
    PackSource *src;
    s = webdataset_source_create(&src, cfg, 0, 1);
    config_free(cfg);
    if (s != VFM_OK) return cli_report(s);
    t_open = time_now() - t_open;
    Pack pack;
    memset(&pack, 0, sizeof pack);
    double t0 = time_now(), elapsed = 0;
    while (s == VFM_OK && elapsed < seconds) {
        s = src->next(src, &pack);
        elapsed = time_now() - t0;
    }
    if (s != VFM_OK) {
        pack_free(&pack);
        pack_source_destroy(src);
        return cli_report(s);
    }
    LoaderInfo info;
    loader_info(src, &info);
    const PackSourceStats *st = &src->stats;
    printf("data bench %s: %d reader threads, %.1f s (opened in %.2f s: %lld samples in %d shards, %lld usable)\n",
           path, info.num_workers, elapsed, t_open, (long long)info.n_samples, info.n_shards, (long long)info.n_usable);
    printf("  %.1f samples/s, %.2f packs/s, %.0f tokens/s (%.0f padded), %.1f MB/s read\n", st->samples / elapsed,
           st->packs / elapsed, st->tokens_real / elapsed, st->tokens_padded / elapsed, info.bytes_read / elapsed / 1e6);
    printf("  packing efficiency: %.1f%% of the budget holds real tokens, %.1f%% padding (%lld packs, %.2f samples "
           "per pack, epoch %lld)\n", st->capacity ? 100.0 * st->tokens_real / st->capacity : 0.0,
           st->capacity ? 100.0 * (st->tokens_padded - st->tokens_real) / st->capacity : 0.0, (long long)st->packs,
           st->packs ? (double)st->samples / st->packs : 0.0, (long long)info.epoch);
    printf("  skipped: %lld samples; waited for data %.2f s\n", (long long)st->skipped, st->wait_seconds);
    pack_free(&pack);
    pack_source_destroy(src);
    return 0;
}

int cmd_data(int argc, char **argv) {
    const char *sub = argc > 0 ? argv[0] : NULL;
    if (sub && strcmp(sub, "index") == 0) return data_index(argc - 1, argv + 1);
    if (sub && strcmp(sub, "inspect") == 0) return data_inspect(argc - 1, argv + 1);
    if (sub && strcmp(sub, "bench") == 0) return data_bench(argc - 1, argv + 1);
    if (sub && (strcmp(sub, "--help") == 0 || strcmp(sub, "-h") == 0 || strcmp(sub, "help") == 0)) {
        printf("usage: vfm %s\n\n%s\n", k_data_usage, k_data_about);
        return 0;
    }
    if (sub) fprintf(stderr, "vfm data: unknown subcommand '%s' (expected index, inspect or bench; see vfm data --help)\n", sub);
    else fprintf(stderr, "vfm data: expected a subcommand: index, inspect or bench (see vfm data --help)\n");
    return 2;
}
