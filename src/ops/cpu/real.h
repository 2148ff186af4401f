/* The CPU op library is compiled twice: as f32 (the oracle and the CPU trainer) and as f64
 * (for the finite-difference gradient checks). `real` is the element type of one build and
 * CPU_FN(name) its function name: cpu_<name>_f32 or cpu_<name>_f64. <tgmath.h> makes
 * sqrt/exp/erf/tanh pick the float or double version from the argument type. */
#ifndef VFM_CPU_REAL_H
#define VFM_CPU_REAL_H

#include <cblas.h>
#include <tgmath.h>
#undef I /* complex.h (pulled in by tgmath.h) defines I; we never use complex numbers */

#include "ops_cpu.h"

#ifdef VFM_REAL_F64
typedef double real;
#define CPU_FN(name) cpu_##name##_f64
#define CBLAS_GEMM cblas_dgemm
#define CBLAS_GEMV cblas_dgemv
#define REAL_DTYPE DT_F64
#else
typedef float real;
#define CPU_FN(name) cpu_##name##_f32
#define CBLAS_GEMM cblas_sgemm
#define CBLAS_GEMV cblas_sgemv
#define REAL_DTYPE DT_F32
#endif

#define RDATA(t) ((real *)(t)->data)
#define CRDATA(t) ((const real *)(t)->data)
#define I32DATA(t) ((const int32_t *)(t)->data)

/* Fixed chunking for deterministic reductions: a sum over n items is split into
 * CPU_REDUCE_CHUNKS pieces whatever the thread count, the pieces are summed in order. */
#define CPU_REDUCE_CHUNKS 64

#endif
