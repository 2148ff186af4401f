/* Dispatchers of the flow-matching and DDPM ops (noise mixing, learned-sigma channel halves, the
 * DDPM variational-bound term and the reverse step): argument checks, then the backend. On CUDA
 * (ops.h's mixed-precision contract) the objective's math is f32; only noise_mix's output x_t may
 * be in the activation dtype (it is the network's input), the channel halves and the reverse step
 * take one float dtype per call. */
#include "ops_check.h"

vfm_status op_noise_mix(Tensor *x_t, const Tensor *x0, const Tensor *noise, const Tensor *a, const Tensor *s,
                        const Tensor *tok2sample) {
    const char *op = "noise_mix";
    VFM_TRY(ops_float_dtype(op, x0));
    DType f32 = ops_f32_dtype(x0);
    OPS_EXPECT(op, "x0", x0, f32, x0->device, -1, -1);
    int64_t S = x0->shape[0], C = x0->shape[1];
    OPS_EXPECT(op, "noise", noise, f32, x0->device, S, C);
    OPS_EXPECT(op, "x_t", x_t, ops_act_dtype(x_t, x0), x0->device, S, C);
    OPS_EXPECT(op, "a", a, f32, x0->device, -1);
    int64_t B = a->shape[0];
    OPS_EXPECT(op, "s", s, f32, x0->device, B);
    VFM_TRY(ops_check_tok2sample(op, tok2sample, S, B, x0->device));
    OPS_DISPATCH_WITH_CUDA(noise_mix, x0, x_t, x0, noise, a, s, tok2sample);
}

/* x[S, n·2g] against first/second [S, n·g] */
static vfm_status check_halves(const char *op, const Tensor *x, const Tensor *first, const Tensor *second,
                               int64_t group) {
    VFM_TRY(ops_float_dtype(op, x));
    OPS_EXPECT(op, "x", x, x->dtype, x->device, -1, -1);
    if (group < 1 || x->shape[1] % (2 * group) != 0)
        return vfm_fail(VFM_ERR_SHAPE, "%s: rows of %lld values do not split into groups of 2x%lld", op,
                        (long long)x->shape[1], (long long)group);
    OPS_EXPECT(op, "first", first, x->dtype, x->device, x->shape[0], x->shape[1] / 2);
    if (second) OPS_EXPECT(op, "second", second, x->dtype, x->device, x->shape[0], x->shape[1] / 2);
    return VFM_OK;
}

vfm_status op_channel_halves_split(Tensor *first, Tensor *second, const Tensor *x, int64_t group) {
    VFM_TRY(check_halves("channel_halves_split", x, first, second, group));
    OPS_DISPATCH_WITH_CUDA(channel_halves_split, x, first, second, x, group);
}

vfm_status op_channel_halves_merge(Tensor *x, const Tensor *first, const Tensor *second, int64_t group) {
    VFM_TRY(check_halves("channel_halves_merge", x, first, second, group));
    OPS_DISPATCH_WITH_CUDA(channel_halves_merge, x, x, first, second, group);
}

static vfm_status check_vb_args(const char *op, const Tensor *v, const Tensor *eps, const Tensor *x_t,
                                const Tensor *x0, const Tensor *coef, const Tensor *mask, const Tensor *tok2sample) {
    VFM_TRY(ops_float_dtype(op, v));
    DType f32 = ops_f32_dtype(v);
    OPS_EXPECT(op, "v", v, f32, v->device, -1, -1);
    int64_t S = v->shape[0], C = v->shape[1];
    OPS_EXPECT(op, "eps", eps, f32, v->device, S, C);
    OPS_EXPECT(op, "x_t", x_t, f32, v->device, S, C);
    OPS_EXPECT(op, "x0", x0, f32, v->device, S, C);
    OPS_EXPECT(op, "coef", coef, f32, v->device, -1, DDPM_VB_NCOEF);
    OPS_EXPECT(op, "mask", mask, f32, v->device, S);
    return ops_check_tok2sample(op, tok2sample, S, coef->shape[0], v->device);
}

vfm_status op_ddpm_vb_forward(Tensor *loss, Tensor *sample_sum, const Tensor *v, const Tensor *eps,
                              const Tensor *x_t, const Tensor *x0, const Tensor *coef, const Tensor *mask,
                              const Tensor *tok2sample) {
    const char *op = "ddpm_vb_forward";
    VFM_TRY(check_vb_args(op, v, eps, x_t, x0, coef, mask, tok2sample));
    OPS_EXPECT(op, "loss", loss, v->dtype, v->device, 1);
    if (sample_sum) OPS_EXPECT(op, "sample_sum", sample_sum, v->dtype, v->device, coef->shape[0]);
    OPS_DISPATCH_WITH_CUDA(ddpm_vb_forward, v, loss, sample_sum, v, eps, x_t, x0, coef, mask, tok2sample);
}

vfm_status op_ddpm_vb_backward(Tensor *dv, double dloss, const Tensor *v, const Tensor *eps, const Tensor *x_t,
                               const Tensor *x0, const Tensor *coef, const Tensor *mask, const Tensor *tok2sample) {
    const char *op = "ddpm_vb_backward";
    VFM_TRY(check_vb_args(op, v, eps, x_t, x0, coef, mask, tok2sample));
    OPS_EXPECT(op, "dv", dv, v->dtype, v->device, v->shape[0], v->shape[1]);
    OPS_DISPATCH_WITH_CUDA(ddpm_vb_backward, v, dv, dloss, v, eps, x_t, x0, coef, mask, tok2sample);
}

vfm_status op_ddpm_step(Tensor *out, const Tensor *x, const Tensor *eps, const Tensor *v, const Tensor *z,
                        const DdpmStepCoef *c) {
    const char *op = "ddpm_step";
    VFM_TRY(ops_float_dtype(op, x));
    VFM_TRY(ops_same_numel(op, "out", out, "x", x));
    VFM_TRY(ops_same_numel(op, "eps", eps, "x", x));
    if (v) VFM_TRY(ops_same_numel(op, "v", v, "x", x));
    if (z) VFM_TRY(ops_same_numel(op, "z", z, "x", x));
    const Tensor *all[4] = {out, eps, v, z};
    for (int i = 0; i < 4; i++)
        if (all[i] && all[i]->dtype != x->dtype)
            return vfm_fail(VFM_ERR_SHAPE, "%s: tensors of mixed dtypes", op);
    OPS_DISPATCH_WITH_CUDA(ddpm_step, x, out, x, eps, v, z, c);
}
