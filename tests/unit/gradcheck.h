/* Finite-difference gradient checks, run on the f64 build of the CPU ops (the dispatcher picks
 * cpu_<op>_f64 for f64 tensors): central differences (f(x+h) - f(x-h)) / 2h in double. The
 * test supplies a scalar objective, typically L = Σ r ⊙ op(x) with fixed random r, so the
 * analytic gradient is the op's backward with dy = r. */
#ifndef VFM_GRADCHECK_H
#define VFM_GRADCHECK_H

#include <stdint.h>

typedef double (*gradcheck_objective)(void *ctx);

/* Compares analytic[i] with the central difference of f over x[i] for every i, or for
 * max_checks indices spread evenly over x when n is larger (0 = all). Passes when
 * |num - ana| <= atol + rtol·max|ana| for each. Restores x. Returns 1 on pass; on failure
 * reports through test_fail with the worst index. */
int gradcheck(const char *what, double *x, const double *analytic, int64_t n, gradcheck_objective f, void *ctx,
              double h, double atol, double rtol, int64_t max_checks, const char *file, int line);
#define GRADCHECK(what, x, analytic, n, f, ctx, h, atol, rtol, max_checks) \
    gradcheck((what), (x), (analytic), (n), (f), (ctx), (h), (atol), (rtol), (max_checks), __FILE__, __LINE__)

/* Asserts some element of g is non-zero (a backward that writes nothing must fail). */
int check_nonzero(const char *what, const double *g, int64_t n, const char *file, int line);
#define CHECK_NONZERO(what, g, n) check_nonzero((what), (g), (n), __FILE__, __LINE__)

/* Σ r[i]·y[i] in double. */
double dot_f64(const double *r, const double *y, int64_t n);

#endif
