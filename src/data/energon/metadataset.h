/* What `dataset.path` names, resolved for one split into a flat list of leaf datasets
 * (research/energon.md §4): a dataset directory is one leaf; an Energon metadataset YAML
 * (MetadatasetV2: `splits: {train: node, ...}` with nodes `path:` references, `blend:` with
 * weights, `blend_epochized:` with repetitions, references to other metadataset YAMLs, `split_part`,
 * `subflavors`, `subset: {range: [a, b]}`; or the older `Metadataset` with `datasets:` lists) is
 * flattened as Energon flattens it: weights normalised within each blend and multiplied through
 * nesting, repetitions multiplied, subflavors merged outer-over-inner, subset ranges merged.
 * `join` metadatasets are refused (vfm has no joiner). */
#ifndef VFM_DATA_METADATASET_H
#define VFM_DATA_METADATASET_H

#include <jansson.h>
#include <stdint.h>

#include "core/error.h"

typedef enum {
    BLEND_NONE = 0,  /* one dataset */
    BLEND_WEIGHT,    /* `blend`: each sample's dataset drawn with probability ∝ weight; all repeat forever */
    BLEND_EPOCHIZED, /* `blend_epochized`: an epoch holds each dataset `repetitions` times */
} BlendMode;

typedef struct DatasetSubset {
    int has_abs;
    int64_t abs_start, abs_end; /* samples [start, end); end -1 = the end */
    int has_rel;
    double rel_start, rel_end;  /* fractions of what the absolute range left */
} DatasetSubset;

typedef struct DatasetLeaf {
    char path[1024];            /* the dataset directory */
    char split[128];            /* the split part read from it */
    char split_config[256];     /* .nv-meta file names ("" = split.yaml / dataset.yaml) */
    char dataset_config[256];
    json_t *subflavors;         /* merged subflavors of the references (object); dataset.yaml's come under these */
    double weight;              /* BLEND_WEIGHT: the normalised weight (all sum to 1) */
    double repetitions;         /* BLEND_EPOCHIZED */
    DatasetSubset subset;
} DatasetLeaf;

typedef struct DatasetSpec {
    char source[1024];          /* dataset.path as given */
    int is_metadataset;
    BlendMode mode;
    int n_leaves;
    DatasetLeaf *leaves;
} DatasetSpec;

/* Resolves path (a dataset directory or a metadataset .yaml) for `split`. Errors are VFM_ERR_USAGE
 * naming the YAML file and what is wrong (unknown key, missing split, a join, a bad range). */
vfm_status dataset_spec_resolve(DatasetSpec **out, const char *path, const char *split);
void dataset_spec_free(DatasetSpec *spec);

/* Energon's DatasetSubset.compute_subset: the sample range [*start, *end) of a leaf that has
 * `total` samples. VFM_ERR_USAGE when an absolute range does not fit. */
vfm_status dataset_subset_apply(const DatasetSubset *s, int64_t total, const char *what, int64_t *start, int64_t *end);

#endif
