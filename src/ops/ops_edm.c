/* Dispatchers of the EDM ops (preconditioning, noising, denoised output and its backward) and
 * of the masked per-sample-weighted MSE loss: argument checks, then the CPU backend. */
#include "ops_check.h"

vfm_status op_edm_precondition(Tensor *c_skip, Tensor *c_out, Tensor *c_in, Tensor *c_noise, Tensor *weight,
                               const Tensor *sigma, float sigma_data) {
    const char *op = "edm_precondition";
    VFM_TRY(ops_float_dtype(op, sigma));
    OPS_EXPECT(op, "sigma", sigma, sigma->dtype, sigma->device, -1);
    int64_t B = sigma->shape[0];
    const char *names[5] = {"c_skip", "c_out", "c_in", "c_noise", "weight"};
    Tensor *outs[5] = {c_skip, c_out, c_in, c_noise, weight};
    for (int i = 0; i < 5; i++)
        if (outs[i]) OPS_EXPECT(op, names[i], outs[i], sigma->dtype, sigma->device, B);
    if (!(sigma_data > 0)) return vfm_fail(VFM_ERR_SHAPE, "%s: sigma_data %g must be > 0", op, sigma_data);
    OPS_DISPATCH(edm_precondition, sigma, c_skip, c_out, c_in, c_noise, weight, sigma, sigma_data);
}

vfm_status op_edm_add_noise(Tensor *x_t, Tensor *net_in, const Tensor *x0, const Tensor *noise,
                            const Tensor *sigma, const Tensor *c_in, const Tensor *tok2sample) {
    const char *op = "edm_add_noise";
    VFM_TRY(ops_float_dtype(op, x0));
    OPS_EXPECT(op, "x0", x0, x0->dtype, x0->device, -1, -1);
    int64_t S = x0->shape[0], C = x0->shape[1];
    OPS_EXPECT(op, "noise", noise, x0->dtype, x0->device, S, C);
    OPS_EXPECT(op, "sigma", sigma, x0->dtype, x0->device, -1);
    int64_t B = sigma->shape[0];
    if (x_t) OPS_EXPECT(op, "x_t", x_t, x0->dtype, x0->device, S, C);
    if (net_in) {
        OPS_EXPECT(op, "net_in", net_in, x0->dtype, x0->device, S, C);
        OPS_EXPECT(op, "c_in", c_in, x0->dtype, x0->device, B);
    }
    VFM_TRY(ops_check_tok2sample(op, tok2sample, S, B, x0->device));
    OPS_DISPATCH(edm_add_noise, x0, x_t, net_in, x0, noise, sigma, c_in, tok2sample);
}

vfm_status op_edm_denoise(Tensor *denoised, const Tensor *x_t, const Tensor *F, const Tensor *c_skip,
                          const Tensor *c_out, const Tensor *tok2sample) {
    const char *op = "edm_denoise";
    VFM_TRY(ops_float_dtype(op, x_t));
    OPS_EXPECT(op, "x_t", x_t, x_t->dtype, x_t->device, -1, -1);
    int64_t S = x_t->shape[0], C = x_t->shape[1];
    OPS_EXPECT(op, "F", F, x_t->dtype, x_t->device, S, C);
    OPS_EXPECT(op, "denoised", denoised, x_t->dtype, x_t->device, S, C);
    OPS_EXPECT(op, "c_skip", c_skip, x_t->dtype, x_t->device, -1);
    int64_t B = c_skip->shape[0];
    OPS_EXPECT(op, "c_out", c_out, x_t->dtype, x_t->device, B);
    VFM_TRY(ops_check_tok2sample(op, tok2sample, S, B, x_t->device));
    OPS_DISPATCH(edm_denoise, x_t, denoised, x_t, F, c_skip, c_out, tok2sample);
}

vfm_status op_edm_denoise_backward(Tensor *dF, const Tensor *ddenoised, const Tensor *c_out,
                                   const Tensor *tok2sample) {
    const char *op = "edm_denoise_backward";
    VFM_TRY(ops_float_dtype(op, ddenoised));
    OPS_EXPECT(op, "ddenoised", ddenoised, ddenoised->dtype, ddenoised->device, -1, -1);
    int64_t S = ddenoised->shape[0], C = ddenoised->shape[1];
    OPS_EXPECT(op, "dF", dF, ddenoised->dtype, ddenoised->device, S, C);
    OPS_EXPECT(op, "c_out", c_out, ddenoised->dtype, ddenoised->device, -1);
    VFM_TRY(ops_check_tok2sample(op, tok2sample, S, c_out->shape[0], ddenoised->device));
    OPS_DISPATCH(edm_denoise_backward, ddenoised, dF, ddenoised, c_out, tok2sample);
}

/* pred, target [S,C]; weight [B]; mask [S]; tok2sample [S]. */
static vfm_status check_mse_args(const char *op, const Tensor *pred, const Tensor *target, const Tensor *weight,
                                 const Tensor *mask, const Tensor *tok2sample) {
    VFM_TRY(ops_float_dtype(op, pred));
    OPS_EXPECT(op, "pred", pred, pred->dtype, pred->device, -1, -1);
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
    OPS_DISPATCH(weighted_mse_forward, pred, loss, sample_sum, sample_count, pred, target, weight, mask, tok2sample);
}

vfm_status op_weighted_mse_backward(Tensor *dpred, double dloss, const Tensor *pred, const Tensor *target,
                                    const Tensor *weight, const Tensor *mask, const Tensor *tok2sample) {
    const char *op = "weighted_mse_backward";
    VFM_TRY(check_mse_args(op, pred, target, weight, mask, tok2sample));
    OPS_EXPECT(op, "dpred", dpred, pred->dtype, pred->device, pred->shape[0], pred->shape[1]);
    OPS_DISPATCH(weighted_mse_backward, pred, dpred, dloss, pred, target, weight, mask, tok2sample);
}
