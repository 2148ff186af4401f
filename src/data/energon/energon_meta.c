/* Energon metadata of one dataset directory (see energon_meta.h): the info, split and dataset
 * files parsed with the schema Energon's strict parser enforces, brace patterns expanded. */
#include "data/energon/energon_meta.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fileutil.h"
#include "core/log.h"
#include "data/formats/yaml_json.h"

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

void energon_meta_free(EnergonMeta *m) {
    if (!m) return;
    free(m->energon_version);
    for (int i = 0; i < m->n_info; i++) free(m->info_shards[i]);
    free(m->info_shards);
    free(m->info_counts);
    for (int i = 0; i < m->n_parts; i++) {
        free(m->parts[i].name);
        strlist_free(&m->parts[i].shards);
    }
    free(m->parts);
    strlist_free(&m->excluded_shards);
    strlist_free(&m->excluded_samples);
    json_decref(m->subflavors);
    free(m);
}

/* Loads a JSON file (.json) or YAML file into a tree. */
static vfm_status load_tree(const char *path, json_t **out) {
    size_t n = strlen(path);
    if (n > 5 && !strcmp(path + n - 5, ".json")) {
        json_error_t err;
        *out = json_load_file(path, JSON_DECODE_ANY, &err);
        if (!*out) return vfm_fail(VFM_ERR_USAGE, "%s:%d: not valid JSON: %s", path, err.line, err.text);
        return VFM_OK;
    }
    vfm_status s = yaml_load_file(path, out);
    if (s == VFM_ERR_FORMAT) s = VFM_ERR_USAGE;
    return s;
}

static vfm_status read_info(EnergonMeta *m) {
    char path[1200];
    const char *names[2] = {".info.json", ".info.yaml"};
    for (int k = 0; k < 2 && !m->has_info; k++) {
        snprintf(path, sizeof path, "%s/%s/%s", m->root, ENERGON_META_DIR, names[k]);
        if (path_exists(path)) {
            m->has_info = 1;
            snprintf(m->info_file, sizeof m->info_file, "%s", names[k]);
        }
    }
    if (!m->has_info) return VFM_OK;
    json_t *info;
    VFM_TRY(load_tree(path, &info));
    vfm_status s = VFM_OK;
    json_t *counts = json_object_get(info, "shard_counts");
    const char *key;
    json_t *value;
    if (!json_is_object(info) || !json_is_object(counts))
        s = vfm_fail(VFM_ERR_USAGE, "%s: expected a mapping with shard_counts: {shard: samples, ...}", path);
    json_object_foreach(info, key, value) {
        if (s == VFM_OK && strcmp(key, "shard_counts") && strcmp(key, "energon_version"))
            log_warn("%s: ignoring unknown key '%s'", path, key);
    }
    const char *version = json_string_value(json_object_get(info, "energon_version"));
    if (version) m->energon_version = strdup(version);
    size_t n = s == VFM_OK ? json_object_size(counts) : 0;
    m->info_shards = calloc(n ? n : 1, sizeof *m->info_shards);
    m->info_counts = calloc(n ? n : 1, sizeof *m->info_counts);
    if (s == VFM_OK && (!m->info_shards || !m->info_counts)) s = vfm_fail(VFM_ERR_NOMEM, "out of memory");
    if (s == VFM_OK) {
        json_object_foreach(counts, key, value) { /* jansson keeps insertion order: the tar_file_id order */
            if (!json_is_integer(value) || json_integer_value(value) < 0) {
                s = vfm_fail(VFM_ERR_USAGE, "%s: shard_counts['%s'] must be a sample count, not %s", path, key,
                             json_is_string(value) ? json_string_value(value) : "that");
                break;
            }
            m->info_shards[m->n_info] = strdup(key);
            m->info_counts[m->n_info++] = json_integer_value(value);
        }
    }
    json_decref(info);
    return s;
}

/* Expands the string list `list` (NULL = empty) of file `path` into out. */
static vfm_status expand_list(const char *path, const char *what, json_t *list, StrList *out) {
    if (!list || json_is_null(list)) return VFM_OK;
    if (!json_is_array(list)) return vfm_fail(VFM_ERR_USAGE, "%s: %s must be a list of shard names", path, what);
    size_t i;
    json_t *v;
    json_array_foreach(list, i, v) {
        if (!json_is_string(v))
            return vfm_fail(VFM_ERR_USAGE, "%s: %s[%zu] must be a shard name (a string)", path, what, i);
        vfm_status s = brace_expand(json_string_value(v), out);
        if (s != VFM_OK) return vfm_fail_context(VFM_ERR_USAGE, "%s: %s[%zu]", path, what, i);
    }
    return VFM_OK;
}

static vfm_status read_split(EnergonMeta *m, const char *split_config) {
    char path[1400];
    const char *names[2] = {split_config ? split_config : "split.yaml", "split.json"};
    for (int k = 0; k < (split_config ? 1 : 2) && !m->has_split; k++) {
        snprintf(path, sizeof path, "%s/%s/%s", m->root, ENERGON_META_DIR, names[k]);
        if (path_exists(path)) {
            m->has_split = 1;
            snprintf(m->split_file, sizeof m->split_file, "%s", names[k]);
        }
    }
    if (!m->has_split) {
        if (split_config)
            return vfm_fail(VFM_ERR_USAGE, "%s/%s/%s: the split file (split_config) does not exist", m->root,
                            ENERGON_META_DIR, split_config);
        return VFM_OK;
    }
    json_t *doc;
    VFM_TRY(load_tree(path, &doc));
    vfm_status s = VFM_OK;
    json_t *parts = json_object_get(doc, "split_parts");
    if (!json_is_object(doc) || !json_is_object(parts))
        s = vfm_fail(VFM_ERR_USAGE, "%s: expected a mapping with split_parts: {train: [shards], ...}", path);
    const char *key;
    json_t *value;
    if (s == VFM_OK) {
        json_object_foreach(doc, key, value) {
            if (strcmp(key, "split_parts") && strcmp(key, "exclude")) {
                s = vfm_fail(VFM_ERR_USAGE, "%s: unknown key '%s' (allowed: split_parts, exclude)", path, key);
                break;
            }
        }
    }
    size_t n = s == VFM_OK ? json_object_size(parts) : 0;
    m->parts = calloc(n ? n : 1, sizeof *m->parts);
    if (!m->parts) s = vfm_fail(VFM_ERR_NOMEM, "out of memory");
    if (s == VFM_OK) {
        json_object_foreach(parts, key, value) {
            EnergonSplitPart *p = &m->parts[m->n_parts++];
            p->name = strdup(key);
            char what[300];
            snprintf(what, sizeof what, "split_parts.%s", key);
            if ((s = expand_list(path, what, value, &p->shards)) != VFM_OK) break;
        }
    }
    StrList excl = {0};
    if (s == VFM_OK) s = expand_list(path, "exclude", json_object_get(doc, "exclude"), &excl);
    for (int64_t i = 0; s == VFM_OK && i < excl.n; i++) /* as Energon: an entry with a '/' may name a sample */
        if (strchr(excl.items[i], '/')) s = strlist_add(&m->excluded_samples, excl.items[i], -1);
    for (int64_t i = 0; s == VFM_OK && i < excl.n; i++) s = strlist_add(&m->excluded_shards, excl.items[i], -1);
    strlist_free(&excl);
    if (s == VFM_OK) {
        qsort(m->excluded_shards.items, (size_t)m->excluded_shards.n, sizeof(char *), cmp_str);
        qsort(m->excluded_samples.items, (size_t)m->excluded_samples.n, sizeof(char *), cmp_str);
    }
    json_decref(doc);
    return s;
}

/* A python reference "file.py:function" (code vfm will not run). */
static int is_code_reference(json_t *v) {
    const char *t = json_string_value(v);
    return t && strstr(t, ".py:") != NULL;
}

static vfm_status read_dataset_yaml(EnergonMeta *m, const char *dataset_config) {
    char path[1400];
    snprintf(m->dataset_file, sizeof m->dataset_file, "%s", dataset_config ? dataset_config : "dataset.yaml");
    snprintf(path, sizeof path, "%s/%s/%s", m->root, ENERGON_META_DIR, m->dataset_file);
    if (!path_exists(path)) {
        if (dataset_config)
            return vfm_fail(VFM_ERR_USAGE, "%s: the dataset file (dataset_config) does not exist", path);
        return VFM_OK;
    }
    m->has_dataset_yaml = 1;
    json_t *doc;
    VFM_TRY(load_tree(path, &doc));
    vfm_status s = VFM_OK;
    const char *cls = json_string_value(json_object_get(doc, "__class__"));
    const char *mod = json_string_value(json_object_get(doc, "__module__"));
    json_t *sample_type = json_object_get(doc, "sample_type");
    const char *how = "vfm reads crude datasets only (__module__: megatron.energon, __class__: CrudeWebdataset), "
                      "whose samples it decodes itself; re-run `vfm data index PATH --force` or `energon prepare` "
                      "choosing the crude sample type";
    if (!json_is_object(doc)) {
        s = vfm_fail(VFM_ERR_USAGE, "%s: expected a mapping (__module__, __class__, ...)", path);
    } else if (json_object_get(doc, "sample_loader") || is_code_reference(json_object_get(doc, "part_filter"))) {
        const char *loader = json_string_value(json_object_get(doc, "sample_loader"));
        s = vfm_fail(VFM_ERR_USAGE, "%s: the dataset is loaded by Python code (%s), which vfm never runs; %s", path,
                     loader ? loader : "part_filter", how);
    } else if (sample_type) {
        const char *st = json_string_value(json_object_get(sample_type, "__class__"));
        s = vfm_fail(VFM_ERR_USAGE, "%s: a typed dataset (sample_type %s%s); %s", path, st ? st : "?",
                     json_object_get(doc, "field_map") ? " with a field_map" : "", how);
    } else if (!cls || strcmp(cls, "CrudeWebdataset") != 0 || (mod && strcmp(mod, "megatron.energon") != 0)) {
        s = vfm_fail(VFM_ERR_USAGE, "%s: dataset class %s%s%s; %s", path, mod ? mod : "", mod ? "." : "",
                     cls ? cls : "(none)", how);
    }
    const char *key;
    json_t *value;
    if (s == VFM_OK) {
        json_object_foreach(doc, key, value) {
            if (!strcmp(key, "__module__") || !strcmp(key, "__class__")) continue;
            if (!strcmp(key, "subflavors")) {
                if (!json_is_object(value) && !json_is_null(value)) {
                    s = vfm_fail(VFM_ERR_USAGE, "%s: subflavors must be a mapping", path);
                    break;
                }
                if (json_is_object(value)) m->subflavors = json_incref(value);
            } else if (!strcmp(key, "part_filter")) {
                log_info("%s: part_filter is not needed by vfm (it reads the parts it knows)", path);
            } else {
                log_warn("%s: ignoring key '%s' (not used by vfm)", path, key);
            }
        }
    }
    json_decref(doc);
    return s;
}

vfm_status energon_meta_read(EnergonMeta **out, const char *root, const char *split_config, const char *dataset_config) {
    *out = NULL;
    EnergonMeta *m = calloc(1, sizeof *m);
    if (!m) return vfm_fail(VFM_ERR_NOMEM, "out of memory");
    snprintf(m->root, sizeof m->root, "%s", root);
    vfm_status s = read_info(m);
    if (s == VFM_OK) s = read_split(m, split_config);
    if (s == VFM_OK) s = read_dataset_yaml(m, dataset_config);
    if (s != VFM_OK) {
        energon_meta_free(m);
        return s;
    }
    *out = m;
    return VFM_OK;
}

vfm_status energon_meta_read_info(EnergonMeta **out, const char *root) {
    *out = NULL;
    EnergonMeta *m = calloc(1, sizeof *m);
    if (!m) return vfm_fail(VFM_ERR_NOMEM, "out of memory");
    snprintf(m->root, sizeof m->root, "%s", root);
    vfm_status s = read_info(m);
    if (s != VFM_OK) {
        energon_meta_free(m);
        return s;
    }
    *out = m;
    return VFM_OK;
}

static int in_sorted(const StrList *l, const char *s) {
    return l->n && bsearch(&s, l->items, (size_t)l->n, sizeof(char *), cmp_str) != NULL;
}

vfm_status energon_split_shards(const EnergonMeta *m, const char *split, const char ***shards, int64_t *n) {
    *shards = NULL;
    *n = 0;
    const EnergonSplitPart *p = NULL;
    for (int i = 0; i < m->n_parts; i++)
        if (!strcmp(m->parts[i].name, split)) p = &m->parts[i];
    if (!p) {
        char have[512] = "";
        size_t k = 0;
        for (int i = 0; i < m->n_parts && k < sizeof have; i++)
            k += (size_t)snprintf(have + k, sizeof have - k, "%s%s", i ? ", " : "", m->parts[i].name);
        return vfm_fail(VFM_ERR_USAGE, "%s/%s/%s has no split part '%s' (it has: %s)", m->root, ENERGON_META_DIR,
                        m->split_file, split, m->n_parts ? have : "none");
    }
    const char **list = malloc((size_t)(p->shards.n ? p->shards.n : 1) * sizeof *list);
    if (!list) return vfm_fail(VFM_ERR_NOMEM, "out of memory");
    int64_t k = 0;
    for (int64_t i = 0; i < p->shards.n; i++)
        if (!in_sorted(&m->excluded_shards, p->shards.items[i])) list[k++] = p->shards.items[i];
    *shards = list;
    *n = k;
    return VFM_OK;
}

int energon_sample_excluded(const EnergonMeta *m, const char *shard_rel, const char *key) {
    if (!m->excluded_samples.n) return 0;
    size_t a = strlen(shard_rel), b = strlen(key);
    char stack[512], *name = a + b + 2 <= sizeof stack ? stack : malloc(a + b + 2);
    if (!name) return 0;
    memcpy(name, shard_rel, a);
    name[a] = '/';
    memcpy(name + a + 1, key, b + 1);
    int r = in_sorted(&m->excluded_samples, name);
    if (name != stack) free(name);
    return r;
}

int energon_shard_id(const EnergonMeta *m, const char *shard_rel) {
    for (int i = 0; i < m->n_info; i++)
        if (!strcmp(m->info_shards[i], shard_rel)) return i;
    return -1;
}
