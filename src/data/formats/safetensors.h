/* safetensors files (https://huggingface.co/docs/safetensors): an 8-byte little-endian header
 * length, a JSON header {name: {dtype, shape, data_offsets}, "__metadata__": {str: str}}, then
 * the tensor bytes. Used for checkpoints (model, EMA, optimizer shards) and latent parts. */
#ifndef VFM_SAFETENSORS_H
#define VFM_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "core/tensor.h"

/* ---- writing ---- */
typedef struct SafetensorsEntry {
    const char *name;
    DType dtype;       /* F32, F64, BF16, I32, I64 */
    int ndim;
    int64_t shape[VFM_MAX_DIMS];
    const void *data;  /* CPU bytes */
} SafetensorsEntry;

/* Writes `path` (temp name, fsync, rename). Entries are written in the given order; metadata is a
 * NULL-terminated list of key, value string pairs (may be NULL). */
vfm_status safetensors_write(const char *path, const SafetensorsEntry *entries, int n, const char *const *metadata);

/* ---- reading ---- */
typedef struct SafetensorsFile SafetensorsFile;

/* Parses the header of a file (data read lazily) or of a memory buffer (not copied: it must
 * outlive the handle). */
vfm_status safetensors_open(SafetensorsFile **out, const char *path);
vfm_status safetensors_open_memory(SafetensorsFile **out, const void *data, size_t size, const char *what);
void safetensors_close(SafetensorsFile *f);
int safetensors_count(const SafetensorsFile *f);
/* Name, dtype and shape of tensor i (in file order). */
const char *safetensors_name(const SafetensorsFile *f, int i);
int safetensors_find(const SafetensorsFile *f, const char *name); /* -1 when absent */
vfm_status safetensors_info(const SafetensorsFile *f, int i, DType *dtype, int *ndim, int64_t *shape);
/* Reads tensor i converted to f32 into out (numel floats). */
vfm_status safetensors_read_f32(const SafetensorsFile *f, int i, float *out, int64_t numel);
/* A metadata value or NULL. */
const char *safetensors_metadata(const SafetensorsFile *f, const char *key);

#endif
