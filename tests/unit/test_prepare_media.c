/* vfm prepare images|videos: pictures of several sizes, formats and orientations with .txt / .json
 * captions become shards in path order whose latents equal an independent crop + area average,
 * with the right buckets, parts and json; byte-identical across thread counts; --text-npy and
 * --allow-uncaptioned; every failure (no caption, a broken picture, a bad embedding, an existing
 * dataset, an interruption) named and leaving nothing behind; videos sampled in time; the CLI. */
#include <dirent.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fileutil.h"
#include "data/prepare/caption_encoder.h"
#include "data/media/image_io.h"
#include "data/formats/npy.h"
#include "data/prepare/prepare_media.h"
#include "data/formats/tar.h"
#include "data/media/video_encode.h"
#include "capture.h"
#include "data_fixture.h"
#include "picture_fixture.h"
#include "test.h"

static void tmp(char *out, size_t n, const char *name) { path_join(out, n, test_tmpdir(), name); }

static void put_text(const char *dir, const char *name, const char *text) {
    char path[1500];
    path_join(path, sizeof path, dir, name);
    write_file_atomic(path, text, strlen(text));
}

/* A w x h PNG (vfm's writer) of a flat colour, or of fixture_pattern when rgb is NULL. */
static void put_png(const char *dir, const char *name, int w, int h, const uint8_t *rgb) {
    RgbImage img;
    rgb_image_alloc(&img, w, h);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int c = 0; c < 3; c++) img.pixels[(y * w + x) * 3 + c] = rgb ? rgb[c] : fixture_pattern(x, y, c, w, h, 5);
    char path[1500];
    path_join(path, sizeof path, dir, name);
    png_write_rgb(path, &img);
    rgb_image_free(&img);
}

/* 1 when dir's parent holds no hidden staging directory of a run. */
static int no_leftovers(const char *parent) {
    DIR *d = opendir(parent);
    if (!d) return 0;
    struct dirent *e;
    int clean = 1;
    while ((e = readdir(d)))
        if (strstr(e->d_name, ".vfm-prepare-")) clean = 0;
    closedir(d);
    return clean;
}

/* The input folder of the image tests:
 *   a.png      64x48 pattern, a.txt          -> bucket 32x48 (aspect 1.33 is nearer 1.5 than 1)
 *   b.png      20x20 flat (200, 40, 0), b.json {"caption": "flat orange", "class": 3}  -> 32x32, enlarged
 *   sub/c.jpg  30x90 pattern, EXIF 6 (shown 90x30), c.txt  -> 32x48
 *   sub/d.png  48x64 pattern, d.txt          -> 48x32
 *   notes.md   ignored */
static void image_inputs(const char *in) {
    char sub[1500];
    path_join(sub, sizeof sub, in, "sub");
    mkdir_p(sub);
    put_png(in, "a.png", 64, 48, NULL);
    put_text(in, "a.txt", "  a test pattern\n");
    const uint8_t orange[3] = {200, 40, 0};
    put_png(in, "b.png", 20, 20, orange);
    put_text(in, "b.json", "{\"caption\": \"flat orange\", \"class\": 3, \"source\": \"not ours\"}");
    uint8_t *px = malloc(30 * 90 * 3);
    for (int y = 0; y < 90; y++)
        for (int x = 0; x < 30; x++)
            for (int c = 0; c < 3; c++) px[(y * 30 + x) * 3 + c] = fixture_pattern(x, y, c, 30, 90, 2);
    char path[1500];
    path_join(path, sizeof path, sub, "c.jpg");
    fixture_write_jpeg(path, 30, 90, 3, px, 95, 6);
    free(px);
    put_text(sub, "c.txt", "a turned photo");
    put_png(sub, "d.png", 48, 64, NULL);
    put_text(sub, "d.txt", "a tall pattern");
    put_text(in, "notes.md", "not a picture");
}

static PrepareMediaOptions small(const char *in, const char *out) {
    PrepareMediaOptions o = prepare_media_defaults();
    o.in_dir = in;
    o.out_dir = out;
    o.buckets = "32x32,32x48,48x32";
    o.d_text = 16;
    o.samples_per_shard = 3;
    return o;
}

static float *part_floats(const TarSample *s, const char *name, NpyArray *a) {
    const TarPart *p = tar_sample_part(s, name);
    if (!p || npy_parse(p->data, p->size, name, a) != VFM_OK) return NULL;
    float *f = malloc((size_t)(a->numel ? a->numel : 1) * sizeof *f);
    npy_to_f32(a, f);
    return f;
}

TEST(prepare_images_shards_in_path_order_with_buckets_and_json) {
    char in[1400], out[1400];
    tmp(in, sizeof in, "in");
    tmp(out, sizeof out, "out");
    image_inputs(in);
    PrepareMediaOptions o = small(in, out);
    PrepareMediaResult r;
    REQUIRE_OK(prepare_images(&o, &r));
    CHECK(r.progress.samples_done == 4 && r.progress.shards_done == 2 && r.other_files == 1 && r.d_text == 16);
    CHECK(r.bucket_counts[0] == 1 && r.bucket_counts[1] == 2 && r.bucket_counts[2] == 1);
    CHECK(no_leftovers(test_tmpdir()));
    static const char *const sources[4] = {"a.png", "b.png", "sub/c.jpg", "sub/d.png"};
    static const int hw[4][2] = {{16, 24}, {16, 16}, {16, 24}, {24, 16}};
    static const char *const captions[4] = {"a test pattern", "flat orange", "a turned photo", "a tall pattern"};
    int n = 0;
    for (int shard = 0; shard < 2; shard++) {
        char path[1500], name[32];
        snprintf(name, sizeof name, "shard-%06d.tar", shard);
        path_join(path, sizeof path, out, name);
        TarShard *ts;
        REQUIRE_OK(tar_shard_open(&ts, path));
        CHECK(tar_shard_num_samples(ts) == (shard ? 1 : 3));
        for (int64_t i = 0; i < tar_shard_num_samples(ts); i++, n++) {
            TarSample s;
            REQUIRE_OK(tar_shard_read_sample(ts, i, &s));
            char key[16];
            snprintf(key, sizeof key, "%08d", n);
            CHECK(strcmp(s.key, key) == 0 && s.num_parts == 3);
            CHECK(strcmp(s.parts[0].name, "latent.npy") == 0 && strcmp(s.parts[1].name, "text.npy") == 0 &&
                  strcmp(s.parts[2].name, "json") == 0);
            NpyArray la, ta;
            float *lat = part_floats(&s, "latent.npy", &la), *txt = part_floats(&s, "text.npy", &ta);
            REQUIRE(lat && txt);
            CHECK_MSG(la.ndim == 4 && la.shape[0] == 3 && la.shape[1] == 1 && la.shape[2] == hw[n][0] && la.shape[3] == hw[n][1],
                      "sample %d latent %lldx%lld", n, (long long)la.shape[2], (long long)la.shape[3]);
            /* the caption through the built-in encoder */
            int L = caption_token_count(captions[n]);
            float *want = malloc((size_t)L * 16 * sizeof *want);
            int rows;
            CaptionEncoder enc = {16};
            caption_encode(&enc, captions[n], want, L, &rows);
            CHECK(ta.ndim == 2 && ta.shape[0] == L && ta.shape[1] == 16 && memcmp(want, txt, (size_t)L * 16 * sizeof *txt) == 0);
            free(want);
            json_t *j = json_loadb((const char *)s.parts[2].data, s.parts[2].size, 0, NULL);
            CHECK(j && strcmp(json_string_value(json_object_get(j, "caption")), captions[n]) == 0);
            CHECK(strcmp(json_string_value(json_object_get(j, "source")), sources[n]) == 0); /* ours wins over b.json's */
            CHECK(json_integer_value(json_object_get(j, "fps")) == 30 && json_integer_value(json_object_get(j, "index")) == n);
            CHECK(json_is_object(json_object_get(j, "pixel_space")));
            if (n == 1) {
                CHECK(json_integer_value(json_object_get(j, "class")) == 3);
                /* a flat colour stays flat when enlarged: latent = pixel - 0.5 */
                for (int k = 0; k < 16 * 16; k++)
                    CHECK(fabsf(lat[k] - (200 / 255.0f - 0.5f)) < 1e-5f && fabsf(lat[256 + k] - (40 / 255.0f - 0.5f)) < 1e-5f &&
                          fabsf(lat[512 + k] + 0.5f) < 1e-5f);
                CHECK(strcmp(json_string_value(json_object_get(j, "bucket")), "32x32") == 0);
            }
            if (n == 2) { /* EXIF 6: shown 90 wide, 30 high */
                json_t *ss = json_object_get(j, "source_size");
                CHECK(json_integer_value(json_array_get(ss, 0)) == 30 && json_integer_value(json_array_get(ss, 1)) == 90);
            }
            if (n == 0) {
                /* 64x48 -> crop 64 x 42.67 rows from 2.67 -> area 48x32 -> box 2: pixel (0,0) of the latent is
                 * the average over rows [2.67, 4) + [4, 5.33)... computed here independently for the red ramp */
                double sum = 0, wsum = 0, s = 64.0 / 1.5 / 32;
                for (int yy = 0; yy < 48; yy++)
                    for (int xx = 0; xx < 64; xx++) {
                        double y0 = (48 - 64.0 / 1.5) / 2, lo = y0, hi = y0 + 2 * s; /* two output rows */
                        double wy = fmax(0, fmin(hi, yy + 1) - fmax(lo, yy)), wx = fmax(0, fmin(64.0 / 24, xx + 1) - fmax(0, xx));
                        sum += wy * wx * fixture_pattern(xx, yy, 0, 64, 48, 5) / 255.0;
                        wsum += wy * wx;
                    }
                CHECK_MSG(fabs(lat[0] - (sum / wsum - 0.5)) < 1e-5, "latent %g, independent %g", lat[0], sum / wsum - 0.5);
            }
            json_decref(j);
            free(lat);
            free(txt);
            tar_sample_free(&s);
        }
        tar_shard_close(ts);
    }
    CHECK(n == 4);
    char meta[1500];
    path_join(meta, sizeof meta, out, "vfm_dataset.json");
    json_t *m = json_load_file(meta, 0, NULL);
    REQUIRE(m);
    CHECK(strcmp(json_string_value(json_object_get(m, "kind")), "images") == 0 && json_integer_value(json_object_get(m, "samples")) == 4);
    CHECK(strcmp(json_string_value(json_object_get(m, "caption_encoder")), CAPTION_ENCODER_ID) == 0);
    CHECK(json_integer_value(json_object_get(json_object_get(m, "captions"), "json")) == 1);
    CHECK(json_integer_value(json_object_get(json_object_get(m, "bucket_counts"), "32x48")) == 2);
    json_decref(m);
}

TEST(prepare_images_byte_identical_across_thread_counts) {
    char in[1400], a[1400], b[1400];
    tmp(in, sizeof in, "in");
    tmp(a, sizeof a, "a");
    tmp(b, sizeof b, "b");
    image_inputs(in);
    PrepareMediaOptions o = small(in, a);
    omp_set_num_threads(1);
    REQUIRE_OK(prepare_images(&o, NULL));
    omp_set_num_threads(2);
    o.out_dir = b;
    REQUIRE_OK(prepare_images(&o, NULL));
    int n;
    CHECK(fixture_same_files(a, b, &n) && n == 5); /* 2 shards, 2 indexes, vfm_dataset.json */
}

TEST(prepare_images_failures_name_the_file_and_leave_nothing) {
    char in[1400], out[1400], path[1500];
    tmp(in, sizeof in, "in");
    tmp(out, sizeof out, "out");
    image_inputs(in);
    PrepareMediaOptions o = small(in, out);
    /* no caption */
    path_join(path, sizeof path, in, "sub/d.txt");
    unlink(path);
    vfm_status s = prepare_images(&o, NULL);
    CHECK_MSG(s == VFM_ERR_IO && strstr(vfm_last_error(), "sub/d.png: no caption") && strstr(vfm_last_error(), "--allow-uncaptioned"),
              "%s", vfm_last_error());
    CHECK(!path_exists(out) && no_leftovers(test_tmpdir()));
    /* allowed: the null prompt (one zero row), no caption key */
    o.allow_uncaptioned = 1;
    PrepareMediaResult r;
    REQUIRE_OK(prepare_images(&o, &r));
    CHECK(r.uncaptioned == 1);
    remove_tree(out);
    /* a broken picture among good ones */
    put_text(in, "sub/d.txt", "a tall pattern");
    path_join(path, sizeof path, in, "a.png");
    char *bytes;
    size_t len;
    REQUIRE_OK(read_file_all(path, &bytes, &len));
    REQUIRE_OK(write_file_atomic(path, bytes, len / 2));
    free(bytes);
    s = prepare_images(&o, NULL);
    CHECK_MSG(s == VFM_ERR_FORMAT && strstr(vfm_last_error(), "a.png") && strstr(vfm_last_error(), "not a readable PNG"), "%s",
              vfm_last_error());
    CHECK(!path_exists(out) && no_leftovers(test_tmpdir()));
    REQUIRE_OK(write_file_atomic(path, "\x89PNG\r\n\x1a\n garbage", 17));
    s = prepare_images(&o, NULL);
    CHECK_MSG(s == VFM_ERR_FORMAT && strstr(vfm_last_error(), "a.png"), "%s", vfm_last_error());
    CHECK(!path_exists(out) && no_leftovers(test_tmpdir()));
    /* an interruption */
    put_png(in, "a.png", 64, 48, NULL);
    volatile sig_atomic_t stop = 1;
    o.cancel = &stop;
    s = prepare_images(&o, NULL);
    CHECK(s == VFM_ERR_IO && strstr(vfm_last_error(), "interrupted") && !path_exists(out) && no_leftovers(test_tmpdir()));
    o.cancel = NULL;
    /* bad options touch nothing */
    o.buckets = "33x32";
    CHECK(prepare_images(&o, NULL) == VFM_ERR_USAGE && strstr(vfm_last_error(), "multiples of the factor 2"));
    o.buckets = "32x32";
    o.in_dir = out;
    CHECK(prepare_images(&o, NULL) == VFM_ERR_IO && !path_exists(out));
    o.in_dir = in;
    put_text(in, "b.json", "{\"caption\": 7}");
    CHECK(prepare_images(&o, NULL) == VFM_ERR_FORMAT && strstr(vfm_last_error(), "b.json") && !path_exists(out));
}

TEST(prepare_images_existing_output_refused_replaced_or_foreign) {
    char in[1400], out[1400], path[1500];
    tmp(in, sizeof in, "in");
    tmp(out, sizeof out, "out");
    image_inputs(in);
    PrepareMediaOptions o = small(in, out);
    mkdir_p(out); /* an empty directory is fine */
    REQUIRE_OK(prepare_images(&o, NULL));
    CHECK(prepare_images(&o, NULL) == VFM_ERR_IO && strstr(vfm_last_error(), "already holds a dataset; pass --force"));
    o.force = 1;
    o.samples_per_shard = 10; /* one shard now: the old second shard must be gone */
    REQUIRE_OK(prepare_images(&o, NULL));
    path_join(path, sizeof path, out, "shard-000001.tar");
    CHECK(!path_exists(path) && no_leftovers(test_tmpdir()));
    put_text(out, "mine.txt", "keep me");
    CHECK(prepare_images(&o, NULL) == VFM_ERR_IO && strstr(vfm_last_error(), "holds mine.txt, which vfm prepare did not write"));
    path_join(path, sizeof path, out, "mine.txt");
    CHECK(path_exists(path));
}

TEST(prepare_images_text_npy_taken_as_is) {
    char in[1400], out[1400], path[1500];
    tmp(in, sizeof in, "in");
    tmp(out, sizeof out, "out");
    image_inputs(in);
    PrepareMediaOptions o = small(in, out);
    o.text_npy = 1;
    CHECK(prepare_images(&o, NULL) == VFM_ERR_IO && strstr(vfm_last_error(), "a.png: --text-npy: no text embedding"));
    const char *stems[4] = {"a", "b", "sub/c", "sub/d"};
    for (int i = 0; i < 4; i++) {
        float e[2 * 8];
        for (int k = 0; k < 16; k++) e[k] = (float)(i * 100 + k);
        const int64_t shape[3] = {1, 2, 8};
        uint8_t *bytes;
        size_t len;
        REQUIRE_OK(npy_encode(NPY_F4, e, 3, shape, &bytes, &len));
        char name[64];
        snprintf(name, sizeof name, "%s.npy", stems[i]);
        path_join(path, sizeof path, in, name);
        REQUIRE_OK(write_file_atomic(path, bytes, len));
        free(bytes);
    }
    PrepareMediaResult r;
    REQUIRE_OK(prepare_images(&o, &r));
    CHECK(r.d_text == 8);
    path_join(path, sizeof path, out, "shard-000000.tar");
    TarShard *ts;
    REQUIRE_OK(tar_shard_open(&ts, path));
    TarSample s;
    REQUIRE_OK(tar_shard_read_sample(ts, 2, &s));
    char *want;
    size_t len;
    path_join(path, sizeof path, in, "sub/c.npy");
    REQUIRE_OK(read_file_all(path, &want, &len));
    const TarPart *t = tar_sample_part(&s, "text.npy");
    CHECK(t && t->size == len && memcmp(t->data, want, len) == 0);
    free(want);
    tar_sample_free(&s);
    tar_shard_close(ts);
    path_join(path, sizeof path, out, "vfm_dataset.json");
    json_t *m = json_load_file(path, 0, NULL);
    CHECK(m && json_is_null(json_object_get(m, "caption_encoder")) && json_integer_value(json_object_get(m, "d_text")) == 8);
    json_decref(m);
    /* one embedding of another width */
    float e[3 * 4] = {0};
    e[0] = 1;
    const int64_t shape[2] = {3, 4};
    uint8_t *bytes;
    REQUIRE_OK(npy_encode(NPY_F4, e, 2, shape, &bytes, &len));
    path_join(path, sizeof path, in, "sub/d.npy");
    REQUIRE_OK(write_file_atomic(path, bytes, len));
    free(bytes);
    o.force = 1;
    CHECK(prepare_images(&o, NULL) == VFM_ERR_FORMAT && strstr(vfm_last_error(), "sub/d.png: its text embedding is 4 wide"));
    e[1] = NAN;
    REQUIRE_OK(npy_encode(NPY_F4, e, 2, shape, &bytes, &len));
    REQUIRE_OK(write_file_atomic(path, bytes, len));
    free(bytes);
    CHECK(prepare_images(&o, NULL) == VFM_ERR_FORMAT && strstr(vfm_last_error(), "sub/d.npy: 1 NaN/Inf"));
    CHECK(path_exists(out)); /* the earlier dataset is untouched by the failed --force run */
}

/* n flat frames of w x h at fps; frame i grey level 20 * i. */
static void put_video(const char *dir, const char *name, int n, int w, int h, double fps) {
    RgbImage *f = calloc((size_t)n, sizeof *f);
    for (int i = 0; i < n; i++) {
        rgb_image_alloc(&f[i], w, h);
        memset(f[i].pixels, 20 * i, (size_t)w * h * 3);
    }
    char path[1500];
    path_join(path, sizeof path, dir, name);
    mp4_write_rgb(path, f, n, fps, NULL);
    for (int i = 0; i < n; i++) rgb_image_free(&f[i]);
    free(f);
}

TEST(prepare_videos_sampled_in_time_into_buckets) {
    char in[1400], out[1400];
    tmp(in, sizeof in, "vin");
    tmp(out, sizeof out, "vout");
    mkdir_p(in);
    put_video(in, "long.mp4", 12, 64, 48, 24); /* 0.5 s: at 8 fps 4 frames, source frames 0, 3, 6, 9 */
    put_text(in, "long.txt", "grey steps");
    put_video(in, "short.mp4", 2, 32, 32, 8); /* 2 frames */
    put_text(in, "short.txt", "two frames");
    PrepareMediaOptions o = small(in, out);
    o.fps = 8;
    o.frames = 3;
    PrepareMediaResult r;
    REQUIRE_OK(prepare_videos(&o, &r));
    CHECK(r.progress.samples_done == 2 && r.frames == 5);
    char path[1500];
    path_join(path, sizeof path, out, "shard-000000.tar");
    TarShard *ts;
    REQUIRE_OK(tar_shard_open(&ts, path));
    TarSample s;
    REQUIRE_OK(tar_shard_read_sample(ts, 0, &s));
    NpyArray a;
    float *lat = part_floats(&s, "latent.npy", &a);
    REQUIRE(lat);
    CHECK(a.ndim == 4 && a.shape[0] == 3 && a.shape[1] == 3 && a.shape[2] == 16 && a.shape[3] == 24);
    for (int t = 0; t < 3; t++) /* frame t shows source frame 3t: grey 60t */
        CHECK_MSG(fabsf(lat[t * 16 * 24 + 100] - (60 * t / 255.0f - 0.5f)) < 0.03f, "frame %d: %g", t, lat[t * 16 * 24 + 100]);
    json_t *j = json_loadb((const char *)tar_sample_part(&s, "json")->data, tar_sample_part(&s, "json")->size, 0, NULL);
    CHECK(json_integer_value(json_object_get(j, "frames")) == 3 && json_real_value(json_object_get(j, "fps")) == 8.0);
    CHECK(fabs(json_real_value(json_object_get(j, "source_fps")) - 24) < 1e-6);
    json_decref(j);
    free(lat);
    tar_sample_free(&s);
    REQUIRE_OK(tar_shard_read_sample(ts, 1, &s));
    lat = part_floats(&s, "latent.npy", &a);
    CHECK(lat && a.shape[1] == 2 && a.shape[2] == 16 && a.shape[3] == 16);
    free(lat);
    tar_sample_free(&s);
    tar_shard_close(ts);
    /* a file that is not a video, named */
    put_text(in, "bad.mkv", "not a video");
    put_text(in, "bad.txt", "x");
    o.force = 1;
    CHECK_MSG(prepare_videos(&o, NULL) == VFM_ERR_FORMAT && strstr(vfm_last_error(), "bad.mkv"), "%s", vfm_last_error());
    CHECK(no_leftovers(test_tmpdir()));
}

TEST(prepare_media_cli_summary_and_errors) {
    char in[1400], out[1400];
    tmp(in, sizeof in, "in");
    tmp(out, sizeof out, "out");
    image_inputs(in);
    const char *args[] = {"prepare", "images", in, "--out", out, "--buckets", "32x32,32x48,48x32", "--d-text", "8", "--threads", "2"};
    char *o, *e;
    int rc = run_vfm(args, 11, &o, &e);
    CHECK_MSG(rc == 0, "rc %d: %s", rc, e);
    CHECK_MSG(strstr(o, "prepared 4 samples (4 images; buckets 32x32: 1, 32x48: 2, 48x32: 1) in 1 shard, ") == o, "%s", o);
    CHECK(strstr(o, "1 other file under") != NULL);
    CHECK_MSG(strstr(e, "prepare: 4/4 samples, 1 shard\n") != NULL, "%s", e);
    free(o);
    free(e);
    const struct {
        const char *args[8];
        int n, rc;
        const char *err;
    } cases[] = {
        {{"prepare", "images", in, "--out", out}, 5, 1, "already holds a dataset; pass --force"},
        {{"prepare", "images", in, "--out", out, "--factor", "0"}, 7, 2, "vfm prepare images: --factor 0: want 1..16"},
        {{"prepare", "images", in, "--out", out, "--buckets", "32"}, 7, 2, "vfm prepare images: --buckets: bucket '32': want HxW"},
        {{"prepare", "images", in, "extra", "--out", out}, 6, 2, "vfm prepare images: unexpected argument 'extra'"},
        {{"prepare", "images", in, "--out", out, "--text-npy", "--d-text", "4"}, 8, 2, "with --text-npy the width is NAME.npy's"},
        {{"prepare", "videos", in, "--out", out, "--fps", "0"}, 7, 2, "vfm prepare videos: --fps 0: want a number in (0, 1000]"},
        {{"prepare", "videos", in, "--out", out, "--frames", "x"}, 7, 2, "vfm prepare videos: --frames 'x': expected an integer"},
        {{"prepare", "videos", in, "--out", out, "--force"}, 6, 2, "holds no videos (mp4, m4v"},
        {{"prepare", "images", in, "--out", out, "--fps", "4"}, 7, 2, "unknown option '--fps'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rc = run_vfm(cases[i].args, cases[i].n, &o, &e);
        CHECK_MSG(rc == cases[i].rc && strstr(e, cases[i].err) && strchr(e, '\n') == e + strlen(e) - 1 && o[0] == 0,
                  "case %zu: rc %d, stderr %s", i, rc, e);
        free(o);
        free(e);
    }
}
