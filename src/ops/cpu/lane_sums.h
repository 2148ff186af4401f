/* Sums over one row in double, in SUM_LANES fixed lanes: element j goes to lane j % SUM_LANES, in
 * order, and the lanes are added in a fixed tree at the end. A serial double sum waits for each
 * add (a row of 128 costs 128 add latencies); the lanes are independent, so the compiler
 * vectorises them, and because the order is written out, every vector width (VEC_CLONES) and
 * thread count gives the same bits. Include after real.h, in functions compiled with VEC_CLONES. */
#ifndef VFM_CPU_LANE_SUMS_H
#define VFM_CPU_LANE_SUMS_H

#include <stdint.h>

#define SUM_LANES 8

static inline double lanes_total(const double acc[SUM_LANES]) {
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* Σ x[j] */
static inline double lane_sum(const real *x, int64_t n) {
    double acc[SUM_LANES] = {0};
    int64_t j = 0;
    for (; j + SUM_LANES <= n; j += SUM_LANES)
        for (int l = 0; l < SUM_LANES; l++) acc[l] += (double)x[j + l];
    for (int l = 0; j < n; j++, l++) acc[l] += (double)x[j];
    return lanes_total(acc);
}

/* Σ (x[j] - mu)² */
static inline double lane_sum_sq_dev(const real *x, int64_t n, double mu) {
    double acc[SUM_LANES] = {0};
    int64_t j = 0;
    for (; j + SUM_LANES <= n; j += SUM_LANES)
        for (int l = 0; l < SUM_LANES; l++) {
            double d = (double)x[j + l] - mu;
            acc[l] += d * d;
        }
    for (int l = 0; j < n; j++, l++) {
        double d = (double)x[j] - mu;
        acc[l] += d * d;
    }
    return lanes_total(acc);
}

#endif
