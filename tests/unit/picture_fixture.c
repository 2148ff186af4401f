/* Test pictures through libpng / libjpeg (see picture_fixture.h). */
#include "picture_fixture.h"

#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <png.h>

size_t fixture_exif_block(int orientation, uint8_t out[32]) {
    static const uint8_t head[] = {'I', 'I', 42, 0, 8, 0, 0, 0, /* IFD0 at 8 */ 1, 0, /* one entry */
                                   0x12, 0x01, 3, 0, 1, 0, 0, 0, /* tag 0x0112, SHORT, count 1 */
                                   0, 0, 0, 0, /* value (patched) */ 0, 0, 0, 0 /* no next IFD */};
    memcpy(out, head, sizeof head);
    out[18] = (uint8_t)orientation;
    return sizeof head;
}

int fixture_write_png(const char *path, int width, int height, int channels, int bit_depth, const uint16_t *samples,
                      const uint8_t *palette, int n_palette, int interlaced, int orientation) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png_create_info_struct(png);
    int type = palette ? PNG_COLOR_TYPE_PALETTE
               : channels == 1 ? PNG_COLOR_TYPE_GRAY
               : channels == 2 ? PNG_COLOR_TYPE_GRAY_ALPHA
               : channels == 3 ? PNG_COLOR_TYPE_RGB
                               : PNG_COLOR_TYPE_RGB_ALPHA;
    size_t row_bytes = ((size_t)width * channels * bit_depth + 7) / 8;
    uint8_t *row = calloc(row_bytes, 1);
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_write_struct(&png, &info);
        free(row);
        fclose(f);
        return -1;
    }
    png_init_io(png, f);
    png_set_IHDR(png, info, (png_uint_32)width, (png_uint_32)height, bit_depth, type,
                 interlaced ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    if (palette) {
        png_color pal[256];
        for (int i = 0; i < n_palette; i++) pal[i].red = palette[3 * i], pal[i].green = palette[3 * i + 1], pal[i].blue = palette[3 * i + 2];
        png_set_PLTE(png, info, pal, n_palette);
    }
    if (orientation > 1) {
        uint8_t exif[32];
        png_uint_32 n = (png_uint_32)fixture_exif_block(orientation, exif);
        png_set_eXIf_1(png, info, n, exif);
    }
    png_write_info(png, info);
    int passes = interlaced ? png_set_interlace_handling(png) : 1;
    for (int pass = 0; pass < passes; pass++)
        for (int y = 0; y < height; y++) {
            memset(row, 0, row_bytes);
            for (int i = 0; i < width * channels; i++) {
                unsigned v = samples[(size_t)y * width * channels + i];
                if (bit_depth == 16) row[2 * i] = (uint8_t)(v >> 8), row[2 * i + 1] = (uint8_t)v;
                else if (bit_depth == 8) row[i] = (uint8_t)v;
                else { /* 1, 2, 4 bits, most significant first */
                    int per = 8 / bit_depth, shift = 8 - bit_depth * (i % per + 1);
                    row[i / per] |= (uint8_t)(v << shift);
                }
            }
            png_write_row(png, row);
        }
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    free(row);
    return fclose(f) == 0 ? 0 : -1;
}

int fixture_write_jpeg(const char *path, int width, int height, int components, const uint8_t *pixels, int quality,
                       int orientation) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr err;
    c.err = jpeg_std_error(&err);
    jpeg_create_compress(&c);
    jpeg_stdio_dest(&c, f);
    c.image_width = (JDIMENSION)width;
    c.image_height = (JDIMENSION)height;
    c.input_components = components;
    c.in_color_space = components == 3 ? JCS_RGB : JCS_GRAYSCALE;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, quality, TRUE);
    jpeg_start_compress(&c, TRUE);
    if (orientation > 1) {
        uint8_t app1[40] = {'E', 'x', 'i', 'f', 0, 0};
        size_t n = fixture_exif_block(orientation, app1 + 6);
        jpeg_write_marker(&c, JPEG_APP0 + 1, app1, (unsigned)(n + 6));
    }
    while (c.next_scanline < c.image_height) {
        JSAMPROW row = (JSAMPROW)(pixels + (size_t)c.next_scanline * width * components);
        jpeg_write_scanlines(&c, &row, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    return fclose(f) == 0 ? 0 : -1;
}

uint8_t fixture_pattern(int x, int y, int c, int w, int h, int seed) {
    int v = c == 0 ? 255 * x / (w > 1 ? w - 1 : 1) : c == 1 ? 255 * y / (h > 1 ? h - 1 : 1) : (seed * 37 + 40 * c) % 256;
    return (uint8_t)v;
}
