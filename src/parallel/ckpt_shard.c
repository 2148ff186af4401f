/* Layout-independent checkpoint files: full named tensors written and read as per-rank slices at
 * their offsets (see ckpt_shard.h). The safetensors header is built and parsed here (jansson)
 * because data/formats/safetensors.c writes whole tensors from memory only. */
#include "ckpt_shard.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/fileutil.h"

/* ---- header ---------------------------------------------------------------------------------- */

typedef struct {
    char *text;          /* JSON, padded with spaces to a multiple of 8 */
    size_t len;          /* bytes of text (padded) */
    uint64_t *offset;    /* [n_sets·count]: byte offset of each tensor in the data section */
    uint64_t data_bytes;
} Header;

static void header_free(Header *h) {
    free(h->text);
    free(h->offset);
    memset(h, 0, sizeof *h);
}

static vfm_status build_header(Header *h, const TpShardMap *m, const ShardedSet *sets, int n_sets,
                               const char *const *meta) {
    memset(h, 0, sizeof *h);
    const ParamTable *t = m->file ? m->file : m->full;
    h->offset = malloc((size_t)(n_sets * t->count + 1) * sizeof *h->offset);
    json_t *hdr = json_object();
    if (!h->offset || !hdr) {
        json_decref(hdr);
        header_free(h);
        return vfm_fail(VFM_ERR_NOMEM, "checkpoint header");
    }
    if (meta) {
        json_t *mo = json_object();
        for (int i = 0; meta[i] && meta[i + 1]; i += 2) json_object_set_new(mo, meta[i], json_string(meta[i + 1]));
        json_object_set_new(hdr, "__metadata__", mo);
    }
    uint64_t at = 0;
    for (int k = 0; k < n_sets; k++)
        for (int i = 0; i < t->count; i++) {
            const ParamEntry *e = &t->entries[i];
            char name[256];
            snprintf(name, sizeof name, "%s%s", sets[k].prefix, e->name);
            json_t *shape = json_array();
            for (int d = 0; d < e->ndim; d++) json_array_append_new(shape, json_integer(e->shape[d]));
            uint64_t bytes = (uint64_t)e->numel * sizeof(float);
            json_object_set_new(hdr, name, json_pack("{s:s,s:o,s:[I,I]}", "dtype", "F32", "shape", shape, "data_offsets",
                                                     (json_int_t)at, (json_int_t)(at + bytes)));
            h->offset[k * t->count + i] = at;
            at += bytes;
        }
    h->data_bytes = at;
    char *text = json_dumps(hdr, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(hdr);
    if (!text) {
        header_free(h);
        return vfm_fail(VFM_ERR_NOMEM, "checkpoint header: cannot encode");
    }
    size_t len = strlen(text), padded = (len + 7) & ~(size_t)7;
    h->text = realloc(text, padded + 1);
    if (!h->text) {
        free(text);
        header_free(h);
        return vfm_fail(VFM_ERR_NOMEM, "checkpoint header");
    }
    memset(h->text + len, ' ', padded - len);
    h->len = padded;
    return VFM_OK;
}

typedef struct {
    int fd;
    const char *path;
    uint64_t data_start, size;
    json_t *hdr;
} StFile;

static void st_close(StFile *f) {
    if (f->fd >= 0) close(f->fd);
    json_decref(f->hdr);
    f->fd = -1;
    f->hdr = NULL;
}

static vfm_status st_open(StFile *f, const char *path) {
    f->fd = open(path, O_RDONLY);
    f->path = path;
    f->hdr = NULL;
    if (f->fd < 0) return vfm_fail(VFM_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    off_t size = lseek(f->fd, 0, SEEK_END);
    unsigned char le[8];
    uint64_t hlen = 0;
    if (size < 8 || pread_full(f->fd, le, 8, 0) != VFM_OK) {
        st_close(f);
        return vfm_fail(VFM_ERR_FORMAT, "%s: too short for a safetensors file", path);
    }
    for (int i = 0; i < 8; i++) hlen |= (uint64_t)le[i] << (8 * i);
    if (hlen > (uint64_t)size - 8 || hlen > (100u << 20)) {
        st_close(f);
        return vfm_fail(VFM_ERR_FORMAT, "%s: bad safetensors header length", path);
    }
    char *text = malloc(hlen + 1);
    vfm_status s = text ? pread_full(f->fd, text, hlen, 8) : vfm_fail(VFM_ERR_NOMEM, "%s: header", path);
    if (s == VFM_OK) {
        json_error_t err;
        f->hdr = json_loadb(text, hlen, 0, &err);
        if (!json_is_object(f->hdr)) s = vfm_fail(VFM_ERR_FORMAT, "%s: safetensors header is not a JSON object (%s)", path, err.text);
    }
    free(text);
    f->data_start = 8 + hlen;
    f->size = (uint64_t)size;
    if (s != VFM_OK) st_close(f);
    return s;
}

/* Byte position of tensor `name` (F32, the full entry's shape) in the file. */
static vfm_status st_tensor(const StFile *f, const char *name, const ParamEntry *e, uint64_t *pos) {
    json_t *t = json_object_get(f->hdr, name), *offs = json_object_get(t, "data_offsets"), *shape = json_object_get(t, "shape");
    if (!t) return vfm_fail(VFM_ERR_FORMAT, "%s: tensor '%s' is missing (the config differs from the checkpoint's: "
                            "another model.variant or model.* key? its config is in meta.json)", f->path, name);
    const char *dt = json_string_value(json_object_get(t, "dtype"));
    if (!dt || strcmp(dt, "F32") != 0)
        return vfm_fail(VFM_ERR_FORMAT, "%s: tensor '%s' is %s; sliced loading reads F32 only", f->path, name, dt ? dt : "?");
    int same = json_is_array(shape) && (int)json_array_size(shape) == e->ndim;
    for (int d = 0; same && d < e->ndim; d++) same = json_integer_value(json_array_get(shape, (size_t)d)) == e->shape[d];
    if (!same) {
        char *have = json_is_array(shape) ? json_dumps(shape, JSON_COMPACT) : NULL;
        char want[160];
        tensor_shape_text(e->shape, e->ndim, want, sizeof want);
        vfm_status s = vfm_fail(VFM_ERR_SHAPE, "%s: tensor '%s' is %s in the checkpoint, %s in this model: the config "
                                "differs from the checkpoint's (its model.* keys are in meta.json)", f->path, name,
                                have ? have : "?", want);
        free(have);
        return s;
    }
    uint64_t b = (uint64_t)json_integer_value(json_array_get(offs, 0)), en = (uint64_t)json_integer_value(json_array_get(offs, 1));
    if (!json_is_array(offs) || en < b || en - b != (uint64_t)e->numel * sizeof(float) || f->data_start + en > f->size)
        return vfm_fail(VFM_ERR_FORMAT, "%s: tensor '%s': data offsets do not fit the file", f->path, name);
    *pos = f->data_start + b;
    return VFM_OK;
}

/* ---- slices ---------------------------------------------------------------------------------- */

typedef struct {
    int fd, writing;
    const char *path;
    uint64_t base;  /* file position of the full tensor */
    float *buf;     /* local element `entry_at` of this entry */
} RunCtx;

static vfm_status io_run(void *p, int64_t local_at, int64_t full_at, int64_t len) {
    RunCtx *c = p;
    char *mem = (char *)(c->buf + local_at);
    size_t left = (size_t)len * sizeof(float);
    off_t at = (off_t)(c->base + (uint64_t)full_at * sizeof(float));
    if (!c->writing) return pread_full(c->fd, mem, left, at) == VFM_OK ? VFM_OK
                                                                       : vfm_fail(VFM_ERR_IO, "%s: cannot read a slice", c->path);
    while (left > 0) {
        ssize_t w = pwrite(c->fd, mem, left, at);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return vfm_fail(VFM_ERR_IO, "%s: cannot write a slice: %s", c->path, strerror(errno));
        mem += w, left -= (size_t)w, at += w;
    }
    return VFM_OK;
}

/* pread/pwrite every run of local elements [lo, hi) of every set. pos(k, i) gives tensor positions. */
static vfm_status io_slices(int fd, const char *path, int writing, const TpShardMap *m, const ShardedSet *sets, int n_sets,
                            int64_t lo, int64_t hi, const uint64_t *pos) {
    const ParamTable *l = &m->local;
    for (int k = 0; k < n_sets; k++)
        for (int i = 0; i < l->count; i++) {
            const ParamEntry *e = &l->entries[i];
            int64_t a = e->offset > lo ? e->offset : lo, b = e->offset + e->numel < hi ? e->offset + e->numel : hi;
            if (a >= b) continue;
            const ParamTable *ft = m->file ? m->file : m->full;
            int fe = m->file_entry ? m->file_entry[i] : i;
            RunCtx c = {fd, writing, path, pos[k * ft->count + fe], sets[k].buf + (e->offset - lo)};
            VFM_TRY(tp_shard_runs(m, i, a - e->offset, b - e->offset, io_run, &c));
        }
    return VFM_OK;
}

/* Every rank learns whether any rank failed; a failing rank keeps its own message. */
static vfm_status agree(Comm *comm, vfm_status s, const char *path) {
    int flag = s != VFM_OK;
    if (comm && comm->size > 1) VFM_TRY(comm_all_reduce(comm, &flag, 1, DT_I32, COMM_MAX));
    if (s != VFM_OK) return s;
    return flag ? vfm_fail(VFM_ERR_IO, "%s: the save failed on another rank", path) : VFM_OK;
}

vfm_status sharded_safetensors_write(const char *path, Comm *comm, const TpShardMap *m, const ShardedSet *sets, int n_sets,
                                     int64_t lo, int64_t hi, const char *const *metadata) {
    Header h;
    vfm_status s = build_header(&h, m, sets, n_sets, metadata);
    s = agree(comm, s, path);
    if (s != VFM_OK) return s;
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int me = comm ? comm->rank : 0;
    uint64_t start = 8 + h.len;
    if (me == 0) { /* the header and the file's size */
        int fd = open(tmp, O_CREAT | O_TRUNC | O_WRONLY, 0644);
        if (fd < 0) s = vfm_fail(VFM_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
        unsigned char le[8];
        for (int i = 0; i < 8; i++) le[i] = (unsigned char)((uint64_t)h.len >> (8 * i));
        if (s == VFM_OK && (pwrite(fd, le, 8, 0) != 8 || pwrite(fd, h.text, h.len, 8) != (ssize_t)h.len ||
                            ftruncate(fd, (off_t)(start + h.data_bytes)) != 0))
            s = vfm_fail(VFM_ERR_IO, "%s: cannot write the header: %s", tmp, strerror(errno));
        if (fd >= 0 && close(fd) != 0 && s == VFM_OK) s = vfm_fail(VFM_ERR_IO, "%s: close: %s", tmp, strerror(errno));
    }
    s = agree(comm, s, path);
    if (s == VFM_OK && hi > lo) { /* every rank's slices */
        const ParamTable *ft = m->file ? m->file : m->full;
        uint64_t *pos = malloc((size_t)(n_sets * ft->count + 1) * sizeof *pos);
        int fd = open(tmp, O_WRONLY);
        if (!pos) s = vfm_fail(VFM_ERR_NOMEM, "%s: positions", path);
        else if (fd < 0) s = vfm_fail(VFM_ERR_IO, "%s: cannot open: %s", tmp, strerror(errno));
        for (int i = 0; s == VFM_OK && i < n_sets * ft->count; i++) pos[i] = start + h.offset[i];
        if (s == VFM_OK) s = io_slices(fd, tmp, 1, m, sets, n_sets, lo, hi, pos);
        if (s == VFM_OK && fsync(fd) != 0) s = vfm_fail(VFM_ERR_IO, "%s: fsync: %s", tmp, strerror(errno));
        if (fd >= 0) close(fd);
        free(pos);
    }
    s = agree(comm, s, path);
    if (s == VFM_OK && me == 0) { /* into place */
        char dir[1100];
        path_dirname(dir, sizeof dir, path);
        if (rename(tmp, path) != 0) s = vfm_fail(VFM_ERR_IO, "%s: cannot rename into place: %s", path, strerror(errno));
        if (s == VFM_OK) s = fsync_dir(dir);
    }
    header_free(&h);
    return agree(comm, s, path);
}

vfm_status sharded_safetensors_read(const char *path, const TpShardMap *m, const ShardedSet *sets, int n_sets, int64_t lo,
                                    int64_t hi) {
    StFile f;
    VFM_TRY(st_open(&f, path));
    const ParamTable *t = m->file ? m->file : m->full;
    uint64_t *pos = malloc((size_t)(n_sets * t->count + 1) * sizeof *pos);
    vfm_status s = pos ? VFM_OK : vfm_fail(VFM_ERR_NOMEM, "%s: positions", path);
    for (int k = 0; k < n_sets && s == VFM_OK; k++)
        for (int i = 0; i < t->count && s == VFM_OK; i++) {
            char name[256];
            snprintf(name, sizeof name, "%s%s", sets[k].prefix, t->entries[i].name);
            s = st_tensor(&f, name, &t->entries[i], &pos[k * t->count + i]);
        }
    if (s == VFM_OK && hi > lo) s = io_slices(f.fd, path, 0, m, sets, n_sets, lo, hi, pos);
    free(pos);
    st_close(&f);
    return s;
}

vfm_status sharded_safetensors_metadata(const char *path, const char *key, char *out, size_t n) {
    StFile f;
    VFM_TRY(st_open(&f, path));
    const char *v = json_string_value(json_object_get(json_object_get(f.hdr, "__metadata__"), key));
    vfm_status s = v ? VFM_OK : vfm_fail(VFM_ERR_FORMAT, "%s: metadata '%s' is missing", path, key);
    if (v) snprintf(out, n, "%s", v);
    st_close(&f);
    return s;
}

/* ---- weights and Adam moments ------------------------------------------------------------------ */

vfm_status ckpt_write_weights_range(const char *path, Comm *comm, const TpShardMap *m, const float *buf, int64_t lo,
                                    int64_t hi) {
    ShardedSet set = {"", (float *)buf};
    const char *meta[] = {"format", "vfm", NULL};
    return sharded_safetensors_write(path, comm, m, &set, 1, lo, hi, meta);
}

vfm_status ckpt_read_weights_range(const char *path, const TpShardMap *m, float *buf, int64_t lo, int64_t hi) {
    ShardedSet set = {"", buf};
    return sharded_safetensors_read(path, m, &set, 1, lo, hi);
}

vfm_status ckpt_write_weights(const char *path, Comm *comm, const TpShardMap *m, const float *params, int writes) {
    return ckpt_write_weights_range(path, comm, m, params, 0, writes ? m->local.total : 0);
}

vfm_status ckpt_read_weights(const char *path, const TpShardMap *m, float *params) {
    return ckpt_read_weights_range(path, m, params, 0, m->local.total);
}

vfm_status ckpt_write_optim(const char *path, Comm *comm, const TpShardMap *m, const Optimizer *o, int64_t lo, int64_t hi) {
    if (lo < o->begin || hi > o->end || lo > hi)
        return vfm_fail(VFM_ERR_INTERNAL, "ckpt_write_optim: range [%lld, %lld) outside the held [%lld, %lld)",
                        (long long)lo, (long long)hi, (long long)o->begin, (long long)o->end);
    ShardedSet sets[2] = {{"exp_avg.", o->m + (lo - o->begin)}, {"exp_avg_sq.", o->v + (lo - o->begin)}};
    char step[32];
    snprintf(step, sizeof step, "%lld", (long long)o->step);
    const char *meta[] = {"format", "vfm-optim", "step", step, NULL};
    return sharded_safetensors_write(path, comm, m, sets, 2, lo, hi, meta);
}

vfm_status ckpt_read_optim(const char *path, const TpShardMap *m, Optimizer *o) {
    char step[32], *end;
    VFM_TRY(sharded_safetensors_metadata(path, "step", step, sizeof step));
    long long v = strtoll(step, &end, 10);
    if (*end || v < 0) return vfm_fail(VFM_ERR_FORMAT, "%s: metadata step '%s' is not a step count", path, step);
    ShardedSet sets[2] = {{"exp_avg.", o->m}, {"exp_avg_sq.", o->v}};
    VFM_TRY(sharded_safetensors_read(path, m, sets, 2, o->begin, o->end));
    o->step = v;
    return VFM_OK;
}
