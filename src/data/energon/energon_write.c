/* `vfm data index`'s Energon metadata (see energon_write.h): every shard's rows scanned from its
 * tar headers, then the files written in Energon's formats: JSON as Python's json.dump(indent=2)
 * writes it, YAML as yaml.dump, the split computed with the same floating-point steps as
 * `energon prepare --split-ratio`. */
#include "data/energon/energon_write.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "core/bytebuf.h"
#include "core/fileutil.h"
#include "data/energon/brace.h"
#include "data/energon/energon_meta.h"
#include "data/energon/energon_sqlite.h"
#include "data/formats/tar.h"
#include "data/formats/yaml_json.h"

int energon_path_cmp(const char *a, const char *b) {
    for (;;) {
        size_t la = strcspn(a, "/"), lb = strcspn(b, "/");
        size_t m = la < lb ? la : lb;
        int c = memcmp(a, b, m);
        if (c) return c;
        if (la != lb) return la < lb ? -1 : 1;
        if (!a[la] || !b[lb]) return (a[la] != 0) - (b[lb] != 0);
        a += la + 1;
        b += lb + 1;
    }
}

static int by_components(const void *x, const void *y) {
    return energon_path_cmp(*(const char *const *)x, *(const char *const *)y);
}

vfm_status energon_parse_split(const char *text, double out[3]) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", text);
    int n = 0;
    double sum = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *end;
        errno = 0;
        double v = strtod(tok, &end);
        while (*end == ' ' || *end == '\t') end++;
        if (n == 3 || end == tok || *end || errno || !isfinite(v) || v < 0)
            return vfm_fail_at(VFM_ERR_USAGE, NULL, "--split", text,
                               "expected three non-negative train,val,test ratios such as 8,1,1 or 0.8,0.1,0.1");
        out[n++] = v;
        sum += v;
    }
    if (n != 3 || !(sum > 0))
        return vfm_fail_at(VFM_ERR_USAGE, NULL, "--split", text,
                           "expected three non-negative train,val,test ratios with a positive sum, such as 8,1,1");
    return VFM_OK;
}

/* ---- text in Python's formats ---- */

/* A JSON string as json.dumps(ensure_ascii=True) writes it. */
static void put_json_string(ByteBuf *t, const char *s) {
    bytebuf_puts(t, "\"");
    for (size_t i = 0; s[i];) {
        unsigned char c = (unsigned char)s[i];
        uint32_t cp = c;
        size_t len = 1;
        if (c >= 0xc0 && c < 0xe0 && s[i + 1]) cp = (uint32_t)(c & 0x1f) << 6 | (s[i + 1] & 0x3f), len = 2;
        else if (c >= 0xe0 && c < 0xf0 && s[i + 1] && s[i + 2])
            cp = (uint32_t)(c & 0x0f) << 12 | (uint32_t)(s[i + 1] & 0x3f) << 6 | (s[i + 2] & 0x3f), len = 3;
        else if (c >= 0xf0 && s[i + 1] && s[i + 2] && s[i + 3])
            cp = (uint32_t)(c & 0x07) << 18 | (uint32_t)(s[i + 1] & 0x3f) << 12 | (uint32_t)(s[i + 2] & 0x3f) << 6 |
                 (s[i + 3] & 0x3f), len = 4;
        i += len;
        char buf[16];
        switch (cp) {
        case '"': bytebuf_puts(t, "\\\""); continue;
        case '\\': bytebuf_puts(t, "\\\\"); continue;
        case '\b': bytebuf_puts(t, "\\b"); continue;
        case '\f': bytebuf_puts(t, "\\f"); continue;
        case '\n': bytebuf_puts(t, "\\n"); continue;
        case '\r': bytebuf_puts(t, "\\r"); continue;
        case '\t': bytebuf_puts(t, "\\t"); continue;
        default: break;
        }
        if (cp >= 0x20 && cp <= 0x7e) {
            buf[0] = (char)cp;
            bytebuf_put(t, buf, 1);
        } else if (cp < 0x10000) {
            snprintf(buf, sizeof buf, "\\u%04x", cp);
            bytebuf_puts(t, buf);
        } else {
            uint32_t v = cp - 0x10000;
            snprintf(buf, sizeof buf, "\\u%04x\\u%04x", 0xd800 + (v >> 10), 0xdc00 + (v & 0x3ff));
            bytebuf_puts(t, buf);
        }
    }
    bytebuf_puts(t, "\"");
}

static void put_yaml_string(ByteBuf *t, const char *s) {
    char *y = yaml_format_string(s);
    if (!y) {
        t->failed = 1;
        return;
    }
    bytebuf_puts(t, y);
    free(y);
}

/* ---- the files ---- */

static vfm_status write_text(const char *root, const char *name, ByteBuf *t) {
    if (t->failed) return vfm_fail(VFM_ERR_NOMEM, "index: out of memory");
    char path[1200];
    snprintf(path, sizeof path, "%s/%s/%s", root, ENERGON_META_DIR, name);
    return write_file_atomic(path, bytebuf_str(t), t->len);
}

static vfm_status write_info(const char *root, const char *const *rel, const int64_t *counts, int n) {
    ByteBuf t = {0};
    char num[32];
    bytebuf_puts(&t, "{\n  \"energon_version\": ");
    put_json_string(&t, ENERGON_FORMAT_VERSION);
    bytebuf_puts(&t, ",\n  \"shard_counts\": {");
    for (int i = 0; i < n; i++) {
        bytebuf_puts(&t, i ? ",\n    " : "\n    ");
        put_json_string(&t, rel[i]);
        snprintf(num, sizeof num, ": %lld", (long long)counts[i]);
        bytebuf_puts(&t, num);
    }
    bytebuf_puts(&t, n ? "\n  }\n}" : "}\n}");
    vfm_status s = write_text(root, ".info.json", &t);
    free(t.data);
    /* a legacy .info.yaml is kept in step, as energon prepare does (yaml.dump sorts the keys) */
    char path[1200];
    snprintf(path, sizeof path, "%s/%s/.info.yaml", root, ENERGON_META_DIR);
    if (s != VFM_OK || !path_exists(path)) return s;
    const char **sorted = malloc((size_t)(n ? n : 1) * sizeof *sorted);
    int64_t *sorted_counts = malloc((size_t)(n ? n : 1) * sizeof *sorted_counts);
    if (!sorted || !sorted_counts) {
        free(sorted);
        free(sorted_counts);
        return vfm_fail(VFM_ERR_NOMEM, "index: out of memory");
    }
    for (int i = 0; i < n; i++) sorted[i] = rel[i];
    for (int i = 1; i < n; i++) /* insertion sort by string (Python's key order), counts alongside */
        for (int j = i; j > 0 && strcmp(sorted[j - 1], sorted[j]) > 0; j--) {
            const char *x = sorted[j];
            sorted[j] = sorted[j - 1];
            sorted[j - 1] = x;
        }
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            if (sorted[i] == rel[j]) sorted_counts[i] = counts[j];
    ByteBuf y = {0};
    bytebuf_puts(&y, "energon_version: ");
    put_yaml_string(&y, ENERGON_FORMAT_VERSION);
    bytebuf_puts(&y, n ? "\nshard_counts:\n" : "\nshard_counts: {}\n");
    for (int i = 0; i < n; i++) {
        bytebuf_puts(&y, "  ");
        put_yaml_string(&y, sorted[i]);
        snprintf(num, sizeof num, ": %lld\n", (long long)sorted_counts[i]);
        bytebuf_puts(&y, num);
    }
    s = write_text(root, ".info.yaml", &y);
    free(y.data);
    free(sorted);
    free(sorted_counts);
    return s;
}

/* split.yaml for shards rel[n] (Energon's order) and ratios r (energon prepare's arithmetic). */
static vfm_status write_split(const char *root, const char *const *rel, int n, const double r[3], long long counts[3]) {
    static const char *names[3] = {"train", "val", "test"};
    double total = 0;
    for (int k = 0; k < 3; k++) total += r[k];
    double cumulative = 0;
    int64_t offset = 0;
    ByteBuf t = {0};
    bytebuf_puts(&t, "split_parts:\n");
    vfm_status s = VFM_OK;
    for (int k = 0; k < 3 && s == VFM_OK; k++) {
        cumulative += r[k] / total;
        int64_t end = (int64_t)((double)n * cumulative);
        if (end > n) end = n;
        if (end < offset) end = offset;
        counts[k] = end - offset;
        StrList collapsed = {0};
        s = brace_collapse(rel + offset, end - offset, &collapsed);
        bytebuf_puts(&t, "  ");
        bytebuf_puts(&t, names[k]);
        bytebuf_puts(&t, collapsed.n ? ":\n" : ": []\n");
        for (int64_t i = 0; i < collapsed.n; i++) {
            bytebuf_puts(&t, "  - ");
            put_yaml_string(&t, collapsed.items[i]);
            bytebuf_puts(&t, "\n");
        }
        strlist_free(&collapsed);
        offset = end;
    }
    bytebuf_puts(&t, "exclude: []\n");
    if (s == VFM_OK) s = write_text(root, "split.yaml", &t);
    free(t.data);
    return s;
}

static vfm_status write_dataset_yaml(const char *root) {
    ByteBuf t = {0};
    bytebuf_puts(&t, "__module__: megatron.energon\n__class__: CrudeWebdataset\n");
    vfm_status s = write_text(root, "dataset.yaml", &t);
    free(t.data);
    return s;
}

static vfm_status write_uuid(const char *root) {
    uint8_t b[16];
    if (getrandom(b, sizeof b, 0) != (ssize_t)sizeof b) return vfm_fail(VFM_ERR_IO, "index: no random bytes for index.uuid");
    b[6] = (uint8_t)((b[6] & 0x0f) | 0x40); /* version 4 */
    b[8] = (uint8_t)((b[8] & 0x3f) | 0x80); /* RFC 4122 variant */
    char u[40];
    int k = 0;
    for (int i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10) u[k++] = '-';
        k += snprintf(u + k, sizeof u - (size_t)k, "%02x", b[i]);
    }
    ByteBuf t = {0};
    bytebuf_put(&t, u, (size_t)k);
    vfm_status s = write_text(root, "index.uuid", &t);
    free(t.data);
    return s;
}

/* Rewrites <shard>.tar.idx when it is missing or differs from the scan; 1 in *rewritten then. */
static vfm_status sync_tar_idx(const char *shard_path, const EnergonShardRows *r, int *rewritten) {
    *rewritten = 0;
    size_t bytes = (size_t)(r->n_samples + 1) * 8;
    uint8_t *want = malloc(bytes);
    if (!want) return vfm_fail(VFM_ERR_NOMEM, "index: out of memory");
    for (int64_t i = 0; i <= r->n_samples; i++) {
        uint64_t v = (uint64_t)(i < r->n_samples ? r->byte_offset[i] : r->end_offset);
        for (int b = 0; b < 8; b++) want[i * 8 + b] = (uint8_t)(v >> (8 * b));
    }
    char idx_path[1200];
    tar_index_path(shard_path, idx_path, sizeof idx_path);
    char *have = NULL;
    size_t have_n = 0;
    vfm_status s = VFM_OK;
    if (!path_exists(idx_path) || read_file_all(idx_path, &have, &have_n) != VFM_OK || have_n != bytes ||
        memcmp(have, want, bytes) != 0) {
        vfm_clear_error();
        s = write_file_atomic(idx_path, want, bytes);
        *rewritten = 1;
    }
    free(have);
    free(want);
    return s;
}

static int split_file_present(const char *root) {
    char a[1200], b[1200];
    snprintf(a, sizeof a, "%s/%s/split.yaml", root, ENERGON_META_DIR);
    snprintf(b, sizeof b, "%s/%s/split.json", root, ENERGON_META_DIR);
    return path_exists(a) || path_exists(b);
}

vfm_status energon_write_index(const char *root, const char *const *rel_in, int n, const EnergonWriteOptions *opt,
                               EnergonWriteReport *report) {
    memset(report, 0, sizeof *report);
    if (n <= 0) return vfm_fail(VFM_ERR_FORMAT, "%s: no shards to index", root);
    int had_split = split_file_present(root);
    if (had_split && opt->has_split && !opt->force)
        return vfm_fail(VFM_ERR_USAGE, "%s/%s already has a split file; --force replaces it with the --split ratio",
                        root, ENERGON_META_DIR);
    const char **rel = malloc((size_t)n * sizeof *rel);
    EnergonShardRows *rows = calloc((size_t)n, sizeof *rows);
    int64_t *counts = malloc((size_t)n * sizeof *counts);
    vfm_status s = rel && rows && counts ? VFM_OK : vfm_fail(VFM_ERR_NOMEM, "index: out of memory");
    if (s == VFM_OK) {
        memcpy(rel, rel_in, (size_t)n * sizeof *rel);
        qsort(rel, (size_t)n, sizeof *rel, by_components);
    }
    char path[2200];
    for (int i = 0; s == VFM_OK && i < n; i++) {
        snprintf(path, sizeof path, "%s/%s", root, rel[i]);
        s = energon_shard_rows_scan(&rows[i], path, rel[i]);
        if (s != VFM_OK) {
            s = vfm_fail_context(VFM_ERR_FORMAT, "cannot write Energon metadata (energon prepare would fail too)");
            break;
        }
        if (rows[i].n_samples == 0)
            s = vfm_fail(VFM_ERR_FORMAT, "cannot write Energon metadata: %s holds no samples (Energon refuses empty "
                         "shards)", path);
        counts[i] = rows[i].n_samples;
        report->n_samples += rows[i].n_samples;
    }
    if (s == VFM_OK) s = energon_check_unique_keys(rows, n);
    char meta[1200];
    snprintf(meta, sizeof meta, "%s/%s", root, ENERGON_META_DIR);
    if (s == VFM_OK) s = mkdir_p(meta);
    for (int i = 0; s == VFM_OK && i < n; i++) {
        int rewritten;
        snprintf(path, sizeof path, "%s/%s", root, rel[i]);
        s = sync_tar_idx(path, &rows[i], &rewritten);
        report->idx_rewritten += rewritten;
    }
    if (s == VFM_OK) {
        char db[1300];
        snprintf(db, sizeof db, "%s/index.sqlite", meta);
        s = energon_sqlite_write(db, rows, n);
    }
    if (s == VFM_OK) s = write_uuid(root);
    if (s == VFM_OK) s = write_info(root, rel, counts, n);
    if (s == VFM_OK && (!had_split || (opt->has_split && opt->force))) {
        double ratio[3] = {1, 0, 0};
        if (opt->has_split) memcpy(ratio, opt->split, sizeof ratio);
        s = write_split(root, rel, n, ratio, report->split_shards);
        report->split_written = s == VFM_OK;
    } else {
        report->split_kept = had_split;
    }
    char ds[1300];
    snprintf(ds, sizeof ds, "%s/dataset.yaml", meta);
    if (s == VFM_OK && (!path_exists(ds) || opt->force)) {
        s = write_dataset_yaml(root);
        report->dataset_written = s == VFM_OK;
    } else {
        report->dataset_kept = 1;
    }
    report->n_shards = n;
    for (int i = 0; rows && i < n; i++) energon_shard_rows_free(&rows[i]);
    free(rows);
    free(rel);
    free(counts);
    return s;
}
