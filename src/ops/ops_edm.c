/* Dispatchers of the EDM ops (preconditioning, noising, denoised output and its backward) and
 * of the masked per-sample-weighted MSE loss: argument checks, then the backend. On CUDA the EDM
 * math is f32 and only the network-facing tensors (net_in, F, dF) are in the activation dtype. */
#include "ops_check.h"

vfm_status op_edm_precondition(Tensor *c_skip, Tensor *c_out, Tensor *c_in, Tensor *c_noise, Tensor *weight,
                               const Tensor *sigma, float sigma_data) {
    const char *op = "edm_precondition";
    VFM_TRY(ops_float_dtype(op, sigma));
    DType f32 = ops_f32_dtype(sigma);
    OPS_EXPECT(op, "sigma", sigma, f32, sigma->device, -1);
    int64_t B = sigma->shape[0];
    const char *names[5] = {"c_skip", "c_out", "c_in", "c_noise", "weight"};
    Tensor *outs[5] = {c_skip, c_out, c_in, c_noise, weight};
    for (int i = 0; i < 5; i++)
        if (outs[i]) OPS_EXPECT(op, names[i], outs[i], f32, sigma->device, B);
    if (!(sigma_data > 0)) return vfm_fail(VFM_ERR_SHAPE, "%s: sigma_data %g must be > 0", op, sigma_data);
    OPS_DISPATCH_WITH_CUDA(edm_precondition, sigma, c_skip, c_out, c_in, c_noise, weight, sigma, sigma_data);
}

vfm_status op_edm_add_noise(Tensor *x_t, Tensor *net_in, const Tensor *x0, const Tensor *noise,
                            const Tensor *sigma, const Tensor *c_in, const Tensor *tok2sample) {
    const char *op = "edm_add_noise";
    VFM_TRY(ops_float_dtype(op, x0));
    DType f32 = ops_f32_dtype(x0);
    OPS_EXPECT(op, "x0", x0, f32, x0->device, -1, -1);
    int64_t S = x0->shape[0], C = x0->shape[1];
    OPS_EXPECT(op, "noise", noise, f32, x0->device, S, C);
    OPS_EXPECT(op, "sigma", sigma, f32, x0->device, -1);
    int64_t B = sigma->shape[0];
    if (x_t) OPS_EXPECT(op, "x_t", x_t, f32, x0->device, S, C);
    if (net_in) {
        OPS_EXPECT(op, "net_in", net_in, ops_act_dtype(net_in, x0), x0->device, S, C);
        OPS_EXPECT(op, "c_in", c_in, f32, x0->device, B);
    }
    VFM_TRY(ops_check_tok2sample(op, tok2sample, S, B, x0->device));
    OPS_DISPATCH_WITH_CUDA(edm_add_noise, x0, x_t, net_in, x0, noise, sigma, c_in, tok2sample);
}

vfm_status op_edm_denoise(Tensor *denoised, const Tensor *x_t, const Tensor *F, const Tensor *c_skip,
                          const Tensor *c_out, const Tensor *tok2sample) {
    const char *op = "edm_denoise";
    VFM_TRY(ops_float_dtype(op, x_t));
    DType f32 = ops_f32_dtype(x_t);
    OPS_EXPECT(op, "x_t", x_t, f32, x_t->device, -1, -1);
    int64_t S = x_t->shape[0], C = x_t->shape[1];
    OPS_EXPECT(op, "F", F, ops_act_dtype(F, x_t), x_t->device, S, C);
    OPS_EXPECT(op, "denoised", denoised, f32, x_t->device, S, C);
    OPS_EXPECT(op, "c_skip", c_skip, f32, x_t->device, -1);
    int64_t B = c_skip->shape[0];
    OPS_EXPECT(op, "c_out", c_out, f32, x_t->device, B);
    VFM_TRY(ops_check_tok2sample(op, tok2sample, S, B, x_t->device));
    OPS_DISPATCH_WITH_CUDA(edm_denoise, x_t, denoised, x_t, F, c_skip, c_out, tok2sample);
}

vfm_status op_edm_denoise_backward(Tensor *dF, const Tensor *ddenoised, const Tensor *c_out,
                                   const Tensor *tok2sample) {
    const char *op = "edm_denoise_backward";
    VFM_TRY(ops_float_dtype(op, ddenoised));
    DType f32 = ops_f32_dtype(ddenoised);
    OPS_EXPECT(op, "ddenoised", ddenoised, f32, ddenoised->device, -1, -1);
    int64_t S = ddenoised->shape[0], C = ddenoised->shape[1];
    OPS_EXPECT(op, "dF", dF, ops_act_dtype(dF, ddenoised), ddenoised->device, S, C);
    OPS_EXPECT(op, "c_out", c_out, f32, ddenoised->device, -1);
    VFM_TRY(ops_check_tok2sample(op, tok2sample, S, c_out->shape[0], ddenoised->device));
    OPS_DISPATCH_WITH_CUDA(edm_denoise_backward, ddenoised, dF, ddenoised, c_out, tok2sample);
}

/* pred, target [S,C]; weight [B]; mask [S]; tok2sample [S]. */
static vfm_status check_mse_args(const char *op, const Tensor *pred, const Tensor *target, const Tensor *weight,
                                 const Tensor *mask, const Tensor *tok2sample) {
    VFM_TRY(ops_float_dtype(op, pred));
    OPS_EXPECT(op, "pred", pred, ops_f32_dtype(pred), pred->device, -1, -1);
    int64_t S = pred->shape[0], C = pred->shape[1];
    OPS_EXPECT(op, "target", target, pred->dtype, pred->device, S, C);
    OPS_EXPECT(op, "weight", weight, pred->dtype, pred->device, -1);
    OPS_EXPECT(op, "mask", mask, pred->dtype, pred->device, S);
    return ops_check_tok2sample(op, tok2sample, S, weight->shape[0], pred->device);
}

vfm_status op_weighted_mse_forward(Tensor *loss, Tensor *sample_sum, Tensor *sample_count, const Tensor *pred,
                                   const Tensor *target, const Tensor *weight, const Tensor *mask,
                                   const Tensor *tok2sample) {
    const char *op = "weighted_mse_forward";
    VFM_TRY(check_mse_args(op, pred, target, weight, mask, tok2sample));
    int64_t B = weight->shape[0];
    OPS_EXPECT(op, "loss", loss, pred->dtype, pred->device, 1);
    if (sample_sum) OPS_EXPECT(op, "sample_sum", sample_sum, pred->dtype, pred->device, B);
    if (sample_count) OPS_EXPECT(op, "sample_count", sample_count, pred->dtype, pred->device, B);
    OPS_DISPATCH_WITH_CUDA(weighted_mse_forward, pred, loss, sample_sum, sample_count, pred, target, weight, mask, tok2sample);
}

vfm_status op_weighted_mse_backward(Tensor *dpred, double dloss, const Tensor *pred, const Tensor *target,
                                    const Tensor *weight, const Tensor *mask, const Tensor *tok2sample) {
    const char *op = "weighted_mse_backward";
    VFM_TRY(check_mse_args(op, pred, target, weight, mask, tok2sample));
    OPS_EXPECT(op, "dpred", dpred, pred->dtype, pred->device, pred->shape[0], pred->shape[1]);
    OPS_DISPATCH_WITH_CUDA(weighted_mse_backward, pred, dpred, dloss, pred, target, weight, mask, tok2sample);
}
