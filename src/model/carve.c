/* Activations carved out of an arena, or only counted (layer.h ActCarver). Each tensor's bytes
 * are rounded up to 256, so a layout's size does not depend on the order of its tensors. */
#include "model/layer.h"

static vfm_status carve_rows(ActCarver *cv, Tensor *t, DType dt, int64_t d0, int64_t d1, int64_t extra_rows) {
    int64_t shape[2] = {d0, d1};
    *t = tensor_make(NULL, dt, cv->device, d1 > 0 ? 2 : 1, shape);
    size_t bytes = tensor_bytes(t) + (size_t)extra_rows * (size_t)(d1 > 0 ? d1 : 1) * dtype_size(dt);
    bytes = (bytes + 255) & ~(size_t)255;
    cv->bytes += bytes;
    if (!cv->arena) return VFM_OK;
    return arena_alloc(cv->arena, bytes, &t->data);
}

vfm_status carve_as(ActCarver *cv, Tensor *t, DType dt, int64_t d0, int64_t d1) { return carve_rows(cv, t, dt, d0, d1, 0); }

vfm_status carve_act(ActCarver *cv, Tensor *t, int64_t d0, int64_t d1) { return carve_as(cv, t, cv->act, d0, d1); }

vfm_status carve_f32(ActCarver *cv, Tensor *t, int64_t d0, int64_t d1) { return carve_as(cv, t, DT_F32, d0, d1); }

vfm_status carve_attn(ActCarver *cv, Tensor *t, int64_t d0, int64_t d1) {
    return carve_rows(cv, t, cv->act, d0, d1, cv->spare);
}
