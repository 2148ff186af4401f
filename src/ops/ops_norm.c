/* Dispatchers of the normalisation ops: LayerNorm + adaLN modulate, the gated residual and
 * RMSNorm. They check dtypes (statistics and the RMSNorm weight gradient are f32 on CUDA), devices,
 * shapes and the token->sample map, then call the backend. */
#include "ops_check.h"

/* A per-sample tensor t[B,D] (optional): the first one present fixes B (and names it in *b_arg). */
static vfm_status check_per_sample(const char *op, const char *arg, const Tensor *t, const Tensor *ref, int64_t D,
                                   int64_t *B, const char **b_arg) {
    if (!t) return VFM_OK;
    OPS_EXPECT(op, arg, t, ref->dtype, ref->device, *B, D);
    if (*B < 0) {
        *B = t->shape[0];
        *b_arg = arg;
    }
    return VFM_OK;
}

/* tok2sample i32[S]; every entry < B when B is known (negative = padding). */
static vfm_status check_tok2sample(const char *op, const Tensor *tok2sample, const Tensor *ref, int64_t S, int64_t B,
                                   const char *b_arg) {
    OPS_EXPECT(op, "tok2sample", tok2sample, DT_I32, ref->device, S);
    if (B < 0 || tok2sample->device != DEV_CPU) return VFM_OK;
    const int32_t *t2s = tok2sample->data;
    for (int64_t s = 0; s < S; s++)
        if (t2s[s] >= B)
            return vfm_fail(VFM_ERR_SHAPE, "%s: tok2sample[%lld] = %d but %s holds %lld samples", op, (long long)s,
                            (int)t2s[s], b_arg, (long long)B);
    return VFM_OK;
}

vfm_status op_layernorm_modulate_forward(Tensor *y, Tensor *mean, Tensor *rstd, const Tensor *x,
                                         const Tensor *shift, const Tensor *scale, const Tensor *tok2sample,
                                         float eps) {
    const char *op = "layernorm_modulate_forward";
    VFM_TRY(ops_float_arg(op, "x", x));
    OPS_EXPECT(op, "x", x, x->dtype, x->device, -1, -1);
    int64_t S = x->shape[0], D = x->shape[1], B = -1;
    const char *b_arg = NULL;
    OPS_EXPECT(op, "y", y, x->dtype, x->device, S, D);
    OPS_EXPECT(op, "mean", mean, ops_f32_dtype(x), x->device, S);
    OPS_EXPECT(op, "rstd", rstd, ops_f32_dtype(x), x->device, S);
    VFM_TRY(check_per_sample(op, "shift", shift, x, D, &B, &b_arg));
    VFM_TRY(check_per_sample(op, "scale", scale, x, D, &B, &b_arg));
    VFM_TRY(check_tok2sample(op, tok2sample, x, S, B, b_arg));
    OPS_DISPATCH_WITH_CUDA(layernorm_modulate_forward, x, y, mean, rstd, x, shift, scale, tok2sample, eps);
}

vfm_status op_layernorm_modulate_backward(Tensor *dx, Tensor *dshift, Tensor *dscale, const Tensor *dy,
                                          const Tensor *x, const Tensor *mean, const Tensor *rstd,
                                          const Tensor *scale, const Tensor *tok2sample) {
    const char *op = "layernorm_modulate_backward";
    VFM_TRY(ops_float_arg(op, "x", x));
    OPS_EXPECT(op, "x", x, x->dtype, x->device, -1, -1);
    int64_t S = x->shape[0], D = x->shape[1], B = -1;
    const char *b_arg = NULL;
    OPS_EXPECT(op, "dy", dy, x->dtype, x->device, S, D);
    OPS_EXPECT(op, "mean", mean, ops_f32_dtype(x), x->device, S);
    OPS_EXPECT(op, "rstd", rstd, ops_f32_dtype(x), x->device, S);
    if (dx) OPS_EXPECT(op, "dx", dx, x->dtype, x->device, S, D);
    VFM_TRY(check_per_sample(op, "scale", scale, x, D, &B, &b_arg));
    VFM_TRY(check_per_sample(op, "dshift", dshift, x, D, &B, &b_arg));
    VFM_TRY(check_per_sample(op, "dscale", dscale, x, D, &B, &b_arg));
    VFM_TRY(check_tok2sample(op, tok2sample, x, S, B, b_arg));
    OPS_DISPATCH_WITH_CUDA(layernorm_modulate_backward, x, dx, dshift, dscale, dy, x, mean, rstd, scale, tok2sample);
}

vfm_status op_gated_residual_forward(Tensor *out, const Tensor *x, const Tensor *y, const Tensor *gate,
                                     const Tensor *tok2sample) {
    const char *op = "gated_residual_forward";
    VFM_TRY(ops_float_arg(op, "x", x));
    OPS_EXPECT(op, "x", x, x->dtype, x->device, -1, -1);
    int64_t S = x->shape[0], D = x->shape[1], B = -1;
    const char *b_arg = NULL;
    OPS_EXPECT(op, "y", y, x->dtype, x->device, S, D);
    OPS_EXPECT(op, "out", out, x->dtype, x->device, S, D);
    VFM_TRY(check_per_sample(op, "gate", gate, x, D, &B, &b_arg));
    VFM_TRY(check_tok2sample(op, tok2sample, x, S, B, b_arg));
    OPS_DISPATCH_WITH_CUDA(gated_residual_forward, x, out, x, y, gate, tok2sample);
}

vfm_status op_gated_residual_backward(Tensor *dx, Tensor *dy, Tensor *dgate, const Tensor *dout,
                                      const Tensor *y, const Tensor *gate, const Tensor *tok2sample) {
    const char *op = "gated_residual_backward";
    VFM_TRY(ops_float_arg(op, "dout", dout));
    OPS_EXPECT(op, "dout", dout, dout->dtype, dout->device, -1, -1);
    int64_t S = dout->shape[0], D = dout->shape[1], B = -1;
    const char *b_arg = NULL;
    OPS_EXPECT(op, "y", y, dout->dtype, dout->device, S, D);
    if (dx) OPS_EXPECT(op, "dx", dx, dout->dtype, dout->device, S, D);
    if (dy) OPS_EXPECT(op, "dy", dy, dout->dtype, dout->device, S, D);
    VFM_TRY(check_per_sample(op, "gate", gate, dout, D, &B, &b_arg));
    VFM_TRY(check_per_sample(op, "dgate", dgate, dout, D, &B, &b_arg));
    VFM_TRY(check_tok2sample(op, tok2sample, dout, S, B, b_arg));
    OPS_DISPATCH_WITH_CUDA(gated_residual_backward, dout, dx, dy, dgate, dout, y, gate, tok2sample);
}

vfm_status op_rmsnorm_forward(Tensor *y, Tensor *rstd, const Tensor *x, const Tensor *w, float eps) {
    const char *op = "rmsnorm_forward";
    VFM_TRY(ops_float_arg(op, "x", x));
    OPS_EXPECT(op, "x", x, x->dtype, x->device, -1, -1);
    int64_t N = x->shape[0], d = x->shape[1];
    OPS_EXPECT(op, "y", y, x->dtype, x->device, N, d);
    OPS_EXPECT(op, "rstd", rstd, ops_f32_dtype(x), x->device, N);
    if (w) OPS_EXPECT(op, "w", w, x->dtype, x->device, d);
    OPS_DISPATCH_WITH_CUDA(rmsnorm_forward, x, y, rstd, x, w, eps);
}

vfm_status op_rmsnorm_backward(Tensor *dx, Tensor *dw, const Tensor *dy, const Tensor *x, const Tensor *rstd,
                               const Tensor *w) {
    const char *op = "rmsnorm_backward";
    VFM_TRY(ops_float_arg(op, "x", x));
    OPS_EXPECT(op, "x", x, x->dtype, x->device, -1, -1);
    int64_t N = x->shape[0], d = x->shape[1];
    OPS_EXPECT(op, "dy", dy, x->dtype, x->device, N, d);
    OPS_EXPECT(op, "rstd", rstd, ops_f32_dtype(x), x->device, N);
    if (w) OPS_EXPECT(op, "w", w, x->dtype, x->device, d);
    if (dx) OPS_EXPECT(op, "dx", dx, x->dtype, x->device, N, d);
    if (dw) OPS_EXPECT(op, "dw", dw, ops_f32_dtype(x), x->device, d);
    OPS_DISPATCH_WITH_CUDA(rmsnorm_backward, x, dx, dw, dy, x, rstd, w);
}
