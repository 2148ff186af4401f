/* Test pictures written through libpng and libjpeg directly (not through vfm), so the decoder is
 * checked against files it did not make: PNGs of any colour type, bit depth and interlacing, with
 * an optional eXIf chunk; JPEGs with an optional EXIF orientation; and deterministic patterns. */
#ifndef VFM_TEST_PICTURE_FIXTURE_H
#define VFM_TEST_PICTURE_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

/* An EXIF block (TIFF, little-endian) holding only the orientation tag; returns its length (26). */
size_t fixture_exif_block(int orientation, uint8_t out[32]);

/* Writes a PNG: samples are `channels` values per pixel (1 grey, 2 grey+alpha, 3 RGB, 4 RGBA, or 1
 * palette index when palette != NULL) of bit_depth bits, given as uint16 in [0, 2^bit_depth), row
 * major. palette: n_palette RGB triples. orientation > 1 adds an eXIf chunk. Returns 0 on success. */
int fixture_write_png(const char *path, int width, int height, int channels, int bit_depth, const uint16_t *samples,
                      const uint8_t *palette, int n_palette, int interlaced, int orientation);

/* Writes an RGB (components 3) or grey (1) JPEG at the given quality; orientation > 1 adds an APP1 EXIF. */
int fixture_write_jpeg(const char *path, int width, int height, int components, const uint8_t *pixels, int quality,
                       int orientation);

/* A smooth, position-dependent RGB pattern: pixel (x, y) of a w x h picture, channel c, in 0..255. */
uint8_t fixture_pattern(int x, int y, int c, int w, int h, int seed);

#endif
