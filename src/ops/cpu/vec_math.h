/* Elementwise math that the compiler vectorises, for the CPU op loops (attention's softmax rows,
 * GELU): e^x and 1 + erf(z). Include after real.h.
 *
 * libm's expf and erff are scalar calls, and one of them per element costs more than the
 * element's share of the GEMM around it. In the f32 build these are polynomials written with
 * arithmetic and integer selects only (a float compare-and-select of a computed value stops GCC
 * from vectorising the loop: it will not move a trapping float op out of a branch); the f64 build
 * (the gradient checks' twin) keeps libm.
 *
 * Loops over them are compiled for several CPUs, the clone picked once per process:
 * - VEC_CLONES: AVX-512, AVX2 and the baseline; with -ffp-contract=off no clone fuses a
 *   multiply-add, so every clone of an elementwise loop gives the same bits;
 * - FMA_CLONES, for code between FMA_CONTRACT_BEGIN and FMA_CONTRACT_END: x86-64-v4 (AVX-512),
 *   x86-64-v3 (AVX2 + FMA) and the baseline, with multiply-adds fused where the CPU has FMA (a
 *   polynomial then costs half the instructions). Like OpenBLAS's own kernels, a machine gives
 *   the same bits every run and at any thread count; CPUs of another kind may differ in the last
 *   bits. */
#ifndef VFM_CPU_VEC_MATH_H
#define VFM_CPU_VEC_MATH_H

#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && !defined(__clang__)
#define VEC_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#define FMA_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define VEC_CLONES
#define FMA_CLONES
#endif
#if defined(__GNUC__) && !defined(__clang__)
#define FMA_CONTRACT_BEGIN _Pragma("GCC push_options") _Pragma("GCC optimize(\"fp-contract=fast\")")
#define FMA_CONTRACT_END _Pragma("GCC pop_options")
#else
#define FMA_CONTRACT_BEGIN
#define FMA_CONTRACT_END
#endif

#ifdef VFM_REAL_F64
static inline real vec_exp(real x) { return exp(x); }
static inline real vec_exp_softmax(real x) { return exp(x); }
static inline real vec_one_plus_erf(real z) { return 1 + erf(z); }
#else
static inline uint32_t f32_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static inline float f32_from_bits(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* The range reduction of both exps: x = n·ln 2 + r with n = round(x / ln 2), |r| <= ln2 / 2; *t is
 * x / ln 2 + 1.5·2^23, whose low mantissa bits hold n (two's complement). ln 2 in two parts (Cody
 * and Waite): n times the first is exact, so r is accurate with or without fused multiply-adds.
 * For |x| < 2^22. */
static inline float exp_reduce(float x, float *t) {
    const float round_magic = 12582912.0f; /* 1.5·2^23: y + it has round(y) in its low mantissa bits */
    *t = x * 1.44269504088896341f + round_magic;
    float n = *t - round_magic;
    float r = x - n * 0.693359375f;
    return r - n * -2.12194440e-4f;
}

/* e^x = 2^n · e^r with n = round(x / ln 2) and |r| <= ln2 / 2; e^r by Cephes' degree-6
 * polynomial (about 1 ulp); 2^n from the exponent bits. Below -87 (where e^x < 2^-125) the result
 * is 0; NaN gives NaN. Only for x <= 88 (the callers' arguments are <= 0 up to rounding) and not
 * for x = -inf (it gives NaN). */
static inline float vec_exp(float x) {
    uint32_t ux = f32_bits(x);
    ux = ux > 0xC2C80000u ? 0xC2C80000u : ux; /* x < -100 (a negative float's bits grow with |x|): -100 */
    float xc = f32_from_bits(ux), t;
    float r = exp_reduce(xc, &t);
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
    return p * f32_from_bits((uint32_t)bits) + (x - x); /* x - x: +0, or NaN for a NaN x (the clamp may have dropped it) */
}

/* e^x for the attention's softmax, whose arguments are scores minus their row's maximum or
 * log-sum-exp: x <= 0 up to rounding, never -inf. Thirteen vector instructions against vec_exp's
 * twenty, the probabilities being summed or multiplied into a product right after: x below -87
 * is taken as -87 (e^-87 = 1.6e-38 instead of a smaller number or 0, so that 2^n stays a normal
 * float and is added into p's exponent bits instead of multiplied), and e^r by a degree-5 fit of
 * relative error 9e-8 on [-ln2/2, ln2/2] with p(0) = 1. Within 2 eps (f32 epsilon) of e^x over
 * [-87, 0.5] with or without fused multiply-adds (tests/unit/test_vec_math.c); e^0 = 1; NaN
 * gives NaN (a NaN fails the clamp's compare and goes through). Not for x > 0.5. */
static inline float vec_exp_softmax(float x) {
    float xc = x < -87.0f ? -87.0f : x, t;
    float r = exp_reduce(xc, &t);
    float p = 8.290314726e-03f;
    p = p * r + 4.189793005e-02f;
    p = p * r + 1.666763620e-01f;
    p = p * r + 4.999914953e-01f;
    p = p * r + 9.999997072e-01f;
    p = p * r + 1.0f;
    /* t's low mantissa bits hold n (two's complement), so t's bits << 23 are n << 23: n added to
     * p's exponent. p·2^n stays normal: n >= -126, and n = -126 only for x in [-87, -86.99],
     * where r > 0.33 and p > 1. */
    return f32_from_bits(f32_bits(p) + (f32_bits(t) << 23));
}

/* 1 + erf(z), accurate relative to its value on both sides (so GELU's negative tail, where
 * 1 + erf is small, is not lost to cancellation as it is with 1 + erff): with a = |z|,
 * erfc(a) = t·e^(-a² + P(t)), t = 1 / (1 + a/2), P of degree 9 (a Chebyshev fit of
 * ln(erfc(a)/t) + a² over a in [0, 12], relative error 6e-8: Numerical Recipes' erfcc form with
 * one more term); 1 + erf(z) = 2 - erfc(a) for z >= 0, erfc(a) below. Measured against double
 * erfc: within 3.1 ulp for z >= 0, 5.7 ulp for z >= -1 and 2e-6 relative down to z = -4. */
static inline float vec_one_plus_erf(float z) {
    uint32_t bits = f32_bits(z), abs_bits = bits & 0x7FFFFFFFu;
    abs_bits = abs_bits > 0x41400000u ? 0x41400000u : abs_bits; /* a <= 12 (and NaN: 12): erfc(12) = 0 in f32 */
    float a = f32_from_bits(abs_bits);
    float t = 1.0f / (1.0f + 0.5f * a);
    float p = 0.1577510138552879f;
    p = p * t + -0.7501815783289075f;
    p = p * t + 1.3186529515768664f;
    p = p * t + -0.9097406754647988f;
    p = p * t + 0.09432142905568908f;
    p = p * t + -0.09025565957484005f;
    p = p * t + 0.06523265115371302f;
    p = p * t + 0.3803541216643985f;
    p = p * t + 0.999348078308427f;
    p = p * t + -1.2654822745678287f;
    float erfc_a = t * vec_exp(p - a * a);
    uint32_t above = f32_bits(2.0f - erfc_a), below = f32_bits(erfc_a);
    uint32_t negative = (uint32_t)0 - (bits >> 31); /* all ones when the sign bit is set */
    return f32_from_bits((above & ~negative) | (below & negative)) + (z - z);
}
#endif

#endif
