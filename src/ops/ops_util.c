/* Dispatchers of the small utility ops: fill, copy, convert, add, scale, axpy, EMA, columns. */
#include <string.h>

#include "ops_check.h"

#include "core/cuda_runtime_shim.h"

vfm_status op_fill(Tensor *x, double value) {
    VFM_TRY(ops_float_dtype("fill", x));
    OPS_DISPATCH_WITH_CUDA(fill, x, x, value);
}

vfm_status op_copy(Tensor *dst, const Tensor *src) {
    OPS_RETURN_PROFILED(copy, dst->device == DEV_CUDA || src->device == DEV_CUDA ? DEV_CUDA : DEV_CPU,
                        tensor_copy(dst, src));
}

vfm_status op_upload(Tensor *dst, const void *host) {
    size_t bytes = tensor_bytes(dst);
    if (bytes == 0) return VFM_OK;
    if (dst->device != DEV_CUDA) {
        memcpy(dst->data, host, bytes);
        return VFM_OK;
    }
    return vfm_cuda_memcpy_async(dst->data, 1, host, 0, bytes, ops_stream());
}

static double load_as_double(const void *p, DType t, int64_t i) {
    switch (t) {
    case DT_F32: return ((const float *)p)[i];
    case DT_F64: return ((const double *)p)[i];
    case DT_BF16: return f32_from_bf16(((const uint16_t *)p)[i]);
    case DT_I32: return ((const int32_t *)p)[i];
    case DT_I64: return (double)((const int64_t *)p)[i];
    }
    return 0;
}

static void store_from_double(void *p, DType t, int64_t i, double v) {
    switch (t) {
    case DT_F32: ((float *)p)[i] = (float)v; break;
    case DT_F64: ((double *)p)[i] = v; break;
    case DT_BF16: ((uint16_t *)p)[i] = bf16_from_f32((float)v); break;
    case DT_I32: ((int32_t *)p)[i] = (int32_t)v; break;
    case DT_I64: ((int64_t *)p)[i] = (int64_t)v; break;
    }
}

vfm_status op_convert(Tensor *dst, const Tensor *src) {
    VFM_TRY(ops_same_numel("convert", "dst", dst, "src", src));
    if (dst->dtype == src->dtype) return tensor_copy(dst, src);
    if (dst->device == DEV_CUDA) {
#ifdef VFM_CUDA
        OPS_RETURN_PROFILED(convert, DEV_CUDA, cuda_convert(dst, src));
#else
        return ops_no_cuda("convert");
#endif
    }
    int64_t n = tensor_numel(src);
    if (src->dtype == DT_F32 && dst->dtype == DT_BF16) { /* the hot case: exact rounding rule */
        const float *s = src->data;
        uint16_t *d = dst->data;
        for (int64_t i = 0; i < n; i++) d[i] = bf16_from_f32(s[i]);
        return VFM_OK;
    }
    for (int64_t i = 0; i < n; i++) store_from_double(dst->data, dst->dtype, i, load_as_double(src->data, src->dtype, i));
    return VFM_OK;
}

static vfm_status same_float(const char *op, const Tensor *a, const Tensor *b) {
    VFM_TRY(ops_float_dtype(op, a));
    VFM_TRY(ops_same_numel(op, "a", a, "b", b));
    if (a->dtype != b->dtype) return vfm_fail(VFM_ERR_SHAPE, "%s: dtypes %s and %s differ", op, dtype_name(a->dtype),
                                              dtype_name(b->dtype));
    return VFM_OK;
}

vfm_status op_add(Tensor *out, const Tensor *a, const Tensor *b) {
    VFM_TRY(same_float("add", out, a));
    VFM_TRY(same_float("add", out, b));
    OPS_DISPATCH_WITH_CUDA(add, out, out, a, b);
}

vfm_status op_scale(Tensor *x, double alpha) {
    VFM_TRY(ops_float_dtype("scale", x));
    OPS_DISPATCH_WITH_CUDA(scale, x, x, alpha);
}

vfm_status op_axpy(Tensor *y, double alpha, const Tensor *x) {
    VFM_TRY(same_float("axpy", y, x));
    OPS_DISPATCH_WITH_CUDA(axpy, y, y, alpha, x);
}

vfm_status op_ema_update(Tensor *ema, const Tensor *param, double decay) {
    VFM_TRY(same_float("ema_update", ema, param));
    OPS_DISPATCH_WITH_CUDA(ema_update, ema, ema, param, decay);
}

static vfm_status check_columns(const char *op, const Tensor *narrow, const Tensor *wide, int64_t col0) {
    VFM_TRY(ops_float_dtype(op, narrow));
    if (narrow->dtype != wide->dtype || narrow->device != wide->device || tensor_rows(narrow) != tensor_rows(wide) ||
        col0 < 0 || col0 + tensor_dim(narrow, -1) > tensor_dim(wide, -1)) {
        char a[128], b[128];
        return vfm_fail(VFM_ERR_SHAPE, "%s: columns %lld.. of %s do not hold %s", op, (long long)col0,
                        tensor_describe(wide, a, sizeof a), tensor_describe(narrow, b, sizeof b));
    }
    return VFM_OK;
}

vfm_status op_columns_get(Tensor *out, const Tensor *in, int64_t col0) {
    VFM_TRY(check_columns("columns_get", out, in, col0));
    OPS_DISPATCH_WITH_CUDA(columns_get, out, out, in, col0);
}

vfm_status op_columns_add(Tensor *out, const Tensor *in, int64_t col0) {
    VFM_TRY(check_columns("columns_add", in, out, col0));
    OPS_DISPATCH_WITH_CUDA(columns_add, out, out, in, col0);
}
