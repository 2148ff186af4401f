/* Zip reader (see zip.h): end of central directory (and its Zip64 twin), the central directory,
 * local headers. All arithmetic on offsets is done in 64 bits with explicit range checks. */
#include "data/formats/zip.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/hash.h"

#define SIG_LOCAL 0x04034b50u
#define SIG_CENTRAL 0x02014b50u
#define SIG_EOCD 0x06054b50u
#define SIG_EOCD64 0x06064b50u
#define SIG_LOCATOR64 0x07064b50u
#define EOCD_SIZE 22u
#define LOCATOR64_SIZE 20u
#define EOCD64_SIZE 56u
#define CENTRAL_SIZE 46u
#define LOCAL_SIZE 30u

struct ZipArchive {
    char what[256];
    const uint8_t *bytes;
    uint64_t len;
    int n;
    ZipEntry *entries;
    int *by_name; /* entry indices sorted by (name, index): zip_find in log time */
};

static uint16_t le16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t le32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static uint64_t le64(const uint8_t *p) { return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32; }

/* 1 when [at, at + n) lies inside [0, limit). */
static int fits(uint64_t at, uint64_t n, uint64_t limit) { return at <= limit && n <= limit - at; }

int zip_is_zip(const void *bytes, size_t len) { return len >= 4 && le32(bytes) == SIG_LOCAL; }

void zip_close(ZipArchive *z) {
    if (!z) return;
    for (int i = 0; i < z->n; i++) free((char *)z->entries[i].name);
    free(z->entries);
    free(z->by_name);
    free(z);
}

int zip_count(const ZipArchive *z) { return z->n; }
const ZipEntry *zip_entry(const ZipArchive *z, int i) { return i >= 0 && i < z->n ? &z->entries[i] : NULL; }

int zip_find(const ZipArchive *z, const char *name) {
    int lo = 0, hi = z->n; /* the first position whose name is >= name */
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (strcmp(z->entries[z->by_name[mid]].name, name) < 0) lo = mid + 1;
        else hi = mid;
    }
    return lo < z->n && strcmp(z->entries[z->by_name[lo]].name, name) == 0 ? z->by_name[lo] : -1;
}

static int by_name_then_index(const void *a, const void *b, void *entries) {
    int i = *(const int *)a, j = *(const int *)b;
    int c = strcmp(((const ZipEntry *)entries)[i].name, ((const ZipEntry *)entries)[j].name);
    return c ? c : (i > j) - (i < j);
}

vfm_status zip_read(const ZipArchive *z, int i, const uint8_t **data, uint64_t *size) {
    const ZipEntry *e = zip_entry(z, i);
    if (!e) return vfm_fail(VFM_ERR_INTERNAL, "%s: zip entry %d out of range", z->what, i);
    uint32_t crc = 0;
    /* torch.save writes 0 when told not to compute checksums (torch.serialization.set_crc32_options) */
    for (uint64_t done = 0; e->crc32 != 0 && done < e->size;) { /* size_t may be narrower than the entry */
        uint64_t step = e->size - done > (1u << 30) ? (1u << 30) : e->size - done;
        crc = crc32_update(crc, e->data + done, (size_t)step);
        done += step;
    }
    if (e->crc32 != 0 && crc != e->crc32)
        return vfm_fail(VFM_ERR_FORMAT, "%s: zip record '%s' is corrupt (CRC-32 %08x, the directory says %08x)",
                        z->what, e->name, crc, e->crc32);
    *data = e->data;
    *size = e->size;
    return VFM_OK;
}

/* Where the central directory lies: from the end record, or its Zip64 twin when a locator precedes it. */
static vfm_status find_directory(ZipArchive *z, uint64_t *cd_offset, uint64_t *cd_size, uint64_t *count,
                                 uint64_t *cd_limit) {
    const uint8_t *b = z->bytes;
    uint64_t len = z->len;
    if (len < EOCD_SIZE) return vfm_fail(VFM_ERR_FORMAT, "%s: not a zip archive (%llu bytes)", z->what, (unsigned long long)len);
    /* the end record is the last 22 bytes plus a comment of up to 65535 bytes */
    uint64_t lowest = len - EOCD_SIZE > 65535u ? len - EOCD_SIZE - 65535u : 0, eocd = UINT64_MAX;
    for (uint64_t at = len - EOCD_SIZE + 1; at-- > lowest;)
        if (le32(b + at) == SIG_EOCD && le16(b + at + 20) == len - at - EOCD_SIZE) {
            eocd = at;
            break;
        }
    if (eocd == UINT64_MAX)
        return vfm_fail(VFM_ERR_FORMAT, "%s: not a zip archive (no end of central directory record)", z->what);
    const uint8_t *e = b + eocd;
    if (le16(e + 4) != 0 || le16(e + 6) != 0)
        return vfm_fail(VFM_ERR_UNSUPPORTED, "%s: multi-disk zip archives are not supported", z->what);
    *count = le16(e + 10);
    *cd_size = le32(e + 12);
    *cd_offset = le32(e + 16);
    *cd_limit = eocd;
    if (eocd >= LOCATOR64_SIZE && le32(b + eocd - LOCATOR64_SIZE) == SIG_LOCATOR64) {
        const uint8_t *loc = b + eocd - LOCATOR64_SIZE;
        uint64_t at = le64(loc + 8);
        if (le32(loc + 4) != 0 || le32(loc + 16) > 1)
            return vfm_fail(VFM_ERR_UNSUPPORTED, "%s: multi-disk zip archives are not supported", z->what);
        if (!fits(at, EOCD64_SIZE, eocd - LOCATOR64_SIZE) || le32(b + at) != SIG_EOCD64)
            return vfm_fail(VFM_ERR_FORMAT, "%s: bad zip: the Zip64 locator points at offset %llu, not at a Zip64 end record",
                            z->what, (unsigned long long)at);
        const uint8_t *e64 = b + at;
        if (le32(e64 + 16) != 0 || le32(e64 + 20) != 0)
            return vfm_fail(VFM_ERR_UNSUPPORTED, "%s: multi-disk zip archives are not supported", z->what);
        *count = le64(e64 + 32);
        *cd_size = le64(e64 + 40);
        *cd_offset = le64(e64 + 48);
        *cd_limit = at;
    } else if (*count == 0xffffu || *cd_size == 0xffffffffu || *cd_offset == 0xffffffffu) {
        return vfm_fail(VFM_ERR_FORMAT, "%s: bad zip: Zip64 values without a Zip64 end record", z->what);
    }
    if (!fits(*cd_offset, *cd_size, *cd_limit))
        return vfm_fail(VFM_ERR_FORMAT, "%s: bad zip: central directory [%llu, +%llu) outside the archive", z->what,
                        (unsigned long long)*cd_offset, (unsigned long long)*cd_size);
    if (*count > *cd_size / CENTRAL_SIZE)
        return vfm_fail(VFM_ERR_FORMAT, "%s: bad zip: %llu entries cannot fit in a %llu-byte central directory",
                        z->what, (unsigned long long)*count, (unsigned long long)*cd_size);
    return VFM_OK;
}

/* Replaces 0xffffffff sizes / offset by the values of the Zip64 extra field (id 1), in its order:
 * uncompressed size, compressed size, local header offset. */
static vfm_status apply_zip64(const ZipArchive *z, const char *name, const uint8_t *extra, uint64_t n, uint64_t *usize,
                              uint64_t *csize, uint64_t *offset) {
    int need_u = *usize == 0xffffffffu, need_c = *csize == 0xffffffffu, need_o = *offset == 0xffffffffu;
    for (uint64_t at = 0; at + 4 <= n;) {
        uint16_t id = le16(extra + at), size = le16(extra + at + 2);
        if (size > n - at - 4) return vfm_fail(VFM_ERR_FORMAT, "%s: bad zip: extra field of '%s' runs past its end", z->what, name);
        if (id == 0x0001) {
            const uint8_t *p = extra + at + 4;
            uint64_t left = size;
            uint64_t *slots[3] = {need_u ? usize : NULL, need_c ? csize : NULL, need_o ? offset : NULL};
            for (int k = 0; k < 3; k++) {
                if (!slots[k]) continue;
                if (left < 8) return vfm_fail(VFM_ERR_FORMAT, "%s: bad zip: short Zip64 extra field for '%s'", z->what, name);
                *slots[k] = le64(p);
                p += 8;
                left -= 8;
            }
            return VFM_OK;
        }
        at += 4 + (uint64_t)size;
    }
    if (need_u || need_c || need_o)
        return vfm_fail(VFM_ERR_FORMAT, "%s: bad zip: '%s' needs a Zip64 extra field and has none", z->what, name);
    return VFM_OK;
}

/* Reads one central directory entry at *at into e (name allocated), advancing *at. */
static vfm_status read_central(ZipArchive *z, uint64_t *at, uint64_t cd_end, uint64_t data_limit, ZipEntry *e) {
    const uint8_t *b = z->bytes;
    if (!fits(*at, CENTRAL_SIZE, cd_end) || le32(b + *at) != SIG_CENTRAL)
        return vfm_fail(VFM_ERR_FORMAT, "%s: bad zip: no central directory entry at offset %llu", z->what,
                        (unsigned long long)*at);
    const uint8_t *c = b + *at;
    uint16_t flags = le16(c + 8), method = le16(c + 10), name_len = le16(c + 28), extra_len = le16(c + 30),
             comment_len = le16(c + 32);
    uint64_t csize = le32(c + 20), usize = le32(c + 24), offset = le32(c + 42);
    uint64_t var = (uint64_t)name_len + extra_len + comment_len;
    if (!fits(*at + CENTRAL_SIZE, var, cd_end))
        return vfm_fail(VFM_ERR_FORMAT, "%s: bad zip: central directory entry at offset %llu runs past the directory",
                        z->what, (unsigned long long)*at);
    const uint8_t *name = c + CENTRAL_SIZE;
    if (memchr(name, 0, name_len))
        return vfm_fail(VFM_ERR_FORMAT, "%s: bad zip: an entry name holds a NUL byte", z->what);
    char *copy = malloc((size_t)name_len + 1);
    if (!copy) return vfm_fail(VFM_ERR_NOMEM, "%s: out of memory", z->what);
    memcpy(copy, name, name_len);
    copy[name_len] = 0;
    e->name = copy;
    e->crc32 = le32(c + 16);
    *at += CENTRAL_SIZE + var;
    if (flags & 0x0001) return vfm_fail(VFM_ERR_UNSUPPORTED, "%s: zip record '%s' is encrypted", z->what, copy);
    if (method != 0)
        return vfm_fail(VFM_ERR_UNSUPPORTED, "%s: zip record '%s' is compressed (method %u); torch.save stores records "
                        "uncompressed", z->what, copy, method);
    VFM_TRY(apply_zip64(z, copy, name + name_len, extra_len, &usize, &csize, &offset));
    if (csize != usize)
        return vfm_fail(VFM_ERR_FORMAT, "%s: bad zip: stored record '%s' has sizes %llu and %llu", z->what, copy,
                        (unsigned long long)csize, (unsigned long long)usize);
    /* the local header: its own name and extra field (torch's "FB" alignment padding) come before the data */
    if (!fits(offset, LOCAL_SIZE, data_limit) || le32(b + offset) != SIG_LOCAL)
        return vfm_fail(VFM_ERR_FORMAT, "%s: bad zip: record '%s': no local header at offset %llu", z->what, copy,
                        (unsigned long long)offset);
    const uint8_t *l = b + offset;
    uint64_t local_var = (uint64_t)le16(l + 26) + le16(l + 28);
    if (le16(l + 26) != name_len || !fits(offset + LOCAL_SIZE, local_var, data_limit) ||
        memcmp(l + LOCAL_SIZE, name, name_len) != 0)
        return vfm_fail(VFM_ERR_FORMAT, "%s: bad zip: record '%s': the local header does not match the directory",
                        z->what, copy);
    uint64_t data_at = offset + LOCAL_SIZE + local_var;
    if (!fits(data_at, usize, data_limit))
        return vfm_fail(VFM_ERR_FORMAT, "%s: bad zip: record '%s' (%llu bytes at offset %llu) runs past the records "
                        "(the archive is truncated or corrupt)", z->what, copy, (unsigned long long)usize,
                        (unsigned long long)data_at);
    e->data = b + data_at;
    e->size = usize;
    return VFM_OK;
}

vfm_status zip_open_memory(ZipArchive **out, const void *bytes, size_t len, const char *what) {
    *out = NULL;
    ZipArchive *z = calloc(1, sizeof *z);
    if (!z) return vfm_fail(VFM_ERR_NOMEM, "zip: out of memory");
    snprintf(z->what, sizeof z->what, "%s", what ? what : "zip");
    z->bytes = bytes;
    z->len = len;
    uint64_t cd_offset = 0, cd_size = 0, count = 0, cd_limit = 0;
    vfm_status s = find_directory(z, &cd_offset, &cd_size, &count, &cd_limit);
    if (s == VFM_OK && count > (uint64_t)INT32_MAX / 2) s = vfm_fail(VFM_ERR_FORMAT, "%s: bad zip: too many entries", z->what);
    if (s == VFM_OK && count > 0 && !(z->entries = calloc((size_t)count, sizeof *z->entries)))
        s = vfm_fail(VFM_ERR_NOMEM, "%s: out of memory", z->what);
    uint64_t at = cd_offset;
    for (uint64_t i = 0; s == VFM_OK && i < count; i++) {
        s = read_central(z, &at, cd_offset + cd_size, cd_offset, &z->entries[i]);
        if (z->entries[i].name) z->n = (int)i + 1; /* freed by zip_close, also on error */
    }
    if (s == VFM_OK && !(z->by_name = malloc((size_t)z->n * sizeof *z->by_name + 1)))
        s = vfm_fail(VFM_ERR_NOMEM, "%s: out of memory", z->what);
    if (s != VFM_OK) {
        zip_close(z);
        return s;
    }
    for (int i = 0; i < z->n; i++) z->by_name[i] = i;
    qsort_r(z->by_name, (size_t)z->n, sizeof *z->by_name, by_name_then_index, z->entries);
    *out = z;
    return VFM_OK;
}
