/* A split's samples across the leaf datasets of dataset.path (see selection.h). */
#include "data/loader/selection.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "data/energon/energon_meta.h"
#include "data/energon/energon_write.h"

void selection_free(Selection *sel) {
    if (!sel) return;
    for (int i = 0; i < sel->n_datasets; i++) length_index_free(sel->datasets[i].index);
    for (int i = 0; i < sel->n_leaves; i++) {
        json_decref(sel->leaves[i].subflavors);
        free(sel->leaves[i].entries);
    }
    free(sel->datasets);
    free(sel->leaves);
    dataset_spec_free(sel->spec);
    free(sel);
}

int selection_dataset_of(const Selection *sel, int64_t id, int64_t *local) {
    int d = 0;
    while (d + 1 < sel->n_datasets && sel->datasets[d + 1].entry_base <= id) d++;
    *local = id - sel->datasets[d].entry_base;
    return d;
}

static const LengthIndex *g_sort_index; /* for by_rel (selection_open runs in one thread) */
static int by_rel(const void *a, const void *b) {
    return strcmp(g_sort_index->shards[*(const int *)a].rel, g_sort_index->shards[*(const int *)b].rel);
}

static int by_components(const void *a, const void *b) {
    return energon_path_cmp(g_sort_index->shards[*(const int *)a].rel, g_sort_index->shards[*(const int *)b].rel);
}

/* The shard of li named rel (sorted[] holds li's shard numbers ordered by rel), or -1. */
static int find_shard(const LengthIndex *li, const int *sorted, const char *rel) {
    int lo = 0, hi = li->n_shards - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2, c = strcmp(li->shards[sorted[mid]].rel, rel);
        if (!c) return sorted[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid - 1;
    }
    return -1;
}

/* The basename of a directory path ("a/b/" -> "b"). */
static void dir_basename(const char *path, char *out, size_t n) {
    size_t len = strlen(path);
    while (len > 1 && path[len - 1] == '/') len--;
    size_t start = len;
    while (start > 0 && path[start - 1] != '/') start--;
    snprintf(out, n, "%.*s", (int)(len - start), path + start);
}

/* The entries of leaf `leaf` (dataset d already open). */
static vfm_status leaf_entries(const Selection *sel, SelLeaf *leaf, const DatasetLeaf *spec, int verbose) {
    const SelDataset *ds = &sel->datasets[leaf->dataset];
    const LengthIndex *li = ds->index;
    EnergonMeta *meta = NULL;
    VFM_TRY(energon_meta_read(&meta, ds->root, spec->split_config[0] ? spec->split_config : NULL,
                              spec->dataset_config[0] ? spec->dataset_config : NULL));
    leaf->subflavors = json_object();
    if (meta->subflavors) json_object_update(leaf->subflavors, meta->subflavors);
    if (spec->subflavors) json_object_update(leaf->subflavors, spec->subflavors);
    int *shards = malloc((size_t)(li->n_shards ? li->n_shards : 1) * sizeof *shards);
    int n_shards = 0;
    vfm_status s = shards ? VFM_OK : vfm_fail(VFM_ERR_NOMEM, "out of memory");
    if (s == VFM_OK && meta->has_split) {
        int *sorted = malloc((size_t)(li->n_shards ? li->n_shards : 1) * sizeof *sorted);
        const char **names = NULL;
        int64_t n_names = 0;
        if (!sorted) s = vfm_fail(VFM_ERR_NOMEM, "out of memory");
        if (s == VFM_OK) {
            for (int i = 0; i < li->n_shards; i++) sorted[i] = i;
            g_sort_index = li;
            qsort(sorted, (size_t)li->n_shards, sizeof *sorted, by_rel);
            s = energon_split_shards(meta, leaf->split, &names, &n_names);
        }
        if (s == VFM_OK && n_names > li->n_shards) { /* a shard may be named twice (it is then read twice) */
            int *grown = realloc(shards, (size_t)n_names * sizeof *grown);
            if (!grown) s = vfm_fail(VFM_ERR_NOMEM, "out of memory");
            else shards = grown;
        }
        for (int64_t i = 0; s == VFM_OK && i < n_names; i++) {
            int sh = find_shard(li, sorted, names[i]);
            if (sh < 0) {
                s = vfm_fail(VFM_ERR_USAGE, "%s/%s/%s: split '%s' names shard %s, which is not under %s", ds->root,
                             ENERGON_META_DIR, meta->split_file, leaf->split, names[i], ds->root);
                break;
            }
            shards[n_shards++] = sh;
            int id = energon_shard_id(meta, names[i]);
            if (verbose && meta->has_info && id < 0)
                log_warn("%s: shard %s of split '%s' is not in .nv-meta/%s (run vfm data index)", ds->root, names[i],
                         leaf->split, meta->info_file);
            else if (verbose && id >= 0 && meta->info_counts[id] != li->shards[sh].count && !li->shards[sh].error)
                log_warn("%s: .nv-meta/%s lists %lld samples in %s, the shard holds %lld (the dataset changed since it "
                         "was prepared; vfm data index rewrites the metadata)", ds->root, meta->info_file,
                         (long long)meta->info_counts[id], names[i], (long long)li->shards[sh].count);
        }
        if (s == VFM_OK && n_shards == 0)
            s = vfm_fail(VFM_ERR_USAGE, "%s: split '%s' of .nv-meta/%s has no shards", ds->root, leaf->split,
                         meta->split_file);
        free(sorted);
        free(names);
    } else if (s == VFM_OK) {
        if (strcmp(leaf->split, "train") != 0)
            s = vfm_fail(VFM_ERR_USAGE, "%s has no .nv-meta/split.yaml, so all its shards are the train split and "
                         "split '%s' is empty; write one with `vfm data index %s --split 8,1,1`%s", ds->root,
                         leaf->split, ds->root,
                         strcmp(leaf->split, "val") ? "" : ", or validate on the train split "
                                                           "(dataset.use_train_split_for_val=true)");
        /* all shards in the order Energon gives them tar_file_ids, so writing a 1,0,0 split.yaml later
         * (vfm data index) changes nothing */
        for (int i = 0; s == VFM_OK && i < li->n_shards; i++) shards[n_shards++] = i;
        g_sort_index = li;
        qsort(shards, (size_t)n_shards, sizeof *shards, by_components);
    }
    int64_t total = 0;
    for (int i = 0; s == VFM_OK && i < n_shards; i++) total += li->shards[shards[i]].count;
    int64_t lo = 0, hi = total;
    char what[1400];
    snprintf(what, sizeof what, "%s (split %s)", ds->root, leaf->split);
    if (s == VFM_OK) s = dataset_subset_apply(&spec->subset, total, what, &lo, &hi);
    if (s == VFM_OK && !(leaf->entries = malloc((size_t)(hi > lo ? hi - lo : 1) * sizeof *leaf->entries)))
        s = vfm_fail(VFM_ERR_NOMEM, "out of memory");
    int64_t pos = 0, excluded = 0;
    for (int i = 0; s == VFM_OK && i < n_shards; i++) {
        const LengthShard *sh = &li->shards[shards[i]];
        for (int64_t k = 0; k < sh->count; k++, pos++) {
            if (pos < lo || pos >= hi) continue;
            int64_t id = sh->first + k;
            if (energon_sample_excluded(meta, sh->rel, li->samples[id].key)) {
                excluded++;
                continue;
            }
            leaf->entries[leaf->n_entries++] = id;
        }
    }
    if (s == VFM_OK && verbose && excluded)
        log_info("%s: split '%s': %lld samples excluded by .nv-meta/%s", ds->root, leaf->split, (long long)excluded,
                 meta->split_file);
    free(shards);
    energon_meta_free(meta);
    return s;
}

vfm_status selection_open(Selection **out, const char *path, const char *split, const char *dir_name, int threads,
                          int verbose) {
    *out = NULL;
    Selection *sel = calloc(1, sizeof *sel);
    if (!sel) return vfm_fail(VFM_ERR_NOMEM, "out of memory");
    vfm_status s = dataset_spec_resolve(&sel->spec, path, split);
    int n = s == VFM_OK ? sel->spec->n_leaves : 0;
    if (s == VFM_OK) {
        sel->datasets = calloc((size_t)(n ? n : 1), sizeof *sel->datasets);
        sel->leaves = calloc((size_t)(n ? n : 1), sizeof *sel->leaves);
        if (!sel->datasets || !sel->leaves) s = vfm_fail(VFM_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; s == VFM_OK && i < n; i++) {
        const DatasetLeaf *spec = &sel->spec->leaves[i];
        SelLeaf *leaf = &sel->leaves[i];
        sel->n_leaves++;
        int d = -1;
        for (int k = 0; k < sel->n_datasets; k++)
            if (!strcmp(sel->datasets[k].root, spec->path)) d = k;
        if (d < 0) {
            SelDataset *ds = &sel->datasets[sel->n_datasets];
            snprintf(ds->root, sizeof ds->root, "%s", spec->path);
            s = length_index_open(&ds->index, ds->root, 0, threads);
            if (s != VFM_OK) break;
            ds->entry_base = sel->n_entries;
            ds->shard_base = sel->n_shards;
            sel->n_entries += ds->index->n_samples;
            sel->n_shards += ds->index->n_shards;
            d = sel->n_datasets++;
        }
        leaf->dataset = d;
        snprintf(leaf->split, sizeof leaf->split, "%s", spec->split);
        leaf->weight = spec->weight;
        leaf->repetitions = spec->repetitions;
        if (sel->spec->is_metadataset) dir_basename(spec->path, leaf->name, sizeof leaf->name);
        else snprintf(leaf->name, sizeof leaf->name, "%s", dir_name);
        s = leaf_entries(sel, leaf, spec, verbose);
    }
    if (s != VFM_OK) {
        selection_free(sel);
        return s;
    }
    *out = sel;
    return VFM_OK;
}
