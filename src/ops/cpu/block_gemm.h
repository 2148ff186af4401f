/* The CPU attention's block products (attention.c): C[m,n] = alpha·A·B (+ C), register-blocked,
 * for the small shapes a FlashAttention block has (one of m, n, k is head_dim: 32-128), where
 * OpenBLAS spends more time packing its operands, zeroing C for β = 0 and in its loop overhead
 * than multiplying. Include after real.h.
 *
 * A[i,p] is read at A[i·a_row + p·a_col] (so A or Aᵀ, without a copy); B row-major with its rows
 * ldb apart, C row-major with rows ldc apart. Vectorised across C's columns: each micro-tile keeps
 * GEMM_MR rows × GEMM_NV vectors of C in registers over the whole inner dimension, in the order
 * p = 0, 1, ..., k-1 for every element, then writes alpha·acc (+ C) once: the bits depend on the
 * shapes only, never on the thread count. Vectors are GCC's generic 64-byte vectors (16 f32 or 8
 * f64), which the compiler splits on CPUs with narrower registers.
 *
 * Multiply-adds are fused where the CPU has FMA (FMA_CLONES, vec_math.h): like OpenBLAS's own
 * kernels, a machine gives the same bits every run, and CPUs of another kind may differ in the
 * last bits. */
#ifndef VFM_CPU_BLOCK_GEMM_H
#define VFM_CPU_BLOCK_GEMM_H

#include <stdint.h>
#include <string.h>

#include "vec_math.h"

FMA_CONTRACT_BEGIN

typedef real vreal __attribute__((vector_size(64)));
#define GEMM_VL ((int)(sizeof(vreal) / sizeof(real))) /* lanes of one vector */
#define GEMM_MR 8                                      /* rows of a micro-tile */
#define GEMM_NV 2                                      /* vectors across a micro-tile */
#define GEMM_NR (GEMM_NV * GEMM_VL)                    /* columns of a micro-tile */
#define UNROLL _Pragma("GCC unroll 8")                 /* the tile loops, fully: acc stays in registers */
#define ALWAYS_INLINE inline __attribute__((always_inline))

/* A vector from / to memory (no alignment needed). Macros, not functions: a function returning
 * a 64-byte vector has another ABI in the baseline clone, which GCC warns about. */
#define VLOAD(v, p) memcpy(&(v), (p), sizeof(vreal))
#define VSTORE(p, v) memcpy((p), &(v), sizeof(vreal))

/* What a product writes into C[i,j], with x = alpha·(A·B)[i,j]: */
typedef enum {
    GEMM_STORE,        /* x */
    GEMM_STORE_MAX,    /* x, and lane_max[i·GEMM_VL + l] = max(itself, x) for the lane l of x's
                        * vector: the forward's row maxima without a pass over the block */
    GEMM_ADD,          /* C + x */
    GEMM_EXP,          /* e^(x − row[i]): the attention's probabilities from the scores and the lse */
    GEMM_SOFTMAX_GRAD, /* P[i,j]·(x − row[i]), P at the same place as C: dS from dP, P and D */
} GemmWrite;

typedef struct {
    GemmWrite kind;
    const real *row; /* GEMM_EXP, GEMM_SOFTMAX_GRAD: one value per row of C */
    const real *p;   /* GEMM_SOFTMAX_GRAD: P, with C's row stride */
    real *lane_max;  /* GEMM_STORE_MAX: GEMM_VL running maxima per row of C */
} GemmOut;

/* Writes *value (one vector) to c = C + at, in row r of C, as `kind` says (a constant where it
 * is inlined: block_gemm compiles one copy of the tile loops per kind, so no vector pays for a
 * dispatch, and the lanes stay in registers between the product and the store). */
static ALWAYS_INLINE void gemm_write(GemmWrite kind, const GemmOut *out, const vreal *value, real *c, int r,
                                     int64_t at) {
    real x[GEMM_VL];
    memcpy(x, value, sizeof x);
    if (kind == GEMM_ADD) {
#pragma omp simd
        for (int l = 0; l < GEMM_VL; l++) x[l] = c[l] + x[l];
    } else if (kind == GEMM_EXP) {
        real shift = out->row[r];
#pragma omp simd
        for (int l = 0; l < GEMM_VL; l++) x[l] = vec_exp_softmax(x[l] - shift);
    } else if (kind == GEMM_SOFTMAX_GRAD) {
        real d = out->row[r];
        const real *p = out->p + at;
#pragma omp simd
        for (int l = 0; l < GEMM_VL; l++) x[l] = p[l] * (x[l] - d);
    }
    memcpy(c, x, sizeof x);
    if (kind == GEMM_STORE_MAX) {
        real *mx = out->lane_max + (int64_t)r * GEMM_VL;
#pragma omp simd
        for (int l = 0; l < GEMM_VL; l++) mx[l] = x[l] > mx[l] ? x[l] : mx[l];
    }
}

/* One micro-tile of mr <= GEMM_MR rows and nv <= GEMM_NV vectors (constants where it is called,
 * so the loops unroll): C[0:mr, 0:nv·GEMM_VL]. */
static ALWAYS_INLINE void gemm_tile(GemmWrite kind, int mr, int nv, int k, real alpha, const real *A, int64_t a_row,
                                    int64_t a_col, const real *B, int64_t ldb, const GemmOut *out, int i0, int j0,
                                    real *C, int64_t ldc) {
    vreal acc[GEMM_MR][GEMM_NV];
    UNROLL for (int r = 0; r < mr; r++) UNROLL for (int v = 0; v < nv; v++) acc[r][v] = (vreal){0};
    for (int p = 0; p < k; p++) {
        vreal b[GEMM_NV];
        UNROLL for (int v = 0; v < nv; v++) VLOAD(b[v], B + p * ldb + v * GEMM_VL);
        const real *a = A + p * a_col;
        UNROLL for (int r = 0; r < mr; r++) {
            real ar = a[r * a_row];
            UNROLL for (int v = 0; v < nv; v++) acc[r][v] += ar * b[v];
        }
    }
    UNROLL for (int r = 0; r < mr; r++) UNROLL for (int v = 0; v < nv; v++) {
        int64_t at = (int64_t)(i0 + r) * ldc + j0 + v * GEMM_VL;
        vreal x = alpha * acc[r][v];
        gemm_write(kind, out, &x, C + at, i0 + r, at);
    }
}

/* Columns [j, j + nv·GEMM_VL) of every row. */
static ALWAYS_INLINE void gemm_columns(GemmWrite kind, int nv, int m, int j, int k, real alpha, const real *A,
                                       int64_t a_row, int64_t a_col, const real *B, int64_t ldb, const GemmOut *out,
                                       real *C, int64_t ldc) {
    int i = 0;
    for (; i + GEMM_MR <= m; i += GEMM_MR)
        gemm_tile(kind, GEMM_MR, nv, k, alpha, A + i * a_row, a_row, a_col, B + j, ldb, out, i, j, C, ldc);
    for (; i + 4 <= m; i += 4)
        gemm_tile(kind, 4, nv, k, alpha, A + i * a_row, a_row, a_col, B + j, ldb, out, i, j, C, ldc);
    for (; i < m; i++) gemm_tile(kind, 1, nv, k, alpha, A + i * a_row, a_row, a_col, B + j, ldb, out, i, j, C, ldc);
}

static ALWAYS_INLINE void gemm_kind(GemmWrite kind, int m, int n, int k, real alpha, const real *A, int64_t a_row,
                                    int64_t a_col, const real *B, int64_t ldb, const GemmOut *out, real *C,
                                    int64_t ldc) {
    int j = 0;
    for (; j + GEMM_NR <= n; j += GEMM_NR)
        gemm_columns(kind, GEMM_NV, m, j, k, alpha, A, a_row, a_col, B, ldb, out, C, ldc);
    for (; j < n; j += GEMM_VL) gemm_columns(kind, 1, m, j, k, alpha, A, a_row, a_col, B, ldb, out, C, ldc);
}

/* C[m,n] = what `out` says of alpha·A·B; n a multiple of GEMM_VL (block_gemm_fits). */
FMA_CLONES static void block_gemm(int m, int n, int k, real alpha, const real *A, int64_t a_row, int64_t a_col,
                                   const real *B, int64_t ldb, const GemmOut *out, real *C, int64_t ldc) {
    switch (out->kind) {
    case GEMM_STORE: gemm_kind(GEMM_STORE, m, n, k, alpha, A, a_row, a_col, B, ldb, out, C, ldc); break;
    case GEMM_STORE_MAX: gemm_kind(GEMM_STORE_MAX, m, n, k, alpha, A, a_row, a_col, B, ldb, out, C, ldc); break;
    case GEMM_ADD: gemm_kind(GEMM_ADD, m, n, k, alpha, A, a_row, a_col, B, ldb, out, C, ldc); break;
    case GEMM_EXP: gemm_kind(GEMM_EXP, m, n, k, alpha, A, a_row, a_col, B, ldb, out, C, ldc); break;
    case GEMM_SOFTMAX_GRAD:
        gemm_kind(GEMM_SOFTMAX_GRAD, m, n, k, alpha, A, a_row, a_col, B, ldb, out, C, ldc);
        break;
    }
}

/* Whether block_gemm takes n columns. */
static inline int block_gemm_fits(int n) { return n % GEMM_VL == 0; }

FMA_CONTRACT_END

#endif
