/* CPU backend: the learned factorized 3-D position (MovieGen), a sum of three table rows per token,
 * and its scatter-add backward with each destination's terms added in ascending token order. */
#include <stdlib.h>
#include <string.h>

#include "real.h"

/* The first real row whose position k is outside its table, or -1. */
static int64_t first_bad_row(const int32_t *P, const int32_t *T2S, int64_t S, const int64_t n[3], int *axis) {
    for (int64_t s = 0; s < S; s++) {
        if (T2S[s] < 0) continue;
        for (int k = 0; k < 3; k++)
            if (P[3 * s + k] < 0 || P[3 * s + k] >= n[k]) {
                *axis = k;
                return s;
            }
    }
    return -1;
}

static vfm_status bad_position(const char *op, const int32_t *P, int64_t s, int k, const int64_t n[3]) {
    static const char *const AXES[3] = {"t", "h", "w"};
    return vfm_fail(VFM_ERR_SHAPE, "%s: row %lld has %s = %d, outside the table's %lld rows", op, (long long)s,
                    AXES[k], P[3 * s + k], (long long)n[k]);
}

vfm_status CPU_FN(pos_embed_learned_forward)(Tensor *out, const Tensor *tab_t, const Tensor *tab_h, const Tensor *tab_w,
                                             const Tensor *pos, const Tensor *tok2sample) {
    int64_t S = tensor_dim(out, 0), D = tensor_dim(out, 1);
    int64_t n[3] = {tensor_dim(tab_t, 0), tensor_dim(tab_h, 0), tensor_dim(tab_w, 0)};
    const int32_t *P = I32DATA(pos), *T2S = I32DATA(tok2sample);
    int k;
    int64_t bad = first_bad_row(P, T2S, S, n, &k);
    if (bad >= 0) return bad_position("pos_embed_learned_forward", P, bad, k, n);
    const real *Et = CRDATA(tab_t), *Eh = CRDATA(tab_h), *Ew = CRDATA(tab_w);
    real *O = RDATA(out);
#pragma omp parallel for schedule(static)
    for (int64_t s = 0; s < S; s++) {
        real *o = O + s * D;
        if (T2S[s] < 0) {
            memset(o, 0, (size_t)D * sizeof(real));
            continue;
        }
        const real *et = Et + P[3 * s] * D, *eh = Eh + P[3 * s + 1] * D, *ew = Ew + P[3 * s + 2] * D;
        for (int64_t d = 0; d < D; d++) o[d] = et[d] + eh[d] + ew[d];
    }
    return VFM_OK;
}

#define COLS 64 /* columns per parallel job */

/* Each destination's terms are summed from 0 in ascending token order, then added to the gradient
 * once (as the CUDA kernel does: the same f32 bits). */
vfm_status CPU_FN(pos_embed_learned_backward)(Tensor *dtab_t, Tensor *dtab_h, Tensor *dtab_w, const Tensor *dout,
                                              const Tensor *pos, const Tensor *tok2sample) {
    int64_t S = tensor_dim(dout, 0), D = tensor_dim(dout, 1);
    int64_t n[3] = {tensor_dim(dtab_t, 0), tensor_dim(dtab_h, 0), tensor_dim(dtab_w, 0)};
    const int32_t *P = I32DATA(pos), *T2S = I32DATA(tok2sample);
    int k;
    int64_t bad = first_bad_row(P, T2S, S, n, &k);
    if (bad >= 0) return bad_position("pos_embed_learned_backward", P, bad, k, n);
    real *sums = calloc((size_t)((n[0] + n[1] + n[2]) * D) + 1, sizeof(real));
    if (!sums)
        return vfm_fail(VFM_ERR_NOMEM, "pos_embed_learned_backward: no memory for %lld x %lld sums",
                        (long long)(n[0] + n[1] + n[2]), (long long)D);
    real *acc[3] = {sums, sums + n[0] * D, sums + (n[0] + n[1]) * D};
    real *dT[3] = {RDATA(dtab_t), RDATA(dtab_h), RDATA(dtab_w)};
    const real *G = CRDATA(dout);
    int64_t blocks = (D + COLS - 1) / COLS;
#pragma omp parallel for schedule(static)
    for (int64_t job = 0; job < 3 * blocks; job++) {
        int axis = (int)(job / blocks);
        int64_t d0 = (job % blocks) * COLS, d1 = d0 + COLS < D ? d0 + COLS : D;
        for (int64_t s = 0; s < S; s++) {
            if (T2S[s] < 0) continue;
            real *row = acc[axis] + (int64_t)P[3 * s + axis] * D;
            const real *g = G + s * D;
            for (int64_t d = d0; d < d1; d++) row[d] += g[d];
        }
    }
    for (int axis = 0; axis < 3; axis++)
        for (int64_t i = 0; i < n[axis] * D; i++) dT[axis][i] += acc[axis][i];
    free(sums);
    return VFM_OK;
}
