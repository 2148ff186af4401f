/* Aspect buckets (parsing, the nearest bucket, centred crops with square and non-square pixels) and
 * resampling (identity, exact area averages for whole and fractional shrink factors, bicubic on a
 * linear ramp, constants kept, 16-bit input, crops outside the picture refused). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "data/media/buckets.h"
#include "data/media/resample.h"
#include "test.h"

TEST(buckets_parse_accepts_lists_and_names_bad_entries) {
    BucketSet b;
    REQUIRE_OK(buckets_parse("256x256,192x320", 2, "--buckets", &b));
    CHECK(b.n == 2 && b.b[0].height == 256 && b.b[0].width == 256 && b.b[1].height == 192 && b.b[1].width == 320);
    char text[128];
    buckets_format(&b, text, sizeof text);
    CHECK(strcmp(text, "256x256,192x320") == 0);
    REQUIRE_OK(buckets_parse(BUCKETS_DEFAULT, 32, "--buckets", &b));
    CHECK(b.n == 7);
    const struct {
        const char *text, *needle;
    } bad[] = {{"", "empty"},          {"256", "want HxW"},        {"256x", "want HxW"},     {"x256", "want HxW"},
               {"25x32", "multiples"}, {"0x32", "1..16384"},       {"32x32,32x32", "twice"}, {"32x32,", "want HxW"},
               {"-2x32", "want HxW"},  {"32x32x2", "want HxW"},    {"32768x32", "1..16384"}, {"a x b", "want HxW"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        vfm_status s = buckets_parse(bad[i].text, 2, "--buckets", &b);
        CHECK_MSG(s == VFM_ERR_USAGE && strstr(vfm_last_error(), bad[i].needle) && strstr(vfm_last_error(), "--buckets"),
                  "'%s': %s", bad[i].text, vfm_last_error());
    }
}

TEST(buckets_nearest_aspect_in_log_ratio) {
    BucketSet b;
    REQUIRE_OK(buckets_parse("256x256,224x288,192x320,320x192", 1, "--buckets", &b));
    CHECK(buckets_nearest(&b, 1.0) == 0);
    CHECK(buckets_nearest(&b, 1.2) == 1);   /* 288/224 = 1.286 */
    CHECK(buckets_nearest(&b, 2.5) == 2);   /* widest */
    CHECK(buckets_nearest(&b, 0.3) == 3);   /* tallest */
    CHECK(buckets_nearest(&b, 0.75) == 3);  /* |ln .75 - ln .6| = .223 < |ln .75 - ln 1| = .288 */
}

TEST(buckets_center_crop_square_and_anamorphic_pixels) {
    Bucket sq = {32, 32}, wide = {32, 64};
    CropRect r = buckets_center_crop(100, 50, 1.0, &sq);
    CHECK(fabs(r.x0 - 25) < 1e-9 && fabs(r.y0) < 1e-9 && fabs(r.width - 50) < 1e-9 && fabs(r.height - 50) < 1e-9);
    r = buckets_center_crop(100, 50, 1.0, &wide); /* the same aspect: everything */
    CHECK(fabs(r.x0) < 1e-9 && fabs(r.y0) < 1e-9 && fabs(r.width - 100) < 1e-9 && fabs(r.height - 50) < 1e-9);
    r = buckets_center_crop(40, 100, 1.0, &wide); /* tall picture into a wide bucket: rows cropped */
    CHECK(fabs(r.width - 40) < 1e-9 && fabs(r.height - 20) < 1e-9 && fabs(r.y0 - 40) < 1e-9);
    /* 50x50 stored pixels, each shown twice as wide: displayed 100x50; a square crop is 25x50 stored */
    r = buckets_center_crop(50, 50, 2.0, &sq);
    CHECK(fabs(r.width - 25) < 1e-9 && fabs(r.height - 50) < 1e-9 && fabs(r.x0 - 12.5) < 1e-9);
}

static void fill8(PixelImage *img, uint8_t (*f)(int x, int y, int c)) {
    for (int y = 0; y < img->height; y++)
        for (int x = 0; x < img->width; x++)
            for (int c = 0; c < 3; c++) img->data[(size_t)y * img->stride + 3 * x + c] = f(x, y, c);
}

static uint8_t checker(int x, int y, int c) { return (uint8_t)(((x + y) & 1) ? 255 : 0) ^ (uint8_t)(c == 1 ? 255 : 0); }
static uint8_t ramp(int x, int y, int c) { return (uint8_t)(c == 0 ? 10 * x : c == 1 ? 10 * y : 100); }
static uint8_t columns(int x, int y, int c) { (void)y, (void)c; return (uint8_t)(x * 60); }

TEST(resample_identity_is_exact) {
    PixelImage img;
    REQUIRE_OK(pixel_image_alloc(&img, 7, 5, 8));
    fill8(&img, ramp);
    CropRect all = {0, 0, 7, 5};
    float out[3 * 5 * 7];
    REQUIRE_OK(resample_crop(&img, &all, 5, 7, out, 0));
    for (int c = 0; c < 3; c++)
        for (int y = 0; y < 5; y++)
            for (int x = 0; x < 7; x++) CHECK(fabsf(out[(c * 5 + y) * 7 + x] - ramp(x, y, c) / 255.0f) < 1e-6f);
    pixel_image_free(&img);
}

TEST(resample_area_averages_whole_and_fractional) {
    PixelImage img;
    REQUIRE_OK(pixel_image_alloc(&img, 4, 4, 8));
    fill8(&img, checker);
    CropRect all = {0, 0, 4, 4};
    float out[3 * 2 * 2];
    REQUIRE_OK(resample_crop(&img, &all, 2, 2, out, 0));
    for (int i = 0; i < 12; i++) CHECK(fabsf(out[i] - 0.5f) < 1e-6f); /* each 2x2 block is half on */
    /* 3 columns (0, 60, 120) -> 2: output 0 covers column 0 and half of column 1 */
    PixelImage col;
    REQUIRE_OK(pixel_image_alloc(&col, 3, 1, 8));
    fill8(&col, columns);
    CropRect row = {0, 0, 3, 1};
    float two[3 * 2];
    REQUIRE_OK(resample_crop(&col, &row, 1, 2, two, 0));
    CHECK(fabsf(two[0] - (0 + 0.5f * 60) / 1.5f / 255) < 1e-6f);
    CHECK(fabsf(two[1] - (0.5f * 60 + 120) / 1.5f / 255) < 1e-6f);
    /* a crop at a fractional offset: [0.5, 2.5) to one pixel = (30 + 60 + 60) / 2 ... weights .5, 1, .5 */
    CropRect frac = {0.5, 0, 2, 1};
    float one[3];
    REQUIRE_OK(resample_crop(&col, &frac, 1, 1, one, 0));
    CHECK(fabsf(one[0] - (0.5f * 0 + 60 + 0.5f * 120) / 2 / 255) < 1e-6f);
    pixel_image_free(&img);
    pixel_image_free(&col);
}

TEST(resample_bicubic_keeps_ramps_and_constants) {
    PixelImage img;
    REQUIRE_OK(pixel_image_alloc(&img, 8, 8, 8));
    fill8(&img, ramp);
    CropRect all = {0, 0, 8, 8};
    enum { N = 16 };
    float *out = malloc(3 * N * N * sizeof *out);
    REQUIRE_OK(resample_crop(&img, &all, N, N, out, 0));
    /* 2x up: output x samples source (x + 0.5) / 2 - 0.5; away from the edges a cubic that reproduces
     * linear functions gives exactly 10 times that */
    for (int y = 4; y < N - 4; y++)
        for (int x = 4; x < N - 4; x++) {
            float sx = (x + 0.5f) / 2 - 0.5f, sy = (y + 0.5f) / 2 - 0.5f;
            CHECK(fabsf(out[(0 * N + y) * N + x] - 10 * sx / 255) < 1e-5f);
            CHECK(fabsf(out[(1 * N + y) * N + x] - 10 * sy / 255) < 1e-5f);
        }
    for (int i = 0; i < N * N; i++) CHECK(fabsf(out[2 * N * N + i] - 100 / 255.0f) < 1e-5f); /* constant stays */
    for (int i = 0; i < 3 * N * N; i++) CHECK(out[i] >= 0.0f && out[i] <= 1.0f);
    free(out);
    pixel_image_free(&img);
}

TEST(resample_16bit_and_frame_stride) {
    PixelImage img;
    REQUIRE_OK(pixel_image_alloc(&img, 2, 2, 16));
    uint16_t *p = (uint16_t *)(void *)img.data;
    for (int i = 0; i < 12; i++) p[i] = (uint16_t)(i * 5000);
    CropRect all = {0, 0, 2, 2};
    float out[3 * 2 * 2 * 2]; /* [3, T=2, 2, 2]: write frame 1 */
    memset(out, 0, sizeof out);
    REQUIRE_OK(resample_crop(&img, &all, 2, 2, out + 4, 8));
    for (int c = 0; c < 3; c++)
        for (int k = 0; k < 4; k++) {
            CHECK(out[c * 8 + k] == 0.0f); /* frame 0 untouched */
            CHECK(fabsf(out[c * 8 + 4 + k] - (float)(k * 3 + c) * 5000 / 65535) < 1e-6f);
        }
    CropRect outside = {1, 0, 2, 2};
    CHECK(resample_crop(&img, &outside, 2, 2, out, 0) == VFM_ERR_SHAPE);
    pixel_image_free(&img);
}
