/* Picture files for people to look at: 8-bit RGB PNG (stored deflate, no zlib) and animated
 * GIF89a (fixed 256-colour palette, LZW), plus grid tiling and integer upscaling. Both writers
 * write "<path>.tmp" and rename it over <path>, so a reader never sees half a file. */
#ifndef VFM_DATA_IMAGE_IO_H
#define VFM_DATA_IMAGE_IO_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

typedef struct {
    int width, height;
    uint8_t *pixels; /* [height, width, 3] RGB, row-major */
} RgbImage;

/* Zero-filled (black) image; rgb_image_free releases it and zeroes the struct. */
vfm_status rgb_image_alloc(RgbImage *img, int width, int height);
void rgb_image_free(RgbImage *img);

/* One frame t of planar float pixels in [0,1] -> 8-bit (clamped, rounded to nearest).
 * planar: [3, frames, height, width]; img must be height x width. */
void rgb_image_from_planar(RgbImage *img, const float *planar, int frames, int t);

/* Tiles n images into a grid of `cols` columns. Every cell is as large as the largest tile;
 * a tile sits at its cell's top-left; `gap` pixels of gap_rgb separate cells and frame the grid. */
vfm_status rgb_image_grid(const RgbImage *tiles, int n, int cols, int gap, const uint8_t gap_rgb[3],
                          RgbImage *out);
/* Nearest-neighbour upscale by an integer factor >= 1. */
vfm_status rgb_image_upscale(const RgbImage *img, int factor, RgbImage *out);

vfm_status png_write_rgb(const char *path, const RgbImage *img);
/* The same PNG file in memory (*out malloc'd, the caller frees it). */
vfm_status png_encode_rgb(const RgbImage *img, uint8_t **out, size_t *len);

/* Checksums as PNG and zlib define them (exposed for the tests). */
uint32_t png_crc32(uint32_t crc, const uint8_t *data, size_t n); /* start with crc = 0 */
uint32_t zlib_adler32(uint32_t adler, const uint8_t *data, size_t n); /* start with adler = 1 */

/* Animated GIF of n_frames equally sized frames; delay_cs: per-frame delay in 1/100 s;
 * loop_count 0 loops forever. Colours map to the nearest entry of gif_palette. */
vfm_status gif_write_rgb(const char *path, const RgbImage *frames, int n_frames, int delay_cs, int loop_count);

/* The fixed palette: entries 0..215 a 6x6x6 cube (levels 0,51,...,255; index 36r+6g+b),
 * 216..255 a grey ramp of 40 levels strictly between the cube's greys. */
void gif_palette(uint8_t palette[256][3]);
/* Index of the nearest palette entry (squared RGB distance; exact). */
int gif_palette_index(uint8_t r, uint8_t g, uint8_t b);

/* GIF-flavoured LZW (LSB-first codes, clear code first, a clear code whenever the 12-bit table
 * fills, end code last) of indices < 2^min_code_size, min_code_size in [2, 8].
 * *out is malloc'd; the caller frees it. */
vfm_status gif_lzw_encode(const uint8_t *indices, size_t n, int min_code_size, uint8_t **out, size_t *out_len);

#endif
