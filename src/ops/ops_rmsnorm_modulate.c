/* Dispatcher of RMSNorm + adaLN modulate (MovieGen's block norm, ops.h): dtypes (rstd and the
 * weight gradient f32 on CUDA), devices, shapes and the token->sample map, then the backend. */
#include <stdint.h>

#include "ops_check.h"

/* The optional per-sample tensors [B, D]: every one present has the first one's B (*B: -1 when none). */
static vfm_status check_samples(const char *op, const Tensor *x, int64_t D, int n, const char *const *names,
                                const Tensor *const *ts, int64_t *B) {
    *B = -1;
    for (int i = 0; i < n; i++) {
        if (!ts[i]) continue;
        OPS_EXPECT(op, names[i], ts[i], x->dtype, x->device, *B, D);
        *B = ts[i]->shape[0];
    }
    return VFM_OK;
}

vfm_status op_rmsnorm_modulate_forward(Tensor *y, Tensor *rstd, const Tensor *x, const Tensor *w, const Tensor *shift,
                                       const Tensor *scale, const Tensor *tok2sample, float eps) {
    const char *op = "rmsnorm_modulate_forward";
    VFM_TRY(ops_float_arg(op, "x", x));
    OPS_EXPECT(op, "x", x, x->dtype, x->device, -1, -1);
    int64_t S = x->shape[0], D = x->shape[1], B;
    OPS_EXPECT(op, "y", y, x->dtype, x->device, S, D);
    OPS_EXPECT(op, "rstd", rstd, ops_f32_dtype(x), x->device, S);
    if (w) OPS_EXPECT(op, "w", w, x->dtype, x->device, D);
    const char *const names[] = {"shift", "scale"};
    const Tensor *const ts[] = {shift, scale};
    VFM_TRY(check_samples(op, x, D, 2, names, ts, &B));
    VFM_TRY(ops_check_tok2sample(op, tok2sample, S, B >= 0 ? B : INT32_MAX, x->device));
    if (!(eps >= 0)) return vfm_fail(VFM_ERR_SHAPE, "%s: eps %g must be >= 0", op, eps);
    OPS_DISPATCH_WITH_CUDA(rmsnorm_modulate_forward, x, y, rstd, x, w, shift, scale, tok2sample, eps);
}

vfm_status op_rmsnorm_modulate_backward(Tensor *dx, Tensor *dw, Tensor *dshift, Tensor *dscale, const Tensor *dy,
                                        const Tensor *x, const Tensor *rstd, const Tensor *w, const Tensor *scale,
                                        const Tensor *tok2sample) {
    const char *op = "rmsnorm_modulate_backward";
    VFM_TRY(ops_float_arg(op, "x", x));
    OPS_EXPECT(op, "x", x, x->dtype, x->device, -1, -1);
    int64_t S = x->shape[0], D = x->shape[1], B;
    OPS_EXPECT(op, "dy", dy, x->dtype, x->device, S, D);
    OPS_EXPECT(op, "rstd", rstd, ops_f32_dtype(x), x->device, S);
    if (w) OPS_EXPECT(op, "w", w, x->dtype, x->device, D);
    if (dx) OPS_EXPECT(op, "dx", dx, x->dtype, x->device, S, D);
    if (dw) {
        if (!w) return vfm_fail(VFM_ERR_SHAPE, "%s: dw asked for a norm without weight", op);
        OPS_EXPECT(op, "dw", dw, ops_f32_dtype(x), x->device, D);
    }
    const char *const names[] = {"scale", "dshift", "dscale"};
    const Tensor *const ts[] = {scale, dshift, dscale};
    VFM_TRY(check_samples(op, x, D, 3, names, ts, &B));
    VFM_TRY(ops_check_tok2sample(op, tok2sample, S, B >= 0 ? B : INT32_MAX, x->device));
    OPS_DISPATCH_WITH_CUDA(rmsnorm_modulate_backward, x, dx, dw, dshift, dscale, dy, x, rstd, w, scale, tok2sample);
}
