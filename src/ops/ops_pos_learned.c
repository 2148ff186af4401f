/* Dispatcher of the learned factorized 3-D position (MovieGen, ops.h): dtypes (the table gradients
 * f32 on CUDA), devices and shapes, then the backend. */
#include <stdint.h>

#include "ops_check.h"

/* The three tables [n_k, D] (or their gradients) in dtype dt, and pos [S, 3], tok2sample [S]. */
static vfm_status check_tables(const char *op, const char *const names[3], const Tensor *const tabs[3], DType dt,
                               const Tensor *ref, int64_t S, int64_t D, const Tensor *pos, const Tensor *tok2sample) {
    for (int k = 0; k < 3; k++) OPS_EXPECT(op, names[k], tabs[k], dt, ref->device, -1, D);
    OPS_EXPECT(op, "pos", pos, DT_I32, ref->device, S, 3);
    return ops_check_tok2sample(op, tok2sample, S, INT32_MAX, ref->device);
}

vfm_status op_pos_embed_learned_forward(Tensor *out, const Tensor *tab_t, const Tensor *tab_h, const Tensor *tab_w,
                                        const Tensor *pos, const Tensor *tok2sample) {
    const char *op = "pos_embed_learned_forward";
    VFM_TRY(ops_float_arg(op, "out", out));
    OPS_EXPECT(op, "out", out, out->dtype, out->device, -1, -1);
    const char *const names[3] = {"tab_t", "tab_h", "tab_w"};
    const Tensor *const tabs[3] = {tab_t, tab_h, tab_w};
    VFM_TRY(check_tables(op, names, tabs, out->dtype, out, out->shape[0], out->shape[1], pos, tok2sample));
    OPS_DISPATCH_WITH_CUDA(pos_embed_learned_forward, out, out, tab_t, tab_h, tab_w, pos, tok2sample);
}

vfm_status op_pos_embed_learned_backward(Tensor *dtab_t, Tensor *dtab_h, Tensor *dtab_w, const Tensor *dout,
                                         const Tensor *pos, const Tensor *tok2sample) {
    const char *op = "pos_embed_learned_backward";
    VFM_TRY(ops_float_arg(op, "dout", dout));
    OPS_EXPECT(op, "dout", dout, dout->dtype, dout->device, -1, -1);
    const char *const names[3] = {"dtab_t", "dtab_h", "dtab_w"};
    const Tensor *const tabs[3] = {dtab_t, dtab_h, dtab_w};
    VFM_TRY(check_tables(op, names, tabs, ops_f32_dtype(dout), dout, dout->shape[0], dout->shape[1], pos, tok2sample));
    OPS_DISPATCH_WITH_CUDA(pos_embed_learned_backward, dout, dtab_t, dtab_h, dtab_w, dout, pos, tok2sample);
}
