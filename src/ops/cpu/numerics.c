/* CPU backend: sum of squares (gradient norm), Philox normal fill, NaN/Inf count. */
#include <math.h>
#include <stdlib.h>

#include "core/philox.h"
#include "real.h"

/* Σ x² in CPU_REDUCE_CHUNKS fixed chunks, each summed in double, then the chunks in order. */
vfm_status CPU_FN(sum_squares)(double *out, const Tensor *x) {
    const real *X = CRDATA(x);
    int64_t n = tensor_numel(x);
    double partial[CPU_REDUCE_CHUNKS];
#pragma omp parallel for schedule(static)
    for (int c = 0; c < CPU_REDUCE_CHUNKS; c++) {
        int64_t lo = n * c / CPU_REDUCE_CHUNKS, hi = n * (c + 1) / CPU_REDUCE_CHUNKS;
        double s = 0;
        for (int64_t i = lo; i < hi; i++) s += (double)X[i] * (double)X[i];
        partial[c] = s;
    }
    double total = 0;
    for (int c = 0; c < CPU_REDUCE_CHUNKS; c++) total += partial[c];
    *out = total;
    return VFM_OK;
}

vfm_status CPU_FN(randn_fill)(Tensor *out, uint64_t seed, uint32_t stream, uint32_t step, uint64_t uid,
                              uint64_t element_offset, float std) {
    real *X = RDATA(out);
    int64_t n = tensor_numel(out);
    uint32_t key[2];
    philox_key(seed, stream, key);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
        uint64_t e = element_offset + (uint64_t)i;
        float z[4];
        philox_normal4(key, e >> 2, step, uid, z);
        X[i] = (real)(std * z[e & 3]);
    }
    return VFM_OK;
}

vfm_status CPU_FN(count_nonfinite)(int64_t *count, const Tensor *x) {
    const real *X = CRDATA(x);
    int64_t n = tensor_numel(x), bad = 0;
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(X[i])) bad++;
    *count = bad;
    return VFM_OK;
}
