/* The helpers the three losses share for one pack on the model's device (objective_internal.h):
 * small host <-> device copies, f32 views and twins. */
#include "diffusion/objective_internal.h"

#include <math.h>

#include "core/host_reads.h"
#include "ops/ops.h"

vfm_status objective_put(Tensor *dst, const void *host) { return op_upload(dst, host); }

vfm_status objective_get(void *host, const Tensor *src) {
    Tensor h = tensor_make(host, src->dtype, DEV_CPU, src->ndim, src->shape);
    return tensor_copy(&h, src);
}

Tensor objective_slice(const Tensor *t, int64_t at, int64_t n) {
    return tensor_make((float *)t->data + at, DT_F32, t->device, 1, &n);
}

vfm_status objective_loss_on_device(const Tensor *stats, int n, int n_samples, ObjectiveResult *res, int *done) {
    *done = res->loss_into && !res->sample_loss && !res->F;
    if (!*done) return VFM_OK;
    res->loss = NAN;
    res->n_samples = n_samples;
    Tensor loss = objective_slice(stats, 0, n);
    return op_f64_accumulate(res->loss_into, STEP_LOSS, &loss, n);
}

vfm_status objective_fetch(ObjectiveBatch *b, const Tensor *t, const float **host) {
    if (t->device == DEV_CPU) {
        vfm_host_read("objective: statistics to the host"); /* on CUDA the copy below waits (counted there) */
        *host = t->data;
        return VFM_OK;
    }
    void *h;
    VFM_TRY(objective_work_host(b->work, tensor_bytes(t), &h));
    VFM_TRY(objective_get(h, t));
    *host = h;
    return VFM_OK;
}

vfm_status objective_output_to_host(ObjectiveResult *res, const Tensor *F, Tensor *scratch) {
    if (!res->F) return VFM_OK;
    const Tensor *f32 = F;
    if (F->dtype != DT_F32) {
        VFM_TRY(op_convert(scratch, F));
        f32 = scratch;
    }
    return objective_get(res->F, f32);
}

Tensor objective_carve_f32_twin(Carver *k, const Tensor *t) {
    return t->dtype == DT_F32 ? *t : carve(k, DT_F32, t->ndim, t->shape);
}

vfm_status objective_convert(Tensor *dst, const Tensor *src) {
    return dst->data == src->data ? VFM_OK : op_convert(dst, src);
}
