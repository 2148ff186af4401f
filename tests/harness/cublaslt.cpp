// The CPU harness's cuBLASLt: the entry points linear.cu calls, with the meaning cuBLASLt's
// documentation (cublasLt.h, docs.nvidia.com/cuda/cublas "cuBLASLt API") gives the descriptors
// and layouts, computed on the host from "device" memory (the harness's heap, runtime.cpp):
//
//   D = epilogue(alpha·op(A)·op(B) + beta·C)        C is not read when beta = 0
//
// Matrices are column-major (CUBLASLT_ORDER_COL: element (i, j) at i + j·ld; ORDER_ROW: i·ld + j),
// batch b at b·STRIDED_BATCH_OFFSET. op(A) is m×k, so A's layout is m×k (TRANSA = N) or k×m (T);
// op(B) is k×n; C and D are m×n. Epilogues: BIAS adds bias[i] (m entries, D's type), GELU applies
// GELU's tanh form, the AUX variants store the GELU input (bias added) in the aux matrix (D's type,
// EPILOGUE_AUX_LD ≥ m and divisible by 8). Products in double, one rounding to D's type.
//
// What is checked, as the documentation states it or the GPU would fault: layouts whose sizes do
// not fit m, n, k; ld < rows (column order); types (A = B, f32 or bf16; C = D; bf16 or f32 D);
// COMPUTE_32F with f32 scale only (no TF32 path); attributes of the wrong size; AUX epilogues
// without their pointer or ld; every matrix, the bias and the aux buffer inside one device
// allocation; pointers less aligned than the heuristic was told (MIN_ALIGNMENT_*; the bias and aux
// pointers' own alignment when the heuristic saw them); an algorithm used for another problem than
// the one the heuristic chose it for. What cuBLASLt itself does inside (tiling, split-K, speed,
// which shapes its kernels decline) is not modelled. Anything else it does not model (an attribute,
// an epilogue, a type) is refused with CUBLAS_STATUS_NOT_SUPPORTED and a message saying so.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "runtime.h"

namespace {

const uint64_t kMagicDesc = 0x76666d44657363ull, kMagicLayout = 0x76666d4c61796full, kMagicPref = 0x76666d50726566ull,
               kMagicAlgo = 0x76666d416c676full;

struct Desc {
    uint64_t magic;
    int32_t compute, scale, pointer_mode, transa, transb;
    uint32_t epilogue;
    const void *bias;
    int64_t bias_batch_stride;
    void *aux;
    int64_t aux_ld, aux_batch_stride;
    int32_t bias_type, aux_type;  // -1: D's type
};

struct Layout {
    uint64_t magic;
    uint32_t type;
    int32_t order;
    uint64_t rows, cols;
    int64_t ld;
    int32_t batch;
    int64_t stride;
};

struct Pref {
    uint64_t magic;
    uint32_t align[4];  // A, B, C, D
};

// What the heuristic stores in cublasLtMatmulAlgo_t (64 bytes)
struct Algo {
    uint64_t magic;
    uint64_t problem;    // hash of the descriptor and layouts it was chosen for
    uint32_t align[6];   // A, B, C, D, bias, aux: the least alignment it may be run with
};
static_assert(sizeof(Algo) <= sizeof(cublasLtMatmulAlgo_t), "algo fits");

thread_local char g_detail[512];
thread_local cublasStatus_t g_detail_status = CUBLAS_STATUS_SUCCESS;

cublasStatus_t fail(cublasStatus_t s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
cublasStatus_t fail(cublasStatus_t s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_detail, sizeof g_detail, fmt, ap);
    va_end(ap);
    g_detail_status = s;
    return s;
}

const char *base_status(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "CUBLAS_STATUS_(other)";
    }
}

size_t type_size(uint32_t t) { return t == CUDA_R_32F ? 4 : t == CUDA_R_16BF ? 2 : 0; }
const char *type_name(int64_t t) { return t == CUDA_R_32F ? "f32" : t == CUDA_R_16BF ? "bf16" : "other"; }

float load(const void *p, uint32_t type, int64_t at) {
    if (type == CUDA_R_32F) return ((const float *)p)[at];
    return __bfloat162float(((const __nv_bfloat16 *)p)[at]);
}

void store(void *p, uint32_t type, int64_t at, float v) {
    if (type == CUDA_R_32F) ((float *)p)[at] = v;
    else ((__nv_bfloat16 *)p)[at] = __float2bfloat16_rn(v);
}

int64_t offset(const Layout *l, int64_t i, int64_t j) { return l->order == CUBLASLT_ORDER_ROW ? i * l->ld + j : i + j * l->ld; }

// Elements from one matrix's start to past its last element.
int64_t span1(const Layout *l) {
    if (l->rows == 0 || l->cols == 0) return 0;
    return offset(l, (int64_t)l->rows - 1, (int64_t)l->cols - 1) + 1;
}

// The same over all batches.
int64_t span(const Layout *l) { return span1(l) ? span1(l) + (int64_t)(l->batch - 1) * l->stride : 0; }

uint32_t alignment_of(const void *p) {
    uint32_t a = 256;
    while (a > 1 && ((uintptr_t)p & (a - 1))) a >>= 1;
    return a;
}

bool has_bias(uint32_t e) { return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS; }
bool has_gelu(uint32_t e) {
    return e == CUBLASLT_EPILOGUE_GELU || e == CUBLASLT_EPILOGUE_GELU_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX ||
           e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
bool has_aux(uint32_t e) { return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS; }

uint64_t mix(uint64_t h, uint64_t v) { return (h ^ v) * 0x100000001b3ull; }

uint64_t problem_hash(const Desc *d, const Layout *const *l) {
    uint64_t h = 0xcbf29ce484222325ull;
    h = mix(mix(mix(mix(h, (uint64_t)d->transa), (uint64_t)d->transb), d->epilogue), (uint64_t)d->aux_ld);
    h = mix(mix(h, (uint64_t)d->bias_type), (uint64_t)d->aux_type);
    for (int i = 0; i < 4; i++) {
        h = mix(mix(mix(h, l[i]->type), (uint64_t)l[i]->order), l[i]->rows);
        h = mix(mix(mix(mix(h, l[i]->cols), (uint64_t)l[i]->ld), (uint64_t)l[i]->batch), (uint64_t)l[i]->stride);
    }
    return h;
}

// The problem's shape: m, n, k from the layouts, after every documented consistency check.
cublasStatus_t check_problem(const Desc *d, const Layout *A, const Layout *B, const Layout *C, const Layout *D, int64_t *m,
                             int64_t *n, int64_t *k) {
    if (!d || d->magic != kMagicDesc) return fail(CUBLAS_STATUS_INVALID_VALUE, "not a matmul descriptor");
    const Layout *all[4] = {A, B, C, D};
    const char *names = "ABCD";
    for (int i = 0; i < 4; i++) {
        const Layout *l = all[i];
        if (!l || l->magic != kMagicLayout) return fail(CUBLAS_STATUS_INVALID_VALUE, "%c: not a matrix layout", names[i]);
        if (!type_size(l->type))
            return fail(CUBLAS_STATUS_NOT_SUPPORTED, "%c: type %u (the stand-in models f32 and bf16)", names[i], l->type);
        int64_t need = l->order == CUBLASLT_ORDER_ROW ? (int64_t)l->cols : (int64_t)l->rows;
        if (l->ld < (need > 1 ? need : 1))
            return fail(CUBLAS_STATUS_INVALID_VALUE, "%c: leading dimension %lld < %s %lld", names[i], (long long)l->ld,
                        l->order == CUBLASLT_ORDER_ROW ? "cols" : "rows", (long long)need);
        if (l->batch < 1 || (l->batch > 1 && l->stride != 0 && l->stride < span1(l)))
            return fail(CUBLAS_STATUS_INVALID_VALUE, "%c: batch %d with stride %lld overlaps", names[i], l->batch,
                        (long long)l->stride);
    }
    if (A->batch != B->batch || A->batch != C->batch || A->batch != D->batch)
        return fail(CUBLAS_STATUS_INVALID_VALUE, "batch counts differ (A %d, B %d, C %d, D %d)", A->batch, B->batch,
                    C->batch, D->batch);
    if (d->transa != CUBLAS_OP_N && d->transa != CUBLAS_OP_T)
        return fail(CUBLAS_STATUS_NOT_SUPPORTED, "TRANSA %d (N or T)", d->transa);
    if (d->transb != CUBLAS_OP_N && d->transb != CUBLAS_OP_T)
        return fail(CUBLAS_STATUS_NOT_SUPPORTED, "TRANSB %d (N or T)", d->transb);
    *m = (int64_t)D->rows, *n = (int64_t)D->cols;
    int64_t am = d->transa == CUBLAS_OP_N ? A->rows : A->cols, ak = d->transa == CUBLAS_OP_N ? A->cols : A->rows;
    int64_t bk = d->transb == CUBLAS_OP_N ? B->rows : B->cols, bn = d->transb == CUBLAS_OP_N ? B->cols : B->rows;
    *k = ak;
    if (am != *m || bn != *n || bk != ak || C->rows != D->rows || C->cols != D->cols)
        return fail(CUBLAS_STATUS_INVALID_VALUE,
                    "shapes: op(A) is %lldx%lld, op(B) %lldx%lld, C %llux%llu, D %llux%llu (TRANSA %s, TRANSB %s)",
                    (long long)am, (long long)ak, (long long)bk, (long long)bn, (unsigned long long)C->rows,
                    (unsigned long long)C->cols, (unsigned long long)D->rows, (unsigned long long)D->cols,
                    d->transa == CUBLAS_OP_N ? "N" : "T", d->transb == CUBLAS_OP_N ? "N" : "T");
    if (C->type != D->type || C->order != D->order)
        return fail(CUBLAS_STATUS_INVALID_VALUE, "C (%s) and D (%s) differ in type or order", type_name(C->type),
                    type_name(D->type));
    if (A->type != B->type)
        return fail(CUBLAS_STATUS_NOT_SUPPORTED, "A is %s, B %s", type_name(A->type), type_name(B->type));
    if (A->type == CUDA_R_32F && D->type != CUDA_R_32F)
        return fail(CUBLAS_STATUS_NOT_SUPPORTED, "f32 A and B with a %s D", type_name(D->type));
    uint32_t e = d->epilogue;
    if (e != CUBLASLT_EPILOGUE_DEFAULT && !has_bias(e) && !has_gelu(e))
        return fail(CUBLAS_STATUS_NOT_SUPPORTED, "epilogue %u (the stand-in models DEFAULT, BIAS, GELU[_AUX][_BIAS])", e);
    int32_t bias_type = d->bias_type < 0 ? (int32_t)D->type : d->bias_type;
    int32_t aux_type = d->aux_type < 0 ? (int32_t)D->type : d->aux_type;
    if (has_bias(e) && bias_type != (int32_t)D->type)
        return fail(CUBLAS_STATUS_INVALID_VALUE, "bias of type %s for a %s D (the bias has D's type)",
                    type_name(bias_type), type_name(D->type));
    if (has_aux(e)) {
        if (!d->aux) return fail(CUBLAS_STATUS_INVALID_VALUE, "epilogue %u without EPILOGUE_AUX_POINTER", e);
        if (d->aux_ld < *m || d->aux_ld % 8)
            return fail(CUBLAS_STATUS_INVALID_VALUE, "EPILOGUE_AUX_LD %lld: at least m = %lld and divisible by 8",
                        (long long)d->aux_ld, (long long)*m);
        if (aux_type != (int32_t)D->type)
            return fail(CUBLAS_STATUS_INVALID_VALUE, "aux of type %s for a %s D", type_name(aux_type), type_name(D->type));
    }
    if (has_bias(e) && !d->bias) return fail(CUBLAS_STATUS_INVALID_VALUE, "epilogue %u without BIAS_POINTER", e);
    return CUBLAS_STATUS_SUCCESS;
}

// [p, p + bytes) inside one device allocation, or a fault (the GPU would read or write outside).
bool inside(const char *what, const void *p, int64_t elems, size_t elem_size) {
    size_t bytes = (size_t)elems * elem_size, have = runtime_device_extent(p);
    if (elems == 0 || have >= bytes) return true;
    if (have == 0) runtime_kernel_fault("cublasLtMatmul: %s %p is not device memory", what, p);
    else
        runtime_kernel_fault("cublasLtMatmul: %s spans %zu bytes from %p, its allocation has %zu", what, bytes, p, have);
    return false;
}

float gelu_tanh(float x) {
    const float c = 0.7978845608028654f;  // sqrt(2/pi)
    return 0.5f * x * (1.f + tanhf(c * (x + 0.044715f * x * x * x)));
}

template <typename T> cublasStatus_t set_value(T *field, const void *buf, size_t size, const char *what) {
    if (size != sizeof(T)) return fail(CUBLAS_STATUS_INVALID_VALUE, "%s: %zu bytes, the attribute has %zu", what, size, sizeof(T));
    memcpy(field, buf, sizeof(T));
    return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

extern "C" {

size_t cublasLtGetVersion(void) { return CUBLAS_VERSION; }

const char *cublasLtGetStatusString(cublasStatus_t s) {
    static thread_local char buf[640];
    if (s != g_detail_status || !g_detail[0]) return base_status(s);
    snprintf(buf, sizeof buf, "%s (cuBLASLt stand-in: %s)", base_status(s), g_detail);
    return buf;
}

cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) {
    *h = (cublasLtHandle_t)malloc(16);
    return *h ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
    free(h);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *out, cublasComputeType_t compute, cudaDataType_t scale) {
    if (compute != CUBLAS_COMPUTE_32F)
        return fail(CUBLAS_STATUS_NOT_SUPPORTED, "compute type %d (the stand-in models CUBLAS_COMPUTE_32F)", (int)compute);
    if (scale != CUDA_R_32F) return fail(CUBLAS_STATUS_INVALID_VALUE, "scale type %d with CUBLAS_COMPUTE_32F", (int)scale);
    Desc *d = (Desc *)calloc(1, sizeof *d);
    if (!d) return CUBLAS_STATUS_ALLOC_FAILED;
    d->magic = kMagicDesc, d->compute = compute, d->scale = scale;
    d->pointer_mode = CUBLASLT_POINTER_MODE_HOST, d->transa = d->transb = CUBLAS_OP_N;
    d->epilogue = CUBLASLT_EPILOGUE_DEFAULT, d->bias_type = d->aux_type = -1;
    *out = (cublasLtMatmulDesc_t)d;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
    Desc *d = (Desc *)desc;
    if (d && d->magic != kMagicDesc) return fail(CUBLAS_STATUS_INVALID_VALUE, "destroying a non-descriptor");
    if (d) d->magic = 0;
    free(d);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                              const void *buf, size_t size) {
    Desc *d = (Desc *)desc;
    if (!d || d->magic != kMagicDesc) return fail(CUBLAS_STATUS_INVALID_VALUE, "not a matmul descriptor");
    switch (attr) {
    case CUBLASLT_MATMUL_DESC_POINTER_MODE: {
        cublasStatus_t s = set_value(&d->pointer_mode, buf, size, "POINTER_MODE");
        if (s == CUBLAS_STATUS_SUCCESS && d->pointer_mode != CUBLASLT_POINTER_MODE_HOST)
            return fail(CUBLAS_STATUS_NOT_SUPPORTED, "POINTER_MODE %d (the stand-in models HOST)", d->pointer_mode);
        return s;
    }
    case CUBLASLT_MATMUL_DESC_TRANSA: return set_value(&d->transa, buf, size, "TRANSA");
    case CUBLASLT_MATMUL_DESC_TRANSB: return set_value(&d->transb, buf, size, "TRANSB");
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return set_value(&d->epilogue, buf, size, "EPILOGUE");
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return set_value(&d->bias, buf, size, "BIAS_POINTER");
    case CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE: return set_value(&d->bias_batch_stride, buf, size, "BIAS_BATCH_STRIDE");
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: return set_value(&d->aux, buf, size, "EPILOGUE_AUX_POINTER");
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: return set_value(&d->aux_ld, buf, size, "EPILOGUE_AUX_LD");
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE:
        return set_value(&d->aux_batch_stride, buf, size, "EPILOGUE_AUX_BATCH_STRIDE");
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: return set_value(&d->bias_type, buf, size, "BIAS_DATA_TYPE");
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE: return set_value(&d->aux_type, buf, size, "EPILOGUE_AUX_DATA_TYPE");
    default: return fail(CUBLAS_STATUS_NOT_SUPPORTED, "matmul attribute %d is not modelled by the stand-in", (int)attr);
    }
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *out, cudaDataType type, uint64_t rows, uint64_t cols,
                                          int64_t ld) {
    Layout *l = (Layout *)calloc(1, sizeof *l);
    if (!l) return CUBLAS_STATUS_ALLOC_FAILED;
    *l = Layout{kMagicLayout, (uint32_t)type, CUBLASLT_ORDER_COL, rows, cols, ld, 1, 0};
    *out = (cublasLtMatrixLayout_t)l;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
    Layout *l = (Layout *)layout;
    if (l && l->magic != kMagicLayout) return fail(CUBLAS_STATUS_INVALID_VALUE, "destroying a non-layout");
    if (l) l->magic = 0;
    free(l);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attr,
                                                const void *buf, size_t size) {
    Layout *l = (Layout *)layout;
    if (!l || l->magic != kMagicLayout) return fail(CUBLAS_STATUS_INVALID_VALUE, "not a matrix layout");
    switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_TYPE: return set_value(&l->type, buf, size, "TYPE");
    case CUBLASLT_MATRIX_LAYOUT_ORDER: {
        cublasStatus_t s = set_value(&l->order, buf, size, "ORDER");
        if (s == CUBLAS_STATUS_SUCCESS && l->order != CUBLASLT_ORDER_COL && l->order != CUBLASLT_ORDER_ROW)
            return fail(CUBLAS_STATUS_NOT_SUPPORTED, "ORDER %d (the stand-in models COL and ROW)", l->order);
        return s;
    }
    case CUBLASLT_MATRIX_LAYOUT_ROWS: return set_value(&l->rows, buf, size, "ROWS");
    case CUBLASLT_MATRIX_LAYOUT_COLS: return set_value(&l->cols, buf, size, "COLS");
    case CUBLASLT_MATRIX_LAYOUT_LD: return set_value(&l->ld, buf, size, "LD");
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: return set_value(&l->batch, buf, size, "BATCH_COUNT");
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: return set_value(&l->stride, buf, size, "STRIDED_BATCH_OFFSET");
    default: return fail(CUBLAS_STATUS_NOT_SUPPORTED, "layout attribute %d is not modelled by the stand-in", (int)attr);
    }
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *out) {
    Pref *p = (Pref *)calloc(1, sizeof *p);
    if (!p) return CUBLAS_STATUS_ALLOC_FAILED;
    *p = Pref{kMagicPref, {256, 256, 256, 256}};  // the documented defaults
    *out = (cublasLtMatmulPreference_t)p;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
    free(pref);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void *buf,
                                                    size_t size) {
    Pref *p = (Pref *)pref;
    if (!p || p->magic != kMagicPref) return fail(CUBLAS_STATUS_INVALID_VALUE, "not a matmul preference");
    uint32_t u32;
    uint64_t u64;
    switch (attr) {
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: return set_value(&p->align[0], buf, size, "MIN_ALIGNMENT_A_BYTES");
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: return set_value(&p->align[1], buf, size, "MIN_ALIGNMENT_B_BYTES");
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: return set_value(&p->align[2], buf, size, "MIN_ALIGNMENT_C_BYTES");
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: return set_value(&p->align[3], buf, size, "MIN_ALIGNMENT_D_BYTES");
    case CUBLASLT_MATMUL_PREF_SEARCH_MODE:  // choices among cuBLASLt's own kernels: nothing to model
    case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK: return set_value(&u32, buf, size, "preference");
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:  // the stand-in needs none
    case CUBLASLT_MATMUL_PREF_IMPL_MASK: return set_value(&u64, buf, size, "preference");
    default: return fail(CUBLAS_STATUS_NOT_SUPPORTED, "preference attribute %d is not modelled by the stand-in", (int)attr);
    }
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
                                              cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
                                              cublasLtMatrixLayout_t d, cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int *returned) {
    *returned = 0;
    if (!h) return fail(CUBLAS_STATUS_NOT_INITIALIZED, "no handle");
    if (requested < 1) return fail(CUBLAS_STATUS_INVALID_VALUE, "requestedAlgoCount %d", requested);
    const Pref *p = (const Pref *)pref;
    if (!p || p->magic != kMagicPref) return fail(CUBLAS_STATUS_INVALID_VALUE, "not a matmul preference");
    const Desc *ds = (const Desc *)desc;
    const Layout *l[4] = {(const Layout *)a, (const Layout *)b, (const Layout *)c, (const Layout *)d};
    int64_t m, n, k;
    cublasStatus_t s = check_problem(ds, l[0], l[1], l[2], l[3], &m, &n, &k);
    if (s != CUBLAS_STATUS_SUCCESS) return s;
    Algo algo;
    memset(&algo, 0, sizeof algo);
    algo.magic = kMagicAlgo;
    algo.problem = problem_hash(ds, l);
    for (int i = 0; i < 4; i++) algo.align[i] = p->align[i];
    algo.align[4] = has_bias(ds->epilogue) ? alignment_of(ds->bias) : 1;
    algo.align[5] = has_aux(ds->epilogue) ? alignment_of(ds->aux) : 1;
    memset(&results[0], 0, sizeof results[0]);
    memcpy(&results[0].algo, &algo, sizeof algo);
    results[0].workspaceSize = 0;
    results[0].state = CUBLAS_STATUS_SUCCESS;
    results[0].wavesCount = 1.f;
    *returned = 1;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t desc, const void *alpha, const void *A,
                              cublasLtMatrixLayout_t adesc, const void *B, cublasLtMatrixLayout_t bdesc,
                              const void *beta, const void *C, cublasLtMatrixLayout_t cdesc, void *D,
                              cublasLtMatrixLayout_t ddesc, const cublasLtMatmulAlgo_t *algo_in, void *workspace,
                              size_t workspace_bytes, cudaStream_t stream) {
    (void)workspace, (void)workspace_bytes;  // the stand-in asks for no workspace
    if (!h) return fail(CUBLAS_STATUS_NOT_INITIALIZED, "no handle");
    if (runtime_sticky_error() != cudaSuccess) return fail(CUBLAS_STATUS_EXECUTION_FAILED, "the context has faulted");
    if (!runtime_stream_ok(stream, "cublasLtMatmul")) return fail(CUBLAS_STATUS_INVALID_VALUE, "unknown stream");
    const Desc *ds = (const Desc *)desc;
    const Layout *la = (const Layout *)adesc, *lb = (const Layout *)bdesc, *lc = (const Layout *)cdesc,
                 *ld = (const Layout *)ddesc;
    int64_t m, n, k;
    cublasStatus_t s = check_problem(ds, la, lb, lc, ld, &m, &n, &k);
    if (s != CUBLAS_STATUS_SUCCESS) return s;
    if (!algo_in) return fail(CUBLAS_STATUS_NOT_SUPPORTED, "algo NULL (vfm always passes the heuristic's)");
    Algo algo;
    memcpy(&algo, algo_in, sizeof algo);
    const Layout *l[4] = {la, lb, lc, ld};
    if (algo.magic != kMagicAlgo || algo.problem != problem_hash(ds, l))
        return fail(CUBLAS_STATUS_INVALID_VALUE, "the algorithm was chosen for another problem than this one");
    const void *ptr[6] = {A, B, C, D, ds->bias, ds->aux};
    const char *pname[6] = {"A", "B", "C", "D", "bias", "aux"};
    for (int i = 0; i < 6; i++) {
        if ((i == 4 && !has_bias(ds->epilogue)) || (i == 5 && !has_aux(ds->epilogue))) continue;
        if (alignment_of(ptr[i]) < algo.align[i])
            return fail(CUBLAS_STATUS_INVALID_VALUE, "%s %p is %u-byte aligned, the algorithm was chosen for %u",
                        pname[i], ptr[i], alignment_of(ptr[i]), algo.align[i]);
    }
    float fa = *(const float *)alpha, fb = *(const float *)beta;
    uint32_t e = ds->epilogue;
    Layout aux_l = {kMagicLayout, ld->type, CUBLASLT_ORDER_COL, (uint64_t)m, (uint64_t)n, ds->aux_ld, ld->batch,
                    ds->aux_batch_stride};
    bool ok = inside("A", A, span(la), type_size(la->type)) && inside("B", B, span(lb), type_size(lb->type)) &&
              inside("D", D, span(ld), type_size(ld->type)) &&
              (fb == 0.f || inside("C", C, span(lc), type_size(lc->type))) &&
              (!has_bias(e) || inside("bias", ds->bias, m + (int64_t)(ld->batch - 1) * ds->bias_batch_stride,
                                      type_size(ld->type))) &&
              (!has_aux(e) || inside("aux", ds->aux, span(&aux_l), type_size(ld->type)));
    if (!ok) return fail(CUBLAS_STATUS_EXECUTION_FAILED, "an operand lies outside device memory (see the fault)");
    // op(A) as m rows of k and op(B) as n rows of k, in double, read once per batch: the products
    // and their order (t = 0 .. k-1) are those of reading every operand in the inner loop
    std::vector<double> a_rows((size_t)(m * k)), b_rows((size_t)(n * k));
    for (int bt = 0; bt < ld->batch; bt++) {
        const char *pa = (const char *)A + (size_t)(bt * la->stride) * type_size(la->type);
        const char *pb = (const char *)B + (size_t)(bt * lb->stride) * type_size(lb->type);
        const char *pc = (const char *)C + (size_t)(bt * lc->stride) * type_size(lc->type);
        char *pd = (char *)D + (size_t)(bt * ld->stride) * type_size(ld->type);
        for (int64_t i = 0; i < m; i++)
            for (int64_t t = 0; t < k; t++)
                a_rows[(size_t)(i * k + t)] = ds->transa == CUBLAS_OP_N ? load(pa, la->type, offset(la, i, t))
                                                                       : load(pa, la->type, offset(la, t, i));
        for (int64_t j = 0; j < n; j++)
            for (int64_t t = 0; t < k; t++)
                b_rows[(size_t)(j * k + t)] = ds->transb == CUBLAS_OP_N ? load(pb, lb->type, offset(lb, t, j))
                                                                       : load(pb, lb->type, offset(lb, j, t));
        for (int64_t j = 0; j < n; j++)
            for (int64_t i = 0; i < m; i++) {
                double acc = 0;
                const double *x = a_rows.data() + i * k, *y = b_rows.data() + j * k;
                for (int64_t t = 0; t < k; t++) acc += x[t] * y[t];
                float v = (float)((double)fa * acc);
                if (fb != 0.f) v = v + fb * load(pc, lc->type, offset(lc, i, j));
                if (has_bias(e)) v = v + load(ds->bias, ld->type, i + (int64_t)bt * ds->bias_batch_stride);
                if (has_aux(e)) store(ds->aux, ld->type, offset(&aux_l, i, j) + (int64_t)bt * ds->aux_batch_stride, v);
                if (has_gelu(e)) v = gelu_tanh(v);
                store(pd, ld->type, offset(ld, i, j), v);
            }
    }
    return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
