/* Checkpoint save/load with the temp-dir, fsync, rename, DONE protocol (see checkpoint.h). */
#include "checkpoint.h"

#include <dirent.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/fileutil.h"
#include "core/log.h"
#include "data/formats/safetensors.h"
#include "train/fault_hooks.h"

void checkpoint_state_free(CheckpointState *s) {
    free(s->loader_state);
    free(s->config_yaml);
    free(s->data_info);
    s->loader_state = s->config_yaml = s->data_info = NULL;
}

/* Test hook (the test build only: fault_hooks.h): VFM_TEST_KILL_DURING_SAVE=<step>:<files|rename> kills this process with SIGKILL in
 * the middle of saving that step (after the weights are written / after the rename, before DONE),
 * so tests can prove a cut-off checkpoint is never loaded. */
static void maybe_die(int64_t step, const char *phase) {
    const char *env = fault_hook_env("VFM_TEST_KILL_DURING_SAVE");
    if (!env) return;
    char want[64];
    snprintf(want, sizeof want, "%lld:%s", (long long)step, phase);
    if (strcmp(env, want) == 0) raise(SIGKILL);
}

vfm_status save_named_tensors(const char *path, const ParamTable *t, const char *prefix, const float *buf,
                              const char *const *meta) {
    SafetensorsEntry *e = calloc((size_t)t->count, sizeof *e);
    char (*names)[128] = calloc((size_t)t->count, sizeof *names);
    if (!e || !names) {
        free(e);
        free(names);
        return vfm_fail(VFM_ERR_NOMEM, "checkpoint: %d tensor entries", t->count);
    }
    for (int i = 0; i < t->count; i++) {
        const ParamEntry *p = &t->entries[i];
        snprintf(names[i], sizeof names[i], "%s%s", prefix, p->name);
        e[i].name = names[i];
        e[i].dtype = DT_F32;
        e[i].ndim = p->ndim;
        for (int d = 0; d < p->ndim; d++) e[i].shape[d] = p->shape[d];
        e[i].data = buf + p->offset;
    }
    vfm_status s = safetensors_write(path, e, t->count, meta);
    free(e);
    free(names);
    return s;
}

static vfm_status write_meta(const char *path, const CheckpointState *st, const ParamTable *t) {
    json_t *m = json_object();
    json_object_set_new(m, "format", json_string("vfm-checkpoint"));
    json_object_set_new(m, "version", json_integer(1));
    json_object_set_new(m, "step", json_integer(st->step));
    json_object_set_new(m, "optimizer_step", json_integer(st->optimizer_step));
    json_object_set_new(m, "consumed_samples", json_integer(st->consumed_samples));
    json_object_set_new(m, "rng", json_pack("{s:I,s:s}", "seed", (json_int_t)st->seed, "note",
                                            "every draw is keyed by (seed, step, sample uid): nothing else to restore"));
    json_object_set_new(m, "parallel", json_pack("{s:i,s:i,s:i,s:i,s:i}", "world_size", st->world_size, "dp", st->dp,
                                                 "tp", st->tp, "pp", st->pp, "cp", st->cp));
    json_object_set_new(m, "parameters", json_integer(t->total));
    json_error_t err;
    json_t *loader = st->loader_state ? json_loads(st->loader_state, 0, &err) : json_null();
    json_object_set_new(m, "loader", loader ? loader : json_null());
    json_t *data = st->data_info ? json_loads(st->data_info, 0, &err) : NULL;
    json_object_set_new(m, "data", data ? data : json_null());
    json_object_set_new(m, "config", json_string(st->config_yaml ? st->config_yaml : ""));
    char *text = json_dumps(m, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(m);
    if (!text) return vfm_fail(VFM_ERR_NOMEM, "checkpoint: cannot encode meta.json");
    vfm_status s = write_file_atomic(path, text, strlen(text));
    free(text);
    return s;
}

static int parse_iter_name(const char *name, long long *step) {
    char tail;
    return sscanf(name, "iter_%lld%c", step, &tail) == 1 && strlen(name) >= 12;
}

typedef struct {
    long long step;
    char name[64];
} IterDir;

/* Complete (DONE) checkpoint directories of run_dir, sorted by step ascending. */
static vfm_status list_complete(const char *run_dir, IterDir **out, int *n) {
    *out = NULL;
    *n = 0;
    DIR *d = opendir(run_dir);
    if (!d) return VFM_OK;
    int cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        long long step;
        if (!parse_iter_name(e->d_name, &step)) continue;
        char done[2048], dir[1536];
        path_join(dir, sizeof dir, run_dir, e->d_name);
        path_join(done, sizeof done, dir, "DONE");
        if (!path_exists(done)) continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            *out = realloc(*out, (size_t)cap * sizeof **out);
        }
        (*out)[*n].step = step;
        snprintf((*out)[*n].name, sizeof(*out)[*n].name, "%s", e->d_name);
        (*n)++;
    }
    closedir(d);
    for (int i = 1; i < *n; i++)
        for (int j = i; j > 0 && (*out)[j - 1].step > (*out)[j].step; j--) {
            IterDir t = (*out)[j];
            (*out)[j] = (*out)[j - 1];
            (*out)[j - 1] = t;
        }
    return VFM_OK;
}

static void prune(const char *run_dir, int keep) {
    IterDir *dirs;
    int n;
    if (list_complete(run_dir, &dirs, &n) != VFM_OK) return;
    for (int i = 0; i < n - keep; i++) {
        char path[1536];
        path_join(path, sizeof path, run_dir, dirs[i].name);
        if (remove_tree(path) != VFM_OK) log_warn("checkpoint: could not remove %s: %s", path, vfm_last_error());
    }
    free(dirs);
    /* leftovers of saves that were cut off */
    DIR *d = opendir(run_dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        long long step;
        size_t len = strlen(e->d_name);
        if (strncmp(e->d_name, "iter_", 5) == 0 && len > 4 && strcmp(e->d_name + len - 4, ".tmp") == 0 &&
            sscanf(e->d_name, "iter_%lld", &step) == 1) {
            char path[1536];
            path_join(path, sizeof path, run_dir, e->d_name);
            remove_tree(path);
        }
    }
    if (d) closedir(d);
}

void checkpoint_stage_dir(const char *run_dir, int64_t step, char *out, size_t n) {
    char name[64];
    snprintf(name, sizeof name, "iter_%07lld.tmp", (long long)step);
    path_join(out, n, run_dir, name);
}

vfm_status checkpoint_begin(const char *run_dir, int64_t step) {
    char stage[1536];
    checkpoint_stage_dir(run_dir, step, stage, sizeof stage);
    VFM_TRY(mkdir_p(run_dir));
    VFM_TRY(remove_tree(stage));
    return mkdir_p(stage);
}

vfm_status checkpoint_write_model(const char *stage, const CheckpointState *st, const CheckpointData *d) {
    char path[1700];
    const char *meta[] = {"format", "vfm", NULL};
    path_join(path, sizeof path, stage, "model.safetensors");
    VFM_TRY(save_named_tensors(path, d->table, "", d->params, meta));
    maybe_die(st->step, "files");
    if (d->ema) {
        path_join(path, sizeof path, stage, "ema.safetensors");
        VFM_TRY(save_named_tensors(path, d->table, "", d->ema, meta));
    }
    path_join(path, sizeof path, stage, "meta.json");
    return write_meta(path, st, d->table);
}

vfm_status checkpoint_write_meta(const char *stage, const CheckpointState *st, const ParamTable *full) {
    maybe_die(st->step, "files"); /* the weights are written by now */
    char path[1700];
    path_join(path, sizeof path, stage, "meta.json");
    return write_meta(path, st, full);
}

vfm_status checkpoint_commit(const char *run_dir, int64_t step, int keep) {
    char final[1536], stage[1536], path[1700], name[64];
    snprintf(name, sizeof name, "iter_%07lld", (long long)step);
    path_join(final, sizeof final, run_dir, name);
    checkpoint_stage_dir(run_dir, step, stage, sizeof stage);
    VFM_TRY(fsync_dir(stage));
    VFM_TRY(remove_tree(final));
    if (rename(stage, final) != 0) return vfm_fail(VFM_ERR_IO, "%s: cannot rename into place", final);
    VFM_TRY(fsync_dir(run_dir));
    maybe_die(step, "rename");
    path_join(path, sizeof path, final, "DONE");
    VFM_TRY(write_file_atomic(path, "", 0));
    VFM_TRY(fsync_dir(final));
    prune(run_dir, keep > 0 ? keep : 1);
    return VFM_OK;
}

vfm_status checkpoint_save(const char *run_dir, const CheckpointState *st, const CheckpointData *d, int keep) {
    char stage[1536];
    checkpoint_stage_dir(run_dir, st->step, stage, sizeof stage);
    VFM_TRY(checkpoint_begin(run_dir, st->step));
    VFM_TRY(checkpoint_write_model(stage, st, d));
    return checkpoint_commit(run_dir, st->step, keep);
}

vfm_status checkpoint_find_latest(const char *run_dir, char *out, size_t n, int *found) {
    IterDir *dirs;
    int count;
    VFM_TRY(list_complete(run_dir, &dirs, &count));
    *found = count > 0;
    if (count > 0) path_join(out, n, run_dir, dirs[count - 1].name);
    free(dirs);
    return VFM_OK;
}

vfm_status checkpoint_read_meta(const char *dir, CheckpointState *st) {
    memset(st, 0, sizeof *st);
    char path[1600];
    path_join(path, sizeof path, dir, "meta.json");
    json_error_t err;
    json_t *m = json_load_file(path, 0, &err);
    if (!m) return vfm_fail(VFM_ERR_FORMAT, "%s: line %d: %s", path, err.line, err.text);
    if (!json_is_object(m) || strcmp(json_string_value(json_object_get(m, "format")) ?: "", "vfm-checkpoint") != 0) {
        json_decref(m);
        return vfm_fail(VFM_ERR_FORMAT, "%s: not a vfm checkpoint", path);
    }
    st->step = json_integer_value(json_object_get(m, "step"));
    st->optimizer_step = json_integer_value(json_object_get(m, "optimizer_step"));
    st->consumed_samples = json_integer_value(json_object_get(m, "consumed_samples"));
    st->seed = (uint64_t)json_integer_value(json_object_get(json_object_get(m, "rng"), "seed"));
    json_t *par = json_object_get(m, "parallel");
    st->world_size = (int)json_integer_value(json_object_get(par, "world_size"));
    st->dp = (int)json_integer_value(json_object_get(par, "dp"));
    st->tp = (int)json_integer_value(json_object_get(par, "tp"));
    st->pp = (int)json_integer_value(json_object_get(par, "pp"));
    st->cp = (int)json_integer_value(json_object_get(par, "cp"));
    json_t *loader = json_object_get(m, "loader");
    if (loader && !json_is_null(loader)) st->loader_state = json_dumps(loader, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_t *data = json_object_get(m, "data");
    if (data && json_is_object(data)) st->data_info = json_dumps(data, JSON_COMPACT | JSON_PRESERVE_ORDER);
    const char *cfg = json_string_value(json_object_get(m, "config"));
    st->config_yaml = strdup(cfg ? cfg : "");
    json_decref(m);
    return VFM_OK;
}

vfm_status load_named_tensors(const char *path, const ParamTable *t, const char *prefix, float *buf) {
    SafetensorsFile *f;
    VFM_TRY(safetensors_open(&f, path));
    vfm_status s = VFM_OK;
    for (int i = 0; i < t->count && s == VFM_OK; i++) {
        const ParamEntry *p = &t->entries[i];
        char name[160];
        snprintf(name, sizeof name, "%s%s", prefix, p->name);
        int k = safetensors_find(f, name);
        if (k < 0) {
            s = vfm_fail(VFM_ERR_FORMAT, "%s: tensor '%s' is missing (the config differs from the checkpoint's: another "
                         "model.variant or model.* key? its config is in meta.json)", path, name);
            break;
        }
        DType dt;
        int nd;
        int64_t shape[VFM_MAX_DIMS];
        safetensors_info(f, k, &dt, &nd, shape);
        int same = nd == p->ndim;
        for (int d = 0; same && d < nd; d++) same = shape[d] == p->shape[d];
        if (!same) {
            char have[160], want[160];
            tensor_shape_text(shape, nd, have, sizeof have);
            tensor_shape_text(p->shape, p->ndim, want, sizeof want);
            s = vfm_fail(VFM_ERR_SHAPE, "%s: tensor '%s' is %s in the checkpoint, %s in this model: the config differs "
                         "from the checkpoint's (its model.* keys are in meta.json)", path, name, have, want);
            break;
        }
        s = safetensors_read_f32(f, k, buf + p->offset, p->numel);
    }
    safetensors_close(f);
    return s;
}

vfm_status checkpoint_load_tensors(const char *dir, const CheckpointData *d) {
    char path[1600];
    path_join(path, sizeof path, dir, "model.safetensors");
    VFM_TRY(load_named_tensors(path, d->table, "", (float *)d->params));
    if (d->ema) {
        path_join(path, sizeof path, dir, "ema.safetensors");
        if (path_exists(path)) VFM_TRY(load_named_tensors(path, d->table, "", (float *)d->ema));
        else memcpy((float *)d->ema, d->params, (size_t)d->table->total * sizeof(float));
    }
    return VFM_OK;
}
