/* Helpers shared by the two test runners (tests/unit/test_main.c, tests/mpi/mpi_main.c): the
 * tolerance checks of design §3, deterministic test data, and where the repository root is. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/cuda_runtime_shim.h"
#include "core/philox.h"
#include "test.h"

static int close_report(const char *what, double maxerr, double maxref, int64_t worst, double gotv, double refv,
                        double atol, double rtol, const char *file, int line) {
    double bound = atol + rtol * maxref;
    if (maxerr <= bound) return 1;
    test_fail(file, line, "%s: max|got-ref| = %.3g > %.3g (atol %.1e + rtol %.1e * max|ref| %.3g) at [%lld]: got %.9g ref %.9g",
              what, maxerr, bound, atol, rtol, maxref, (long long)worst, gotv, refv);
    return 0;
}

int check_close_f32(const char *what, const float *got, const float *ref, int64_t n, double atol, double rtol,
                    const char *file, int line) {
    double maxerr = 0, maxref = 0;
    int64_t worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - (double)ref[i]);
        if (e != e) e = INFINITY; /* NaN counts as infinitely wrong */
        if (e > maxerr) { maxerr = e; worst = i; }
        if (fabs((double)ref[i]) > maxref) maxref = fabs((double)ref[i]);
    }
    return close_report(what, maxerr, maxref, worst, n ? got[worst] : 0, n ? ref[worst] : 0, atol, rtol, file, line);
}

int check_close_f64(const char *what, const double *got, const double *ref, int64_t n, double atol, double rtol,
                    const char *file, int line) {
    double maxerr = 0, maxref = 0;
    int64_t worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs(got[i] - ref[i]);
        if (e != e) e = INFINITY;
        if (e > maxerr) { maxerr = e; worst = i; }
        if (fabs(ref[i]) > maxref) maxref = fabs(ref[i]);
    }
    return close_report(what, maxerr, maxref, worst, n ? got[worst] : 0, n ? ref[worst] : 0, atol, rtol, file, line);
}

void test_fill_uniform_f32(float *x, int64_t n, uint64_t seed, float lo, float hi) {
    for (int64_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * philox_uniform_at(seed, 99, 0, 0, (uint64_t)i);
}

void test_fill_uniform_f64(double *x, int64_t n, uint64_t seed, double lo, double hi) {
    for (int64_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * (double)philox_uniform_at(seed, 99, 0, 0, (uint64_t)i);
}

void test_find_root(char *root, size_t n) {
    const char *env = getenv("VFM_ROOT");
    if (env) {
        snprintf(root, n, "%s", env);
        return;
    }
    char path[1024] = ".";
    for (int up = 0; up < 6; up++) {
        char probe[1100];
        snprintf(probe, sizeof probe, "%s/tests/fixtures", path);
        struct stat st;
        if (stat(probe, &st) == 0) {
            snprintf(root, n, "%s", path);
            return;
        }
        strncat(path, "/..", sizeof path - strlen(path) - 1);
    }
}

double *test_as_f64(const Tensor *t) {
    int64_t n = tensor_numel(t);
    double *d = malloc((size_t)(n ? n : 1) * sizeof *d);
    for (int64_t i = 0; i < n; i++)
        d[i] = t->dtype == DT_F32 ? (double)((const float *)t->data)[i] : ((const double *)t->data)[i];
    return d;
}

float *test_as_f32(const Tensor *t) {
    int64_t n = tensor_numel(t);
    float *f = malloc((size_t)(n ? n : 1) * sizeof *f);
    for (int64_t i = 0; i < n; i++)
        f[i] = t->dtype == DT_F32 ? ((const float *)t->data)[i] : (float)((const double *)t->data)[i];
    return f;
}

int test_on_cpu_harness(void) { return device_cuda_count() > 0 && strstr(vfm_cuda_device_name(), "CPU harness") != NULL; }

void test_fill_order_sensitive_f32(float *x, int64_t n, uint64_t seed) {
    test_fill_uniform_f32(x, n, seed, -1.0f, 1.0f);
    for (int64_t i = 0; i < n; i++) x[i] *= (float)(1 << (i % 16));
}
