/* The shard sink, output directories and vfm_dataset.json of `vfm prepare` (see prepare_output.h). */
#include "data/prepare/prepare_output.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/fileutil.h"

/* ---- shards ---- */

void shard_sink_init(ShardSink *s, const char *dir, int samples_per_shard) {
    memset(s, 0, sizeof *s);
    snprintf(s->dir, sizeof s->dir, "%s", dir);
    s->samples_per_shard = samples_per_shard > 0 ? samples_per_shard : 1;
}

static vfm_status close_shard(ShardSink *s) {
    vfm_status st = tar_writer_close(s->writer);
    s->writer = NULL; /* closed, or freed on error */
    VFM_TRY(st);
    struct stat sb;
    if (stat(s->shard_path, &sb) != 0) return vfm_fail(VFM_ERR_IO, "%s: cannot stat: %s", s->shard_path, strerror(errno));
    s->shards_done++;
    s->bytes_written += (int64_t)sb.st_size;
    return VFM_OK;
}

vfm_status shard_sink_add(ShardSink *s, const SinkPart *parts, int n_parts) {
    const int64_t n = s->samples, K = s->samples_per_shard;
    if (n >= PREPARE_MAX_SAMPLES - 1) return vfm_fail(VFM_ERR_USAGE, "prepare: more than %lld samples", PREPARE_MAX_SAMPLES - 1);
    if (n % K == 0) {
        if (n / K >= PREPARE_MAX_SHARDS)
            return vfm_fail(VFM_ERR_USAGE, "prepare: more than %d shards (raise --samples-per-shard)", PREPARE_MAX_SHARDS);
        char name[64];
        snprintf(name, sizeof name, PREPARE_SHARD_PATTERN, (int)(n / K));
        path_join(s->shard_path, sizeof s->shard_path, s->dir, name);
        VFM_TRY(tar_writer_open(&s->writer, s->shard_path));
    }
    for (int i = 0; i < n_parts; i++) {
        char member[128];
        snprintf(member, sizeof member, "%08" PRId64 ".%s", n, parts[i].name);
        VFM_TRY(tar_writer_add(s->writer, member, parts[i].data, parts[i].size));
    }
    s->samples++;
    if (s->samples % K == 0) VFM_TRY(close_shard(s));
    return VFM_OK;
}

vfm_status shard_sink_finish(ShardSink *s) { return s->writer ? close_shard(s) : VFM_OK; }

void shard_sink_discard(ShardSink *s) {
    if (s->writer) tar_writer_discard(s->writer);
    s->writer = NULL;
}

/* ---- output directories ---- */

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* shard-*.tar, shard-*.tar.idx, or a temporary file of either. */
static int is_own_shard_file(const char *name) {
    if (strncmp(name, "shard-", 6) != 0) return 0;
    return ends_with(name, ".tar") || ends_with(name, ".tar.idx") || strstr(name, ".tar.tmp.") || strstr(name, ".tar.idx.tmp.");
}

int prepare_is_own_file(const char *name) {
    return is_own_shard_file(name) || strcmp(name, PREPARE_DATASET_FILE) == 0 || strcmp(name, ".vfm") == 0 ||
           strcmp(name, ".nv-meta") == 0;
}

vfm_status prepare_clear_dir(const char *dir, int force) {
    DIR *d = opendir(dir);
    if (!d) return vfm_fail(VFM_ERR_IO, "%s: cannot open directory: %s", dir, strerror(errno));
    char first_shard[256] = "", foreign[256] = "";
    int64_t n_shards = 0;
    int has_meta = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        const char *name = e->d_name;
        if (strcmp(name, PREPARE_DATASET_FILE) == 0) has_meta = 1;
        if (!ends_with(name, ".tar")) continue;
        n_shards++;
        /* the smallest names, so the message does not depend on readdir's order */
        if (is_own_shard_file(name)) {
            if (!first_shard[0] || strcmp(name, first_shard) < 0) snprintf(first_shard, sizeof first_shard, "%s", name);
        } else if (!foreign[0] || strcmp(name, foreign) < 0) {
            snprintf(foreign, sizeof foreign, "%s", name);
        }
    }
    closedir(d);
    if (foreign[0] && force)
        return vfm_fail(VFM_ERR_IO, "%s: holds %s, which vfm prepare did not write; choose another directory", dir, foreign);
    if (n_shards && !force)
        return vfm_fail(VFM_ERR_IO, "%s: already holds %" PRId64 " shard%s (%s%s); pass --force to replace them", dir, n_shards,
                        n_shards > 1 ? "s" : "", first_shard[0] ? first_shard : foreign, n_shards > 1 ? ", ..." : "");
    if (has_meta && !force)
        return vfm_fail(VFM_ERR_IO, "%s: already holds %s; pass --force to replace it", dir, PREPARE_DATASET_FILE);
    if (!force) return VFM_OK;

    d = opendir(dir);
    if (!d) return vfm_fail(VFM_ERR_IO, "%s: cannot open directory: %s", dir, strerror(errno));
    vfm_status s = VFM_OK;
    while (s == VFM_OK && (e = readdir(d))) {
        if (!is_own_shard_file(e->d_name) && strcmp(e->d_name, PREPARE_DATASET_FILE) != 0) continue;
        char path[4096];
        path_join(path, sizeof path, dir, e->d_name);
        if (unlink(path) != 0 && errno != ENOENT) s = vfm_fail(VFM_ERR_IO, "%s: cannot remove: %s", path, strerror(errno));
    }
    closedir(d);
    /* Energon's metadata describes the old shards */
    char nv_meta[4096];
    path_join(nv_meta, sizeof nv_meta, dir, ".nv-meta");
    if (s == VFM_OK) s = remove_tree(nv_meta);
    return s;
}

/* What DIR holds: *own = entries prepare writes, *foreign = the smallest other name ("" when none). */
static vfm_status survey_dir(const char *dir, int64_t *own, char *foreign, size_t n) {
    *own = 0;
    foreign[0] = 0;
    DIR *d = opendir(dir);
    if (!d) return vfm_fail(VFM_ERR_IO, "%s: cannot open directory: %s", dir, strerror(errno));
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        if (prepare_is_own_file(e->d_name)) (*own)++;
        else if (!foreign[0] || strcmp(e->d_name, foreign) < 0) snprintf(foreign, n, "%s", e->d_name);
    }
    closedir(d);
    return VFM_OK;
}

static vfm_status check_final(const char *out, int force) {
    struct stat st;
    if (stat(out, &st) != 0) {
        if (errno == ENOENT) return VFM_OK;
        return vfm_fail(VFM_ERR_IO, "%s: cannot stat: %s", out, strerror(errno));
    }
    if (!S_ISDIR(st.st_mode)) return vfm_fail(VFM_ERR_IO, "%s: exists and is not a directory", out);
    int64_t own;
    char foreign[256];
    VFM_TRY(survey_dir(out, &own, foreign, sizeof foreign));
    if (foreign[0])
        return vfm_fail(VFM_ERR_IO, "%s: holds %s, which vfm prepare did not write; choose a new or empty directory", out, foreign);
    if (own && !force) return vfm_fail(VFM_ERR_IO, "%s: already holds a dataset; pass --force to replace it", out);
    return VFM_OK;
}

vfm_status staged_dir_begin(StagedDir *d, const char *out_dir, int force) {
    memset(d, 0, sizeof *d);
    size_t len = strlen(out_dir);
    while (len > 1 && out_dir[len - 1] == '/') len--;
    if (len == 0 || len >= sizeof d->final - 64) return vfm_fail(VFM_ERR_USAGE, "--out '%s': want a directory path below 960 bytes", out_dir);
    snprintf(d->final, sizeof d->final, "%.*s", (int)len, out_dir);
    const char *base = strrchr(d->final, '/');
    base = base ? base + 1 : d->final;
    if (strcmp(base, ".") == 0 || strcmp(base, "..") == 0 || strcmp(d->final, "/") == 0)
        return vfm_fail(VFM_ERR_USAGE, "--out '%s': name a directory (not . or ..)", out_dir);
    VFM_TRY(check_final(d->final, force));
    char parent[1024];
    path_dirname(parent, sizeof parent, d->final);
    VFM_TRY(mkdir_p(parent));
    snprintf(d->tmp, sizeof d->tmp, "%s/.%s.vfm-prepare-%ld", parent, base, (long)getpid());
    VFM_TRY(remove_tree(d->tmp)); /* left by a killed run with our pid */
    if (mkdir(d->tmp, 0755) != 0) {
        vfm_status s = vfm_fail(VFM_ERR_IO, "%s: cannot create: %s", d->tmp, strerror(errno));
        d->tmp[0] = 0;
        return s;
    }
    return VFM_OK;
}

vfm_status staged_dir_commit(StagedDir *d, int force) {
    VFM_TRY(check_final(d->final, force)); /* again: something may have appeared meanwhile */
    char old[1200] = "";
    if (dir_exists(d->final) && rmdir(d->final) != 0) { /* not empty: an older dataset (force) */
        snprintf(old, sizeof old, "%s.old", d->tmp);
        if (rename(d->final, old) != 0) return vfm_fail(VFM_ERR_IO, "%s: cannot move aside: %s", d->final, strerror(errno));
    }
    VFM_TRY(fsync_dir(d->tmp));
    if (rename(d->tmp, d->final) != 0) {
        vfm_status s = vfm_fail(VFM_ERR_IO, "%s: cannot rename to %s: %s", d->tmp, d->final, strerror(errno));
        if (old[0]) rename(old, d->final);
        return s;
    }
    d->tmp[0] = 0;
    char parent[1024];
    path_dirname(parent, sizeof parent, d->final);
    vfm_status s = fsync_dir(parent);
    if (old[0] && s == VFM_OK) s = remove_tree(old);
    return s;
}

void staged_dir_abort(StagedDir *d) {
    if (d->tmp[0]) remove_tree(d->tmp);
    d->tmp[0] = 0;
}

/* ---- vfm_dataset.json ---- */

vfm_status prepare_write_dataset_json(const char *dir, void *root_ptr) {
    json_t *root = root_ptr;
    char *text = root ? json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
    json_decref(root);
    if (!text) return vfm_fail(VFM_ERR_INTERNAL, "%s: cannot format", PREPARE_DATASET_FILE);
    size_t len = strlen(text);
    char *with_newline = realloc(text, len + 2);
    if (!with_newline) {
        free(text);
        return vfm_fail(VFM_ERR_NOMEM, "%s: out of memory", PREPARE_DATASET_FILE);
    }
    with_newline[len] = '\n';
    with_newline[len + 1] = 0;
    char path[1200];
    path_join(path, sizeof path, dir, PREPARE_DATASET_FILE);
    vfm_status s = write_file_atomic(path, with_newline, len + 1);
    free(with_newline);
    return s;
}

void prepare_add_train_keys(void *root_ptr, const PrepareLatents *l) {
    int patch = 2;
    int64_t most = 0;
    for (int i = 0; i < l->n; i++)
        if (l->hw[i][0] % 2 || l->hw[i][1] % 2) patch = 1;
    for (int i = 0; i < l->n; i++) {
        int64_t tokens = (int64_t)l->max_t * (l->hw[i][0] / patch) * (l->hw[i][1] / patch);
        if (tokens > most) most = tokens;
    }
    int64_t budget = (most + 63) / 64 * 64; /* the default dataset.pad_multiple */
    if (budget < 1024) budget = 1024;       /* room to pack several small samples */
    json_t *keys = json_pack("{s:i,s:i,s:i,s:i,s:i,s:I}", "model.in_channels", l->channels, "model.out_channels",
                             l->channels, "model.crossattn_emb_size", l->d_text, "model.patch_spatial", patch,
                             "model.patch_temporal", 1, "dataset.task_encoder_seq_length", (json_int_t)budget);
    if (keys) json_object_set_new(root_ptr, "train", keys);
}

int prepare_read_train_keys(const char *dir, char (*out)[160], int max) {
    char path[1200];
    path_join(path, sizeof path, dir, PREPARE_DATASET_FILE);
    if (!path_exists(path)) return 0;
    json_error_t err;
    json_t *root = json_load_file(path, 0, &err), *keys = json_object_get(root, "train"), *v;
    const char *k;
    int n = 0;
    json_object_foreach(keys, k, v) {
        if (n < max && json_is_integer(v)) snprintf(out[n++], 160, "%s=%lld", k, (long long)json_integer_value(v));
    }
    json_decref(root);
    return n;
}
