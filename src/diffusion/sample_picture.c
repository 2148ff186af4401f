/* Pictures of generated pixel-space latents (see sample_picture.h). */
#include "sample_picture.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fileutil.h"
#include "data/media/video_encode.h"

vfm_status sample_frame_image(const PixelLatentMap *map, const float *latent, const int32_t shape[4], int frame,
                              int zoom, RgbImage *out) {
    memset(out, 0, sizeof *out);
    int64_t n = (int64_t)shape[0] * shape[1] * shape[2] * shape[3];
    float *pixels = malloc((size_t)n * sizeof(float));
    RgbImage small;
    memset(&small, 0, sizeof small);
    vfm_status s = pixels ? VFM_OK : vfm_fail(VFM_ERR_NOMEM, "picture: %lld pixels", (long long)n);
    if (s == VFM_OK) s = latent_to_pixel(map, latent, shape[1], shape[2], shape[3], pixels);
    if (s == VFM_OK) s = rgb_image_alloc(&small, shape[3], shape[2]);
    if (s == VFM_OK) {
        rgb_image_from_planar(&small, pixels, shape[1], frame);
        s = rgb_image_upscale(&small, zoom, out);
    }
    rgb_image_free(&small);
    free(pixels);
    return s;
}

vfm_status sample_picture_write(const char *dir, const char *stem, const PixelLatentMap *map, const float *latent,
                                const int32_t shape[4], int zoom, double fps, RgbImage *first,
                                SamplePictureFiles *files) {
    if (shape[0] != 3) return vfm_fail(VFM_ERR_USAGE, "picture: %d channels; pixel space has 3", shape[0]);
    int frames = shape[1];
    RgbImage *img = calloc((size_t)frames, sizeof *img);
    if (!img) return vfm_fail(VFM_ERR_NOMEM, "picture: %d frames", frames);
    SamplePictureFiles local;
    if (!files) files = &local;
    memset(files, 0, sizeof *files);
    vfm_status s = VFM_OK;
    for (int f = 0; f < frames && s == VFM_OK; f++) s = sample_frame_image(map, latent, shape, f, zoom, &img[f]);
    char path[1400];
    snprintf(files->picture, sizeof files->picture, "%s.%s", stem, frames == 1 ? "png" : "gif");
    path_join(path, sizeof path, dir, files->picture);
    if (s == VFM_OK) s = frames == 1 ? png_write_rgb(path, &img[0]) : gif_write_rgb(path, img, frames, 12, 0);
    if (s == VFM_OK && frames > 1 && fps > 0) {
        snprintf(files->video, sizeof files->video, "%s.mp4", stem);
        path_join(path, sizeof path, dir, files->video);
        s = mp4_write_rgb(path, img, frames, fps, &files->codec);
    }
    for (int f = 0; f < frames; f++) {
        if (f == 0 && first && s == VFM_OK) *first = img[0];
        else rgb_image_free(&img[f]);
    }
    free(img);
    return s;
}
