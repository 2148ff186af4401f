/* CPU backend: the linear layer y = act(x·wᵀ + b) and its backward, on OpenBLAS GEMMs; the GELU
 * epilogue is the activation op (activations.c); the bias gradient is summed in a fixed order. */
#include <string.h>

#include "real.h"

/* Columns per block of the bias-gradient sum: blocks run in parallel, rows serially inside. */
#define BIAS_GRAD_COLS 64

static inline int ld(int64_t n) { return n > 0 ? (int)n : 1; }

vfm_status CPU_FN(linear_forward)(Tensor *y, Tensor *pre, const Tensor *x, const Tensor *w, const Tensor *b,
                                  Activation act) {
    int64_t n = tensor_rows(x), in = tensor_dim(x, -1), out = tensor_dim(w, 0);
    if (n == 0 || out == 0) return VFM_OK;
    /* the GEMM writes the pre-activation: straight into y when there is no activation */
    real *P = act == ACT_NONE ? RDATA(y) : RDATA(pre);
    if (b) {
        const real *B = CRDATA(b);
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < n; r++) memcpy(P + r * out, B, (size_t)out * sizeof(real));
    }
    CBLAS_GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)out, (int)in, (real)1, CRDATA(x), ld(in),
               CRDATA(w), ld(in), b ? (real)1 : (real)0, P, ld(out));
    if (act != ACT_NONE) return CPU_FN(gelu_forward)(y, pre, act);
    if (pre) memcpy(pre->data, y->data, tensor_bytes(y));
    return VFM_OK;
}

vfm_status CPU_FN(linear_backward)(Tensor *dx, Tensor *dw, Tensor *db, Tensor *dy, const Tensor *x, const Tensor *w,
                                   const Tensor *pre, Activation act, int dx_accumulate) {
    int64_t n = tensor_rows(x), in = tensor_dim(x, -1), out = tensor_dim(w, 0);
    if (act != ACT_NONE) VFM_TRY(CPU_FN(gelu_backward)(dy, dy, pre, act)); /* dy becomes dpre */
    const real *G = CRDATA(dy);
    if (dx && n > 0 && in > 0)
        CBLAS_GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)in, (int)out, (real)1, G, ld(out),
                   CRDATA(w), ld(in), dx_accumulate ? (real)1 : (real)0, RDATA(dx), ld(in));
    if (dw && n > 0 && in > 0 && out > 0)
        CBLAS_GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, (int)out, (int)in, (int)n, (real)1, G, ld(out), CRDATA(x),
                   ld(in), (real)1, RDATA(dw), ld(in));
    if (db) {
        real *DB = RDATA(db);
        int64_t blocks = (out + BIAS_GRAD_COLS - 1) / BIAS_GRAD_COLS;
#pragma omp parallel for schedule(static)
        for (int64_t blk = 0; blk < blocks; blk++) {
            int64_t j0 = blk * BIAS_GRAD_COLS, j1 = j0 + BIAS_GRAD_COLS < out ? j0 + BIAS_GRAD_COLS : out;
            double col_sum[BIAS_GRAD_COLS] = {0};
            for (int64_t r = 0; r < n; r++)
                for (int64_t j = j0; j < j1; j++) col_sum[j - j0] += (double)G[r * out + j];
            for (int64_t j = j0; j < j1; j++) DB[j] += (real)col_sum[j - j0];
        }
    }
    return VFM_OK;
}
