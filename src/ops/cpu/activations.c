/* CPU backend: pointwise activations GELU (erf and tanh forms), SiLU and SwiGLU, forward and
 * backward. The GELU functions also serve as the epilogue of the linear op (linear.c); they run
 * on vec_math.h's vectorised exp and erf (FMA_CLONES, multiply-adds fused), over fixed chunks of
 * elements (so any thread count gives the same bits). */
#include "real.h"
#include "vec_math.h"

#define GELU_SQRT_2_OVER_PI ((real)0.79788456080286535588)
#define GELU_TANH_CUBIC ((real)0.044715)
#define GELU_INV_SQRT2 ((real)0.70710678118654752440)
#define GELU_INV_SQRT_2PI ((real)0.39894228040143267794)

/* Elements per chunk of the GELU loops; a tensor of one chunk runs without a parallel region. */
#define GELU_CHUNK 8192

FMA_CONTRACT_BEGIN

/* The tanh form's u = √(2/π)·(x + 0.044715·x³) gives *h = 1 + tanh(u) and *sech2 = 1 - tanh²(u).
 * In f32 both come from e = e^(2u) as 2e/(1 + e) and 4e/(1 + e)², accurate relative to their
 * value in both tails (2u is capped at 88, where they are 2 and 0 in f32). */
static inline void gelu_tanh_parts(real x, real *h, real *sech2) {
    real u = GELU_SQRT_2_OVER_PI * (x + GELU_TANH_CUBIC * x * x * x);
#ifdef VFM_REAL_F64
    real t = tanh(u);
    *h = 1 + t;
    *sech2 = 1 - t * t;
#else
    int32_t two_u = (int32_t)f32_bits(2 * u), cap = (int32_t)f32_bits(88.0f);
    real e = vec_exp(f32_from_bits((uint32_t)(two_u > cap ? cap : two_u))); /* signed compare: min(2u, 88) */
    real inv = 1 / (1 + e);
    *h = 2 * e * inv;
    *sech2 = 4 * e * inv * inv;
#endif
}

/* e^(-x²/2), 0 beyond |x| = 16 (and for ±inf and NaN, so x·e^(-x²/2) is NaN there as it should be). */
static inline real gauss(real x) {
#ifdef VFM_REAL_F64
    return exp((real)-0.5 * x * x);
#else
    uint32_t a = f32_bits(x) & 0x7FFFFFFFu, cap = f32_bits(16.0f);
    real ac = f32_from_bits(a > cap ? cap : a);
    return vec_exp((real)-0.5 * ac * ac);
#endif
}

FMA_CLONES static void gelu_erf_rows(real *y, const real *x, int64_t n) {
#pragma omp simd
    for (int64_t i = 0; i < n; i++) y[i] = (real)0.5 * x[i] * vec_one_plus_erf(x[i] * GELU_INV_SQRT2);
}

FMA_CLONES static void gelu_tanh_rows(real *y, const real *x, int64_t n) {
#pragma omp simd
    for (int64_t i = 0; i < n; i++) {
        real h, sech2;
        gelu_tanh_parts(x[i], &h, &sech2);
        y[i] = (real)0.5 * x[i] * h;
    }
}

/* dx = dy · gelu'(x), gelu'(x) = (1 + erf(x/√2))/2 + x·φ(x) */
FMA_CLONES static void gelu_erf_grad_rows(real *dx, const real *dy, const real *x, int64_t n) {
#pragma omp simd
    for (int64_t i = 0; i < n; i++) {
        real cdf = (real)0.5 * vec_one_plus_erf(x[i] * GELU_INV_SQRT2);
        dx[i] = dy[i] * (cdf + x[i] * (GELU_INV_SQRT_2PI * gauss(x[i])));
    }
}

/* gelu'(x) = (1 + tanh u)/2 + x/2 · (1 - tanh² u) · du/dx */
FMA_CLONES static void gelu_tanh_grad_rows(real *dx, const real *dy, const real *x, int64_t n) {
#pragma omp simd
    for (int64_t i = 0; i < n; i++) {
        real xi = x[i], h, sech2;
        gelu_tanh_parts(xi, &h, &sech2);
        real du = GELU_SQRT_2_OVER_PI * ((real)1 + (real)3 * GELU_TANH_CUBIC * xi * xi);
        dx[i] = dy[i] * ((real)0.5 * h + (real)0.5 * xi * sech2 * du);
    }
}

FMA_CONTRACT_END

vfm_status CPU_FN(gelu_forward)(Tensor *y, const Tensor *x, Activation kind) {
    real *Y = RDATA(y);
    const real *X = CRDATA(x);
    int64_t n = tensor_numel(x), chunks = (n + GELU_CHUNK - 1) / GELU_CHUNK;
#pragma omp parallel for schedule(static) if (chunks > 1)
    for (int64_t c = 0; c < chunks; c++) {
        int64_t i = c * GELU_CHUNK, len = n - i < GELU_CHUNK ? n - i : GELU_CHUNK;
        if (kind == ACT_GELU_TANH)
            gelu_tanh_rows(Y + i, X + i, len);
        else
            gelu_erf_rows(Y + i, X + i, len);
    }
    return VFM_OK;
}

/* dx may alias dy (the linear backward turns dy into dpre in place). */
vfm_status CPU_FN(gelu_backward)(Tensor *dx, const Tensor *dy, const Tensor *x, Activation kind) {
    real *DX = RDATA(dx);
    const real *DY = CRDATA(dy), *X = CRDATA(x);
    int64_t n = tensor_numel(x), chunks = (n + GELU_CHUNK - 1) / GELU_CHUNK;
#pragma omp parallel for schedule(static) if (chunks > 1)
    for (int64_t c = 0; c < chunks; c++) {
        int64_t i = c * GELU_CHUNK, len = n - i < GELU_CHUNK ? n - i : GELU_CHUNK;
        if (kind == ACT_GELU_TANH)
            gelu_tanh_grad_rows(DX + i, DY + i, X + i, len);
        else
            gelu_erf_grad_rows(DX + i, DY + i, X + i, len);
    }
    return VFM_OK;
}

static inline real sigmoid(real x) { return (real)1 / ((real)1 + exp(-x)); }

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
