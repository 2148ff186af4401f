/* vfm data inspect: shards and samples per shard, the parts table (formats, dtypes, shapes read from
 * every sample), every broken sample named once with its reason (NaN latent, bad json, wrong shape,
 * no latent, a torch part, a cut npy), an unreadable shard named, the token histogram, exit status;
 * --quick sees only what the length index sees. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/commands.h"
#include "core/fileutil.h"
#include "data/inspect.h"
#include "data/npy.h"
#include "data/tar.h"
#include "capture.h"
#include "data_fixture.h"
#include "test.h"

static FixtureSample sample(const char *key, int c, int t, int h, int w, int text_rows) {
    FixtureSample s;
    memset(&s, 0, sizeof s);
    snprintf(s.key, sizeof s.key, "%s", key);
    s.latent_ndim = 4;
    s.latent_shape[0] = c, s.latent_shape[1] = t, s.latent_shape[2] = h, s.latent_shape[3] = w;
    s.latent_format = FIX_NPY;
    s.text_rows = text_rows;
    s.text_width = 8;
    snprintf(s.json_text, sizeof s.json_text, "{\"caption\": \"%s\"}", key);
    s.seed = (uint64_t)key[0] * 131 + (uint64_t)strlen(key);
    return s;
}

/* good.tar: 3 fine samples; broken.tar: one fine (safetensors) and six broken; cut.tar: cut short. */
static void make_dataset(const char *dir) {
    char path[1400];
    FixtureSample good[3] = {sample("g0", 4, 1, 8, 8, 3), sample("g1", 4, 1, 8, 8, 5), sample("g2", 4, 2, 8, 16, 3)};
    path_join(path, sizeof path, dir, "good.tar");
    fixture_write_shard(path, good, 3);
    FixtureSample b[7];
    b[0] = sample("fine", 4, 1, 8, 8, 2);
    b[0].latent_format = FIX_SAFETENSORS;
    b[1] = sample("nan", 4, 1, 8, 8, 2);
    b[1].poison = NAN;
    b[2] = sample("badjson", 4, 1, 8, 8, 2);
    b[2].json = "{\"caption\": 7}";
    b[3] = sample("shape", 4, 1, 8, 8, 2);
    b[3].latent_ndim = 2;
    b[4] = sample("nolatent", 4, 1, 8, 8, 2);
    b[4].latent_format = FIX_NONE;
    b[5] = sample("torch", 4, 1, 8, 8, 2);
    b[5].latent_format = FIX_PTH;
    b[6] = sample("huge", 4, 1, 8, 8, 2);
    b[6].poison = 5000;
    path_join(path, sizeof path, dir, "broken.tar");
    fixture_write_shard(path, b, 7);
    FixtureSample c[2] = {sample("c0", 4, 1, 8, 8, 2), sample("c1", 4, 1, 8, 8, 2)};
    path_join(path, sizeof path, dir, "cut.tar");
    fixture_write_shard(path, c, 2);
    char *bytes;
    size_t len;
    read_file_all(path, &bytes, &len);
    write_file_atomic(path, bytes, len / 2 + 100); /* inside a member, not at a block boundary */
    free(bytes);
    char idx[1500];
    snprintf(idx, sizeof idx, "%s.idx", path);
    unlink(idx);
}

static int has(const char *out, const char *line) { return strstr(out, line) != NULL; }

static int occurrences(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p++) n++;
    return n;
}

TEST(data_inspect_names_every_problem_and_reads_every_part) {
    char dir[1400];
    path_join(dir, sizeof dir, test_tmpdir(), "ds");
    make_dataset(dir);
    const char *args[] = {"data", "inspect", dir, "model.in_channels=4", "model.crossattn_emb_size=8", "dataset.task_encoder_seq_length=256"};
    char *out, *err;
    int rc = run_vfm(args, 6, &out, &err);
    CHECK_MSG(rc == 1, "rc %d (problems found must exit 1): %s", rc, err);
    CHECK_MSG(has(out, "  shards: 3 (1 unreadable); samples per shard: min 3, median 7, max 7\n"), "%s", out);
    CHECK(has(out, "    good.tar  3 samples\n") && has(out, "    broken.tar  7 samples\n"));
    CHECK_MSG(has(out, "    cut.tar: unreadable: ") && has(out, "cut.tar"), "%s", out);
    /* parts: every sample of the readable shards read (3 + 7) */
    CHECK_MSG(has(out, "  parts (10 samples read whole):\n"), "%s", out);
    CHECK_MSG(has(out, "    latent.npy          7 samples  npy  float32  shapes [4,1,8,8] x5, [4,1] x1, [4,2,8,16] x1\n"), "%s", out);
    CHECK_MSG(has(out, "    latent.safetensors  1 sample  safetensors  float32  shapes [4,1,8,8] x1\n"), "%s", out);
    CHECK_MSG(has(out, "    text.npy            10 samples  npy  float32  shapes [2,8] x7, [3,8] x2, [5,8] x1\n"), "%s", out);
    CHECK_MSG(has(out, "    json                10 samples  json\n"), "%s", out);
    CHECK_MSG(has(out, "    pth                 1 sample  torch.save"), "%s", out);
    /* every broken sample named exactly once, with its reason */
    const char *named[] = {"broken.tar:nan: nonfinite: latent has NaN/Inf values\n",
                           "broken.tar:badjson: json: ",
                           "broken.tar:shape: format: latent shape [4,1] is not [C,T,H,W]",
                           "broken.tar:nolatent: missing-part: no latent part",
                           "broken.tar:torch: ",
                           "broken.tar:huge: range: latent has |x| = 5000 > 1000\n"};
    for (size_t i = 0; i < sizeof named / sizeof named[0]; i++)
        CHECK_MSG(occurrences(out, named[i]) == 1, "'%s' named %d times in\n%s", named[i], occurrences(out, named[i]), out);
    CHECK(!has(out, "broken.tar:fine") && !has(out, "good.tar:g"));
    CHECK_MSG(has(out, "  samples: 10, 4 usable under this config, 6 skipped\n"), "%s", out);
    /* histogram: 64 tokens (one padded block) for three 8x8 images, 128 for the 2-frame 8x16 video */
    CHECK_MSG(has(out, "               16  ########################################  3\n") &&
                  has(out, "               64  #############                             1\n"),
              "%s", out);
    free(out);
    free(err);

    /* --quick: the length index only: the NaN and the out-of-range latents are not seen */
    const char *quick[] = {"data", "inspect", dir, "--quick", "model.in_channels=4", "model.crossattn_emb_size=8"};
    rc = run_vfm(quick, 6, &out, &err);
    CHECK(rc == 1 && !has(out, "broken.tar:nan") && !has(out, "broken.tar:huge") && has(out, "broken.tar:badjson: json: "));
    CHECK(!has(out, "  parts ("));
    free(out);
    free(err);
}

TEST(data_inspect_clean_dataset_exits_0) {
    char dir[1400], path[1500];
    path_join(dir, sizeof dir, test_tmpdir(), "clean");
    FixtureSample good[2] = {sample("a", 4, 1, 8, 8, 3), sample("b", 4, 3, 8, 8, 3)};
    path_join(path, sizeof path, dir, "x.tar");
    REQUIRE_OK(fixture_write_shard(path, good, 2));
    const char *args[] = {"data", "inspect", dir, "model.in_channels=4", "model.crossattn_emb_size=8"};
    char *out, *err;
    int rc = run_vfm(args, 5, &out, &err);
    CHECK_MSG(rc == 0 && has(out, "  problems: none\n") && has(out, "  samples: 2, 2 usable under this config, 0 skipped\n"),
              "rc %d: %s", rc, out);
    CHECK(has(out, "no Energon split file (.nv-meta/split.yaml)"));
    free(out);
    free(err);
}

TEST(inspect_describe_part_formats) {
    float x[6] = {1, 2, 3, 4, 5, 6};
    const int64_t shape[3] = {1, 2, 3};
    uint8_t *bytes;
    size_t len;
    REQUIRE_OK(npy_encode(NPY_F4, x, 3, shape, &bytes, &len));
    TarPart p = {"latent.npy", bytes, len};
    PartDesc d;
    inspect_describe_part(&p, &d);
    char text[64];
    inspect_shape_text(d.ndim, d.shape, text, sizeof text);
    CHECK(strcmp(d.format, "npy") == 0 && strcmp(d.dtype, "float32") == 0 && strcmp(text, "[1,2,3]") == 0 && !d.error[0]);
    p.size = len - 4; /* data cut short */
    inspect_describe_part(&p, &d);
    CHECK(d.error[0] && d.ndim == -1);
    free(bytes);
    TarPart j = {"json", (const uint8_t *)"{}", 2}, o = {"cls", (const uint8_t *)"3", 1};
    inspect_describe_part(&j, &d);
    CHECK(strcmp(d.format, "json") == 0 && d.ndim == -1 && !d.error[0]);
    inspect_describe_part(&o, &d);
    CHECK(strcmp(d.format, "bytes") == 0);
}
