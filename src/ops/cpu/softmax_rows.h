/* Row kernels of the CPU attention's blocks (attention.c): the row maximum, exp(x - shift) with
 * its sum, and the softmax backward's P ⊙ (dP - D), over one contiguous row. Include after real.h.
 *
 * exp is vec_math.h's vec_exp_softmax (vectorised in the f32 build: at head_dim 32-72 one libm exp per
 * score costs as much as the score's GEMM work). Each function is compiled with FMA_CLONES and
 * fused multiply-adds (vec_math.h). The sums run in a fixed order for a given clone, so results
 * never depend on the thread count. */
#ifndef VFM_CPU_SOFTMAX_ROWS_H
#define VFM_CPU_SOFTMAX_ROWS_H

#include "vec_math.h"

FMA_CONTRACT_BEGIN

FMA_CLONES static real row_max(const real *x, int n) {
    real m = x[0];
#pragma omp simd reduction(max : m)
    for (int j = 1; j < n; j++) m = x[j] > m ? x[j] : m;
    return m;
}

/* p[j] = exp(s[j] - shift) (p may be s); returns Σ_j p[j]. */
FMA_CLONES static real row_exp_sum(real *p, const real *s, int n, real shift) {
    real sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < n; j++) {
        real e = vec_exp_softmax(s[j] - shift);
        p[j] = e;
        sum += e;
    }
    return sum;
}

/* p[j] = exp(s[j] - shift) in place. */
FMA_CLONES static void row_exp_shift(real *p, int n, real shift) {
#pragma omp simd
    for (int j = 0; j < n; j++) p[j] = vec_exp_softmax(p[j] - shift);
}

/* dp[j] = p[j] · (dp[j] - d): the softmax backward of one row. */
FMA_CLONES static void row_softmax_grad(real *dp, const real *p, int n, real d) {
#pragma omp simd
    for (int j = 0; j < n; j++) dp[j] = p[j] * (dp[j] - d);
}

/* x[j] *= c */
FMA_CLONES static void row_scale(real *x, int n, real c) {
#pragma omp simd
    for (int j = 0; j < n; j++) x[j] *= c;
}

FMA_CONTRACT_END

#endif
