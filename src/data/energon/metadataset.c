/* Metadataset YAML flattened into leaf datasets (see metadataset.h), following megatron-energon
 * 7.4's metadataset_v2.py / metadataset.py: the same node kinds and keys (unknown keys are errors,
 * as Energon's strict parser makes them), the same weight, repetition, subflavor and subset rules. */
#include "data/energon/metadataset.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/fileutil.h"
#include "core/log.h"
#include "data/formats/yaml_json.h"

#define MAX_NESTING 16

typedef struct {
    DatasetLeaf *items;
    int n, cap;
} LeafList;

static void leaf_list_free(LeafList *l) {
    for (int i = 0; i < l->n; i++) json_decref(l->items[i].subflavors);
    free(l->items);
    memset(l, 0, sizeof *l);
}

static DatasetLeaf *leaf_add(LeafList *l) {
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 8;
        DatasetLeaf *q = realloc(l->items, (size_t)cap * sizeof *q);
        if (!q) return NULL;
        l->items = q;
        l->cap = cap;
    }
    DatasetLeaf *d = &l->items[l->n++];
    memset(d, 0, sizeof *d);
    return d;
}

void dataset_spec_free(DatasetSpec *spec) {
    if (!spec) return;
    for (int i = 0; i < spec->n_leaves; i++) json_decref(spec->leaves[i].subflavors);
    free(spec->leaves);
    free(spec);
}

/* ---- subsets ---- */

/* One bound of `range`: an integer, "N%" (a fraction) or "end". kind: 1 int, 2 fraction, 3 end. */
static int range_bound(json_t *v, int64_t *i, double *f) {
    if (json_is_integer(v)) {
        *i = json_integer_value(v);
        return 1;
    }
    const char *t = json_string_value(v);
    if (!t) return 0;
    while (*t == ' ') t++;
    size_t n = strlen(t);
    while (n && t[n - 1] == ' ') n--;
    if (n == 3 && !strncmp(t, "end", 3)) return 3;
    if (n < 2 || t[n - 1] != '%') return 0;
    char buf[64];
    snprintf(buf, sizeof buf, "%.*s", (int)(n - 1), t);
    char *end;
    double p = strtod(buf, &end);
    while (*end == ' ') end++;
    if (*end || !(p >= 0 && p <= 100)) return 0;
    *f = p / 100.0;
    return 2;
}

static vfm_status parse_subset(const char *file, json_t *v, DatasetSubset *out) {
    memset(out, 0, sizeof *out);
    json_t *range = json_object_get(v, "range");
    const char *key;
    json_t *x;
    json_object_foreach(v, key, x) if (strcmp(key, "range"))
        return vfm_fail(VFM_ERR_USAGE, "%s: subset: unknown key '%s' (allowed: range)", file, key);
    if (!json_is_object(v) || !json_is_array(range) || json_array_size(range) != 2)
        return vfm_fail(VFM_ERR_USAGE, "%s: subset must be {range: [start, end]} (integers, \"N%%\" or end)", file);
    int64_t a = 0, b = 0;
    double fa = 0, fb = 0;
    int ka = range_bound(json_array_get(range, 0), &a, &fa), kb = range_bound(json_array_get(range, 1), &b, &fb);
    if (ka == 1 && (kb == 1 || kb == 3)) {
        out->has_abs = 1, out->abs_start = a, out->abs_end = kb == 3 ? -1 : b;
        out->has_rel = 1, out->rel_start = 0, out->rel_end = 1;
        return VFM_OK;
    }
    if (ka == 2 && kb == 2 && fa <= fb) {
        out->has_rel = 1, out->rel_start = fa, out->rel_end = fb;
        return VFM_OK;
    }
    return vfm_fail(VFM_ERR_USAGE, "%s: subset range must be [int, int], [int, end] or [\"a%%\", \"b%%\"] with a <= b", file);
}

/* Energon's SubsetRatioMixin._get_subset: the node's own subset merged into the parent's. */
static vfm_status merge_subset(const char *file, json_t *node_subset, const DatasetSubset *parent, int has_parent,
                               DatasetSubset *out, int *has) {
    *has = 0;
    if (has_parent && parent->has_abs)
        return vfm_fail(VFM_ERR_USAGE, "%s: an absolute subset range is only allowed on a reference to a dataset "
                        "directory (a leaf), not on one to a metadataset or a blend", file);
    if (!node_subset) {
        if (has_parent) *out = *parent, *has = 1;
        return VFM_OK;
    }
    DatasetSubset mine;
    VFM_TRY(parse_subset(file, node_subset, &mine));
    *out = mine;
    *has = 1;
    if (has_parent && parent->has_rel) {
        double total = mine.rel_end - mine.rel_start;
        out->has_rel = 1;
        out->rel_start = mine.rel_start + parent->rel_start * total;
        out->rel_end = mine.rel_start + parent->rel_end * total;
    }
    return VFM_OK;
}

vfm_status dataset_subset_apply(const DatasetSubset *s, int64_t total, const char *what, int64_t *start, int64_t *end) {
    *start = 0;
    *end = total;
    if (s->has_abs) {
        *start = s->abs_start;
        *end = s->abs_end < 0 ? total : s->abs_end;
        if (*end > total || *start > *end || *start < 0)
            return vfm_fail(VFM_ERR_USAGE, "%s: subset range [%lld, %lld) does not fit its %lld samples", what,
                            (long long)s->abs_start, (long long)*end, (long long)total);
    }
    if (s->has_rel) {
        int64_t prev = *end - *start;
        *end = *start + (int64_t)((double)prev * s->rel_end);
        *start += (int64_t)((double)prev * s->rel_start);
    }
    return VFM_OK;
}

/* ---- nodes ---- */

typedef struct {
    LeafList leaves;
} Walk;

static vfm_status load_file(Walk *w, const char *yaml, const char *split, json_t *outer_sub, const DatasetSubset *parent,
                            int has_parent, int depth, BlendMode *mode);

static int key_in(const char *key, const char *const *allowed) {
    for (int i = 0; allowed[i]; i++)
        if (!strcmp(key, allowed[i])) return 1;
    return 0;
}

static vfm_status check_keys(const char *file, const char *what, json_t *obj, const char *const *allowed) {
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v) {
        if (key_in(key, allowed)) continue;
        char list[512] = "";
        size_t k = 0;
        for (int i = 0; allowed[i] && k < sizeof list; i++)
            k += (size_t)snprintf(list + k, sizeof list - k, "%s%s", i ? ", " : "", allowed[i]);
        return vfm_fail(VFM_ERR_USAGE, "%s: %s: unknown key '%s' (allowed: %s)", file, what, key, list);
    }
    return VFM_OK;
}

/* subflavors of a reference merged with the outer ones (outer win): a new object. */
static json_t *merge_subflavors(json_t *own, json_t *outer) {
    json_t *m = json_object();
    if (json_is_object(own)) json_object_update(m, own);
    if (json_is_object(outer)) json_object_update(m, outer);
    return m;
}

/* base directory of the YAML file + p (absolute paths unchanged), resolved with realpath. */
static vfm_status resolve_path(const char *file, const char *p, char *out, size_t n) {
    if (strstr(p, "://")) return vfm_fail(VFM_ERR_USAGE, "%s: path '%s': remote datasets are not supported", file, p);
    char joined[2200];
    if (p[0] == '/') {
        snprintf(joined, sizeof joined, "%s", p);
    } else {
        char dir[1200];
        path_dirname(dir, sizeof dir, file);
        snprintf(joined, sizeof joined, "%s/%s", dir, p);
    }
    char real[PATH_MAX];
    if (!realpath(joined, real)) return vfm_fail(VFM_ERR_USAGE, "%s: path '%s': %s does not exist", file, p, joined);
    snprintf(out, n, "%s", real);
    return VFM_OK;
}

static int is_yaml_file(const char *path) {
    struct stat st;
    size_t n = strlen(path);
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) &&
           ((n > 5 && !strcmp(path + n - 5, ".yaml")) || (n > 4 && !strcmp(path + n - 4, ".yml")));
}

/* A reference node (`path:`). extra: the blend key allowed beside it ("weight", "repetitions"). */
static vfm_status load_reference(Walk *w, const char *file, json_t *ref, const char *split, json_t *outer_sub,
                                 const DatasetSubset *parent, int has_parent, int depth, const char *extra, int v1,
                                 BlendMode *mode) {
    static const char *const v2_keys[] = {"path", "split_part", "subflavors", "shuffle_over_epochs_multiplier",
                                          "dataset_config", "split_config", "aux", "subset", NULL, NULL};
    static const char *const v1_keys[] = {"path", "split_part", "subflavor", "subflavors", "shuffle_over_epochs_multiplier",
                                          "dataset_config", "split_config", "weight", NULL};
    const char *keys[16];
    int nk = 0;
    for (const char *const *k = v1 ? v1_keys : v2_keys; *k; k++) keys[nk++] = *k;
    if (extra && !v1) keys[nk++] = extra;
    keys[nk] = NULL;
    VFM_TRY(check_keys(file, "dataset reference", ref, keys));
    const char *p = json_string_value(json_object_get(ref, "path"));
    if (!p) return vfm_fail(VFM_ERR_USAGE, "%s: a dataset reference needs a path", file);
    const char *sp = json_string_value(json_object_get(ref, "split_part"));
    if (json_object_get(ref, "split_part") && !sp)
        return vfm_fail(VFM_ERR_USAGE, "%s: split_part must be a string (train, val, test, ...)", file);
    json_t *own = json_object_get(ref, "subflavors");
    if (own && !json_is_object(own) && !json_is_null(own))
        return vfm_fail(VFM_ERR_USAGE, "%s: subflavors must be a mapping", file);
    json_t *legacy = json_object_get(ref, "subflavor");
    json_t *own_merged = json_object();
    if (legacy) json_object_set(own_merged, "__subflavor__", legacy);
    if (json_is_object(own)) json_object_update(own_merged, own);
    json_t *sub = merge_subflavors(own_merged, outer_sub);
    json_decref(own_merged);
    json_t *sm = json_object_get(ref, "shuffle_over_epochs_multiplier");
    if (sm && !(json_is_integer(sm) && json_integer_value(sm) == 1) && !json_is_null(sm))
        log_warn("%s: shuffle_over_epochs_multiplier is not used by vfm (each epoch is shuffled anew)", file);
    if (json_object_get(ref, "aux")) log_warn("%s: aux datasets are not used by vfm (it has no cookers)", file);
    const char *split_config = json_string_value(json_object_get(ref, "split_config"));
    const char *dataset_config = json_string_value(json_object_get(ref, "dataset_config"));
    DatasetSubset subset;
    int has_subset;
    char resolved[1024];
    vfm_status s = merge_subset(file, json_object_get(ref, "subset"), parent, has_parent, &subset, &has_subset);
    if (s == VFM_OK) s = resolve_path(file, p, resolved, sizeof resolved);
    const char *leaf_split = sp ? sp : split;
    if (s == VFM_OK && is_yaml_file(resolved)) {
        if (split_config || dataset_config)
            s = vfm_fail(VFM_ERR_USAGE, "%s: split_config / dataset_config may not be set on a reference to a "
                         "metadataset (%s)", file, p);
        else
            s = load_file(w, resolved, leaf_split, sub, &subset, has_subset, depth + 1, mode);
    } else if (s == VFM_OK) {
        DatasetLeaf *d = leaf_add(&w->leaves);
        if (!d) {
            s = vfm_fail(VFM_ERR_NOMEM, "out of memory");
        } else {
            snprintf(d->path, sizeof d->path, "%s", resolved);
            snprintf(d->split, sizeof d->split, "%s", leaf_split);
            snprintf(d->split_config, sizeof d->split_config, "%s", split_config ? split_config : "");
            snprintf(d->dataset_config, sizeof d->dataset_config, "%s", dataset_config ? dataset_config : "");
            d->subflavors = json_incref(sub);
            d->weight = 1;
            d->repetitions = 1;
            if (has_subset) d->subset = subset;
            *mode = BLEND_NONE;
        }
    }
    json_decref(sub);
    return s;
}

/* A `blend` (weights) or `blend_epochized` (repetitions) list, or a V1 `datasets` list. */
static vfm_status load_blend(Walk *w, const char *file, json_t *list, int epochized, const char *split, json_t *outer_sub,
                             const DatasetSubset *subset, int has_subset, int depth, int v1) {
    const char *what = epochized ? "blend_epochized" : v1 ? "datasets" : "blend";
    const char *factor_key = epochized ? "repetitions" : "weight";
    if (!json_is_array(list) || json_array_size(list) == 0)
        return vfm_fail(VFM_ERR_USAGE, "%s: %s must be a non-empty list of dataset references", file, what);
    double sum = 0;
    size_t i;
    json_t *entry;
    json_array_foreach(list, i, entry) {
        if (!json_is_object(entry)) return vfm_fail(VFM_ERR_USAGE, "%s: %s[%zu] must be a mapping", file, what, i);
        if (json_object_get(entry, "join"))
            return vfm_fail(VFM_ERR_USAGE, "%s: %s[%zu]: join datasets are not supported by vfm", file, what, i);
        json_t *f = json_object_get(entry, factor_key);
        double v = f ? json_number_value(f) : 1.0;
        if ((f && !json_is_number(f)) || !(v > 0))
            return vfm_fail(VFM_ERR_USAGE, "%s: %s[%zu].%s must be a positive number", file, what, i, factor_key);
        sum += v;
    }
    json_array_foreach(list, i, entry) {
        json_t *f = json_object_get(entry, factor_key);
        double v = f ? json_number_value(f) : 1.0;
        int first = w->leaves.n;
        BlendMode inner = BLEND_NONE;
        VFM_TRY(load_reference(w, file, entry, split, outer_sub, subset, has_subset, depth, factor_key, v1, &inner));
        if (inner != BLEND_NONE && inner != (epochized ? BLEND_EPOCHIZED : BLEND_WEIGHT))
            return vfm_fail(VFM_ERR_USAGE, "%s: %s[%zu]: cannot mix blend with blend_epochized", file, what, i);
        for (int k = first; k < w->leaves.n; k++) {
            DatasetLeaf *d = &w->leaves.items[k];
            if (epochized) d->repetitions = (inner == BLEND_EPOCHIZED ? d->repetitions : 1.0) * v;
            else d->weight = (inner == BLEND_WEIGHT ? d->weight : 1.0) * v / sum;
        }
    }
    return VFM_OK;
}

/* A V2 split node: a reference, a blend or a blend_epochized. */
static vfm_status load_node(Walk *w, const char *file, json_t *node, const char *split, json_t *outer_sub,
                            const DatasetSubset *parent, int has_parent, int depth, BlendMode *mode) {
    if (!json_is_object(node)) return vfm_fail(VFM_ERR_USAGE, "%s: split '%s' must be a mapping", file, split);
    if (json_object_get(node, "join"))
        return vfm_fail(VFM_ERR_USAGE, "%s: split '%s' is a join, which vfm does not support (it has no joiner)", file,
                        split);
    int blend = json_object_get(node, "blend") != NULL, epochized = json_object_get(node, "blend_epochized") != NULL;
    if (!blend && !epochized)
        return load_reference(w, file, node, split, outer_sub, parent, has_parent, depth, NULL, 0, mode);
    if (blend && epochized) return vfm_fail(VFM_ERR_USAGE, "%s: split '%s' has both blend and blend_epochized", file, split);
    static const char *const blend_keys[] = {"blend", "subset", NULL};
    static const char *const epochized_keys[] = {"blend_epochized", "subset", NULL};
    VFM_TRY(check_keys(file, blend ? "blend" : "blend_epochized", node, blend ? blend_keys : epochized_keys));
    DatasetSubset subset;
    int has_subset;
    VFM_TRY(merge_subset(file, json_object_get(node, "subset"), parent, has_parent, &subset, &has_subset));
    VFM_TRY(load_blend(w, file, json_object_get(node, blend ? "blend" : "blend_epochized"), epochized, split, outer_sub,
                       &subset, has_subset, depth, 0));
    *mode = blend ? BLEND_WEIGHT : BLEND_EPOCHIZED;
    return VFM_OK;
}

static vfm_status load_file(Walk *w, const char *yaml, const char *split, json_t *outer_sub, const DatasetSubset *parent,
                            int has_parent, int depth, BlendMode *mode) {
    if (depth > MAX_NESTING)
        return vfm_fail(VFM_ERR_USAGE, "%s: metadatasets nested more than %d deep (a reference loop?)", yaml, MAX_NESTING);
    json_t *doc;
    vfm_status s = yaml_load_file(yaml, &doc);
    if (s == VFM_ERR_FORMAT) return vfm_fail_context(VFM_ERR_USAGE, "metadataset");
    if (s != VFM_OK) return s;
    const char *cls = json_string_value(json_object_get(doc, "__class__"));
    const char *module = json_string_value(json_object_get(doc, "__module__"));
    json_t *splits = json_object_get(doc, "splits");
    static const char *const top_keys[] = {"__module__", "__class__", "splits", NULL};
    int v1 = !cls || !strcmp(cls, "Metadataset");
    if (!json_is_object(doc) || !json_is_object(splits))
        s = vfm_fail(VFM_ERR_USAGE, "%s: not a metadataset (expected __class__: MetadatasetV2 and splits: {...})", yaml);
    else if ((cls && strcmp(cls, "MetadatasetV2") && strcmp(cls, "Metadataset")) ||
             (module && strcmp(module, "megatron.energon")))
        s = vfm_fail(VFM_ERR_USAGE, "%s: class %s.%s is not a metadataset vfm reads (MetadatasetV2, Metadataset)", yaml,
                     module ? module : "?", cls ? cls : "?");
    if (s == VFM_OK) s = check_keys(yaml, "metadataset", doc, top_keys);
    json_t *node = s == VFM_OK ? json_object_get(splits, split) : NULL;
    if (s == VFM_OK && !node) {
        char have[512] = "";
        size_t k = 0;
        const char *key;
        json_t *v;
        json_object_foreach(splits, key, v) k += (size_t)snprintf(have + k, k < sizeof have ? sizeof have - k : 0, "%s%s",
                                                                   k ? ", " : "", key);
        s = vfm_fail(VFM_ERR_USAGE, "%s: has no split '%s' (it has: %s)", yaml, split, k ? have : "none");
    }
    if (s == VFM_OK && v1) {
        static const char *const v1_keys[] = {"datasets", NULL};
        s = check_keys(yaml, "split", node, v1_keys);
        if (s == VFM_OK)
            s = load_blend(w, yaml, json_object_get(node, "datasets"), 0, split, outer_sub, parent, has_parent, depth, 1);
        *mode = BLEND_WEIGHT;
    } else if (s == VFM_OK) {
        s = load_node(w, yaml, node, split, outer_sub, parent, has_parent, depth, mode);
    }
    json_decref(doc);
    return s;
}

vfm_status dataset_spec_resolve(DatasetSpec **out, const char *path, const char *split) {
    *out = NULL;
    DatasetSpec *spec = calloc(1, sizeof *spec);
    if (!spec) return vfm_fail(VFM_ERR_NOMEM, "out of memory");
    snprintf(spec->source, sizeof spec->source, "%s", path);
    Walk w = {0};
    vfm_status s = VFM_OK;
    struct stat st;
    if (stat(path, &st) != 0) {
        s = vfm_fail_at(VFM_ERR_USAGE, NULL, "dataset.path", path, "does not exist");
    } else if (S_ISDIR(st.st_mode)) {
        DatasetLeaf *d = leaf_add(&w.leaves);
        if (!d) s = vfm_fail(VFM_ERR_NOMEM, "out of memory");
        else {
            snprintf(d->path, sizeof d->path, "%s", path);
            snprintf(d->split, sizeof d->split, "%s", split);
            d->subflavors = json_object();
            d->weight = d->repetitions = 1;
        }
        spec->mode = BLEND_NONE;
    } else if (is_yaml_file(path)) {
        spec->is_metadataset = 1;
        s = load_file(&w, path, split, NULL, NULL, 0, 0, &spec->mode);
    } else {
        s = vfm_fail_at(VFM_ERR_USAGE, NULL, "dataset.path", path,
                        "is neither a dataset directory nor a metadataset .yaml file");
    }
    if (s != VFM_OK) {
        leaf_list_free(&w.leaves);
        free(spec);
        return s;
    }
    spec->leaves = w.leaves.items;
    spec->n_leaves = w.leaves.n;
    *out = spec;
    return VFM_OK;
}
