/* The CPU ops' vectorised exp for the attention's softmax (src/ops/cpu/vec_math.h): its stated
 * accuracy against double exp over its domain, in the build without fused multiply-adds and in
 * the clone this CPU runs (FMA_CLONES, as the attention calls it), e^0 = 1, NaN kept, the clamp
 * below -87, and no subnormal result (which would cost a microcode assist per score). */
#include <float.h>
#include <math.h>
#include <string.h>

#include "ops/cpu/real.h"
#include "ops/cpu/vec_math.h"
#include "test.h"

FMA_CONTRACT_BEGIN
/* y[i] = vec_exp_softmax(x[i]) in the clone of this CPU, multiply-adds fused where it has FMA. */
FMA_CLONES static void exp_fma_clone(float *y, const float *x, int n) {
#pragma omp simd
    for (int i = 0; i < n; i++) y[i] = vec_exp_softmax(x[i]);
}
FMA_CONTRACT_END

/* y[i] = vec_exp_softmax(x[i]) as the baseline compiles it: no fused multiply-add. */
static void exp_plain(float *y, const float *x, int n) {
    for (int i = 0; i < n; i++) y[i] = vec_exp_softmax(x[i]);
}

#define POINTS 4096

/* The largest |got - e^x| / e^x / FLT_EPSILON over POINTS·rounds points spread over [lo, hi]. */
static double worst_eps(void (*fn)(float *, const float *, int), double lo, double hi, int rounds) {
    static float x[POINTS], y[POINTS];
    double worst = 0;
    for (int k = 0; k < rounds; k++) {
        for (int i = 0; i < POINTS; i++) x[i] = (float)(lo + (hi - lo) * ((double)k * POINTS + i) / ((double)rounds * POINTS));
        fn(y, x, POINTS);
        for (int i = 0; i < POINTS; i++) {
            double want = exp((double)x[i]), err = fabs(y[i] - want) / want / FLT_EPSILON;
            worst = err > worst ? err : worst;
        }
    }
    return worst;
}

TEST(vec_exp_softmax_within_its_stated_error) {
    void (*fns[2])(float *, const float *, int) = {exp_plain, exp_fma_clone};
    const char *names[2] = {"without FMA", "in this CPU's clone"};
    for (int f = 0; f < 2; f++) {
        double err = worst_eps(fns[f], -87, 0.5, 500);
        CHECK_MSG(err <= 2.0, "%s: max error over [-87, 0.5] %.2f eps (the header says 2)", names[f], err);
        float zero[2] = {0.0f, -0.0f}, one[2];
        fns[f](one, zero, 2);
        CHECK_MSG(one[0] == 1.0f && one[1] == 1.0f, "%s: e^0 = %.9g, e^-0 = %.9g", names[f], one[0], one[1]);
    }
}

TEST(vec_exp_softmax_keeps_nan_clamps_below_and_never_goes_subnormal) {
    float x[6] = {NAN, -NAN, -87.01f, -100.0f, -1e30f, -FLT_MAX}, y[6];
    exp_fma_clone(y, x, 6);
    CHECK(isnan(y[0]) && isnan(y[1]));
    double e87 = exp(-87.0);
    for (int i = 2; i < 6; i++)
        CHECK_MSG(fabs(y[i] - e87) <= 2 * FLT_EPSILON * e87, "e^%g gave %.9g, not e^-87 (%.9g)", x[i], y[i], e87);
    static float xs[POINTS], ys[POINTS];
    for (int i = 0; i < POINTS; i++) xs[i] = -87.0f + 87.0f * i / (POINTS - 1);
    exp_fma_clone(ys, xs, POINTS);
    for (int i = 0; i < POINTS; i++) CHECK_MSG(fpclassify(ys[i]) == FP_NORMAL, "e^%.4f is not a normal float", xs[i]);
}
