/* The per-sample gradients of the adaLN ops (dshift and dscale of LayerNorm or RMSNorm + modulate):
 * two sums per sample and column over the sample's rows, in double, column blocks of
 * SAMPLE_GRAD_COLS in parallel with the rows in ascending order inside a block — the same bits at
 * any thread count. Include after real.h. */
#ifndef VFM_CPU_SAMPLE_SUMS_H
#define VFM_CPU_SAMPLE_SUMS_H

#include <stdlib.h>

/* Columns per block of the per-sample gradient sums. */
#define SAMPLE_GRAD_COLS 64
/* Below this many elements a norm op (and these sums) runs on one thread: a parallel region costs
 * more than it saves (and on a busy machine every region waits for its slowest thread). */
#define NORM_PARALLEL_MIN 32768

/* Adds the two terms of row s (of a real sample) at columns [d0, d1) to acc0[d], acc1[d] (one call
 * per row and block, not per element; a VEC_CLONES function with an `omp simd` loop vectorises, and
 * each column's sum keeps its order). */
typedef void (*SampleTermsFn)(const void *ctx, int64_t s, int64_t d0, int64_t d1, double *acc0, double *acc1);

/* out0[b, d] += Σ_s term0, out1[b, d] += Σ_s term1 over the rows s of sample b (tok2sample[s] = b);
 * either output may be NULL. */
static inline vfm_status sample_column_sums(const char *op, real *out0, real *out1, int64_t B, int64_t S, int64_t D,
                                            const int32_t *t2s, SampleTermsFn terms, const void *ctx) {
    double *acc = calloc((size_t)(2 * B * D) + 1, sizeof(double));
    if (!acc) return vfm_fail(VFM_ERR_NOMEM, "%s: no memory for %lld x %lld sums", op, (long long)B, (long long)D);
    double *acc0 = acc, *acc1 = acc + B * D;
    int64_t blocks = (D + SAMPLE_GRAD_COLS - 1) / SAMPLE_GRAD_COLS;
#pragma omp parallel for schedule(static) if (S * D >= NORM_PARALLEL_MIN)
    for (int64_t blk = 0; blk < blocks; blk++) {
        int64_t d0 = blk * SAMPLE_GRAD_COLS, d1 = d0 + SAMPLE_GRAD_COLS < D ? d0 + SAMPLE_GRAD_COLS : D;
        for (int64_t s = 0; s < S; s++) {
            int64_t b = t2s[s];
            if (b >= 0) terms(ctx, s, d0, d1, acc0 + b * D, acc1 + b * D);
        }
    }
    for (int64_t i = 0; out0 && i < B * D; i++) out0[i] += (real)acc0[i];
    for (int64_t i = 0; out1 && i < B * D; i++) out1[i] += (real)acc1[i];
    free(acc);
    return VFM_OK;
}

#endif
