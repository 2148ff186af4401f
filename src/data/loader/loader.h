/* The WebDataset loader's constructors, and its extras beyond the PackSource interface (pack_source.h): the dataset's
 * pixel_space mapping, the samples it skipped, and read counters for `vfm data bench`. Each
 * function takes any PackSource and answers "nothing" for one that is not a WebDataset source. */
#ifndef VFM_DATA_LOADER_H
#define VFM_DATA_LOADER_H

#include <stdint.h>

#include "core/config.h"
#include "data/loader/encode.h"
#include "data/loader/pack_source.h"
#include "data/loader/plan.h"

/* The pixel_space JSON object (text) of the dataset: from the first sample, in shard order, whose
 * json has one. NULL when no sample has one. Owned by the source. */
const char *loader_pixel_space(const PackSource *src);

typedef struct LoaderSkip {
    char source[192];  /* "shard.tar:key", shard relative to dataset.path */
    char reason[256];
    int at_load;       /* 0: found by the length index or the config; 1: when the sample was read */
    int64_t entry;     /* its place in the dataset (the selection's entry id) */
} LoaderSkip;
/* The samples skipped so far (each named once), in the order they were found: *out is a
 * malloc'd copy (free it); returns the count. (LoaderInfo.skips_unlisted counts those the list could
 * not hold; a warning named the first.) */
int loader_skipped(const PackSource *src, LoaderSkip **out);

typedef struct LoaderInfo {
    int n_datasets;         /* dataset directories read (a metadataset may name several) */
    int n_shards;           /* shards in their length indexes */
    int64_t n_samples;      /* samples in their length indexes (all splits) */
    int64_t n_usable;       /* samples in every epoch plan */
    int64_t skips_unlisted; /* skipped samples the skip list could not hold (out of memory) */
    int64_t bytes_read;     /* sample bytes read from the shards so far */
    int64_t epoch;          /* epoch of the last pack delivered */
    int64_t epoch_packs;    /* global packs in epoch 0 */
    int pad_multiple;
    int num_workers;
    const char *index_path; /* the (first dataset's) length index cache file */
    int index_origin;       /* LengthIndexOrigin */
} LoaderInfo;
/* 0 (and *info zeroed) when src is not a WebDataset source. */
int loader_info(const PackSource *src, LoaderInfo *info);

/* What a WebDataset source reads: encode_config_from's keys, dataset.num_workers, shuffle,
 * packing_buffer_size, max_skip_fraction, path, split and rng.seed — nothing of the mock set's. */
typedef struct LoaderConfig {
    EncodeConfig ec;
    PlanConfig pc;
    int n_workers;
    double max_skip_fraction; /* dataset.max_skip_fraction */
    char path[1024];          /* dataset.path */
    char split[128];          /* dataset.split */
} LoaderConfig;
vfm_status loader_config_from(LoaderConfig *lc, const Config *cfg);
/* The source from read keys (webdataset_source_open without the config). */
vfm_status webdataset_source_from(PackSource **out, const LoaderConfig *lc, const char *split, int validation, int rank,
                                  int world);

/* WebDataset shards (or a metadataset) at dataset.path: training on dataset.split. */
vfm_status webdataset_source_create(PackSource **out, const Config *cfg, int rank, int world);
/* The same for `split`; validation != 0: unshuffled and unblended (see pack_source_create_split). */
vfm_status webdataset_source_open(PackSource **out, const Config *cfg, const char *split, int validation, int rank,
                                  int world);

#endif
