/* A generated latent written for people to look at: for data in vfm's pixel space (3 channels and
 * a pixel mapping) a PNG (one frame), or an animated GIF and an MP4 (several), upscaled for viewing.
 * Used by `vfm sample` and by validation during training. */
#ifndef VFM_SAMPLE_PICTURE_H
#define VFM_SAMPLE_PICTURE_H

#include <stddef.h>
#include <stdint.h>

#include "data/media/image_io.h"
#include "data/synthetic/synthetic.h"

/* One frame t of a pixel-space latent [3, T, H, W] as an 8-bit image upscaled by zoom. */
vfm_status sample_frame_image(const PixelLatentMap *map, const float *latent, const int32_t shape[4], int frame,
                              int zoom, RgbImage *out);
typedef struct SamplePictureFiles {
    char picture[256];  /* <stem>.png or <stem>.gif */
    char video[256];    /* <stem>.mp4, or "" */
    const char *codec;  /* the MP4's encoder (data/media/video_encode.h) */
} SamplePictureFiles;

/* Writes <dir>/<stem>.png (T = 1) or <stem>.gif (T > 1) and, for T > 1 with fps > 0, also
 * <stem>.mp4 playing at fps; returns the first frame in *first (when not NULL; the caller frees it)
 * and the names in *files (when not NULL). */
vfm_status sample_picture_write(const char *dir, const char *stem, const PixelLatentMap *map, const float *latent,
                                const int32_t shape[4], int zoom, double fps, RgbImage *first,
                                SamplePictureFiles *files);

#endif
