/* index.sqlite (see energon_sqlite.h): the rows of a shard from its tar headers, the file written
 * with Energon's exact schema statements (so even sqlite_master matches a file `energon prepare`
 * wrote), and a shard's parts read back for the length index. */
#include "data/energon/energon_sqlite.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/fileutil.h"

/* ---- rows from a scan ---- */

typedef struct {
    EnergonShardRows *r;
    int64_t cap_samples, cap_parts;
} RowBuild;

static vfm_status on_member(void *ctx, const TarScanMember *m) {
    RowBuild *b = ctx;
    EnergonShardRows *r = b->r;
    if (m->sample_index == r->n_samples) { /* a new sample starts at this member's first header */
        if (r->n_samples == b->cap_samples) {
            int64_t cap = b->cap_samples ? 2 * b->cap_samples : 64;
            char **k = realloc(r->keys, (size_t)cap * sizeof *k);
            if (k) r->keys = k;
            int64_t *o = realloc(r->byte_offset, (size_t)cap * sizeof *o);
            if (o) r->byte_offset = o;
            int64_t *z = realloc(r->byte_size, (size_t)cap * sizeof *z);
            if (z) r->byte_size = z;
            if (!k || !o || !z) return vfm_fail(VFM_ERR_NOMEM, "index: out of memory");
            b->cap_samples = cap;
        }
        r->keys[r->n_samples] = strdup(m->key);
        r->byte_offset[r->n_samples] = m->header_offset;
        if (!r->keys[r->n_samples]) return vfm_fail(VFM_ERR_NOMEM, "index: out of memory");
        if (r->n_samples > 0) r->byte_size[r->n_samples - 1] = m->header_offset - r->byte_offset[r->n_samples - 1];
        r->n_samples++;
    }
    if (r->n_parts == b->cap_parts) {
        int64_t cap = b->cap_parts ? 2 * b->cap_parts : 128;
        int64_t *ps = realloc(r->part_sample, (size_t)cap * sizeof *ps);
        if (ps) r->part_sample = ps;
        char **pn = realloc(r->part_name, (size_t)cap * sizeof *pn);
        if (pn) r->part_name = pn;
        int64_t *po = realloc(r->part_offset, (size_t)cap * sizeof *po);
        if (po) r->part_offset = po;
        int64_t *pz = realloc(r->part_size, (size_t)cap * sizeof *pz);
        if (pz) r->part_size = pz;
        if (!ps || !pn || !po || !pz) return vfm_fail(VFM_ERR_NOMEM, "index: out of memory");
        b->cap_parts = cap;
    }
    int64_t k = r->n_parts;
    r->part_sample[k] = m->sample_index;
    r->part_name[k] = strdup(m->part);
    r->part_offset[k] = m->data_offset;
    r->part_size[k] = m->size;
    if (!r->part_name[k]) return vfm_fail(VFM_ERR_NOMEM, "index: out of memory");
    r->n_parts++;
    return VFM_OK;
}

vfm_status energon_shard_rows_scan(EnergonShardRows *rows, const char *path, const char *rel) {
    memset(rows, 0, sizeof *rows);
    rows->rel = rel;
    RowBuild b = {rows, 0, 0};
    int64_t n = 0;
    vfm_status s = tar_scan(path, on_member, &b, &n, &rows->end_offset);
    if (s == VFM_OK && rows->n_samples > 0)
        rows->byte_size[rows->n_samples - 1] = rows->end_offset - rows->byte_offset[rows->n_samples - 1];
    if (s != VFM_OK) energon_shard_rows_free(rows);
    rows->rel = rel;
    return s;
}

void energon_shard_rows_free(EnergonShardRows *r) {
    for (int64_t i = 0; i < r->n_samples; i++) free(r->keys[i]);
    for (int64_t i = 0; i < r->n_parts; i++) free(r->part_name[i]);
    free(r->keys);
    free(r->byte_offset);
    free(r->byte_size);
    free(r->part_sample);
    free(r->part_name);
    free(r->part_offset);
    free(r->part_size);
    memset(r, 0, sizeof *r);
}

/* ---- writing ---- */

/* Energon 7.4's statements, text and all (sqlite_master keeps it). */
static const char *const k_create_samples =
    "CREATE TABLE IF NOT EXISTS samples (\n"
    "                    tar_file_id INTEGER NOT NULL,\n"
    "                    sample_key TEXT NOT NULL UNIQUE,\n"
    "                    sample_index INTEGER NOT NULL,\n"
    "                    byte_offset INTEGER,\n"
    "                    byte_size INTEGER\n"
    "                )";
static const char *const k_create_parts =
    "CREATE TABLE IF NOT EXISTS sample_parts (\n"
    "                    tar_file_id INTEGER,\n"
    "                    sample_index INTEGER,\n"
    "                    part_name TEXT,\n"
    "                    content_byte_offset INTEGER,\n"
    "                    content_byte_size INTEGER\n"
    "                )";
static const char *const k_create_indexes[3] = {
    "CREATE INDEX IF NOT EXISTS idx_samples_by_tar_and_idx ON samples(tar_file_id, sample_index)",
    "CREATE INDEX IF NOT EXISTS idx_sample_parts_seq ON sample_parts(tar_file_id, sample_index, content_byte_offset)",
    ("CREATE INDEX IF NOT EXISTS idx_sample_parts_full ON sample_parts(tar_file_id, sample_index, part_name, "
     "content_byte_offset, content_byte_size)")};

typedef struct {
    const char *key;
    int shard;
} KeyRef;

static int by_key(const void *a, const void *b) {
    const KeyRef *x = a, *y = b;
    int c = strcmp(x->key, y->key);
    return c ? c : (x->shard > y->shard) - (x->shard < y->shard);
}

vfm_status energon_check_unique_keys(const EnergonShardRows *shards, int n) {
    int64_t total = 0;
    for (int i = 0; i < n; i++) total += shards[i].n_samples;
    KeyRef *refs = malloc((size_t)(total ? total : 1) * sizeof *refs);
    if (!refs) return vfm_fail(VFM_ERR_NOMEM, "index: out of memory");
    int64_t k = 0;
    for (int i = 0; i < n; i++)
        for (int64_t j = 0; j < shards[i].n_samples; j++) refs[k++] = (KeyRef){shards[i].keys[j], i};
    qsort(refs, (size_t)total, sizeof *refs, by_key);
    vfm_status s = VFM_OK;
    for (int64_t i = 1; i < total; i++)
        if (!strcmp(refs[i - 1].key, refs[i].key)) {
            s = vfm_fail(VFM_ERR_FORMAT, "sample key '%s' appears twice (in %s and %s); Energon needs every key to be "
                         "unique in a dataset (energon prepare --fix-duplicates renames members to <shard>/<name>)",
                         refs[i].key, shards[refs[i - 1].shard].rel, shards[refs[i].shard].rel);
            break;
        }
    free(refs);
    return s;
}

static vfm_status sql_fail(sqlite3 *db, const char *path, const char *what) {
    return vfm_fail(VFM_ERR_IO, "%s: %s: %s", path, what, db ? sqlite3_errmsg(db) : "cannot open");
}

static vfm_status exec(sqlite3 *db, const char *path, const char *sql) {
    return sqlite3_exec(db, sql, NULL, NULL, NULL) == SQLITE_OK ? VFM_OK : sql_fail(db, path, "sqlite");
}

static vfm_status insert_rows(sqlite3 *db, const char *path, const EnergonShardRows *shards, int n) {
    sqlite3_stmt *samples = NULL, *parts = NULL;
    vfm_status s = VFM_OK;
    if (sqlite3_prepare_v2(db,
                           "INSERT INTO samples (tar_file_id, sample_key, sample_index, byte_offset, byte_size) "
                           "VALUES (?, ?, ?, ?, ?)", -1, &samples, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db,
                           "INSERT INTO sample_parts (tar_file_id, sample_index, part_name, content_byte_offset, "
                           "content_byte_size) VALUES (?, ?, ?, ?, ?)", -1, &parts, NULL) != SQLITE_OK)
        s = sql_fail(db, path, "prepare");
    for (int i = 0; s == VFM_OK && i < n; i++) {
        const EnergonShardRows *r = &shards[i];
        for (int64_t j = 0; s == VFM_OK && j < r->n_samples; j++) {
            sqlite3_bind_int64(samples, 1, i);
            sqlite3_bind_text(samples, 2, r->keys[j], -1, SQLITE_STATIC);
            sqlite3_bind_int64(samples, 3, j);
            sqlite3_bind_int64(samples, 4, r->byte_offset[j]);
            sqlite3_bind_int64(samples, 5, r->byte_size[j]);
            if (sqlite3_step(samples) != SQLITE_DONE) s = sql_fail(db, path, "insert into samples");
            sqlite3_reset(samples);
        }
        for (int64_t j = 0; s == VFM_OK && j < r->n_parts; j++) {
            sqlite3_bind_int64(parts, 1, i);
            sqlite3_bind_int64(parts, 2, r->part_sample[j]);
            sqlite3_bind_text(parts, 3, r->part_name[j], -1, SQLITE_STATIC);
            sqlite3_bind_int64(parts, 4, r->part_offset[j]);
            sqlite3_bind_int64(parts, 5, r->part_size[j]);
            if (sqlite3_step(parts) != SQLITE_DONE) s = sql_fail(db, path, "insert into sample_parts");
            sqlite3_reset(parts);
        }
    }
    sqlite3_finalize(samples);
    sqlite3_finalize(parts);
    return s;
}

vfm_status energon_sqlite_write(const char *path, const EnergonShardRows *shards, int n) {
    VFM_TRY(energon_check_unique_keys(shards, n));
    char tmp[1200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    unlink(tmp);
    sqlite3 *db = NULL;
    vfm_status s = VFM_OK;
    if (sqlite3_open_v2(tmp, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) != SQLITE_OK)
        s = sql_fail(db, tmp, "cannot create");
    if (s == VFM_OK) s = exec(db, tmp, k_create_samples);
    if (s == VFM_OK) s = exec(db, tmp, k_create_parts);
    if (s == VFM_OK) s = exec(db, tmp, "BEGIN");
    if (s == VFM_OK) s = insert_rows(db, tmp, shards, n);
    for (int i = 0; s == VFM_OK && i < 3; i++) s = exec(db, tmp, k_create_indexes[i]);
    if (s == VFM_OK) s = exec(db, tmp, "COMMIT");
    if (db && sqlite3_close(db) != SQLITE_OK && s == VFM_OK) s = vfm_fail(VFM_ERR_IO, "%s: cannot close", tmp);
    if (s == VFM_OK) s = fsync_path(tmp);
    if (s == VFM_OK && rename(tmp, path) != 0) s = vfm_fail(VFM_ERR_IO, "%s: cannot rename to %s", tmp, path);
    if (s == VFM_OK) {
        char dir[1200];
        path_dirname(dir, sizeof dir, path);
        s = fsync_dir(dir);
    }
    if (s != VFM_OK) unlink(tmp);
    return s;
}

/* ---- reading a shard's parts ---- */

vfm_status energon_sqlite_scan(const char *path, int tar_file_id, const uint64_t *idx, int64_t n_idx, TarScanFn fn,
                               void *ctx) {
    char uri[1400];
    snprintf(uri, sizeof uri, "file:%s?mode=ro&immutable=1", path);
    sqlite3 *db = NULL;
    if (sqlite3_open_v2(uri, &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK) {
        vfm_status s = sql_fail(db, path, "cannot open");
        sqlite3_close(db);
        return s;
    }
    sqlite3_stmt *q = NULL;
    vfm_status s = VFM_OK;
    int64_t n_samples = n_idx - 1, seen = 0;
    if (sqlite3_prepare_v2(db,
                           "SELECT s.sample_index, s.sample_key, s.byte_offset, p.part_name, p.content_byte_offset, "
                           "p.content_byte_size FROM samples s LEFT JOIN sample_parts p ON p.tar_file_id = "
                           "s.tar_file_id AND p.sample_index = s.sample_index WHERE s.tar_file_id = ? ORDER BY "
                           "s.sample_index, p.content_byte_offset", -1, &q, NULL) != SQLITE_OK)
        s = sql_fail(db, path, "query");
    if (s == VFM_OK) sqlite3_bind_int(q, 1, tar_file_id);
    int64_t last = -1;
    while (s == VFM_OK) {
        int rc = sqlite3_step(q);
        if (rc == SQLITE_DONE) break;
        if (rc != SQLITE_ROW) {
            s = sql_fail(db, path, "query");
            break;
        }
        int64_t i = sqlite3_column_int64(q, 0);
        const char *key = (const char *)sqlite3_column_text(q, 1);
        int64_t at = sqlite3_column_int64(q, 2);
        const char *part = (const char *)sqlite3_column_text(q, 3);
        int64_t off = sqlite3_column_int64(q, 4), size = sqlite3_column_int64(q, 5);
        if (i != last) {
            if (i != last + 1 || i >= n_samples || (uint64_t)at != idx[i]) {
                s = vfm_fail(VFM_ERR_FORMAT, "%s: stale for shard %d: sample %lld does not match the .tar.idx", path,
                             tar_file_id, (long long)i);
                break;
            }
            last = i;
            seen++;
        }
        if (!key || !part) {
            s = vfm_fail(VFM_ERR_FORMAT, "%s: stale for shard %d: sample %lld has no parts", path, tar_file_id,
                         (long long)i);
            break;
        }
        int64_t lo = i == 0 ? 0 : (int64_t)idx[i], hi = (int64_t)idx[i + 1];
        if (off < lo || size < 0 || off + size > hi) {
            s = vfm_fail(VFM_ERR_FORMAT, "%s: stale for shard %d: a part of sample %lld lies outside its bytes", path,
                         tar_file_id, (long long)i);
            break;
        }
        TarScanMember m = {i, key, part, -1, off, size, size};
        s = fn(ctx, &m);
    }
    if (s == VFM_OK && seen != n_samples)
        s = vfm_fail(VFM_ERR_FORMAT, "%s: stale for shard %d: %lld samples, the .tar.idx has %lld", path, tar_file_id,
                     (long long)seen, (long long)n_samples);
    sqlite3_finalize(q);
    sqlite3_close(db);
    return s;
}
