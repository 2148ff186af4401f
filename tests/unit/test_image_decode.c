/* Picture decoding: PNGs written by vfm and by libpng (RGB, grey, palette, low bit depths, 16-bit,
 * alpha over black, interlaced) read back exactly; JPEGs (RGB, grey, DCT-scaled) within JPEG's
 * error; the EXIF orientation from a PNG eXIf chunk and a JPEG APP1 applied pixel for pixel; and
 * damaged files (truncated, bad CRC, not a picture, CMYK) refused with the name given. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fileutil.h"
#include "data/media/image_decode.h"
#include "data/media/image_io.h"
#include "picture_fixture.h"
#include "test.h"

static uint8_t *slurp(const char *path, size_t *n) {
    char *data = NULL;
    if (read_file_all(path, &data, n) != VFM_OK) return NULL;
    return (uint8_t *)data;
}

static void tmp_path(char *out, size_t n, const char *name) { path_join(out, n, test_tmpdir(), name); }

static int px8(const PixelImage *img, int x, int y, int c) { return img->data[(size_t)y * img->stride + 3 * x + c]; }
static int px16(const PixelImage *img, int x, int y, int c) {
    return ((const uint16_t *)(const void *)(img->data + (size_t)y * img->stride))[3 * x + c];
}

TEST(image_decode_png_from_vfm_writer_exact) {
    RgbImage img;
    REQUIRE_OK(rgb_image_alloc(&img, 13, 7));
    for (int y = 0; y < 7; y++)
        for (int x = 0; x < 13; x++)
            for (int c = 0; c < 3; c++) img.pixels[(y * 13 + x) * 3 + c] = fixture_pattern(x, y, c, 13, 7, 3);
    char path[1200];
    tmp_path(path, sizeof path, "a.png");
    REQUIRE_OK(png_write_rgb(path, &img));
    size_t n;
    uint8_t *data = slurp(path, &n);
    REQUIRE(data);
    ImageInfo info;
    REQUIRE_OK(image_probe(data, n, path, &info));
    CHECK(info.format == IMAGE_PNG && info.width == 13 && info.height == 7 && info.orientation == 1);
    PixelImage out;
    REQUIRE_OK(image_decode(data, n, path, 8, &out)); /* shrink is ignored for PNG */
    REQUIRE(out.width == 13 && out.height == 7 && out.depth == 8);
    int bad = 0;
    for (int y = 0; y < 7; y++)
        for (int x = 0; x < 13; x++)
            for (int c = 0; c < 3; c++) bad += px8(&out, x, y, c) != img.pixels[(y * 13 + x) * 3 + c];
    CHECK(bad == 0);
    pixel_image_free(&out);
    rgb_image_free(&img);
    free(data);
}

/* Writes a PNG with libpng and decodes it. */
static int decode_written(const char *name, int w, int h, int channels, int depth, const uint16_t *samples,
                          const uint8_t *palette, int n_palette, int interlaced, int orientation, PixelImage *out) {
    char path[1200];
    tmp_path(path, sizeof path, name);
    if (fixture_write_png(path, w, h, channels, depth, samples, palette, n_palette, interlaced, orientation) != 0) return -1;
    size_t n;
    uint8_t *data = slurp(path, &n);
    vfm_status s = data ? image_decode(data, n, path, 1, out) : VFM_ERR_IO;
    free(data);
    return s == VFM_OK ? 0 : -1;
}

TEST(image_decode_png_colour_types_depths_alpha_interlace) {
    enum { W = 9, H = 6 };
    uint16_t s[W * H * 4];
    PixelImage out;
    /* 16-bit RGB, interlaced */
    for (int i = 0; i < W * H * 3; i++) s[i] = (uint16_t)(i * 997 % 65536);
    REQUIRE(decode_written("rgb16.png", W, H, 3, 16, s, NULL, 0, 1, 1, &out) == 0);
    CHECK(out.depth == 16 && out.width == W);
    int bad = 0;
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
            for (int c = 0; c < 3; c++) bad += px16(&out, x, y, c) != s[(y * W + x) * 3 + c];
    CHECK_MSG(bad == 0, "%d 16-bit samples differ", bad);
    pixel_image_free(&out);
    /* 2-bit grey: levels 0, 85, 170, 255 on every channel */
    for (int i = 0; i < W * H; i++) s[i] = (uint16_t)(i % 4);
    REQUIRE(decode_written("grey2.png", W, H, 1, 2, s, NULL, 0, 0, 1, &out) == 0);
    bad = 0;
    for (int i = 0; i < W * H; i++)
        for (int c = 0; c < 3; c++) bad += px8(&out, i % W, i / W, c) != (i % 4) * 85;
    CHECK(bad == 0);
    pixel_image_free(&out);
    /* 4-bit palette */
    const uint8_t pal[3 * 3] = {255, 0, 0, 0, 128, 0, 10, 20, 30};
    for (int i = 0; i < W * H; i++) s[i] = (uint16_t)(i % 3);
    REQUIRE(decode_written("pal4.png", W, H, 1, 4, s, pal, 3, 0, 1, &out) == 0);
    bad = 0;
    for (int i = 0; i < W * H; i++)
        for (int c = 0; c < 3; c++) bad += px8(&out, i % W, i / W, c) != pal[(i % 3) * 3 + c];
    CHECK(bad == 0);
    pixel_image_free(&out);
    /* RGBA and grey+alpha: composited over black, rounded */
    for (int i = 0; i < W * H; i++) s[4 * i] = 200, s[4 * i + 1] = 100, s[4 * i + 2] = 50, s[4 * i + 3] = (uint16_t)(i * 4 % 256);
    REQUIRE(decode_written("rgba.png", W, H, 4, 8, s, NULL, 0, 0, 1, &out) == 0);
    bad = 0;
    for (int i = 0; i < W * H; i++) {
        int a = i * 4 % 256;
        bad += px8(&out, i % W, i / W, 0) != (200 * a + 127) / 255 || px8(&out, i % W, i / W, 2) != (50 * a + 127) / 255;
    }
    CHECK(bad == 0);
    pixel_image_free(&out);
    for (int i = 0; i < W * H; i++) s[2 * i] = 255, s[2 * i + 1] = (uint16_t)(i % 2 ? 255 : 0);
    REQUIRE(decode_written("ga.png", W, H, 2, 8, s, NULL, 0, 0, 1, &out) == 0);
    bad = 0;
    for (int i = 0; i < W * H; i++) bad += px8(&out, i % W, i / W, 1) != (i % 2 ? 255 : 0);
    CHECK(bad == 0);
    pixel_image_free(&out);
}

TEST(image_decode_exif_orientation_all_eight) {
    enum { W = 3, H = 2 };
    uint16_t s[W * H * 3];
    /* red channel = index of the stored pixel, so the mapping can be read off */
    for (int i = 0; i < W * H; i++) s[3 * i] = (uint16_t)(10 * i), s[3 * i + 1] = 0, s[3 * i + 2] = 0;
    /* the displayed picture, as rows of stored indices, for each orientation (EXIF 2.32, tag 0x0112) */
    static const int want[9][6] = {{0},
                                   {0, 1, 2, 3, 4, 5},  /* 1: 3x2 as stored */
                                   {2, 1, 0, 5, 4, 3},  /* 2: mirrored */
                                   {5, 4, 3, 2, 1, 0},  /* 3: 180 */
                                   {3, 4, 5, 0, 1, 2},  /* 4: flipped */
                                   {0, 3, 1, 4, 2, 5},  /* 5: 2x3, transposed */
                                   {3, 0, 4, 1, 5, 2},  /* 6: turned clockwise */
                                   {5, 2, 4, 1, 3, 0},  /* 7: transversed */
                                   {2, 5, 1, 4, 0, 3}}; /* 8: turned anticlockwise */
    for (int o = 1; o <= 8; o++) {
        char name[32];
        snprintf(name, sizeof name, "o%d.png", o);
        PixelImage out;
        REQUIRE(decode_written(name, W, H, 3, 8, s, NULL, 0, 0, o, &out) == 0);
        int ow = o >= 5 ? H : W, oh = o >= 5 ? W : H;
        CHECK_MSG(out.width == ow && out.height == oh, "orientation %d: %dx%d", o, out.width, out.height);
        for (int k = 0; k < 6 && out.width == ow; k++)
            CHECK_MSG(px8(&out, k % ow, k / ow, 0) == 10 * want[o][k], "orientation %d pixel %d: %d", o, k, px8(&out, k % ow, k / ow, 0));
        pixel_image_free(&out);
        /* probe agrees, from the same bytes */
        char path[1200];
        tmp_path(path, sizeof path, name);
        size_t n;
        uint8_t *data = slurp(path, &n);
        ImageInfo info;
        CHECK_OK(image_probe(data, n, path, &info));
        CHECK(info.orientation == o && info.width == ow && info.height == oh);
        free(data);
    }
    uint8_t mm[32];
    size_t n = fixture_exif_block(6, mm);
    CHECK(exif_orientation(mm, n) == 6);
    /* the same block big-endian */
    static const uint8_t be[] = {'M', 'M', 0, 42, 0, 0, 0, 8, 0, 1, 0x01, 0x12, 0, 3, 0, 0, 0, 1, 0, 8, 0, 0, 0, 0, 0, 0};
    CHECK(exif_orientation(be, sizeof be) == 8);
    CHECK(exif_orientation(be, 12) == 1); /* cut short */
    CHECK(exif_orientation((const uint8_t *)"garbage!", 8) == 1);
}

TEST(image_decode_jpeg_rgb_grey_scaled_oriented) {
    enum { W = 64, H = 48 };
    uint8_t *rgb = malloc(W * H * 3), grey[W * H];
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            for (int c = 0; c < 3; c++) rgb[(y * W + x) * 3 + c] = fixture_pattern(x, y, c, W, H, 1);
            grey[y * W + x] = (uint8_t)(x * 4);
        }
    char path[1200];
    tmp_path(path, sizeof path, "a.jpg");
    REQUIRE(fixture_write_jpeg(path, W, H, 3, rgb, 95, 1) == 0);
    size_t n;
    uint8_t *data = slurp(path, &n);
    ImageInfo info;
    REQUIRE_OK(image_probe(data, n, path, &info));
    CHECK(info.format == IMAGE_JPEG && info.width == W && info.height == H && info.orientation == 1);
    PixelImage out;
    REQUIRE_OK(image_decode(data, n, path, 1, &out));
    REQUIRE(out.width == W && out.height == H);
    int worst = 0;
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
            for (int c = 0; c < 3; c++) {
                int d = abs(px8(&out, x, y, c) - rgb[(y * W + x) * 3 + c]);
                if (d > worst) worst = d;
            }
    CHECK_MSG(worst <= 12, "JPEG q95 of a smooth pattern off by %d", worst);
    pixel_image_free(&out);
    REQUIRE_OK(image_decode(data, n, path, 4, &out)); /* DCT scaling: 16x12 */
    CHECK(out.width == 16 && out.height == 12);
    CHECK(abs(px8(&out, 15, 6, 0) - 255 * 62 / 63) <= 12); /* the red ramp at the right edge */
    pixel_image_free(&out);
    free(data);
    /* grey JPEG -> equal RGB; EXIF orientation 6 turns 64x48 into 48x64 */
    REQUIRE(fixture_write_jpeg(path, W, H, 1, grey, 95, 6) == 0);
    data = slurp(path, &n);
    REQUIRE_OK(image_probe(data, n, path, &info));
    CHECK(info.orientation == 6 && info.width == H && info.height == W);
    REQUIRE_OK(image_decode(data, n, path, 1, &out));
    REQUIRE(out.width == H && out.height == W);
    /* displayed row y is stored column y: the ramp now runs down */
    CHECK(abs(px8(&out, 10, 60, 0) - 240) <= 6 && px8(&out, 10, 60, 0) == px8(&out, 10, 60, 2));
    CHECK(abs(px8(&out, 10, 2, 1) - 8) <= 6);
    pixel_image_free(&out);
    free(data);
    free(rgb);
}

TEST(image_decode_refuses_damaged_files_naming_them) {
    RgbImage img;
    REQUIRE_OK(rgb_image_alloc(&img, 16, 16));
    char path[1200];
    tmp_path(path, sizeof path, "ok.png");
    REQUIRE_OK(png_write_rgb(path, &img));
    size_t n;
    uint8_t *png = slurp(path, &n);
    PixelImage out;
    /* truncated in the image data */
    vfm_status s = image_decode(png, n - 40, "pics/cut.png", 1, &out);
    CHECK_MSG(s == VFM_ERR_FORMAT && strstr(vfm_last_error(), "pics/cut.png"), "%s", vfm_last_error());
    CHECK(out.data == NULL);
    /* a flipped bit in IHDR: CRC mismatch */
    png[20] ^= 1;
    s = image_decode(png, n, "pics/crc.png", 1, &out);
    CHECK_MSG(s == VFM_ERR_FORMAT && strstr(vfm_last_error(), "pics/crc.png"), "%s", vfm_last_error());
    free(png);
    s = image_decode((const uint8_t *)"GIF89a....", 10, "pics/x.png", 1, &out);
    CHECK(s == VFM_ERR_FORMAT && strstr(vfm_last_error(), "pics/x.png") && strstr(vfm_last_error(), "neither"));
    ImageInfo info;
    CHECK(image_probe((const uint8_t *)"", 0, "empty.jpg", &info) == VFM_ERR_FORMAT);
    /* a JPEG cut in half */
    uint8_t *rgb = calloc(32 * 32 * 3, 1);
    for (int i = 0; i < 32 * 32 * 3; i++) rgb[i] = (uint8_t)(i * 7);
    tmp_path(path, sizeof path, "cut.jpg");
    REQUIRE(fixture_write_jpeg(path, 32, 32, 3, rgb, 90, 1) == 0);
    uint8_t *jpg = slurp(path, &n);
    s = image_decode(jpg, n / 2, "pics/cut.jpg", 1, &out);
    CHECK_MSG(s == VFM_ERR_FORMAT && strstr(vfm_last_error(), "pics/cut.jpg"), "%s", vfm_last_error());
    s = image_decode(jpg, 200, "pics/head.jpg", 1, &out);
    CHECK_MSG(s == VFM_ERR_FORMAT && strstr(vfm_last_error(), "pics/head.jpg"), "%s", vfm_last_error());
    free(jpg);
    free(rgb);
    rgb_image_free(&img);
}

/* Corrupted pictures (bytes flipped, cut, inserted at seeded random places) either decode or fail
 * with VFM_ERR_FORMAT; never crash, never leave a half image. 600 of each format. */
TEST(image_decode_survives_corrupted_files) {
    RgbImage img;
    REQUIRE_OK(rgb_image_alloc(&img, 24, 20));
    for (int i = 0; i < 24 * 20 * 3; i++) img.pixels[i] = (uint8_t)(i * 13);
    char png_path[1200], jpg_path[1200];
    tmp_path(png_path, sizeof png_path, "m.png");
    tmp_path(jpg_path, sizeof jpg_path, "m.jpg");
    REQUIRE_OK(png_write_rgb(png_path, &img));
    REQUIRE(fixture_write_jpeg(jpg_path, 24, 20, 3, img.pixels, 80, 6) == 0);
    const char *paths[2] = {png_path, jpg_path};
    for (int f = 0; f < 2; f++) {
        size_t n;
        uint8_t *orig = slurp(paths[f], &n), *buf = malloc(n + 64);
        int ok = 0, refused = 0, other = 0;
        for (int trial = 0; trial < 600; trial++) {
            float u[6];
            test_fill_uniform_f32(u, 6, (uint64_t)(trial * 2 + f), 0.0f, 1.0f);
            memcpy(buf, orig, n);
            size_t len = n, at = (size_t)(u[0] * (float)n) % n;
            switch (trial % 3) {
            case 0: buf[at] ^= (uint8_t)(1 + u[1] * 254); buf[(size_t)(u[2] * (float)n) % n] ^= 0x80; break;
            case 1: len = at; break; /* cut */
            default: /* insert junk */
                memmove(buf + at + 8, buf + at, n - at);
                for (int k = 0; k < 8; k++) buf[at + k] = (uint8_t)(u[3 + k % 3] * 255);
                len = n + 8;
            }
            PixelImage out;
            ImageInfo info;
            vfm_status s = image_probe(buf, len, "m", &info);
            if (s == VFM_OK) s = image_decode(buf, len, "m", trial % 2 ? 2 : 1, &out);
            if (s == VFM_OK) {
                ok += out.data != NULL && out.width > 0;
                pixel_image_free(&out);
            } else if (s == VFM_ERR_FORMAT) {
                refused++;
            } else {
                other++;
            }
        }
        CHECK_MSG(other == 0 && ok + refused == 600 && refused > 100, "%s: %d decoded, %d refused, %d other", paths[f], ok, refused, other);
        free(orig);
        free(buf);
    }
    rgb_image_free(&img);
}
