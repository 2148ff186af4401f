/* CPU backend: fills, elementwise sums and scalings, EMA, column blocks. */
#include <string.h>

#include "real.h"

vfm_status CPU_FN(fill)(Tensor *x, double value) {
    real *X = RDATA(x);
    int64_t n = tensor_numel(x);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) X[i] = (real)value;
    return VFM_OK;
}

vfm_status CPU_FN(add)(Tensor *out, const Tensor *a, const Tensor *b) {
    real *O = RDATA(out);
    const real *A = CRDATA(a), *B = CRDATA(b);
    int64_t n = tensor_numel(out);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) O[i] = A[i] + B[i];
    return VFM_OK;
}

vfm_status CPU_FN(scale)(Tensor *x, double alpha) {
    real *X = RDATA(x);
    int64_t n = tensor_numel(x);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) X[i] *= (real)alpha;
    return VFM_OK;
}

vfm_status CPU_FN(axpy)(Tensor *y, double alpha, const Tensor *x) {
    real *Y = RDATA(y);
    const real *X = CRDATA(x);
    int64_t n = tensor_numel(y);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) Y[i] += (real)alpha * X[i];
    return VFM_OK;
}

vfm_status CPU_FN(ema_update)(Tensor *ema, const Tensor *param, double decay) {
    real *E = RDATA(ema);
    const real *P = CRDATA(param);
    int64_t n = tensor_numel(ema);
    real d = (real)decay, one_minus = (real)(1.0 - decay);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) E[i] = d * E[i] + one_minus * P[i];
    return VFM_OK;
}

vfm_status CPU_FN(columns_get)(Tensor *out, const Tensor *in, int64_t col0) {
    int64_t rows = tensor_rows(out), d = tensor_dim(out, -1), D = tensor_dim(in, -1);
    const real *src = CRDATA(in);
    real *O = RDATA(out);
    for (int64_t r = 0; r < rows; r++) memcpy(O + r * d, src + r * D + col0, (size_t)d * sizeof(real));
    return VFM_OK;
}

vfm_status CPU_FN(columns_add)(Tensor *out, const Tensor *in, int64_t col0) {
    int64_t rows = tensor_rows(in), d = tensor_dim(in, -1), D = tensor_dim(out, -1);
    const real *src = CRDATA(in);
    real *O = RDATA(out);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < d; j++) O[r * D + col0 + j] += src[r * d + j];
    return VFM_OK;
}
