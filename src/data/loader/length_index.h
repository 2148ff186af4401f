/* The length index of a WebDataset directory: per sample (shard, index in the shard, key, latent
 * shape, text rows, status) for every shard `**.tar` under the root, in sorted relative-path
 * order. Built on first use by reading only what it needs of each sample (the latent's .npy
 * header, the text's zero tail, the json), cached beside the shards in
 * `<root>/.vfm/length_index.bin` and reused while every shard keeps its size and mtime (a changed,
 * new or removed shard is re-read, the rest kept). Kept in memory when the directory is read-only.
 * What it records does not depend on the config; encode_lengths() applies the config. */
#ifndef VFM_DATA_LENGTH_INDEX_H
#define VFM_DATA_LENGTH_INDEX_H

#include <stdint.h>

#include "core/error.h"

typedef struct LengthShard {
    char *rel;            /* path relative to the root, '/'-separated */
    int64_t size, mtime_ns;
    int64_t first, count; /* its samples are entries [first, first + count) */
    char *error;          /* why the shard cannot be read, or NULL */
    char *pixel_space;    /* pixel_space JSON of its first sample that has one, or NULL */
} LengthShard;

typedef struct LengthEntry {
    int32_t shard;        /* index into shards */
    int32_t index;        /* sample index in the shard */
    int32_t shape[4];     /* latent C, T, H, W (an image has T = 1) */
    int32_t text_width;   /* d of the text part; 0 when there is none */
    int32_t text_len;     /* rows of the text part; 0 when there is none (the null prompt) */
    int32_t text_real;    /* rows without the all-zero tail (>= 1 when text_len > 0) */
    int32_t status;       /* EncodeSkip found while reading (ENC_OK when usable) */
    const char *key;
    const char *reason;   /* why it is skipped, or NULL */
} LengthEntry;

typedef enum {
    LENGTH_INDEX_LOADED,  /* the cache was current */
    LENGTH_INDEX_WRITTEN, /* (re)built and written to cache_path */
    LENGTH_INDEX_MEMORY,  /* (re)built, kept in memory: the cache could not be written */
} LengthIndexOrigin;

typedef struct LengthIndex {
    char root[1024];
    char cache_path[1100];
    LengthIndexOrigin origin;
    int shards_read;      /* shards read this time (the others came from the cache) */
    int n_shards;
    LengthShard *shards;
    int64_t n_samples;
    LengthEntry *samples;
    void *strings;        /* owns keys and reasons */
} LengthIndex;

/* Opens the index of the dataset at root: loads the cache, re-reads the shards it does not
 * describe, writes it back when anything changed (or always with force_rebuild, which also
 * re-reads every shard). threads: shards read in parallel (>= 1). Errors: VFM_ERR_USAGE when root
 * is not a directory or holds no shard. A shard that cannot be read is recorded (error), not fatal. */
vfm_status length_index_open(LengthIndex **out, const char *root, int force_rebuild, int threads);
void length_index_free(LengthIndex *li);
/* The dataset's pixel_space JSON: that of the first shard that has one; NULL when none. */
const char *length_index_pixel_space(const LengthIndex *li);
/* The shard-relative path of entry i's shard. */
const char *length_index_shard_of(const LengthIndex *li, int64_t i);

#endif
