/* Tests of the numerics ops (NaN/Inf count, sum of squares, Philox normal fill) and of the small
 * utility ops (add with aliasing, column blocks, EMA, f32 <-> bf16 conversion). */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/philox.h"
#include "ops/ops.h"
#include "test.h"

/* ---- op_count_nonfinite ------------------------------------------------------------- */

TEST(ops_numerics_count_nonfinite) {
    enum { N = 1000 };
    float *x = calloc(N, sizeof *x);
    double *y = calloc(N, sizeof *y);
    Tensor X = TF32(x, N), Y = TF64(y, N);
    int64_t c32 = -1, c64 = -1;
    x[0] = FLT_MAX; x[1] = -FLT_MAX; x[2] = FLT_MIN / 4; /* large, tiny and subnormal are finite */
    y[0] = DBL_MAX; y[1] = -DBL_MAX; y[2] = DBL_MIN / 4;
    REQUIRE_OK(op_count_nonfinite(&c32, &X));
    REQUIRE_OK(op_count_nonfinite(&c64, &Y));
    CHECK(c32 == 0 && c64 == 0);
    const double bad[3] = {NAN, INFINITY, -INFINITY};
    for (int k = 0; k < 3; k++) { /* one non-finite value, at an interior position */
        x[500] = (float)bad[k]; y[777] = bad[k];
        REQUIRE_OK(op_count_nonfinite(&c32, &X));
        REQUIRE_OK(op_count_nonfinite(&c64, &Y));
        CHECK_MSG(c32 == 1 && c64 == 1, "kind %d: counts %lld %lld", k, (long long)c32, (long long)c64);
        x[500] = 0; y[777] = 0;
    }
    x[0] = NAN; x[N - 1] = INFINITY; x[3] = -INFINITY;
    REQUIRE_OK(op_count_nonfinite(&c32, &X));
    CHECK(c32 == 3);
    free(x);
    free(y);
}

/* ---- op_sum_squares ----------------------------------------------------------------- */

TEST(ops_numerics_sum_squares_known_value) {
    enum { N = 1000 };
    float x[N];
    double y[N];
    for (int i = 0; i < N; i++) x[i] = (float)(y[i] = i % 2 ? -i : i);
    Tensor X = TF32(x, N), Y = TF64(y, N);
    double s32 = 0, s64 = 0;
    REQUIRE_OK(op_sum_squares(&s32, &X));
    REQUIRE_OK(op_sum_squares(&s64, &Y));
    /* Σ_{i<1000} i² = 999·1000·1999/6, every partial sum an integer below 2^53: exact */
    CHECK(s32 == 332833500.0);
    CHECK(s64 == 332833500.0);
    Tensor empty = TF32(x, 0);
    REQUIRE_OK(op_sum_squares(&s32, &empty));
    CHECK(s32 == 0);
}

TEST(ops_numerics_sum_squares_thread_independent) {
    enum { N = 100003 };
    float *x = malloc(sizeof(float) * N);
    double *y = malloc(sizeof(double) * N);
    test_fill_uniform_f32(x, N, 81, -3, 3);
    test_fill_uniform_f64(y, N, 82, -3, 3);
    Tensor X = TF32(x, N), Y = TF64(y, N);
    double a32, b32, a64, b64;
    ops_set_threads(1);
    REQUIRE_OK(op_sum_squares(&a32, &X));
    REQUIRE_OK(op_sum_squares(&a64, &Y));
    ops_set_threads(2);
    REQUIRE_OK(op_sum_squares(&b32, &X));
    REQUIRE_OK(op_sum_squares(&b64, &Y));
    ops_set_threads(1);
    CHECK(memcmp(&a32, &b32, sizeof a32) == 0);
    CHECK(memcmp(&a64, &b64, sizeof a64) == 0);
    double serial = 0;
    for (int i = 0; i < N; i++) serial += (double)x[i] * (double)x[i];
    /* another summation order of N positive terms: relative difference ~N·1e-16 at worst */
    CHECK_MSG(fabs(a32 - serial) <= 1e-11 * serial, "%.17g vs %.17g", a32, serial);
    free(x);
    free(y);
}

/* ---- op_randn_fill ------------------------------------------------------------------ */

/* Element e of the documented stream, built from the primitives: key (seed lo, stream ^ seed hi),
 * counter (e/4, step, uid lo, uid hi), uniform ((x >> 8) | 1)·2^-24, Box–Muller on lanes
 * (0,1) and (2,3), lane e % 4. */
static float expected_normal(uint64_t seed, uint32_t stream, uint32_t step, uint64_t uid, uint64_t e) {
    uint32_t key[2] = {(uint32_t)seed, stream ^ (uint32_t)(seed >> 32)};
    uint32_t ctr[4] = {(uint32_t)(e / 4), step, (uint32_t)uid, (uint32_t)(uid >> 32)}, x[4];
    philox4x32_10(ctr, key, x);
    float u[4], z[4];
    for (int i = 0; i < 4; i++) u[i] = (float)((x[i] >> 8) | 1u) * 0x1p-24f;
    vfm_box_muller(u[0], u[1], &z[0], &z[1]);
    vfm_box_muller(u[2], u[3], &z[2], &z[3]);
    return z[e % 4];
}

TEST(ops_numerics_randn_fill_is_philox_box_muller) {
    enum { N = 61, OFF = 7 };
    const uint64_t seed = 0x0123456789abcdefull, uid = 0xfedcba9876543210ull;
    const uint32_t stream = RNG_STREAM_NOISE, step = 12;
    float a[N + OFF], b[N], c[N];
    double d[N];
    Tensor A = TF32(a, N + OFF), Bt = TF32(b, N), Ct = TF32(c, N), Dt = TF64(d, N);
    REQUIRE_OK(op_randn_fill(&A, seed, stream, step, uid, 0, 1.0f));
    int same = 1;
    for (uint64_t e = 0; e < N + OFF; e++) same &= a[e] == expected_normal(seed, stream, step, uid, e);
    CHECK(same);
    /* element_offset shifts the sequence: element i of the fill is element offset + i */
    REQUIRE_OK(op_randn_fill(&Bt, seed, stream, step, uid, OFF, 1.0f));
    CHECK(memcmp(b, a + OFF, sizeof b) == 0);
    /* std scales each draw (one float multiply) */
    REQUIRE_OK(op_randn_fill(&Ct, seed, stream, step, uid, OFF, 2.5f));
    same = 1;
    for (int i = 0; i < N; i++) same &= c[i] == 2.5f * b[i];
    CHECK(same);
    /* the f64 build draws the same values */
    REQUIRE_OK(op_randn_fill(&Dt, seed, stream, step, uid, OFF, 2.5f));
    same = 1;
    for (int i = 0; i < N; i++) same &= d[i] == (double)c[i];
    CHECK(same);
    /* a different step or uid changes the draws */
    REQUIRE_OK(op_randn_fill(&Bt, seed, stream, step + 1, uid, OFF, 1.0f));
    CHECK(memcmp(b, a + OFF, sizeof b) != 0);
}

/* ---- small utilities ------------------------------------------------------------------ */

TEST(ops_util_add_aliasing) {
    enum { N = 37 };
    float a[N], b[N], a0[N], b0[N], want[N];
    test_fill_uniform_f32(a0, N, 91, -1, 1);
    test_fill_uniform_f32(b0, N, 92, -1, 1);
    Tensor A = TF32(a, N), B = TF32(b, N);
    for (int i = 0; i < N; i++) want[i] = a0[i] + b0[i];
    memcpy(a, a0, sizeof a); memcpy(b, b0, sizeof b);
    REQUIRE_OK(op_add(&A, &A, &B)); /* out aliases a */
    CHECK(memcmp(a, want, sizeof a) == 0 && memcmp(b, b0, sizeof b) == 0);
    memcpy(a, a0, sizeof a);
    REQUIRE_OK(op_add(&B, &A, &B)); /* out aliases b */
    CHECK(memcmp(b, want, sizeof b) == 0 && memcmp(a, a0, sizeof a) == 0);
    memcpy(a, a0, sizeof a);
    REQUIRE_OK(op_add(&A, &A, &A)); /* all three the same */
    for (int i = 0; i < N; i++) want[i] = 2 * a0[i];
    CHECK(memcmp(a, want, sizeof a) == 0);
    double d[N] = {0};
    Tensor Dt = TF64(d, N);
    CHECK(op_add(&A, &A, &Dt) == VFM_ERR_SHAPE);
}

TEST(ops_util_columns_get_add_round_trip) {
    enum { R = 3, D = 10, d = 3, COL0 = 4 };
    double in[R * D], part[R * d], out[R * D] = {0};
    test_fill_uniform_f64(in, R * D, 93, -1, 1);
    Tensor IN = TF64(in, R, D), PART = TF64(part, R, d), OUT = TF64(out, R, D);
    REQUIRE_OK(op_columns_get(&PART, &IN, COL0));
    for (int r = 0; r < R; r++)
        for (int j = 0; j < d; j++) CHECK(part[r * d + j] == in[r * D + COL0 + j]);
    REQUIRE_OK(op_columns_add(&OUT, &PART, COL0));
    REQUIRE_OK(op_columns_add(&OUT, &PART, COL0)); /* += : twice gives double */
    int ok = 1;
    for (int r = 0; r < R; r++)
        for (int j = 0; j < D; j++) {
            double want = (j >= COL0 && j < COL0 + d) ? 2 * in[r * D + j] : 0;
            ok &= out[r * D + j] == want;
        }
    CHECK(ok);
    CHECK(op_columns_get(&PART, &IN, D - d + 1) == VFM_ERR_SHAPE); /* runs past the last column */
    CHECK(op_columns_add(&OUT, &PART, -1) == VFM_ERR_SHAPE);
}

TEST(ops_util_ema_update) {
    double e[3] = {1, 2, 5}, p[3] = {3, -4, 5};
    Tensor E = TF64(e, 3), P = TF64(p, 3);
    REQUIRE_OK(op_ema_update(&E, &P, 0.9));
    double want[3] = {0.9 * 1 + 0.1 * 3, 0.9 * 2 + 0.1 * -4, 5};
    CHECK_CLOSE_F64("ema f64", e, want, 3, 1e-15, 0);
    float ef[3] = {1, 2, 5}, pf[3] = {3, -4, 5};
    Tensor EF = TF32(ef, 3), PF = TF32(pf, 3);
    REQUIRE_OK(op_ema_update(&EF, &PF, 0.999));
    float wantf[3];
    for (int i = 0; i < 3; i++) wantf[i] = 0.999f * (float[]){1, 2, 5}[i] + (float)(1.0 - 0.999) * pf[i];
    CHECK(memcmp(ef, wantf, sizeof ef) == 0);
    REQUIRE_OK(op_ema_update(&EF, &PF, 0.0)); /* decay 0: a copy of param */
    CHECK(memcmp(ef, pf, sizeof ef) == 0);
}

static float f32_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

TEST(ops_util_convert_bf16_round_to_nearest_even) {
    enum { N = 10 };
    const uint32_t in_bits[N] = {
        0x3f800000u, /* 1.0: exact */
        0x3f808000u, /* 1 + 2^-8: tie between 0x3f80 and 0x3f81 -> even 0x3f80 */
        0x3f818000u, /* 1 + 3·2^-8: tie between 0x3f81 and 0x3f82 -> even 0x3f82 */
        0x3f807fffu, /* just below the tie -> down */
        0x3f808001u, /* just above the tie -> up */
        0xbf818000u, /* negative tie -> even, magnitude up: 0xbf82 */
        0x7f7fffffu, /* FLT_MAX rounds to +Inf */
        0x7f800000u, /* +Inf stays */
        0xff800000u, /* -Inf stays */
        0x00000001u, /* smallest subnormal -> +0 */
    };
    const uint16_t want[N] = {0x3f80, 0x3f80, 0x3f82, 0x3f80, 0x3f81, 0xbf82, 0x7f80, 0x7f80, 0xff80, 0x0000};
    float in[N], back[N];
    uint16_t out[N];
    for (int i = 0; i < N; i++) in[i] = f32_bits(in_bits[i]);
    Tensor F = TF32(in, N), H = TENSOR(out, DT_BF16, DEV_CPU, N), BACK = TF32(back, N);
    REQUIRE_OK(op_convert(&H, &F));
    for (int i = 0; i < N; i++) CHECK_MSG(out[i] == want[i], "%08x -> %04x, want %04x", in_bits[i], out[i], want[i]);
    /* bf16 -> f32 is exact: the bits move to the high half */
    REQUIRE_OK(op_convert(&BACK, &H));
    for (int i = 0; i < N; i++) CHECK(memcmp(&back[i], &(uint32_t){(uint32_t)want[i] << 16}, 4) == 0);
    CHECK(back[2] == 1.015625f); /* 0x3f82 = 1 + 2^-6 */
    /* NaN stays NaN */
    float nan_in[1] = {NAN};
    uint16_t nan_out[1];
    Tensor NI = TF32(nan_in, 1), NO = TENSOR(nan_out, DT_BF16, DEV_CPU, 1);
    REQUIRE_OK(op_convert(&NO, &NI));
    CHECK((nan_out[0] & 0x7f80) == 0x7f80 && (nan_out[0] & 0x007f) != 0);
}
