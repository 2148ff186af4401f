/* A parameter vector as per-sample rows (layer.h "vector_rows"). */
#include "model/dit_internal.h"

/* Entry `entry` (weights, or its gradient) viewed as one row [1, numel]. */
static Tensor as_row(const Tensor *t) { return tensor_make(t->data, t->dtype, t->device, 2, (int64_t[]){1, tensor_numel(t)}); }

vfm_status vector_rows(const DiT *m, Tensor *out, int entry, const Tensor *zeros) {
    Tensor w = layer_param(m, entry), row = as_row(&w);
    return op_embedding_forward(out, &row, zeros);
}

vfm_status vector_rows_backward(const DiT *m, const Tensor *d, int entry, const Tensor *zeros) {
    Tensor g = layer_grad(m, entry), row = as_row(&g);
    return op_embedding_backward(&row, d, zeros);
}
