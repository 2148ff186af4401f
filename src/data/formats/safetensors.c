/* safetensors reader and writer (JSON header through jansson). */
#include "data/formats/safetensors.h"

#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/fileutil.h"

static const char *st_dtype_name(DType t) {
    switch (t) {
    case DT_F32: return "F32";
    case DT_F64: return "F64";
    case DT_BF16: return "BF16";
    case DT_I32: return "I32";
    case DT_I64: return "I64";
    }
    return "?";
}

vfm_status safetensors_write(const char *path, const SafetensorsEntry *entries, int n, const char *const *metadata) {
    json_t *hdr = json_object();
    if (metadata) {
        json_t *meta = json_object();
        for (int i = 0; metadata[i] && metadata[i + 1]; i += 2) json_object_set_new(meta, metadata[i], json_string(metadata[i + 1]));
        json_object_set_new(hdr, "__metadata__", meta);
    }
    uint64_t offset = 0;
    for (int i = 0; i < n; i++) {
        const SafetensorsEntry *e = &entries[i];
        Tensor t = tensor_make(NULL, e->dtype, DEV_CPU, e->ndim, e->shape);
        json_t *shape = json_array();
        for (int d = 0; d < e->ndim; d++) json_array_append_new(shape, json_integer(e->shape[d]));
        json_t *obj = json_object();
        json_object_set_new(obj, "dtype", json_string(st_dtype_name(e->dtype)));
        json_object_set_new(obj, "shape", shape);
        json_object_set_new(obj, "data_offsets",
                            json_pack("[II]", (json_int_t)offset, (json_int_t)(offset + tensor_bytes(&t))));
        json_object_set_new(hdr, e->name, obj);
        offset += tensor_bytes(&t);
    }
    char *text = json_dumps(hdr, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(hdr);
    if (!text) return vfm_fail(VFM_ERR_NOMEM, "%s: cannot encode the safetensors header", path);
    size_t len = strlen(text), padded = (len + 7) & ~(size_t)7;
    AtomicFile af;
    vfm_status s = atomic_file_open(&af, path);
    if (s == VFM_OK) {
        uint64_t hlen = padded;
        unsigned char le[8];
        for (int i = 0; i < 8; i++) le[i] = (unsigned char)(hlen >> (8 * i));
        s = atomic_file_write(&af, le, 8);
        if (s == VFM_OK) s = atomic_file_write(&af, text, len);
        for (size_t i = len; s == VFM_OK && i < padded; i++) s = atomic_file_write(&af, " ", 1);
        for (int i = 0; s == VFM_OK && i < n; i++) {
            Tensor t = tensor_make(NULL, entries[i].dtype, DEV_CPU, entries[i].ndim, entries[i].shape);
            s = atomic_file_write(&af, entries[i].data, tensor_bytes(&t));
        }
        s = s == VFM_OK ? atomic_file_commit(&af) : (atomic_file_abort(&af), s);
    }
    free(text);
    return s;
}

typedef struct {
    char *name;
    DType dtype;
    int ndim;
    int64_t shape[VFM_MAX_DIMS];
    uint64_t begin, end;
} StTensor;

struct SafetensorsFile {
    char what[512];
    int fd;               /* -1 for memory */
    const unsigned char *mem;
    size_t size;
    uint64_t data_start;
    StTensor *t;
    int n;
    json_t *meta;
};

static int parse_dtype(const char *s, DType *out) {
    static const struct { const char *n; DType t; } map[] = {
        {"F32", DT_F32}, {"F64", DT_F64}, {"BF16", DT_BF16}, {"I32", DT_I32}, {"I64", DT_I64}};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (strcmp(s, map[i].n) == 0) { *out = map[i].t; return 1; }
    return 0;
}

/* A JSON integer in [0, INT64_MAX] into *out; 0 when v is anything else. */
static int get_count(const json_t *v, int64_t *out) {
    if (!json_is_integer(v) || json_integer_value(v) < 0) return 0;
    *out = (int64_t)json_integer_value(v);
    return 1;
}

/* Checks one header entry: a supported dtype, a shape of non-negative integers, data offsets
 * [begin, end] inside the data section and holding exactly numel elements. */
static vfm_status parse_entry(SafetensorsFile *f, const char *key, const json_t *val, StTensor *t) {
    const json_t *dt = json_object_get(val, "dtype"), *shape = json_object_get(val, "shape"),
                 *offs = json_object_get(val, "data_offsets");
    if (!json_is_string(dt) || !parse_dtype(json_string_value(dt), &t->dtype) || !json_is_array(shape) ||
        json_array_size(shape) > VFM_MAX_DIMS || !json_is_array(offs) || json_array_size(offs) != 2)
        return vfm_fail(VFM_ERR_FORMAT, "%s: tensor '%s': unsupported dtype or malformed entry", f->what, key);
    t->ndim = (int)json_array_size(shape);
    uint64_t numel = 1, bytes;
    for (int d = 0; d < t->ndim; d++) {
        if (!get_count(json_array_get(shape, (size_t)d), &t->shape[d]))
            return vfm_fail(VFM_ERR_FORMAT, "%s: tensor '%s': shape entry %d is not a non-negative integer", f->what,
                            key, d);
        if (__builtin_mul_overflow(numel, (uint64_t)t->shape[d], &numel))
            return vfm_fail(VFM_ERR_FORMAT, "%s: tensor '%s': shape overflows", f->what, key);
    }
    int64_t begin, end;
    if (!get_count(json_array_get(offs, 0), &begin) || !get_count(json_array_get(offs, 1), &end))
        return vfm_fail(VFM_ERR_FORMAT, "%s: tensor '%s': data offsets are not non-negative integers", f->what, key);
    t->begin = (uint64_t)begin;
    t->end = (uint64_t)end;
    if (t->end < t->begin || t->end > f->size - f->data_start ||
        __builtin_mul_overflow(numel, (uint64_t)dtype_size(t->dtype), &bytes) || t->end - t->begin != bytes)
        return vfm_fail(VFM_ERR_FORMAT, "%s: tensor '%s': data offsets do not fit the file", f->what, key);
    return VFM_OK;
}

static vfm_status parse_header(SafetensorsFile *f, const char *text, size_t len) {
    json_error_t err;
    json_t *hdr = json_loadb(text, len, 0, &err);
    if (!hdr || !json_is_object(hdr)) {
        json_decref(hdr);
        return vfm_fail(VFM_ERR_FORMAT, "%s: safetensors header is not a JSON object (%s)", f->what,
                        hdr ? "another JSON value" : err.text);
    }
    size_t count = json_object_size(hdr);
    f->t = calloc(count ? count : 1, sizeof *f->t);
    if (!f->t) {
        json_decref(hdr);
        return vfm_fail(VFM_ERR_NOMEM, "%s: header", f->what);
    }
    const char *key;
    json_t *val;
    vfm_status s = VFM_OK;
    json_object_foreach(hdr, key, val) {
        if (strcmp(key, "__metadata__") == 0) {
            f->meta = json_incref(val);
            continue;
        }
        StTensor *t = &f->t[f->n];
        s = parse_entry(f, key, val, t); /* the message names key: made before hdr is released */
        if (s == VFM_OK && !(t->name = strdup(key))) s = vfm_fail(VFM_ERR_NOMEM, "%s: header", f->what);
        if (s != VFM_OK) break;
        f->n++;
    }
    json_decref(hdr);
    return s;
}

static vfm_status open_common(SafetensorsFile *f) {
    unsigned char le[8];
    if (f->size < 8) return vfm_fail(VFM_ERR_FORMAT, "%s: too short for a safetensors file", f->what);
    if (f->fd >= 0) {
        if (pread(f->fd, le, 8, 0) != 8) return vfm_fail(VFM_ERR_IO, "%s: cannot read", f->what);
    } else {
        memcpy(le, f->mem, 8);
    }
    uint64_t hlen = 0;
    for (int i = 0; i < 8; i++) hlen |= (uint64_t)le[i] << (8 * i);
    if (hlen > f->size - 8 || hlen > (100u << 20)) return vfm_fail(VFM_ERR_FORMAT, "%s: bad header length", f->what);
    f->data_start = 8 + hlen;
    char *text = malloc(hlen + 1);
    if (!text) return vfm_fail(VFM_ERR_NOMEM, "%s: header", f->what);
    if (f->fd >= 0) {
        if (pread(f->fd, text, hlen, 8) != (ssize_t)hlen) {
            free(text);
            return vfm_fail(VFM_ERR_IO, "%s: cannot read the header", f->what);
        }
    } else {
        memcpy(text, f->mem + 8, hlen);
    }
    vfm_status s = parse_header(f, text, hlen);
    free(text);
    return s;
}

vfm_status safetensors_open(SafetensorsFile **out, const char *path) {
    *out = NULL;
    SafetensorsFile *f = calloc(1, sizeof *f);
    snprintf(f->what, sizeof f->what, "%s", path);
    f->fd = open(path, O_RDONLY);
    if (f->fd < 0) {
        free(f);
        return vfm_fail(VFM_ERR_IO, "%s: cannot open", path);
    }
    struct stat st;
    fstat(f->fd, &st);
    f->size = (size_t)st.st_size;
    vfm_status s = open_common(f);
    if (s != VFM_OK) {
        safetensors_close(f);
        return s;
    }
    *out = f;
    return VFM_OK;
}

vfm_status safetensors_open_memory(SafetensorsFile **out, const void *data, size_t size, const char *what) {
    *out = NULL;
    SafetensorsFile *f = calloc(1, sizeof *f);
    snprintf(f->what, sizeof f->what, "%s", what);
    f->fd = -1;
    f->mem = data;
    f->size = size;
    vfm_status s = open_common(f);
    if (s != VFM_OK) {
        safetensors_close(f);
        return s;
    }
    *out = f;
    return VFM_OK;
}

void safetensors_close(SafetensorsFile *f) {
    if (!f) return;
    if (f->fd >= 0) close(f->fd);
    for (int i = 0; i < f->n; i++) free(f->t[i].name);
    free(f->t);
    json_decref(f->meta);
    free(f);
}

int safetensors_count(const SafetensorsFile *f) { return f->n; }
const char *safetensors_name(const SafetensorsFile *f, int i) { return f->t[i].name; }

int safetensors_find(const SafetensorsFile *f, const char *name) {
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->t[i].name, name) == 0) return i;
    return -1;
}

vfm_status safetensors_info(const SafetensorsFile *f, int i, DType *dtype, int *ndim, int64_t *shape) {
    if (i < 0 || i >= f->n) return vfm_fail(VFM_ERR_INTERNAL, "%s: no tensor %d", f->what, i);
    *dtype = f->t[i].dtype;
    *ndim = f->t[i].ndim;
    for (int d = 0; d < f->t[i].ndim; d++) shape[d] = f->t[i].shape[d];
    return VFM_OK;
}

vfm_status safetensors_read_f32(const SafetensorsFile *f, int i, float *out, int64_t numel) {
    const StTensor *t = &f->t[i];
    size_t bytes = t->end - t->begin;
    if ((uint64_t)numel * dtype_size(t->dtype) != bytes)
        return vfm_fail(VFM_ERR_SHAPE, "%s: tensor '%s' has %llu bytes, %lld elements were asked for", f->what, t->name,
                        (unsigned long long)bytes, (long long)numel);
    void *raw = t->dtype == DT_F32 ? (void *)out : malloc(bytes);
    if (!raw) return vfm_fail(VFM_ERR_NOMEM, "%s: tensor '%s'", f->what, t->name);
    if (f->fd >= 0) {
        if (pread_full(f->fd, raw, bytes, (off_t)(f->data_start + t->begin)) != VFM_OK) {
            if (raw != out) free(raw);
            return vfm_fail(VFM_ERR_IO, "%s: cannot read tensor '%s'", f->what, t->name);
        }
    } else {
        memcpy(raw, f->mem + f->data_start + t->begin, bytes);
    }
    if (raw != out) {
        for (int64_t k = 0; k < numel; k++) {
            switch (t->dtype) {
            case DT_F64: out[k] = (float)((double *)raw)[k]; break;
            case DT_BF16: out[k] = f32_from_bf16(((uint16_t *)raw)[k]); break;
            case DT_I32: out[k] = (float)((int32_t *)raw)[k]; break;
            case DT_I64: out[k] = (float)((int64_t *)raw)[k]; break;
            default: break;
            }
        }
        free(raw);
    }
    return VFM_OK;
}

const char *safetensors_metadata(const SafetensorsFile *f, const char *key) {
    json_t *v = f->meta ? json_object_get(f->meta, key) : NULL;
    return json_is_string(v) ? json_string_value(v) : NULL;
}
