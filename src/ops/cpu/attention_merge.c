/* CPU backend: the exact log-sum-exp merge of two partial attentions (ring attention's
 * combine step, see op_attention_merge in ops.h). Rows are independent: one thread per row
 * range, no sum depends on the thread count. Padding rows are never read and are written 0. */
#include <string.h>

#include "real.h"

/* o[hd] <- merge of (o, *lse) with (op, lp); *lse updated. */
static void merge_row(real *o, real *lse, const real *op, real lp, int hd) {
    real la = *lse;
    real m = la > lp ? la : lp;
    if (m == -INFINITY) { /* neither side has keys (or both NaN-free -inf): empty */
        memset(o, 0, (size_t)hd * sizeof(real));
        *lse = -INFINITY;
        return;
    }
    real wa = exp(la - m), wb = exp(lp - m), sum = wa + wb;
    real ca = wa / sum, cb = wb / sum;
    for (int d = 0; d < hd; d++) o[d] = ca * o[d] + cb * op[d];
    *lse = m + log(sum);
}

vfm_status CPU_FN(attention_merge)(Tensor *o, Tensor *lse, const Tensor *o_part, const Tensor *lse_part,
                                   const VarlenLayout *layout) {
    int64_t S = o->shape[0];
    int H = (int)o->shape[1], hd = (int)o->shape[2], n = layout->n_samples;
    real *O = RDATA(o), *L = RDATA(lse);
    const real *OP = CRDATA(o_part), *LP = CRDATA(lse_part);
    const int32_t *cu = I32DATA(&layout->cu_q), *cu_padded = I32DATA(&layout->cu_q_padded);
    /* padding rows: between a sample's real rows and the next slot, and after the last slot */
    int64_t next = 0;
    for (int i = 0; i <= n; i++) {
        int64_t start = i < n ? cu_padded[i] : S;
        if (start > next) {
            memset(O + next * H * hd, 0, (size_t)((start - next) * H * hd) * sizeof(real));
            memset(L + next * H, 0, (size_t)((start - next) * H) * sizeof(real));
        }
        if (i < n) next = start + (cu[i + 1] - cu[i]);
    }
    for (int i = 0; i < n; i++) {
        int64_t r0 = cu_padded[i], rows = cu[i + 1] - cu[i];
#pragma omp parallel for schedule(static)
        for (int64_t r = r0; r < r0 + rows; r++)
            for (int h = 0; h < H; h++) {
                int64_t at = r * H + h;
                merge_row(O + at * hd, L + at, OP + at * hd, LP[at], hd);
            }
    }
    return VFM_OK;
}
