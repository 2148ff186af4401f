/* Zip archives as torch.save writes them (research/energon.md §7), read from memory: stored
 * (uncompressed) records, local headers with data descriptors (sizes in the central directory),
 * 64-byte-aligned payloads, Zip64 end records and extra fields. Every offset and size is checked
 * against the buffer, so any byte string is safe to hand in. Compressed, encrypted and multi-disk
 * archives are refused with a clear error. Entries are views into the caller's buffer. */
#ifndef VFM_DATA_ZIP_H
#define VFM_DATA_ZIP_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ZipArchive ZipArchive;

typedef struct ZipEntry {
    const char *name;    /* NUL-terminated copy of the central directory's name */
    const uint8_t *data; /* the stored payload: a view into the buffer given to zip_open_memory */
    uint64_t size;
    uint32_t crc32;      /* as the central directory records it */
} ZipEntry;

/* 1 when bytes begin with a zip local file header ("PK\3\4"). */
int zip_is_zip(const void *bytes, size_t len);

/* Parses the end records and the central directory of bytes[len] and locates every payload.
 * bytes must outlive the archive. `what` names the source in errors ("shard.tar: key 000001: pth").
 * Errors are VFM_ERR_FORMAT (malformed) or VFM_ERR_UNSUPPORTED (compressed, encrypted, multi-disk). */
vfm_status zip_open_memory(ZipArchive **out, const void *bytes, size_t len, const char *what);
void zip_close(ZipArchive *z);

int zip_count(const ZipArchive *z);
/* Entry i in central directory order (0 <= i < zip_count); no checksum check. */
const ZipEntry *zip_entry(const ZipArchive *z, int i);
/* The first entry with this exact name, or -1. */
int zip_find(const ZipArchive *z, const char *name);
/* Entry i's payload after checking its CRC-32 (VFM_ERR_FORMAT naming the entry on a mismatch). A
 * CRC field of 0 is not checked: torch.save writes 0 when checksums are switched off
 * (torch.serialization.set_crc32_options(False)), and torch.load reads such files. */
vfm_status zip_read(const ZipArchive *z, int i, const uint8_t **data, uint64_t *size);

#ifdef __cplusplus
}
#endif
#endif
