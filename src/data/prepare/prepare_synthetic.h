/* `vfm prepare synthetic`: renders the moving-shapes set (data/synthetic/synthetic.h), maps the frames to
 * latents, encodes the captions and writes WebDataset shards plus a `vfm_dataset.json` summary.
 *
 * Layout of DIR (docs/synthetic-dataset.md):
 *   shard-000000.tar, shard-000001.tar, ...  samples_per_shard samples each (the last may hold fewer),
 *                                            each with its Energon `.tar.idx`
 *   vfm_dataset.json                         options and vocabulary; written last
 * Sample n (key "%08d" of n) is image n for n < images, else video n - images. Its parts:
 *   latent.npy  float32 [3, T, H/factor, W/factor]  the frames through the PixelLatentMap
 *   text.npy    float32 [L, d_text]                 caption_encode of the caption
 *   json        {"caption","fps","pixel_space","shape","colour","motion","index"}
 * The bytes written are a pure function of the options (not of the thread count). */
#ifndef VFM_DATA_PREPARE_SYNTHETIC_H
#define VFM_DATA_PREPARE_SYNTHETIC_H

#include <stdint.h>

#include "core/error.h"
#include "data/prepare/prepare_output.h"

#define PREPARE_IMAGE_FPS 30 /* design §3's default fps: an image behaves like a sample with no fps */
#define PREPARE_VIDEO_FPS 8

typedef struct {
    const char *out_dir;     /* created (with parents) when missing */
    int64_t images, videos;  /* >= 0 each, 1..PREPARE_MAX_SAMPLES-1 together */
    uint64_t seed;           /* 0..2^63-1 */
    int d_text;              /* text embedding width, 1..65536 */
    int factor;              /* PixelLatentMap factor: must divide every canvas side (1, 2, 4, 8, 16) */
    int samples_per_shard;   /* >= 1 */
    int supersample;         /* anti-aliasing samples per pixel side, 1..16 */
    float position_spread;   /* SyntheticConfig.position_spread: 1 anywhere, 0 every still in the middle */
    int force;               /* replace the shards already in out_dir */
    PrepareProgressFn progress; /* may be NULL */
    void *progress_ctx;
} PrepareSyntheticOptions;

/* images 0, videos 0, seed 0, d_text 64, factor 2, samples_per_shard 256, supersample 4, position_spread 1, no force. */
PrepareSyntheticOptions prepare_synthetic_defaults(void);

/* Builds the set. Bad options are VFM_ERR_USAGE (nothing is touched); a directory that already
 * holds shards (any *.tar) or a vfm_dataset.json is VFM_ERR_IO unless force, which first removes
 * shard-*.tar, their .tar.idx, temporary files of an interrupted run, vfm_dataset.json and .nv-meta/
 * (other *.tar files are never removed: they make it VFM_ERR_IO). *result (may be NULL) gets the
 * final counts. On failure the shards already closed stay, but vfm_dataset.json is not written. */
vfm_status prepare_synthetic(const PrepareSyntheticOptions *o, PrepareProgress *result);

#endif
