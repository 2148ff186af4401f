// The library stand-ins' own tests (names harness_*): the cuBLASLt stand-in gives the documented
// product whatever the storage (transposes, column or row order, padded leading dimensions,
// batches, beta, the bias/GELU/aux epilogue), and refuses or faults on a leading dimension that is
// too small or runs past its buffer, a pointer less aligned than the heuristic was told, and an
// algorithm chosen for another problem; the cuDNN stand-in reads ragged offsets in elements, so a
// sample's result is the same alone or packed after another, and offsets in bytes run past the
// buffers and fault. linear.cu and attention.cu go through the same stand-ins in the cuda_* tests.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/cuda/cudnn_attention.h"
extern "C" {
#include "../unit/test.h"
}

namespace {

void *device_copy(const void *host, size_t bytes) {
    void *d = NULL;
    if (cudaMalloc(&d, bytes) != cudaSuccess) return NULL;
    cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice);
    return d;
}

// A logical rows×cols matrix stored as cuBLASLt reads it: column order (i + j·ld) or row order
// (i·ld + j), ld = the minimum plus pad.
struct Stored {
    float *h;
    int64_t ld;
    int order;
};

Stored store(const float *logical, int rows, int cols, int order, int pad) {
    Stored s;
    s.order = order;
    s.ld = (order == CUBLASLT_ORDER_ROW ? cols : rows) + pad;
    size_t n = (size_t)s.ld * (order == CUBLASLT_ORDER_ROW ? rows : cols);
    s.h = (float *)calloc(n, sizeof(float));
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++)
            s.h[order == CUBLASLT_ORDER_ROW ? i * s.ld + j : i + j * s.ld] = logical[i * cols + j];
    return s;
}

size_t stored_count(const Stored &s, int rows, int cols) {
    return (size_t)s.ld * (s.order == CUBLASLT_ORDER_ROW ? rows : cols);
}

cublasLtMatrixLayout_t layout(cudaDataType t, int rows, int cols, const Stored &s) {
    cublasLtMatrixLayout_t l = NULL;
    cublasLtMatrixLayoutCreate(&l, t, (uint64_t)rows, (uint64_t)cols, s.ld);
    int32_t order = s.order;
    cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_ORDER, &order, sizeof order);
    return l;
}

// A [2×3], B [3×2], A·B
const float kA[6] = {1, 2, 3, 4, 5, 6}, kB[6] = {7, 8, 9, 10, 11, 12}, kAB[4] = {58, 64, 139, 154};

// D = op(A)·op(B) (+ C) for the storage given; returns the status and D (logical, row by row).
cublasStatus_t gemm_f32(int ta, int tb, int order, int pad, float beta, float *d_out) {
    float at[6], bt[6];  // the transposes, for storage as op(X)ᵀ
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++) at[j * 2 + i] = kA[i * 3 + j], bt[i * 3 + j] = kB[j * 2 + i];
    Stored A = ta ? store(at, 3, 2, order, pad) : store(kA, 2, 3, order, pad);
    Stored B = tb ? store(bt, 2, 3, order, pad) : store(kB, 3, 2, order, pad);
    const float ones[4] = {1, 1, 1, 1};
    Stored D = store(ones, 2, 2, order, pad);
    void *dA = device_copy(A.h, stored_count(A, ta ? 3 : 2, ta ? 2 : 3) * 4);
    void *dB = device_copy(B.h, stored_count(B, tb ? 2 : 3, tb ? 3 : 2) * 4);
    void *dD = device_copy(D.h, stored_count(D, 2, 2) * 4);
    cublasLtHandle_t h;
    cublasLtCreate(&h);
    cublasLtMatmulDesc_t desc;
    cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    int32_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb);
    cublasLtMatrixLayout_t la = layout(CUDA_R_32F, ta ? 3 : 2, ta ? 2 : 3, A), lb = layout(CUDA_R_32F, tb ? 2 : 3, tb ? 3 : 2, B);
    cublasLtMatrixLayout_t ld = layout(CUDA_R_32F, 2, 2, D);
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulPreferenceCreate(&pref);
    cublasLtMatmulHeuristicResult_t r;
    int n = 0;
    cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, ld, ld, pref, 1, &r, &n);
    float alpha = 1.f;
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmul(h, desc, &alpha, dA, la, dB, lb, &beta, dD, ld, dD, ld, &r.algo, NULL, 0, NULL);
    if (s == CUBLAS_STATUS_SUCCESS) {
        cudaMemcpy(D.h, dD, stored_count(D, 2, 2) * 4, cudaMemcpyDeviceToHost);
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 2; j++) d_out[i * 2 + j] = D.h[order == CUBLASLT_ORDER_ROW ? i * D.ld + j : i + j * D.ld];
    }
    cublasLtMatrixLayoutDestroy(la), cublasLtMatrixLayoutDestroy(lb), cublasLtMatrixLayoutDestroy(ld);
    cublasLtMatmulPreferenceDestroy(pref), cublasLtMatmulDescDestroy(desc), cublasLtDestroy(h);
    cudaFree(dA), cudaFree(dB), cudaFree(dD);
    free(A.h), free(B.h), free(D.h);
    return s;
}

float gelu_tanh(float x) { return 0.5f * x * (1.f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x))); }
float bf(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

// Everything a column-major f32 GEMM of A [m×k] (ld m) and B [k×n] (ld k) needs, on the device.
struct Plain {
    cublasLtHandle_t h;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulPreference_t pref;
};

Plain plain(int m, int n, int k, int64_t lda) {
    Plain p;
    cublasLtCreate(&p.h);
    cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    cublasLtMatrixLayoutCreate(&p.la, CUDA_R_32F, m, k, lda);
    cublasLtMatrixLayoutCreate(&p.lb, CUDA_R_32F, k, n, k);
    cublasLtMatrixLayoutCreate(&p.lc, CUDA_R_32F, m, n, m);
    cublasLtMatmulPreferenceCreate(&p.pref);
    return p;
}

// The cuDNN stand-in's forward on sample rows of H = 2 heads, Hkv = 1, hd = 8.
const int kH = 2, kHkv = 1, kHd = 8;

struct AttnBuffers {
    void *q, *k, *v, *o;
    float *lse;
    int32_t *seq_q, *seq_kv;
    int64_t *off_q, *off_kv, *off_lse;
};

// B samples of lengths len (self-attention) packed from row row0 of the host rows; offsets scaled by
// unit (1: elements, as the contract says; 2: bytes of bf16).
vfm_status attention_forward(const __nv_bfloat16 *qkv_host, int rows, int row0, const int *len, int B, int unit,
                             __nv_bfloat16 *o_host) {
    AttnBuffers d;
    size_t qn = (size_t)rows * kH * kHd, kn = (size_t)rows * kHkv * kHd;
    d.q = device_copy(qkv_host + (size_t)row0 * kH * kHd, qn * 2);
    d.k = device_copy(qkv_host + qn + (size_t)row0 * kHkv * kHd, kn * 2);
    d.v = device_copy(qkv_host + qn + kn + (size_t)row0 * kHkv * kHd, kn * 2);
    cudaMalloc(&d.o, qn * 2);
    cudaMalloc((void **)&d.lse, (size_t)rows * kH * 4);
    int32_t sq[4], skv[4];
    int64_t oq[5], okv[5], ol[5];
    oq[0] = okv[0] = ol[0] = 0;
    for (int b = 0; b < B; b++) {
        sq[b] = skv[b] = len[b];
        oq[b + 1] = oq[b] + (int64_t)len[b] * kH * kHd * unit;
        okv[b + 1] = okv[b] + (int64_t)len[b] * kHkv * kHd * unit;
        ol[b + 1] = ol[b] + (int64_t)len[b] * kH * unit;
    }
    d.seq_q = (int32_t *)device_copy(sq, sizeof sq), d.seq_kv = (int32_t *)device_copy(skv, sizeof skv);
    d.off_q = (int64_t *)device_copy(oq, sizeof oq), d.off_kv = (int64_t *)device_copy(okv, sizeof okv);
    d.off_lse = (int64_t *)device_copy(ol, sizeof ol);
    CudnnAttnArgs a;
    memset(&a, 0, sizeof a);
    a.B = B, a.H = kH, a.Hkv = kHkv, a.hd = kHd, a.Sq = a.Skv = 64, a.scale = 1.f / sqrtf((float)kHd);
    a.q = d.q, a.k = d.k, a.v = d.v, a.o = d.o, a.lse = d.lse;
    a.seq_q = d.seq_q, a.seq_kv = d.seq_kv, a.off_q = d.off_q, a.off_kv = d.off_kv, a.off_lse = d.off_lse;
    size_t ws = 0;
    vfm_status s = cudnn_attention_prepare(&a, &ws);
    if (s == VFM_OK) s = cudnn_attention_run(&a, NULL);
    if (s == VFM_OK) cudaMemcpy(o_host, d.o, qn * 2, cudaMemcpyDeviceToHost);
    return s;
}

}  // namespace

TEST(harness_cublaslt_standin_gives_the_documented_product_for_every_storage) {
    for (int order = CUBLASLT_ORDER_COL; order <= CUBLASLT_ORDER_ROW; order++)
        for (int pad = 0; pad <= 3; pad += 3)
            for (int ta = 0; ta < 2; ta++)
                for (int tb = 0; tb < 2; tb++)
                    for (int acc = 0; acc < 2; acc++) {
                        float d[4];
                        cublasStatus_t s = gemm_f32(ta, tb, order, pad, acc ? 1.f : 0.f, d);
                        CHECK_MSG(s == CUBLAS_STATUS_SUCCESS, "order %d pad %d ta %d tb %d: %s", order, pad, ta, tb,
                                  cublasLtGetStatusString(s));
                        if (s != CUBLAS_STATUS_SUCCESS) continue;
                        for (int e = 0; e < 4; e++)
                            CHECK_MSG(d[e] == kAB[e] + (float)acc, "order %d pad %d ta %d tb %d beta %d: D[%d] = %g", order,
                                      pad, ta, tb, acc, e, d[e]);
                    }
}

TEST(harness_cublaslt_standin_bias_gelu_aux_epilogue_and_batches) {
    // bf16, two batches: D_b = gelu(A_b·B_b + bias_b), aux_b = A_b·B_b + bias_b (column order)
    const int m = 3, n = 2, k = 2, batch = 2;
    float A[batch][m * k], B[batch][k * n], bias[batch][m];
    for (int b = 0; b < batch; b++) {
        for (int i = 0; i < m * k; i++) A[b][i] = bf(0.25f * (float)(i + 1) * (b ? -1.f : 1.f));
        for (int i = 0; i < k * n; i++) B[b][i] = bf(0.5f - 0.3f * (float)i);
        for (int i = 0; i < m; i++) bias[b][i] = bf(0.1f * (float)(i - 1) + (float)b);
    }
    __nv_bfloat16 hA[batch * m * k], hB[batch * k * n], hbias[batch * m];
    for (int b = 0; b < batch; b++) {
        for (int i = 0; i < m; i++)
            for (int l = 0; l < k; l++) hA[b * m * k + i + l * m] = __float2bfloat16_rn(A[b][i * k + l]);
        for (int l = 0; l < k; l++)
            for (int j = 0; j < n; j++) hB[b * k * n + l + j * k] = __float2bfloat16_rn(B[b][l * n + j]);
        for (int i = 0; i < m; i++) hbias[b * m + i] = __float2bfloat16_rn(bias[b][i]);
    }
    const int64_t aux_ld = 8;  // at least m, divisible by 8
    void *dA = device_copy(hA, sizeof hA), *dB = device_copy(hB, sizeof hB), *dbias = device_copy(hbias, sizeof hbias);
    void *dD = NULL, *daux = NULL;
    cudaMalloc(&dD, batch * m * n * 2);
    cudaMalloc(&daux, batch * aux_ld * n * 2);
    cublasLtHandle_t h;
    cublasLtCreate(&h);
    cublasLtMatmulDesc_t desc;
    cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    uint32_t epi = CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    int64_t bias_stride = m, aux_stride = aux_ld * n;
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &dbias, sizeof dbias);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, &bias_stride, sizeof bias_stride);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &daux, sizeof daux);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, &aux_stride, sizeof aux_stride);
    cublasLtMatrixLayout_t l[3];
    const int rows[3] = {m, k, m}, cols[3] = {k, n, n};
    for (int i = 0; i < 3; i++) {
        cublasLtMatrixLayoutCreate(&l[i], CUDA_R_16BF, rows[i], cols[i], rows[i]);
        int32_t count = batch;
        int64_t stride = (int64_t)rows[i] * cols[i];
        cublasLtMatrixLayoutSetAttribute(l[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count);
        cublasLtMatrixLayoutSetAttribute(l[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride);
    }
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulPreferenceCreate(&pref);
    cublasLtMatmulHeuristicResult_t r;
    int got = 0;
    REQUIRE(cublasLtMatmulAlgoGetHeuristic(h, desc, l[0], l[1], l[2], l[2], pref, 1, &r, &got) == CUBLAS_STATUS_SUCCESS);
    float alpha = 1.f, beta = 0.f;
    cublasStatus_t s = cublasLtMatmul(h, desc, &alpha, dA, l[0], dB, l[1], &beta, dD, l[2], dD, l[2], &r.algo, NULL, 0, NULL);
    CHECK_MSG(s == CUBLAS_STATUS_SUCCESS, "%s", cublasLtGetStatusString(s));
    __nv_bfloat16 hD[batch * m * n], haux[batch * aux_ld * n];
    cudaMemcpy(hD, dD, sizeof hD, cudaMemcpyDeviceToHost);
    cudaMemcpy(haux, daux, sizeof haux, cudaMemcpyDeviceToHost);
    for (int b = 0; b < batch; b++)
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++) {
                float pre = 0;
                for (int t = 0; t < k; t++) pre += A[b][i * k + t] * B[b][t * n + j];
                pre += bias[b][i];
                float aux = __bfloat162float(haux[b * aux_stride + i + j * aux_ld]);
                float dv = __bfloat162float(hD[b * m * n + i + j * m]);
                CHECK_MSG(fabsf(aux - pre) <= 1e-2f * (1 + fabsf(pre)), "batch %d (%d,%d): aux %g, pre %g", b, i, j, aux, pre);
                CHECK_MSG(fabsf(dv - gelu_tanh(pre)) <= 1e-2f * (1 + fabsf(pre)), "batch %d (%d,%d): D %g, gelu %g", b, i,
                          j, dv, gelu_tanh(pre));
            }
}

TEST(harness_cublaslt_standin_refuses_a_wrong_leading_dimension) {
    // ld below the rows: refused when the heuristic looks at it
    Plain p = plain(4, 2, 3, 3);
    cublasLtMatmulHeuristicResult_t r;
    int n = 0;
    cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(p.h, p.desc, p.la, p.lb, p.lc, p.lc, p.pref, 1, &r, &n);
    CHECK(s == CUBLAS_STATUS_INVALID_VALUE);
    CHECK_MSG(strstr(cublasLtGetStatusString(s), "leading dimension 3 < rows 4"), "%s", cublasLtGetStatusString(s));
    // a legal ld (rows + 4) on a buffer holding the matrix packed (ld = rows): runs past it, a fault
    Plain q = plain(4, 2, 3, 8);
    float host[64] = {0};
    void *a = device_copy(host, 4 * 3 * 4), *b = device_copy(host, 3 * 2 * 4), *c = device_copy(host, 4 * 2 * 4);
    REQUIRE(cublasLtMatmulAlgoGetHeuristic(q.h, q.desc, q.la, q.lb, q.lc, q.lc, q.pref, 1, &r, &n) == CUBLAS_STATUS_SUCCESS);
    float alpha = 1, beta = 0;
    s = cublasLtMatmul(q.h, q.desc, &alpha, a, q.la, b, q.lb, &beta, c, q.lc, c, q.lc, &r.algo, NULL, 0, NULL);
    CHECK(s == CUBLAS_STATUS_EXECUTION_FAILED);
    CHECK_MSG(strstr(cudaGetErrorString(cudaGetLastError()), "A spans 80 bytes"), "no fault for A");
}

TEST(harness_cublaslt_standin_refuses_misaligned_pointers_and_a_foreign_algorithm) {
    Plain p = plain(4, 2, 3, 4);
    float host[64] = {0};
    char *a = (char *)device_copy(host, 4 * 3 * 4 + 16);
    void *b = device_copy(host, 3 * 2 * 4), *c = device_copy(host, 4 * 2 * 4);
    cublasLtMatmulHeuristicResult_t r;
    int n = 0;
    REQUIRE(cublasLtMatmulAlgoGetHeuristic(p.h, p.desc, p.la, p.lb, p.lc, p.lc, p.pref, 1, &r, &n) == CUBLAS_STATUS_SUCCESS);
    float alpha = 1, beta = 0;
    // the preference's default: 256-byte aligned operands
    cublasStatus_t s = cublasLtMatmul(p.h, p.desc, &alpha, a + 4, p.la, b, p.lb, &beta, c, p.lc, c, p.lc, &r.algo, NULL, 0, NULL);
    CHECK_MSG(s == CUBLAS_STATUS_INVALID_VALUE && strstr(cublasLtGetStatusString(s), "4-byte aligned"), "%s",
              cublasLtGetStatusString(s));
    // the algorithm of a 4×2×3 problem on a 4×2×2 one
    Plain other = plain(4, 2, 2, 4);
    s = cublasLtMatmul(other.h, other.desc, &alpha, a, other.la, b, other.lb, &beta, c, other.lc, c, other.lc, &r.algo,
                       NULL, 0, NULL);
    CHECK_MSG(s == CUBLAS_STATUS_INVALID_VALUE && strstr(cublasLtGetStatusString(s), "another problem"), "%s",
              cublasLtGetStatusString(s));
}

TEST(harness_cudnn_standin_reads_ragged_offsets_in_elements) {
    const int len[2] = {3, 2}, rows = 5;
    size_t qn = (size_t)rows * kH * kHd, kn = (size_t)rows * kHkv * kHd;
    __nv_bfloat16 *qkv = (__nv_bfloat16 *)malloc((qn + 2 * kn) * 2);
    float *u = (float *)malloc((qn + 2 * kn) * sizeof(float));
    REQUIRE(qkv && u);
    test_fill_uniform_f32(u, (int64_t)(qn + 2 * kn), 5, -1, 1);
    for (size_t i = 0; i < qn + 2 * kn; i++) qkv[i] = __float2bfloat16_rn(u[i]);
    // the qkv_host layout of attention_forward: q rows, then k rows, then v rows
    __nv_bfloat16 packed[5 * kH * kHd], alone[5 * kH * kHd];
    REQUIRE_OK(attention_forward(qkv, rows, 0, len, 2, 1, packed));
    // sample 1 alone (its q, k and v rows, as attention_forward takes them): the same bits as packed
    __nv_bfloat16 *qkv1 = (__nv_bfloat16 *)malloc((qn + 2 * kn) * 2);
    REQUIRE(qkv1);
    memcpy(qkv1, qkv + 3 * kH * kHd, 2 * kH * kHd * 2);
    memcpy(qkv1 + 2 * kH * kHd, qkv + qn + 3 * kHkv * kHd, 2 * kHkv * kHd * 2);
    memcpy(qkv1 + 2 * kH * kHd + 2 * kHkv * kHd, qkv + qn + kn + 3 * kHkv * kHd, 2 * kHkv * kHd * 2);
    const int len1[1] = {2};
    REQUIRE_OK(attention_forward(qkv1, 2, 0, len1, 1, 1, alone));
    CHECK_MSG(memcmp(alone, packed + 3 * kH * kHd, 2 * kH * kHd * 2) == 0,
              "sample 1 packed after sample 0 differs from sample 1 alone");
    // offsets in bytes: sample 1's rows lie past the buffers
    CHECK(attention_forward(qkv, rows, 0, len, 2, 2, packed) != VFM_OK);
    CHECK_MSG(strstr(cudaGetErrorString(cudaGetLastError()), "ragged offset 96 elements"), "no fault for the byte offsets");
    free(qkv), free(u), free(qkv1);
}
