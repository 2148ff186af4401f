/* Shared argument checks for the op dispatchers, and the thread setting of the CPU backend. */
#include "ops_check.h"

#include <stdio.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

void openblas_set_num_threads(int num_threads);

static int g_threads = 1;

void ops_set_threads(int n) {
    if (n < 1) n = 1;
    g_threads = n;
#ifdef _OPENMP
    omp_set_num_threads(n);
#endif
    openblas_set_num_threads(n);
}

int ops_get_threads(void) { return g_threads; }

vfm_status ops_expect(const char *op, const char *arg, const Tensor *t, DType dtype, Device dev, int ndim,
                      const int64_t *shape) {
    char got[128];
    if (!t || !t->data) return vfm_fail(VFM_ERR_SHAPE, "%s: argument %s is missing", op, arg);
    if (t->dtype != dtype || t->device != dev)
        return vfm_fail(VFM_ERR_SHAPE, "%s: %s is %s, expected %s on %s", op, arg,
                        tensor_describe(t, got, sizeof got), dtype_name(dtype), device_name(dev));
    int ok = t->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++)
        if (shape[i] >= 0 && t->shape[i] != shape[i]) ok = 0;
    if (!ok) {
        char want[128];
        size_t k = (size_t)snprintf(want, sizeof want, "[");
        for (int i = 0; i < ndim && k < sizeof want; i++) {
            if (shape[i] >= 0) k += (size_t)snprintf(want + k, sizeof want - k, "%s%lld", i ? "," : "", (long long)shape[i]);
            else k += (size_t)snprintf(want + k, sizeof want - k, "%s*", i ? "," : "");
        }
        if (k < sizeof want) snprintf(want + k, sizeof want - k, "]");
        return vfm_fail(VFM_ERR_SHAPE, "%s: %s is %s, expected shape %s", op, arg, tensor_describe(t, got, sizeof got),
                        want);
    }
    return VFM_OK;
}

vfm_status ops_float_dtype(const char *op, const Tensor *t) {
    char got[128];
    if (!t || !t->data) return vfm_fail(VFM_ERR_SHAPE, "%s: missing tensor", op);
    if (t->device == DEV_CPU && (t->dtype == DT_F32 || t->dtype == DT_F64)) return VFM_OK;
    if (t->device == DEV_CUDA && (t->dtype == DT_F32 || t->dtype == DT_BF16)) return VFM_OK;
    return vfm_fail(VFM_ERR_SHAPE, "%s: unsupported tensor %s", op, tensor_describe(t, got, sizeof got));
}

vfm_status ops_float_arg(const char *op, const char *arg, const Tensor *t) {
    char got[128];
    if (!t || !t->data) return vfm_fail(VFM_ERR_SHAPE, "%s: argument %s is missing", op, arg);
    if (ops_float_dtype(op, t) != VFM_OK)
        return vfm_fail(VFM_ERR_SHAPE, "%s: %s is %s, not a float type this device runs", op, arg,
                        tensor_describe(t, got, sizeof got));
    return VFM_OK;
}

vfm_status ops_same_numel(const char *op, const char *a_name, const Tensor *a, const char *b_name, const Tensor *b) {
    char sa[128], sb[128];
    if (!a || !b || !a->data || !b->data) return vfm_fail(VFM_ERR_SHAPE, "%s: %s or %s is missing", op, a_name, b_name);
    if (tensor_numel(a) != tensor_numel(b) || a->device != b->device)
        return vfm_fail(VFM_ERR_SHAPE, "%s: %s %s does not match %s %s", op, a_name, tensor_describe(a, sa, sizeof sa),
                        b_name, tensor_describe(b, sb, sizeof sb));
    return VFM_OK;
}

vfm_status ops_check_tok2sample(const char *op, const Tensor *tok2sample, int64_t S, int64_t B, Device dev) {
    OPS_EXPECT(op, "tok2sample", tok2sample, DT_I32, dev, S);
    if (dev != DEV_CPU) return VFM_OK;
    const int32_t *map = tok2sample->data;
    for (int64_t s = 0; s < S; s++)
        if (map[s] < -1 || map[s] >= B)
            return vfm_fail(VFM_ERR_SHAPE, "%s: tok2sample[%lld] = %d is not -1 or a sample below %lld", op,
                            (long long)s, map[s], (long long)B);
    return VFM_OK;
}

DType ops_f32_dtype(const Tensor *ref) { return ref->device == DEV_CUDA ? DT_F32 : ref->dtype; }

DType ops_act_dtype(const Tensor *t, const Tensor *ref) {
    if (ref->device != DEV_CUDA) return ref->dtype;
    return t && (t->dtype == DT_BF16 || t->dtype == DT_F32) ? t->dtype : DT_BF16;
}

const char *ops_describe_libraries(void) {
#ifdef VFM_CUDA
    return cuda_describe_libraries();
#else
    return "";
#endif
}

vfm_status ops_set_attention_impl(const char *name) {
    if (strcmp(name, "auto") != 0 && strcmp(name, "reference") != 0 && strcmp(name, "cudnn") != 0)
        return vfm_fail(VFM_ERR_USAGE, "attention implementation '%s': expected auto, reference or cudnn", name);
#ifdef VFM_CUDA
    cuda_attention_set_impl(strcmp(name, "reference") == 0 ? CUDA_ATTN_REFERENCE
                            : strcmp(name, "cudnn") == 0   ? CUDA_ATTN_CUDNN
                                                           : CUDA_ATTN_AUTO);
#endif
    return VFM_OK;
}

vfm_status ops_check_index_errors(void) {
#ifdef VFM_CUDA
    return cuda_index_errors();
#else
    return VFM_OK;
#endif
}

int64_t ops_attention_reference_calls(void) {
#ifdef VFM_CUDA
    return cuda_attention_reference_calls();
#else
    return 0;
#endif
}

void *ops_stream(void) {
#ifdef VFM_CUDA
    return cuda_ops_get_stream();
#else
    return NULL;
#endif
}

vfm_status ops_no_cuda(const char *op) {
    return vfm_fail(VFM_ERR_UNSUPPORTED, "op %s has no CUDA kernel in this build", op);
}
