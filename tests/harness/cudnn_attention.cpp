// The CPU harness's cuDNN attention: the C API of src/ops/cuda/cudnn_attention.h, taking the
// arguments attention.cu hands the real wrapper (CudnnAttnArgs) with the meaning the wrapper gives
// them in the cudnn-frontend graph it builds (cudnn_attention.cpp, research/cudnn-attention.md):
//
//   Q, O, dO, dQ: [B, H, Sq, hd] with strides [·, hd, H·hd, 1], sample b starting at off_q[b]
//   K, V, dK, dV: [B, Hkv, Skv, hd] likewise from off_kv[b]; query head h reads kv head h / (H/Hkv)
//   Stats (lse): [B, H, Sq, 1] with strides [·, 1, H, 1] from off_lse[b]: the natural-log LSE of
//                the scaled scores; an output of the forward, an input of the backward
//   padding mask: sample b has seq_q[b] query rows and seq_kv[b] keys (≤ the graph's Sq, Skv)
//   scale: the attention scale; offsets in elements; the backward takes Q, K, V, O, dO, Stats
//
// and computes SDPA as documented: o = softmax(scale·q·kᵀ)·v over the sample's keys, Stats =
// max + log Σ exp, and the backward's dQ = scale·dS·K, dK = scale·dSᵀ·Q, dV = Pᵀ·dO with
// P = exp(scale·q·kᵀ − Stats), dS = P∘(dO·vᵀ − rowsum(dO∘O)); f32 arithmetic (double sums),
// bf16 storage. Only real rows are written. What is checked: the graph was prepared for these
// sizes; the shape is one cuDNN takes (bf16; head dim a multiple of 8, at most 256; H a multiple
// of Hkv); lengths within the graph's bound; every row read or written inside its device buffer
// (else a fault, as the GPU would fault); every pointer 16-byte aligned, the alignment the
// frontend declares for each tensor (Tensor_attributes::default_alignment); a sample with queries but no keys, which cuDNN leaves
// undefined, gets NaN (attention.cu must never hand one over). The frontend's own graph
// construction, cuDNN's kernels and their speed are not modelled: only a GPU runs those.
#include <cuda_bf16.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "ops/cuda/cudnn_attention.h"
#include "runtime.h"

namespace {

struct Key {
    int backward, B, H, Hkv, hd, Sq, Skv;
    bool operator==(const Key &o) const { return memcmp(this, &o, sizeof o) == 0; }
};
std::vector<Key> g_prepared;

Key key_of(const CudnnAttnArgs *a) { return Key{a->backward ? 1 : 0, a->B, a->H, a->Hkv, a->hd, a->Sq, a->Skv}; }

typedef __nv_bfloat16 bf16;

// [p, p + elems) of a device buffer, or a fault naming what.
bool inside(const char *what, int b, const void *p, int64_t first, int64_t elems, size_t elem_size) {
    if (elems <= 0) return true;
    if (first < 0) {
        runtime_kernel_fault("cuDNN attention: %s of sample %d starts at element %lld", what, b, (long long)first);
        return false;
    }
    size_t have = runtime_device_extent(p), need = (size_t)(first + elems) * elem_size;
    if (have >= need) return true;
    runtime_kernel_fault("cuDNN attention: %s of sample %d reaches byte %zu of a device buffer of %zu bytes (ragged "
                         "offset %lld elements)", what, b, need, have, (long long)first);
    return false;
}

// One sample's rows, checked: ragged offset off, rows rows of heads·hd elements.
bool rows_inside(const char *what, int b, const void *p, int64_t off, int rows, int heads, int hd) {
    return inside(what, b, p, off, (int64_t)(rows > 0 ? rows : 0) * heads * hd, sizeof(bf16));
}

float ld(const void *p, int64_t at) { return __bfloat162float(((const bf16 *)p)[at]); }

}  // namespace

extern "C" vfm_status cudnn_attention_prepare(CudnnAttnArgs *a, size_t *workspace_bytes) {
    *workspace_bytes = 0;
    a->implementation = "stand-in (the CPU harness)";
    const char *why = NULL;
    if (a->B < 1 || a->H < 1 || a->Hkv < 1 || a->Sq < 1 || a->Skv < 1) why = "empty sizes";
    else if (a->H % a->Hkv) why = "H is not a multiple of Hkv";
    else if (a->hd % 8 || a->hd > 256) why = "head dim not a multiple of 8 or above 256";
    if (why)
        return vfm_fail(VFM_ERR_UNSUPPORTED, "cuDNN attention (stand-in) declines B=%d H=%d Hkv=%d hd=%d Sq<=%d Skv<=%d: %s",
                        a->B, a->H, a->Hkv, a->hd, a->Sq, a->Skv, why);
    Key k = key_of(a);
    for (const Key &p : g_prepared)
        if (p == k) return VFM_OK;
    g_prepared.push_back(k);
    return VFM_OK;
}

extern "C" vfm_status cudnn_attention_run(const CudnnAttnArgs *a, void *workspace) {
    (void)workspace;
    Key k = key_of(a);
    bool prepared = false;
    for (const Key &p : g_prepared) prepared = prepared || p == k;
    if (!prepared) return vfm_fail(VFM_ERR_INTERNAL, "cuDNN attention (stand-in): this shape was not prepared");
    if (!runtime_stream_ok((cudaStream_t)a->stream, "cuDNN attention"))
        return vfm_fail(VFM_ERR_INTERNAL, "cuDNN attention (stand-in): unknown stream %p", a->stream);
    const void *ptr[] = {a->q, a->k, a->v, a->o, a->lse, a->seq_q, a->seq_kv, a->off_q, a->off_kv, a->off_lse,
                         a->dout, a->dq, a->dk, a->dv};
    const char *name[] = {"Q", "K", "V", "O", "Stats", "seq_q", "seq_kv", "off_q", "off_kv", "off_lse",
                          "dO", "dQ", "dK", "dV"};
    for (int i = 0; i < (a->backward ? 14 : 10); i++)
        if ((uintptr_t)ptr[i] & 15) {
            runtime_kernel_fault("cuDNN attention: %s at %p is not 16-byte aligned (the graph declares 16)", name[i],
                                 ptr[i]);
            return vfm_fail(VFM_ERR_INTERNAL, "cuDNN attention (stand-in): %s is misaligned (see the fault)", name[i]);
        }
    int B = a->B, H = a->H, Hkv = a->Hkv, hd = a->hd, group = H / Hkv;
    if (!inside("seq_q", 0, a->seq_q, 0, B, 4) || !inside("seq_kv", 0, a->seq_kv, 0, B, 4) ||
        !inside("off_q", 0, a->off_q, 0, B + 1, 8) || !inside("off_kv", 0, a->off_kv, 0, B + 1, 8) ||
        !inside("off_lse", 0, a->off_lse, 0, B + 1, 8))
        return vfm_fail(VFM_ERR_INTERNAL, "cuDNN attention (stand-in): a length or offset array is not device memory");
    std::vector<double> s, p, dp;
    for (int b = 0; b < B; b++) {
        int nq = a->seq_q[b], nk = a->seq_kv[b];
        if (nq < 0 || nq > a->Sq || nk < 0 || nk > a->Skv)
            return vfm_fail(VFM_ERR_INTERNAL,
                            "cuDNN attention (stand-in): sample %d has %d queries and %d keys, the graph at most %d "
                            "and %d", b, nq, nk, a->Sq, a->Skv);
        if (nq == 0) continue;
        int64_t oq = a->off_q[b], okv = a->off_kv[b], ol = a->off_lse[b];
        bool ok = rows_inside("Q", b, a->q, oq, nq, H, hd) && rows_inside("K", b, a->k, okv, nk, Hkv, hd) &&
                  rows_inside("V", b, a->v, okv, nk, Hkv, hd) && rows_inside("O", b, a->o, oq, nq, H, hd) &&
                  inside("Stats", b, a->lse, ol, (int64_t)nq * H, sizeof(float));
        if (ok && a->backward)
            ok = rows_inside("dO", b, a->dout, oq, nq, H, hd) && rows_inside("dQ", b, a->dq, oq, nq, H, hd) &&
                 rows_inside("dK", b, a->dk, okv, nk, Hkv, hd) && rows_inside("dV", b, a->dv, okv, nk, Hkv, hd);
        if (!ok) return vfm_fail(VFM_ERR_INTERNAL, "cuDNN attention (stand-in): %s", "a buffer is too small (see the fault)");
        s.assign((size_t)nk, 0), p.assign((size_t)nk, 0), dp.assign((size_t)nk, 0);
        // dK, dV of this sample sum over the query heads of each kv head
        std::vector<double> dk((size_t)nk * Hkv * hd, 0), dv((size_t)nk * Hkv * hd, 0);
        for (int h = 0; h < H; h++) {
            int g = h / group;
            for (int i = 0; i < nq; i++) {
                int64_t qrow = oq + ((int64_t)i * H + h) * hd;
                float *stats = a->lse + ol + (int64_t)i * H + h;
                if (nk == 0) {  // undefined in cuDNN: poison, so that a test sees it was handed over
                    if (!a->backward) {
                        for (int d = 0; d < hd; d++) ((bf16 *)a->o)[qrow + d] = __float2bfloat16_rn(NAN);
                        *stats = NAN;
                    } else
                        for (int d = 0; d < hd; d++) ((bf16 *)a->dq)[qrow + d] = __float2bfloat16_rn(NAN);
                    continue;
                }
                double mx = -INFINITY;
                for (int j = 0; j < nk; j++) {
                    int64_t krow = okv + ((int64_t)j * Hkv + g) * hd;
                    double dot = 0;
                    for (int d = 0; d < hd; d++) dot += (double)ld(a->q, qrow + d) * ld(a->k, krow + d);
                    s[j] = (double)a->scale * dot;
                    if (s[j] > mx) mx = s[j];
                }
                if (!a->backward) {
                    double sum = 0;
                    for (int j = 0; j < nk; j++) sum += (p[j] = exp(s[j] - mx));
                    for (int d = 0; d < hd; d++) {
                        double o = 0;
                        for (int j = 0; j < nk; j++) o += p[j] / sum * ld(a->v, okv + ((int64_t)j * Hkv + g) * hd + d);
                        ((bf16 *)a->o)[qrow + d] = __float2bfloat16_rn((float)o);
                    }
                    *stats = (float)(mx + log(sum));
                    continue;
                }
                double delta = 0;  // rowsum(dO∘O)
                for (int d = 0; d < hd; d++) delta += (double)ld(a->dout, qrow + d) * ld(a->o, qrow + d);
                for (int j = 0; j < nk; j++) {
                    int64_t vrow = okv + ((int64_t)j * Hkv + g) * hd;
                    p[j] = exp(s[j] - (double)*stats);
                    double dot = 0;
                    for (int d = 0; d < hd; d++) dot += (double)ld(a->dout, qrow + d) * ld(a->v, vrow + d);
                    dp[j] = p[j] * (dot - delta);  // dS
                }
                for (int d = 0; d < hd; d++) {
                    double dq = 0;
                    for (int j = 0; j < nk; j++) dq += dp[j] * ld(a->k, okv + ((int64_t)j * Hkv + g) * hd + d);
                    ((bf16 *)a->dq)[qrow + d] = __float2bfloat16_rn((float)(a->scale * dq));
                }
                for (int j = 0; j < nk; j++)
                    for (int d = 0; d < hd; d++) {
                        int64_t e = ((int64_t)j * Hkv + g) * hd + d;
                        dk[e] += (double)a->scale * dp[j] * ld(a->q, qrow + d);
                        dv[e] += p[j] * ld(a->dout, qrow + d);
                    }
            }
        }
        if (a->backward)
            for (int64_t e = 0; e < (int64_t)nk * Hkv * hd; e++) {
                ((bf16 *)a->dk)[okv + e] = __float2bfloat16_rn((float)dk[e]);
                ((bf16 *)a->dv)[okv + e] = __float2bfloat16_rn((float)dv[e]);
            }
    }
    return VFM_OK;
}

extern "C" const char *cudnn_attention_frontend_version(void) { return "- (CPU stand-in: tests/harness)"; }
