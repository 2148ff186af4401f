/* GPU test helpers: a "pair" is one tensor held twice — in f32 on the CPU (what the CPU oracle
 * reads and writes) and on the GPU in the dtype under test — with the same values: random data are
 * rounded to the GPU dtype first, so both backends see identical inputs. Comparisons download the
 * GPU tensor as f32 and apply design §3's rule (max|a−b| ≤ atol + rtol·max|ref|). Only meaningful
 * with a CUDA device (tests SKIP first without one). */
#ifndef VFM_TEST_GPU_PAIR_H
#define VFM_TEST_GPU_PAIR_H

#include <stdint.h>

#include "core/tensor.h"

typedef struct {
    float *h;   /* host f32 data, the CPU tensor's storage */
    Tensor cpu; /* f32 view of h */
    Tensor gpu; /* owning device tensor of dtype `dt` (after pair_misalign: a view into `moved`) */
    int64_t n;
    void *moved; /* the allocation pair_misalign moved the GPU tensor into, or NULL */
} Pair;

#define PAIR_DIMS(...) (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]) { __VA_ARGS__ }
/* uniform in [lo, hi), rounded to dt */
Pair pair_rand(DType dt, uint64_t seed, float lo, float hi, int ndim, const int64_t *shape);
/* all zero */
Pair pair_zeros(DType dt, int ndim, const int64_t *shape);
#define PAIR_RAND(dt, seed, lo, hi, ...) pair_rand((dt), (seed), (lo), (hi), PAIR_DIMS(__VA_ARGS__))
#define PAIR_ZEROS(dt, ...) pair_zeros((dt), PAIR_DIMS(__VA_ARGS__))
/* After changing p->h on the host: round it to the GPU dtype and upload (both sides equal again). */
void pair_upload(Pair *p);
/* Uploads vals[p->n] (rounded to the GPU dtype) to the GPU side only: p->h (the CPU side) keeps
 * its values. For re-running a GPU op from the same inputs. */
void pair_upload_values(Pair *p, const float *vals);
/* A malloc'ed copy of p->h (for pair_upload_values later). */
float *pair_copy_host(const Pair *p);
/* The GPU tensor's values as f32 into out[p->n]. */
void pair_download(const Pair *p, float *out);
void pair_free(Pair *p);
/* Moves the GPU tensor (same values) to one element past a 16-byte boundary, so that kernels that
 * use 16-byte accesses where their tensors are aligned must work element by element on it. */
void pair_misalign(Pair *p);
/* Rows [r0, r1) of a [rows, cols] pair set to NaN on both sides (padding that must never be read). */
void pair_nan_rows(Pair *p, int64_t cols, int64_t r0, int64_t r1);

/* GPU result vs the CPU result in p->h. Returns 1 when close (reports through the test harness). */
int pair_close(const char *what, const Pair *p, double atol, double rtol, const char *file, int line);
#define PAIR_CLOSE(what, p, atol, rtol) pair_close((what), (p), (atol), (rtol), __FILE__, __LINE__)
/* The GPU tensor has exactly the bits it had when `snapshot` (a host copy of its storage) was taken. */
void *pair_snapshot(const Pair *p);
int pair_same_bits(const char *what, const Pair *p, const void *snapshot, const char *file, int line);
#define PAIR_SAME_BITS(what, p, snap) pair_same_bits((what), (p), (snap), __FILE__, __LINE__)

/* An i32 array on both sides (tok2sample, cu_seqlens, positions). */
typedef struct {
    int32_t *h;
    Tensor cpu, gpu;
} IPair;
IPair ipair_make(const int32_t *values, int ndim, const int64_t *shape);
#define IPAIR(values, ...) ipair_make((values), PAIR_DIMS(__VA_ARGS__))
void ipair_free(IPair *p);

/* The tolerance of one GPU dtype: f32 runs compare tightly, bf16 by the op's own bound. */
#define TOL(dt, f32_value, bf16_value) ((dt) == DT_BF16 ? (bf16_value) : (f32_value))

/* The GPU dtypes the op tests run: f32, then bf16. */
static const DType GPU_DTYPES[2] = {DT_F32, DT_BF16};
/* The CPU op, then the GPU op, on the same inputs; a failure ends the test. */
#define BOTH(cpu_call, gpu_call) \
    do {                         \
        REQUIRE_OK(cpu_call);    \
        REQUIRE_OK(gpu_call);    \
    } while (0)

/* The op tests' pack: 13 rows, 3 samples, padding rows 4-5 and 11-12 (padding sits between samples). */
#define PACK_S 13
#define PACK_B 3
extern const int32_t PACK_T2S[PACK_S];
/* The pack's padding rows of a [PACK_S, cols] pair set to NaN on both sides. */
void pack_nan_padding(Pair *p, int64_t cols);

#endif
