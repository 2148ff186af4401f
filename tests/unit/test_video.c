/* MP4 writing and video reading round trip: frames of distinct flat colours written at 24 fps come
 * back in order; read at 8 fps every third frame, at 48 fps every frame twice, with the clip's
 * length kept; odd frame sizes padded; the encoder named; unreadable files refused naming them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fileutil.h"
#include "data/media/image_io.h"
#include "data/media/video_decode.h"
#include "data/media/video_encode.h"
#include "test.h"

static void colour_of(int i, uint8_t rgb[3]) {
    rgb[0] = (uint8_t)(20 * i), rgb[1] = (uint8_t)(230 - 20 * i), rgb[2] = (uint8_t)(i % 2 ? 200 : 60);
}

/* n flat frames of w x h, frame i in colour_of(i). */
static RgbImage *flat_frames(int n, int w, int h) {
    RgbImage *f = calloc((size_t)n, sizeof *f);
    for (int i = 0; i < n; i++) {
        rgb_image_alloc(&f[i], w, h);
        uint8_t c[3];
        colour_of(i, c);
        for (int p = 0; p < w * h; p++) memcpy(f[i].pixels + 3 * p, c, 3);
    }
    return f;
}

/* Which source frame a decoded frame shows (nearest colour), -1 when none is within 8 per channel. */
static int which_frame(const PixelImage *img, int n) {
    const uint8_t *p = img->data + (size_t)(img->height / 2) * img->stride + (size_t)(img->width / 2) * 3;
    for (int i = 0; i < n; i++) {
        uint8_t c[3];
        colour_of(i, c);
        if (abs(p[0] - c[0]) <= 8 && abs(p[1] - c[1]) <= 8 && abs(p[2] - c[2]) <= 8) return i;
    }
    return -1;
}

/* Reads path at fps; fills idx with the frames shown; returns the count. */
static int read_at(const char *path, double fps, int *idx, int cap, VideoInfo *info) {
    VideoReader *r;
    if (video_open(&r, path, info) != VFM_OK) return -1;
    int n = 0, got = 1;
    while (n < cap) {
        const PixelImage *f;
        if (video_next_frame(r, fps, &f, &got) != VFM_OK || !got) break;
        idx[n++] = which_frame(f, 12);
    }
    video_close(r);
    return n;
}

TEST(video_mp4_round_trip_resampled_in_time) {
    const char *enc = mp4_encoder_name();
    REQUIRE(enc != NULL); /* scripts/deps.sh installs Debian's FFmpeg libraries */
    char path[1200];
    path_join(path, sizeof path, test_tmpdir(), "clip.mp4");
    RgbImage *frames = flat_frames(12, 32, 24);
    const char *used = NULL;
    REQUIRE_OK(mp4_write_rgb(path, frames, 12, 24, &used));
    CHECK(used && strcmp(used, enc) == 0);
    char tmp[1300];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    CHECK(!path_exists(tmp));
    VideoInfo info;
    int idx[64];
    int n = read_at(path, 24, idx, 64, &info);
    CHECK_MSG(n == 12, "%d frames at the source rate", n);
    for (int i = 0; i < n && i < 12; i++) CHECK_MSG(idx[i] == i, "frame %d shows %d", i, idx[i]);
    CHECK(info.width == 32 && info.height == 24 && info.pixel_aspect == 1.0 && info.rotation == 0);
    CHECK_MSG(info.fps > 23.99 && info.fps < 24.01, "fps %g", info.fps);
    CHECK(strcmp(info.codec, strcmp(enc, "libx264") == 0 ? "h264" : "mpeg4") == 0);
    n = read_at(path, 8, idx, 64, &info); /* t = 0, 1/8, 2/8, 3/8 of a 0.5 s clip */
    CHECK_MSG(n == 4 && idx[0] == 0 && idx[1] == 3 && idx[2] == 6 && idx[3] == 9, "%d frames: %d %d %d %d", n, idx[0], idx[1],
              idx[2], idx[3]);
    n = read_at(path, 48, idx, 64, &info);
    CHECK_MSG(n == 24, "%d frames at 48 fps", n);
    for (int i = 0; i < n && i < 24; i++) CHECK_MSG(idx[i] == i / 2, "48 fps frame %d shows %d", i, idx[i]);
    n = read_at(path, 10, idx, 3, &info); /* the caller stops early */
    CHECK(n == 3 && idx[2] == 4);         /* t = 0.2 s: frame 4.8 -> 4 */
    for (int i = 0; i < 12; i++) rgb_image_free(&frames[i]);
    free(frames);
}

TEST(video_mp4_odd_size_padded_and_errors_named) {
    char path[1200];
    path_join(path, sizeof path, test_tmpdir(), "odd.mp4");
    RgbImage *frames = flat_frames(3, 33, 25);
    REQUIRE_OK(mp4_write_rgb(path, frames, 3, 8, NULL));
    VideoInfo info;
    int idx[8];
    int n = read_at(path, 8, idx, 8, &info);
    CHECK(n == 3 && info.width == 34 && info.height == 26 && idx[0] == 0 && idx[2] == 2);
    RgbImage bad[2] = {frames[0], frames[1]};
    bad[1].width = 20;
    CHECK(mp4_write_rgb(path, bad, 2, 8, NULL) == VFM_ERR_SHAPE);
    CHECK(mp4_write_rgb(path, frames, 0, 8, NULL) == VFM_ERR_USAGE);
    for (int i = 0; i < 3; i++) rgb_image_free(&frames[i]);
    free(frames);
    VideoReader *r;
    char missing[1200], junk[1200];
    path_join(missing, sizeof missing, test_tmpdir(), "missing.mp4");
    CHECK(video_open(&r, missing, &info) == VFM_ERR_IO && strstr(vfm_last_error(), "missing.mp4"));
    path_join(junk, sizeof junk, test_tmpdir(), "junk.mp4");
    REQUIRE_OK(write_file_atomic(junk, "this is not a video file at all", 31));
    CHECK_MSG(video_open(&r, junk, &info) == VFM_ERR_FORMAT && strstr(vfm_last_error(), "junk.mp4"), "%s", vfm_last_error());
    /* cut in half: the index (moov, written last) is gone */
    char *bytes;
    size_t len;
    REQUIRE_OK(read_file_all(path, &bytes, &len));
    REQUIRE_OK(write_file_atomic(junk, bytes, len / 2));
    free(bytes);
    CHECK_MSG(video_open(&r, junk, &info) == VFM_ERR_FORMAT && strstr(vfm_last_error(), "junk.mp4"), "%s", vfm_last_error());
}
