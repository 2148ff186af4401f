/* Reading an Energon dataset's metadata (research/energon.md §1, §3): `.nv-meta/.info.json` (or the
 * legacy `.info.yaml`): the shard list whose order is each shard's tar_file_id, with sample counts;
 * `split.yaml` (or `split.json`, or another name given by a metadataset's split_config): the
 * shards of each split part as brace patterns, and excludes of whole shards (`<shard>`) or single
 * samples (`<shard>/<key>`); `dataset.yaml`: only crude datasets (CrudeWebdataset) are accepted,
 * with their subflavors; a typed dataset (sample_type, field_map, sample_loader.py) is refused. */
#ifndef VFM_DATA_ENERGON_META_H
#define VFM_DATA_ENERGON_META_H

#include <jansson.h>
#include <stdint.h>

#include "core/error.h"
#include "data/energon/brace.h"

#define ENERGON_META_DIR ".nv-meta"

typedef struct EnergonSplitPart {
    char *name;           /* "train", "val", "test", ... */
    StrList shards;       /* expanded shard names in the file's order (excluded shards still here) */
} EnergonSplitPart;

typedef struct EnergonMeta {
    char root[1024];
    /* .info.json / .info.yaml (has_info = 0 when neither exists) */
    int has_info;
    char info_file[32];   /* ".info.json" or ".info.yaml" */
    char *energon_version;
    int n_info;
    char **info_shards;   /* [n_info] relative shard paths: tar_file_id = position */
    int64_t *info_counts; /* [n_info] samples per shard */
    /* split file (has_split = 0 when absent) */
    int has_split;
    char split_file[256];
    int n_parts;
    EnergonSplitPart *parts;
    StrList excluded_shards;  /* expanded excludes without a sample part (sorted) */
    StrList excluded_samples; /* expanded "<shard>/<key>" excludes (sorted) */
    /* dataset file */
    int has_dataset_yaml;
    char dataset_file[256];
    json_t *subflavors;   /* the crude dataset's subflavors (object) or NULL */
} EnergonMeta;

/* Reads what exists of root/.nv-meta. split_config / dataset_config: other file names inside
 * .nv-meta (NULL: split.yaml, then split.json / dataset.yaml). A malformed file, a typed dataset,
 * or a split pattern that does not expand is VFM_ERR_USAGE naming the file (the CLI exits 2). */
vfm_status energon_meta_read(EnergonMeta **out, const char *root, const char *split_config, const char *dataset_config);
/* Reads only the info file (has_info = 0 when there is none); never fails for a missing file. */
vfm_status energon_meta_read_info(EnergonMeta **out, const char *root);
void energon_meta_free(EnergonMeta *m);

/* The split part's shards (expanded, whole-shard excludes removed), in split-file order, as
 * pointers into m. VFM_ERR_USAGE when the dataset has no such part (the message lists those it has). */
vfm_status energon_split_shards(const EnergonMeta *m, const char *split, const char ***shards, int64_t *n);
/* 1 when "<shard_rel>/<key>" is excluded. */
int energon_sample_excluded(const EnergonMeta *m, const char *shard_rel, const char *key);
/* The tar_file_id of a shard (its position in .info.json), or -1. */
int energon_shard_id(const EnergonMeta *m, const char *shard_rel);

#endif
