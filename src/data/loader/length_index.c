/* The length index (see length_index.h): finding the shards, reading what each sample's lengths
 * need, the cache file and its validation.
 *
 * Cache file `<root>/.vfm/length_index.bin`, all integers little-endian, strings as u32 length +
 * bytes (length 0 = none):
 *   "VFMLIDX1"  u32 version  u32 n_shards
 *   per shard:  str rel  i64 size  i64 mtime_ns  str error  str pixel_space  u32 n_samples
 *     per sample: str key  i32 index  i32 shape[4]  i32 text_width  i32 text_len  i32 text_real
 *                 i32 status  str reason
 *   u64 hash_bytes64(everything before it)
 * A file that fails any check (magic, version, bounds, hash) is ignored and rebuilt. */
#include "data/loader/length_index.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/bytebuf.h"
#include "core/fileutil.h"
#include "core/hash.h"
#include "core/log.h"
#include "data/loader/encode.h"
#include "data/energon/energon_meta.h"
#include "data/energon/energon_sqlite.h"
#include "data/formats/npy.h"
#include "data/formats/safetensors.h"
#include "data/formats/tar.h"

#define CACHE_MAGIC "VFMLIDX1"
#define CACHE_VERSION 3u /* 2: pth / pickle parts are read (version 1 recorded them as unsupported); 3: refused
                          * pickles have their own status, named first */
#define MAX_JSON_BYTES (16u << 20)
#define MAX_SAFETENSORS_LATENT_BYTES (1u << 30)
#define MAX_TORCH_PART_BYTES (1u << 30) /* pth / pickle parts are read whole to learn their shape */

/* ---- string pool: blocks that never move, so the pointers stay valid ---- */

typedef struct StrBlock {
    struct StrBlock *next;
    size_t used, cap;
    char data[];
} StrBlock;

typedef struct {
    StrBlock *head;
} StrPool;

static const char *pool_dup(StrPool *p, const char *s, size_t n) {
    if (!p->head || p->head->cap - p->head->used < n + 1) {
        size_t cap = n + 1 > (1u << 16) ? n + 1 : (1u << 16);
        StrBlock *b = malloc(sizeof *b + cap);
        if (!b) return NULL;
        b->next = p->head;
        b->used = 0;
        b->cap = cap;
        p->head = b;
    }
    char *d = p->head->data + p->head->used;
    memcpy(d, s, n);
    d[n] = 0;
    p->head->used += n + 1;
    return d;
}

static void pool_free(StrPool *p) {
    for (StrBlock *b = p->head, *next; b; b = next) {
        next = b->next;
        free(b);
    }
    p->head = NULL;
}

/* Moves every block of src into dst. */
static void pool_take(StrPool *dst, StrPool *src) {
    StrBlock *b = src->head;
    if (!b) return;
    while (b->next) b = b->next;
    b->next = dst->head;
    dst->head = src->head;
    src->head = NULL;
}

/* ---- one shard's record ---- */

typedef struct {
    char *rel;
    int64_t size, mtime_ns;
    char *error, *pixel_space;
    int64_t count, cap;
    LengthEntry *entries; /* shard field unused here */
    StrPool strings;
    int from_cache;
} ShardRecord;

static void record_free(ShardRecord *r) {
    free(r->rel);
    free(r->error);
    free(r->pixel_space);
    free(r->entries);
    pool_free(&r->strings);
    memset(r, 0, sizeof *r);
}

static LengthEntry *record_add(ShardRecord *r) {
    if (r->count == r->cap) {
        int64_t cap = r->cap ? 2 * r->cap : 64;
        LengthEntry *e = realloc(r->entries, (size_t)cap * sizeof *e);
        if (!e) return NULL;
        r->entries = e;
        r->cap = cap;
    }
    LengthEntry *e = &r->entries[r->count++];
    memset(e, 0, sizeof *e);
    return e;
}

/* ---- finding the shards ---- */

typedef struct {
    char *rel;
    int64_t size, mtime_ns;
} ShardFile;

typedef struct {
    ShardFile *f;
    int n, cap;
} ShardList;

static int list_add(ShardList *l, const char *rel, const struct stat *st) {
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 64;
        ShardFile *f = realloc(l->f, (size_t)cap * sizeof *f);
        if (!f) return -1;
        l->f = f;
        l->cap = cap;
    }
    ShardFile *f = &l->f[l->n];
    f->rel = strdup(rel);
    f->size = (int64_t)st->st_size;
    f->mtime_ns = (int64_t)st->st_mtim.tv_sec * 1000000000LL + st->st_mtim.tv_nsec;
    if (!f->rel) return -1;
    l->n++;
    return 0;
}

static void list_free(ShardList *l) {
    for (int i = 0; i < l->n; i++) free(l->f[i].rel);
    free(l->f);
    memset(l, 0, sizeof *l);
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* Collects every `*.tar` (walk_files skips names that start with a dot: .vfm, .nv-meta). */
static vfm_status add_shard(void *ctx, const char *rel, const char *name, const struct stat *st) {
    if (!ends_with(name, ".tar")) return VFM_OK;
    if (list_add(ctx, rel, st) != 0) return vfm_fail(VFM_ERR_NOMEM, "length index: out of memory");
    return VFM_OK;
}

static int by_rel(const void *a, const void *b) { return strcmp(((const ShardFile *)a)->rel, ((const ShardFile *)b)->rel); }

/* ---- reading one shard ---- */

typedef struct {
    int64_t sample;
    const char *key, *part;
    int64_t offset, size, available; /* available < size: the shard ends inside this member */
} Member;

typedef struct {
    Member *m;
    int64_t n, cap;
    StrPool *strings;
} MemberList;

static vfm_status collect_member(void *ctx, const TarScanMember *tm) {
    MemberList *l = ctx;
    if (l->n == l->cap) {
        int64_t cap = l->cap ? 2 * l->cap : 256;
        Member *m = realloc(l->m, (size_t)cap * sizeof *m);
        if (!m) return vfm_fail(VFM_ERR_NOMEM, "length index: out of memory");
        l->m = m;
        l->cap = cap;
    }
    Member *m = &l->m[l->n];
    /* consecutive members of one sample share its key string */
    if (l->n > 0 && l->m[l->n - 1].sample == tm->sample_index) m->key = l->m[l->n - 1].key;
    else m->key = pool_dup(l->strings, tm->key, strlen(tm->key));
    m->part = pool_dup(l->strings, tm->part, strlen(tm->part));
    if (!m->key || !m->part) return vfm_fail(VFM_ERR_NOMEM, "length index: out of memory");
    m->sample = tm->sample_index;
    m->offset = tm->data_offset;
    m->size = tm->size;
    m->available = tm->available;
    l->n++;
    return VFM_OK;
}

static int read_at(int fd, void *buf, int64_t size, int64_t offset) {
    return pread_full(fd, buf, (size_t)size, (off_t)offset) == VFM_OK;
}

/* The header of an .npy part: reads its first bytes only. */
static EncodeSkip npy_header_at(int fd, const Member *m, NpyArray *a, int64_t *data_at, char *reason, size_t rn) {
    uint8_t head[12];
    size_t header_len;
    int64_t want = m->size < 12 ? m->size : 12;
    if (!read_at(fd, head, want, m->offset)) {
        snprintf(reason, rn, "%s: cannot read: %s", m->part, vfm_last_error());
        return ENC_SKIP_READ;
    }
    if (want < 10 || memcmp(head, "\x93NUMPY", 6) != 0) {
        snprintf(reason, rn, "%s: not a .npy file (bad magic)", m->part);
        return ENC_SKIP_FORMAT;
    }
    int64_t total = head[6] == 1 ? 10 + ((int64_t)head[8] | (int64_t)head[9] << 8)
                                 : 12 + ((int64_t)head[8] | (int64_t)head[9] << 8 | (int64_t)head[10] << 16 |
                                         (int64_t)head[11] << 24);
    if (total > m->size) total = m->size;
    uint8_t *buf = malloc((size_t)total);
    if (!buf || !read_at(fd, buf, total, m->offset)) {
        free(buf);
        snprintf(reason, rn, "%s: cannot read the header", m->part);
        return ENC_SKIP_READ;
    }
    vfm_status s = npy_parse_header(buf, (size_t)total, m->part, a, &header_len);
    free(buf);
    if (s != VFM_OK) {
        snprintf(reason, rn, "%s", vfm_last_error());
        return ENC_SKIP_FORMAT;
    }
    uint64_t need = (uint64_t)a->numel * (uint64_t)a->item_size;
    if (need > (uint64_t)(m->size - (int64_t)header_len)) {
        snprintf(reason, rn, "%s: truncated .npy data: %lld elements need %llu bytes, have %lld", m->part,
                 (long long)a->numel, (unsigned long long)need, (long long)(m->size - (int64_t)header_len));
        return ENC_SKIP_FORMAT;
    }
    *data_at = m->offset + (int64_t)header_len;
    return ENC_OK;
}

/* Reads a whole part (small ones: json, a safetensors latent). */
static uint8_t *read_part(int fd, const Member *m) {
    uint8_t *buf = malloc((size_t)(m->size ? m->size : 1));
    if (buf && !read_at(fd, buf, m->size, m->offset)) {
        free(buf);
        return NULL;
    }
    return buf;
}

/* Rows of text[rows, width] (.npy at data_at) up to the last non-zero row: read backwards in
 * chunks, so a text without zero padding costs one row. */
static EncodeSkip text_real_rows(int fd, const NpyArray *a, int64_t data_at, int32_t rows, int32_t width,
                                 const char *part, int32_t *real, char *reason, size_t rn) {
    *real = rows > 0 ? 1 : 0;
    if (rows <= 1) return ENC_OK;
    int64_t row_bytes = (int64_t)width * a->item_size;
    int64_t chunk = a->fortran_order ? rows : (1 << 16) / (row_bytes ? row_bytes : 1);
    if (chunk < 1) chunk = 1;
    if (chunk > rows) chunk = rows;
    uint8_t *raw = malloc((size_t)(chunk * row_bytes));
    float *f = malloc((size_t)(chunk * width) * sizeof(float));
    EncodeSkip skip = ENC_OK;
    if (!raw || !f) {
        snprintf(reason, rn, "%s: out of memory", part);
        skip = ENC_SKIP_READ;
    }
    for (int64_t hi = rows; skip == ENC_OK && hi > 0;) {
        int64_t lo = hi - chunk > 0 ? hi - chunk : 0;
        if (!read_at(fd, raw, (hi - lo) * row_bytes, data_at + lo * row_bytes)) {
            snprintf(reason, rn, "%s: cannot read: %s", part, vfm_last_error());
            skip = ENC_SKIP_READ;
            break;
        }
        NpyArray view = *a;
        view.ndim = 2;
        view.shape[0] = hi - lo;
        view.shape[1] = width;
        view.numel = (hi - lo) * width;
        view.data = raw;
        npy_to_f32(&view, f);
        int32_t last = encode_text_real_rows(f, (int32_t)(hi - lo), width);
        int nonzero = 0;
        for (int32_t c = 0; c < width && !nonzero; c++) nonzero = f[(int64_t)(last - 1) * width + c] != 0.0f;
        if (nonzero) {
            *real = (int32_t)lo + last;
            break;
        }
        hi = lo;
    }
    free(raw);
    free(f);
    return skip;
}

/* A pth / pickle part read whole and decoded: its shape, and its values (when values is not NULL;
 * caller frees). */
static EncodeSkip torch_part_at(int fd, const Member *m, int *ndim, int64_t *shape, float **values, char *reason,
                                size_t rn) {
    uint8_t *buf = m->size <= MAX_TORCH_PART_BYTES ? read_part(fd, m) : NULL;
    if (!buf) {
        snprintf(reason, rn, "%s: cannot read %lld bytes", m->part, (long long)m->size);
        return ENC_SKIP_READ;
    }
    float *data = NULL;
    EncodeSkip skip = encode_decode_part(buf, (size_t)m->size, m->part, PART_PTH, &data, ndim, shape, reason, rn);
    free(buf);
    if (skip == ENC_SKIP_COUNT) {
        snprintf(reason, rn, "%s: out of memory", m->part);
        skip = ENC_SKIP_READ;
    }
    if (values && skip == ENC_OK) *values = data;
    else free(data);
    return skip;
}

/* A torch part (pth latent, pickle text) decoded ahead: its outcome, kept for the checks in order. */
typedef struct {
    int done;
    EncodeSkip skip;
    int ndim;
    int64_t shape[VFM_MAX_DIMS];
    float *values;
    char reason[512];
} TorchAhead;

static void torch_ahead(int fd, const Member *m, int want_values, TorchAhead *t) {
    memset(t, 0, sizeof *t);
    if (m->available < m->size) return; /* truncated: the checks below name it */
    t->done = 1;
    t->skip = torch_part_at(fd, m, &t->ndim, t->shape, want_values ? &t->values : NULL, t->reason, sizeof t->reason);
}

/* Fills e (status, shape, text) for the sample whose members are m[0..n). */
static void read_sample(int fd, const Member *m, int n, LengthEntry *e, char **pixel_space, char *reason, size_t rn) {
    const char *names[256];
    int k = n < 256 ? n : 256;
    for (int i = 0; i < k; i++) names[i] = m[i].part;
    SampleParts sp;
    encode_find_parts(names, k, &sp);
    /* the torch parts first: a pickle naming a global off the allow-list is a security event, named
     * before anything else the sample gets wrong (nothing was run) */
    TorchAhead lat = {0}, txt = {0};
    if (sp.latent >= 0 && sp.latent_format == PART_PTH) torch_ahead(fd, &m[sp.latent], 0, &lat);
    if (sp.text >= 0 && sp.text_format == PART_PICKLE) torch_ahead(fd, &m[sp.text], 1, &txt);
    EncodeSkip skip = ENC_OK;
    if (lat.done && lat.skip == ENC_SKIP_REFUSED) {
        skip = ENC_SKIP_REFUSED;
        snprintf(reason, rn, "%s", lat.reason);
    } else if (txt.done && txt.skip == ENC_SKIP_REFUSED) {
        skip = ENC_SKIP_REFUSED;
        snprintf(reason, rn, "%s", txt.reason);
    }
    if (skip == ENC_OK) skip = encode_check_parts(&sp, names, reason, rn);
    for (int i = 0; i < n && skip == ENC_OK; i++)
        if (m[i].available < m[i].size) {
            snprintf(reason, rn, "the shard ends inside member '%s.%s' (%lld of its %lld bytes): truncated", m[i].key,
                     m[i].part, (long long)m[i].available, (long long)m[i].size);
            skip = ENC_SKIP_READ;
        }
    if (skip == ENC_OK && sp.json >= 0) {
        const Member *j = &m[sp.json];
        uint8_t *buf = j->size <= MAX_JSON_BYTES ? read_part(fd, j) : NULL;
        SampleMeta meta;
        if (!buf) {
            snprintf(reason, rn, "bad json: %lld bytes could not be read", (long long)j->size);
            skip = ENC_SKIP_JSON;
        } else {
            skip = encode_read_json(buf, (size_t)j->size, 30.0f, &meta, reason, rn);
            if (skip == ENC_OK) {
                if (!*pixel_space) *pixel_space = meta.pixel_space;
                else free(meta.pixel_space);
            }
        }
        free(buf);
    }
    if (skip == ENC_OK) {
        const Member *l = &m[sp.latent];
        int ndim = 0;
        int64_t shape[NPY_MAX_DIMS];
        if (sp.latent_format == PART_NPY) {
            NpyArray a;
            int64_t data_at;
            skip = npy_header_at(fd, l, &a, &data_at, reason, rn);
            ndim = a.ndim;
            memcpy(shape, a.shape, sizeof a.shape);
        } else if (sp.latent_format == PART_PTH) {
            skip = lat.skip;
            if (skip != ENC_OK) snprintf(reason, rn, "%s", lat.reason);
            ndim = lat.ndim;
            memcpy(shape, lat.shape, sizeof lat.shape);
        } else {
            uint8_t *buf = l->size <= MAX_SAFETENSORS_LATENT_BYTES ? read_part(fd, l) : NULL;
            SafetensorsFile *f = NULL;
            DType dt;
            if (!buf) {
                snprintf(reason, rn, "%s: cannot read %lld bytes", l->part, (long long)l->size);
                skip = ENC_SKIP_READ;
            } else if (safetensors_open_memory(&f, buf, (size_t)l->size, l->part) != VFM_OK) {
                snprintf(reason, rn, "%s", vfm_last_error());
                skip = ENC_SKIP_FORMAT;
            } else if (safetensors_count(f) != 1) {
                snprintf(reason, rn, "%s holds %d tensors, expected one", l->part, safetensors_count(f));
                skip = ENC_SKIP_FORMAT;
            } else {
                safetensors_info(f, 0, &dt, &ndim, shape);
            }
            safetensors_close(f);
            free(buf);
        }
        if (skip == ENC_OK) skip = encode_latent_shape(ndim, shape, e->shape, reason, rn);
    }
    if (skip == ENC_OK && sp.text >= 0 && sp.text_format == PART_PICKLE) {
        skip = txt.skip;
        if (skip != ENC_OK) snprintf(reason, rn, "%s", txt.reason);
        if (skip == ENC_OK) skip = encode_text_shape(txt.ndim, txt.shape, &e->text_len, &e->text_width, reason, rn);
        if (skip == ENC_OK)
            e->text_real = e->text_len > 0 ? encode_text_real_rows(txt.values, e->text_len, e->text_width) : 0;
    } else if (skip == ENC_OK && sp.text >= 0) {
        const Member *t = &m[sp.text];
        NpyArray a;
        int64_t data_at;
        skip = npy_header_at(fd, t, &a, &data_at, reason, rn);
        if (skip == ENC_OK) skip = encode_text_shape(a.ndim, a.shape, &e->text_len, &e->text_width, reason, rn);
        if (skip == ENC_OK)
            skip = text_real_rows(fd, &a, data_at, e->text_len, e->text_width, t->part, &e->text_real, reason, rn);
    }
    free(txt.values);
    e->status = skip;
}

/* Where a shard's members may be found without reading its tar headers: Energon's index.sqlite
 * (tar_file_id from .info.json). */
typedef struct {
    char sqlite_path[1200];
    const EnergonMeta *info; /* NULL when the dataset has no .nv-meta/index.sqlite */
} MemberSource;

/* The shard's members from index.sqlite when it lists this shard and agrees with the shard's
 * .tar.idx, else from its tar headers. */
static vfm_status collect_members(const MemberSource *ms, const char *rel, const char *path, const TarShard *sh,
                                  MemberList *ml, int64_t *n_samples) {
    int id = ms->info ? energon_shard_id(ms->info, rel) : -1;
    if (id >= 0) {
        int64_t n_idx;
        const uint64_t *idx = tar_shard_index(sh, &n_idx);
        if (energon_sqlite_scan(ms->sqlite_path, id, idx, n_idx, collect_member, ml) == VFM_OK) {
            *n_samples = n_idx - 1;
            return VFM_OK;
        }
        log_info("length index: %s: %s; reading the shard's headers instead", rel, vfm_last_error());
        vfm_clear_error();
        ml->n = 0;
    }
    return tar_scan(path, collect_member, ml, n_samples, NULL);
}

static void read_shard(const char *root, const MemberSource *ms, ShardRecord *rec) {
    char path[2200];
    snprintf(path, sizeof path, "%s/%s", root, rec->rel);
    TarShard *sh = NULL;
    MemberList ml = {NULL, 0, 0, &rec->strings};
    int64_t n_samples = 0;
    int fd = -1;
    /* opening writes the shard's .tar.idx when it has none (the loader and Energon use it) */
    vfm_status s = tar_shard_open(&sh, path);
    int64_t expect = s == VFM_OK ? tar_shard_num_samples(sh) : 0;
    if (s == VFM_OK) s = collect_members(ms, rec->rel, path, sh, &ml, &n_samples);
    tar_shard_close(sh);
    if (s == VFM_OK && n_samples != expect)
        s = vfm_fail(VFM_ERR_FORMAT, "%s: its .tar.idx lists %lld samples, the shard holds %lld", path,
                     (long long)expect, (long long)n_samples);
    if (s == VFM_OK && (fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
        s = vfm_fail(VFM_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    if (s != VFM_OK) {
        rec->error = strdup(vfm_last_error());
        free(ml.m);
        return;
    }
    char reason[512];
    for (int64_t i = 0; i < ml.n;) {
        int64_t j = i;
        while (j < ml.n && ml.m[j].sample == ml.m[i].sample) j++;
        LengthEntry *e = record_add(rec);
        if (!e) {
            rec->error = strdup("out of memory");
            break;
        }
        e->index = (int32_t)ml.m[i].sample;
        e->key = ml.m[i].key;
        reason[0] = 0;
        read_sample(fd, &ml.m[i], (int)(j - i), e, &rec->pixel_space, reason, sizeof reason);
        if (e->status != ENC_OK) e->reason = pool_dup(&rec->strings, reason, strlen(reason));
        i = j;
    }
    close(fd);
    free(ml.m);
}

/* ---- the cache file ---- */

static void put_u64(ByteBuf *b, uint64_t v) {
    uint8_t x[8];
    for (int i = 0; i < 8; i++) x[i] = (uint8_t)(v >> (8 * i));
    bytebuf_put(b, x, 8);
}
static void put_u32(ByteBuf *b, uint32_t v) {
    uint8_t x[4];
    for (int i = 0; i < 4; i++) x[i] = (uint8_t)(v >> (8 * i));
    bytebuf_put(b, x, 4);
}
static void put_str(ByteBuf *b, const char *s) {
    uint32_t n = s ? (uint32_t)strlen(s) : 0;
    put_u32(b, n);
    if (n) bytebuf_put(b, s, n);
}

typedef struct {
    const uint8_t *p, *end;
    int bad;
} Cursor;

static uint64_t get_u64(Cursor *c) {
    if (c->end - c->p < 8) {
        c->bad = 1;
        return 0;
    }
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)c->p[i] << (8 * i);
    c->p += 8;
    return v;
}
static uint32_t get_u32(Cursor *c) {
    if (c->end - c->p < 4) {
        c->bad = 1;
        return 0;
    }
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)c->p[i] << (8 * i);
    c->p += 4;
    return v;
}
/* A string: NULL when empty (or bad); copied into the pool, or malloc'd when pool is NULL. */
static const char *get_str(Cursor *c, StrPool *pool, char **owned) {
    uint32_t n = get_u32(c);
    if (c->bad || n == 0) return NULL;
    if ((size_t)(c->end - c->p) < n) {
        c->bad = 1;
        return NULL;
    }
    const char *s;
    if (pool) {
        s = pool_dup(pool, (const char *)c->p, n);
    } else {
        *owned = strndup((const char *)c->p, n);
        s = *owned;
    }
    if (!s) c->bad = 1;
    c->p += n;
    return s;
}

static vfm_status write_cache(const char *path, ShardRecord *recs, int n) {
    ByteBuf b = {0};
    bytebuf_put(&b, CACHE_MAGIC, 8);
    put_u32(&b, CACHE_VERSION);
    put_u32(&b, (uint32_t)n);
    for (int i = 0; i < n; i++) {
        ShardRecord *r = &recs[i];
        put_str(&b, r->rel);
        put_u64(&b, (uint64_t)r->size);
        put_u64(&b, (uint64_t)r->mtime_ns);
        put_str(&b, r->error);
        put_str(&b, r->pixel_space);
        put_u32(&b, (uint32_t)r->count);
        for (int64_t k = 0; k < r->count; k++) {
            LengthEntry *e = &r->entries[k];
            put_str(&b, e->key);
            int32_t v[9] = {e->index, e->shape[0], e->shape[1], e->shape[2], e->shape[3],
                            e->text_width, e->text_len, e->text_real, e->status};
            for (int q = 0; q < 9; q++) put_u32(&b, (uint32_t)v[q]);
            put_str(&b, e->reason);
        }
    }
    if (!b.failed) put_u64(&b, hash_bytes64(b.data, b.len, 0));
    vfm_status s = b.failed ? vfm_fail(VFM_ERR_NOMEM, "length index: out of memory") : VFM_OK;
    char dir[1200];
    path_dirname(dir, sizeof dir, path);
    if (s == VFM_OK) s = mkdir_p(dir);
    if (s == VFM_OK) s = write_file_atomic(path, b.data, b.len);
    free(b.data);
    return s;
}

/* Reads the cache into recs (sorted by rel as written); 0 records when it is absent or invalid. */
static void read_cache(const char *path, ShardRecord **out, int *n_out) {
    *out = NULL;
    *n_out = 0;
    char *data = NULL;
    size_t size = 0;
    if (!path_exists(path) || read_file_all(path, &data, &size) != VFM_OK) {
        vfm_clear_error();
        return;
    }
    Cursor c = {(const uint8_t *)data, (const uint8_t *)data + size, 0};
    ShardRecord *recs = NULL;
    int n = 0;
    const char *why = NULL;
    if (size < 24 || memcmp(data, CACHE_MAGIC, 8) != 0) why = "not a vfm length index";
    if (!why) {
        Cursor tail = {c.end - 8, c.end, 0};
        c.end -= 8;
        if (hash_bytes64(data, size - 8, 0) != get_u64(&tail)) why = "checksum mismatch";
    }
    if (!why) {
        c.p += 8;
        if (get_u32(&c) != CACHE_VERSION) why = "another version";
    }
    if (!why) {
        n = (int)get_u32(&c);
        recs = calloc((size_t)(n ? n : 1), sizeof *recs);
        for (int i = 0; recs && i < n && !c.bad; i++) {
            ShardRecord *r = &recs[i];
            get_str(&c, NULL, &r->rel);
            r->size = (int64_t)get_u64(&c);
            r->mtime_ns = (int64_t)get_u64(&c);
            get_str(&c, NULL, &r->error);
            get_str(&c, NULL, &r->pixel_space);
            int64_t count = get_u32(&c);
            if (!r->rel || count > (int64_t)(c.end - c.p) / 40) c.bad = 1; /* a sample takes >= 44 bytes */
            for (int64_t k = 0; k < count && !c.bad; k++) {
                LengthEntry *e = record_add(r);
                if (!e) {
                    c.bad = 1;
                    break;
                }
                e->key = get_str(&c, &r->strings, NULL);
                int32_t v[9];
                for (int q = 0; q < 9; q++) v[q] = (int32_t)get_u32(&c);
                e->index = v[0];
                memcpy(e->shape, v + 1, sizeof e->shape);
                e->text_width = v[5], e->text_len = v[6], e->text_real = v[7], e->status = v[8];
                e->reason = get_str(&c, &r->strings, NULL);
                if (!e->key || e->status < 0 || e->status >= ENC_SKIP_COUNT || (e->status != ENC_OK && !e->reason))
                    c.bad = 1;
            }
            r->from_cache = 1;
        }
        if (!recs || c.bad || c.p != c.end) why = "malformed";
    }
    if (why) {
        log_info("length index: ignoring %s (%s); rebuilding it", path, why);
        for (int i = 0; recs && i < n; i++) record_free(&recs[i]);
        free(recs);
        recs = NULL;
        n = 0;
    }
    free(data);
    *out = recs;
    *n_out = n;
}

/* ---- building ---- */

typedef struct {
    const char *root;
    const MemberSource *ms;
    ShardRecord *recs;
    int n;
    int next;
    pthread_mutex_t mu;
} ReadJob;

static void *read_worker(void *arg) {
    ReadJob *job = arg;
    for (;;) {
        pthread_mutex_lock(&job->mu);
        int i = job->next;
        while (i < job->n && job->recs[i].from_cache) i++;
        job->next = i + 1;
        pthread_mutex_unlock(&job->mu);
        if (i >= job->n) break;
        read_shard(job->root, job->ms, &job->recs[i]);
    }
    return NULL;
}

vfm_status length_index_open(LengthIndex **out, const char *root, int force_rebuild, int threads) {
    *out = NULL;
    struct stat st;
    if (stat(root, &st) != 0 || !S_ISDIR(st.st_mode))
        return vfm_fail_at(VFM_ERR_USAGE, NULL, "dataset.path", root, "is not a directory");
    ShardList list = {0};
    vfm_status s = walk_files(root, add_shard, &list);
    if (s == VFM_OK && list.n == 0)
        s = vfm_fail_at(VFM_ERR_USAGE, NULL, "dataset.path", root, "holds no .tar shards");
    if (s != VFM_OK) {
        list_free(&list);
        return s;
    }
    qsort(list.f, (size_t)list.n, sizeof *list.f, by_rel);
    ShardRecord *recs = calloc((size_t)list.n, sizeof *recs);
    LengthIndex *li = calloc(1, sizeof *li);
    if (!recs || !li) {
        free(recs);
        free(li);
        list_free(&list);
        return vfm_fail(VFM_ERR_NOMEM, "length index: out of memory");
    }
    snprintf(li->root, sizeof li->root, "%s", root);
    snprintf(li->cache_path, sizeof li->cache_path, "%s/.vfm/length_index.bin", root);

    ShardRecord *cached = NULL;
    int n_cached = 0;
    if (!force_rebuild) read_cache(li->cache_path, &cached, &n_cached);
    int changed = force_rebuild || n_cached != list.n, to_read = 0;
    for (int i = 0, c = 0; i < list.n; i++) {
        const ShardFile *f = &list.f[i];
        ShardRecord *r = &recs[i];
        while (c < n_cached && strcmp(cached[c].rel, f->rel) < 0) c++;
        if (c < n_cached && strcmp(cached[c].rel, f->rel) == 0 && cached[c].size == f->size &&
            cached[c].mtime_ns == f->mtime_ns) {
            *r = cached[c];
            memset(&cached[c], 0, sizeof cached[c]);
            c++;
            continue;
        }
        r->rel = strdup(f->rel);
        r->size = f->size;
        r->mtime_ns = f->mtime_ns;
        changed = 1;
        to_read++;
    }
    int n = list.n;
    for (int c = 0; c < n_cached; c++) record_free(&cached[c]);
    free(cached);
    list_free(&list);

    if (to_read > 0) {
        log_info("length index: reading %d of %d shards under %s", to_read, n, root);
        MemberSource ms = {{0}, NULL};
        EnergonMeta *info = NULL;
        snprintf(ms.sqlite_path, sizeof ms.sqlite_path, "%s/%s/index.sqlite", root, ENERGON_META_DIR);
        if (path_exists(ms.sqlite_path) && energon_meta_read_info(&info, root) == VFM_OK && info->has_info) ms.info = info;
        vfm_clear_error();
        ReadJob job = {root, &ms, recs, n, 0, PTHREAD_MUTEX_INITIALIZER};
        int nt = threads < 1 ? 1 : threads > to_read ? to_read : threads;
        pthread_t tid[64];
        if (nt > 64) nt = 64;
        int started = 0;
        for (int t = 1; t < nt; t++)
            if (pthread_create(&tid[started], NULL, read_worker, &job) == 0) started++;
        read_worker(&job);
        for (int t = 0; t < started; t++) pthread_join(tid[t], NULL);
        energon_meta_free(info);
    }
    li->shards_read = to_read;

    /* assemble */
    int64_t total = 0;
    for (int i = 0; i < n; i++) total += recs[i].count;
    li->n_shards = n;
    li->shards = calloc((size_t)(n > 0 ? n : 1), sizeof *li->shards);
    li->samples = calloc((size_t)(total ? total : 1), sizeof *li->samples);
    StrPool *strings = calloc(1, sizeof *strings);
    li->strings = strings;
    if (!li->shards || !li->samples || !strings) {
        for (int i = 0; i < n; i++) record_free(&recs[i]);
        free(recs);
        length_index_free(li);
        return vfm_fail(VFM_ERR_NOMEM, "length index: out of memory");
    }
    if (changed) s = write_cache(li->cache_path, recs, n);
    if (!changed) li->origin = LENGTH_INDEX_LOADED;
    else if (s == VFM_OK) li->origin = LENGTH_INDEX_WRITTEN;
    else {
        log_info("length index: kept in memory (%s)", vfm_last_error());
        vfm_clear_error();
        li->origin = LENGTH_INDEX_MEMORY;
    }
    int64_t at = 0;
    for (int i = 0; i < n; i++) {
        ShardRecord *r = &recs[i];
        LengthShard *sh = &li->shards[i];
        sh->rel = r->rel;
        sh->size = r->size;
        sh->mtime_ns = r->mtime_ns;
        sh->error = r->error;
        sh->pixel_space = r->pixel_space;
        sh->first = at;
        sh->count = r->count;
        for (int64_t k = 0; k < r->count; k++) {
            li->samples[at + k] = r->entries[k];
            li->samples[at + k].shard = i;
        }
        at += r->count;
        free(r->entries);
        pool_take(strings, &r->strings);
    }
    li->n_samples = total;
    free(recs);
    *out = li;
    return VFM_OK;
}

void length_index_free(LengthIndex *li) {
    if (!li) return;
    for (int i = 0; li->shards && i < li->n_shards; i++) {
        free(li->shards[i].rel);
        free(li->shards[i].error);
        free(li->shards[i].pixel_space);
    }
    free(li->shards);
    free(li->samples);
    if (li->strings) pool_free(li->strings);
    free(li->strings);
    free(li);
}

const char *length_index_pixel_space(const LengthIndex *li) {
    for (int i = 0; i < li->n_shards; i++)
        if (li->shards[i].pixel_space) return li->shards[i].pixel_space;
    return NULL;
}

const char *length_index_shard_of(const LengthIndex *li, int64_t i) { return li->shards[li->samples[i].shard].rel; }
