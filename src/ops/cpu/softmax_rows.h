/* Row kernels of the CPU attention's blocks (attention.c): the row maximum, exp(x - shift) with
 * its sum, and the softmax backward's P ⊙ (dP - D), over one contiguous row. Include after real.h.
 *
 * In the f32 build exp is Cephes' expf polynomial written so that the compiler vectorises it
 * (libm's expf is a scalar call, and at head_dim 32-72 one exp per score costs as much as the
 * score's GEMM work); the f64 build (gradient checks) keeps libm's exp. Each function is compiled
 * for AVX-512, AVX2 and the baseline, picked once per process by the CPU; with -ffp-contract=off
 * no clone fuses a multiply-add, so every clone gives the same bits. The sums run in a fixed
 * order for a given clone, so results never depend on the thread count. */
#ifndef VFM_CPU_SOFTMAX_ROWS_H
#define VFM_CPU_SOFTMAX_ROWS_H

#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && !defined(__clang__)
#define ROWS_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define ROWS_CLONES
#endif

#ifdef VFM_REAL_F64
static inline real row_exp(real x) { return exp(x); }
#else
/* e^x = 2^n · e^r with n = round(x / ln 2) and |r| <= ln2 / 2; e^r by Cephes' degree-6
 * polynomial (about 1 ulp); 2^n from the exponent bits. Below -87 (where e^x < 2^-125) the result
 * is 0; NaN gives NaN. Only for x <= 88: the softmax's arguments are <= 0 (up to rounding).
 * Written with integer selects only: a float compare-and-select of a computed value stops GCC
 * from vectorising the loop (it will not move a trapping float op out of a branch). */
static inline float row_exp(float x) {
    const float round_magic = 12582912.0f; /* 1.5·2^23: y + it has round(y) in its low mantissa bits */
    uint32_t ux;
    memcpy(&ux, &x, sizeof ux);
    ux = ux > 0xC2C80000u ? 0xC2C80000u : ux; /* x < -100 (a negative float's bits grow with |x|): -100 */
    float xc;
    memcpy(&xc, &ux, sizeof xc);
    float t = xc * 1.44269504088896341f + round_magic;
    float n = t - round_magic;
    float r = xc - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.0f;
    int32_t bits;
    memcpy(&bits, &t, sizeof bits);
    bits = (bits - 0x4B400000 + 127) << 23; /* the exponent field of 2^n */
    bits = xc < -87.0f ? 0 : bits;
    float two_n;
    memcpy(&two_n, &bits, sizeof two_n);
    return p * two_n + (x - x); /* x - x: +0, or NaN for a NaN x (the clamp may have dropped it) */
}
#endif

ROWS_CLONES static real row_max(const real *x, int n) {
    real m = x[0];
#pragma omp simd reduction(max : m)
    for (int j = 1; j < n; j++) m = x[j] > m ? x[j] : m;
    return m;
}

/* p[j] = exp(s[j] - shift) (p may be s); returns Σ_j p[j]. */
ROWS_CLONES static real row_exp_sum(real *p, const real *s, int n, real shift) {
    real sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < n; j++) {
        real e = row_exp(s[j] - shift);
        p[j] = e;
        sum += e;
    }
    return sum;
}

/* p[j] = exp(s[j] - shift) in place. */
ROWS_CLONES static void row_exp_shift(real *p, int n, real shift) {
#pragma omp simd
    for (int j = 0; j < n; j++) p[j] = row_exp(p[j] - shift);
}

/* dp[j] = p[j] · (dp[j] - d): the softmax backward of one row. */
ROWS_CLONES static void row_softmax_grad(real *dp, const real *p, int n, real d) {
#pragma omp simd
    for (int j = 0; j < n; j++) dp[j] = p[j] * (dp[j] - d);
}

/* x[j] *= c */
ROWS_CLONES static void row_scale(real *x, int n, real c) {
#pragma omp simd
    for (int j = 0; j < n; j++) x[j] *= c;
}

#endif
