// CUDA backend: the linear layer on cuBLASLt (loaded at run time, cuda_libs.h). bf16 (or f32)
// inputs, f32 accumulation (CUBLAS_COMPUTE_32F: no TF32), the bias added in the GEMM epilogue;
// GELU-tanh also in the epilogue for bf16 outputs (cuBLASLt's GELU is the tanh form; the exact erf
// GELU, f32 outputs, and the tanh form where cuBLASLt has no algorithm for it run activations.cu's
// kernel on pre). The weight gradient is a GEMM with f32 output and beta = 1: it accumulates into
// the f32 gradient buffer. The bias gradient is a deterministic column sum. For each GEMM shape
// (sizes, dtypes, epilogue, pointer alignments) the descriptors and the heuristic's algorithm are
// made once and cached; with one algorithm per shape the results are the same bits every run. The
// cache is bounded (plan_cache.h): shapes change every step with the packs, so the least recently
// used plan is destroyed when a new shape needs its slot (the heuristic picks the same algorithm
// again if that shape comes back).
//
// Row-major y[N,out] = x[N,in]·wᵀ is computed as the column-major D[out × N] = op(A)·op(B) with A = w
// ([in × out] column-major, transposed) and B = x ([in × N]).
#include <cublasLt.h>
#include <stdio.h>
#include <string.h>

#include "cuda_common.h"
#include "cuda_libs.h"
#include "ops/plan_cache.h"

extern "C" {
#include "core/log.h"
}

#define GEMM_WORKSPACE_BYTES ((size_t)32 << 20)
#define GEMM_PLAN_CAPACITY 256

namespace {

struct LtApi {
    decltype(&cublasLtCreate) Create;
    decltype(&cublasLtMatmulDescCreate) MatmulDescCreate;
    decltype(&cublasLtMatmulDescDestroy) MatmulDescDestroy;
    decltype(&cublasLtMatmulDescSetAttribute) MatmulDescSetAttribute;
    decltype(&cublasLtMatrixLayoutCreate) MatrixLayoutCreate;
    decltype(&cublasLtMatrixLayoutDestroy) MatrixLayoutDestroy;
    decltype(&cublasLtMatmulPreferenceCreate) PreferenceCreate;
    decltype(&cublasLtMatmulPreferenceSetAttribute) PreferenceSetAttribute;
    decltype(&cublasLtMatmulPreferenceDestroy) PreferenceDestroy;
    decltype(&cublasLtMatmulAlgoGetHeuristic) AlgoGetHeuristic;
    decltype(&cublasLtMatmul) Matmul;
    decltype(&cublasLtGetStatusString) GetStatusString;  // optional
};

LtApi lt;
cublasLtHandle_t g_handle;
PlanCache g_plans;  // GemmKey -> GemmPlan (made on the first GEMM)
int g_loaded = -1;  // -1 not tried, 0 failed, 1 ready
char g_load_error[1024];

template <typename F> bool sym(const char *name, F *out) {
    *out = (F)cuda_lib_symbol(CUDA_LIB_CUBLASLT, name);
    if (!*out) snprintf(g_load_error, sizeof g_load_error, "cuBLASLt lacks %s", name);
    return *out != nullptr;
}

const char *status_string(cublasStatus_t s) {
    static char buf[32];
    if (lt.GetStatusString) return lt.GetStatusString(s);
    snprintf(buf, sizeof buf, "cublasStatus %d", (int)s);
    return buf;
}

vfm_status lt_load(void) {
    if (g_loaded == 1) return VFM_OK;
    if (g_loaded == 0) return vfm_fail(VFM_ERR_UNSUPPORTED, "linear on cuda: %s", g_load_error);
    g_loaded = 0;
    if (cuda_lib_open(CUDA_LIB_CUBLASLT) != VFM_OK) {
        snprintf(g_load_error, sizeof g_load_error, "%s", vfm_last_error());
        return vfm_fail(VFM_ERR_UNSUPPORTED, "linear on cuda: %s", g_load_error);
    }
    bool ok = sym("cublasLtCreate", &lt.Create) && sym("cublasLtMatmulDescCreate", &lt.MatmulDescCreate) &&
              sym("cublasLtMatmulDescDestroy", &lt.MatmulDescDestroy) &&
              sym("cublasLtMatmulDescSetAttribute", &lt.MatmulDescSetAttribute) &&
              sym("cublasLtMatrixLayoutCreate", &lt.MatrixLayoutCreate) &&
              sym("cublasLtMatrixLayoutDestroy", &lt.MatrixLayoutDestroy) &&
              sym("cublasLtMatmulPreferenceCreate", &lt.PreferenceCreate) &&
              sym("cublasLtMatmulPreferenceSetAttribute", &lt.PreferenceSetAttribute) &&
              sym("cublasLtMatmulPreferenceDestroy", &lt.PreferenceDestroy) &&
              sym("cublasLtMatmulAlgoGetHeuristic", &lt.AlgoGetHeuristic) && sym("cublasLtMatmul", &lt.Matmul);
    lt.GetStatusString = (decltype(lt.GetStatusString))cuda_lib_symbol(CUDA_LIB_CUBLASLT, "cublasLtGetStatusString");
    if (!ok) return vfm_fail(VFM_ERR_UNSUPPORTED, "linear on cuda: %s", g_load_error);
    cublasStatus_t s = lt.Create(&g_handle);
    if (s != CUBLAS_STATUS_SUCCESS) {
        snprintf(g_load_error, sizeof g_load_error, "cublasLtCreate: %s", status_string(s));
        return vfm_fail(VFM_ERR_UNSUPPORTED, "linear on cuda: %s", g_load_error);
    }
    g_loaded = 1;
    return VFM_OK;
}

// One GEMM shape. Compared with memcmp: always built from a zeroed struct.
struct GemmKey {
    int32_t transa, transb;
    int64_t m, n, k, lda, ldb, ldc;
    int32_t ab_type, c_type, bias_type, epilogue, beta_one;
    uint32_t align_a, align_b, align_c, align_bias, align_aux;
};

struct GemmPlan {
    int ok;  // 0: cuBLASLt has no algorithm for this shape (remembered too)
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulAlgo_t algo;
};

// Frees what a plan owns (descriptors are host objects: a GEMM already queued does not need them).
void plan_destroy(void *value, void *ctx) {
    (void)ctx;
    GemmPlan *p = (GemmPlan *)value;
    if (p->desc) lt.MatmulDescDestroy(p->desc);
    if (p->a) lt.MatrixLayoutDestroy(p->a);
    if (p->b) lt.MatrixLayoutDestroy(p->b);
    if (p->c) lt.MatrixLayoutDestroy(p->c);
    memset(p, 0, sizeof *p);
}

uint32_t alignment(const void *p) {
    uintptr_t v = (uintptr_t)p;
    uint32_t a = 256;
    while (a > 1 && (v & (a - 1))) a >>= 1;
    return a;
}

cudaDataType_t cuda_type(DType t) { return t == DT_BF16 ? CUDA_R_16BF : CUDA_R_32F; }

struct Gemm {
    const char *op;
    const Tensor *desc;  // named in error messages
    cublasOperation_t transa, transb;
    int64_t m, n, k, lda, ldb, ldc;
    DType ab, c;
    const void *A, *B;
    void *C;                // also D
    float beta;
    cublasLtEpilogue_t epilogue;
    const void *bias;
    DType bias_type;
    void *aux;              // GELU_AUX: pre-activation output, ld = ldc
};

// A GEMM without epilogue: column-major C[m × n] = op(A)·op(B) + beta·C.
Gemm plain_gemm(const char *op, const Tensor *desc, cublasOperation_t transa, cublasOperation_t transb, int64_t m,
                int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc, DType ab, DType c, const void *A,
                const void *B, void *C, float beta) {
    Gemm g;
    memset(&g, 0, sizeof g);
    g.op = op, g.desc = desc;
    g.transa = transa, g.transb = transb;
    g.m = m, g.n = n, g.k = k, g.lda = lda, g.ldb = ldb, g.ldc = ldc;
    g.ab = ab, g.c = c;
    g.A = A, g.B = B, g.C = C;
    g.beta = beta;
    g.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    return g;
}

vfm_status gemm_fail(const Gemm &g, const char *what, cublasStatus_t s) {
    char d[128];
    return vfm_fail(VFM_ERR_INTERNAL, "%s (%s): cuBLASLt %s failed for m=%lld n=%lld k=%lld (%s in, %s out, epilogue %d): %s",
                    g.op, tensor_describe(g.desc, d, sizeof d), what, (long long)g.m, (long long)g.n, (long long)g.k,
                    dtype_name(g.ab), dtype_name(g.c), (int)g.epilogue, status_string(s));
}

#define LT_TRY(g, what, call)                                               \
    do {                                                                    \
        cublasStatus_t lt_s_ = (call);                                      \
        if (lt_s_ != CUBLAS_STATUS_SUCCESS) return gemm_fail(g, what, lt_s_); \
    } while (0)

GemmKey make_key(const Gemm &g) {
    GemmKey k;
    memset(&k, 0, sizeof k);
    k.transa = g.transa, k.transb = g.transb;
    k.m = g.m, k.n = g.n, k.k = g.k, k.lda = g.lda, k.ldb = g.ldb, k.ldc = g.ldc;
    k.ab_type = g.ab, k.c_type = g.c, k.bias_type = g.bias ? (int)g.bias_type : -1;
    k.epilogue = (int)g.epilogue, k.beta_one = g.beta != 0.f;
    k.align_a = alignment(g.A), k.align_b = alignment(g.B), k.align_c = alignment(g.C);
    k.align_bias = g.bias ? alignment(g.bias) : 0, k.align_aux = g.aux ? alignment(g.aux) : 0;
    return k;
}

// Builds the descriptors and algorithm of g's shape into p (p->ok = 0 when cuBLASLt has no
// algorithm for it). On an error the caller destroys what was made.
vfm_status gemm_plan_build(const Gemm &g, const GemmKey &key, GemmPlan *p) {
    int32_t ta = g.transa, tb = g.transb, epi = g.epilogue;
    LT_TRY(g, "MatmulDescCreate", lt.MatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    LT_TRY(g, "set TRANSA", lt.MatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    LT_TRY(g, "set TRANSB", lt.MatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    LT_TRY(g, "set EPILOGUE", lt.MatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    if (g.bias) {
        int32_t bt = cuda_type(g.bias_type);
        LT_TRY(g, "set BIAS_DATA_TYPE", lt.MatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt));
        LT_TRY(g, "set BIAS_POINTER", lt.MatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias, sizeof g.bias));
    }
    if (g.aux) {
        int64_t ld = g.ldc;
        LT_TRY(g, "set EPILOGUE_AUX_LD", lt.MatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld));
        LT_TRY(g, "set EPILOGUE_AUX_POINTER",
               lt.MatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &g.aux, sizeof g.aux));
    }
    // stored shapes (column-major): A is [k × m] when transposed, else [m × k]; likewise B.
    int64_t a_rows = g.transa == CUBLAS_OP_N ? g.m : g.k, a_cols = g.transa == CUBLAS_OP_N ? g.k : g.m;
    int64_t b_rows = g.transb == CUBLAS_OP_N ? g.k : g.n, b_cols = g.transb == CUBLAS_OP_N ? g.n : g.k;
    LT_TRY(g, "MatrixLayoutCreate A", lt.MatrixLayoutCreate(&p->a, cuda_type(g.ab), a_rows, a_cols, g.lda));
    LT_TRY(g, "MatrixLayoutCreate B", lt.MatrixLayoutCreate(&p->b, cuda_type(g.ab), b_rows, b_cols, g.ldb));
    LT_TRY(g, "MatrixLayoutCreate C", lt.MatrixLayoutCreate(&p->c, cuda_type(g.c), g.m, g.n, g.ldc));
    cublasLtMatmulPreference_t pref;
    LT_TRY(g, "PreferenceCreate", lt.PreferenceCreate(&pref));
    uint64_t ws = GEMM_WORKSPACE_BYTES;
    cublasStatus_t s = lt.PreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    const cublasLtMatmulPreferenceAttributes_t align_attr[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    const uint32_t align_val[4] = {key.align_a, key.align_b, key.align_c, key.align_c};
    for (int i = 0; i < 4 && s == CUBLAS_STATUS_SUCCESS; i++)
        s = lt.PreferenceSetAttribute(pref, align_attr[i], &align_val[i], sizeof align_val[i]);
    // split-K: no reduction in place in the output buffer (its order rests on counters and the
    // scheduling); the parts are summed through the workspace in a separate pass, in a fixed order
    // (determinism, ops.h)
    const uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_MASK & ~(uint32_t)CUBLASLT_REDUCTION_SCHEME_INPLACE;
    if (s == CUBLAS_STATUS_SUCCESS)
        s = lt.PreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes, sizeof schemes);
    cublasLtMatmulHeuristicResult_t result;
    int returned = 0;
    if (s == CUBLAS_STATUS_SUCCESS)
        s = lt.AlgoGetHeuristic(g_handle, p->desc, p->a, p->b, p->c, p->c, pref, 1, &result, &returned);
    lt.PreferenceDestroy(pref);
    if (s != CUBLAS_STATUS_SUCCESS && s != CUBLAS_STATUS_NOT_SUPPORTED) return gemm_fail(g, "AlgoGetHeuristic", s);
    p->ok = s == CUBLAS_STATUS_SUCCESS && returned > 0 && result.state == CUBLAS_STATUS_SUCCESS;
    if (p->ok) p->algo = result.algo;
    return VFM_OK;
}

// The cached plan of g's shape, built on first use; *found = 0 when cuBLASLt has no algorithm.
vfm_status gemm_plan(const Gemm &g, GemmPlan **out, int *found) {
    if (!g_plans.capacity)
        VFM_TRY(plan_cache_init(&g_plans, GEMM_PLAN_CAPACITY, sizeof(GemmKey), sizeof(GemmPlan), plan_destroy, NULL));
    GemmKey key = make_key(g);
    GemmPlan *p = (GemmPlan *)plan_cache_find(&g_plans, &key);
    if (!p) {
        GemmPlan fresh;
        memset(&fresh, 0, sizeof fresh);
        vfm_status s = gemm_plan_build(g, key, &fresh);
        if (s != VFM_OK) {
            plan_destroy(&fresh, NULL);
            return s;
        }
        p = (GemmPlan *)plan_cache_insert(&g_plans, &key);  // may destroy the least recently used plan
        *p = fresh;
    }
    *out = p;
    *found = p->ok;
    return VFM_OK;
}

// Runs g; *ran = 0 (and nothing runs) when cuBLASLt has no algorithm for it and may_decline.
vfm_status gemm_run(const Gemm &g, int may_decline, int *ran) {
    VFM_TRY(lt_load());
    GemmPlan *p = NULL;
    int found = 0;
    VFM_TRY(gemm_plan(g, &p, &found));
    if (ran) *ran = found;
    if (!found) {
        if (may_decline) return VFM_OK;
        return gemm_fail(g, "AlgoGetHeuristic (no algorithm)", CUBLAS_STATUS_NOT_SUPPORTED);
    }
    if (g.bias)
        LT_TRY(g, "set BIAS_POINTER", lt.MatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias, sizeof g.bias));
    if (g.aux)
        LT_TRY(g, "set EPILOGUE_AUX_POINTER",
               lt.MatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &g.aux, sizeof g.aux));
    void *ws = NULL;
    VFM_TRY(cuda_scratch(SCRATCH_GEMM, GEMM_WORKSPACE_BYTES, &ws));
    float alpha = 1.f, beta = g.beta;
    LT_TRY(g, "Matmul", lt.Matmul(g_handle, p->desc, &alpha, g.A, p->a, g.B, p->b, &beta, g.C, p->c, g.C, p->c, &p->algo, ws,
                                  GEMM_WORKSPACE_BYTES, cuda_stream()));
    return cuda_check_launch(g.op, g.desc);  // VFM_CUDA_SYNC=1: a fault inside the GEMM is named here
}

// db[out] += Σ_rows dy[N,out]
template <typename T> struct BiasTerms {
    const T *dy;
    int64_t out;
    __device__ void operator()(int64_t r, int64_t c, float *t) const { t[0] = to_f32(dy[r * out + c]); }
};

}  // namespace

extern "C" vfm_status cuda_linear_forward(Tensor *y, Tensor *pre, const Tensor *x, const Tensor *w, const Tensor *b,
                                          Activation act) {
    const char *op = "linear_forward";
    int64_t n = tensor_rows(x), in = tensor_dim(x, -1), out = tensor_dim(w, 0);
    if (n == 0 || out == 0) return VFM_OK;
    if (in == 0) return vfm_fail(VFM_ERR_UNSUPPORTED, "%s: x has no columns (in = 0) on cuda", op);
    Gemm g = plain_gemm(op, x, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, in, in, out, x->dtype, x->dtype, w->data, x->data,
                        NULL, 0.f);
#if VFM_HARNESS_BREAK == BREAK_GEMM_LD  // the must-fail build: w's leading dimension one too large (cuda_launch.h)
    g.lda = in + 1;
#endif
    g.bias = b ? b->data : NULL;
    g.bias_type = b ? b->dtype : x->dtype;
    // cuBLASLt's GELU (tanh form, possibly a fast tanh: bf16 outputs only) writes y, pre goes to aux
    if (act == ACT_GELU_TANH && x->dtype == DT_BF16 && out % 8 == 0) {
        g.C = y->data;
        g.aux = pre->data;
        g.epilogue = b ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
        int ran = 0;
        VFM_TRY(gemm_run(g, 1, &ran));
        if (ran) return VFM_OK;
        static int logged;
        if (!logged++) log_info("linear_forward: cuBLASLt has no GELU-epilogue algorithm for [%lld,%lld]x[%lld,%lld]ᵀ; "
                                "using a separate GELU kernel", (long long)n, (long long)in, (long long)out, (long long)in);
        g.aux = NULL;
    }
    // the GEMM writes the pre-activation: straight into y when there is no activation
    g.C = act == ACT_NONE ? y->data : pre->data;
    g.epilogue = b ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    VFM_TRY(gemm_run(g, 0, NULL));
    if (act != ACT_NONE) return cuda_gelu_forward(y, pre, act);
    if (pre) CUDA_TRY(op, x, cudaMemcpyAsync(pre->data, y->data, tensor_bytes(y), cudaMemcpyDeviceToDevice, cuda_stream()));
    return VFM_OK;
}

extern "C" vfm_status cuda_linear_backward(Tensor *dx, Tensor *dw, Tensor *db, Tensor *dy, const Tensor *x,
                                           const Tensor *w, const Tensor *pre, Activation act, int dx_accumulate) {
    const char *op = "linear_backward";
    int64_t n = tensor_rows(x), in = tensor_dim(x, -1), out = tensor_dim(w, 0);
    if (act != ACT_NONE) VFM_TRY(cuda_gelu_backward(dy, dy, pre, act));  // dy becomes dpre
    if (n == 0 || out == 0) return VFM_OK;
    if (dx && in > 0)  // dx[N,in] = dpre[N,out]·w[out,in]: column-major [in × N] = w[in × out]·dpre[out × N]
        VFM_TRY(gemm_run(plain_gemm(op, dx, CUBLAS_OP_N, CUBLAS_OP_N, in, n, out, in, out, in, x->dtype, dx->dtype,
                                    w->data, dy->data, dx->data, dx_accumulate ? 1.f : 0.f),
                         0, NULL));
    if (dw && in > 0)  // dw[out,in] += dpreᵀ·x: column-major [in × out] += x[in × N]·dpre[out × N]ᵀ
        VFM_TRY(gemm_run(plain_gemm(op, dw, CUBLAS_OP_N, CUBLAS_OP_T, in, out, n, in, out, in, x->dtype, dw->dtype,
                                    x->data, dy->data, dw->data, 1.f),
                         0, NULL));
    if (db) {
        if (db->dtype != DT_F32) return cuda_bad_dtype(op, "db", db);
        FLOAT_DISPATCH(op, "dy", dy, T, {
            BiasTerms<T> terms = {(const T *)dy->data, out};
            VFM_TRY((column_sums<1, BiasTerms<T>, float>(op, dy, terms, n, (const int32_t *)NULL, 1, out,
                                                          (float *)db->data, (float *)NULL)));
        });
    }
    return cuda_check_launch(op, x);
}
