/* `vfm prepare images|videos`: a folder of pictures (PNG, JPEG) or video files with captions
 * beside them (data/prepare/media_inputs.h) -> a pixel-space WebDataset like the synthetic set's
 * (docs/prepare.md): every input centre-cropped to the aspect of the nearest bucket and resampled
 * to it (data/media/buckets.h, data/media/resample.h), videos sampled in time at a target fps
 * (data/media/video_decode.h), mapped to latents by the PixelLatentMap (data/synthetic/synthetic.h), the caption
 * embedded by the built-in caption encoder (or a NAME.npy embedding taken as is).
 *
 * Sample n (key "%08d" of n) is the n-th input in byte order of its path under the input folder:
 *   latent.npy  float32 [3, T, H/factor, W/factor]   T = 1 for a picture, <= frames for a video
 *   text.npy    float32 [L, d_text] (the caption encoder), or NAME.npy's bytes (--text-npy)
 *   json        {"caption", "fps", "pixel_space", "source", "source_size", "bucket", ["frames",
 *               "source_fps"], "index", ...the other keys of NAME.json}
 * The whole dataset is written into a hidden sibling of DIR and renamed to DIR at the end: an
 * unreadable input, an interruption or any error leaves no DIR (and no half dataset) behind.
 * The bytes written are a pure function of the inputs and options (not of the thread count). */
#ifndef VFM_DATA_PREPARE_MEDIA_H
#define VFM_DATA_PREPARE_MEDIA_H

#include <signal.h>
#include <stdint.h>

#include "core/error.h"
#include "data/media/buckets.h"
#include "data/prepare/media_inputs.h"
#include "data/prepare/prepare_output.h"

#define PREPARE_MEDIA_DEFAULT_FPS 8.0
#define PREPARE_MEDIA_DEFAULT_FRAMES 16
#define PREPARE_MEDIA_MAX_FRAMES 4096

typedef struct {
    const char *in_dir, *out_dir;
    const char *buckets;        /* "HxW,HxW,..." (pixels); NULL: BUCKETS_DEFAULT */
    int factor;                 /* PixelLatentMap factor, 1..16; every bucket side must divide by it */
    int d_text;                 /* caption embedding width, 1..65536 (not with text_npy) */
    int text_npy;               /* take NAME.npy beside each input as its text embedding */
    int allow_uncaptioned;      /* an input without caption gets the empty caption (the null prompt) */
    int samples_per_shard;      /* >= 1 */
    int force;                  /* replace a dataset vfm prepare wrote in out_dir */
    double fps;                 /* videos: frames per second sampled, (0, 1000] */
    int frames;                 /* videos: at most this many frames per clip, 1..PREPARE_MEDIA_MAX_FRAMES */
    PrepareProgressFn progress; /* may be NULL */
    void *progress_ctx;
    volatile sig_atomic_t *cancel; /* when set non-zero (a signal handler), the run stops and cleans up */
} PrepareMediaOptions;

typedef struct {
    PrepareProgress progress;     /* final counts */
    BucketSet buckets;
    int64_t bucket_counts[BUCKETS_MAX];
    int64_t other_files;          /* files under in_dir that are neither inputs nor sidecars */
    int64_t uncaptioned;          /* inputs without a caption (allow_uncaptioned) */
    int64_t frames;               /* videos: frames written in all */
    int d_text;                   /* text embedding width of the set */
} PrepareMediaResult;

/* factor 2, d_text 64, samples_per_shard 256, fps 8, frames 16, default buckets, nothing else. */
PrepareMediaOptions prepare_media_defaults(void);

/* Bad options are VFM_ERR_USAGE (nothing touched); an unreadable input is VFM_ERR_FORMAT or
 * VFM_ERR_IO naming the file; an interruption is VFM_ERR_IO ("interrupted"). On any error nothing
 * is left in or beside out_dir. */
vfm_status prepare_images(const PrepareMediaOptions *o, PrepareMediaResult *result);
vfm_status prepare_videos(const PrepareMediaOptions *o, PrepareMediaResult *result);

#endif
