/* vfm prepare synthetic: shards read back (keys, parts, shapes, values against the generator, the
 * colour judge on the inverse-mapped latent, caption embeddings, json fields), progress, byte-identical
 * output across runs and thread counts, refusal and --force, bad options, and the CLI. */
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/commands.h"
#include "core/fileutil.h"
#include "data/prepare/caption_encoder.h"
#include "data/synthetic/colour_score.h"
#include "data/formats/json_util.h"
#include "data/formats/npy.h"
#include "data/prepare/prepare_synthetic.h"
#include "data/synthetic/synthetic.h"
#include "data/formats/tar.h"
#include "capture.h"
#include "data_fixture.h"
#include "test.h"

static void subdir(char *out, size_t n, const char *name) { path_join(out, n, test_tmpdir(), name); }

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static int64_t file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (int64_t)st.st_size : -1;
}

static void shard_path(char *out, size_t n, const char *dir, int shard) {
    char name[64];
    snprintf(name, sizeof name, "shard-%06d.tar", shard);
    path_join(out, n, dir, name);
}

/* Records every progress call. */
typedef struct {
    PrepareProgress calls[64];
    int n;
} ProgressLog;

static void log_progress(void *ctx, const PrepareProgress *p) {
    ProgressLog *log = ctx;
    if (log->n < 64) log->calls[log->n] = *p;
    log->n++;
}

/* 12 images + 4 videos, 2 per shard, d_text 32, seed 1 (the seed whose first specs test_synthetic pins). */
static PrepareSyntheticOptions small_options(const char *dir) {
    PrepareSyntheticOptions o = prepare_synthetic_defaults();
    o.out_dir = dir;
    o.images = 12;
    o.videos = 4;
    o.seed = 1;
    o.d_text = 32;
    o.samples_per_shard = 2;
    return o;
}

static float *npy_floats(const TarSample *s, const char *part, NpyArray *a) {
    const TarPart *p = tar_sample_part(s, part);
    if (!p || npy_parse(p->data, p->size, part, a) != VFM_OK || a->dtype != NPY_F4) return NULL;
    float *x = malloc(sizeof(float) * (size_t)(a->numel ? a->numel : 1));
    npy_to_f32(a, x);
    return x;
}

TEST(prepare_synthetic_defaults_are_documented_values) {
    PrepareSyntheticOptions o = prepare_synthetic_defaults();
    CHECK(o.images == 0 && o.videos == 0 && o.seed == 0 && o.force == 0);
    CHECK(o.d_text == 64 && o.factor == 2 && o.samples_per_shard == 256 && o.supersample == 4);
    CHECK(o.position_spread == 1.0f);
}

TEST(prepare_synthetic_shards_read_back) {
    char dir[1400];
    subdir(dir, sizeof dir, "set/nested"); /* parents are created too */
    PrepareSyntheticOptions o = small_options(dir);
    ProgressLog log = {0};
    o.progress = log_progress;
    o.progress_ctx = &log;
    PrepareProgress result;
    REQUIRE_OK(prepare_synthetic(&o, &result));

    /* progress: once per sample, in order; a shard counts once it is closed (every second sample) */
    CHECK(log.n == 16);
    for (int i = 0; i < 16 && i < log.n; i++) {
        CHECK(log.calls[i].samples_done == i + 1 && log.calls[i].samples_total == 16);
        CHECK_MSG(log.calls[i].shards_done == (i + 1) / 2, "call %d: %d shards", i, log.calls[i].shards_done);
    }
    CHECK(result.samples_done == 16 && result.samples_total == 16 && result.shards_done == 8);

    const SyntheticConfig cfg = synthetic_config_defaults();
    const PixelLatentMap map = pixel_latent_map_default();
    const ColourJudge judge = colour_judge_defaults();
    const CaptionEncoder enc = {32};
    int64_t bytes = 0;
    char path[1500];
    shard_path(path, sizeof path, dir, 8);
    CHECK(!path_exists(path));
    for (int shard = 0; shard < 8; shard++) {
        shard_path(path, sizeof path, dir, shard);
        bytes += file_size(path);
        char idx[1600];
        tar_index_path(path, idx, sizeof idx);
        CHECK_MSG(file_size(idx) == 3 * 8, "%s", idx); /* N + 1 = 3 uint64 entries */
        TarShard *ts;
        REQUIRE_OK(tar_shard_open(&ts, path));
        CHECK(tar_shard_index_was_cached(ts));
        CHECK(tar_shard_num_samples(ts) == 2);
        for (int i = 0; i < 2; i++) {
            const int n = 2 * shard + i, is_video = n >= 12, index = is_video ? n - 12 : n;
            TarSample s;
            REQUIRE_OK(tar_shard_read_sample(ts, i, &s));
            char key[16];
            snprintf(key, sizeof key, "%08d", n);
            CHECK_MSG(strcmp(s.key, key) == 0, "key %s, want %s", s.key, key);
            REQUIRE(s.num_parts == 3);
            CHECK(strcmp(s.parts[0].name, "latent.npy") == 0 && strcmp(s.parts[1].name, "text.npy") == 0 &&
                  strcmp(s.parts[2].name, "json") == 0);

            SyntheticSpec spec;
            REQUIRE_OK(synthetic_spec_generate(&cfg, 1, (uint64_t)index, is_video, &spec));
            char caption[128];
            synthetic_caption(&spec, caption, sizeof caption);
            const int T = spec.frames, h = spec.height / 2, w = spec.width / 2;

            /* latent: [3, T, H/2, W/2], exactly the renderer's frames through the map */
            NpyArray la;
            float *latent = npy_floats(&s, "latent.npy", &la);
            REQUIRE(latent);
            CHECK(la.ndim == 4 && la.shape[0] == 3 && la.shape[1] == T && la.shape[2] == h && la.shape[3] == w);
            CHECK(is_video ? T >= 4 && T <= 8 : T == 1);
            float *pixels = malloc(sizeof(float) * 3 * (size_t)T * spec.height * spec.width);
            float *want = malloc(sizeof(float) * 3 * (size_t)T * h * w), *back = malloc(sizeof(float) * 3 * (size_t)T * h * w);
            REQUIRE_OK(synthetic_render(&spec, 4, pixels));
            REQUIRE_OK(pixel_to_latent(&map, pixels, T, spec.height, spec.width, want));
            /* same code, same inputs: bit-identical */
            CHECK_CLOSE_F32("latent", latent, want, 3 * (int64_t)T * h * w, 0, 0);

            /* the colour judge on the inverse-mapped latent agrees with the caption */
            REQUIRE_OK(latent_to_pixel(&map, latent, T, h, w, back));
            float share;
            int judged = colour_dominant_planar(&judge, synthetic_palette, SYNTHETIC_N_COLOURS, back, (int64_t)T * h * w,
                                                (int64_t)T * h * w, &share);
            int named = colour_from_caption(synthetic_palette, SYNTHETIC_N_COLOURS, caption);
            CHECK_MSG(judged == named && named == spec.colour, "sample %d '%s': judged %d", n, caption, judged);
            CHECK_MSG(share == 1.0f, "sample %d: share %.3f", n, share);

            /* text: [L, 32] = caption_encode(caption) */
            NpyArray ta;
            float *text = npy_floats(&s, "text.npy", &ta);
            REQUIRE(text);
            const int L = caption_token_count(caption);
            CHECK(L == (is_video ? 5 : 3));
            CHECK(ta.ndim == 2 && ta.shape[0] == L && ta.shape[1] == 32);
            float ref[5 * 32];
            int n_tokens;
            REQUIRE_OK(caption_encode(&enc, caption, ref, 5, &n_tokens));
            CHECK(n_tokens == L);
            CHECK_CLOSE_F32("text", text, ref, (int64_t)L * 32, 0, 0);

            /* json */
            const TarPart *jp = tar_sample_part(&s, "json");
            json_t *j;
            REQUIRE_OK(json_parse_part(jp->data, jp->size, "json", &j));
            const char *got_caption, *shape, *colour, *motion;
            int64_t fps, got_index;
            CHECK_OK(json_get_string(j, "caption", "", "json", &got_caption));
            CHECK_OK(json_get_string(j, "shape", "", "json", &shape));
            CHECK_OK(json_get_string(j, "colour", "", "json", &colour));
            CHECK_OK(json_get_string(j, "motion", "", "json", &motion));
            CHECK_OK(json_get_int(j, "fps", -1, "json", &fps));
            CHECK_OK(json_get_int(j, "index", -1, "json", &got_index));
            CHECK_MSG(strcmp(got_caption, caption) == 0, "caption '%s', want '%s'", got_caption, caption);
            CHECK(strcmp(shape, synthetic_shape_name(spec.shape)) == 0);
            CHECK(strcmp(colour, synthetic_palette[spec.colour].name) == 0);
            CHECK(strcmp(motion, synthetic_motion_name(spec.motion)) == 0);
            CHECK(strcmp(motion, "still") == 0 ? !is_video : is_video);
            CHECK(fps == (is_video ? 8 : 30));
            CHECK(got_index == n);
            json_t *ps = json_object_get(j, "pixel_space");
            REQUIRE(json_is_object(ps));
            char *ps_text = json_dumps(ps, 0);
            PixelLatentMap got_map;
            CHECK_OK(pixel_latent_map_from_json(ps_text, &got_map));
            CHECK(got_map.factor == 2 && got_map.offset[0] == 0.5f && got_map.offset[2] == 0.5f && got_map.scale[1] == 1.0f);
            free(ps_text);
            CHECK(json_object_size(j) == 7);
            json_decref(j);

            /* the specs test_synthetic pins for seed 1 */
            static const char *const pinned[2][3] = {
                {"a cyan diamond", "a blue cross", "a magenta circle"},
                {"a blue circle moving right", "a magenta square moving down", "a white triangle moving up"},
            };
            static const int pinned_shape[2][3][4] = {{{3, 1, 16, 16}, {3, 1, 16, 24}, {3, 1, 24, 16}},
                                                      {{3, 4, 24, 16}, {3, 4, 24, 16}, {3, 7, 24, 16}}};
            if (index < 3) {
                CHECK_MSG(strcmp(caption, pinned[is_video][index]) == 0, "sample %d: '%s'", n, caption);
                for (int d = 0; d < 4; d++) CHECK(la.shape[d] == pinned_shape[is_video][index][d]);
            }
            free(latent);
            free(pixels);
            free(want);
            free(back);
            free(text);
            tar_sample_free(&s);
        }
        tar_shard_close(ts);
    }
    CHECK(result.bytes_written == bytes);

    char meta_path[1500];
    path_join(meta_path, sizeof meta_path, dir, "vfm_dataset.json");
    char *meta_text;
    size_t meta_len;
    REQUIRE_OK(read_file_all(meta_path, &meta_text, &meta_len));
    json_t *meta;
    REQUIRE_OK(json_parse_part(meta_text, meta_len, meta_path, &meta));
    const char *kind, *encoder, *captions;
    int64_t images, videos, seed, d_text, shards, per_shard;
    CHECK_OK(json_get_string(meta, "kind", "", "meta", &kind));
    CHECK_OK(json_get_string(meta, "caption_encoder", "", "meta", &encoder));
    CHECK_OK(json_get_string(meta, "captions", "", "meta", &captions));
    CHECK_OK(json_get_int(meta, "images", -1, "meta", &images));
    CHECK_OK(json_get_int(meta, "videos", -1, "meta", &videos));
    CHECK_OK(json_get_int(meta, "seed", -1, "meta", &seed));
    CHECK_OK(json_get_int(meta, "d_text", -1, "meta", &d_text));
    CHECK_OK(json_get_int(meta, "shards", -1, "meta", &shards));
    CHECK_OK(json_get_int(meta, "samples_per_shard", -1, "meta", &per_shard));
    CHECK(strcmp(kind, "synthetic") == 0 && strcmp(encoder, CAPTION_ENCODER_ID) == 0);
    CHECK(strstr(captions, "a <colour> <shape> moving <direction>") != NULL);
    CHECK(images == 12 && videos == 4 && seed == 1 && d_text == 32 && shards == 8 && per_shard == 2);
    CHECK(json_integer_value(json_object_get(json_object_get(meta, "pixel_space"), "factor")) == 2);
    CHECK(json_array_size(json_object_get(meta, "colours")) == SYNTHETIC_N_COLOURS);
    json_decref(meta);
    free(meta_text);
}

TEST(prepare_synthetic_factor_and_odd_shard_sizes) {
    /* factor 4, d_text 8, 5 samples in shards of 3: shard 1 holds the last 2 */
    char dir[1400];
    subdir(dir, sizeof dir, "f4");
    PrepareSyntheticOptions o = small_options(dir);
    o.images = 3;
    o.videos = 2;
    o.factor = 4;
    o.d_text = 8;
    o.samples_per_shard = 3;
    o.supersample = 2;
    PrepareProgress r;
    REQUIRE_OK(prepare_synthetic(&o, &r));
    CHECK(r.shards_done == 2 && r.samples_done == 5);
    const int want_samples[2] = {3, 2};
    const SyntheticConfig cfg = synthetic_config_defaults();
    PixelLatentMap map = pixel_latent_map_default();
    map.factor = 4;
    for (int shard = 0; shard < 2; shard++) {
        char path[1500];
        shard_path(path, sizeof path, dir, shard);
        TarShard *ts;
        REQUIRE_OK(tar_shard_open(&ts, path));
        CHECK(tar_shard_num_samples(ts) == want_samples[shard]);
        for (int i = 0; i < want_samples[shard]; i++) {
            int n = 3 * shard + i, is_video = n >= 3;
            TarSample s;
            REQUIRE_OK(tar_shard_read_sample(ts, i, &s));
            SyntheticSpec spec;
            REQUIRE_OK(synthetic_spec_generate(&cfg, 1, (uint64_t)(is_video ? n - 3 : n), is_video, &spec));
            NpyArray la, ta;
            float *latent = npy_floats(&s, "latent.npy", &la), *text = npy_floats(&s, "text.npy", &ta);
            REQUIRE(latent && text);
            const int T = spec.frames, h = spec.height / 4, w = spec.width / 4;
            CHECK(la.shape[1] == T && la.shape[2] == h && la.shape[3] == w);
            CHECK(ta.shape[1] == 8);
            float *pixels = malloc(sizeof(float) * 3 * (size_t)T * spec.height * spec.width);
            float *want = malloc(sizeof(float) * 3 * (size_t)T * h * w);
            REQUIRE_OK(synthetic_render(&spec, 2, pixels));
            REQUIRE_OK(pixel_to_latent(&map, pixels, T, spec.height, spec.width, want));
            CHECK_CLOSE_F32("latent f4 ss2", latent, want, 3 * (int64_t)T * h * w, 0, 0);
            const TarPart *jp = tar_sample_part(&s, "json");
            json_t *j;
            REQUIRE_OK(json_parse_part(jp->data, jp->size, "json", &j));
            CHECK(json_integer_value(json_object_get(json_object_get(j, "pixel_space"), "factor")) == 4);
            json_decref(j);
            free(latent);
            free(text);
            free(pixels);
            free(want);
            tar_sample_free(&s);
        }
        tar_shard_close(ts);
    }
}

TEST(prepare_synthetic_is_byte_identical_across_runs_and_thread_counts) {
    /* 170 samples cross the 128-sample encoding chunk; shards of 64 do not align with it */
    char a[1400], b[1400], c[1400];
    subdir(a, sizeof a, "run_a");
    subdir(b, sizeof b, "run_b");
    subdir(c, sizeof c, "run_c");
    PrepareSyntheticOptions o = small_options(a);
    o.images = 150;
    o.videos = 20;
    o.samples_per_shard = 64;
    omp_set_num_threads(1);
    REQUIRE_OK(prepare_synthetic(&o, NULL));
    omp_set_num_threads(3);
    o.out_dir = b;
    REQUIRE_OK(prepare_synthetic(&o, NULL));
    int n_files;
    CHECK(fixture_same_files(a, b, &n_files));
    CHECK_MSG(n_files == 7, "%d files", n_files); /* 3 shards, 3 indexes, vfm_dataset.json */
    /* another seed changes the shards */
    o.out_dir = c;
    o.seed = 2;
    REQUIRE_OK(prepare_synthetic(&o, NULL));
    char pa[1500], pc[1500];
    shard_path(pa, sizeof pa, a, 0);
    shard_path(pc, sizeof pc, c, 0);
    char *da, *dc;
    size_t la, lc;
    REQUIRE_OK(read_file_all(pa, &da, &la));
    REQUIRE_OK(read_file_all(pc, &dc, &lc));
    CHECK(la != lc || memcmp(da, dc, la) != 0);
    free(da);
    free(dc);
}

TEST(prepare_synthetic_refuses_existing_shards_unless_force) {
    char dir[1400], path[1500];
    subdir(dir, sizeof dir, "forced");
    PrepareSyntheticOptions o = small_options(dir);
    o.images = 8;
    o.videos = 0; /* 4 shards */
    REQUIRE_OK(prepare_synthetic(&o, NULL));
    shard_path(path, sizeof path, dir, 0);
    char *before;
    size_t before_len;
    REQUIRE_OK(read_file_all(path, &before, &before_len));

    /* without --force: refused, nothing changes */
    o.images = 3;
    vfm_status s = prepare_synthetic(&o, NULL);
    CHECK(s == VFM_ERR_IO);
    CHECK_MSG(strstr(vfm_last_error(), "already holds 4 shards (shard-000000.tar, ...); pass --force") != NULL &&
                  strstr(vfm_last_error(), dir) != NULL,
              "%s", vfm_last_error());
    char *after;
    size_t after_len;
    REQUIRE_OK(read_file_all(path, &after, &after_len));
    CHECK(after_len == before_len && memcmp(before, after, before_len) == 0);
    free(after);
    shard_path(path, sizeof path, dir, 3);
    CHECK(path_exists(path));

    /* with --force: old shards, their indexes, leftovers of an interrupted run and .nv-meta go;
     * other files stay */
    char tmp_left[1500], nv_meta[1500], nv_file[1600], notes[1500];
    path_join(tmp_left, sizeof tmp_left, dir, "shard-000009.tar.tmp.Ab12Cd");
    path_join(nv_meta, sizeof nv_meta, dir, ".nv-meta");
    path_join(nv_file, sizeof nv_file, nv_meta, "index.sqlite");
    path_join(notes, sizeof notes, dir, "notes.txt");
    write_text(tmp_left, "partial");
    REQUIRE_OK(mkdir_p(nv_meta));
    write_text(nv_file, "stale");
    write_text(notes, "mine");
    o.force = 1;
    PrepareProgress r;
    REQUIRE_OK(prepare_synthetic(&o, &r));
    CHECK(r.shards_done == 2);
    for (int shard = 0; shard < 4; shard++) {
        char idx[1600];
        shard_path(path, sizeof path, dir, shard);
        tar_index_path(path, idx, sizeof idx);
        CHECK_MSG(path_exists(path) == (shard < 2) && path_exists(idx) == (shard < 2), "shard %d", shard);
    }
    CHECK(!path_exists(tmp_left) && !path_exists(nv_meta));
    CHECK(path_exists(notes));
    shard_path(path, sizeof path, dir, 0);
    char *replaced;
    size_t replaced_len;
    REQUIRE_OK(read_file_all(path, &replaced, &replaced_len));
    /* shard 0 holds the same two first images as before, so it is byte-identical to the old one */
    CHECK(replaced_len == before_len && memcmp(before, replaced, before_len) == 0);
    free(replaced);
    free(before);
    char meta_path[1500];
    path_join(meta_path, sizeof meta_path, dir, "vfm_dataset.json");
    char *meta;
    size_t meta_len;
    REQUIRE_OK(read_file_all(meta_path, &meta, &meta_len));
    CHECK(strstr(meta, "\"images\": 3,") != NULL && strstr(meta, "\"shards\": 2,") != NULL);
    free(meta);

    /* a .tar vfm did not write is never removed: refused with and without --force */
    char foreign[1500];
    path_join(foreign, sizeof foreign, dir, "other.tar");
    write_text(foreign, "not ours");
    for (int force = 0; force < 2; force++) {
        o.force = force;
        CHECK(prepare_synthetic(&o, NULL) == VFM_ERR_IO);
        CHECK_MSG(strstr(vfm_last_error(), force ? "holds other.tar, which vfm prepare did not write" : "already holds 3 shards") != NULL,
                  "%s", vfm_last_error());
        CHECK(path_exists(foreign) && path_exists(path));
    }

    /* a directory with only vfm_dataset.json is a dataset too */
    char only_meta[1400], only_meta_file[1500];
    subdir(only_meta, sizeof only_meta, "only_meta");
    REQUIRE_OK(mkdir_p(only_meta));
    path_join(only_meta_file, sizeof only_meta_file, only_meta, "vfm_dataset.json");
    write_text(only_meta_file, "{}");
    o.out_dir = only_meta;
    o.force = 0;
    CHECK(prepare_synthetic(&o, NULL) == VFM_ERR_IO);
    CHECK(strstr(vfm_last_error(), "already holds vfm_dataset.json; pass --force") != NULL);
}

TEST(prepare_synthetic_bad_options_touch_nothing) {
    char dir[1400];
    subdir(dir, sizeof dir, "never");
    static const struct {
        const char *field;
        int64_t value;
        const char *message;
    } cases[] = {
        {"images", -1, "--images -1 --videos 4: want counts >= 0"},
        {"videos", -4, "--images 12 --videos -4: want counts >= 0"},
        {"none", 0, "nothing to prepare"},
        {"d_text", 0, "--d-text 0: want 1..65536"},
        {"d_text", 65537, "--d-text 65537: want 1..65536"},
        {"factor", 3, "--factor 3 does not divide the 32x32 canvas"},
        {"factor", 0, "--factor 0: want 1..16"},
        {"factor", 32, "--factor 32: want 1..16"},
        {"samples_per_shard", 0, "--samples-per-shard 0: want >= 1"},
        {"supersample", 0, "--supersample 0: want 1..16"},
        {"supersample", 17, "--supersample 17: want 1..16"},
        {"position_spread", -1, "--position-spread -1: want 0..1"},
        {"position_spread", 2, "--position-spread 2: want 0..1"},
        {"seed", -1, "--seed 18446744073709551615: want 0..9223372036854775807"},
        {"too_many", PREPARE_MAX_SAMPLES, "samples: at most 99999999 in all"},
        {"too_many_shards", 1000001, "1000001 shards: at most 1000000"},
        {"out", 0, "--out DIR is required"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        PrepareSyntheticOptions o = small_options(dir);
        const char *f = cases[i].field;
        int v = (int)cases[i].value;
        if (!strcmp(f, "images")) o.images = cases[i].value;
        else if (!strcmp(f, "videos")) o.videos = cases[i].value;
        else if (!strcmp(f, "none")) o.images = o.videos = 0;
        else if (!strcmp(f, "d_text")) o.d_text = v;
        else if (!strcmp(f, "factor")) o.factor = v;
        else if (!strcmp(f, "samples_per_shard")) o.samples_per_shard = v;
        else if (!strcmp(f, "supersample")) o.supersample = v;
        else if (!strcmp(f, "position_spread")) o.position_spread = (float)v;
        else if (!strcmp(f, "seed")) o.seed = (uint64_t)cases[i].value;
        else if (!strcmp(f, "too_many")) o.images = cases[i].value, o.videos = 0;
        else if (!strcmp(f, "too_many_shards")) o.images = cases[i].value, o.videos = 0, o.samples_per_shard = 1;
        else if (!strcmp(f, "out")) o.out_dir = NULL;
        vfm_status s = prepare_synthetic(&o, NULL);
        CHECK_MSG(s == VFM_ERR_USAGE, "case %zu (%s): %s", i, f, vfm_status_name(s));
        CHECK_MSG(strncmp(vfm_last_error(), "vfm prepare synthetic: ", 23) == 0 && strstr(vfm_last_error(), cases[i].message),
                  "case %zu: '%s'", i, vfm_last_error());
        CHECK_MSG(!path_exists(dir), "case %zu created the directory", i);
    }
}

/* ---- the command line ---- */

static int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

TEST(prepare_cli_writes_a_set_with_progress_and_summary) {
    char dir[1400];
    subdir(dir, sizeof dir, "cli");
    const char *args[] = {"prepare", "synthetic", "--out", dir, "--images", "3", "--videos=2", "--samples-per-shard", "2",
                          "--seed", "7", "--d-text", "16"};
    char *out, *err;
    int rc = run_vfm(args, 13, &out, &err);
    CHECK_MSG(rc == 0, "rc %d, stderr: %s", rc, err);
    int64_t bytes = 0;
    for (int shard = 0; shard < 3; shard++) {
        char path[1500];
        shard_path(path, sizeof path, dir, shard);
        bytes += file_size(path);
    }
    char want[2000];
    snprintf(want, sizeof want, "prepared 5 samples (3 images, 2 videos) in 3 shards, %" PRId64 " bytes, ", bytes);
    CHECK_MSG(strncmp(out, want, strlen(want)) == 0 && count_lines(out) == 3, "stdout: %s", out);
    snprintf(want, sizeof want, " s: %s\ntrain on it with: vfm train ", dir); /* then the keys that fit it */
    CHECK_MSG(strstr(out, want) != NULL, "stdout: %s", out);
    /* fewer samples than 20 steps: one line per sample */
    CHECK_MSG(strcmp(err, "prepare: 1/5 samples, 0 shards\nprepare: 2/5 samples, 1 shard\nprepare: 3/5 samples, 1 shard\n"
                          "prepare: 4/5 samples, 2 shards\nprepare: 5/5 samples, 3 shards\n") == 0,
              "stderr: %s", err);
    free(out);
    free(err);

    /* again: refused (exit 1, one line), then replaced with --force */
    rc = run_vfm(args, 13, &out, &err);
    CHECK(rc == 1);
    snprintf(want, sizeof want, "vfm: %s: already holds 3 shards (shard-000000.tar, ...); pass --force to replace them\n", dir);
    CHECK_MSG(strcmp(err, want) == 0, "stderr: %s", err);
    CHECK(out[0] == 0);
    free(out);
    free(err);
    const char *forced[] = {"prepare", "synthetic", "--out", dir, "--videos", "40", "--force"};
    rc = run_vfm(forced, 7, &out, &err);
    CHECK_MSG(rc == 0, "rc %d, stderr: %s", rc, err);
    const char *summary = "prepared 40 samples (0 images, 40 videos) in 1 shard, ";
    CHECK_MSG(strncmp(out, summary, strlen(summary)) == 0, "stdout: %s", out);
    /* 40 samples: a line every 2 samples (5%) */
    CHECK_MSG(count_lines(err) == 20 && strstr(err, "prepare: 2/40 samples, 0 shards\n") == err &&
                  strstr(err, "prepare: 40/40 samples, 1 shard\n") != NULL,
              "stderr: %s", err);
    free(out);
    free(err);
}

TEST(prepare_cli_errors_exit_with_one_line) {
    char dir[1400], file[1400], under_file[1500];
    subdir(dir, sizeof dir, "never");
    subdir(file, sizeof file, "a_file");
    write_text(file, "x");
    path_join(under_file, sizeof under_file, file, "set");
    static const char *const pre = "vfm prepare synthetic: ";
    const struct {
        const char *args[8];
        int n, rc;
        const char *err; /* "@" stands for the tail after `pre` when it starts with '+' */
    } cases[] = {
        {{"prepare"}, 1, 2, "vfm prepare: expected a subcommand: synthetic, images or videos (see vfm prepare --help)\n"},
        {{"prepare", "frames"}, 2, 2,
         "vfm prepare: unknown subcommand 'frames' (expected synthetic, images or videos; see vfm prepare --help)\n"},
        {{"prepare", "images", "--out", dir}, 4, 2,
         "vfm prepare images: give the input folder DIR and --out OUT (see vfm prepare images --help)\n"},
        {{"prepare", "videos"}, 2, 2, "vfm prepare videos: give the input folder DIR and --out OUT (see vfm prepare videos --help)\n"},
        {{"prepare", "synthetic", "--images", "3"}, 4, 2, "+--out DIR is required\n"},
        {{"prepare", "synthetic", "--out", dir, "--images", "abc"}, 6, 2, "+--images 'abc': expected an integer\n"},
        {{"prepare", "synthetic", "--out", dir, "--images", "12x"}, 6, 2, "+--images '12x': expected an integer\n"},
        {{"prepare", "synthetic", "--out", dir, "--videos", "-3"}, 6, 2, "+--videos -3: want 0..9223372036854775807\n"},
        {{"prepare", "synthetic", "--out", dir, "--images", "99999999999999999999"}, 6, 2,
         "+--images 99999999999999999999: want 0..9223372036854775807\n"},
        {{"prepare", "synthetic", "--out", dir, "--images", "2", "--factor", "3"}, 8, 2,
         "+--factor 3 does not divide the 32x32 canvas (use 1, 2, 4, 8 or 16)\n"},
        {{"prepare", "synthetic", "--out", dir, "--images", "2", "--d-text", "0"}, 8, 2, "+--d-text 0: want 1..65536\n"},
        {{"prepare", "synthetic", "--out", dir, "--images", "2", "--samples-per-shard", "0"}, 8, 2,
         "+--samples-per-shard 0: want >= 1\n"},
        {{"prepare", "synthetic", "--out", dir, "--images", "2", "--supersample", "99"}, 8, 2, "+--supersample 99: want 1..16\n"},
        {{"prepare", "synthetic", "--out", dir, "--images", "2", "--position-spread", "half"}, 8, 2,
         "+--position-spread 'half': want a number in 0..1\n"},
        {{"prepare", "synthetic", "--out", dir, "--images", "2", "--position-spread", "1.5"}, 8, 2,
         "+--position-spread '1.5': want a number in 0..1\n"},
        {{"prepare", "synthetic", "--out", dir, "--images", "2", "--seed", "-1"}, 8, 2,
         "+--seed -1: want 0..9223372036854775807\n"},
        {{"prepare", "synthetic", "--out", dir}, 4, 2, "+nothing to prepare (give --images N and/or --videos M)\n"},
        {{"prepare", "synthetic", "--out", dir, "--images", "2", "--bogus"}, 7, 2,
         "vfm prepare synthetic: unknown option '--bogus' (see vfm prepare synthetic --help)\n"},
        {{"prepare", "synthetic", "--out", dir, "--images", "2", "extra"}, 7, 2, "+unexpected argument 'extra'\n"},
        {{"prepare", "synthetic", "--out", dir, "--images"}, 5, 2, "+option '--images' needs a value N\n"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *out, *err, want[600];
        if (cases[i].err[0] == '+') snprintf(want, sizeof want, "%s%s", pre, cases[i].err + 1);
        else snprintf(want, sizeof want, "%s", cases[i].err);
        int rc = run_vfm(cases[i].args, cases[i].n, &out, &err);
        CHECK_MSG(rc == cases[i].rc, "case %zu: rc %d", i, rc);
        CHECK_MSG(strcmp(err, want) == 0, "case %zu: stderr\n      got      %s      expected %s", i, err, want);
        CHECK_MSG(out[0] == 0, "case %zu: stdout not empty", i);
        CHECK_MSG(!path_exists(dir), "case %zu created the directory", i);
        free(out);
        free(err);
    }
    /* an unwritable place: exit 1, one line naming the path */
    const char *bad[] = {"prepare", "synthetic", "--out", under_file, "--images", "2"};
    char *out, *err;
    int rc = run_vfm(bad, 6, &out, &err);
    CHECK(rc == 1);
    CHECK_MSG(strstr(err, under_file) != NULL && count_lines(err) == 1 && strncmp(err, "vfm: ", 5) == 0, "stderr: %s", err);
    CHECK(out[0] == 0);
    free(out);
    free(err);
    if (geteuid() != 0) { /* root writes anywhere */
        char ro[1400];
        subdir(ro, sizeof ro, "read_only");
        REQUIRE_OK(mkdir_p(ro));
        chmod(ro, 0555);
        const char *ro_args[] = {"prepare", "synthetic", "--out", ro, "--images", "2"};
        rc = run_vfm(ro_args, 6, &out, &err);
        CHECK(rc == 1);
        CHECK_MSG(strstr(err, ro) != NULL && count_lines(err) == 1, "stderr: %s", err);
        chmod(ro, 0755);
        free(out);
        free(err);
    }
}

TEST(prepare_cli_help_at_both_levels) {
    const struct {
        const char *args[3];
        int n;
        const char *has[3];
    } cases[] = {
        {{"prepare", "--help"}, 2, {"usage: vfm prepare synthetic --out DIR", "vfm prepare images DIR --out OUT", "vfm prepare videos DIR"}},
        {{"prepare", "synthetic", "--help"}, 3, {"--samples-per-shard K", "--force", "latent.npy (float32 [3, T, H/F, W/F])"}},
        {{"prepare", "synthetic", "-h"}, 3, {"--supersample SS", "--d-text D", "shard-000000.tar"}},
        {{"prepare", "images", "--help"}, 3, {"usage: vfm prepare images DIR --out OUT", "--buckets HxW,...", "--allow-uncaptioned"}},
        {{"prepare", "videos", "--help"}, 3, {"--fps F", "--frames T", "FFmpeg"}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *out, *err;
        int rc = run_vfm(cases[i].args, cases[i].n, &out, &err);
        CHECK_MSG(rc == 0, "case %zu: rc %d", i, rc);
        CHECK_MSG(err[0] == 0, "case %zu: stderr %s", i, err);
        for (int k = 0; k < 3; k++) CHECK_MSG(strstr(out, cases[i].has[k]) != NULL, "case %zu: no '%s' in\n%s", i, cases[i].has[k], out);
        free(out);
        free(err);
    }
}
