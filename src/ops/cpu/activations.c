/* CPU backend: pointwise activations GELU (erf and tanh forms), SiLU and SwiGLU, forward and
 * backward. The GELU functions also serve as the epilogue of the linear op (linear.c). */
#include "real.h"

#define GELU_SQRT_2_OVER_PI ((real)0.79788456080286535588)
#define GELU_TANH_CUBIC ((real)0.044715)
#define GELU_INV_SQRT2 ((real)0.70710678118654752440)
#define GELU_INV_SQRT_2PI ((real)0.39894228040143267794)

static inline real gelu_value(real x, Activation kind) {
    if (kind == ACT_GELU_TANH) {
        real u = GELU_SQRT_2_OVER_PI * (x + GELU_TANH_CUBIC * x * x * x);
        return (real)0.5 * x * ((real)1 + tanh(u));
    }
    return (real)0.5 * x * ((real)1 + erf(x * GELU_INV_SQRT2));
}

/* d gelu(x) / dx */
static inline real gelu_slope(real x, Activation kind) {
    if (kind == ACT_GELU_TANH) {
        real x2 = x * x;
        real t = tanh(GELU_SQRT_2_OVER_PI * (x + GELU_TANH_CUBIC * x2 * x));
        real du = GELU_SQRT_2_OVER_PI * ((real)1 + (real)3 * GELU_TANH_CUBIC * x2);
        return (real)0.5 * ((real)1 + t) + (real)0.5 * x * ((real)1 - t * t) * du;
    }
    real cdf = (real)0.5 * ((real)1 + erf(x * GELU_INV_SQRT2));
    real pdf = GELU_INV_SQRT_2PI * exp((real)-0.5 * x * x);
    return cdf + x * pdf;
}

static inline real sigmoid(real x) { return (real)1 / ((real)1 + exp(-x)); }

vfm_status CPU_FN(gelu_forward)(Tensor *y, const Tensor *x, Activation kind) {
    real *Y = RDATA(y);
    const real *X = CRDATA(x);
    int64_t n = tensor_numel(x);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) Y[i] = gelu_value(X[i], kind);
    return VFM_OK;
}

/* dx may alias dy (the linear backward turns dy into dpre in place). */
vfm_status CPU_FN(gelu_backward)(Tensor *dx, const Tensor *dy, const Tensor *x, Activation kind) {
    real *DX = RDATA(dx);
    const real *DY = CRDATA(dy), *X = CRDATA(x);
    int64_t n = tensor_numel(x);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) DX[i] = DY[i] * gelu_slope(X[i], kind);
    return VFM_OK;
}

vfm_status CPU_FN(silu_forward)(Tensor *y, const Tensor *x) {
    real *Y = RDATA(y);
    const real *X = CRDATA(x);
    int64_t n = tensor_numel(x);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) Y[i] = X[i] * sigmoid(X[i]);
    return VFM_OK;
}

vfm_status CPU_FN(silu_backward)(Tensor *dx, const Tensor *dy, const Tensor *x) {
    real *DX = RDATA(dx);
    const real *DY = CRDATA(dy), *X = CRDATA(x);
    int64_t n = tensor_numel(x);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
        real s = sigmoid(X[i]);
        DX[i] = DY[i] * s * ((real)1 + X[i] * ((real)1 - s));
    }
    return VFM_OK;
}

vfm_status CPU_FN(swiglu_forward)(Tensor *y, const Tensor *x) {
    int64_t rows = tensor_rows(y), F = tensor_dim(y, -1);
    real *Y = RDATA(y);
    const real *X = CRDATA(x);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const real *gate = X + r * 2 * F, *value = gate + F;
        real *out = Y + r * F;
        for (int64_t j = 0; j < F; j++) out[j] = gate[j] * sigmoid(gate[j]) * value[j];
    }
    return VFM_OK;
}

vfm_status CPU_FN(swiglu_backward)(Tensor *dx, const Tensor *dy, const Tensor *x) {
    int64_t rows = tensor_rows(dy), F = tensor_dim(dy, -1);
    real *DX = RDATA(dx);
    const real *DY = CRDATA(dy), *X = CRDATA(x);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const real *gate = X + r * 2 * F, *value = gate + F, *g = DY + r * F;
        real *dgate = DX + r * 2 * F, *dvalue = dgate + F;
        for (int64_t j = 0; j < F; j++) {
            real a = gate[j], s = sigmoid(a);
            real silu = a * s;
            dgate[j] = g[j] * value[j] * s * ((real)1 + a * ((real)1 - s));
            dvalue[j] = g[j] * silu;
        }
    }
    return VFM_OK;
}
