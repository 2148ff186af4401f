/* Tar shards: Energon's grouping rules, the fixtures (GNU, PAX, USTAR, hand-built, webdataset) read
 * against what Python's tarfile + Energon's prepare loop give (reference/make_data_fixtures.py),
 * the .tar.idx cache, concurrent reads, corrupt and truncated shards, and the writer. */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/formats/json_util.h"
#include "data/formats/tar.h"
#include "test.h"

/* ---------------------------------------------------------------- helpers */

static uint64_t fnv1a64(const void *data, size_t n) {
    const uint8_t *p = data;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

static uint8_t *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *len = (size_t)n;
    return buf;
}

static int spill(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int ok = fwrite(data, 1, n, f) == n;
    return (fclose(f) == 0 && ok) ? 0 : -1;
}

/* Copies tests/fixtures/data/tar/<name> into the test's directory (without its .tar.idx). */
static const char *copy_fixture(const char *name, char *out, size_t n) {
    char rel[256];
    snprintf(rel, sizeof rel, "data/tar/%s", name);
    size_t len;
    uint8_t *bytes = slurp(test_fixture(rel), &len);
    if (!bytes) return NULL;
    snprintf(out, n, "%s/%s", test_tmpdir(), name);
    int rc = spill(out, bytes, len);
    free(bytes);
    return rc == 0 ? out : NULL;
}

static json_t *load_expected(const char *shard) {
    char rel[256];
    snprintf(rel, sizeof rel, "data/tar/%.*s.expected.json", (int)(strlen(shard) - 4), shard);
    json_error_t err;
    return json_load_file(test_fixture(rel), 0, &err);
}

static int count_files_in(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    if (!d) return -1;
    for (struct dirent *e; (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    closedir(d);
    return n;
}

/* ---------------------------------------------------------------- grouping rules */

TEST(tar_split_name_matches_energon_regex) {
    /* expected values from Python: re.match(split_name_re, name), Energon's regex (see tar.c) */
    static const struct {
        const char *name, *key, *part;
    } cases[] = {
        {"a/b.c/d.e.f", "a/b.c/d", "e.f"}, {"000000..pth", "000000", ".pth"}, {"000000.json", "000000", "json"},
        {"dir/.hidden", "dir/", "hidden"}, {"noext", NULL, NULL},          {".a", NULL, NULL},
        {"a.b/c", NULL, NULL},             {"x/y/.z", "x/y/", "z"},        {"a.b/.c", NULL, NULL},
        {"a//.x", "a//", "x"},             {"abc.", "abc", ""},            {"/x.y", "/x", "y"},
        {"a/b/c.tar.gz", "a/b/c", "tar.gz"}, {".", NULL, NULL},            {"..", NULL, NULL},
        {"a/.", "a/", ""},                 {"a.b/c/.d", "a.b/c/", "d"},    {"__x__/y.txt", "__x__/y", "txt"},
        {"000000.latent.npy", "000000", "latent.npy"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        size_t key_len = 0;
        int ok = tar_split_name(cases[k].name, &key_len);
        if (!cases[k].key) {
            CHECK_MSG(!ok, "'%s' should not split", cases[k].name);
            continue;
        }
        CHECK_MSG(ok, "'%s' should split", cases[k].name);
        if (!ok) continue;
        CHECK_MSG(key_len == strlen(cases[k].key) && !strncmp(cases[k].name, cases[k].key, key_len),
                  "'%s': key '%.*s', expected '%s'", cases[k].name, (int)key_len, cases[k].name, cases[k].key);
        CHECK_MSG(!strcmp(cases[k].name + key_len + 1, cases[k].part), "'%s': part '%s', expected '%s'", cases[k].name,
                  cases[k].name + key_len + 1, cases[k].part);
    }
}

TEST(tar_meta_names_match_energon_regex) {
    /* Python: bool(re.match(r"__[^/]*__($|/)", name)) */
    static const struct {
        const char *name;
        int meta;
    } cases[] = {{"__meta__", 1}, {"__a__b__", 1}, {"__x__y", 0},     {"____", 1},     {"___", 0},
                 {"__x__/y.txt", 1}, {"a/__meta__", 0}, {"_x_.txt", 0}, {"__.txt", 0}, {"__meta__/end.json", 1}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        CHECK_MSG(tar_is_meta_name(cases[k].name) == cases[k].meta, "'%s': meta %d", cases[k].name, cases[k].meta);
}

TEST(tar_index_path_follows_energon) {
    char out[256];
    tar_index_path("/d/shard-000.tar", out, sizeof out);
    CHECK(!strcmp(out, "/d/shard-000.tar.idx"));
    tar_index_path("/d.x/shard", out, sizeof out);
    CHECK(!strcmp(out, "/d.x/shard.tar.idx"));
    tar_index_path("rel/a.tgz", out, sizeof out);
    CHECK(!strcmp(out, "rel/a.tar.idx"));
}

/* ---------------------------------------------------------------- fixtures against Python */

/* Checks every sample of an open shard against <name>.expected.json. */
static void check_against_expected(TarShard *sh, const char *name) {
    json_t *exp = load_expected(name);
    REQUIRE(exp);
    json_t *samples = json_object_get(exp, "samples");
    int64_t n = tar_shard_num_samples(sh);
    CHECK_MSG(n == (int64_t)json_array_size(samples), "%s: %lld samples, python %zu", name, (long long)n,
              json_array_size(samples));
    CHECK(n == json_integer_value(json_object_get(exp, "num_samples")));
    for (int64_t i = 0; i < n && i < (int64_t)json_array_size(samples); i++) {
        json_t *es = json_array_get(samples, (size_t)i);
        int64_t off, size;
        CHECK_OK(tar_shard_sample_range(sh, i, &off, &size));
        json_t *range = json_object_get(es, "range");
        CHECK_MSG(off == json_integer_value(json_array_get(range, 0)) &&
                      off + size == json_integer_value(json_array_get(range, 1)),
                  "%s sample %lld: range [%lld, %lld)", name, (long long)i, (long long)off, (long long)(off + size));
        TarSample s;
        vfm_status st = tar_shard_read_sample(sh, i, &s);
        CHECK_MSG(st == VFM_OK, "%s sample %lld: %s", name, (long long)i, vfm_last_error());
        if (st != VFM_OK) continue;
        const char *key = json_string_value(json_object_get(es, "key"));
        CHECK_MSG(!strcmp(s.key, key), "%s sample %lld: key '%s', python '%s'", name, (long long)i, s.key, key);
        json_t *parts = json_object_get(es, "parts");
        CHECK_MSG(s.num_parts == (int)json_array_size(parts), "%s sample %lld: %d parts, python %zu", name,
                  (long long)i, s.num_parts, json_array_size(parts));
        for (int k = 0; k < s.num_parts && k < (int)json_array_size(parts); k++) {
            json_t *ep = json_array_get(parts, (size_t)k);
            char hash[17];
            snprintf(hash, sizeof hash, "%016llx", (unsigned long long)fnv1a64(s.parts[k].data, s.parts[k].size));
            CHECK_MSG(!strcmp(s.parts[k].name, json_string_value(json_object_get(ep, "name"))), "%s %s: part '%s'", name,
                      key, s.parts[k].name);
            CHECK_MSG((json_int_t)s.parts[k].size == json_integer_value(json_object_get(ep, "size")),
                      "%s %s.%s: size %zu", name, key, s.parts[k].name, s.parts[k].size);
            CHECK_MSG(!strcmp(hash, json_string_value(json_object_get(ep, "fnv1a64"))), "%s %s.%s: contents differ",
                      name, key, s.parts[k].name);
            CHECK(((uintptr_t)s.parts[k].data & 63) == 0);
        }
        tar_sample_free(&s);
    }
    json_decref(exp);
}

static void check_fixture(const char *name) {
    char path[1024], idx_path[1100], rel[256];
    REQUIRE(copy_fixture(name, path, sizeof path));
    TarShard *sh;
    REQUIRE_OK(tar_shard_open(&sh, path));
    CHECK_MSG(!tar_shard_index_was_cached(sh), "%s: there was no .tar.idx to use", name);
    check_against_expected(sh, name);
    tar_shard_close(sh);

    /* the index written beside the shard equals the one Energon's algorithm gives, byte for byte */
    tar_index_path(path, idx_path, sizeof idx_path);
    snprintf(rel, sizeof rel, "data/tar/%s.idx", name);
    size_t n_ours, n_ref;
    uint8_t *ours = slurp(idx_path, &n_ours), *ref = slurp(test_fixture(rel), &n_ref);
    REQUIRE(ours && ref);
    CHECK_MSG(n_ours == n_ref && !memcmp(ours, ref, n_ref), "%s: .tar.idx differs from Energon's (%zu vs %zu bytes)",
              name, n_ours, n_ref);
    free(ours);
    free(ref);

    /* reopened: the cached index is used and gives the same samples */
    REQUIRE_OK(tar_shard_open(&sh, path));
    CHECK(tar_shard_index_was_cached(sh));
    check_against_expected(sh, name);
    tar_shard_close(sh);
}

TEST(tar_gnu_fixture_matches_python) { check_fixture("gnu.tar"); }
TEST(tar_pax_fixture_matches_python) { check_fixture("pax.tar"); }
TEST(tar_ustar_fixture_matches_python) { check_fixture("ustar.tar"); }
TEST(tar_crafted_fixture_matches_python) { check_fixture("crafted.tar"); }
TEST(tar_webdataset_fixture_matches_python) { check_fixture("webdataset.tar"); }

static const char *part_text(const TarSample *s, const char *part, char *buf, size_t n) {
    const TarPart *p = tar_sample_part(s, part);
    if (!p) return "(missing)";
    snprintf(buf, n, "%.*s", (int)p->size, (const char *)p->data);
    return buf;
}

TEST(tar_gnu_fixture_grouping_by_hand) {
    char path[1024], text[256];
    REQUIRE(copy_fixture("gnu.tar", path, sizeof path));
    TarShard *sh;
    REQUIRE_OK(tar_shard_open(&sh, path));
    REQUIRE(tar_shard_num_samples(sh) == 13);
    int64_t count;
    const uint64_t *index = tar_shard_index(sh, &count);
    CHECK(count == 14);
    CHECK(index[0] == 1536); /* after __meta__ and a directory entry; sample 0 still reads from byte 0 */
    static const char *keys[13] = {"000000", "000001", "a/b.c/d", NULL, NULL, NULL, "dir/",
                                   "000002", "000003", "000004", "000003", "000006", "\xc3\xbc/000007"};
    TarSample s[13];
    for (int i = 0; i < 13; i++) {
        REQUIRE_OK(tar_shard_read_sample(sh, i, &s[i]));
        if (keys[i]) CHECK_MSG(!strcmp(s[i].key, keys[i]), "sample %d key '%s'", i, s[i].key);
    }
    CHECK(s[0].num_parts == 3 && tar_sample_part(&s[0], "latent.npy") && tar_sample_part(&s[0], "json"));
    CHECK(!strcmp(part_text(&s[0], "txt", text, sizeof text), "a red square\n"));
    CHECK(tar_sample_part(&s[1], ".pth") && tar_sample_part(&s[1], ".pth")->size == 200);
    CHECK(tar_sample_part(&s[1], ".pth")->data[199] == 199);
    CHECK(!strcmp(part_text(&s[2], "e.f", text, sizeof text), "nested dots"));
    CHECK(strlen(s[3].key) == 136 && !strncmp(s[3].key, "long/ppp", 8));       /* ustar prefix-length name */
    CHECK(strlen(s[4].key) == 122 && !strncmp(s[4].key, "x/fff", 5));          /* file name over 100 */
    CHECK(strlen(s[5].key) == 300 && tar_sample_part(&s[5], "bin")->size == 768); /* over 255 */
    CHECK(!strcmp(part_text(&s[6], "hidden", text, sizeof text), "key 'dir/', part 'hidden'"));
    CHECK(s[7].num_parts == 2 && !strcmp(s[7].parts[0].name, "txt"));
    CHECK(!strcmp(part_text(&s[7], "txt", text, sizeof text), "second, which wins"));
    CHECK(s[8].num_parts == 1 && s[10].num_parts == 1 && tar_sample_part(&s[10], "cls"));
    CHECK(tar_sample_part(&s[11], "empty") && tar_sample_part(&s[11], "empty")->size == 0);
    CHECK(tar_sample_part(&s[0], "nope") == NULL);

    json_t *meta;
    const TarPart *jp = tar_sample_part(&s[0], "json");
    REQUIRE_OK(json_parse_part(jp->data, jp->size, "gnu.tar: 000000.json", &meta));
    int64_t width, height;
    double fps;
    const char *caption;
    CHECK_OK(json_get_int(meta, "image_width", 0, "000000", &width));
    CHECK_OK(json_get_int(meta, "image_height", 0, "000000", &height));
    CHECK_OK(json_get_number(meta, "fps", 30, "000000", &fps));
    CHECK_OK(json_get_string(meta, "caption", "", "000000", &caption));
    CHECK(width == 8 && height == 1 && fps == 24 && !strcmp(caption, "a red square"));
    json_decref(meta);
    for (int i = 0; i < 13; i++) tar_sample_free(&s[i]);
    tar_shard_close(sh);
}

typedef struct {
    int64_t last_sample;
    int64_t parts;
    int bad;
    const uint8_t *file;
} ScanCheck;

static vfm_status scan_check(void *ctx, const TarScanMember *m) {
    ScanCheck *c = ctx;
    if (m->sample_index < c->last_sample || m->sample_index > c->last_sample + 1) c->bad++;
    c->last_sample = m->sample_index;
    c->parts++;
    /* the payload really sits at data_offset: the gnu fixture's 000002.txt ends as "which wins" */
    if (!strcmp(m->key, "000002") && !strcmp(m->part, "txt") && m->size == 18 &&
        memcmp(c->file + m->data_offset + 8, "which wins", 10) != 0)
        c->bad++;
    if (m->header_offset % 512 || m->data_offset % 512 || m->data_offset <= m->header_offset) c->bad++;
    return VFM_OK;
}

TEST(tar_scan_reports_members_and_end) {
    size_t len;
    uint8_t *file = slurp(test_fixture("data/tar/gnu.tar"), &len);
    REQUIRE(file);
    ScanCheck c = {0, 0, 0, file};
    int64_t samples, end;
    REQUIRE_OK(tar_scan(test_fixture("data/tar/gnu.tar"), scan_check, &c, &samples, &end));
    CHECK(samples == 13 && end == 32768 && (size_t)end + 1024 == len);
    CHECK(c.parts == 21); /* every kept member, the repeated 000002.txt twice */
    CHECK(c.bad == 0);
    free(file);
}

/* ---------------------------------------------------------------- the index cache */

TEST(tar_cached_index_checked_against_file) {
    char path[1024], idx_path[1100];
    REQUIRE(copy_fixture("gnu.tar", path, sizeof path));
    tar_index_path(path, idx_path, sizeof idx_path);
    size_t n_ref;
    uint8_t *ref = slurp(test_fixture("data/tar/gnu.tar.idx"), &n_ref);
    REQUIRE(ref && n_ref == 14 * 8);

    /* Energon's own file is used as it is */
    REQUIRE(spill(idx_path, ref, n_ref) == 0);
    TarShard *sh;
    REQUIRE_OK(tar_shard_open(&sh, path));
    CHECK(tar_shard_index_was_cached(sh));
    tar_shard_close(sh);

    /* stale or foreign files are rebuilt: decreasing entries, an end past the file, a truncated file,
     * an end that is not at a zero block, a misaligned entry */
    uint8_t bad[14 * 8];
    for (int variant = 0; variant < 5; variant++) {
        memcpy(bad, ref, sizeof bad);
        size_t n = sizeof bad;
        if (variant == 0) memcpy(bad + 8 * 3, ref + 8 * 2, 8);
        if (variant == 1) bad[8 * 13 + 2] ^= 0x10;
        if (variant == 2) n = 8 * 13 + 4;
        if (variant == 3) n = 8 * 13; /* the last entry is then a header, not the end */
        if (variant == 4) bad[8 * 5] ^= 0x01;
        REQUIRE(spill(idx_path, bad, n) == 0);
        REQUIRE_OK(tar_shard_open(&sh, path));
        CHECK_MSG(!tar_shard_index_was_cached(sh), "variant %d was used", variant);
        CHECK(tar_shard_num_samples(sh) == 13);
        tar_shard_close(sh);
        size_t n_new;
        uint8_t *rewritten = slurp(idx_path, &n_new);
        CHECK_MSG(rewritten && n_new == n_ref && !memcmp(rewritten, ref, n_ref), "variant %d not rewritten", variant);
        free(rewritten);
    }
    free(ref);
}

TEST(tar_stale_index_fails_the_sample_not_the_shard) {
    /* an index that fits the file but merges samples 0 and 1 (entry 1 dropped) */
    char path[1024], idx_path[1100];
    REQUIRE(copy_fixture("gnu.tar", path, sizeof path));
    tar_index_path(path, idx_path, sizeof idx_path);
    size_t n_ref;
    uint8_t *ref = slurp(test_fixture("data/tar/gnu.tar.idx"), &n_ref);
    REQUIRE(ref && n_ref == 14 * 8);
    memmove(ref + 8, ref + 16, n_ref - 16);
    REQUIRE(spill(idx_path, ref, n_ref - 8) == 0);
    TarShard *sh;
    REQUIRE_OK(tar_shard_open(&sh, path));
    CHECK(tar_shard_index_was_cached(sh) && tar_shard_num_samples(sh) == 12);
    TarSample s;
    CHECK(tar_shard_read_sample(sh, 0, &s) == VFM_ERR_FORMAT);
    CHECK_MSG(strstr(vfm_last_error(), "sample 0 (key '000000')") && strstr(vfm_last_error(), "000001..pth") &&
                  strstr(vfm_last_error(), "stale .tar.idx"),
              "message: %s", vfm_last_error());
    CHECK_OK(tar_shard_read_sample(sh, 1, &s));
    CHECK(!strcmp(s.key, "a/b.c/d"));
    tar_sample_free(&s);
    tar_shard_close(sh);
    free(ref);
}

TEST(tar_index_stays_in_memory_when_not_writable) {
    char path[1024], idx_path[1100];
    REQUIRE(copy_fixture("pax.tar", path, sizeof path));
    tar_index_path(path, idx_path, sizeof idx_path);
    /* a directory where the index would go: neither readable as an index nor replaceable (even by root) */
    REQUIRE(mkdir(idx_path, 0755) == 0);
    TarShard *sh;
    REQUIRE_OK(tar_shard_open(&sh, path));
    CHECK(!tar_shard_index_was_cached(sh));
    check_against_expected(sh, "pax.tar");
    tar_shard_close(sh);
    CHECK(count_files_in(test_tmpdir()) == 2); /* the shard and that directory: no temporary left */
    rmdir(idx_path);

    if (geteuid() != 0) { /* a read-only directory (root ignores permissions) */
        char dir[1100], ro_path[1200];
        snprintf(dir, sizeof dir, "%s/ro", test_tmpdir());
        REQUIRE(mkdir(dir, 0755) == 0);
        snprintf(ro_path, sizeof ro_path, "%s/pax.tar", dir);
        REQUIRE(rename(path, ro_path) == 0);
        REQUIRE(chmod(dir, 0555) == 0);
        REQUIRE_OK(tar_shard_open(&sh, ro_path));
        CHECK(tar_shard_num_samples(sh) == 13);
        tar_shard_close(sh);
        CHECK(count_files_in(dir) == 1);
        chmod(dir, 0755);
    }
}

/* ---------------------------------------------------------------- concurrency */

typedef struct {
    TarShard *shard;
    uint64_t digest[64];
    int errors;
} ReaderJob;

static uint64_t sample_digest(const TarSample *s) {
    uint64_t h = fnv1a64(s->key, strlen(s->key));
    for (int k = 0; k < s->num_parts; k++)
        h = h * 31 + fnv1a64(s->parts[k].name, strlen(s->parts[k].name)) * 7 + fnv1a64(s->parts[k].data, s->parts[k].size);
    return h;
}

static void *reader_thread(void *arg) {
    ReaderJob *job = arg;
    int64_t n = tar_shard_num_samples(job->shard);
    for (int round = 0; round < 40; round++) {
        for (int64_t j = 0; j < n; j++) {
            int64_t i = (j * 5 + round) % n; /* the two threads walk in different orders */
            TarSample s;
            if (tar_shard_read_sample(job->shard, i, &s) != VFM_OK) {
                job->errors++;
                continue;
            }
            uint64_t d = sample_digest(&s);
            if (round == 0) job->digest[i] = d;
            else if (job->digest[i] != d) job->errors++;
            tar_sample_free(&s);
        }
    }
    return NULL;
}

TEST(tar_concurrent_reads_give_the_same_bytes) {
    char path[1024];
    REQUIRE(copy_fixture("gnu.tar", path, sizeof path));
    TarShard *sh;
    REQUIRE_OK(tar_shard_open(&sh, path));
    int64_t n = tar_shard_num_samples(sh);
    REQUIRE(n == 13);
    uint64_t serial[13];
    for (int64_t i = 0; i < n; i++) {
        TarSample s;
        REQUIRE_OK(tar_shard_read_sample(sh, i, &s));
        serial[i] = sample_digest(&s);
        tar_sample_free(&s);
    }
    ReaderJob jobs[2] = {{.shard = sh}, {.shard = sh}};
    pthread_t threads[2];
    for (int t = 0; t < 2; t++) REQUIRE(pthread_create(&threads[t], NULL, reader_thread, &jobs[t]) == 0);
    for (int t = 0; t < 2; t++) pthread_join(threads[t], NULL);
    for (int t = 0; t < 2; t++) {
        CHECK_MSG(jobs[t].errors == 0, "thread %d: %d errors", t, jobs[t].errors);
        for (int64_t i = 0; i < n; i++) CHECK_MSG(jobs[t].digest[i] == serial[i], "thread %d sample %lld", t, (long long)i);
    }
    tar_shard_close(sh);
}

/* ---------------------------------------------------------------- damaged shards */

TEST(tar_bad_checksum_names_shard_and_offset) {
    char path[1024], idx_path[1100];
    REQUIRE(copy_fixture("gnu.tar", path, sizeof path));
    size_t len;
    uint8_t *bytes = slurp(path, &len);
    REQUIRE(bytes);
    bytes[7168 + 3] ^= 0x20; /* the name of sample 2's first header ("a/b.c/d.e.f") */
    REQUIRE(spill(path, bytes, len) == 0);
    TarShard *sh;
    vfm_status s = tar_shard_open(&sh, path);
    CHECK(s == VFM_ERR_FORMAT);
    CHECK_MSG(strstr(vfm_last_error(), "byte offset 7168") && strstr(vfm_last_error(), path) &&
                  strstr(vfm_last_error(), "checksum"),
              "message: %s", vfm_last_error());

    /* with Energon's index present the shard opens; the damaged sample fails alone, named */
    tar_index_path(path, idx_path, sizeof idx_path);
    size_t n_idx;
    uint8_t *idx = slurp(test_fixture("data/tar/gnu.tar.idx"), &n_idx);
    REQUIRE(idx && spill(idx_path, idx, n_idx) == 0);
    REQUIRE_OK(tar_shard_open(&sh, path));
    for (int64_t i = 0; i < tar_shard_num_samples(sh); i++) {
        TarSample sample;
        s = tar_shard_read_sample(sh, i, &sample);
        if (i == 2) {
            CHECK(s == VFM_ERR_FORMAT && sample.parts == NULL);
            CHECK_MSG(strstr(vfm_last_error(), "sample 2") && strstr(vfm_last_error(), "byte offset 7168"), "message: %s",
                      vfm_last_error());
        } else {
            CHECK_MSG(s == VFM_OK, "sample %lld: %s", (long long)i, vfm_last_error());
        }
        tar_sample_free(&sample);
    }
    tar_shard_close(sh);
    free(idx);
    free(bytes);
}

/* The scan's view of a cut shard: is some member cut short? */
static vfm_status note_cut(void *ctx, const TarScanMember *m) {
    int64_t *cut_sample = ctx;
    if (m->available < m->size) *cut_sample = m->sample_index;
    CHECK(m->available >= 0 && m->available <= m->size);
    return VFM_OK;
}

TEST(tar_truncated_shards_fail_cleanly) {
    size_t len;
    uint8_t *bytes = slurp(test_fixture("data/tar/pax.tar"), &len);
    REQUIRE(bytes);
    char path[1100];
    snprintf(path, sizeof path, "%s/cut.tar", test_tmpdir());
    int opened = 0, failed = 0, cut_payloads = 0;
    for (size_t cut = 1; cut < len; cut += (cut % 512 == 0) ? 97 : 512 - cut % 512) {
        char idx_path[1200];
        tar_index_path(path, idx_path, sizeof idx_path);
        unlink(idx_path);
        REQUIRE(spill(path, bytes, cut) == 0);
        TarShard *sh;
        vfm_status s = tar_shard_open(&sh, path);
        if (s != VFM_OK) {
            /* inside a header: an error naming the file */
            CHECK_MSG(s == VFM_ERR_FORMAT && strstr(vfm_last_error(), path), "cut at %zu: %s", cut, vfm_last_error());
            failed++;
            continue;
        }
        /* between members: a shorter, valid archive; inside a payload (an interrupted copy): every
         * sample before the cut one reads, the cut one fails naming the file */
        opened++;
        int64_t cut_sample = -1, n = 0;
        CHECK_OK(tar_scan(path, note_cut, &cut_sample, &n, NULL));
        CHECK(n == tar_shard_num_samples(sh) && n <= 13);
        if (cut_sample >= 0) {
            cut_payloads++;
            CHECK_MSG(cut_sample == n - 1, "cut at %zu: member of sample %lld cut, %lld samples", cut,
                      (long long)cut_sample, (long long)n);
        }
        for (int64_t i = 0; i < tar_shard_num_samples(sh); i++) {
            TarSample sample;
            vfm_status r = tar_shard_read_sample(sh, i, &sample);
            if (i == cut_sample)
                CHECK_MSG(r == VFM_ERR_FORMAT && strstr(vfm_last_error(), path) && strstr(vfm_last_error(), "runs past the end"),
                          "cut at %zu: %s", cut, vfm_last_error());
            else
                CHECK_MSG(r == VFM_OK, "cut at %zu: sample %lld: %s", cut, (long long)i, vfm_last_error());
            if (r == VFM_OK) tar_sample_free(&sample);
        }
        tar_shard_close(sh);
        /* the index written for the cut shard is reused as it is */
        REQUIRE_OK(tar_shard_open(&sh, path));
        CHECK(tar_shard_index_was_cached(sh) && tar_shard_num_samples(sh) == n);
        tar_shard_close(sh);
    }
    CHECK(opened > 0 && failed > 0 && cut_payloads > 0);

    /* a full index with a shard cut afterwards: the index no longer fits, the rescan fails */
    char idx_path[1200];
    tar_index_path(path, idx_path, sizeof idx_path);
    size_t n_idx;
    uint8_t *idx = slurp(test_fixture("data/tar/pax.tar.idx"), &n_idx);
    REQUIRE(idx && spill(idx_path, idx, n_idx) == 0 && spill(path, bytes, 20000) == 0);
    TarShard *sh;
    CHECK(tar_shard_open(&sh, path) == VFM_ERR_FORMAT);
    free(idx);
    free(bytes);
}

TEST(tar_empty_garbage_and_zero_files) {
    char path[1100];
    snprintf(path, sizeof path, "%s/x.tar", test_tmpdir());
    TarShard *sh;
    REQUIRE(spill(path, "", 0) == 0);
    CHECK(tar_shard_open(&sh, path) == VFM_ERR_FORMAT && strstr(vfm_last_error(), "empty"));
    uint8_t junk[1500];
    for (int i = 0; i < 1500; i++) junk[i] = (uint8_t)(i * 37 + 11);
    REQUIRE(spill(path, junk, sizeof junk) == 0);
    CHECK(tar_shard_open(&sh, path) == VFM_ERR_FORMAT);
    memset(junk, 0, sizeof junk);
    REQUIRE(spill(path, junk, 1024) == 0);
    REQUIRE_OK(tar_shard_open(&sh, path)); /* an archive with no members: no samples */
    CHECK(tar_shard_num_samples(sh) == 0);
    int64_t count;
    CHECK(tar_shard_index(sh, &count)[0] == 0 && count == 1);
    TarSample sample;
    CHECK(tar_shard_read_sample(sh, 0, &sample) == VFM_ERR_USAGE);
    tar_shard_close(sh);
    snprintf(path, sizeof path, "%s/missing.tar", test_tmpdir());
    CHECK(tar_shard_open(&sh, path) == VFM_ERR_IO && strstr(vfm_last_error(), "missing.tar"));
}

TEST(tar_random_corruption_never_crashes) {
    size_t len;
    uint8_t *ref = slurp(test_fixture("data/tar/crafted.tar"), &len);
    REQUIRE(ref);
    uint8_t *bytes = malloc(len);
    char path[1100], idx_path[1200];
    snprintf(path, sizeof path, "%s/c.tar", test_tmpdir());
    tar_index_path(path, idx_path, sizeof idx_path);
    uint64_t state = 12345;
    int opened = 0;
    for (int iter = 0; iter < 300; iter++) {
        memcpy(bytes, ref, len);
        for (int flips = 0; flips < 3; flips++) {
            state = state * 6364136223846793005ull + 1442695040888963407ull;
            size_t at = (size_t)(state >> 33) % len;
            /* aim at headers (and their checksums, sizes, pax records) most of the time */
            if (iter % 4) at = at / 512 * 512 + (size_t)((state >> 20) % 160);
            if (at >= len) at = len - 1;
            bytes[at] ^= (uint8_t)(1u << ((state >> 13) % 8));
        }
        if (iter % 2) { /* a matching checksum, so the parser sees the damaged fields */
            size_t h = ((size_t)(state >> 40) % (len / 512)) * 512;
            unsigned sum = 0;
            bytes[h + 124] = (uint8_t)"0123456789\x80\xff"[(state >> 7) % 12];
            for (int i = 0; i < 512; i++) sum += (i >= 148 && i < 156) ? ' ' : bytes[h + i];
            snprintf((char *)bytes + h + 148, 8, "%06o", sum);
        }
        unlink(idx_path);
        REQUIRE(spill(path, bytes, len) == 0);
        TarShard *sh;
        if (tar_shard_open(&sh, path) != VFM_OK) continue;
        opened++;
        for (int64_t i = 0; i < tar_shard_num_samples(sh); i++) {
            TarSample sample;
            if (tar_shard_read_sample(sh, i, &sample) == VFM_OK) tar_sample_free(&sample);
        }
        tar_shard_close(sh);
    }
    CHECK(opened > 0);
    free(bytes);
    free(ref);
}

/* ---------------------------------------------------------------- writer */

static const char *writer_names[] = {
    "__meta__", "000000.json", "000000.latent.npy", "000000.txt", "000001..pth",
    /* 136 bytes: ustar prefix split */
    "long/pppppppppppppppppppppppppppppppppppppppppppppppppppppppppppp/qqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqq.txt",
    /* file name over 100 bytes: pax path record */
    "x/ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff.txt",
    "000002.empty", "000002.bin", "a/b.c/d.e.f", "a/b.c/d.json",
};
#define N_WRITER_NAMES ((int)(sizeof writer_names / sizeof writer_names[0]))

static void write_shard(const char *path, uint8_t *payload) {
    TarWriter *w;
    REQUIRE_OK(tar_writer_open(&w, path));
    CHECK(access(path, F_OK) != 0); /* nothing under the final name before close */
    for (int k = 0; k < N_WRITER_NAMES; k++) {
        size_t size = k == 7 ? 0 : (size_t)(k * 211 % 1500) + 1;
        REQUIRE_OK(tar_writer_add(w, writer_names[k], payload + k, size));
    }
    CHECK(access(path, F_OK) != 0);
    REQUIRE_OK(tar_writer_close(w));
}

TEST(tar_writer_round_trip_and_determinism) {
    uint8_t payload[1600];
    for (int i = 0; i < 1600; i++) payload[i] = (uint8_t)(i * 131 + 7);
    char a[1100], b[1100], idx_a[1200];
    snprintf(a, sizeof a, "%s/a.tar", test_tmpdir());
    snprintf(b, sizeof b, "%s/b.tar", test_tmpdir());
    write_shard(a, payload);
    write_shard(b, payload);
    CHECK(count_files_in(test_tmpdir()) == 4); /* two shards, two indexes, no temporaries */
    size_t na, nb;
    uint8_t *ba = slurp(a, &na), *bb = slurp(b, &nb);
    REQUIRE(ba && bb);
    CHECK(na == nb && !memcmp(ba, bb, na));
    CHECK(na % 512 == 0);
    for (size_t i = na - 1024; i < na; i++) CHECK(ba[i] == 0);
    /* first header: deterministic fields */
    CHECK(!memcmp(ba + 100, "0000644\0", 8) && !memcmp(ba + 108, "0000000\0", 8) && !memcmp(ba + 136, "00000000000\0", 12));
    CHECK(!memcmp(ba + 257, "ustar\0" "00", 8) && ba[265] == 0 && ba[297] == 0 && ba[156] == '0');

    /* the writer's index equals the one a scan builds */
    tar_index_path(a, idx_a, sizeof idx_a);
    size_t n_written;
    uint8_t *written = slurp(idx_a, &n_written);
    REQUIRE(written);
    unlink(idx_a);
    TarShard *sh;
    REQUIRE_OK(tar_shard_open(&sh, a));
    CHECK(!tar_shard_index_was_cached(sh));
    int64_t count;
    const uint64_t *index = tar_shard_index(sh, &count);
    CHECK(n_written == (size_t)count * 8 && !memcmp(written, index, n_written));
    CHECK(tar_shard_num_samples(sh) == 6);

    static const struct {
        const char *key;
        int first, count;
    } expect[6] = {{"000000", 1, 3}, {"000001", 4, 1}, {NULL, 5, 1}, {NULL, 6, 1}, {"000002", 7, 2}, {"a/b.c/d", 9, 2}};
    for (int i = 0; i < 6; i++) {
        TarSample s;
        REQUIRE_OK(tar_shard_read_sample(sh, i, &s));
        CHECK(s.num_parts == expect[i].count);
        for (int k = 0; k < s.num_parts && k < expect[i].count; k++) {
            int m = expect[i].first + k;
            size_t size = m == 7 ? 0 : (size_t)(m * 211 % 1500) + 1;
            const char *name = writer_names[m];
            size_t key_len;
            REQUIRE(tar_split_name(name, &key_len));
            CHECK_MSG(!strncmp(s.key, name, key_len) && strlen(s.key) == key_len, "sample %d key %s", i, s.key);
            CHECK(!strcmp(s.parts[k].name, name + key_len + 1));
            CHECK(s.parts[k].size == size && !memcmp(s.parts[k].data, payload + m, size));
        }
        tar_sample_free(&s);
    }
    tar_shard_close(sh);
    free(written);
    free(ba);
    free(bb);
}

TEST(tar_writer_discard_leaves_nothing) {
    char path[1100];
    snprintf(path, sizeof path, "%s/d.tar", test_tmpdir());
    TarWriter *w;
    REQUIRE_OK(tar_writer_open(&w, path));
    REQUIRE_OK(tar_writer_add(w, "000000.txt", "x", 1));
    CHECK(tar_writer_add(w, "", "x", 1) == VFM_ERR_USAGE);
    tar_writer_discard(w);
    CHECK(count_files_in(test_tmpdir()) == 0);
    snprintf(path, sizeof path, "%s/no/such/dir/d.tar", test_tmpdir());
    CHECK(tar_writer_open(&w, path) == VFM_ERR_IO && strstr(vfm_last_error(), "no/such/dir"));
}
