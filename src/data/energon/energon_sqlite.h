/* Energon's `.nv-meta/index.sqlite` (research/energon.md §1; megatron-energon 7.4 indexing.py):
 * table `samples(tar_file_id, sample_key UNIQUE, sample_index, byte_offset, byte_size)` and table
 * `sample_parts(tar_file_id, sample_index, part_name, content_byte_offset, content_byte_size)`
 * with Energon's three indexes. Written by `vfm data index`; read by the length index, which takes
 * a shard's members from it instead of walking the shard's tar headers. */
#ifndef VFM_DATA_ENERGON_SQLITE_H
#define VFM_DATA_ENERGON_SQLITE_H

#include <stdint.h>

#include "core/error.h"
#include "data/formats/tar.h"

/* One shard's rows: its samples (key, byte range) and their parts (payload range). */
typedef struct EnergonShardRows {
    const char *rel;
    int64_t n_samples;
    char **keys;              /* [n_samples] */
    int64_t *byte_offset;     /* [n_samples] first header of the sample */
    int64_t *byte_size;       /* [n_samples] up to the next sample (or the end of the last member) */
    int64_t n_parts;
    int64_t *part_sample;     /* [n_parts] sample index in the shard */
    char **part_name;         /* [n_parts] */
    int64_t *part_offset;     /* [n_parts] first payload byte */
    int64_t *part_size;       /* [n_parts] payload bytes */
    int64_t end_offset;       /* end of the last member */
} EnergonShardRows;

/* Scans a shard's tar headers into rows (rel is kept as a pointer). */
vfm_status energon_shard_rows_scan(EnergonShardRows *rows, const char *path, const char *rel);
void energon_shard_rows_free(EnergonShardRows *rows);

/* VFM_ERR_FORMAT naming the key and its two shards when a sample key appears twice in shards[n]. */
vfm_status energon_check_unique_keys(const EnergonShardRows *shards, int n);

/* Writes the index for shards[n] (tar_file_id = position) to path, through a temporary file and a
 * rename. A sample key that appears twice is VFM_ERR_FORMAT naming it and its shards (Energon
 * requires unique keys). */
vfm_status energon_sqlite_write(const char *path, const EnergonShardRows *shards, int n);

/* Calls fn for every part of shard tar_file_id listed in the sqlite file at path, in tar order, as
 * tar_scan would (header_offset = -1: unknown). The rows must agree with the shard's `.tar.idx`
 * (idx[n_idx]: samples n_idx - 1, each starting at idx[i], each part inside its sample's range);
 * otherwise VFM_ERR_FORMAT ("stale"). VFM_ERR_IO when the file cannot be opened or queried. */
vfm_status energon_sqlite_scan(const char *path, int tar_file_id, const uint64_t *idx, int64_t n_idx, TarScanFn fn,
                               void *ctx);

#endif
