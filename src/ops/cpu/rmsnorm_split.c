/* RMSNorm over a row split across ranks (ops.h op_rmsnorm_sumsq … _split_backward), CPU. */
#include "real.h"

vfm_status CPU_FN(rmsnorm_sumsq)(Tensor *sumsq, const Tensor *x) {
    int64_t N = x->shape[0], d = x->shape[1];
    const real *X = CRDATA(x);
    real *SS = RDATA(sumsq);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < N; r++) {
        double sq = 0;
        for (int64_t j = 0; j < d; j++) sq += (double)X[r * d + j] * (double)X[r * d + j];
        SS[r] = (real)sq;
    }
    return VFM_OK;
}

vfm_status CPU_FN(rmsnorm_split_forward)(Tensor *y, Tensor *rstd, const Tensor *x, const Tensor *w,
                                         const Tensor *sumsq, int64_t n, float eps) {
    int64_t N = x->shape[0], d = x->shape[1];
    const real *X = CRDATA(x), *W = CRDATA(w), *SS = CRDATA(sumsq);
    real *Y = RDATA(y), *R = RDATA(rstd);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < N; r++) {
        real rs = (real)(1.0 / sqrt((double)SS[r] / (double)n + (double)eps));
        R[r] = rs;
        for (int64_t j = 0; j < d; j++) Y[r * d + j] = X[r * d + j] * rs * W[j];
    }
    return VFM_OK;
}

vfm_status CPU_FN(rmsnorm_dot)(Tensor *dot, const Tensor *dy, const Tensor *x, const Tensor *w) {
    int64_t N = x->shape[0], d = x->shape[1];
    const real *X = CRDATA(x), *DY = CRDATA(dy), *W = CRDATA(w);
    real *DOT = RDATA(dot);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < N; r++) {
        double s = 0;
        for (int64_t j = 0; j < d; j++) s += (double)(DY[r * d + j] * W[j]) * (double)X[r * d + j];
        DOT[r] = (real)s;
    }
    return VFM_OK;
}

vfm_status CPU_FN(rmsnorm_split_backward)(Tensor *dx, Tensor *dw, const Tensor *dy, const Tensor *x,
                                          const Tensor *rstd, const Tensor *w, const Tensor *dot, int64_t n) {
    int64_t N = x->shape[0], d = x->shape[1];
    const real *X = CRDATA(x), *DY = CRDATA(dy), *R = CRDATA(rstd), *W = CRDATA(w), *DOT = CRDATA(dot);
    if (dx) {
        real *DX = RDATA(dx);
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < N; r++) {
            real rs = R[r], c = (real)((double)rs * (double)rs * (double)DOT[r] / (double)n);
            for (int64_t j = 0; j < d; j++) DX[r * d + j] = rs * (DY[r * d + j] * W[j] - X[r * d + j] * c);
        }
    }
    /* dw = Σ_rows dy·x·rstd: op_rmsnorm_backward's weight gradient */
    return dw ? CPU_FN(rmsnorm_backward)(NULL, dw, dy, x, rstd, w) : VFM_OK;
}
