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
#include "data/loader/inspect.h"
#include "data/formats/npy.h"
#include "data/formats/tar.h"
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

static vfm_status latent_of_c1(void *ctx, const TarScanMember *m) {
    if (strcmp(m->key, "c1") == 0 && strcmp(m->part, "latent.npy") == 0) *(int64_t *)ctx = m->data_offset;
    return VFM_OK;
}

/* good.tar: 3 fine samples; broken.tar: one fine (safetensors) and six broken; cut.tar: cut inside
 * its second sample's latent. */
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
    b[5].latent_format = FIX_BAD_PTH;
    b[6] = sample("huge", 4, 1, 8, 8, 2);
    b[6].poison = 5000;
    path_join(path, sizeof path, dir, "broken.tar");
    fixture_write_shard(path, b, 7);
    FixtureSample c[2] = {sample("c0", 4, 1, 8, 8, 2), sample("c1", 4, 1, 8, 8, 2)};
    path_join(path, sizeof path, dir, "cut.tar");
    fixture_write_shard(path, c, 2);
    int64_t cut = 0;
    tar_scan(path, latent_of_c1, &cut, NULL, NULL);
    char *bytes;
    size_t len;
    read_file_all(path, &bytes, &len);
    write_file_atomic(path, bytes, (size_t)cut + 100); /* inside c1's latent */
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
    CHECK_MSG(has(out, "  shards: 3; samples per shard: min 2, median 3, max 7\n"), "%s", out);
    CHECK(has(out, "    good.tar  3 samples\n") && has(out, "    broken.tar  7 samples\n") && has(out, "    cut.tar  2 samples\n"));
    /* parts: every sample read whole except the cut one (3 + 7 + 1) */
    CHECK_MSG(has(out, "  parts (11 samples read whole):\n"), "%s", out);
    CHECK_MSG(has(out, "    latent.npy          8 samples  npy  float32  shapes [4,1,8,8] x6, [4,1] x1, [4,2,8,16] x1\n"), "%s", out);
    CHECK_MSG(has(out, "    latent.safetensors  1 sample  safetensors  float32  shapes [4,1,8,8] x1\n"), "%s", out);
    CHECK_MSG(has(out, "    text.npy            11 samples  npy  float32  shapes [2,8] x8, [3,8] x2, [5,8] x1\n"), "%s", out);
    CHECK_MSG(has(out, "    json                11 samples  json\n"), "%s", out);
    CHECK_MSG(has(out, "    pth                 1 sample  torch.save  (1 unreadable)\n"), "%s", out);
    /* every broken sample named exactly once, with its reason */
    const char *named[] = {"broken.tar:nan: nonfinite: latent has NaN/Inf values\n",
                           "broken.tar:badjson: json: ",
                           "broken.tar:shape: format: latent shape [4,1] is not [C,T,H,W]",
                           "broken.tar:nolatent: missing-part: no latent part",
                           "broken.tar:torch: format: pth: not a zip archive",
                           "broken.tar:huge: range: latent has |x| = 5000 > 1000\n",
                           "cut.tar:c1: read: the shard ends inside member 'c1.latent.npy'"};
    for (size_t i = 0; i < sizeof named / sizeof named[0]; i++)
        CHECK_MSG(occurrences(out, named[i]) == 1, "'%s' named %d times in\n%s", named[i], occurrences(out, named[i]), out);
    CHECK(!has(out, "broken.tar:fine") && !has(out, "good.tar:g"));
    CHECK_MSG(has(out, "  samples: 12, 5 usable under this config, 7 skipped\n"), "%s", out);
    /* histogram: 16 tokens for the four usable 8x8 images, 64 for the 2-frame 8x16 video */
    CHECK_MSG(has(out, "               16  ########################################  4\n") &&
                  has(out, "               64  ##########                                1\n"),
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
    CHECK(has(out, "  split: no Energon split file (.nv-meta/split.yaml): every shard is in \"train\"; dataset.split = train\n"));
    free(out);
    free(err);
    const char *val[] = {"data", "inspect", dir, "model.in_channels=4", "model.crossattn_emb_size=8", "dataset.split=val"};
    rc = run_vfm(val, 6, &out, &err);
    CHECK_MSG(rc == 1 && has(out, "dataset.split = val: problem: there is no such split\n"), "rc %d: %s", rc, out);
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

/* Copies tests/fixtures/torch/<name>/<file> for each file into dir (creating .nv-meta/ too). */
static int copy_files(const char *name, const char *const *files, const char *dir) {
    for (int i = 0; files[i]; i++) {
        char rel[300], to[1500], sub[1500];
        snprintf(rel, sizeof rel, "torch/%s/%s", name, files[i]);
        path_join(to, sizeof to, dir, files[i]);
        path_dirname(sub, sizeof sub, to);
        char *bytes;
        size_t len;
        if (mkdir_p(sub) != VFM_OK || read_file_all(test_fixture(rel), &bytes, &len) != VFM_OK) return 0;
        vfm_status s = write_file_atomic(to, bytes, len);
        free(bytes);
        if (s != VFM_OK) return 0;
    }
    return 1;
}

#define DFM_ARGS "model.in_channels=16", "model.crossattn_emb_size=32", "dataset.task_encoder_seq_length=256"

/* DFM's own shards (made by torch 2.x / 1.13 and webdataset, tests/fixtures/torch): pth latents and
 * pickled text embeddings described by dtype and shape (expected.json's values), the Energon split,
 * and the five broken samples of dfm_broken named once each. */
TEST(data_inspect_reads_dfm_pth_and_pickle_parts) {
    char dir[1400];
    static const char *const dfm[] = {"rank0-000000.tar", "rank1-000000.tar", ".nv-meta/split.yaml", ".nv-meta/dataset.yaml",
                                      ".nv-meta/index.sqlite", ".nv-meta/index.uuid", NULL};
    path_join(dir, sizeof dir, test_tmpdir(), "dfm");
    REQUIRE(copy_files("dfm", dfm, dir));
    const char *args[] = {"data", "inspect", dir, DFM_ARGS};
    char *out, *err;
    int rc = run_vfm(args, 6, &out, &err);
    CHECK_MSG(rc == 0, "rc %d: %s", rc, err);
    CHECK_MSG(has(out, "    pth     8 samples  torch.save  bfloat16  shapes [1,16,1,4,8] x2, [1,16,1,8,4] x2, [1,16,1,8,8] x2, "
                       "[1,16,2,4,4] x2\n") &&
                  has(out, "    pickle  8 samples  pickle  bfloat16  shapes [1,16,32] x8\n") && has(out, "    json    8 samples  json\n"),
              "%s", out);
    CHECK_MSG(has(out, "  split (.nv-meta/split.yaml), dataset.split = train:\n    train    2 shards, 8 samples  <- trained on\n"
                       "    val      0 shards, 0 samples\n"),
              "%s", out);
    CHECK(has(out, "  samples: 8, 8 usable under this config, 0 skipped\n") && has(out, "    16 x 2 x 4 x 4  2\n"));
    free(out);
    free(err);
    /* asking for a split the file does not have */
    const char *val[] = {"data", "inspect", dir, DFM_ARGS, "dataset.split=validation"};
    rc = run_vfm(val, 7, &out, &err);
    CHECK_MSG(rc == 1 && has(out, "    problem: dataset.split = validation is not a part of split.yaml\n"), "rc %d: %s", rc, out);
    free(out);
    free(err);

    /* torch 1.13's legacy spellings .pth / .pickle; one float16 embedding */
    static const char *const t1[] = {"rank0-000000.tar", NULL};
    path_join(dir, sizeof dir, test_tmpdir(), "dfm_torch1");
    REQUIRE(copy_files("dfm_torch1", t1, dir));
    const char *args1[] = {"data", "inspect", dir, DFM_ARGS};
    rc = run_vfm(args1, 6, &out, &err);
    CHECK_MSG(rc == 0 && has(out, "    .pth     3 samples  torch.save  bfloat16  shapes [1,16,1,4,8] x1, [1,16,1,8,8] x1, [1,16,2,4,4] x1\n") &&
                  has(out, "    .pickle  3 samples  pickle  bfloat16, float16 (bfloat16 x2, float16 x1)  shapes [1,16,32] x3\n"),
              "rc %d: %s", rc, out);
    free(out);
    free(err);

    /* five broken samples, each named once; the os.system pickle is refused, not run */
    static const char *const broken[] = {"rank0-000000.tar", "rank1-000000.tar", NULL};
    path_join(dir, sizeof dir, test_tmpdir(), "dfm_broken");
    REQUIRE(copy_files("dfm_broken", broken, dir));
    unlink("/tmp/vfm-pickle-marker-os_system");
    const char *args2[] = {"data", "inspect", dir, DFM_ARGS};
    rc = run_vfm(args2, 6, &out, &err);
    CHECK(rc == 1);
    const char *named[] = {"rank0-000000.tar:000001: nonfinite: latent has NaN/Inf values\n",
                           "rank0-000000.tar:000002: json: bad json",
                           "rank0-000000.tar:000004: format: latent shape [16,16] is not",
                           "rank1-000000.tar:000007: refused: part 'pickle' names a global off the unpickler's allow-list",
                           "rank1-000000.tar:000009: read: the shard ends inside member '000009.pth'"};
    for (size_t i = 0; i < sizeof named / sizeof named[0]; i++)
        CHECK_MSG(occurrences(out, named[i]) == 1, "'%s' named %d times in\n%s", named[i], occurrences(out, named[i]), out);
    CHECK_MSG(has(out, "  samples: 10, 5 usable under this config, 5 skipped\n"), "%s", out);
    CHECK_MSG(has(out, "    pickle  9 samples  pickle  bfloat16  shapes [1,16,32] x8  (1 unreadable, 1 refused: a pickle "
                       "naming a global off the allow-list, see below)\n"), "%s", out);
    CHECK(!path_exists("/tmp/vfm-pickle-marker-os_system"));
    free(out);
    free(err);
}
