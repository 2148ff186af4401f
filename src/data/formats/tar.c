/* Tar shard reading and writing: header parsing (ustar, old GNU, pax), Energon's member grouping,
 * the `.tar.idx` sample index (build, validate, cache), random sample reads with pread, and the
 * deterministic shard writer. Offsets follow Python's tarfile, which Energon's prepare uses:
 * a member's offset is that of its first pax 'x' / GNU 'L'/'K' pre-header; a pax global 'g'
 * header belongs to no member. */
#include "data/formats/tar.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/log.h"

#define TAR_BLOCK 512
#define TAR_MAX_EXT_HEADER (1 << 20) /* pax / GNU long-name payloads larger than this are refused */

static int64_t round_up_block(int64_t n) { return (n + TAR_BLOCK - 1) / TAR_BLOCK * TAR_BLOCK; }

/* ---------------------------------------------------------------- grouping */

int tar_split_name(const char *name, size_t *key_len) {
    /* Energon's split_name_re, ^((?:.* / |)[^.]+)[.]([^/]*)$ without the spaces: the dot is the first one of the file name when the file name
     * does not start with one; a file name starting with a dot splits at that dot when the
     * directory's last component is free of dots ("x/y/.z" -> "x/y/" + "z"). */
    const char *slash = strrchr(name, '/');
    const char *file = slash ? slash + 1 : name;
    const char *dot = strchr(file, '.');
    if (!dot) return 0;
    if (dot > file) {
        *key_len = (size_t)(dot - name);
        return 1;
    }
    if (!slash) return 0;
    const char *component = slash; /* start of the directory's last component */
    while (component > name && component[-1] != '/') component--;
    for (const char *c = component; c < slash; c++)
        if (*c == '.') return 0;
    *key_len = (size_t)(dot - name);
    return 1;
}

int tar_is_meta_name(const char *name) {
    if (name[0] != '_' || name[1] != '_') return 0;
    size_t len = strcspn(name, "/");
    return len >= 4 && name[len - 1] == '_' && name[len - 2] == '_';
}

/* ---------------------------------------------------------------- header parsing */

/* Bytes [base, end) of a shard: read with pread from fd, or from memory when mem is set. */
typedef struct {
    const char *path;
    int fd;
    const uint8_t *mem;
    int64_t base, end;
} TarSource;

static vfm_status source_read(const TarSource *src, int64_t offset, void *dst, size_t n) {
    if (src->mem) {
        memcpy(dst, src->mem + (offset - src->base), n);
        return VFM_OK;
    }
    size_t done = 0;
    while (done < n) {
        ssize_t got = pread(src->fd, (char *)dst + done, n - done, (off_t)(offset + (int64_t)done));
        if (got < 0) {
            if (errno == EINTR) continue;
            return vfm_fail(VFM_ERR_IO, "%s: read at byte offset %" PRId64 ": %s", src->path, offset, strerror(errno));
        }
        if (got == 0)
            return vfm_fail(VFM_ERR_FORMAT, "%s: unexpected end of file at byte offset %" PRId64, src->path,
                            offset + (int64_t)done);
        done += (size_t)got;
    }
    return VFM_OK;
}

/* One member after its pre-headers were applied. */
typedef struct {
    int64_t header_offset; /* first pre-header, or the member's own header */
    int64_t data_offset, size, next_offset;
    char type; /* typeflag; an old-style regular entry whose name ends in '/' reads as '5' */
    int end;   /* end of archive (zero block or end of data) at header_offset */
    int cut;   /* set with the "runs past the end" error: the header is whole, the payload is not */
    char *name;
    size_t name_cap;
} TarEntry;

static vfm_status entry_set_name(TarEntry *e, const char *s, size_t n) {
    if (n + 1 > e->name_cap) {
        size_t cap = n + 1 > 256 ? n + 1 : 256;
        char *p = realloc(e->name, cap);
        if (!p) return vfm_fail(VFM_ERR_NOMEM, "tar: out of memory for a %zu-byte name", n);
        e->name = p;
        e->name_cap = cap;
    }
    memcpy(e->name, s, n);
    e->name[n] = 0;
    return VFM_OK;
}

/* Python tarfile's nti(): base-256 when the first byte is 0x80 or 0xff, else octal text up to the
 * first NUL with surrounding whitespace allowed. Returns 0 on success. */
static int parse_number(const uint8_t *field, size_t n, int64_t *out) {
    if (field[0] == 0x80 || field[0] == 0xff) {
        uint64_t v = field[0] == 0xff ? UINT64_MAX : 0;
        for (size_t i = 1; i < n; i++) {
            if ((field[0] == 0x80 && (v >> 56) != 0) || (field[0] == 0xff && (v >> 56) != 0xff)) return -1;
            v = (v << 8) | field[i];
        }
        *out = (int64_t)v;
        return 0;
    }
    size_t len = 0;
    while (len < n && field[len]) len++;
    size_t a = 0, b = len;
    while (a < b && (field[a] == ' ' || (field[a] >= '\t' && field[a] <= '\r'))) a++;
    while (b > a && (field[b - 1] == ' ' || (field[b - 1] >= '\t' && field[b - 1] <= '\r'))) b--;
    int64_t v = 0;
    for (size_t i = a; i < b; i++) {
        if (field[i] < '0' || field[i] > '7') return -1;
        if (v > (INT64_MAX >> 3)) return -1;
        v = v * 8 + (field[i] - '0');
    }
    *out = v;
    return 0;
}

static int block_is_zero(const uint8_t *b) {
    for (int i = 0; i < TAR_BLOCK; i++)
        if (b[i]) return 0;
    return 1;
}

/* Parses pax records "LEN key=value\n" for path= and size=. */
static vfm_status parse_pax(const TarSource *src, int64_t offset, const uint8_t *data, int64_t n, TarEntry *e,
                            int *have_name, int *have_size, int64_t *pax_size) {
    int64_t pos = 0;
    while (pos < n) {
        if (data[pos] == 0) break; /* NUL padding after the last record */
        int64_t len = 0, i = pos;
        while (i < n && data[i] >= '0' && data[i] <= '9' && len <= n) len = len * 10 + (data[i++] - '0');
        if (i >= n || data[i] != ' ' || len <= i - pos + 1 || pos + len > n || data[pos + len - 1] != '\n')
            return vfm_fail(VFM_ERR_FORMAT, "%s: byte offset %" PRId64 ": malformed pax record", src->path, offset);
        const uint8_t *kv = data + i + 1, *rec_end = data + pos + len - 1;
        const uint8_t *eq = memchr(kv, '=', (size_t)(rec_end - kv));
        if (!eq)
            return vfm_fail(VFM_ERR_FORMAT, "%s: byte offset %" PRId64 ": pax record without '='", src->path, offset);
        size_t klen = (size_t)(eq - kv);
        const uint8_t *val = eq + 1;
        size_t vlen = (size_t)(rec_end - val);
        if (klen == 4 && !memcmp(kv, "path", 4) && !*have_name) {
            VFM_TRY(entry_set_name(e, (const char *)val, vlen));
            *have_name = 1;
        } else if (klen == 4 && !memcmp(kv, "size", 4) && !*have_size) {
            int64_t v = 0;
            if (vlen == 0 || vlen > 18)
                return vfm_fail(VFM_ERR_FORMAT, "%s: byte offset %" PRId64 ": bad pax size", src->path, offset);
            for (size_t k = 0; k < vlen; k++) {
                if (val[k] < '0' || val[k] > '9')
                    return vfm_fail(VFM_ERR_FORMAT, "%s: byte offset %" PRId64 ": bad pax size", src->path, offset);
                v = v * 10 + (val[k] - '0');
            }
            *pax_size = v;
            *have_size = 1;
        }
        pos += len;
    }
    return VFM_OK;
}

/* Reads the member whose (pre-)headers start at offset. */
static vfm_status next_entry(const TarSource *src, int64_t offset, TarEntry *e) {
    uint8_t block[TAR_BLOCK];
    int have_name = 0, have_size = 0;
    int64_t pax_size = 0;
    e->header_offset = -1;
    e->end = 0;
    e->cut = 0;
    for (;;) {
        if (offset == src->end) goto end_of_archive;
        if (src->end - offset < TAR_BLOCK)
            return vfm_fail(VFM_ERR_FORMAT, "%s: truncated header at byte offset %" PRId64 " (file ends at %" PRId64 ")",
                            src->path, offset, src->end);
        VFM_TRY(source_read(src, offset, block, TAR_BLOCK));
        if (block_is_zero(block)) goto end_of_archive;

        int64_t stored_sum;
        if (parse_number(block + 148, 8, &stored_sum))
            return vfm_fail(VFM_ERR_FORMAT, "%s: byte offset %" PRId64 ": not a tar header (bad checksum field)",
                            src->path, offset);
        int64_t sum_unsigned = 0, sum_signed = 0;
        for (int i = 0; i < TAR_BLOCK; i++) {
            uint8_t c = (i >= 148 && i < 156) ? ' ' : block[i];
            sum_unsigned += c;
            sum_signed += (int8_t)c;
        }
        if (stored_sum != sum_unsigned && stored_sum != sum_signed)
            return vfm_fail(VFM_ERR_FORMAT,
                            "%s: byte offset %" PRId64 ": header checksum mismatch (stored %" PRId64 ", computed %" PRId64 ")",
                            src->path, offset, stored_sum, sum_unsigned);
        int64_t size;
        if (parse_number(block + 124, 12, &size) || size < 0)
            return vfm_fail(VFM_ERR_FORMAT, "%s: byte offset %" PRId64 ": bad size field", src->path, offset);
        char type = (char)block[156];

        if (type == 'L' || type == 'K' || type == 'x' || type == 'X' || type == 'g') {
            int64_t data_end = offset + TAR_BLOCK + round_up_block(size);
            if (size > TAR_MAX_EXT_HEADER)
                return vfm_fail(VFM_ERR_FORMAT, "%s: byte offset %" PRId64 ": extended header of %" PRId64 " bytes",
                                src->path, offset, size);
            if (data_end > src->end)
                return vfm_fail(VFM_ERR_FORMAT, "%s: byte offset %" PRId64 ": extended header runs past the end (%" PRId64 ")",
                                src->path, offset, src->end);
            if (type != 'g' && e->header_offset < 0) e->header_offset = offset;
            int wants_name = type == 'L' && !have_name;
            int is_pax = type == 'x' || type == 'X';
            if (wants_name || is_pax) {
                uint8_t *data = malloc((size_t)size + 1);
                if (!data) return vfm_fail(VFM_ERR_NOMEM, "%s: out of memory", src->path);
                vfm_status s = source_read(src, offset + TAR_BLOCK, data, (size_t)size);
                if (s == VFM_OK && wants_name) {
                    data[size] = 0;
                    s = entry_set_name(e, (const char *)data, strlen((const char *)data));
                    have_name = 1;
                } else if (s == VFM_OK) {
                    s = parse_pax(src, offset, data, size, e, &have_name, &have_size, &pax_size);
                }
                free(data);
                VFM_TRY(s);
            }
            offset = data_end;
            continue;
        }

        if (e->header_offset < 0) e->header_offset = offset;
        if (type == 'S')
            return vfm_fail(VFM_ERR_UNSUPPORTED, "%s: byte offset %" PRId64 ": GNU sparse members are not supported",
                            src->path, offset);
        const char *field = (const char *)block;
        size_t name_len = strnlen(field, 100);
        if (type == 0 && name_len > 0 && field[name_len - 1] == '/') type = '5';
        if (!have_name) {
            const char *prefix = (const char *)block + 345;
            size_t prefix_len = memcmp(block + 257, "ustar\0", 6) == 0 ? strnlen(prefix, 155) : 0;
            if (prefix_len) {
                char joined[257];
                memcpy(joined, prefix, prefix_len);
                joined[prefix_len] = '/';
                memcpy(joined + prefix_len + 1, field, name_len);
                VFM_TRY(entry_set_name(e, joined, prefix_len + 1 + name_len));
            } else {
                VFM_TRY(entry_set_name(e, field, name_len));
            }
        }
        if (have_size) size = pax_size;
        int has_data = !(type >= '1' && type <= '6');
        e->type = type;
        e->size = size;
        e->data_offset = offset + TAR_BLOCK;
        e->next_offset = e->data_offset + (has_data ? round_up_block(size) : 0);
        int64_t payload_end = e->data_offset + (has_data ? size : 0);
        if (e->next_offset > src->end && payload_end <= src->end && payload_end >= e->data_offset)
            e->next_offset = src->end; /* only the padding after a whole payload is missing */
        e->cut = e->next_offset > src->end && e->next_offset >= e->data_offset;
        if (e->next_offset > src->end || e->next_offset < e->data_offset)
            return vfm_fail(VFM_ERR_FORMAT,
                            "%s: byte offset %" PRId64 ": member '%s' of %" PRId64 " bytes runs past the end (%" PRId64 ")",
                            src->path, offset, e->name, size, src->end);
        return VFM_OK;
    }
end_of_archive:
    if (e->header_offset >= 0)
        return vfm_fail(VFM_ERR_FORMAT, "%s: byte offset %" PRId64 ": extended header without a member", src->path,
                        e->header_offset);
    e->end = 1;
    e->header_offset = offset;
    return VFM_OK;
}

static int entry_is_regular(const TarEntry *e) { return e->type == '0' || e->type == 0 || e->type == '7'; }

/* A member that belongs to a sample: a regular file, not meta, named key.part (*key_len set). */
static int entry_is_kept(const TarEntry *e, size_t *key_len) {
    return entry_is_regular(e) && !tar_is_meta_name(e->name) && tar_split_name(e->name, key_len);
}

/* ---------------------------------------------------------------- scanning */

vfm_status tar_scan(const char *path, TarScanFn fn, void *ctx, int64_t *num_samples, int64_t *end_offset) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return vfm_fail(VFM_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return vfm_fail(VFM_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
    }
    if (st.st_size == 0) {
        close(fd);
        return vfm_fail(VFM_ERR_FORMAT, "%s: empty file", path);
    }
    TarSource src = {path, fd, NULL, 0, (int64_t)st.st_size};
    TarEntry e = {0};
    char *last_key = NULL;
    size_t last_cap = 0;
    int64_t samples = 0, offset = 0;
    vfm_status s = VFM_OK;
    int cut = 0;
    for (;;) {
        s = next_entry(&src, offset, &e);
        cut = s != VFM_OK && e.cut; /* the file ends inside this member's payload */
        if (cut) {
            log_debug("%s", vfm_last_error());
            vfm_clear_error();
            s = VFM_OK;
        }
        if (s != VFM_OK || e.end) break;
        size_t key_len;
        if (entry_is_kept(&e, &key_len)) {
            e.name[key_len] = 0; /* the key and the part, split in place */
            if (samples == 0 || strcmp(last_key, e.name) != 0) {
                if (key_len + 1 > last_cap) {
                    char *p = realloc(last_key, key_len + 1);
                    if (!p) {
                        s = vfm_fail(VFM_ERR_NOMEM, "%s: out of memory", path);
                        break;
                    }
                    last_key = p;
                    last_cap = key_len + 1;
                }
                memcpy(last_key, e.name, key_len + 1);
                samples++;
            }
            if (fn) {
                int64_t available = cut ? src.end - e.data_offset : e.size;
                if (available > e.size) available = e.size; /* cut in the padding after the payload */
                TarScanMember m = {samples - 1, e.name, e.name + key_len + 1, e.header_offset, e.data_offset, e.size,
                                   available};
                s = fn(ctx, &m);
                if (s != VFM_OK) break;
            }
        }
        if (cut) break;
        offset = e.next_offset;
    }
    if (s == VFM_OK) {
        if (num_samples) *num_samples = samples;
        if (end_offset) *end_offset = cut ? src.end : e.header_offset;
    }
    free(e.name);
    free(last_key);
    close(fd);
    return s;
}

/* ---------------------------------------------------------------- the index */

struct TarShard {
    char *path;
    int fd;
    int64_t file_size;
    int64_t num_samples;
    uint64_t *index; /* num_samples + 1 entries */
    int cached;
};

void tar_index_path(const char *shard_path, char *out, size_t n) {
    /* pathlib's with_suffix(".tar.idx"): replaces the file name's last suffix, if any */
    const char *slash = strrchr(shard_path, '/');
    const char *file = slash ? slash + 1 : shard_path;
    const char *dot = strrchr(file, '.');
    size_t stem = (dot && dot > file) ? (size_t)(dot - shard_path) : strlen(shard_path);
    snprintf(out, n, "%.*s.tar.idx", (int)stem, shard_path);
}

typedef struct {
    uint64_t *offsets;
    int64_t count, cap;
} OffsetList;

static vfm_status offsets_push(OffsetList *l, uint64_t v) {
    if (l->count == l->cap) {
        int64_t cap = l->cap ? 2 * l->cap : 64;
        uint64_t *p = realloc(l->offsets, (size_t)cap * sizeof *p);
        if (!p) return vfm_fail(VFM_ERR_NOMEM, "tar index: out of memory");
        l->offsets = p;
        l->cap = cap;
    }
    l->offsets[l->count++] = v;
    return VFM_OK;
}

static vfm_status index_on_member(void *ctx, const TarScanMember *m) {
    OffsetList *l = ctx;
    if (m->sample_index == l->count) return offsets_push(l, (uint64_t)m->header_offset);
    return VFM_OK;
}

static void put_le64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint64_t get_le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static int write_all(int fd, const void *data, size_t n) {
    size_t done = 0;
    while (done < n) {
        ssize_t w = write(fd, (const char *)data + done, n - done);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        done += (size_t)w;
    }
    return 0;
}

/* Writes `<shard>.tar.idx` through a temporary file and a rename. Returns 0 on success; on failure
 * (read-only directory and the like) leaves nothing behind and returns -1 with errno set. */
static int write_index_file(const char *shard_path, const uint64_t *index, int64_t count, mode_t shard_mode) {
    char idx_path[4096], tmp_path[4160];
    tar_index_path(shard_path, idx_path, sizeof idx_path);
    snprintf(tmp_path, sizeof tmp_path, "%s.tmp.XXXXXX", idx_path);
    int fd = mkstemp(tmp_path);
    if (fd < 0) return -1;
    uint8_t *bytes = malloc((size_t)count * 8);
    int rc = bytes ? 0 : -1;
    if (!bytes) errno = ENOMEM;
    for (int64_t i = 0; rc == 0 && i < count; i++) put_le64(bytes + 8 * i, index[i]);
    if (rc == 0) rc = write_all(fd, bytes, (size_t)count * 8);
    if (rc == 0) rc = fchmod(fd, (shard_mode & 0666) | 0600);
    if (rc == 0) rc = fsync(fd);
    int saved = errno;
    free(bytes);
    if (close(fd) != 0 && rc == 0) rc = -1, saved = errno;
    if (rc == 0 && rename(tmp_path, idx_path) != 0) rc = -1, saved = errno;
    if (rc != 0) {
        unlink(tmp_path);
        errno = saved;
    }
    return rc;
}

/* Loads `<shard>.tar.idx` when it exists and fits the file: entries block-aligned and increasing,
 * the last one at the end of the file or at a zero block. Returns 1 when loaded. */
static int load_cached_index(TarShard *sh) {
    char idx_path[4096];
    tar_index_path(sh->path, idx_path, sizeof idx_path);
    int fd = open(idx_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    struct stat st;
    int ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size >= 8 && st.st_size % 8 == 0;
    uint8_t *bytes = ok ? malloc((size_t)st.st_size) : NULL;
    int64_t count = ok ? (int64_t)st.st_size / 8 : 0;
    ok = ok && bytes && pread(fd, bytes, (size_t)st.st_size, 0) == (ssize_t)st.st_size;
    close(fd);
    uint64_t *index = ok ? malloc((size_t)count * sizeof *index) : NULL;
    ok = ok && index;
    for (int64_t i = 0; ok && i < count; i++) {
        index[i] = get_le64(bytes + 8 * i);
        if (i < count - 1 && index[i] % TAR_BLOCK != 0) ok = 0;
        if (i > 0 && index[i] <= index[i - 1]) ok = 0;
    }
    free(bytes);
    if (ok) {
        uint64_t last = index[count - 1];
        if (last > (uint64_t)sh->file_size) {
            ok = 0;
        } else if (last < (uint64_t)sh->file_size) {
            uint8_t block[TAR_BLOCK];
            ok = (uint64_t)sh->file_size - last >= TAR_BLOCK && pread(sh->fd, block, TAR_BLOCK, (off_t)last) == TAR_BLOCK &&
                 block_is_zero(block);
        }
    }
    if (!ok) {
        free(index);
        log_debug("%s: ignoring %s (does not match the shard); rebuilding", sh->path, idx_path);
        return 0;
    }
    sh->index = index;
    sh->num_samples = count - 1;
    return 1;
}

vfm_status tar_shard_open(TarShard **out, const char *path) {
    *out = NULL;
    TarShard *sh = calloc(1, sizeof *sh);
    if (!sh || !(sh->path = strdup(path))) {
        free(sh);
        return vfm_fail(VFM_ERR_NOMEM, "%s: out of memory", path);
    }
    sh->fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (sh->fd < 0 || fstat(sh->fd, &st) != 0) {
        vfm_status s = vfm_fail(VFM_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
        tar_shard_close(sh);
        return s;
    }
    sh->file_size = (int64_t)st.st_size;
    if (load_cached_index(sh)) {
        sh->cached = 1;
        *out = sh;
        return VFM_OK;
    }
    OffsetList list = {0};
    int64_t samples = 0, end = 0;
    vfm_status s = tar_scan(path, index_on_member, &list, &samples, &end);
    if (s == VFM_OK) s = offsets_push(&list, (uint64_t)end);
    if (s != VFM_OK) {
        free(list.offsets);
        tar_shard_close(sh);
        return s;
    }
    sh->index = list.offsets;
    sh->num_samples = samples;
    if (write_index_file(path, sh->index, samples + 1, st.st_mode) != 0)
        log_debug("%s: index not cached (%s); keeping it in memory", path, strerror(errno));
    *out = sh;
    return VFM_OK;
}

void tar_shard_close(TarShard *sh) {
    if (!sh) return;
    if (sh->fd >= 0) close(sh->fd);
    free(sh->index);
    free(sh->path);
    free(sh);
}

const char *tar_shard_path(const TarShard *sh) { return sh->path; }
int64_t tar_shard_num_samples(const TarShard *sh) { return sh->num_samples; }
int tar_shard_index_was_cached(const TarShard *sh) { return sh->cached; }

const uint64_t *tar_shard_index(const TarShard *sh, int64_t *count) {
    *count = sh->num_samples + 1;
    return sh->index;
}

vfm_status tar_shard_sample_range(const TarShard *sh, int64_t i, int64_t *offset, int64_t *size) {
    if (i < 0 || i >= sh->num_samples)
        return vfm_fail(VFM_ERR_USAGE, "%s: sample %" PRId64 " out of range (shard has %" PRId64 ")", sh->path, i,
                        sh->num_samples);
    int64_t start = i == 0 ? 0 : (int64_t)sh->index[i];
    *offset = start;
    *size = (int64_t)sh->index[i + 1] - start;
    return VFM_OK;
}

/* ---------------------------------------------------------------- reading one sample */

typedef struct {
    size_t name_at; /* offset of the part name in the string buffer */
    int64_t data_at, size;
} PartSlot;

typedef struct {
    char *chars;
    size_t len, cap;
} StringBuf;

static vfm_status strings_add(StringBuf *b, const char *s, size_t n, size_t *at) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->chars, cap);
        if (!p) return vfm_fail(VFM_ERR_NOMEM, "tar sample: out of memory");
        b->chars = p;
        b->cap = cap;
    }
    memcpy(b->chars + b->len, s, n);
    b->chars[b->len + n] = 0;
    *at = b->len;
    b->len += n + 1;
    return VFM_OK;
}

static vfm_status parse_sample(const TarShard *sh, int64_t i, const uint8_t *buf, int64_t start, int64_t end,
                               TarSample *out) {
    TarSource src = {sh->path, -1, buf, start, end};
    TarEntry e = {0};
    StringBuf strings = {0};
    PartSlot *slots = NULL;
    int num = 0, cap = 0;
    size_t key_at = 0;
    int have_key = 0;
    vfm_status s = VFM_OK;
    for (int64_t offset = start; s == VFM_OK;) {
        s = next_entry(&src, offset, &e);
        size_t key_len;
        if (s != VFM_OK && e.cut && !entry_is_kept(&e, &key_len)) {
            vfm_clear_error(); /* the shard ends inside a member no sample holds: the sample ends before it */
            s = VFM_OK;
            break;
        }
        if (s != VFM_OK) {
            if (have_key) vfm_fail_context(s, "sample %" PRId64 " (key '%s')", i, strings.chars + key_at);
            else vfm_fail_context(s, "sample %" PRId64, i);
            break;
        }
        if (e.end) break;
        offset = e.next_offset;
        if (!entry_is_kept(&e, &key_len)) continue;
        e.name[key_len] = 0;
        const char *part = e.name + key_len + 1;
        if (!have_key) {
            s = strings_add(&strings, e.name, key_len, &key_at);
            have_key = 1;
        } else if (strcmp(strings.chars + key_at, e.name) != 0) {
            s = vfm_fail(VFM_ERR_FORMAT,
                         "%s: sample %" PRId64 " (key '%s'): member '%s.%s' at byte offset %" PRId64
                         " belongs to another sample (stale .tar.idx?)",
                         sh->path, i, strings.chars + key_at, e.name, part, e.header_offset);
            break;
        }
        int slot = -1;
        for (int k = 0; k < num; k++)
            if (strcmp(strings.chars + slots[k].name_at, part) == 0) slot = k;
        if (slot < 0) {
            if (num == cap) {
                cap = cap ? 2 * cap : 8;
                PartSlot *p = realloc(slots, (size_t)cap * sizeof *p);
                if (!p) {
                    s = vfm_fail(VFM_ERR_NOMEM, "tar sample: out of memory");
                    break;
                }
                slots = p;
            }
            slot = num++;
            s = strings_add(&strings, part, strlen(part), &slots[slot].name_at);
        }
        slots[slot].data_at = e.data_offset - start;
        slots[slot].size = e.size;
    }
    if (s == VFM_OK && !have_key)
        s = vfm_fail(VFM_ERR_FORMAT, "%s: sample %" PRId64 ": no members in bytes [%" PRId64 ", %" PRId64 ") (stale .tar.idx?)",
                     sh->path, i, start, end);
    if (s == VFM_OK) {
        out->parts = malloc((size_t)num * sizeof *out->parts);
        if (!out->parts) s = vfm_fail(VFM_ERR_NOMEM, "tar sample: out of memory");
    }
    if (s == VFM_OK) {
        out->index = i;
        out->strings = strings.chars;
        out->key = strings.chars + key_at;
        out->num_parts = num;
        for (int k = 0; k < num; k++)
            out->parts[k] = (TarPart){strings.chars + slots[k].name_at, out->buffer + slots[k].data_at, (size_t)slots[k].size};
    } else {
        free(strings.chars);
    }
    free(slots);
    free(e.name);
    return s;
}

vfm_status tar_shard_read_sample(const TarShard *sh, int64_t i, TarSample *out) {
    memset(out, 0, sizeof *out);
    int64_t start, size;
    VFM_TRY(tar_shard_sample_range(sh, i, &start, &size));
    if (start + size > sh->file_size)
        return vfm_fail(VFM_ERR_FORMAT, "%s: sample %" PRId64 ": bytes [%" PRId64 ", %" PRId64 ") past the end of the file",
                        sh->path, i, start, start + size);
    void *buf = NULL;
    if (posix_memalign(&buf, 64, size > 0 ? (size_t)size : 1) != 0)
        return vfm_fail(VFM_ERR_NOMEM, "%s: sample %" PRId64 ": out of memory for %" PRId64 " bytes", sh->path, i, size);
    TarSource src = {sh->path, sh->fd, NULL, 0, sh->file_size};
    vfm_status s = source_read(&src, start, buf, (size_t)size);
    if (s == VFM_OK) {
        out->buffer = buf;
        s = parse_sample(sh, i, buf, start, start + size, out);
    } else {
        vfm_fail_context(s, "sample %" PRId64, i);
    }
    if (s != VFM_OK) {
        free(buf);
        memset(out, 0, sizeof *out);
        return s;
    }
    return VFM_OK;
}

const TarPart *tar_sample_part(const TarSample *sample, const char *part) {
    for (int k = 0; k < sample->num_parts; k++)
        if (strcmp(sample->parts[k].name, part) == 0) return &sample->parts[k];
    return NULL;
}

void tar_sample_free(TarSample *sample) {
    if (!sample) return;
    free(sample->buffer);
    free(sample->parts);
    free(sample->strings);
    memset(sample, 0, sizeof *sample);
}

/* ---------------------------------------------------------------- writer */

struct TarWriter {
    char *path, *tmp_path;
    FILE *file;
    int64_t offset;
    OffsetList index; /* sample start offsets, as the reader would compute them */
    char *last_key;
    int failed;
};

vfm_status tar_writer_open(TarWriter **out, const char *path) {
    *out = NULL;
    TarWriter *w = calloc(1, sizeof *w);
    size_t n = strlen(path) + 16;
    if (!w || !(w->path = strdup(path)) || !(w->tmp_path = malloc(n))) {
        if (w) free(w->path);
        free(w);
        return vfm_fail(VFM_ERR_NOMEM, "%s: out of memory", path);
    }
    snprintf(w->tmp_path, n, "%s.tmp.XXXXXX", path);
    int fd = mkstemp(w->tmp_path);
    if (fd < 0 || fchmod(fd, 0644) != 0 || !(w->file = fdopen(fd, "wb"))) {
        vfm_status s = vfm_fail(VFM_ERR_IO, "%s: cannot create: %s", w->tmp_path, strerror(errno));
        if (fd >= 0) {
            close(fd);
            unlink(w->tmp_path);
        }
        free(w->tmp_path);
        free(w->path);
        free(w);
        return s;
    }
    setvbuf(w->file, NULL, _IOFBF, 1 << 20);
    *out = w;
    return VFM_OK;
}

static void put_octal(uint8_t *field, size_t width, uint64_t v) {
    /* width-1 zero-padded octal digits and a NUL, as Python's tarfile itn() */
    char tmp[32];
    snprintf(tmp, sizeof tmp, "%0*" PRIo64, (int)(width - 1), v);
    memcpy(field, tmp, width - 1);
    field[width - 1] = 0;
}

static void make_header(uint8_t *h, const char *name, size_t name_len, const char *prefix, size_t prefix_len,
                        uint64_t size, char type) {
    memset(h, 0, TAR_BLOCK);
    memcpy(h, name, name_len);
    put_octal(h + 100, 8, 0644);
    put_octal(h + 108, 8, 0);
    put_octal(h + 116, 8, 0);
    put_octal(h + 124, 12, size);
    put_octal(h + 136, 12, 0);
    h[156] = (uint8_t)type;
    memcpy(h + 257, "ustar\0" "00", 8);
    put_octal(h + 329, 8, 0);
    put_octal(h + 337, 8, 0);
    memcpy(h + 345, prefix, prefix_len);
    memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < TAR_BLOCK; i++) sum += h[i];
    char tmp[16];
    snprintf(tmp, sizeof tmp, "%06o", sum);
    memcpy(h + 148, tmp, 6);
    h[154] = 0;
}

/* "LEN key=value\n" where LEN counts the whole record, its own digits included. */
static size_t pax_record(char *out, size_t cap, const char *key, const char *value, size_t value_len) {
    size_t body = 1 + strlen(key) + 1 + value_len + 1, len = body + 1;
    for (;;) {
        int digits = snprintf(NULL, 0, "%zu", len);
        if (body + (size_t)digits == len) break;
        len = body + (size_t)digits;
    }
    if (out && len <= cap) {
        int at = snprintf(out, cap, "%zu %s=", len, key);
        memcpy(out + at, value, value_len);
        out[len - 1] = '\n';
    }
    return len;
}

static vfm_status writer_put(TarWriter *w, const void *data, size_t n) {
    if (n && fwrite(data, 1, n, w->file) != n) {
        w->failed = 1;
        return vfm_fail(VFM_ERR_IO, "%s: write failed: %s", w->tmp_path, strerror(errno));
    }
    w->offset += (int64_t)n;
    return VFM_OK;
}

static vfm_status writer_pad(TarWriter *w) {
    static const uint8_t zeros[TAR_BLOCK];
    return writer_put(w, zeros, (size_t)(round_up_block(w->offset) - w->offset));
}

static vfm_status writer_add(TarWriter *w, const char *name, const void *data, size_t size) {
    size_t len = strlen(name);
    int64_t header_offset = w->offset;

    const char *field = name, *prefix = "";
    size_t field_len = len, prefix_len = 0;
    int needs_pax_path = 0;
    if (len > 100) {
        /* the shortest prefix (cut at a '/') that fits, as Python's tarfile splits ustar names */
        needs_pax_path = 1;
        for (size_t k = 0; k < len && k <= 155; k++) {
            if (name[k] != '/' || k == 0) continue;
            if (len - k - 1 <= 100 && len - k - 1 > 0) {
                prefix = name;
                prefix_len = k;
                field = name + k + 1;
                field_len = len - k - 1;
                needs_pax_path = 0;
                break;
            }
        }
        if (needs_pax_path) field_len = 100;
    }
    int needs_pax_size = size > 077777777777ull;
    if (needs_pax_path || needs_pax_size) {
        char size_text[32];
        snprintf(size_text, sizeof size_text, "%zu", size);
        size_t pax_len = (needs_pax_path ? pax_record(NULL, 0, "path", name, len) : 0) +
                         (needs_pax_size ? pax_record(NULL, 0, "size", size_text, strlen(size_text)) : 0);
        char *pax = malloc(pax_len + 1);
        if (!pax) return vfm_fail(VFM_ERR_NOMEM, "%s: out of memory", w->path);
        size_t at = 0;
        if (needs_pax_path) at += pax_record(pax + at, pax_len + 1 - at, "path", name, len);
        if (needs_pax_size) at += pax_record(pax + at, pax_len + 1 - at, "size", size_text, strlen(size_text));
        uint8_t h[TAR_BLOCK];
        make_header(h, "././@PaxHeader", 14, "", 0, pax_len, 'x');
        vfm_status s = writer_put(w, h, TAR_BLOCK);
        if (s == VFM_OK) s = writer_put(w, pax, pax_len);
        free(pax);
        VFM_TRY(s);
        VFM_TRY(writer_pad(w));
    }
    uint8_t h[TAR_BLOCK];
    make_header(h, field, field_len, prefix, prefix_len, needs_pax_size ? 0 : size, '0');
    VFM_TRY(writer_put(w, h, TAR_BLOCK));
    VFM_TRY(writer_put(w, data, size));
    VFM_TRY(writer_pad(w));

    size_t key_len;
    if (!tar_is_meta_name(name) && tar_split_name(name, &key_len)) {
        if (!w->last_key || strlen(w->last_key) != key_len || memcmp(w->last_key, name, key_len) != 0) {
            char *k = strndup(name, key_len);
            if (!k) return vfm_fail(VFM_ERR_NOMEM, "%s: out of memory", w->path);
            free(w->last_key);
            w->last_key = k;
            VFM_TRY(offsets_push(&w->index, (uint64_t)header_offset));
        }
    }
    return VFM_OK;
}

vfm_status tar_writer_add(TarWriter *w, const char *name, const void *data, size_t size) {
    if (w->failed) return vfm_fail(VFM_ERR_IO, "%s: writer failed earlier", w->path);
    if (!name[0]) return vfm_fail(VFM_ERR_USAGE, "%s: empty member name", w->path);
    vfm_status s = writer_add(w, name, data, size);
    if (s != VFM_OK) w->failed = 1; /* a member may be half written: the shard can only be discarded */
    return s;
}

static void writer_free(TarWriter *w) {
    free(w->index.offsets);
    free(w->last_key);
    free(w->tmp_path);
    free(w->path);
    free(w);
}

void tar_writer_discard(TarWriter *w) {
    if (!w) return;
    if (w->file) fclose(w->file);
    unlink(w->tmp_path);
    writer_free(w);
}

vfm_status tar_writer_close(TarWriter *w) {
    static const uint8_t zeros[2 * TAR_BLOCK];
    int64_t end = w->offset;
    vfm_status s = w->failed ? vfm_fail(VFM_ERR_IO, "%s: writer failed earlier", w->path) : VFM_OK;
    if (s == VFM_OK) s = writer_put(w, zeros, sizeof zeros);
    if (s == VFM_OK && (fflush(w->file) != 0 || fsync(fileno(w->file)) != 0))
        s = vfm_fail(VFM_ERR_IO, "%s: flush failed: %s", w->tmp_path, strerror(errno));
    int close_rc = fclose(w->file);
    w->file = NULL;
    if (s == VFM_OK && close_rc != 0) s = vfm_fail(VFM_ERR_IO, "%s: close failed: %s", w->tmp_path, strerror(errno));
    if (s == VFM_OK && rename(w->tmp_path, w->path) != 0)
        s = vfm_fail(VFM_ERR_IO, "%s: cannot rename to %s: %s", w->tmp_path, w->path, strerror(errno));
    if (s != VFM_OK) {
        unlink(w->tmp_path);
        writer_free(w);
        return s;
    }
    char *dir_copy = strdup(w->path);
    if (dir_copy) {
        int dfd = open(dirname(dir_copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) {
            fsync(dfd);
            close(dfd);
        }
        free(dir_copy);
    }
    if (offsets_push(&w->index, (uint64_t)end) != VFM_OK ||
        write_index_file(w->path, w->index.offsets, w->index.count, 0644) != 0)
        log_debug("%s: index not written; readers will rebuild it", w->path);
    writer_free(w);
    return VFM_OK;
}
