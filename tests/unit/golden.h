/* Reader of the golden files that the reference/ scripts write (format in reference/golden_io.py):
 * "VFMGOLD\0", u32 version (1), u32 count, then per tensor: u16 name length, name, u8 dtype
 * (DType numbering: 0 f32, 1 f64, 3 i32, 4 i64), u8 ndim, i64 shape[ndim], little-endian data. */
#ifndef VFM_GOLDEN_H
#define VFM_GOLDEN_H

#include "core/tensor.h"

typedef struct Golden Golden;

/* Loads tests/fixtures/golden/<name>; NULL (with vfm_last_error set) when missing or malformed. */
Golden *golden_load(const char *name);
void golden_free(Golden *g);
/* Number of tensors and the name of tensor i (file order). */
int golden_count(const Golden *g);
const char *golden_name(const Golden *g, int i);
/* The named tensor (CPU), or NULL. */
const Tensor *golden_get(const Golden *g, const char *name);
/* As golden_get but reports a test failure when absent. */
const Tensor *golden_need(const Golden *g, const char *name);
/* A scalar stored as a 1-element tensor, as double (NaN when absent). */
double golden_scalar(const Golden *g, const char *name);

#endif
