/* The deterministic reductions of the masked per-token losses (weighted MSE, DDPM VB): sums over
 * the real rows of a pack of mask[s] and of a per-row term, in CPU_REDUCE_CHUNKS fixed chunks of
 * rows, each summed in order, then the chunks in order — independent of the thread count. Include
 * after real.h. */
#ifndef VFM_CPU_ROW_SUMS_H
#define VFM_CPU_ROW_SUMS_H

/* term(ctx, s, b): row s (of sample b)'s contribution, exactly 0 when mask[s] == 0 (then its values
 * must not be read, so a masked-out NaN cannot poison the loss). */
typedef double (*RowTermFn)(const void *ctx, int64_t s, int32_t b);

/* *term_total = Σ term over real rows (when term is not NULL), *mask_total = Σ mask. */
static inline void masked_row_sums(double *term_total, double *mask_total, int64_t S, const int32_t *map,
                                   const real *mask, RowTermFn term, const void *ctx) {
    double terms[CPU_REDUCE_CHUNKS], masks[CPU_REDUCE_CHUNKS];
#pragma omp parallel for schedule(static)
    for (int k = 0; k < CPU_REDUCE_CHUNKS; k++) {
        int64_t lo = S * k / CPU_REDUCE_CHUNKS, hi = S * (k + 1) / CPU_REDUCE_CHUNKS;
        double t = 0, m = 0;
        for (int64_t s = lo; s < hi; s++) {
            int32_t b = map[s];
            if (b < 0) continue;
            m += (double)mask[s];
            if (term) t += term(ctx, s, b);
        }
        terms[k] = t;
        masks[k] = m;
    }
    double t = 0, m = 0;
    for (int k = 0; k < CPU_REDUCE_CHUNKS; k++) {
        t += terms[k];
        m += masks[k];
    }
    *term_total = t;
    *mask_total = m;
}

/* Per sample b < B, its rows in order: sum[b] = Σ term (sum may be NULL), count[b] = Σ mask (count may be NULL). */
static inline void masked_sample_sums(real *sum, real *count, int64_t B, int64_t S, const int32_t *map,
                                      const real *mask, RowTermFn term, const void *ctx) {
    for (int64_t b = 0; b < B; b++) {
        double t = 0, m = 0;
        for (int64_t s = 0; s < S; s++) {
            if (map[s] != b) continue;
            m += (double)mask[s];
            if (sum) t += term(ctx, s, (int32_t)b);
        }
        if (sum) sum[b] = (real)t;
        if (count) count[b] = (real)m;
    }
}

#endif
