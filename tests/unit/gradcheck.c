/* Central-difference gradient checker over f64 buffers. */
#include "gradcheck.h"

#include <math.h>

#include "test.h"

double dot_f64(const double *r, const double *y, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += r[i] * y[i];
    return s;
}

int gradcheck(const char *what, double *x, const double *analytic, int64_t n, gradcheck_objective f, void *ctx,
              double h, double atol, double rtol, int64_t max_checks, const char *file, int line) {
    double maxana = 0;
    for (int64_t i = 0; i < n; i++)
        if (fabs(analytic[i]) > maxana) maxana = fabs(analytic[i]);
    int64_t count = (max_checks > 0 && max_checks < n) ? max_checks : n;
    double worst = 0, worst_num = 0, worst_ana = 0;
    int64_t worst_i = -1;
    for (int64_t c = 0; c < count; c++) {
        int64_t i = count == n ? c : (c * n) / count + (c * 7919) % ((n / count) > 0 ? n / count : 1);
        if (i >= n) i = n - 1;
        double saved = x[i];
        x[i] = saved + h;
        double fp = f(ctx);
        x[i] = saved - h;
        double fm = f(ctx);
        x[i] = saved;
        double num = (fp - fm) / (2 * h);
        double err = fabs(num - analytic[i]);
        if (err != err) err = INFINITY;
        if (err > worst) { worst = err; worst_i = i; worst_num = num; worst_ana = analytic[i]; }
    }
    double bound = atol + rtol * maxana;
    if (worst <= bound) return 1;
    test_fail(file, line, "gradcheck %s: |numeric - analytic| = %.3g > %.3g at [%lld]: numeric %.10g analytic %.10g",
              what, worst, bound, (long long)worst_i, worst_num, worst_ana);
    return 0;
}

int check_nonzero(const char *what, const double *g, int64_t n, const char *file, int line) {
    for (int64_t i = 0; i < n; i++)
        if (g[i] != 0) return 1;
    test_fail(file, line, "%s: every element is zero", what);
    return 0;
}
