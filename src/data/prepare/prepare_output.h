/* Writing a dataset made by `vfm prepare` (synthetic, images, videos): the shard sink (samples in
 * key order into shard-%06d.tar of K samples each, every shard closed under its final name with its
 * Energon .tar.idx), the files prepare owns in an output directory, the staged output directory of
 * `prepare images|videos` (everything is written into a hidden sibling and renamed into place at
 * the end, so DIR holds a whole dataset or none), vfm_dataset.json, and progress reports. */
#ifndef VFM_DATA_PREPARE_OUTPUT_H
#define VFM_DATA_PREPARE_OUTPUT_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "data/formats/tar.h"

#define PREPARE_DATASET_FILE "vfm_dataset.json"
#define PREPARE_SHARD_PATTERN "shard-%06d.tar"
#define PREPARE_MAX_SAMPLES 100000000LL /* keys are 8 digits */
#define PREPARE_MAX_SHARDS 1000000      /* shard names have 6 digits */

typedef struct {
    int64_t samples_done, samples_total;
    int shards_done;       /* shards closed: complete on disk under their final names */
    int64_t bytes_written; /* bytes of those shards */
    double seconds;        /* since the command started */
} PrepareProgress;

/* Called after every sample written, in sample order, from the calling thread. */
typedef void (*PrepareProgressFn)(void *ctx, const PrepareProgress *progress);

/* ---- shards ---- */

typedef struct {
    const char *name; /* part name: the member is "<key>.<name>" */
    const void *data;
    size_t size;
} SinkPart;

typedef struct {
    char dir[1024];
    int samples_per_shard;
    int64_t samples;      /* samples added */
    int shards_done;      /* shards closed */
    int64_t bytes_written;
    TarWriter *writer;    /* the open shard, or NULL */
    char shard_path[1100];
} ShardSink;

void shard_sink_init(ShardSink *s, const char *dir, int samples_per_shard);
/* Adds sample number samples (key "%08d") with its parts; opens a shard at every multiple of K and
 * closes it after K samples. */
vfm_status shard_sink_add(ShardSink *s, const SinkPart *parts, int n_parts);
/* Closes the last, partly filled shard. */
vfm_status shard_sink_finish(ShardSink *s);
/* Drops a shard being written (its temporary file); shards already closed stay. */
void shard_sink_discard(ShardSink *s);

/* ---- output directories ---- */

/* A name prepare writes into DIR: shard-*.tar, shard-*.tar.idx, their temporary files,
 * vfm_dataset.json, and the metadata directories .vfm/ (length index) and .nv-meta/ (Energon). */
int prepare_is_own_file(const char *name);

/* `prepare synthetic`: refuses a directory holding a dataset (*.tar or vfm_dataset.json) unless
 * force; with force removes what prepare wrote (and .nv-meta/); a *.tar prepare did not name
 * refuses even with force. */
vfm_status prepare_clear_dir(const char *dir, int force);

/* `prepare images|videos`: the dataset is written into `tmp` (a hidden sibling of DIR,
 * ".<name>.vfm-prepare-<pid>") and renamed to DIR by staged_dir_commit. DIR may be absent or empty;
 * holding only files prepare owns it is replaced when force (refused otherwise); holding anything
 * else it is refused. */
typedef struct {
    char final[1024], tmp[1100];
} StagedDir;

vfm_status staged_dir_begin(StagedDir *d, const char *out_dir, int force);
/* Renames tmp to final (an older dataset there is moved aside and removed after). */
vfm_status staged_dir_commit(StagedDir *d, int force);
/* Removes tmp and everything in it. */
void staged_dir_abort(StagedDir *d);

/* Writes a JSON document indented by 2, keys in insertion order, ending in a newline, atomically
 * to dir/vfm_dataset.json. Steals root. */
vfm_status prepare_write_dataset_json(const char *dir, void *root /* json_t* */);

/* The latent sizes a prepared dataset holds: each sample is [channels, T, H, W] with T <= max_t,
 * (H, W) one of hw[0..n) (latent pixels). */
typedef struct PrepareLatents {
    int channels, d_text, max_t, n;
    const int (*hw)[2];
} PrepareLatents;
/* Adds to vfm_dataset.json's root the keys `vfm train` needs to train on it, as "train":
 * {"model.in_channels": 3, ...} (docs/prepare.md "Training on it"): the channels in and out, the
 * text width, patch 2 over H and W when every latent side is even (else 1) and 1 over T, and a pack
 * length that holds the largest sample (its tokens padded to 64; at least 1024). */
void prepare_add_train_keys(void *root /* json_t* */, const PrepareLatents *l);
/* DIR/vfm_dataset.json's "train" keys as "key=value" lines into out[0..max); their count (0: no file
 * or no keys). */
int prepare_read_train_keys(const char *dir, char (*out)[160], int max);

#endif
