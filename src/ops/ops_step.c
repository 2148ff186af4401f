/* Dispatchers of the training step's device scalars (ops.h "the training step's scalars"): the
 * step state is f64 on the device of the tensors it is used with; the CPU backend keeps it in host
 * memory and does the same arithmetic in the same order. */
#include "ops_check.h"

/* state: f64 on dev with at least `need` elements. */
static vfm_status check_state(const char *op, const char *arg, const Tensor *state, Device dev, int64_t need) {
    if (!state || !state->data) return vfm_fail(VFM_ERR_SHAPE, "%s: %s is missing", op, arg);
    if (state->dtype != DT_F64 || state->device != dev)
        return vfm_fail(VFM_ERR_SHAPE, "%s: %s is %s on %s; it must be f64 on %s", op, arg, dtype_name(state->dtype),
                        device_name(state->device), device_name(dev));
    if (tensor_numel(state) < need)
        return vfm_fail(VFM_ERR_SHAPE, "%s: %s has %lld elements, %lld needed", op, arg, (long long)tensor_numel(state),
                        (long long)need);
    return VFM_OK;
}

vfm_status op_f64_accumulate(Tensor *acc, int64_t at, const Tensor *x, int n) {
    const char *op = "f64_accumulate";
    VFM_TRY(ops_float_dtype(op, x));
    VFM_TRY(check_state(op, "acc", acc, x->device, at + 1));
    if (n < 1 || n > 8 || n > tensor_numel(x))
        return vfm_fail(VFM_ERR_SHAPE, "%s: %d values of a tensor of %lld (1 to 8)", op, n, (long long)tensor_numel(x));
    OPS_DISPATCH_WITH_CUDA(f64_accumulate, x, acc, at, x, n);
}

vfm_status op_sum_squares_into(Tensor *acc, int64_t at, const Tensor *x) {
    const char *op = "sum_squares_into";
    VFM_TRY(ops_float_dtype(op, x));
    VFM_TRY(check_state(op, "acc", acc, x->device, at + 1));
    OPS_DISPATCH_WITH_CUDA(sum_squares_into, x, acc, at, x);
}

vfm_status op_f64_sum_into(Tensor *dst, int64_t at, const Tensor *src, int64_t n) {
    const char *op = "f64_sum_into";
    VFM_TRY(check_state(op, "src", src, dst ? dst->device : DEV_CPU, n));
    VFM_TRY(check_state(op, "dst", dst, src->device, at + 1));
    OPS_DISPATCH_WITH_CUDA(f64_sum_into, dst, dst, at, src, n);
}

vfm_status op_f64_div(Tensor *buf, int64_t at, double divisor) {
    VFM_TRY(check_state("f64_div", "buf", buf, buf ? buf->device : DEV_CPU, at + 1));
    OPS_DISPATCH_WITH_CUDA(f64_div, buf, buf, at, divisor);
}

vfm_status op_step_decide(Tensor *state, const StepDecideHyper *h) {
    const char *op = "step_decide";
    if (!h || h->record < 0) return vfm_fail(VFM_ERR_SHAPE, "%s: no hyper-parameters or a negative record", op);
    VFM_TRY(check_state(op, "state", state, state ? state->device : DEV_CPU, STEP_SLOTS + 3 * (h->record + 1)));
    OPS_DISPATCH_WITH_CUDA(step_decide, state, state, h);
}

vfm_status op_ema_update_if(Tensor *ema, const Tensor *param, double decay, const Tensor *step_state) {
    const char *op = "ema_update_if";
    VFM_TRY(ops_float_dtype(op, ema));
    VFM_TRY(ops_same_numel(op, "ema", ema, "param", param));
    VFM_TRY(check_state(op, "step_state", step_state, ema->device, STEP_SLOTS));
    OPS_DISPATCH_WITH_CUDA(ema_update_if, ema, ema, param, decay, step_state);
}
