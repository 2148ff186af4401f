/* Small WebDataset fixtures written by the tests themselves (tar_writer + npy_encode): samples
 * with latents of any shape, optional text embeddings with zero tails, optional json, and
 * deliberately broken ones. Values are deterministic in (seed). */
#ifndef VFM_TEST_DATA_FIXTURE_H
#define VFM_TEST_DATA_FIXTURE_H

#include <stdint.h>

#include "core/config.h"
#include "core/error.h"

/* FIX_BAD_PTH: a `pth` part that is not a torch.save file (real ones: tests/fixtures/torch) */
typedef enum { FIX_NPY = 0, FIX_SAFETENSORS, FIX_BAD_PTH, FIX_NONE } FixtureLatentFormat;

typedef struct FixtureSample {
    char key[64];
    int latent_ndim;            /* 3 [C,H,W], 4 [C,T,H,W] or 5 [1,C,T,H,W] */
    int64_t latent_shape[5];
    FixtureLatentFormat latent_format;
    int text_rows;              /* 0: no text part */
    int text_zero_tail;         /* trailing all-zero rows among text_rows */
    int text_width;
    const char *json;           /* json part text; when NULL, json_text (empty: no json part) */
    char json_text[192];
    uint64_t seed;
    float poison;               /* non-zero: latent element 0 gets this value (NaN, 1e4, ...) */
} FixtureSample;

/* Writes a shard of n samples at path (creating its directory). */
vfm_status fixture_write_shard(const char *path, const FixtureSample *samples, int n);

/* The latent of a sample as written: [numel] floats (caller frees). */
float *fixture_latent(const FixtureSample *s, int64_t *numel);

/* Sample i of the mixed set: images [C,H,W] and videos [C,T,H,W] (T 2..5) of sides 8..24, text
 * 2..7 rows (some with zero tails, some without text), json on most. key = "s%05d". */
FixtureSample fixture_mixed_sample(int64_t i, int channels, int text_width);

/* A dataset of n_shards shards (the last one in a subdirectory "sub/") of per_shard mixed samples
 * each, numbered consecutively; shard k is "shard-%02d.tar". Sample 1 carries pixel_space
 * {"factor":2,"offset":0.5,"scale":1}. */
vfm_status fixture_mixed_dataset(const char *dir, int n_shards, int per_shard, int channels, int text_width);

/* Config for the fixtures: in_channels, crossattn width, patch 2 (pt 1), budget, pad 64, the
 * given overrides on top ("a.b=v", NULL-terminated list may be NULL). */
Config *fixture_config(const char *dataset_dir, int channels, int text_width, int budget, const char *const *extra);

/* 1 when directories a and b hold the same file names (not starting with '.', at most 32) with the
 * same bytes; *n_files gets a's count. */
int fixture_same_files(const char *a, const char *b, int *n_files);

#endif
