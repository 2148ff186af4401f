/* Writing the Energon metadata of a dataset directory, byte for byte what `energon prepare`
 * (megatron-energon ENERGON_FORMAT_VERSION) writes for the same shards with a train/val/test
 * ratio and the crude sample type: `.nv-meta/.info.json` (and `.info.yaml` when one exists),
 * `index.sqlite`, `index.uuid`, `split.yaml`, `dataset.yaml`, and each shard's `.tar.idx`.
 * The shards are ordered by path components as Python sorts paths; that order is tar_file_id. */
#ifndef VFM_DATA_ENERGON_WRITE_H
#define VFM_DATA_ENERGON_WRITE_H

#include "core/error.h"

/* The megatron-energon release whose format vfm writes and was checked against (written as
 * energon_version in .info.json: Energon only displays it). */
#define ENERGON_FORMAT_VERSION "7.4.1"

typedef struct EnergonWriteOptions {
    int has_split;     /* a ratio was given (--split); else split.yaml is written only when absent, as 1,0,0 */
    double split[3];   /* train, val, test ratios (any scale) */
    int force;         /* replace an existing split.yaml / split.json / dataset.yaml */
} EnergonWriteOptions;

typedef struct EnergonWriteReport {
    int n_shards;
    long long n_samples;
    int split_written, split_kept;     /* split.yaml written / an existing split file kept */
    int dataset_written, dataset_kept; /* dataset.yaml written / an existing one kept */
    int idx_rewritten;                 /* .tar.idx files that were missing or differed */
    long long split_shards[3];         /* shards per train/val/test when the split was written */
} EnergonWriteReport;

/* Parses "8,1,1" / "0.8, 0.1, 0.1" (three non-negative numbers, sum > 0) as energon prepare does.
 * VFM_ERR_USAGE naming --split otherwise. */
vfm_status energon_parse_split(const char *text, double out[3]);

/* Writes the metadata of root for its shards rel[n] (paths relative to root, any order). Refuses
 * (VFM_ERR_USAGE, nothing written) to replace an existing split file when a ratio was given
 * without force; refuses (VFM_ERR_FORMAT, nothing written) a shard that is empty or unreadable,
 * or a sample key used twice, which Energon cannot index. */
vfm_status energon_write_index(const char *root, const char *const *rel, int n, const EnergonWriteOptions *opt,
                               EnergonWriteReport *report);

/* The shard order Energon uses: by path components (Python's sorted() of paths). */
int energon_path_cmp(const char *a, const char *b);

#endif
