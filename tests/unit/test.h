/* A small test harness: TEST(name) registers a test; the runner (test_main.c) forks one child
 * per test, so a crash fails that test only, and ends with "N passed, N failed, N skipped". */
#ifndef VFM_TEST_H
#define VFM_TEST_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "core/tensor.h"

void test_register(const char *name, void (*fn)(void), const char *file);
void test_fail(const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void test_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int test_failed(void);
/* Path of a fixture under tests/fixtures (the runner finds the repository root). */
const char *test_fixture(const char *relpath);
/* A fresh empty directory for this test (removed by the runner afterwards). */
const char *test_tmpdir(void);

#define TEST(name)                                                                              \
    static void name(void);                                                                     \
    __attribute__((constructor)) static void test_register_##name(void) { test_register(#name, name, __FILE__); } \
    static void name(void)

#define CHECK(cond)                                                       \
    do {                                                                  \
        if (!(cond)) test_fail(__FILE__, __LINE__, "CHECK(%s)", #cond);   \
    } while (0)
#define CHECK_MSG(cond, ...)                                    \
    do {                                                        \
        if (!(cond)) test_fail(__FILE__, __LINE__, __VA_ARGS__); \
    } while (0)
/* Stops the test when cond fails (for preconditions later lines rely on). */
#define REQUIRE(cond)                                                        \
    do {                                                                     \
        if (!(cond)) {                                                       \
            test_fail(__FILE__, __LINE__, "REQUIRE(%s)", #cond);             \
            return;                                                          \
        }                                                                    \
    } while (0)
#define CHECK_OK(expr)                                                                                \
    do {                                                                                              \
        vfm_status check_ok_s_ = (expr);                                                              \
        if (check_ok_s_ != VFM_OK)                                                                    \
            test_fail(__FILE__, __LINE__, "%s failed: %s: %s", #expr, vfm_status_name(check_ok_s_), \
                      vfm_last_error());                                                              \
    } while (0)
#define REQUIRE_OK(expr)                                                                                  \
    do {                                                                                                  \
        vfm_status require_ok_s_ = (expr);                                                                \
        if (require_ok_s_ != VFM_OK) {                                                                    \
            test_fail(__FILE__, __LINE__, "%s failed: %s: %s", #expr, vfm_status_name(require_ok_s_),   \
                      vfm_last_error());                                                                  \
            return;                                                                                       \
        }                                                                                                 \
    } while (0)
#define SKIP(...)                 \
    do {                          \
        test_skip(__VA_ARGS__);   \
        return;                   \
    } while (0)
/* The first line of a GPU test (names cuda_*): skips without a CUDA device. `make test` runs these
 * tests in its harness suite, where the CPU harness (tests/harness) is the device. */
#define NEED_GPU()                                                                               \
    do {                                                                                         \
        if (device_cuda_count() == 0) SKIP("no GPU here: the harness suite runs it on the CPU"); \
    } while (0)
/* 1 when the CUDA device is the CPU harness (kernels run on the host: no GPU timing). */
int test_on_cpu_harness(void);

/* Design §3 tolerance rule: passes when max|got-ref| <= atol + rtol·max|ref|. Reports the
 * worst element on failure. Returns 1 when close. */
int check_close_f32(const char *what, const float *got, const float *ref, int64_t n, double atol, double rtol,
                    const char *file, int line);
int check_close_f64(const char *what, const double *got, const double *ref, int64_t n, double atol, double rtol,
                    const char *file, int line);
#define CHECK_CLOSE_F32(what, got, ref, n, atol, rtol) check_close_f32((what), (got), (ref), (n), (atol), (rtol), __FILE__, __LINE__)
#define CHECK_CLOSE_F64(what, got, ref, n, atol, rtol) check_close_f64((what), (got), (ref), (n), (atol), (rtol), __FILE__, __LINE__)

/* The repository root (VFM_ROOT, or the nearest parent holding tests/fixtures) into root. */
void test_find_root(char *root, size_t n);

/* Deterministic test data: uniform in [lo, hi) from a seeded counter RNG. */
void test_fill_uniform_f32(float *x, int64_t n, uint64_t seed, float lo, float hi);
void test_fill_uniform_f64(double *x, int64_t n, uint64_t seed, double lo, double hi);
/* Uniform in [-1, 1) times 2^(i % 16): data whose float sums round differently in another order. */
void test_fill_order_sensitive_f32(float *x, int64_t n, uint64_t seed);
/* A malloc'd copy of an f32 or f64 tensor's values as double / as float (free() it). */
double *test_as_f64(const Tensor *t);
float *test_as_f32(const Tensor *t);

#endif
