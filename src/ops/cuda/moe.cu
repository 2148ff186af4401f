// CUDA backend: the mixture-of-experts ops (ops.h "mixture of experts"). Router tensors are f32,
// token rows ACT (bf16 or f32). No atomics: the top-C selection gives each (row, expert) its rank
// among its sample's rows by (score desc, row asc) — the CPU's sort order, so the same slots — and
// every sum has one thread that adds its terms in the CPU's order (experts ascending in the
// combine, rows ascending in the router's losses).
#include <math.h>

#include "cuda_common.h"

__device__ __forceinline__ bool moe_better(float a, int64_t ia, float b, int64_t ib) {
    return a > b || (a == b && ia < ib);
}

// one thread per row
__global__ void moe_softmax_kernel(float *P, float *L, const float *X, const int32_t *t2s, int64_t S, int64_t E) {
    GRID_STRIDE(t, S) {
        float *p = P + t * E;
        if (t2s[t] < 0) {
            for (int64_t e = 0; e < E; e++) p[e] = 0.f;
            L[t] = 0.f;
            continue;
        }
        const float *x = X + t * E;
        float mx = x[0];
        for (int64_t e = 1; e < E; e++) mx = fmaxf(mx, x[e]);
        double sum = 0;
        for (int64_t e = 0; e < E; e++) sum += (double)(p[e] = expf(x[e] - mx));
        for (int64_t e = 0; e < E; e++) p[e] = (float)(p[e] / sum);
        L[t] = (float)(mx + log(sum));
    }
}

// one thread per (row, expert)
__global__ void moe_topk_mask_kernel(float *M, const float *X, const int32_t *t2s, int64_t S, int64_t E, int k) {
    GRID_STRIDE(i, S * E) {
        int64_t t = i / E, e = i % E;
        const float *x = X + t * E;
        int64_t rank = 0;
        for (int64_t j = 0; j < E && rank < k; j++) rank += moe_better(x[j], j, x[e], e);
        M[i] = t2s[t] >= 0 && rank < k ? x[e] : -INFINITY;
    }
}

__global__ void moe_clear_slots_kernel(int32_t *st, float *W, int64_t n) {
    GRID_STRIDE(s, n) { st[s] = -1, W[s] = 0.f; }
}

// one thread per (row, expert): its rank among the sample's rows for that expert
__global__ void moe_topc_kernel(int32_t *st, float *W, int32_t *ts, const float *X, const int32_t *cu,
                                const int32_t *cc, int64_t S, int64_t E, int64_t C, int64_t B) {
    GRID_STRIDE(i, S * E) {
        int64_t t = i / E, e = i % E;
        ts[i] = -1;
        int64_t lo = 0, hi = B; // the sample b with cu[b] <= t < cu[b+1]
        while (lo < hi) {
            int64_t mid = (lo + hi) / 2;
            if (cu[mid + 1] <= t) lo = mid + 1;
            else hi = mid;
        }
        if (lo >= B || t < cu[lo]) continue;
        float v = X[i];
        if (v == -INFINITY) continue;
        int64_t b = lo, rank = 0, Cb = cc[b + 1] - cc[b];
        for (int64_t j = cu[b]; j < cu[b + 1] && rank < Cb; j++) rank += moe_better(X[j * E + e], j, v, t);
        if (rank >= Cb) continue;
        int64_t s = e * C + cc[b] + rank;
        st[s] = (int32_t)t, W[s] = v, ts[i] = (int32_t)s;
    }
}

template <typename T> __global__ void moe_permute_kernel(T *Y, const T *X, const int32_t *st, int64_t N, int64_t D) {
    GRID_STRIDE(i, N * D) {
        int32_t t = st[i / D];
        Y[i] = t >= 0 ? X[(int64_t)t * D + i % D] : from_f32<T>(0.f);
    }
}

// one thread per (row, column): experts in ascending order
template <typename T>
__global__ void moe_combine_kernel(T *Y, const T *Ye, const float *W, const int32_t *ts, int64_t S, int64_t D, int64_t E) {
    GRID_STRIDE(i, S * D) {
        int64_t t = i / D, d = i % D;
        float acc = 0.f;
        for (int64_t e = 0; e < E; e++) {
            int32_t s = ts[t * E + e];
            if (s < 0) continue;
            float v = to_f32(Ye[(int64_t)s * D + d]);
            acc = __fadd_rn(acc, W ? __fmul_rn(W[s], v) : v);
        }
        Y[i] = from_f32<T>(acc);
    }
}

template <typename T>
__global__ void moe_combine_dye_kernel(T *dYe, const T *dY, const float *W, const int32_t *st, int64_t N, int64_t D) {
    GRID_STRIDE(i, N * D) {
        int32_t t = st[i / D];
        dYe[i] = from_f32<T>(t >= 0 ? __fmul_rn(W[i / D], to_f32(dY[(int64_t)t * D + i % D])) : 0.f);
    }
}

// one thread per slot: the dot product in column order, in double (as the CPU)
template <typename T>
__global__ void moe_combine_dw_kernel(float *dW, const T *dY, const T *Ye, const int32_t *st, int64_t N, int64_t D) {
    GRID_STRIDE(s, N) {
        int32_t t = st[s];
        double dot = 0;
        if (t >= 0)
            for (int64_t d = 0; d < D; d++) dot += (double)to_f32(dY[(int64_t)t * D + d]) * (double)to_f32(Ye[s * D + d]);
        dW[s] = (float)dot;
    }
}

// one thread: T and the kept counts cnt[E] (double), the loads psum[E] and Σ lse² in row order
__global__ void moe_route_stats_kernel(double *cnt, double *psum, double *zsum, long long *T, const float *M,
                                       const float *P, const float *L, const int32_t *t2s, int64_t S, int64_t E) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    long long n = 0;
    double z = 0;
    for (int64_t e = 0; e < E; e++) cnt[e] = 0, psum[e] = 0;
    for (int64_t t = 0; t < S; t++) {
        if (t2s[t] < 0) continue;
        n++;
        if (L) z += (double)L[t] * (double)L[t];
        for (int64_t e = 0; e < E; e++) {
            if (M) cnt[e] += M[t * E + e] > -INFINITY;
            if (P) psum[e] += P[t * E + e];
        }
    }
    *T = n, *zsum = z;
}

__global__ void moe_losses_kernel(float *out, const double *cnt, const double *psum, const double *zsum,
                                  const long long *T, int64_t E, int k) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    double n = (double)*T, aux = 0;
    for (int64_t e = 0; e < E; e++) aux += (cnt[e] / (n * k)) * (psum[e] / n);
    out[0] = *T > 0 ? (float)(E * aux) : 0.f;
    out[1] = *T > 0 ? (float)(*zsum / n) : 0.f;
}

// one thread per row
__global__ void moe_router_backward_kernel(float *dX, const float *dW, const int32_t *ts, const float *P,
                                           const float *L, const int32_t *t2s, const double *cnt, const long long *T,
                                           int64_t S, int64_t E, int k, float aux, float z) {
    GRID_STRIDE(t, S) {
        float *dx = dX + t * E;
        const float *p = P + t * E;
        if (t2s[t] < 0) {
            for (int64_t e = 0; e < E; e++) dx[e] = 0.f;
            continue;
        }
        double n = (double)*T, dot = 0;
        for (int64_t e = 0; e < E; e++) {
            int32_t s = ts[t * E + e];
            double g = s >= 0 ? (double)dW[s] : 0;
            if (aux != 0.f) g += (double)aux * (double)E * (cnt[e] / (n * k)) / n;
            dx[e] = (float)g;
            dot += (double)p[e] * g;
        }
        double zt = z != 0.f ? 2.0 * (double)z * (double)L[t] / n : 0;
        for (int64_t e = 0; e < E; e++) dx[e] = (float)((double)p[e] * ((double)dx[e] - dot + zt));
    }
}

#define F32(t) ((float *)(t)->data)
#define CF32(t) ((const float *)(t)->data)
#define CI32(t) ((const int32_t *)(t)->data)

extern "C" vfm_status cuda_moe_softmax(Tensor *probs, Tensor *lse, const Tensor *logits, const Tensor *tok2sample) {
    int64_t S = tensor_dim(logits, 0), E = tensor_dim(logits, 1);
    if (S == 0) return VFM_OK;
    CUDA_LAUNCH(moe_softmax_kernel, cuda_blocks(S), CUDA_THREADS, 0, F32(probs), F32(lse), CF32(logits),
                CI32(tok2sample), S, E);
    return VFM_OK;
}

extern "C" vfm_status cuda_moe_topk_mask(Tensor *masked, const Tensor *scores, const Tensor *tok2sample, int k) {
    int64_t S = tensor_dim(scores, 0), E = tensor_dim(scores, 1);
    if (S == 0) return VFM_OK;
    CUDA_LAUNCH(moe_topk_mask_kernel, cuda_blocks(S * E), CUDA_THREADS, 0, F32(masked), CF32(scores), CI32(tok2sample),
                S, E, k);
    return VFM_OK;
}

extern "C" vfm_status cuda_moe_topc(Tensor *slot_tok, Tensor *slot_w, Tensor *tok_slot, const Tensor *scores,
                                    const Tensor *cu_tok, const Tensor *cu_cap) {
    int64_t S = tensor_dim(scores, 0), E = tensor_dim(scores, 1), C = tensor_dim(slot_tok, 1);
    int64_t B = tensor_dim(cu_tok, 0) - 1;
    if (E * C > 0)
        CUDA_LAUNCH(moe_clear_slots_kernel, cuda_blocks(E * C), CUDA_THREADS, 0, (int32_t *)slot_tok->data, F32(slot_w),
                    E * C);
    if (S * E > 0)
        CUDA_LAUNCH(moe_topc_kernel, cuda_blocks(S * E), CUDA_THREADS, 0, (int32_t *)slot_tok->data, F32(slot_w),
                    (int32_t *)tok_slot->data, CF32(scores), CI32(cu_tok), CI32(cu_cap), S, E, C, B);
    return VFM_OK;
}

extern "C" vfm_status cuda_moe_permute(Tensor *xe, const Tensor *x, const Tensor *slot_tok) {
    int64_t N = tensor_dim(xe, 0), D = tensor_dim(xe, 1);
    if (N * D == 0) return VFM_OK;
    FLOAT_DISPATCH("moe_permute", "x", x, T,
                   CUDA_LAUNCH(moe_permute_kernel<T>, cuda_blocks(N * D), CUDA_THREADS, 0, (T *)xe->data,
                               (const T *)x->data, CI32(slot_tok), N, D));
    return VFM_OK;
}

extern "C" vfm_status cuda_moe_combine(Tensor *y, const Tensor *ye, const Tensor *w, const Tensor *tok_slot) {
    int64_t S = tensor_dim(y, 0), D = tensor_dim(y, 1), E = tensor_dim(tok_slot, 1);
    if (S * D == 0) return VFM_OK;
    FLOAT_DISPATCH("moe_combine", "ye", ye, T,
                   CUDA_LAUNCH(moe_combine_kernel<T>, cuda_blocks(S * D), CUDA_THREADS, 0, (T *)y->data,
                               (const T *)ye->data, w ? CF32(w) : (const float *)NULL, CI32(tok_slot), S, D, E));
    return VFM_OK;
}

extern "C" vfm_status cuda_moe_combine_backward(Tensor *dye, Tensor *dw, const Tensor *dy, const Tensor *ye,
                                                const Tensor *w, const Tensor *slot_tok) {
    int64_t N = tensor_dim(dye, 0), D = tensor_dim(dye, 1);
    if (N == 0) return VFM_OK;
    FLOAT_DISPATCH("moe_combine_backward", "ye", ye, T, {
        if (D > 0)
            CUDA_LAUNCH(moe_combine_dye_kernel<T>, cuda_blocks(N * D), CUDA_THREADS, 0, (T *)dye->data,
                        (const T *)dy->data, CF32(w), CI32(slot_tok), N, D);
        CUDA_LAUNCH(moe_combine_dw_kernel<T>, cuda_blocks(N), CUDA_THREADS, 0, F32(dw), (const T *)dy->data,
                    (const T *)ye->data, CI32(slot_tok), N, D);
    });
    return VFM_OK;
}

// Scratch for the routing statistics: cnt[E], psum[E], Σ lse² (double) and T.
static vfm_status route_stats(int64_t E, double **cnt, double **psum, double **zsum, long long **T) {
    char *buf = NULL;
    size_t bytes = (2 * (size_t)E + 1) * sizeof(double) + sizeof(long long);
    VFM_TRY(cuda_scratch(SCRATCH_REDUCE, bytes, (void **)&buf));
    *cnt = (double *)buf, *psum = *cnt + E, *zsum = *psum + E, *T = (long long *)(*zsum + 1);
    return VFM_OK;
}

extern "C" vfm_status cuda_moe_router_losses(Tensor *out, const Tensor *probs, const Tensor *lse, const Tensor *masked,
                                             const Tensor *tok2sample, int k) {
    int64_t S = tensor_dim(probs, 0), E = tensor_dim(probs, 1);
    double *cnt, *psum, *zsum;
    long long *T;
    VFM_TRY(route_stats(E, &cnt, &psum, &zsum, &T));
    CUDA_LAUNCH(moe_route_stats_kernel, 1, 1, 0, cnt, psum, zsum, T, CF32(masked), CF32(probs), CF32(lse),
                CI32(tok2sample), S, E);
    CUDA_LAUNCH(moe_losses_kernel, 1, 1, 0, F32(out), cnt, psum, zsum, T, E, k);
    return VFM_OK;
}

extern "C" vfm_status cuda_moe_router_backward(Tensor *dlogits, const Tensor *dw, const Tensor *tok_slot,
                                               const Tensor *probs, const Tensor *lse, const Tensor *masked,
                                               const Tensor *tok2sample, int k, float aux, float z) {
    int64_t S = tensor_dim(probs, 0), E = tensor_dim(probs, 1);
    if (S == 0) return VFM_OK;
    double *cnt, *psum, *zsum;
    long long *T;
    VFM_TRY(route_stats(E, &cnt, &psum, &zsum, &T));
    CUDA_LAUNCH(moe_route_stats_kernel, 1, 1, 0, cnt, psum, zsum, T, aux != 0.f ? CF32(masked) : (const float *)NULL,
                (const float *)NULL, (const float *)NULL, CI32(tok2sample), S, E);
    CUDA_LAUNCH(moe_router_backward_kernel, cuda_blocks(S), CUDA_THREADS, 0, F32(dlogits), CF32(dw), CI32(tok_slot),
                CF32(probs), CF32(lse), CI32(tok2sample), cnt, T, S, E, k, aux, z);
    return VFM_OK;
}
