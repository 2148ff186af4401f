/* Dispatchers: sum of squares, normal fill, NaN/Inf count. */
#include "ops_check.h"

#include "core/host_reads.h"

vfm_status op_sum_squares(double *out, const Tensor *x) {
    VFM_TRY(ops_float_dtype("sum_squares", x));
    vfm_host_read("op_sum_squares"); /* a host value: on CUDA the call waits for the GPU */
    OPS_DISPATCH_WITH_CUDA(sum_squares, x, out, x);
}

vfm_status op_randn_fill(Tensor *out, uint64_t seed, uint32_t stream, uint32_t step, uint64_t uid,
                         uint64_t element_offset, float std) {
    VFM_TRY(ops_float_dtype("randn_fill", out));
    OPS_DISPATCH_WITH_CUDA(randn_fill, out, out, seed, stream, step, uid, element_offset, std);
}

vfm_status op_count_nonfinite(int64_t *count, const Tensor *x) {
    VFM_TRY(ops_float_dtype("count_nonfinite", x));
    vfm_host_read("op_count_nonfinite"); /* a host value: on CUDA the call waits for the GPU */
    OPS_DISPATCH_WITH_CUDA(count_nonfinite, x, count, x);
}
