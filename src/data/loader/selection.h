/* The samples one split of `dataset.path` holds: the path resolved into leaf datasets
 * (metadataset.h), each dataset directory's length index opened once, and per leaf the list of
 * its length-index entries as Energon orders them: the split's shards in split-file order (all
 * shards, sorted by path components as Energon sorts them, when the dataset has no split file:
 * then only the "train" split exists), a
 * subset range cut from that index space, then excluded samples dropped. What the config makes of
 * the entries (usable or skipped) is the loader's business. */
#ifndef VFM_DATA_SELECTION_H
#define VFM_DATA_SELECTION_H

#include <jansson.h>
#include <stdint.h>

#include "core/error.h"
#include "data/loader/length_index.h"
#include "data/energon/metadataset.h"

typedef struct SelDataset {
    char root[1024];
    LengthIndex *index;
    int64_t entry_base;   /* global entry id of its sample i: entry_base + i */
    int shard_base;       /* global shard number of its shard j: shard_base + j */
} SelDataset;

typedef struct SelLeaf {
    int dataset;          /* into Selection.datasets */
    char name[256];       /* the dataset name in sample uids: the directory's basename */
    char split[128];
    double weight, repetitions;
    json_t *subflavors;   /* dataset.yaml's under the references' (object; owned) */
    int64_t n_entries;
    int64_t *entries;     /* [n_entries] length-index entries (of its dataset) in order */
} SelLeaf;

typedef struct Selection {
    DatasetSpec *spec;
    int n_datasets;
    SelDataset *datasets;
    int n_leaves;
    SelLeaf *leaves;
    int64_t n_entries;    /* samples in all the datasets' indexes */
    int n_shards;         /* shards in all the datasets' indexes */
} Selection;

/* Opens `split` of path. dir_name: the uid name of a plain directory path (basename of dataset.path
 * as given); metadataset leaves use their directory's basename. threads: length-index readers.
 * verbose: log warnings (rank 0). Errors: VFM_ERR_USAGE for what the user can fix (a missing
 * split or shard, a typed dataset, a bad metadataset), naming the file. */
vfm_status selection_open(Selection **out, const char *path, const char *split, const char *dir_name, int threads,
                          int verbose);
void selection_free(Selection *sel);

/* The dataset that global entry id belongs to (its local id in *local). */
int selection_dataset_of(const Selection *sel, int64_t id, int64_t *local);

#endif
