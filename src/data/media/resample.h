/* Resampling a rectangle of an RGB picture to a fixed size, per axis: an area (box) filter when
 * that axis shrinks (each output pixel is the exact average of the source area it covers, partial
 * pixels weighted by their covered fraction), Catmull-Rom bicubic (Keys, a = -0.5; edges
 * replicated) when it grows or keeps its size at a fractional offset. Values are averaged as
 * stored (sRGB-encoded, no linearisation), the way image libraries usually resize; the result
 * is clamped to [0, 1] (bicubic can overshoot at edges). */
#ifndef VFM_DATA_RESAMPLE_H
#define VFM_DATA_RESAMPLE_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "data/media/buckets.h"

/* An interleaved RGB picture, 8 or 16 bits per channel (16 bits: native-endian uint16). */
typedef struct {
    int width, height;
    int depth;       /* 8 or 16 */
    size_t stride;   /* bytes from one row to the next (>= width * 3 * depth / 8) */
    uint8_t *data;   /* owned when made by pixel_image_alloc */
} PixelImage;

vfm_status pixel_image_alloc(PixelImage *img, int width, int height, int depth);
void pixel_image_free(PixelImage *img);

/* Resamples the rectangle crop of src (inside the picture) to out_h x out_w pixels.
 * out: [3, out_h, out_w] planar float in [0, 1] (channel stride out_stride floats, so frames of a
 * [3, T, H, W] video can be written in place: pass T * out_h * out_w; 0 means out_h * out_w). */
vfm_status resample_crop(const PixelImage *src, const CropRect *crop, int out_h, int out_w, float *out,
                         size_t out_stride);

#endif
