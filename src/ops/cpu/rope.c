/* 3-D rotary position embedding (ops.h op_rope_3d), CPU. */
#include "real.h"

/* The three parts of a head of hd values: widths dt, dh, dw (ops.h). */
static void rope_parts(int64_t hd, int64_t width[3]) {
    width[1] = width[2] = 2 * (hd / 6);
    width[0] = hd - width[1] - width[2];
}

vfm_status CPU_FN(rope_3d)(Tensor *y, const Tensor *x, const Tensor *pos, float theta, int inverse) {
    int64_t N = x->shape[0], H = x->shape[1], hd = x->shape[2], width[3];
    rope_parts(hd, width);
    const real *X = CRDATA(x);
    real *Y = RDATA(y);
    const int32_t *P = I32DATA(pos);
    double sign = inverse ? -1.0 : 1.0;
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++) {
        int64_t at = 0;
        for (int part = 0; part < 3; part++) {
            int64_t d = width[part];
            double p = (double)P[n * 3 + part];
            for (int64_t k = 0; k < d / 2; k++, at += 2) {
                double angle = p * pow((double)theta, -2.0 * (double)k / (double)d);
                real c = (real)cos(angle), s = (real)(sign * sin(angle));
                for (int64_t h = 0; h < H; h++) {
                    const real *xr = X + (n * H + h) * hd + at;
                    real *yr = Y + (n * H + h) * hd + at;
                    real a = xr[0], b = xr[1];
                    yr[0] = a * c - b * s;
                    yr[1] = a * s + b * c;
                }
            }
        }
    }
    return VFM_OK;
}
