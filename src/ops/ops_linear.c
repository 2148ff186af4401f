/* Dispatchers of the linear layer (GEMM + bias + GELU epilogue) and the pointwise activations
 * GELU, SiLU and SwiGLU: argument checks, then the backend of the tensors' device and dtype
 * (on CUDA dw and db are f32 whatever the activation dtype). */
#include "ops_check.h"

static vfm_status check_activation(const char *op, Activation act, int allow_none) {
    if ((act == ACT_NONE && allow_none) || act == ACT_GELU_ERF || act == ACT_GELU_TANH) return VFM_OK;
    return vfm_fail(VFM_ERR_USAGE, "%s: unknown activation %d", op, (int)act);
}

vfm_status op_linear_forward(Tensor *y, Tensor *pre, const Tensor *x, const Tensor *w, const Tensor *b,
                             Activation act) {
    const char *op = "linear_forward";
    VFM_TRY(ops_float_arg(op, "x", x));
    VFM_TRY(check_activation(op, act, 1));
    DType dt = x->dtype;
    Device dev = x->device;
    OPS_EXPECT(op, "x", x, dt, dev, -1, -1);
    int64_t n = x->shape[0], in = x->shape[1];
    OPS_EXPECT(op, "w", w, dt, dev, -1, in);
    int64_t out = w->shape[0];
    if (b) OPS_EXPECT(op, "b", b, dt, dev, out);
    OPS_EXPECT(op, "y", y, dt, dev, n, out);
    if (act != ACT_NONE || pre) OPS_EXPECT(op, "pre", pre, dt, dev, n, out);
    OPS_DISPATCH_WITH_CUDA(linear_forward, x, y, pre, x, w, b, act);
}

vfm_status op_linear_backward(Tensor *dx, Tensor *dw, Tensor *db, Tensor *dy, const Tensor *x, const Tensor *w,
                              const Tensor *pre, Activation act, int dx_accumulate) {
    const char *op = "linear_backward";
    VFM_TRY(ops_float_arg(op, "x", x));
    VFM_TRY(check_activation(op, act, 1));
    DType dt = x->dtype;
    Device dev = x->device;
    OPS_EXPECT(op, "x", x, dt, dev, -1, -1);
    int64_t n = x->shape[0], in = x->shape[1];
    OPS_EXPECT(op, "w", w, dt, dev, -1, in);
    int64_t out = w->shape[0];
    OPS_EXPECT(op, "dy", dy, dt, dev, n, out);
    if (act != ACT_NONE) OPS_EXPECT(op, "pre", pre, dt, dev, n, out);
    if (dx) OPS_EXPECT(op, "dx", dx, dt, dev, n, in);
    if (dw) OPS_EXPECT(op, "dw", dw, ops_f32_dtype(x), dev, out, in);
    if (db) OPS_EXPECT(op, "db", db, ops_f32_dtype(x), dev, out);
    OPS_DISPATCH_WITH_CUDA(linear_backward, x, dx, dw, db, dy, x, w, pre, act, dx_accumulate);
}

vfm_status op_gelu_forward(Tensor *y, const Tensor *x, Activation kind) {
    const char *op = "gelu_forward";
    VFM_TRY(ops_float_arg(op, "x", x));
    VFM_TRY(check_activation(op, kind, 0));
    VFM_TRY(ops_expect(op, "y", y, x->dtype, x->device, x->ndim, x->shape));
    OPS_DISPATCH_WITH_CUDA(gelu_forward, x, y, x, kind);
}

vfm_status op_gelu_backward(Tensor *dx, const Tensor *dy, const Tensor *x, Activation kind) {
    const char *op = "gelu_backward";
    VFM_TRY(ops_float_arg(op, "x", x));
    VFM_TRY(check_activation(op, kind, 0));
    VFM_TRY(ops_expect(op, "dy", dy, x->dtype, x->device, x->ndim, x->shape));
    VFM_TRY(ops_expect(op, "dx", dx, x->dtype, x->device, x->ndim, x->shape));
    OPS_DISPATCH_WITH_CUDA(gelu_backward, x, dx, dy, x, kind);
}

vfm_status op_silu_forward(Tensor *y, const Tensor *x) {
    const char *op = "silu_forward";
    VFM_TRY(ops_float_arg(op, "x", x));
    VFM_TRY(ops_expect(op, "y", y, x->dtype, x->device, x->ndim, x->shape));
    OPS_DISPATCH_WITH_CUDA(silu_forward, x, y, x);
}

vfm_status op_silu_backward(Tensor *dx, const Tensor *dy, const Tensor *x) {
    const char *op = "silu_backward";
    VFM_TRY(ops_float_arg(op, "x", x));
    VFM_TRY(ops_expect(op, "dy", dy, x->dtype, x->device, x->ndim, x->shape));
    VFM_TRY(ops_expect(op, "dx", dx, x->dtype, x->device, x->ndim, x->shape));
    OPS_DISPATCH_WITH_CUDA(silu_backward, x, dx, dy, x);
}

/* x[N,2F] with an even number of columns; returns F. */
static vfm_status check_swiglu_input(const char *op, const Tensor *x, int64_t *F) {
    char got[128];
    VFM_TRY(ops_float_arg(op, "x", x));
    OPS_EXPECT(op, "x", x, x->dtype, x->device, -1, -1);
    if (x->shape[1] % 2)
        return vfm_fail(VFM_ERR_SHAPE, "%s: x is %s, its columns must be even (gate half, value half)", op,
                        tensor_describe(x, got, sizeof got));
    *F = x->shape[1] / 2;
    return VFM_OK;
}

vfm_status op_swiglu_forward(Tensor *y, const Tensor *x) {
    const char *op = "swiglu_forward";
    int64_t F;
    VFM_TRY(check_swiglu_input(op, x, &F));
    OPS_EXPECT(op, "y", y, x->dtype, x->device, x->shape[0], F);
    OPS_DISPATCH_WITH_CUDA(swiglu_forward, x, y, x);
}

vfm_status op_swiglu_backward(Tensor *dx, const Tensor *dy, const Tensor *x) {
    const char *op = "swiglu_backward";
    int64_t F;
    VFM_TRY(check_swiglu_input(op, x, &F));
    OPS_EXPECT(op, "dy", dy, x->dtype, x->device, x->shape[0], F);
    OPS_EXPECT(op, "dx", dx, x->dtype, x->device, x->shape[0], 2 * F);
    OPS_DISPATCH_WITH_CUDA(swiglu_backward, x, dx, dy, x);
}
