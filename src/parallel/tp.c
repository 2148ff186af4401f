/* Tensor-parallel regions: identity / all-reduce without sequence parallelism, all-gather /
 * reduce-scatter of token rows with it (see tp.h). */
#include "tp.h"

#include "ops/ops.h"

static int tp_n(const TpContext *c) { return c->tp ? c->tp->size : 1; }
static int tp_me(const TpContext *c) { return c->tp ? c->tp->rank : 0; }

vfm_status tp_sp_rows(int64_t rows, int tp, int rank, int64_t *begin, int64_t *count) {
    if (tp < 1 || rows % tp != 0)
        return vfm_fail(VFM_ERR_USAGE, "model.sequence_parallel: a pack of %lld token rows does not split over "
                        "model.tensor_model_parallel_size = %d (packs are padded to lcm(dataset.pad_multiple, TP·CP))",
                        (long long)rows, tp);
    *count = rows / tp;
    *begin = *count * rank;
    return VFM_OK;
}

static int64_t width_of(const Tensor *t) { return t->ndim > 0 && t->shape[0] > 0 ? tensor_numel(t) / t->shape[0] : 0; }

/* full has TP times local's rows and the same width and dtype. */
static vfm_status check_split(const char *op, const TpContext *c, const Tensor *full, const Tensor *local) {
    int64_t n = tp_n(c);
    if (full->ndim < 1 || local->ndim < 1 || full->dtype != local->dtype || full->shape[0] != n * local->shape[0] ||
        tensor_numel(full) != n * tensor_numel(local))
        return vfm_fail(VFM_ERR_SHAPE, "%s: a whole of %lld rows (%lld elements) and a TP slice of %lld rows (%lld "
                        "elements) at TP %lld do not match", op, (long long)full->shape[0], (long long)tensor_numel(full),
                        (long long)local->shape[0], (long long)tensor_numel(local), (long long)n);
    return VFM_OK;
}

static vfm_status copy_unless_same(Tensor *dst, const Tensor *src) {
    if (dst->data == src->data) return VFM_OK;
    return op_copy(dst, src);
}

static vfm_status all_reduce(const TpContext *c, Tensor *x) {
    if (tp_n(c) == 1) return VFM_OK;
    return comm_all_reduce(c->tp, x->data, tensor_numel(x), x->dtype, COMM_SUM_ORDERED);
}

static vfm_status all_gather(const TpContext *c, Tensor *full, const Tensor *local) {
    VFM_TRY(check_split("tp all-gather", c, full, local));
    if (tp_n(c) == 1) return copy_unless_same(full, local);
    return comm_all_gather(c->tp, local->data, full->data, tensor_numel(local), local->dtype);
}

static vfm_status reduce_scatter(const TpContext *c, Tensor *local, const Tensor *full) {
    VFM_TRY(check_split("tp reduce-scatter", c, full, local));
    if (tp_n(c) == 1) return copy_unless_same(local, full);
    return comm_reduce_scatter(c->tp, full->data, local->data, tensor_numel(local), local->dtype, COMM_SUM_ORDERED);
}

vfm_status tp_region_enter_forward(const TpContext *c, Tensor *full, const Tensor *local) {
    return c->sequence_parallel ? all_gather(c, full, local) : copy_unless_same(full, local);
}

vfm_status tp_region_enter_backward(const TpContext *c, Tensor *dlocal, Tensor *dfull) {
    if (c->sequence_parallel) return reduce_scatter(c, dlocal, dfull);
    VFM_TRY(all_reduce(c, dfull));
    return copy_unless_same(dlocal, dfull);
}

vfm_status tp_region_exit_forward(const TpContext *c, Tensor *local, Tensor *partial) {
    if (c->sequence_parallel) return reduce_scatter(c, local, partial);
    VFM_TRY(all_reduce(c, partial));
    return copy_unless_same(local, partial);
}

vfm_status tp_region_exit_backward(const TpContext *c, Tensor *dpartial, const Tensor *dlocal) {
    return c->sequence_parallel ? all_gather(c, dpartial, dlocal) : copy_unless_same(dpartial, dlocal);
}

vfm_status tp_sp_scatter(const TpContext *c, Tensor *local, const Tensor *full) {
    if (!c->sequence_parallel) return copy_unless_same(local, full);
    VFM_TRY(check_split("tp_sp_scatter", c, full, local));
    int64_t begin = 0, count = 0, w = width_of(full);
    VFM_TRY(tp_sp_rows(full->shape[0], tp_n(c), tp_me(c), &begin, &count));
    Tensor mine = tensor_make((char *)full->data + (size_t)(begin * w) * dtype_size(full->dtype), full->dtype,
                              full->device, 2, (int64_t[]){count, w});
    return op_copy(local, &mine);
}

vfm_status tp_sp_gather(const TpContext *c, Tensor *full, const Tensor *local) {
    if (!c->sequence_parallel) return copy_unless_same(full, local);
    return all_gather(c, full, local);
}
