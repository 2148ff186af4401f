/* Philox-4x32-10 and its normal transform: Random123 known answers, determinism, moments. */
#include <math.h>
#include <stdlib.h>

#include "core/philox.h"
#include "ops/ops.h"
#include "test.h"

TEST(philox_random123_known_answers) {
    /* Random123 kat_vectors, "philox4x32 10" lines: counter, key -> output. */
    static const uint32_t cases[3][10] = {
        {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
        {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d, 0x41c83b0e, 0xa20bc7c6,
         0x6d5451fd},
        {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09, 0x94fdcceb, 0x5001e420,
         0x24126ea1},
    };
    for (int c = 0; c < 3; c++) {
        uint32_t out[4];
        philox4x32_10(cases[c], cases[c] + 4, out);
        for (int i = 0; i < 4; i++) CHECK_MSG(out[i] == cases[c][6 + i], "case %d word %d: %08x != %08x", c, i, out[i], cases[c][6 + i]);
    }
}

TEST(philox_same_key_counter_same_value) {
    for (uint64_t e = 0; e < 64; e++) {
        float a = philox_normal_at(1234, RNG_STREAM_NOISE, 7, 0xabcdef0123ull, e);
        float b = philox_normal_at(1234, RNG_STREAM_NOISE, 7, 0xabcdef0123ull, e);
        CHECK(a == b);
        /* a different stream, step or uid gives a different value */
        CHECK(a != philox_normal_at(1234, RNG_STREAM_SIGMA, 7, 0xabcdef0123ull, e));
        CHECK(a != philox_normal_at(1234, RNG_STREAM_NOISE, 8, 0xabcdef0123ull, e));
        CHECK(a != philox_normal_at(1234, RNG_STREAM_NOISE, 7, 0xabcdef0124ull, e));
    }
}

TEST(philox_log_and_sincos_polynomials_accurate) {
    double worst_log = 0, worst_sc = 0;
    for (int i = 1; i < 200000; i++) {
        float u = (float)i / 200000.0f;
        double rel = fabs(vfm_logf(u) - log((double)u)) / (fabs(log((double)u)) + 1e-30);
        if (rel > worst_log && u < 0.999f) worst_log = rel;
        float s, c;
        vfm_sincos_2pi(u, &s, &c);
        double es = fabs(s - sin(2 * M_PI * (double)u)), ec = fabs(c - cos(2 * M_PI * (double)u));
        if (es > worst_sc) worst_sc = es;
        if (ec > worst_sc) worst_sc = ec;
    }
    CHECK_MSG(worst_log < 2e-6, "log relative error %.3g", worst_log);
    CHECK_MSG(worst_sc < 2e-6, "sincos absolute error %.3g", worst_sc);
}

TEST(philox_normal_moments_and_tails) {
    const int64_t n = 1000000;
    float *x = malloc((size_t)n * sizeof *x);
    Tensor t = TF32(x, n);
    REQUIRE_OK(op_randn_fill(&t, 42, RNG_STREAM_NOISE, 3, 99, 0, 1.0f));
    double m1 = 0, m2 = 0, m3 = 0, m4 = 0;
    int64_t beyond2 = 0, beyond3 = 0;
    for (int64_t i = 0; i < n; i++) {
        double v = x[i];
        m1 += v; m2 += v * v; m3 += v * v * v; m4 += v * v * v * v;
        if (fabs(v) > 2) beyond2++;
        if (fabs(v) > 3) beyond3++;
    }
    m1 /= n; m2 /= n; m3 /= n; m4 /= n;
    /* standard errors for n = 1e6: mean 0.001, var 0.0014, skew 0.0024, kurtosis 0.0049 (×5 margin) */
    CHECK_MSG(fabs(m1) < 0.005, "mean %.5f", m1);
    CHECK_MSG(fabs(m2 - 1) < 0.007, "variance %.5f", m2);
    CHECK_MSG(fabs(m3) < 0.015, "third moment %.5f", m3);
    CHECK_MSG(fabs(m4 - 3) < 0.05, "fourth moment %.5f", m4);
    /* P(|z|>2) = 0.0455, P(|z|>3) = 0.0027 */
    CHECK_MSG(fabs(beyond2 / (double)n - 0.0455) < 0.0015, "P(|z|>2) = %.5f", beyond2 / (double)n);
    CHECK_MSG(fabs(beyond3 / (double)n - 0.0027) < 0.0003, "P(|z|>3) = %.5f", beyond3 / (double)n);
    free(x);
}

TEST(philox_uniform_open_interval) {
    CHECK(philox_uniform(0) > 0.0f);
    CHECK(philox_uniform(0xffffffffu) < 1.0f);
    CHECK(philox_uniform(0x80000000u) == 0.5f + 5.9604644775390625e-8f);
}
