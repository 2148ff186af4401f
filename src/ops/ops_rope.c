/* Dispatchers of Wan's ops (ops.h "Wan 2.1"): 3-D RoPE and RMSNorm over a row split across ranks. */
#include "ops_check.h"

vfm_status op_rope_3d(Tensor *y, const Tensor *x, const Tensor *pos, float theta, int inverse) {
    const char *op = "rope_3d";
    VFM_TRY(ops_float_arg(op, "x", x));
    OPS_EXPECT(op, "x", x, x->dtype, x->device, -1, -1, -1);
    int64_t N = x->shape[0], H = x->shape[1], hd = x->shape[2];
    OPS_EXPECT(op, "y", y, x->dtype, x->device, N, H, hd);
    OPS_EXPECT(op, "pos", pos, DT_I32, x->device, N, 3);
    if (hd % 2 || hd < 6) return vfm_fail(VFM_ERR_SHAPE, "rope_3d: head dim %lld must be even and at least 6", (long long)hd);
    if (!(theta > 1.0f)) return vfm_fail(VFM_ERR_SHAPE, "rope_3d: theta %g must be > 1", (double)theta);
    OPS_DISPATCH_WITH_CUDA(rope_3d, x, y, x, pos, theta, inverse);
}

vfm_status op_rmsnorm_sumsq(Tensor *sumsq, const Tensor *x) {
    const char *op = "rmsnorm_sumsq";
    VFM_TRY(ops_float_arg(op, "x", x));
    OPS_EXPECT(op, "x", x, x->dtype, x->device, -1, -1);
    OPS_EXPECT(op, "sumsq", sumsq, ops_f32_dtype(x), x->device, x->shape[0]);
    OPS_DISPATCH_WITH_CUDA(rmsnorm_sumsq, x, sumsq, x);
}

vfm_status op_rmsnorm_split_forward(Tensor *y, Tensor *rstd, const Tensor *x, const Tensor *w, const Tensor *sumsq,
                                    int64_t n, float eps) {
    const char *op = "rmsnorm_split_forward";
    VFM_TRY(ops_float_arg(op, "x", x));
    OPS_EXPECT(op, "x", x, x->dtype, x->device, -1, -1);
    int64_t N = x->shape[0], d = x->shape[1];
    OPS_EXPECT(op, "y", y, x->dtype, x->device, N, d);
    OPS_EXPECT(op, "w", w, x->dtype, x->device, d);
    OPS_EXPECT(op, "sumsq", sumsq, ops_f32_dtype(x), x->device, N);
    OPS_EXPECT(op, "rstd", rstd, ops_f32_dtype(x), x->device, N);
    if (n < d) return vfm_fail(VFM_ERR_SHAPE, "rmsnorm_split_forward: row width %lld < this rank's %lld columns",
                               (long long)n, (long long)d);
    OPS_DISPATCH_WITH_CUDA(rmsnorm_split_forward, x, y, rstd, x, w, sumsq, n, eps);
}

vfm_status op_rmsnorm_dot(Tensor *dot, const Tensor *dy, const Tensor *x, const Tensor *w) {
    const char *op = "rmsnorm_dot";
    VFM_TRY(ops_float_arg(op, "x", x));
    OPS_EXPECT(op, "x", x, x->dtype, x->device, -1, -1);
    int64_t N = x->shape[0], d = x->shape[1];
    OPS_EXPECT(op, "dy", dy, x->dtype, x->device, N, d);
    OPS_EXPECT(op, "w", w, x->dtype, x->device, d);
    OPS_EXPECT(op, "dot", dot, ops_f32_dtype(x), x->device, N);
    OPS_DISPATCH_WITH_CUDA(rmsnorm_dot, x, dot, dy, x, w);
}

vfm_status op_rmsnorm_split_backward(Tensor *dx, Tensor *dw, const Tensor *dy, const Tensor *x, const Tensor *rstd,
                                     const Tensor *w, const Tensor *dot, int64_t n) {
    const char *op = "rmsnorm_split_backward";
    VFM_TRY(ops_float_arg(op, "x", x));
    OPS_EXPECT(op, "x", x, x->dtype, x->device, -1, -1);
    int64_t N = x->shape[0], d = x->shape[1];
    OPS_EXPECT(op, "dy", dy, x->dtype, x->device, N, d);
    OPS_EXPECT(op, "w", w, x->dtype, x->device, d);
    OPS_EXPECT(op, "rstd", rstd, ops_f32_dtype(x), x->device, N);
    OPS_EXPECT(op, "dot", dot, ops_f32_dtype(x), x->device, N);
    if (dx) OPS_EXPECT(op, "dx", dx, x->dtype, x->device, N, d);
    if (dw) OPS_EXPECT(op, "dw", dw, ops_f32_dtype(x), x->device, d);
    if (n < d) return vfm_fail(VFM_ERR_SHAPE, "rmsnorm_split_backward: row width %lld < this rank's %lld columns",
                               (long long)n, (long long)d);
    OPS_DISPATCH_WITH_CUDA(rmsnorm_split_backward, x, dx, dw, dy, x, rstd, w, dot, n);
}
