/* CPU backend: row lookup (class-label embedding) and column gather, with scatter-add backwards
 * that add each destination's terms in a fixed order (repeated indices included). */
#include <string.h>

#include "real.h"

/* The first index outside [0, n), or -1 when all are inside. */
static int64_t first_bad_index(const int32_t *idx, int64_t count, int64_t n) {
    for (int64_t i = 0; i < count; i++)
        if (idx[i] < 0 || idx[i] >= n) return i;
    return -1;
}

/* out[B,D] = table[idx[b]] */
vfm_status CPU_FN(embedding_forward)(Tensor *out, const Tensor *table, const Tensor *idx) {
    int64_t B = tensor_dim(out, 0), D = tensor_dim(out, 1), N = tensor_dim(table, 0);
    const int32_t *I = I32DATA(idx);
    int64_t bad = first_bad_index(I, B, N);
    if (bad >= 0)
        return vfm_fail(VFM_ERR_SHAPE, "embedding_forward: idx[%lld] = %d is outside the table's %lld rows",
                        (long long)bad, I[bad], (long long)N);
    const real *T = CRDATA(table);
    real *O = RDATA(out);
    for (int64_t b = 0; b < B; b++) memcpy(O + b * D, T + (int64_t)I[b] * D, (size_t)D * sizeof(real));
    return VFM_OK;
}

/* dtable[idx[b]] += dout[b], b in order; columns in parallel (each column's sum keeps that order). */
vfm_status CPU_FN(embedding_backward)(Tensor *dtable, const Tensor *dout, const Tensor *idx) {
    int64_t B = tensor_dim(dout, 0), D = tensor_dim(dout, 1), N = tensor_dim(dtable, 0);
    const int32_t *I = I32DATA(idx);
    int64_t bad = first_bad_index(I, B, N);
    if (bad >= 0)
        return vfm_fail(VFM_ERR_SHAPE, "embedding_backward: idx[%lld] = %d is outside the table's %lld rows",
                        (long long)bad, I[bad], (long long)N);
    const real *dO = CRDATA(dout);
    real *dT = RDATA(dtable);
#pragma omp parallel for schedule(static)
    for (int64_t d = 0; d < D; d++)
        for (int64_t b = 0; b < B; b++) dT[(int64_t)I[b] * D + d] += dO[b * D + d];
    return VFM_OK;
}

/* out[n,k] = in[n, idx[k]] */
vfm_status CPU_FN(gather_columns)(Tensor *out, const Tensor *in, const Tensor *idx) {
    int64_t N = tensor_dim(out, 0), K = tensor_dim(out, 1), M = tensor_dim(in, 1);
    const int32_t *I = I32DATA(idx);
    int64_t bad = first_bad_index(I, K, M);
    if (bad >= 0)
        return vfm_fail(VFM_ERR_SHAPE, "gather_columns: idx[%lld] = %d is outside the input's %lld columns",
                        (long long)bad, I[bad], (long long)M);
    const real *X = CRDATA(in);
    real *O = RDATA(out);
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++)
        for (int64_t k = 0; k < K; k++) O[n * K + k] = X[n * M + I[k]];
    return VFM_OK;
}

/* din[n, idx[k]] += dout[n,k], k in order within each row; rows in parallel. */
vfm_status CPU_FN(gather_columns_backward)(Tensor *din, const Tensor *dout, const Tensor *idx) {
    int64_t N = tensor_dim(dout, 0), K = tensor_dim(dout, 1), M = tensor_dim(din, 1);
    const int32_t *I = I32DATA(idx);
    int64_t bad = first_bad_index(I, K, M);
    if (bad >= 0)
        return vfm_fail(VFM_ERR_SHAPE, "gather_columns_backward: idx[%lld] = %d is outside the input's %lld columns",
                        (long long)bad, I[bad], (long long)M);
    const real *dO = CRDATA(dout);
    real *dX = RDATA(din);
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++)
        for (int64_t k = 0; k < K; k++) dX[n * M + I[k]] += dO[n * K + k];
    return VFM_OK;
}
