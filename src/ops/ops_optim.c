/* Dispatcher of the optimizer step (AdamW): argument checks (all f32 on CUDA), then the backend. */
#include "ops_check.h"

vfm_status op_adamw_step(Tensor *param, Tensor *m, Tensor *v, const Tensor *grad, const AdamWHyper *h) {
    const char *op = "adamw_step";
    VFM_TRY(ops_float_dtype(op, param));
    if (param->dtype != ops_f32_dtype(param))
        return vfm_fail(VFM_ERR_SHAPE, "%s: param is %s; on cuda the master weights, m, v and grad are f32", op,
                        dtype_name(param->dtype));
    if (!h) return vfm_fail(VFM_ERR_SHAPE, "%s: hyper-parameters are missing", op);
    const char *names[3] = {"m", "v", "grad"};
    const Tensor *others[3] = {m, v, grad};
    for (int i = 0; i < 3; i++) {
        VFM_TRY(ops_same_numel(op, "param", param, names[i], others[i]));
        if (others[i]->dtype != param->dtype)
            return vfm_fail(VFM_ERR_SHAPE, "%s: %s is %s, param is %s", op, names[i], dtype_name(others[i]->dtype),
                            dtype_name(param->dtype));
    }
    if (h->step_state) {
        const Tensor *st = h->step_state;
        if (st->dtype != DT_F64 || st->device != param->device || tensor_numel(st) < STEP_SLOTS)
            return vfm_fail(VFM_ERR_SHAPE, "%s: the step state must be f64 [>= %d] on %s", op, (int)STEP_SLOTS,
                            device_name(param->device));
    } else if (h->step < 1) {
        return vfm_fail(VFM_ERR_SHAPE, "%s: step %d must be >= 1 (bias correction)", op, h->step);
    }
    OPS_DISPATCH_WITH_CUDA(adamw_step, param, param, m, v, grad, h);
}
