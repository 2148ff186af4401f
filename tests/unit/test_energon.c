/* Energon compatibility against real bytes (tests/fixtures/energon, made by
 * reference/energon_fixtures.py with PyPI's webdataset and megatron-energon 7.4.1): brace patterns
 * and YAML as Python reads and writes them; `vfm data index` writes byte for byte what
 * `energon prepare` wrote (index.sqlite by table contents); vfm's split sources yield exactly the
 * samples, in order, that Energon's loader yielded for each split (also through split_config,
 * excludes, subsets and a metadataset); typed datasets are refused; index.sqlite is read. */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "capture.h"
#include "cli/commands.h"
#include "core/fileutil.h"
#include "data/energon/brace.h"
#include "data/energon/energon_meta.h"
#include "data/energon/energon_write.h"
#include "data/loader/length_index.h"
#include "data/loader/loader.h"
#include "data/loader/source.h"
#include "data/formats/yaml_json.h"
#include "data_fixture.h"
#include "test.h"

/* ---- helpers ---- */

static void sh(const char *cmd) {
    if (system(cmd) != 0) test_fail(__FILE__, __LINE__, "shell: %s", cmd);
}

/* A copy of fixture energon/<name> in the test's directory (shards only when bare). */
static const char *fixture_copy(const char *name, int bare) {
    static char dir[4][1300];
    static int k;
    k = (k + 1) % 4;
    snprintf(dir[k], sizeof dir[k], "%s/%s", test_tmpdir(), name);
    char cmd[4000];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s' && cp -r '%s/.' '%s/'", dir[k], dir[k],
             test_fixture(name), dir[k]);
    sh(cmd);
    if (bare) {
        snprintf(cmd, sizeof cmd, "rm -rf '%s/.nv-meta' && find '%s' -name '*.tar.idx' -delete", dir[k], dir[k]);
        sh(cmd);
    }
    return dir[k];
}

static int same_file(const char *a, const char *b) {
    char *x = NULL, *y = NULL;
    size_t nx = 0, ny = 0;
    int same = read_file_all(a, &x, &nx) == VFM_OK && read_file_all(b, &y, &ny) == VFM_OK && nx == ny &&
               memcmp(x, y, nx) == 0;
    free(x);
    free(y);
    return same;
}

static int by_string(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Every row of `table` as text, sorted (NULL when the file or table cannot be read). */
static StrList *table_rows(const char *db_path, const char *table) {
    sqlite3 *db;
    if (sqlite3_open_v2(db_path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) return NULL;
    char sql[200];
    snprintf(sql, sizeof sql, "SELECT * FROM %s", table);
    sqlite3_stmt *q;
    StrList *rows = calloc(1, sizeof *rows);
    if (sqlite3_prepare_v2(db, sql, -1, &q, NULL) != SQLITE_OK) {
        sqlite3_close(db);
        free(rows);
        return NULL;
    }
    while (sqlite3_step(q) == SQLITE_ROW) {
        char row[4096] = "";
        size_t k = 0;
        for (int c = 0; c < sqlite3_column_count(q); c++) {
            const unsigned char *t = sqlite3_column_text(q, c);
            k += (size_t)snprintf(row + k, sizeof row - k, "%s|", t ? (const char *)t : "NULL");
        }
        strlist_add(rows, row, -1);
    }
    sqlite3_finalize(q);
    sqlite3_close(db);
    qsort(rows->items, (size_t)rows->n, sizeof(char *), by_string);
    return rows;
}

static int same_tables(const char *a, const char *b, const char *table) {
    StrList *x = table_rows(a, table), *y = table_rows(b, table);
    int same = x && y && x->n == y->n && x->n > 0;
    for (int64_t i = 0; same && i < x->n; i++) same = !strcmp(x->items[i], y->items[i]);
    if (x) strlist_free(x);
    if (y) strlist_free(y);
    free(x);
    free(y);
    return same;
}

/* Runs `vfm data index ...`; its exit code. */
static int data_index4(const char *dir, const char *a1, const char *a2, const char *a3, const char *a4) {
    char d[1300];
    snprintf(d, sizeof d, "%s", dir);
    char *argv[7] = {"index", d, (char *)a1, (char *)a2, (char *)a3, (char *)a4, NULL};
    int argc = 2;
    while (argc < 6 && argv[argc]) argc++;
    return cmd_data(argc, argv);
}
static int data_index(const char *dir, const char *a1, const char *a2, const char *a3) {
    return data_index4(dir, a1, a2, a3, NULL);
}

static PackSource *split_source(const char *path, const char *split, const char *const *extra) {
    const char *ov[8] = {"dataset.packing_buffer_size=1", "dataset.num_workers=2", NULL};
    int n = 2;
    for (int i = 0; extra && extra[i] && n < 7; i++) ov[n++] = extra[i];
    ov[n] = NULL;
    Config *cfg = fixture_config(path, 4, 8, 512, ov);
    PackSource *src = NULL;
    if (cfg && pack_source_create_split(&src, cfg, split, 0, 1) != VFM_OK)
        test_fail(__FILE__, __LINE__, "split source %s of %s: %s", split, path, vfm_last_error());
    config_free(cfg);
    return src;
}

/* One pass (epoch_packs packs) of a split source as "shard:key" in order; packing_buffer_size 1
 * keeps the stream order. */
static StrList pass_of(PackSource *src) {
    StrList got = {0};
    Pack p;
    memset(&p, 0, sizeof p);
    for (int64_t k = 0; src && k < src->epoch_packs; k++) {
        if (src->next(src, &p) != VFM_OK) {
            test_fail(__FILE__, __LINE__, "next: %s", vfm_last_error());
            break;
        }
        for (int i = 0; i < p.n_samples; i++) strlist_add(&got, p.samples[i].source, -1);
    }
    pack_free(&p);
    return got;
}

/* energon_read.json[key] as "shard:key" strings. */
static StrList energon_list(const char *key) {
    StrList out = {0};
    json_error_t err;
    json_t *doc = json_load_file(test_fixture("energon/energon_read.json"), 0, &err);
    json_t *list = json_object_get(doc, key);
    if (!json_is_array(list)) test_fail(__FILE__, __LINE__, "energon_read.json has no %s", key);
    size_t i;
    json_t *v;
    json_array_foreach(list, i, v) {
        char s[400];
        snprintf(s, sizeof s, "%s:%s", json_string_value(json_array_get(v, 0)), json_string_value(json_array_get(v, 1)));
        strlist_add(&out, s, -1);
    }
    json_decref(doc);
    return out;
}

static int same_lists(const StrList *a, const StrList *b, const char *what) {
    int same = a->n == b->n;
    for (int64_t i = 0; same && i < a->n; i++) same = !strcmp(a->items[i], b->items[i]);
    if (!same) {
        test_fail(__FILE__, __LINE__, "%s: vfm yields %lld samples, Energon %lld", what, (long long)a->n, (long long)b->n);
        for (int64_t i = 0; i < a->n || i < b->n; i++)
            printf("      %-40s %s\n", i < a->n ? a->items[i] : "-", i < b->n ? b->items[i] : "-");
    }
    return same;
}

/* The split source of path yields energon_read.json[key], in order; returns the sample count. */
static int64_t check_split(const char *path, const char *split, const char *key) {
    PackSource *src = split_source(path, split, NULL);
    if (!src) return 0;
    StrList got = pass_of(src), want = energon_list(key);
    same_lists(&got, &want, key);
    int64_t n = want.n;
    strlist_free(&got);
    strlist_free(&want);
    pack_source_destroy(src);
    return n;
}

/* ---- brace patterns and YAML, against Python ---- */

static void check_expand(const char *pattern, const char *const *want) {
    StrList got = {0};
    vfm_status s = brace_expand(pattern, &got);
    CHECK_MSG(s == VFM_OK, "%s: %s", pattern, vfm_last_error());
    int64_t n = 0;
    while (want[n]) n++;
    int same = got.n == n;
    for (int64_t i = 0; same && i < n; i++) same = !strcmp(got.items[i], want[i]);
    CHECK_MSG(same, "brace_expand('%s') gives %lld names, braceexpand %lld (first '%s')", pattern, (long long)got.n,
              (long long)n, got.n ? got.items[0] : "");
    strlist_free(&got);
}

TEST(energon_brace_expand_matches_braceexpand) {
    /* expected lists printed by Python's braceexpand 0.1.7 */
    check_expand("rank{0..3}-{000000..000001}.tar",
                 (const char *[]){"rank0-000000.tar", "rank0-000001.tar", "rank1-000000.tar", "rank1-000001.tar",
                                  "rank2-000000.tar", "rank2-000001.tar", "rank3-000000.tar", "rank3-000001.tar", NULL});
    check_expand("index.html{,.backup}", (const char *[]){"index.html", "index.html.backup", NULL});
    check_expand("python{2.{5..7},3.{2,3}}",
                 (const char *[]){"python2.5", "python2.6", "python2.7", "python3.2", "python3.3", NULL});
    check_expand("{07..10}", (const char *[]){"07", "08", "09", "10", NULL});
    check_expand("{a..g..2}", (const char *[]){"a", "c", "e", "g", NULL});
    check_expand("{4..1}", (const char *[]){"4", "3", "2", "1", NULL});
    check_expand("{2..-1}", (const char *[]){"2", "1", "0", "-1", NULL});
    check_expand("x{Z..a}y", (const char *[]){"xZy", "xay", NULL});
    check_expand("{1\\{2,3}", (const char *[]){"1{2", "3", NULL});
    check_expand("a{b}c", (const char *[]){"a{b}c", NULL});
    check_expand("{-01..1}", (const char *[]){"-01", "000", "001", NULL});
    check_expand("a{1..5..0}", (const char *[]){"a1", "a2", "a3", "a4", "a5", NULL});
    check_expand("{9..0..-3}", (const char *[]){"9", "6", "3", "0", NULL});
    check_expand("{a,b{1,2}}x{}", (const char *[]){"ax{}", "b1x{}", "b2x{}", NULL});
    check_expand("{0..2}{a,b}", (const char *[]){"0a", "0b", "1a", "1b", "2a", "2b", NULL});
    check_expand("a\\,b{,c}", (const char *[]){"a,b", "a,bc", NULL});
    check_expand("plain.tar", (const char *[]){"plain.tar", NULL});
    StrList bad = {0};
    CHECK(brace_expand("{1{2,3}", &bad) == VFM_ERR_FORMAT && strstr(vfm_last_error(), "unbalanced"));
    CHECK(brace_expand("a}b", &bad) == VFM_ERR_FORMAT);
    CHECK(brace_expand("{0..99999999999}", &bad) == VFM_ERR_FORMAT);
    strlist_free(&bad);
}

static void check_collapse(const char *const *names, const char *const *want) {
    int64_t n = 0, m = 0;
    while (names[n]) n++;
    while (want[m]) m++;
    StrList got = {0}, back = {0};
    REQUIRE_OK(brace_collapse(names, n, &got));
    int same = got.n == m;
    for (int64_t i = 0; same && i < m; i++) same = !strcmp(got.items[i], want[i]);
    CHECK_MSG(same, "brace_collapse of '%s'...: %lld patterns, Energon %lld (first '%s')", names[0], (long long)got.n,
              (long long)m, got.n ? got.items[0] : "");
    for (int64_t i = 0; i < got.n; i++) REQUIRE_OK(brace_expand(got.items[i], &back));
    same = back.n == n;
    for (int64_t i = 0; same && i < n; i++) same = !strcmp(back.items[i], names[i]);
    CHECK_MSG(same, "expanding the collapsed '%s'... does not give the names back", names[0]);
    strlist_free(&got);
    strlist_free(&back);
}

TEST(energon_brace_collapse_matches_energon) {
    /* expected lists printed by megatron.energon.bracecollapse.collapse(keep_order=True) */
    check_collapse((const char *[]){"a00.tar", "a01.tar", "a02.tar", "b.tar", "a03.tar", NULL},
                   (const char *[]){"a{00..02}.tar", "b.tar", "a03.tar", NULL});
    check_collapse((const char *[]){"s/x.tar", "s-0.tar", "s-000.tar", "s-001.tar", "s-002.tar", NULL},
                   (const char *[]){"s/x.tar", "s-0.tar", "s-{000..002}.tar", NULL});
    check_collapse((const char *[]){"r0-09.tar", "r0-10.tar", NULL}, (const char *[]){"r0-{09..10}.tar", NULL});
    check_collapse((const char *[]){"r8.tar", "r9.tar", "r10.tar", NULL}, (const char *[]){"r{8..9}.tar", "r10.tar", NULL});
    check_collapse((const char *[]){"p1q2", "p1q3", "p2q3", "p2q4", NULL}, (const char *[]){"p1q{2..3}", "p2q{3..4}", NULL});
    check_collapse((const char *[]){"x1", "x1", NULL}, (const char *[]){"x1", "x1", NULL});
    check_collapse((const char *[]){"a01b", "a1b", NULL}, (const char *[]){"a01b", "a1b", NULL});
    check_collapse((const char *[]){"a9", "a10", NULL}, (const char *[]){"a9", "a10", NULL});
    CHECK(energon_path_cmp("s/x.tar", "s-0.tar") < 0 && strcmp("s/x.tar", "s-0.tar") > 0); /* Python's path order */
    CHECK(energon_path_cmp("a/b", "a/b/c") < 0 && energon_path_cmp("b", "a/z") > 0 && energon_path_cmp("a", "a") == 0);
}

TEST(energon_yaml_reads_values_as_pyyaml) {
    const char *doc = "a: yes\nb: No\nc: 0755\nd: 0x1F\ne: 1e5\nf: 1.5e+3\ng: ~\nh: 2024-01-01\ni: '123'\nj: 1_000\n"
                      "k: .5\nm: 190:20:30\nn: [1, \"2\", three]\no: {x: null, y: ''}\np: !!str 42\nq: +12\nr: 0b101\n"
                      "s: 12.\nt: on\nu: &anc [1, 2]\nv: *anc\nw: \"25%\"\nl: -.inf\n";
    json_t *got;
    REQUIRE_OK(yaml_to_json(doc, strlen(doc), "test.yaml", &got));
    /* yaml.safe_load's values (json.dumps of them), except -.inf, which jansson cannot hold: kept as text */
    json_error_t err;
    json_t *want = json_loads("{\"a\": true, \"b\": false, \"c\": 493, \"d\": 31, \"e\": \"1e5\", \"f\": 1500.0, "
                              "\"g\": null, \"h\": \"2024-01-01\", \"i\": \"123\", \"j\": 1000, \"k\": 0.5, "
                              "\"m\": 685230, \"n\": [1, \"2\", \"three\"], \"o\": {\"x\": null, \"y\": \"\"}, "
                              "\"p\": \"42\", \"q\": 12, \"r\": 5, \"s\": 12.0, \"t\": true, \"u\": [1, 2], "
                              "\"v\": [1, 2], \"w\": \"25%\", \"l\": \"-.inf\"}", 0, &err);
    REQUIRE(want);
    CHECK_MSG(json_equal(got, want), "yaml_to_json: %s", json_dumps(got, JSON_COMPACT));
    json_decref(got);
    json_decref(want);
    const char *bad = "a: [1, 2\nb: 3\n";
    CHECK(yaml_to_json(bad, strlen(bad), "bad.yaml", &got) == VFM_ERR_FORMAT && strstr(vfm_last_error(), "bad.yaml:"));
}

TEST(energon_yaml_writes_strings_as_pyyaml) {
    /* {string, what yaml.dump([s]) writes for it} printed by PyYAML 6.0.3 */
    static const char *const cases[][2] = {
        {"a.tar", "a.tar"}, {"000000.tar", "000000.tar"}, {"0.5", "'0.5'"}, {"1e5", "1e5"}, {"yes", "'yes'"},
        {"No", "'No'"}, {"~", "'~'"}, {"null", "'null'"}, {"", "''"}, {"a b", "a b"}, {"-a", "-a"}, {"- a", "'- a'"},
        {"#x", "'#x'"}, {"a #b", "'a #b'"}, {"a#b", "a#b"}, {"a: b", "'a: b'"}, {"a:b", "a:b"}, {":a", ":a"},
        {"?x", "?x"}, {"? x", "'? x'"}, {"[x]", "'[x]'"}, {"x,y", "x,y"}, {"{a}", "'{a}'"}, {"'q'", "'''q'''"},
        {"it's", "it's"}, {"\"dq", "'\"dq'"}, {" lead", "' lead'"}, {"trail ", "'trail '"}, {" ", "' '"},
        {"\xc3\xa9.tar", "\"\\xE9.tar\""}, {"tab\there", "\"tab\\there\""}, {"2024-01-01", "'2024-01-01'"},
        {"12:30:00", "'12:30:00'"}, {"--- x", "'--- x'"}, {"...", "'...'"}, {"=", "'='"}, {"<<", "'<<'"},
        {"@x", "'@x'"}, {"`x", "'`x'"}, {"%x", "'%x'"}, {"!x", "'!x'"}, {"&x", "'&x'"}, {"*x", "'*x'"},
        {"|x", "'|x'"}, {">x", "'>x'"}, {"x|y", "x|y"}, {"0o17", "0o17"}, {"0x1F", "'0x1F'"}, {"+1", "'+1'"},
        {"-1", "'-1'"}, {"1_000", "'1_000'"}, {".5", "'.5'"}, {".inf", "'.inf'"}, {".NaN", "'.NaN'"},
        {"True", "'True'"}, {"on", "'on'"}, {"OFF", "'OFF'"}, {"y", "y"}, {"n", "n"}, {"a\\b", "a\\b"},
        {"\xe2\x80\xa8", "\"\\L\""}, {"1:2", "'1:2'"}, {"1.2.3", "1.2.3"}, {"0.", "'0.'"},
        {"190:20:30", "'190:20:30'"}, {"x\xc3\xa9\xf0\x9f\x98\x80", "\"x\\xE9\\U0001F600\""},
        {"rank{000..007}.tar", "rank{000..007}.tar"}, {"part-000.tar/p0001", "part-000.tar/p0001"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *got = yaml_format_string(cases[i][0]);
        CHECK_MSG(got && !strcmp(got, cases[i][1]), "'%s' written as %s, PyYAML writes %s", cases[i][0], got,
                  cases[i][1]);
        free(got);
    }
}

/* ---- what vfm data index writes ---- */

/* Compares dir/.nv-meta and the shards' .tar.idx with the fixture's. */
static void check_same_metadata(const char *dir, const char *fixture, const char *const *shards) {
    char a[1500], b[1500];
    static const char *const files[] = {".info.json", "split.yaml", "dataset.yaml"};
    for (int i = 0; i < 3; i++) {
        snprintf(a, sizeof a, "%s/.nv-meta/%s", dir, files[i]);
        snprintf(b, sizeof b, "%s/.nv-meta/%s", test_fixture(fixture), files[i]);
        CHECK_MSG(same_file(a, b), "%s differs from %s", a, b);
    }
    for (int i = 0; shards[i]; i++) {
        snprintf(a, sizeof a, "%s/%s.idx", dir, shards[i]);
        snprintf(b, sizeof b, "%s/%s.idx", test_fixture(fixture), shards[i]);
        CHECK_MSG(same_file(a, b), "%s differs from %s", a, b);
    }
    snprintf(a, sizeof a, "%s/.nv-meta/index.sqlite", dir);
    snprintf(b, sizeof b, "%s/.nv-meta/index.sqlite", test_fixture(fixture));
    CHECK_MSG(same_tables(a, b, "samples"), "index.sqlite: table samples differs");
    CHECK_MSG(same_tables(a, b, "sample_parts"), "index.sqlite: table sample_parts differs");
    CHECK_MSG(same_tables(a, b, "sqlite_master"), "index.sqlite: the schema differs");
    char *uuid = NULL;
    size_t n = 0;
    snprintf(a, sizeof a, "%s/.nv-meta/index.uuid", dir);
    CHECK(read_file_all(a, &uuid, &n) == VFM_OK && n == 36 && uuid[8] == '-' && uuid[14] == '4');
    free(uuid);
}

TEST(energon_data_index_writes_what_energon_prepare_wrote) {
    /* prepared/ holds `energon prepare --split-ratio 6,2,2` output: vfm on the bare shards must match it */
    const char *dir = fixture_copy("energon/prepared", 1);
    REQUIRE(data_index(dir, "--split", "6,2,2", NULL) == 0);
    check_same_metadata(dir, "energon/prepared",
                        (const char *[]){"part-000.tar", "part-001.tar", "part-002.tar", "part-003.tar", "part-004.tar",
                                         NULL});
}

TEST(energon_data_index_matches_the_committed_fixture) {
    /* vfm_indexed/: what vfm wrote when the fixture was made (and energon prepare wrote the same) */
    const char *dir = fixture_copy("energon/vfm_indexed", 1);
    REQUIRE(data_index4(dir, "--split", "8,1,1", "--threads", "2") == 0);
    check_same_metadata(dir, "energon/vfm_indexed",
                        (const char *[]){"s/x.tar", "s-0.tar", "s-000.tar", "s-001.tar", "s-002.tar", "s-003.tar",
                                         "t/000.tar", "t/001.tar", NULL});
}

TEST(energon_data_index_keeps_split_and_dataset_files_without_force) {
    const char *dir = fixture_copy("energon/prepared", 0);
    char split[1400], dataset[1400], fsplit[1400];
    snprintf(split, sizeof split, "%s/.nv-meta/split.yaml", dir);
    snprintf(dataset, sizeof dataset, "%s/.nv-meta/dataset.yaml", dir);
    snprintf(fsplit, sizeof fsplit, "%s/.nv-meta/split.yaml", test_fixture("energon/prepared"));
    REQUIRE(write_file_atomic(dataset, "subflavors: {}\n", 15) == VFM_OK);
    CHECK(data_index(dir, "--split", "1,1,1", NULL) == 2); /* a ratio and a split file: --force needed */
    CHECK(same_file(split, fsplit));
    CHECK(data_index(dir, NULL, NULL, NULL) == 0); /* no ratio: both kept */
    CHECK(same_file(split, fsplit));
    char *text = NULL;
    size_t n = 0;
    REQUIRE(read_file_all(dataset, &text, &n) == VFM_OK);
    CHECK(!strcmp(text, "subflavors: {}\n"));
    free(text);
    CHECK(data_index(dir, "--split", "1,1,1", "--force") == 0);
    REQUIRE(read_file_all(split, &text, &n) == VFM_OK);
    CHECK_MSG(!strcmp(text, "split_parts:\n  train:\n  - part-000.tar\n  val:\n  - part-{001..002}.tar\n  test:\n"
                            "  - part-{003..004}.tar\nexclude: []\n"), "split.yaml for 1,1,1:\n%s", text);
    free(text);
    REQUIRE(read_file_all(dataset, &text, &n) == VFM_OK);
    CHECK(!strcmp(text, "__module__: megatron.energon\n__class__: CrudeWebdataset\n"));
    free(text);
    /* bad ratios are usage errors */
    CHECK(data_index(dir, "--split", "8,1", NULL) == 2);
    CHECK(data_index(dir, "--split", "0,0,0", NULL) == 2);
    CHECK(data_index(dir, "--split", "8,-1,1", NULL) == 2);
    /* a dataset without a split file gets 1,0,0 */
    const char *bare = fixture_copy("energon/vfm_indexed", 1);
    CHECK(data_index(bare, NULL, NULL, NULL) == 0);
    snprintf(split, sizeof split, "%s/.nv-meta/split.yaml", bare);
    REQUIRE(read_file_all(split, &text, &n) == VFM_OK);
    CHECK_MSG(!strcmp(text, "split_parts:\n  train:\n  - s/x.tar\n  - s-0.tar\n  - s-{000..003}.tar\n  - t/{000..001}.tar\n"
                            "  val: []\n  test: []\nexclude: []\n"), "default split.yaml:\n%s", text);
    free(text);
}

TEST(energon_data_index_refuses_what_energon_cannot_index) {
    char dir[1300], meta[1400];
    snprintf(dir, sizeof dir, "%s/dup", test_tmpdir());
    FixtureSample s[2];
    for (int i = 0; i < 2; i++) {
        s[i] = fixture_mixed_sample(i, 4, 8);
        snprintf(s[i].key, sizeof s[i].key, "same%d", i);
    }
    char path[1400];
    snprintf(path, sizeof path, "%s/a.tar", dir);
    REQUIRE_OK(fixture_write_shard(path, s, 2));
    snprintf(path, sizeof path, "%s/b.tar", dir);
    REQUIRE_OK(fixture_write_shard(path, s + 1, 1)); /* key same1 again */
    char *out, *err;
    const char *args[] = {"data", "index", dir};
    CHECK(run_vfm(args, 3, &out, &err) == 1);
    CHECK_MSG(strstr(err, "sample key 'same1' appears twice (in a.tar and b.tar)"), "stderr: %s", err);
    free(out);
    free(err);
    snprintf(meta, sizeof meta, "%s/.nv-meta", dir);
    CHECK(!path_exists(meta)); /* nothing written */
}

/* ---- reading Energon datasets ---- */

TEST(energon_prepared_splits_read_as_energon_reads_them) {
    const char *dir = fixture_copy("energon/prepared", 0);
    CHECK(check_split(dir, "train", "prepared/train") == 9);
    CHECK(check_split(dir, "val", "prepared/val") == 3);
    CHECK(check_split(dir, "test", "prepared/test") == 3);
}

TEST(energon_reads_vfm_indexed_splits_as_vfm_does) {
    /* Energon read vfm_indexed/ (metadata written by vfm data index); vfm's split sources agree */
    const char *dir = fixture_copy("energon/vfm_indexed", 0);
    CHECK(check_split(dir, "train", "vfm_indexed/train") == 15);
    CHECK(check_split(dir, "val", "vfm_indexed/val") == 3);
    CHECK(check_split(dir, "test", "vfm_indexed/test") == 3);
}

TEST(energon_split_config_excludes_and_subsets_as_energon) {
    char root[1300];
    snprintf(root, sizeof root, "%s/fx", test_tmpdir());
    char cmd[3000];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && cp -r '%s/.' '%s/'", root, test_fixture("energon"), root);
    sh(cmd);
    /* a metadataset naming the hand-written split file: brace patterns, a shard and two samples excluded */
    char yaml[1400];
    snprintf(yaml, sizeof yaml, "%s/excl.yaml", root);
    const char *text = "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n"
                       "  train: {path: prepared, split_config: split_excl.yaml}\n"
                       "  val: {path: prepared, split_config: split_excl.yaml}\n";
    REQUIRE_OK(write_file_atomic(yaml, text, strlen(text)));
    CHECK(check_split(yaml, "train", "prepared:split_excl.yaml/train") == 7);
    CHECK(check_split(yaml, "val", "prepared:split_excl.yaml/val") == 3);
    /* the fixture's meta.yaml: val concatenates two datasets with subset ranges, as Energon does */
    snprintf(yaml, sizeof yaml, "%s/meta.yaml", root);
    CHECK(check_split(yaml, "val", "meta.yaml/val") == 10);
}

TEST(energon_training_source_reads_the_configured_split) {
    const char *dir = fixture_copy("energon/prepared", 0);
    static const char *const splits[] = {"train", "val"};
    for (int i = 0; i < 2; i++) {
        char ov[64];
        snprintf(ov, sizeof ov, "dataset.split=%s", splits[i]);
        Config *cfg = fixture_config(dir, 4, 8, 512, (const char *[]){ov, "dataset.packing_buffer_size=4", NULL});
        PackSource *src = NULL;
        REQUIRE_OK(pack_source_create(&src, cfg, 0, 1));
        config_free(cfg);
        StrList got = pass_of(src), want;
        char key[64];
        snprintf(key, sizeof key, "prepared/%s", splits[i]);
        want = energon_list(key);
        /* training shuffles: the same samples, each once per epoch */
        qsort(got.items, (size_t)got.n, sizeof(char *), by_string);
        qsort(want.items, (size_t)want.n, sizeof(char *), by_string);
        same_lists(&got, &want, key);
        strlist_free(&got);
        strlist_free(&want);
        pack_source_destroy(src);
    }
}

TEST(energon_missing_split_says_how_to_add_one) {
    const char *dir = fixture_copy("energon/vfm_indexed", 1); /* no .nv-meta: one train split */
    Config *cfg = fixture_config(dir, 4, 8, 512, NULL);
    PackSource *src = NULL;
    CHECK(pack_source_create_split(&src, cfg, "val", 0, 1) == VFM_ERR_USAGE);
    CHECK_MSG(strstr(vfm_last_error(), "no .nv-meta/split.yaml") && strstr(vfm_last_error(), "--split 8,1,1") &&
              strstr(vfm_last_error(), "use_train_split_for_val"), "%s", vfm_last_error());
    config_free(cfg);
    cfg = fixture_config(dir, 4, 8, 512, (const char *[]){"dataset.use_train_split_for_val=true", NULL});
    REQUIRE_OK(pack_source_create_split(&src, cfg, "val", 0, 1));
    LoaderInfo info;
    CHECK(loader_info(src, &info) && info.n_usable == 21);
    pack_source_destroy(src);
    config_free(cfg);
    /* a dataset with splits names the ones it has */
    const char *prep = fixture_copy("energon/prepared", 0);
    cfg = fixture_config(prep, 4, 8, 512, (const char *[]){"dataset.split=holdout", NULL});
    CHECK(pack_source_create(&src, cfg, 0, 1) == VFM_ERR_USAGE);
    CHECK_MSG(strstr(vfm_last_error(), "has no split part 'holdout' (it has: train, val, test)"), "%s",
              vfm_last_error());
    config_free(cfg);
}

TEST(energon_typed_datasets_are_refused) {
    const char *dir = fixture_copy("energon/prepared", 0);
    char path[1400];
    snprintf(path, sizeof path, "%s/.nv-meta/dataset.yaml", dir);
    static const char *const cases[][2] = {
        {"sample_type:\n  __module__: megatron.energon\n  __class__: CaptioningSample\nfield_map:\n  image: jpg\n",
         "a typed dataset (sample_type CaptioningSample with a field_map)"},
        {"sample_type: {__module__: megatron.energon, __class__: CaptioningSample}\n"
         "sample_loader: sample_loader.py:sample_loader\npart_filter: sample_loader.py:part_filter\n",
         "loaded by Python code (sample_loader.py:sample_loader), which vfm never runs"},
        {"__module__: megatron.energon\n__class__: ImageWebdataset\n", "dataset class megatron.energon.ImageWebdataset"},
    };
    for (int i = 0; i < 3; i++) {
        REQUIRE_OK(write_file_atomic(path, cases[i][0], strlen(cases[i][0])));
        Config *cfg = fixture_config(dir, 4, 8, 512, NULL);
        PackSource *src = NULL;
        CHECK(pack_source_create(&src, cfg, 0, 1) == VFM_ERR_USAGE);
        CHECK_MSG(strstr(vfm_last_error(), cases[i][1]) && strstr(vfm_last_error(), "CrudeWebdataset"), "case %d: %s",
                  i, vfm_last_error());
        config_free(cfg);
    }
    /* a crude dataset's subflavors are read */
    const char *crude = "__module__: megatron.energon\n__class__: CrudeWebdataset\nsubflavors:\n  kind: photo\n";
    REQUIRE_OK(write_file_atomic(path, crude, strlen(crude)));
    EnergonMeta *m;
    REQUIRE_OK(energon_meta_read(&m, dir, NULL, NULL));
    CHECK(m->has_info && m->n_info == 5 && m->info_counts[4] == 3 && !strcmp(m->info_shards[2], "part-002.tar"));
    CHECK(!strcmp(json_string_value(json_object_get(m->subflavors, "kind")), "photo"));
    CHECK(energon_shard_id(m, "part-003.tar") == 3 && energon_shard_id(m, "nope.tar") == -1);
    energon_meta_free(m);
}

TEST(energon_length_index_reads_members_from_index_sqlite) {
    /* break a member header's checksum in part-001.tar: scanning the headers fails, the members
     * listed in index.sqlite still lead to readable parts */
    const char *dir = fixture_copy("energon/prepared", 0);
    char path[1400];
    snprintf(path, sizeof path, "%s/part-001.tar", dir);
    char *tar = NULL;
    size_t n = 0;
    REQUIRE(read_file_all(path, &tar, &n) == VFM_OK);
    int64_t at = 0; /* the second member's header: after the first header and its padded payload */
    long size = strtol(tar + 124, NULL, 8);
    at = 512 + (size + 511) / 512 * 512;
    tar[at + 148] ^= 1; /* checksum field */
    REQUIRE_OK(write_file_atomic(path, tar, n));
    free(tar);
    LengthIndex *li;
    REQUIRE_OK(length_index_open(&li, dir, 1, 1));
    CHECK(li->n_shards == 5 && li->n_samples == 15);
    for (int64_t i = 0; i < li->n_samples; i++)
        CHECK_MSG(li->samples[i].status == 0 && li->samples[i].shape[0] == 4, "sample %lld: %s", (long long)i,
                  li->samples[i].reason ? li->samples[i].reason : "");
    length_index_free(li);
    /* without index.sqlite the same shard cannot be scanned */
    snprintf(path, sizeof path, "%s/.nv-meta/index.sqlite", dir);
    unlink(path);
    REQUIRE_OK(length_index_open(&li, dir, 1, 1));
    CHECK(li->shards[1].error && strstr(li->shards[1].error, "checksum"));
    CHECK(li->n_samples == 12);
    length_index_free(li);
}

TEST(energon_mock_val_split_is_another_stream) {
    Config *cfg;
    const char *ov[] = {"dataset.mock=true", "model.in_channels=4", "model.crossattn_emb_size=8",
                        "dataset.F_latents=1", "dataset.H_latents=4", "dataset.W_latents=4", "dataset.mock_samples=6",
                        "model.patch_spatial=2", "dataset.task_encoder_seq_length=256"};
    REQUIRE_OK(config_load(&cfg, NULL, ov, 9));
    PackSource *train, *val, *val2, *test;
    REQUIRE_OK(pack_source_create(&train, cfg, 0, 1));
    REQUIRE_OK(pack_source_create_split(&val, cfg, "val", 0, 1));
    REQUIRE_OK(pack_source_create_split(&val2, cfg, "val", 0, 1));
    REQUIRE_OK(pack_source_create_split(&test, cfg, "test", 0, 1));
    PackSource *bad = NULL;
    CHECK(pack_source_create_split(&bad, cfg, "holdout", 0, 1) == VFM_ERR_USAGE);
    CHECK(val->epoch_packs == train->epoch_packs && val->epoch_packs > 0);
    Pack a, b, c, d;
    pack_init(&a, train->token_dim, train->text_dim, 64, 1);
    pack_init(&b, train->token_dim, train->text_dim, 64, 1);
    pack_init(&c, train->token_dim, train->text_dim, 64, 1);
    pack_init(&d, train->token_dim, train->text_dim, 64, 1);
    REQUIRE_OK(train->next(train, &a));
    REQUIRE_OK(val->next(val, &b));
    REQUIRE_OK(val2->next(val2, &c));
    REQUIRE_OK(test->next(test, &d));
    CHECK(a.n_samples == b.n_samples && a.n_tokens == b.n_tokens);
    CHECK(b.samples[0].uid == (1ULL << 62) && d.samples[0].uid == (1ULL << 62) + (1ULL << 61) && a.samples[0].uid == 0);
    CHECK(memcmp(a.tokens, b.tokens, (size_t)a.n_tokens * a.token_dim * sizeof(float)) != 0);
    CHECK(memcmp(b.tokens, c.tokens, (size_t)b.n_tokens * b.token_dim * sizeof(float)) == 0);
    CHECK(memcmp(b.tokens, d.tokens, (size_t)b.n_tokens * b.token_dim * sizeof(float)) != 0);
    pack_free(&a);
    pack_free(&b);
    pack_free(&c);
    pack_free(&d);
    pack_source_destroy(train);
    pack_source_destroy(val);
    pack_source_destroy(val2);
    pack_source_destroy(test);
    config_free(cfg);
}

TEST(energon_legacy_info_yaml_and_split_json_are_read) {
    const char *dir = fixture_copy("energon/vfm_indexed", 0);
    char path[1400], text_path[1400];
    /* the legacy .info.yaml instead of .info.json, and split.json instead of split.yaml */
    snprintf(path, sizeof path, "%s/.nv-meta/.info.json", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/.nv-meta/.info.yaml", dir);
    const char *info = "energon_version: 7.0.0\nshard_counts:\n  s/x.tar: 2\n  s-0.tar: 2\n  s-000.tar: 3\n"
                       "  s-001.tar: 3\n  s-002.tar: 2\n  s-003.tar: 3\n  t/000.tar: 3\n  t/001.tar: 3\n";
    REQUIRE_OK(write_file_atomic(path, info, strlen(info)));
    snprintf(text_path, sizeof text_path, "%s/.nv-meta/split.yaml", dir);
    unlink(text_path);
    snprintf(text_path, sizeof text_path, "%s/.nv-meta/split.json", dir);
    const char *split = "{\"split_parts\": {\"train\": [\"s-00{0..1}.tar\"], \"val\": [\"t/{000,001}.tar\"]},"
                        " \"exclude\": [\"t/001.tar/v0119\"]}";
    REQUIRE_OK(write_file_atomic(text_path, split, strlen(split)));
    EnergonMeta *m;
    REQUIRE_OK(energon_meta_read(&m, dir, NULL, NULL));
    CHECK(m->has_info && !strcmp(m->info_file, ".info.yaml") && m->n_info == 8 && !strcmp(m->energon_version, "7.0.0"));
    CHECK(m->has_split && !strcmp(m->split_file, "split.json") && m->n_parts == 2);
    energon_meta_free(m);
    PackSource *src = split_source(dir, "val", NULL);
    REQUIRE(src);
    StrList got = pass_of(src);
    CHECK_MSG(got.n == 5 && !strcmp(got.items[0], "t/000.tar:v0115") && !strcmp(got.items[4], "t/001.tar:v0120"),
              "%lld samples", (long long)got.n);
    strlist_free(&got);
    pack_source_destroy(src);
    /* vfm data index keeps the legacy file in step, keys sorted as yaml.dump sorts them */
    CHECK(data_index(dir, NULL, NULL, NULL) == 0);
    char *text = NULL;
    size_t n = 0;
    REQUIRE(read_file_all(path, &text, &n) == VFM_OK);
    CHECK_MSG(!strcmp(text, "energon_version: 7.4.1\nshard_counts:\n  s-0.tar: 2\n  s-000.tar: 3\n  s-001.tar: 3\n"
                            "  s-002.tar: 2\n  s-003.tar: 3\n  s/x.tar: 2\n  t/000.tar: 3\n  t/001.tar: 3\n"),
              ".info.yaml:\n%s", text);
    free(text);
    snprintf(path, sizeof path, "%s/.nv-meta/split.yaml", dir);
    CHECK(!path_exists(path)); /* split.json is the split file: kept */
}
