// CUDA backend: varlen (THD) attention dispatch, and the log-sum-exp merge of partial attentions. bf16 runs cuDNN's fused SDPA (cudnn_attention.cpp)
// with shapes bucketed so that few graphs are built (batch slots to a power of two, the per-sample
// length bound to 64·{1,2,3} or 64·m·2^e with m in 4..7); f32, head dims cuDNN cannot take and
// buckets it declines run the reference kernels (attention_ref.cu). Which implementation serves a
// bucket (cuDNN's unified or composite SDPA, or the reference kernel and why) is logged once per
// bucket and direction. Either way a last pass writes the contract's padding: o = 0 and lse = 0 on padding rows,
// o = 0 and lse = -inf for a sample without keys, dq/dk/dv = 0 on padding rows and for samples
// with nothing to attend. cuDNN never sees an empty key sequence beside a non-empty query one:
// such a sample gets query length 0 and is left to the padding pass. The backward hands cuDNN a copy
// of the statistics with -inf (samples without keys) replaced by 0: cuDNN may read rows past a
// sample's end, and exp(s - (-inf)) would bring NaN into a neighbouring sample's dK/dV.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention_internal.h"
#ifdef VFM_CUDNN_FE
#include "cudnn_attention.h"
#endif

extern "C" {
#include "core/log.h"
}

static CudaAttnImpl g_impl = CUDA_ATTN_AUTO;
static int g_impl_from_env;

extern "C" void cuda_attention_set_impl(CudaAttnImpl impl) {
    g_impl = impl;
    g_impl_from_env = 1;  // an explicit choice wins over VFM_ATTENTION
}

extern "C" CudaAttnImpl cuda_attention_get_impl(void) {
    if (!g_impl_from_env) {
        g_impl_from_env = 1;
        const char *env = getenv("VFM_ATTENTION");
        if (env && strcmp(env, "reference") == 0) g_impl = CUDA_ATTN_REFERENCE;
        else if (env && strcmp(env, "cudnn") == 0) g_impl = CUDA_ATTN_CUDNN;
        else if (env && *env && strcmp(env, "auto") != 0)
            log_warn("VFM_ATTENTION=%s is not auto, reference or cudnn: using auto", env);
    }
    return g_impl;
}

AttnDims attn_dims(const Tensor *q, const Tensor *k, const VarlenLayout *layout) {
    AttnDims a;
    a.cu_q = (const int32_t *)layout->cu_q.data;
    a.cu_q_padded = (const int32_t *)layout->cu_q_padded.data;
    a.cu_kv = (const int32_t *)layout->cu_kv.data;
    a.cu_kv_padded = (const int32_t *)layout->cu_kv_padded.data;
    a.n = layout->n_samples;
    a.H = (int)q->shape[1];
    a.Hkv = (int)k->shape[1];
    a.hd = (int)q->shape[2];
    a.group = a.H / a.Hkv;
    a.Sq = q->shape[0];
    a.Skv = k->shape[0];
    a.max_q = layout->max_q;
    a.max_kv = layout->max_kv;
    a.scale = (float)(1.0 / sqrt((double)a.hd));
    return a;
}

// ---- padding pass ---------------------------------------------------------------------------

// The sample whose padded slot holds row r, or -1 when r is a padding row (between a sample's real
// rows and the next slot, or outside all slots). cu_padded is non-decreasing, so the last i with
// cu_padded[i] <= r is the only candidate (earlier ones with the same offset hold no rows).
__device__ int sample_of_row(int64_t r, const int32_t *cu, const int32_t *cu_padded, int n) {
    int lo = 0, hi = n - 1, found = -1;
    while (lo <= hi) {
        int mid = (lo + hi) >> 1;
        if (cu_padded[mid] <= r) found = mid, lo = mid + 1;
        else hi = mid - 1;
    }
    if (found < 0 || r >= (int64_t)cu_padded[found] + (cu[found + 1] - cu[found])) return -1;
    return found;
}

// One warp per row of x[rows, row_elems] (and of its f32 companion lse[rows, lse_elems] when given).
// side_q: rows are query rows (zero when padding or the sample has no keys; lse -inf then, 0 on
// padding); else key rows (zero when padding or the sample has no queries).
template <typename T>
__global__ void attn_padding_kernel(T *x, int64_t row_elems, float *lse, int64_t lse_elems, int64_t rows, AttnDims a,
                                    int side_q) {
    int64_t r = (int64_t)blockIdx.x * 8 + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (r >= rows) return;
    const int32_t *cu = side_q ? a.cu_q : a.cu_kv, *cu_padded = side_q ? a.cu_q_padded : a.cu_kv_padded;
    const int32_t *other = side_q ? a.cu_kv : a.cu_q;
    int i = sample_of_row(r, cu, cu_padded, a.n);
    bool empty = i >= 0 && other[i + 1] - other[i] == 0;
    if (i >= 0 && !empty) return;  // a real row with something to attend: the kernel's result stands
    if (x)
        for (int64_t e = lane; e < row_elems; e += 32) x[r * row_elems + e] = from_f32<T>(0.f);
    if (lse)
        for (int64_t e = lane; e < lse_elems; e += 32) lse[r * lse_elems + e] = i < 0 ? 0.f : -INFINITY;
}

static vfm_status padding_pass(const char *op, Tensor *x, float *lse, int64_t lse_elems, const AttnDims &a, int side_q) {
    int64_t rows = x->shape[0], row_elems = (int64_t)x->shape[1] * x->shape[2];
    if (rows == 0) return VFM_OK;
    unsigned blocks = (unsigned)((rows + 7) / 8);
    FLOAT_DISPATCH(op, "output", x, T,
                   CUDA_LAUNCH(attn_padding_kernel<T>, blocks, 256, 0, (T *)x->data, row_elems, lse, lse_elems, rows, a,
                               side_q));
    return cuda_check_launch(op, x);
}

// ---- log-sum-exp merge ------------------------------------------------------------------------

// One warp per (query row, head): o <- (w·o + w_p·o_part)/(w + w_p), lse <- m + log(w + w_p) with
// m = max(lse, lse_part), w = e^(lse-m), w_p = e^(lse_part-m); both -inf: o = 0, lse = -inf;
// padding rows: o = 0, lse = 0. The same expression order as the CPU.
template <typename T>
__global__ void attn_merge_kernel(T *o, float *lse, const T *o_part, const float *lse_part, int64_t rows, int H,
                                  int hd, const int32_t *cu, const int32_t *cu_padded, int n) {
    int64_t w = (int64_t)blockIdx.x * 8 + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (w >= rows * H) return;
    int64_t r = w / H;
    T *orow = o + w * hd;
    const T *prow = o_part + w * hd;
    float la = lse[w], lp = lse_part[w], m = fmaxf(la, lp);
    bool padding = sample_of_row(r, cu, cu_padded, n) < 0;
    __syncwarp();  // every lane has read lse[w] before lane 0 rewrites it
    if (padding || m == -INFINITY) {
        for (int d = lane; d < hd; d += 32) orow[d] = from_f32<T>(0.f);
        if (lane == 0) lse[w] = padding ? 0.f : -INFINITY;
        return;
    }
    float wa = expf(la - m), wb = expf(lp - m), sum = wa + wb;
    float ca = wa / sum, cb = wb / sum;
    for (int d = lane; d < hd; d += 32) orow[d] = from_f32<T>(ca * to_f32(orow[d]) + cb * to_f32(prow[d]));
    __syncwarp();
    if (lane == 0) lse[w] = m + logf(sum);
}

extern "C" vfm_status cuda_attention_merge(Tensor *o, Tensor *lse, const Tensor *o_part, const Tensor *lse_part,
                                           const VarlenLayout *layout) {
    int64_t rows = o->shape[0];
    int H = (int)o->shape[1], hd = (int)o->shape[2];
    if (rows * H == 0) return VFM_OK;
    unsigned blocks = (unsigned)((rows * H + 7) / 8);
    FLOAT_DISPATCH("attention_merge", "o", o, T,
                   CUDA_LAUNCH(attn_merge_kernel<T>, blocks, 256, 0, (T *)o->data, (float *)lse->data,
                               (const T *)o_part->data, (const float *)lse_part->data, rows, H, hd,
                               (const int32_t *)layout->cu_q.data, (const int32_t *)layout->cu_q_padded.data,
                               layout->n_samples));
    return cuda_check_launch("attention_merge", o);
}

// ---- cuDNN ----------------------------------------------------------------------------------

static int bucket_pow2(int n) {
    int b = 1;
    while (b < n) b <<= 1;
    return b;
}

// 64·k with k in {1,2,3,4,5,6,7,8,10,12,14,16,20,...}: about four buckets per octave.
static int bucket_len(int len) {
    int k = (len + 63) / 64;
    if (k <= 4) return 64 * (k < 1 ? 1 : k);
    int e = 0;
    while ((k >> e) >= 8) e++;  // k / 2^e in [4, 8)
    int m = (k + (1 << e) - 1) >> e;
    return 64 * (m << e);
}

static int64_t g_reference_calls;  // attention calls the reference kernel served (vfm bench asks)

extern "C" int64_t cuda_attention_reference_calls(void) { return g_reference_calls; }

// Logs, once per shape bucket and direction, which implementation serves it: cuDNN's unified or
// composite SDPA (info), or the reference kernel and why (a warning: tens of seconds per step at
// 8k tokens). At most 256 buckets are remembered; later ones are served silently.
static void log_bucket_once(const AttnDims &a, int backward, DType dt, const char *impl, const char *why) {
    struct Seen {
        int backward, dtype, B, H, Hkv, hd, Sq, Skv, reference;
    };
    static Seen seen[256];
    static int nseen;
    Seen k;
    memset(&k, 0, sizeof k);
    k.backward = backward, k.dtype = (int)dt, k.B = bucket_pow2(a.n), k.H = a.H, k.Hkv = a.Hkv, k.hd = a.hd;
    k.Sq = bucket_len(a.max_q), k.Skv = bucket_len(a.max_kv), k.reference = why != NULL;
    for (int i = 0; i < nseen; i++)
        if (memcmp(&seen[i], &k, sizeof k) == 0) return;
    if (nseen == (int)(sizeof seen / sizeof seen[0])) return;
    seen[nseen++] = k;
    char what[160];
    snprintf(what, sizeof what, "attention %s %s B<=%d H=%d Hkv=%d hd=%d Sq<=%d Skv<=%d", backward ? "backward" : "forward",
             dtype_name(dt), k.B, k.H, k.Hkv, k.hd, k.Sq, k.Skv);
    if (why) log_warn("%s: the reference attention kernel (slow): %s", what, why);
    else log_info("%s: cuDNN %s SDPA", what, impl);
}

#ifdef VFM_CUDNN_FE

// seq_q/seq_kv [B] (a sample without keys gets query length 0), offsets [B+1] scaled to elements;
// unused slots b >= n have length 0 and repeat the last offset.
__global__ void attn_cudnn_meta_kernel(AttnDims a, int B, int32_t *seq_q, int32_t *seq_kv, int64_t *off_q,
                                       int64_t *off_kv, int64_t *off_lse) {
    GRID_STRIDE(b, B + 1) {
        int src = b < a.n ? (int)b : a.n;
        off_q[b] = (int64_t)a.cu_q_padded[src] * a.H * a.hd;
        off_kv[b] = (int64_t)a.cu_kv_padded[src] * a.Hkv * a.hd;
        off_lse[b] = (int64_t)a.cu_q_padded[src] * a.H;
#if VFM_HARNESS_BREAK == BREAK_RAGGED_BYTES  // the must-fail build: offsets in bytes (cuda_launch.h)
        off_q[b] *= sizeof(bf16), off_kv[b] *= sizeof(bf16);
#endif
        if (b < B) {
            int lq = b < a.n ? a.cu_q[b + 1] - a.cu_q[b] : 0, lkv = b < a.n ? a.cu_kv[b + 1] - a.cu_kv[b] : 0;
            seq_q[b] = lkv == 0 ? 0 : lq;
            seq_kv[b] = lkv;
        }
    }
}

// dst = src with -inf (the rows of samples without keys) replaced by 0, for the backward's Stats.
__global__ void finite_stats_kernel(float *dst, const float *src, int64_t n) {
    GRID_STRIDE(i, n) {
        float v = src[i];
        dst[i] = v == -INFINITY ? 0.f : v;
    }
}

// VFM_OK: cuDNN ran. VFM_ERR_UNSUPPORTED: it cannot (message says why; nothing ran).
static vfm_status cudnn_run(const AttnDims &a, int backward, const Tensor *q, const Tensor *k, const Tensor *v,
                            const Tensor *o, const Tensor *lse, const Tensor *dout, Tensor *dq, Tensor *dk, Tensor *dv) {
    CudnnAttnArgs c;
    memset(&c, 0, sizeof c);
    c.backward = backward;
    c.B = bucket_pow2(a.n);
    c.H = a.H, c.Hkv = a.Hkv, c.hd = a.hd;
    c.Sq = bucket_len(a.max_q), c.Skv = bucket_len(a.max_kv);
    c.scale = a.scale;
    c.stream = (void *)cuda_stream();
    size_t ws_bytes = 0;
    VFM_TRY(cudnn_attention_prepare(&c, &ws_bytes));
    log_bucket_once(a, backward, q->dtype, c.implementation ? c.implementation : "(unnamed)", NULL);
    // meta: three int64 offset arrays [B+1], the two int32 length arrays [B], then (backward) the
    // finite copy of the statistics [Sq, H], each at a 256-byte boundary: cuDNN's tensors are
    // declared 16-byte aligned (cudnn-frontend's default), and [B+1] int64 would break that
    size_t n64 = (size_t)c.B + 1, stats_n = backward ? (size_t)a.Sq * a.H : 0;
    size_t at64 = ALIGN256(n64 * sizeof(int64_t)), at32 = ALIGN256((size_t)c.B * sizeof(int32_t));
    size_t meta_bytes = 3 * at64 + 2 * at32;
    char *meta = NULL;
    VFM_TRY(cuda_scratch(SCRATCH_ATTN_META, meta_bytes + stats_n * sizeof(float), (void **)&meta));
    int64_t *off_q = (int64_t *)meta, *off_kv = (int64_t *)(meta + at64), *off_lse = (int64_t *)(meta + 2 * at64);
    int32_t *seq_q = (int32_t *)(meta + 3 * at64), *seq_kv = (int32_t *)(meta + 3 * at64 + at32);
    CUDA_LAUNCH(attn_cudnn_meta_kernel, cuda_blocks(c.B + 1), CUDA_THREADS, 0, a, c.B, seq_q, seq_kv, off_q, off_kv,
                off_lse);
    float *stats = (float *)lse->data;
    if (backward && stats_n) {
        stats = (float *)(meta + meta_bytes);
        CUDA_LAUNCH(finite_stats_kernel, cuda_blocks((int64_t)stats_n), CUDA_THREADS, 0, stats, (const float *)lse->data,
                    (int64_t)stats_n);
    }
    void *ws = NULL;
    if (ws_bytes) VFM_TRY(cuda_scratch(SCRATCH_ATTN_WS, ws_bytes, &ws));
    c.q = q->data, c.k = k->data, c.v = v->data;
    c.o = o->data, c.lse = stats;
    if (backward) c.dout = dout->data, c.dq = dq->data, c.dk = dk->data, c.dv = dv->data;
    c.seq_q = seq_q, c.seq_kv = seq_kv, c.off_q = off_q, c.off_kv = off_kv, c.off_lse = off_lse;
    VFM_TRY(cudnn_attention_run(&c, ws));
    return cuda_check_launch(backward ? "attention_backward (cuDNN)" : "attention_forward (cuDNN)", q);
}
#endif

// Runs cuDNN when the implementation and the shape allow; *ran tells whether it did. Where the
// reference kernel will serve instead, the bucket is logged once with the reason.
static vfm_status try_cudnn(const char *op, const AttnDims &a, int backward, const Tensor *q, const Tensor *k,
                            const Tensor *v, const Tensor *o, const Tensor *lse, const Tensor *dout, Tensor *dq,
                            Tensor *dk, Tensor *dv, int *ran) {
    *ran = 0;
    if (a.n == 0 || a.max_q == 0 || a.max_kv == 0) return VFM_OK;  // nothing to compute: the padding pass writes every row
    CudaAttnImpl impl = cuda_attention_get_impl();
    if (impl == CUDA_ATTN_REFERENCE) {
        log_bucket_once(a, backward, q->dtype, NULL, "VFM_ATTENTION=reference");
        return VFM_OK;
    }
    const char *why = NULL;
    char buf[160];
    if (q->dtype != DT_BF16) {
        snprintf(buf, sizeof buf, "cuDNN attention runs bf16 only (%s)", dtype_name(q->dtype));
        why = buf;
    } else if (a.hd % 8 != 0) {
        snprintf(buf, sizeof buf, "cuDNN attention needs head_dim %% 8 == 0 (head_dim %d)", a.hd);
        why = buf;
    }
    if (why) {
        if (impl == CUDA_ATTN_CUDNN) return vfm_fail(VFM_ERR_UNSUPPORTED, "%s: %s (VFM_ATTENTION=cudnn)", op, why);
        log_bucket_once(a, backward, q->dtype, NULL, why);
        return VFM_OK;
    }
#ifdef VFM_CUDNN_FE
    vfm_status s = cudnn_run(a, backward, q, k, v, o, lse, dout, dq, dk, dv);
    if (s == VFM_OK) {
        *ran = 1;
        return VFM_OK;
    }
    if (s != VFM_ERR_UNSUPPORTED || impl == CUDA_ATTN_CUDNN) return vfm_fail_context(s, "%s", op);
    log_bucket_once(a, backward, q->dtype, NULL, vfm_last_error());
    vfm_clear_error();
    return VFM_OK;
#else
    (void)o, (void)lse, (void)dout, (void)dq, (void)dk, (void)dv, (void)k, (void)v;
    if (impl == CUDA_ATTN_CUDNN)
        return vfm_fail(VFM_ERR_UNSUPPORTED, "%s: this vfm was built without cuDNN attention (NO_CUDNN_FE)", op);
    log_bucket_once(a, backward, q->dtype, NULL, "this vfm was built without cuDNN attention (NO_CUDNN_FE)");
    return VFM_OK;
#endif
}

static vfm_status check_head_dim(const char *op, const AttnDims &a) {
    if (a.hd > ATTN_MAX_HEAD_DIM)
        return vfm_fail(VFM_ERR_UNSUPPORTED, "%s: head_dim %d on cuda (at most %d)", op, a.hd, ATTN_MAX_HEAD_DIM);
    return VFM_OK;
}

extern "C" vfm_status cuda_attention_forward(Tensor *o, Tensor *lse, const Tensor *q, const Tensor *k, const Tensor *v,
                                             const VarlenLayout *layout) {
    const char *op = "attention_forward";
    AttnDims a = attn_dims(q, k, layout);
    VFM_TRY(check_head_dim(op, a));
    int ran = 0;
    VFM_TRY(try_cudnn(op, a, 0, q, k, v, o, lse, NULL, NULL, NULL, NULL, &ran));
    if (!ran) {
        if (a.n > 0 && a.max_q > 0 && a.max_kv > 0) g_reference_calls++;
        VFM_TRY(attention_ref_forward(a, o, lse, q, k, v));
    }
    return padding_pass(op, o, (float *)lse->data, a.H, a, 1);
}

extern "C" vfm_status cuda_attention_backward(Tensor *dq, Tensor *dk, Tensor *dv, const Tensor *dout, const Tensor *q,
                                              const Tensor *k, const Tensor *v, const Tensor *o, const Tensor *lse,
                                              const VarlenLayout *layout) {
    const char *op = "attention_backward";
    AttnDims a = attn_dims(q, k, layout);
    VFM_TRY(check_head_dim(op, a));
    int ran = 0;
    VFM_TRY(try_cudnn(op, a, 1, q, k, v, o, lse, dout, dq, dk, dv, &ran));
    if (!ran) {
        if (a.n > 0 && a.max_q > 0 && a.max_kv > 0) g_reference_calls++;
        VFM_TRY(attention_ref_backward(a, dq, dk, dv, dout, q, k, v, o, lse));
    }
    VFM_TRY(padding_pass(op, dq, NULL, 0, a, 1));
    VFM_TRY(padding_pass(op, dk, NULL, 0, a, 0));
    return padding_pass(op, dv, NULL, 0, a, 0);
}
