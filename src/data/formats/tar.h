/* WebDataset tar shards: reading (ustar, old GNU and pax headers), grouping members into samples by
 * Energon's rules, the per-shard `<shard>.tar.idx` byte-range index, random access to one sample,
 * and a deterministic writer. */
#ifndef VFM_DATA_TAR_H
#define VFM_DATA_TAR_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Grouping (Energon config.py: split_name_re, skip_meta_re) ---- */

/* Splits a member name into sample key and part name: key = directory + file name up to its first
 * dot, part = the rest ("a/b.c/d.e.f" -> "a/b.c/d" + "e.f", "000000..pth" -> "000000" + ".pth",
 * "dir/.hidden" -> "dir/" + "hidden"). Returns 0 when the name has no key/part split (it is
 * skipped); else 1, with *key_len = length of the key (the part starts at name + *key_len + 1). */
int tar_split_name(const char *name, size_t *key_len);
/* 1 when the name matches `__[^/]*__($|/)` from its start (`__meta__`, `__x__/y`): skipped. */
int tar_is_meta_name(const char *name);

/* ---- Scanning ---- */

/* One kept member (a regular file whose name splits into key.part and is not meta), in tar order. */
typedef struct {
    int64_t sample_index;  /* index of the sample this member belongs to, 0-based in the shard */
    const char *key;       /* sample key */
    const char *part;      /* part name */
    int64_t header_offset; /* first header of the member, pax / GNU long-name pre-headers included */
    int64_t data_offset;   /* first payload byte */
    int64_t size;          /* payload size, unpadded */
    int64_t available;     /* payload bytes in the file: size, except for a member the file ends inside */
} TarScanMember;

/* Called once per kept member; a non-OK return stops the scan with that status. */
typedef vfm_status (*TarScanFn)(void *ctx, const TarScanMember *member);

/* Reads every header of the tar at path once. fn may be NULL. *num_samples (may be NULL) gets the
 * sample count, *end_offset (may be NULL) the end of the last member (where the zero blocks start).
 * Errors (VFM_ERR_FORMAT) name the shard and the byte offset. A shard cut short inside a member's
 * payload (an interrupted copy) is not an error: that member is the last one reported, with
 * available < size, its sample counts, and *end_offset is the end of the file; the shard's other
 * samples stay readable and reading the cut one fails. A cut inside a header is an error. */
vfm_status tar_scan(const char *path, TarScanFn fn, void *ctx, int64_t *num_samples, int64_t *end_offset);

/* ---- Random access to samples ---- */

typedef struct TarShard TarShard;

typedef struct {
    const char *name;    /* part name, e.g. "json", "latent.npy", ".pth" */
    const uint8_t *data; /* payload (not NUL-terminated); 64-byte aligned */
    size_t size;
} TarPart;

typedef struct {
    int64_t index;   /* sample index in the shard */
    const char *key; /* sample key */
    int num_parts;
    TarPart *parts;  /* tar order; a repeated part name keeps its first position with the later data */
    uint8_t *buffer; /* owns the sample's raw bytes that the parts point into */
    char *strings;   /* owns key and part names */
} TarSample;

/* Opens a shard: uses `<shard>.tar.idx` when it is present and consistent with the file, else scans
 * the shard once and writes that file (atomically; when the directory is not writable the index stays
 * in memory). The shard may then be read from several threads at once. */
vfm_status tar_shard_open(TarShard **out, const char *path);
void tar_shard_close(TarShard *shard);
const char *tar_shard_path(const TarShard *shard);
int64_t tar_shard_num_samples(const TarShard *shard);
/* Byte range Energon reads for sample i: [offset, offset + size); sample 0 starts at byte 0. */
vfm_status tar_shard_sample_range(const TarShard *shard, int64_t i, int64_t *offset, int64_t *size);
/* The N+1 index entries (Energon's `.tar.idx` content); *count gets N+1. */
const uint64_t *tar_shard_index(const TarShard *shard, int64_t *count);
/* 1 when the index came from an existing `.tar.idx`, 0 when it was built by a scan. */
int tar_shard_index_was_cached(const TarShard *shard);

/* Reads sample i with pread and parses its members. Thread-safe. On error *out is empty. */
vfm_status tar_shard_read_sample(const TarShard *shard, int64_t i, TarSample *out);
/* The part with this name, or NULL. */
const TarPart *tar_sample_part(const TarSample *sample, const char *part);
void tar_sample_free(TarSample *sample);

/* Path of the index cache for a shard: "x.tar" -> "x.tar.idx" (Energon: with_suffix(".tar.idx")). */
void tar_index_path(const char *shard_path, char *out, size_t n);

/* ---- Writer ---- */

typedef struct TarWriter TarWriter;

/* Starts a shard written under a temporary name beside path. */
vfm_status tar_writer_open(TarWriter **out, const char *path);
/* Appends a regular file (ustar header; a pax 'x' record for names that do not fit ustar's
 * name/prefix split, or sizes of 8 GiB and more). mtime 0, mode 0644, uid/gid 0, no owner names:
 * the same members give byte-identical shards. */
vfm_status tar_writer_add(TarWriter *w, const char *name, const void *data, size_t size);
/* Writes two zero blocks, fsyncs, renames to the final path, fsyncs the directory, then writes the
 * matching `.tar.idx` (best effort, like tar_shard_open). Frees w, also on error. */
vfm_status tar_writer_close(TarWriter *w);
/* Drops a shard being written (removes the temporary file) and frees w. */
void tar_writer_discard(TarWriter *w);

#ifdef __cplusplus
}
#endif
#endif
