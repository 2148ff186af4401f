// CUDA backend: the reference attention kernels — simple enough to check by reading, used by the
// tests as the GPU oracle for cuDNN and as the fallback for shapes cuDNN declines (slow: scores are
// recomputed per pass, nothing is tiled). Softmax in f32 from the saved max and sum; every sum runs
// in a fixed order (strided per thread, then the block's fixed tree; output elements one thread
// each over keys in order), so two runs give the same bits. One block of ATTN_THREADS threads per
// (row, sample, head); head_dim <= ATTN_MAX_HEAD_DIM = 2 output slots per thread.
#include <math.h>

#include "attention_internal.h"

#define ATTN_THREADS 128
#define ATTN_SLOTS (ATTN_MAX_HEAD_DIM / ATTN_THREADS)

// s = scale·Σ_d x[d]·y[d], d in order; x in shared memory (f32), y a row in global memory.
template <typename T> __device__ __forceinline__ float dot_row(const float *x, const T *y, int hd, float scale) {
    float s = 0.f;
    for (int d = 0; d < hd; d++) s += x[d] * to_f32(y[d]);
    return s * scale;
}

template <typename T> __device__ __forceinline__ void load_row(float *dst, const T *src, int hd) {
    for (int d = threadIdx.x; d < hd; d += blockDim.x) dst[d] = to_f32(src[d]);
    __syncthreads();
}

// acc[slot] += Σ_{jj < len} w[jj]·rows[(j0 + jj)·stride + d] for this thread's output elements
// d = threadIdx.x + slot·ATTN_THREADS < hd, jj in order.
template <typename T>
__device__ __forceinline__ void accumulate_rows(float *acc, const float *w, const T *rows, int64_t stride, int j0, int len,
                                                int hd) {
    for (int slot = 0; slot < ATTN_SLOTS; slot++) {
        int d = threadIdx.x + slot * ATTN_THREADS;
        if (d >= hd) break;
        float s = acc[slot];
        for (int jj = 0; jj < len; jj++) s += w[jj] * to_f32(rows[(j0 + jj) * stride + d]);
        acc[slot] = s;
    }
}

// grid (max_q, n, H): o[row, h] and lse[row, h] of query row blockIdx.x of sample blockIdx.y.
template <typename T>
__global__ void __launch_bounds__(ATTN_THREADS) attn_ref_forward_kernel(AttnDims a, T *O, float *LSE, const T *Q, const T *K, const T *V) {
    int i = blockIdx.y, h = blockIdx.z, r = blockIdx.x;
    int nq = a.cu_q[i + 1] - a.cu_q[i], nkv = a.cu_kv[i + 1] - a.cu_kv[i];
    if (r >= nq) return;
    int g = h / a.group, hd = a.hd;
    int64_t row = (int64_t)a.cu_q_padded[i] + r, kv0 = a.cu_kv_padded[i];
    int64_t kv_stride = (int64_t)a.Hkv * hd;
    const T *kbase = K + kv0 * kv_stride + (int64_t)g * hd, *vbase = V + kv0 * kv_stride + (int64_t)g * hd;
    T *orow = O + (row * a.H + h) * hd;
    __shared__ float qs[ATTN_MAX_HEAD_DIM];
    __shared__ float p[ATTN_THREADS];
    load_row(qs, Q + (row * a.H + h) * hd, hd);
    if (nkv == 0) {  // no keys: o = 0, lse = -inf (the log of an empty sum)
        for (int d = threadIdx.x; d < hd; d += blockDim.x) orow[d] = from_f32<T>(0.f);
        if (threadIdx.x == 0) LSE[row * a.H + h] = -INFINITY;
        return;
    }
    float m = -INFINITY;
    for (int j = threadIdx.x; j < nkv; j += blockDim.x) m = fmaxf(m, dot_row(qs, kbase + j * kv_stride, hd, a.scale));
    m = block_max(m);
    float l = 0.f;
    for (int j = threadIdx.x; j < nkv; j += blockDim.x) l += expf(dot_row(qs, kbase + j * kv_stride, hd, a.scale) - m);
    l = block_sum<float>(l);
    float acc[ATTN_SLOTS] = {0.f};
    for (int j0 = 0; j0 < nkv; j0 += ATTN_THREADS) {
        int j = j0 + threadIdx.x;
        p[threadIdx.x] = j < nkv ? expf(dot_row(qs, kbase + j * kv_stride, hd, a.scale) - m) / l : 0.f;
        __syncthreads();
        accumulate_rows(acc, p, vbase, kv_stride, j0, min(ATTN_THREADS, nkv - j0), hd);
        __syncthreads();
    }
    for (int slot = 0; slot < ATTN_SLOTS; slot++) {
        int d = threadIdx.x + slot * ATTN_THREADS;
        if (d < hd) orow[d] = from_f32<T>(acc[slot]);
    }
    if (threadIdx.x == 0) LSE[row * a.H + h] = m + logf(l);
}

// Dlt[row, h] = Σ_d dO·O (the softmax backward's row term), one warp per (row, h) of real rows.
template <typename T>
__global__ void attn_ref_delta_kernel(AttnDims a, float *Dlt, const T *dO, const T *O) {
    int i = blockIdx.y, h = blockIdx.z;
    int r = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    int nq = a.cu_q[i + 1] - a.cu_q[i];
    if (r >= nq) return;
    int64_t at = ((int64_t)a.cu_q_padded[i] + r) * a.H + h;
    float s = 0.f;
    for (int d = lane; d < a.hd; d += 32) s += to_f32(dO[at * a.hd + d]) * to_f32(O[at * a.hd + d]);
    s = warp_sum(s);
    if (lane == 0) Dlt[at] = s;
}

// grid (max_q, n, H): dq_r = scale·Σ_j P_rj (dP_rj − D_r) k_j, P = exp(s − lse), dP = dO·v.
template <typename T>
__global__ void __launch_bounds__(ATTN_THREADS) attn_ref_dq_kernel(AttnDims a, T *dQ, const T *dO, const T *Q, const T *K, const T *V, const float *LSE,
                                   const float *Dlt) {
    int i = blockIdx.y, h = blockIdx.z, r = blockIdx.x;
    int nq = a.cu_q[i + 1] - a.cu_q[i], nkv = a.cu_kv[i + 1] - a.cu_kv[i];
    if (r >= nq) return;
    int g = h / a.group, hd = a.hd;
    int64_t row = (int64_t)a.cu_q_padded[i] + r, at = row * a.H + h, kv0 = a.cu_kv_padded[i];
    int64_t kv_stride = (int64_t)a.Hkv * hd;
    const T *kbase = K + kv0 * kv_stride + (int64_t)g * hd, *vbase = V + kv0 * kv_stride + (int64_t)g * hd;
    __shared__ float qs[ATTN_MAX_HEAD_DIM], dos[ATTN_MAX_HEAD_DIM];
    __shared__ float ds[ATTN_THREADS];
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        qs[d] = to_f32(Q[at * hd + d]);
        dos[d] = to_f32(dO[at * hd + d]);
    }
    __syncthreads();
    float lse = LSE[at], D = Dlt[at];
    float acc[ATTN_SLOTS] = {0.f};
    for (int j0 = 0; j0 < nkv; j0 += ATTN_THREADS) {
        int j = j0 + threadIdx.x;
        float v = 0.f;
        if (j < nkv) {
            float p = expf(dot_row(qs, kbase + j * kv_stride, hd, a.scale) - lse);
            v = p * (dot_row(dos, vbase + j * kv_stride, hd, 1.f) - D);
        }
        ds[threadIdx.x] = v;
        __syncthreads();
        accumulate_rows(acc, ds, kbase, kv_stride, j0, min(ATTN_THREADS, nkv - j0), hd);
        __syncthreads();
    }
    for (int slot = 0; slot < ATTN_SLOTS; slot++) {
        int d = threadIdx.x + slot * ATTN_THREADS;
        if (d < hd) dQ[at * hd + d] = from_f32<T>(acc[slot] * a.scale);
    }
}

// grid (max_kv, n, Hkv): for key row j of kv head g, over the group's query heads in order, then
// the sample's query rows in order: dv_j = Σ P_rj dO_r, dk_j = scale·Σ P_rj (dP_rj − D_r) q_r.
template <typename T>
__global__ void __launch_bounds__(ATTN_THREADS) attn_ref_dkdv_kernel(AttnDims a, T *dK, T *dV, const T *dO, const T *Q, const T *K, const T *V,
                                     const float *LSE, const float *Dlt) {
    int i = blockIdx.y, g = blockIdx.z, jr = blockIdx.x;
    int nq = a.cu_q[i + 1] - a.cu_q[i], nkv = a.cu_kv[i + 1] - a.cu_kv[i];
    if (jr >= nkv) return;
    int hd = a.hd;
    int64_t krow = (int64_t)a.cu_kv_padded[i] + jr, kat = krow * a.Hkv + g, q0 = a.cu_q_padded[i];
    int64_t q_stride = (int64_t)a.H * hd;
    __shared__ float ks[ATTN_MAX_HEAD_DIM], vs[ATTN_MAX_HEAD_DIM];
    __shared__ float ps[ATTN_THREADS], dss[ATTN_THREADS];
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        ks[d] = to_f32(K[kat * hd + d]);
        vs[d] = to_f32(V[kat * hd + d]);
    }
    __syncthreads();
    float acc_k[ATTN_SLOTS] = {0.f}, acc_v[ATTN_SLOTS] = {0.f};
    for (int h = g * a.group; h < (g + 1) * a.group; h++) {
        const T *qbase = Q + q0 * q_stride + (int64_t)h * hd, *dobase = dO + q0 * q_stride + (int64_t)h * hd;
        for (int r0 = 0; r0 < nq; r0 += ATTN_THREADS) {
            int r = r0 + threadIdx.x;
            float p = 0.f, dsv = 0.f;
            if (r < nq) {
                int64_t at = (q0 + r) * a.H + h;
                p = expf(dot_row(ks, qbase + r * q_stride, hd, a.scale) - LSE[at]);
                dsv = p * (dot_row(vs, dobase + r * q_stride, hd, 1.f) - Dlt[at]);
            }
            ps[threadIdx.x] = p;
            dss[threadIdx.x] = dsv;
            __syncthreads();
            int len = min(ATTN_THREADS, nq - r0);
            accumulate_rows(acc_v, ps, dobase, q_stride, r0, len, hd);
            accumulate_rows(acc_k, dss, qbase, q_stride, r0, len, hd);
            __syncthreads();
        }
    }
    for (int slot = 0; slot < ATTN_SLOTS; slot++) {
        int d = threadIdx.x + slot * ATTN_THREADS;
        if (d < hd) {
            dK[kat * hd + d] = from_f32<T>(acc_k[slot] * a.scale);
            dV[kat * hd + d] = from_f32<T>(acc_v[slot]);
        }
    }
}

vfm_status attention_ref_forward(const AttnDims &a, Tensor *o, Tensor *lse, const Tensor *q, const Tensor *k,
                                 const Tensor *v) {
    if (a.n == 0 || a.max_q == 0) return VFM_OK;
    dim3 grid((unsigned)a.max_q, (unsigned)a.n, (unsigned)a.H);
    FLOAT_DISPATCH("attention_forward (reference)", "q", q, T,
                   CUDA_LAUNCH(attn_ref_forward_kernel<T>, grid, ATTN_THREADS, 0, a, (T *)o->data, (float *)lse->data,
                               (const T *)q->data, (const T *)k->data, (const T *)v->data));
    return VFM_OK;
}

vfm_status attention_ref_backward(const AttnDims &a, Tensor *dq, Tensor *dk, Tensor *dv, const Tensor *dout,
                                  const Tensor *q, const Tensor *k, const Tensor *v, const Tensor *o, const Tensor *lse) {
    const char *op = "attention_backward (reference)";
    if (a.n == 0) return VFM_OK;
    float *Dlt = NULL;
    VFM_TRY(cuda_scratch(SCRATCH_ATTN_META, (size_t)(a.Sq * a.H + 1) * sizeof(float), (void **)&Dlt));
    FLOAT_DISPATCH(op, "q", q, T, {
        if (a.max_q > 0) {
            dim3 dgrid((unsigned)((a.max_q + 7) / 8), (unsigned)a.n, (unsigned)a.H);
            CUDA_LAUNCH(attn_ref_delta_kernel<T>, dgrid, 256, 0, a, Dlt, (const T *)dout->data, (const T *)o->data);
            dim3 qgrid((unsigned)a.max_q, (unsigned)a.n, (unsigned)a.H);
            CUDA_LAUNCH(attn_ref_dq_kernel<T>, qgrid, ATTN_THREADS, 0, a, (T *)dq->data, (const T *)dout->data,
                        (const T *)q->data, (const T *)k->data, (const T *)v->data, (const float *)lse->data, Dlt);
        }
        if (a.max_kv > 0) {
            dim3 kgrid((unsigned)a.max_kv, (unsigned)a.n, (unsigned)a.Hkv);
            CUDA_LAUNCH(attn_ref_dkdv_kernel<T>, kgrid, ATTN_THREADS, 0, a, (T *)dk->data, (T *)dv->data,
                        (const T *)dout->data, (const T *)q->data, (const T *)k->data, (const T *)v->data,
                        (const float *)lse->data, Dlt);
        }
    });
    return VFM_OK;
}
