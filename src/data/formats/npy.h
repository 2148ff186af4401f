/* NumPy `.npy` arrays: parsing (format versions 1.0, 2.0, 3.0; numeric dtypes in either byte order;
 * C or Fortran order) from memory or a file, conversion to float32, and writing f32 / i32 arrays. */
#ifndef VFM_DATA_NPY_H
#define VFM_DATA_NPY_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "core/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define NPY_MAX_DIMS 32

typedef enum {
    NPY_F4, NPY_F8, NPY_F2, NPY_BF16, /* bf16: ml_dtypes writes descr '<V2'; 'bfloat16' also accepted */
    NPY_I1, NPY_U1, NPY_I2, NPY_U2, NPY_I4, NPY_U4, NPY_I8, NPY_U8,
    NPY_B1,
} NpyDType;

/* A parsed array: a view into the bytes it was parsed from. */
typedef struct {
    NpyDType dtype;
    int item_size;     /* bytes per element */
    int big_endian;    /* data bytes are big-endian ('>' in descr) */
    int fortran_order; /* data is in column-major order */
    int ndim;
    int64_t shape[NPY_MAX_DIMS];
    int64_t numel;
    const uint8_t *data; /* numel * item_size bytes */
    int version_major;
} NpyArray;

const char *npy_dtype_name(NpyDType t);

/* Parses the header of `.npy` bytes and checks the data is all there (trailing bytes are ignored).
 * `what` names the source in errors ("shard.tar: key 000001: latent.npy"). */
vfm_status npy_parse(const void *bytes, size_t len, const char *what, NpyArray *out);
/* Parses only the header (the array's bytes need not follow: reading a shape costs one small read).
 * out->data is NULL; *data_offset gets the offset of the first data byte. */
vfm_status npy_parse_header(const void *bytes, size_t len, const char *what, NpyArray *out, size_t *data_offset);
/* Converts to float32 in C (row-major) order, transposing Fortran-order data; dst holds numel floats.
 * Integers convert to the nearest float, bool to 0/1. */
void npy_to_f32(const NpyArray *a, float *dst);
/* npy_parse + an owned f32 CPU tensor with the array's shape (at most VFM_MAX_DIMS dimensions). */
vfm_status npy_load_f32(const void *bytes, size_t len, const char *what, Tensor *out);
/* Reads a whole file into memory (*bytes, *len; free() it). */
vfm_status npy_read_file(const char *path, uint8_t **bytes, size_t *len);
vfm_status npy_load_f32_file(const char *path, Tensor *out);

/* Encodes a C-order little-endian array in format 1.0, laid out as numpy writes it (header padded to
 * 64 bytes). dtype: NPY_F4 or NPY_I4. *bytes is malloc'd. */
vfm_status npy_encode(NpyDType dtype, const void *data, int ndim, const int64_t *shape, uint8_t **bytes, size_t *len);
/* Writes a f32 / i32 CPU tensor to a file (through a temporary name and a rename). */
vfm_status npy_write_file(const char *path, const Tensor *t);

#ifdef __cplusplus
}
#endif
#endif
