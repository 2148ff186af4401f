/* torch.load without Python (see torch_tensor.h): the zip and legacy containers that hand the
 * whitelist unpickler its pickles and give its storages their bytes, tensor materialisation from
 * strided views, conversion to float32, and state dicts. */
#include "data/formats/torch_tensor.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/formats/npy.h"
#include "data/formats/zip.h"

/* torch.serialization's MAGIC_NUMBER 0x1950a86a20f9469cfc6c as LONG1 bytes (little-endian) */
static const uint8_t legacy_magic[10] = {0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19};
#define LEGACY_PROTOCOL 1001
/* An overlapping view (a stride-0 expand) is materialised up to this many elements; a view that
 * does not overlap is never larger than its storage. */
#define OVERLAP_MAX_NUMEL ((int64_t)1 << 24)

static int is_legacy_magic(const PickleValue *v) {
    return v && v->kind == PK_BIGINT && v->u.s.len == sizeof legacy_magic &&
           memcmp(v->u.s.ptr, legacy_magic, sizeof legacy_magic) == 0;
}

static int mul_ok(int64_t a, int64_t b, int64_t *out) { return !__builtin_mul_overflow(a, b, out); }

/* ---- containers ---- */

static vfm_status load_zip(Pickle *p, const uint8_t *bytes, size_t len, PickleValue **root);
static vfm_status load_legacy(Pickle *p, const uint8_t *bytes, size_t len, size_t pos, PickleValue **root);

/* torch.storage._load_from_bytes(blob): torch.load of a nested blob (legacy in practice, zip allowed). */
static vfm_status load_blob(void *ctx, Pickle *p, const uint8_t *blob, size_t len, PickleValue **out) {
    (void)ctx;
    const char *outer = pickle_set_label(p, "the torch.save blob given to _load_from_bytes");
    size_t used = 0;
    PickleValue *magic = NULL;
    vfm_status s;
    if (zip_is_zip(blob, len)) {
        s = load_zip(p, blob, len, out);
    } else {
        s = pickle_run(p, blob, len, &used, &magic);
        if (s == VFM_OK && !is_legacy_magic(magic))
            s = vfm_fail(VFM_ERR_FORMAT, "%s: the blob given to _load_from_bytes is not a torch.save stream", pickle_what(p));
        if (s == VFM_OK) s = load_legacy(p, blob, len, used, out);
    }
    pickle_set_label(p, outer);
    return s;
}

/* The prefix every record name starts with (the first name up to its '/'). */
static vfm_status zip_prefix(const ZipArchive *z, const char *what, char *out, size_t n) {
    const ZipEntry *first = zip_entry(z, 0);
    const char *slash = first ? strchr(first->name, '/') : NULL;
    if (!slash || (size_t)(slash - first->name) + 1 >= n)
        return vfm_fail(VFM_ERR_FORMAT, "%s: a zip archive, but not one torch.save wrote (no '<name>/data.pkl')", what);
    snprintf(out, n, "%.*s", (int)(slash - first->name), first->name);
    return VFM_OK;
}

static vfm_status load_zip(Pickle *p, const uint8_t *bytes, size_t len, PickleValue **root) {
    const char *what = pickle_what(p);
    ZipArchive *z;
    VFM_TRY(zip_open_memory(&z, bytes, len, what));
    char prefix[256], name[600];
    uint8_t *checked = calloc((size_t)zip_count(z) + 1, 1);
    vfm_status s = checked ? zip_prefix(z, what, prefix, sizeof prefix) : vfm_fail(VFM_ERR_NOMEM, "%s: out of memory", what);
    int big_endian = 0;
    if (s == VFM_OK) {
        snprintf(name, sizeof name, "%s/byteorder", prefix);
        int i = zip_find(z, name);
        const uint8_t *d;
        uint64_t n;
        if (i >= 0 && (s = zip_read(z, i, &d, &n)) == VFM_OK) {
            if (n == 3 && memcmp(d, "big", 3) == 0) big_endian = 1;
            else if (!(n == 6 && memcmp(d, "little", 6) == 0))
                s = vfm_fail(VFM_ERR_FORMAT, "%s: record byteorder is neither 'little' nor 'big'", what);
        }
    }
    int64_t first = pickle_storage_count(p);
    if (s == VFM_OK) {
        snprintf(name, sizeof name, "%s/data.pkl", prefix);
        int i = zip_find(z, name);
        const uint8_t *d;
        uint64_t n;
        if (i < 0) s = vfm_fail(VFM_ERR_FORMAT, "%s: a zip archive without the record %s: not written by torch.save", what, name);
        if (s == VFM_OK) s = zip_read(z, i, &d, &n);
        if (s == VFM_OK) {
            const char *outer = pickle_set_label(p, name);
            s = pickle_run(p, d, (size_t)n, NULL, root);
            pickle_set_label(p, outer);
        }
    }
    /* the storages the pickle named: record data/<key>, checked once per record */
    for (int64_t k = first; s == VFM_OK && k < pickle_storage_count(p); k++) {
        PickleStorage *st = &pickle_storage_at(p, k)->u.storage;
        if (st->resolved) continue;
        snprintf(name, sizeof name, "%s/data/%s", prefix, st->key);
        int i = zip_find(z, name);
        if (i < 0) {
            s = vfm_fail(VFM_ERR_FORMAT, "%s: the pickle names storage '%s' but the record %s is missing", what, st->key, name);
            break;
        }
        const ZipEntry *e = zip_entry(z, i);
        if (!checked[i]) {
            const uint8_t *d;
            uint64_t n;
            if ((s = zip_read(z, i, &d, &n)) != VFM_OK) break;
            checked[i] = 1;
        }
        int64_t need;
        if (!mul_ok(st->numel, torch_dtype_size(st->dtype), &need) || (uint64_t)need > e->size) {
            s = vfm_fail(VFM_ERR_FORMAT, "%s: storage '%s' holds %lld %s elements but its record has %llu bytes", what,
                         st->key, (long long)st->numel, torch_dtype_name(st->dtype), (unsigned long long)e->size);
            break;
        }
        st->data = e->data;
        st->big_endian = big_endian;
        st->resolved = 1;
    }
    free(checked);
    zip_close(z);
    return s;
}

static int by_storage_key(const void *a, const void *b, void *session) {
    const Pickle *p = session;
    return strcmp(pickle_storage_at(p, *(const int64_t *)a)->u.storage.key,
                  pickle_storage_at(p, *(const int64_t *)b)->u.storage.key);
}

/* The first of sorted[0..n) whose storage key is key, or n. */
static int64_t find_key(const Pickle *p, const int64_t *sorted, int64_t n, const char *key) {
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (strcmp(pickle_storage_at(p, sorted[mid])->u.storage.key, key) < 0) lo = mid + 1;
        else hi = mid;
    }
    return lo < n && strcmp(pickle_storage_at(p, sorted[lo])->u.storage.key, key) == 0 ? lo : n;
}

/* Gives the storages of the legacy stream (sorted[0..n), by key) the bytes after the key list. */
static vfm_status legacy_storages(Pickle *p, const PickleValue *keys, const int64_t *sorted, int64_t n,
                                  const uint8_t *bytes, size_t len, size_t pos) {
    const char *what = pickle_what(p);
    for (int64_t k = 0; k < keys->u.seq.n; k++) {
        const char *key = pickle_str(keys->u.seq.items[k]);
        if (!key) return vfm_fail(VFM_ERR_FORMAT, "%s: legacy torch.save stream: a storage key is not a string", what);
        int64_t at = find_key(p, sorted, n, key);
        if (at == n) return vfm_fail(VFM_ERR_FORMAT, "%s: legacy torch.save stream lists storage '%s' that no tensor uses", what, key);
        PickleStorage *st = &pickle_storage_at(p, sorted[at])->u.storage;
        if (len - pos < 8) return vfm_fail(VFM_ERR_FORMAT, "%s: legacy torch.save stream ends before storage '%s'", what, key);
        int64_t count = 0, nbytes;
        for (int b = 7; b >= 0; b--) count = (int64_t)((uint64_t)count << 8 | bytes[pos + (size_t)b]);
        pos += 8;
        if (count < 0 || !mul_ok(count, torch_dtype_size(st->dtype), &nbytes) || (uint64_t)nbytes > len - pos)
            return vfm_fail(VFM_ERR_FORMAT, "%s: legacy torch.save stream: storage '%s' of %lld elements is truncated",
                            what, key, (long long)count);
        if (count < st->numel)
            return vfm_fail(VFM_ERR_FORMAT, "%s: legacy storage '%s' has %lld elements, its persistent id says %lld", what,
                            key, (long long)count, (long long)st->numel);
        /* every storage object with this key (one per reference) gets the bytes */
        for (int64_t j = at; j < n && strcmp(pickle_storage_at(p, sorted[j])->u.storage.key, key) == 0; j++) {
            PickleStorage *o = &pickle_storage_at(p, sorted[j])->u.storage;
            if (o->dtype == st->dtype && o->numel <= count) o->data = bytes + pos, o->resolved = 1;
        }
        pos += (size_t)nbytes;
    }
    return VFM_OK;
}

/* After the magic: protocol, system info, the object, the key list, then each key's storage bytes. */
static vfm_status load_legacy(Pickle *p, const uint8_t *bytes, size_t len, size_t pos, PickleValue **root) {
    const char *what = pickle_what(p);
    size_t used;
    PickleValue *v;
    VFM_TRY(pickle_run(p, bytes + pos, len - pos, &used, &v));
    pos += used;
    if (v->kind != PK_INT || v->u.i != LEGACY_PROTOCOL)
        return vfm_fail(VFM_ERR_FORMAT, "%s: legacy torch.save stream with an unknown protocol (want %d)", what, LEGACY_PROTOCOL);
    VFM_TRY(pickle_run(p, bytes + pos, len - pos, &used, &v)); /* sys_info: the data is little-endian anyway */
    pos += used;
    int64_t first = pickle_storage_count(p);
    VFM_TRY(pickle_run(p, bytes + pos, len - pos, &used, root));
    pos += used;
    int64_t n = pickle_storage_count(p) - first;
    PickleValue *keys;
    VFM_TRY(pickle_run(p, bytes + pos, len - pos, &used, &keys));
    pos += used;
    if (keys->kind != PK_LIST) return vfm_fail(VFM_ERR_FORMAT, "%s: legacy torch.save stream: the storage keys are not a list", what);
    int64_t *sorted = malloc((size_t)n * sizeof *sorted + 1);
    if (!sorted) return vfm_fail(VFM_ERR_NOMEM, "%s: out of memory", what);
    for (int64_t k = 0; k < n; k++) sorted[k] = first + k;
    qsort_r(sorted, (size_t)n, sizeof *sorted, by_storage_key, p);
    vfm_status s = legacy_storages(p, keys, sorted, n, bytes, len, pos);
    free(sorted);
    return s;
}

vfm_status torch_load_memory(const void *bytes, size_t len, const char *what, Pickle **session, PickleValue **root) {
    *root = NULL;
    VFM_TRY(pickle_session(session, what, load_blob, NULL));
    Pickle *p = *session;
    vfm_status s;
    if (zip_is_zip(bytes, len)) {
        s = load_zip(p, bytes, len, root);
    } else if (len < 2 || ((const uint8_t *)bytes)[0] != 0x80) {
        s = vfm_fail(VFM_ERR_FORMAT, "%s: neither a torch.save zip archive nor a pickle (protocol 2-5 pickles start "
                     "with byte 0x80)", what);
    } else {
        size_t used = 0;
        s = pickle_run(p, bytes, len, &used, root);
        if (s == VFM_OK && is_legacy_magic(*root)) s = load_legacy(p, bytes, len, used, root);
    }
    for (int64_t k = 0; s == VFM_OK && k < pickle_storage_count(p); k++)
        if (!pickle_storage_at(p, k)->u.storage.resolved)
            s = vfm_fail(VFM_ERR_FORMAT, "%s: storage '%s' has no data (a persistent id outside a torch.save archive)",
                         what, pickle_storage_at(p, k)->u.storage.key);
    if (s != VFM_OK) {
        pickle_free(p);
        *session = NULL;
        *root = NULL;
    }
    return s;
}

/* ---- materialising ---- */

void torch_tensor_free(TorchTensor *t) {
    if (!t) return;
    free(t->data);
    t->data = NULL;
}

vfm_status torch_tensor_from_value(const PickleValue *v, const char *name, TorchTensor *out) {
    memset(out, 0, sizeof *out);
    if (!v || v->kind != PK_TENSOR)
        return vfm_fail(VFM_ERR_FORMAT, "%s: holds a %s, not a tensor", name, v ? pickle_kind_name(v->kind) : "nothing");
    const PickleTensor *t = &v->u.tensor;
    const PickleStorage *st = &t->storage->u.storage;
    int es = torch_dtype_size(t->dtype);
    int64_t storage_bytes, numel = 1, last = t->offset;
    if (!st->resolved) return vfm_fail(VFM_ERR_FORMAT, "%s: its storage '%s' has no data", name, st->key);
    if (!mul_ok(st->numel, torch_dtype_size(st->dtype), &storage_bytes))
        return vfm_fail(VFM_ERR_FORMAT, "%s: storage size overflows", name);
    int overflow = 0;
    for (int d = 0; d < t->ndim; d++) overflow |= !mul_ok(numel, t->size[d], &numel);
    for (int d = 0; d < t->ndim && numel > 0; d++) {
        int64_t reach;
        overflow |= !mul_ok(t->size[d] - 1, t->stride[d], &reach) || __builtin_add_overflow(last, reach, &last);
    }
    int64_t end_bytes;
    if (overflow || (numel > 0 && (last == INT64_MAX || !mul_ok(last + 1, es, &end_bytes) || end_bytes > storage_bytes)))
        return vfm_fail(VFM_ERR_FORMAT, "%s: the view (offset %lld, %d dimensions) reaches past its storage '%s' of %lld bytes",
                        name, (long long)t->offset, t->ndim, st->key, (long long)storage_bytes);
    if (numel > storage_bytes / es && numel > OVERLAP_MAX_NUMEL) /* more elements than the storage: overlapping */
        return vfm_fail(VFM_ERR_FORMAT, "%s: an overlapping view of %lld elements (at most %lld are materialised)", name,
                        (long long)numel, (long long)OVERLAP_MAX_NUMEL);
    uint8_t *dst = malloc((size_t)(numel * es) + 1);
    if (!dst) return vfm_fail(VFM_ERR_NOMEM, "%s: out of memory for %lld elements", name, (long long)numel);
    out->dtype = t->dtype;
    out->ndim = t->ndim;
    memcpy(out->shape, t->size, sizeof out->shape);
    out->numel = numel;
    out->data = dst;
    if (numel == 0) return VFM_OK;
    /* walk the index like an odometer; the innermost dimension is copied in one go when contiguous */
    int nd = t->ndim;
    int64_t inner = nd ? t->size[nd - 1] : 1, inner_stride = nd ? t->stride[nd - 1] : 1;
    int64_t idx[TORCH_MAX_DIMS] = {0}, at = t->offset;
    const uint8_t *src = st->data;
    for (int64_t k = 0; k < numel; k += inner) {
        if (inner_stride == 1) {
            memcpy(dst + k * es, src + at * es, (size_t)(inner * es));
        } else {
            for (int64_t j = 0; j < inner; j++) memcpy(dst + (k + j) * es, src + (at + j * inner_stride) * es, (size_t)es);
        }
        for (int d = nd - 2; d >= 0; d--) {
            at += t->stride[d];
            if (++idx[d] < t->size[d]) break;
            at -= t->stride[d] * t->size[d];
            idx[d] = 0;
        }
    }
    if (st->big_endian && es > 1)
        for (int64_t k = 0; k < numel; k++)
            for (int i = 0; i < es / 2; i++) {
                uint8_t c = dst[k * es + i];
                dst[k * es + i] = dst[k * es + es - 1 - i];
                dst[k * es + es - 1 - i] = c;
            }
    return VFM_OK;
}

vfm_status torch_tensor_decode(const void *bytes, size_t len, const char *what, TorchTensor *out) {
    memset(out, 0, sizeof *out);
    Pickle *p;
    PickleValue *root;
    VFM_TRY(torch_load_memory(bytes, len, what, &p, &root));
    vfm_status s = torch_tensor_from_value(root, what, out);
    pickle_free(p);
    return s;
}

void torch_tensor_to_f32(const TorchTensor *t, float *dst) {
    static const NpyDType as_npy[TORCH_DTYPE_COUNT] = {
        [TORCH_F32] = NPY_F4, [TORCH_F64] = NPY_F8, [TORCH_F16] = NPY_F2, [TORCH_BF16] = NPY_BF16,
        [TORCH_I64] = NPY_I8, [TORCH_I32] = NPY_I4, [TORCH_I16] = NPY_I2,  [TORCH_I8] = NPY_I1,
        [TORCH_U8] = NPY_U1,  [TORCH_BOOL] = NPY_B1,
    };
    NpyArray a = {.dtype = as_npy[t->dtype], .item_size = torch_dtype_size(t->dtype), .ndim = 1,
                  .shape = {t->numel}, .numel = t->numel, .data = t->data};
    npy_to_f32(&a, dst);
}

/* ---- state dicts ---- */

/* A pickle can reference one dict or tensor from many places (the memo): the walk is bounded so
 * that a small file cannot ask for unbounded time or memory. */
#define FLAT_MAX_VISITS ((int64_t)1 << 24)

typedef struct {
    TorchStateDict *sd;
    int64_t cap;
    const char *what;
    int64_t visits;
    uint64_t bytes_left; /* tensor bytes still allowed: 4x the file plus 64 MiB (tied weights repeat storages) */
} Flat;

static vfm_status flat_add(Flat *f, const char *name, const PickleValue *v) {
    TorchStateDict *sd = f->sd;
    if (sd->n == f->cap) {
        int64_t cap = f->cap ? 2 * f->cap : 64;
        char **names = realloc(sd->names, (size_t)cap * sizeof *names);
        if (!names) return vfm_fail(VFM_ERR_NOMEM, "%s: out of memory", f->what);
        sd->names = names;
        TorchTensor *t = realloc(sd->tensors, (size_t)cap * sizeof *t);
        if (!t) return vfm_fail(VFM_ERR_NOMEM, "%s: out of memory", f->what);
        sd->tensors = t;
        f->cap = cap;
    }
    char where[1400];
    snprintf(where, sizeof where, "%s: tensor '%s'", f->what, name);
    if (!(sd->names[sd->n] = strdup(name))) return vfm_fail(VFM_ERR_NOMEM, "%s: out of memory", f->what);
    vfm_status s = torch_tensor_from_value(v, where, &sd->tensors[sd->n]);
    uint64_t bytes = s == VFM_OK ? (uint64_t)sd->tensors[sd->n].numel * (uint64_t)torch_dtype_size(sd->tensors[sd->n].dtype) : 0;
    if (s == VFM_OK && bytes > f->bytes_left) {
        torch_tensor_free(&sd->tensors[sd->n]);
        s = vfm_fail(VFM_ERR_FORMAT, "%s: its tensors add up to far more bytes than the file holds", f->what);
    }
    if (s != VFM_OK) {
        free(sd->names[sd->n]);
        return s;
    }
    f->bytes_left -= bytes;
    sd->n++;
    return VFM_OK;
}

static vfm_status flatten(Flat *f, const char *prefix, const PickleValue *v, int depth) {
    if (depth > 64) return vfm_fail(VFM_ERR_FORMAT, "%s: state dict nested more than 64 deep", f->what);
    if (++f->visits > FLAT_MAX_VISITS) return vfm_fail(VFM_ERR_FORMAT, "%s: more than %lld values in the state dict", f->what,
                                                       (long long)FLAT_MAX_VISITS);
    if (v->kind == PK_TENSOR) return flat_add(f, prefix, v);
    int64_t n = v->kind == PK_DICT ? v->u.dict.n : (v->kind == PK_LIST || v->kind == PK_TUPLE) ? v->u.seq.n : -1;
    if (n < 0) {
        f->sd->n_skipped++;
        return VFM_OK;
    }
    for (int64_t i = 0; i < n; i++) {
        char name[1024];
        const PickleValue *key = v->kind == PK_DICT ? v->u.dict.keys[i] : NULL;
        const char *sep = prefix[0] ? "." : "";
        if (!key) snprintf(name, sizeof name, "%s%s%lld", prefix, sep, (long long)i);
        else if (key->kind == PK_STR) snprintf(name, sizeof name, "%s%s%s", prefix, sep, key->u.s.ptr);
        else if (key->kind == PK_INT) snprintf(name, sizeof name, "%s%s%lld", prefix, sep, (long long)key->u.i);
        else {
            f->sd->n_skipped++;
            continue;
        }
        VFM_TRY(flatten(f, name, v->kind == PK_DICT ? v->u.dict.values[i] : v->u.seq.items[i], depth + 1));
    }
    return VFM_OK;
}

typedef struct {
    const char *name;
    int64_t at;
} NameAt;

static int by_name_then_position(const void *a, const void *b) {
    const NameAt *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : (x->at > y->at) - (x->at < y->at);
}

/* A repeated name keeps its first position and its last tensor (Python dict semantics). */
static vfm_status dedupe(TorchStateDict *sd, const char *what) {
    if (sd->n < 2) return VFM_OK;
    NameAt *order = malloc((size_t)sd->n * sizeof *order);
    uint8_t *drop = calloc((size_t)sd->n, 1);
    if (!order || !drop) {
        free(order), free(drop);
        return vfm_fail(VFM_ERR_NOMEM, "%s: out of memory", what);
    }
    for (int64_t i = 0; i < sd->n; i++) order[i] = (NameAt){sd->names[i], i};
    qsort(order, (size_t)sd->n, sizeof *order, by_name_then_position);
    for (int64_t i = 0; i < sd->n;) {
        int64_t j = i;
        while (j + 1 < sd->n && strcmp(order[i].name, order[j + 1].name) == 0) j++;
        if (j > i) { /* order[i] is the first position, order[j] the last value */
            TorchTensor keep = sd->tensors[order[j].at];
            sd->tensors[order[j].at] = sd->tensors[order[i].at];
            sd->tensors[order[i].at] = keep;
            for (int64_t k = i + 1; k <= j; k++) drop[order[k].at] = 1;
        }
        i = j + 1;
    }
    int64_t w = 0;
    for (int64_t i = 0; i < sd->n; i++) {
        if (drop[i]) {
            free(sd->names[i]);
            torch_tensor_free(&sd->tensors[i]);
            continue;
        }
        sd->names[w] = sd->names[i];
        sd->tensors[w++] = sd->tensors[i];
    }
    sd->n = w;
    free(order);
    free(drop);
    return VFM_OK;
}

vfm_status torch_load_state_dict_memory(const void *bytes, size_t len, const char *what, TorchStateDict *out) {
    memset(out, 0, sizeof *out);
    Pickle *p;
    PickleValue *root;
    VFM_TRY(torch_load_memory(bytes, len, what, &p, &root));
    vfm_status s = VFM_OK;
    if (root->kind != PK_DICT)
        s = vfm_fail(VFM_ERR_FORMAT, "%s: holds a %s, not a state dict", what, pickle_kind_name(root->kind));
    Flat f = {out, 0, what, 0, 4 * (uint64_t)len + (64u << 20)};
    if (s == VFM_OK) s = flatten(&f, "", root, 0);
    if (s == VFM_OK) s = dedupe(out, what);
    pickle_free(p);
    if (s != VFM_OK) torch_state_dict_free(out);
    return s;
}

vfm_status torch_load_state_dict(const char *path, TorchStateDict *out) {
    memset(out, 0, sizeof *out);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return vfm_fail(VFM_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return vfm_fail(VFM_ERR_IO, "%s: not a regular file", path);
    }
    size_t len = (size_t)st.st_size;
    void *map = len ? mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
    close(fd);
    if (len && map == MAP_FAILED) return vfm_fail(VFM_ERR_IO, "%s: cannot map: %s", path, strerror(errno));
    vfm_status s = torch_load_state_dict_memory(map ? map : "", len, path, out);
    if (map) munmap(map, len);
    return s;
}

int64_t torch_state_dict_find(const TorchStateDict *sd, const char *name) {
    for (int64_t i = 0; i < sd->n; i++)
        if (strcmp(sd->names[i], name) == 0) return i;
    return -1;
}

void torch_state_dict_free(TorchStateDict *sd) {
    for (int64_t i = 0; i < sd->n; i++) {
        free(sd->names[i]);
        torch_tensor_free(&sd->tensors[i]);
    }
    free(sd->names);
    free(sd->tensors);
    memset(sd, 0, sizeof *sd);
}
