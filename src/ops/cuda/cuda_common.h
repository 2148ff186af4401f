// Shared by the .cu files of the CUDA backend (device code: nvcc, or host C++ for the CPU harness of
// the tests): the ops' stream, kernel launches, error handling that names the op and the shapes,
// scratch buffers, bf16/f32 element access, dtype dispatch, grid sizing and fixed-order
// (deterministic) block reductions.
#ifndef VFM_CUDA_COMMON_H
#define VFM_CUDA_COMMON_H

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda_launch.h"
#include "ops_cuda.h"

typedef __nv_bfloat16 bf16;

// ---- stream, errors, scratch (cuda_context.cu) ------------------------------------------------

cudaStream_t cuda_stream(void);
// After a kernel launch: the launch error (and, with VFM_CUDA_SYNC=1, the kernel's own error after
// waiting for it) as a vfm_fail naming op and the tensor t (may be NULL).
vfm_status cuda_check_launch(const char *op, const Tensor *t);
// A failed CUDA runtime call: "op: call: error (tensor)".
vfm_status cuda_call_fail(const char *op, const char *call, cudaError_t e, const Tensor *t);
vfm_status cuda_bad_dtype(const char *op, const char *arg, const Tensor *t);

#define CUDA_TRY(op, t, call)                                                   \
    do {                                                                        \
        cudaError_t cuda_try_e_ = (call);                                       \
        if (cuda_try_e_ != cudaSuccess) return cuda_call_fail(op, #call, cuda_try_e_, t); \
    } while (0)

// Launches kernel on the ops' stream and checks the launch, naming the kernel (with VFM_CUDA_SYNC=1
// it also waits and reports the kernel's own fault); a failure returns from the calling function.
#define CUDA_LAUNCH(kernel, grid, block, shmem, ...)                                \
    do {                                                                            \
        VFM_KERNEL_LAUNCH(kernel, grid, block, shmem, cuda_stream(), __VA_ARGS__);  \
        VFM_TRY(cuda_check_launch(#kernel, NULL));                                  \
    } while (0)

// Device scratch buffers that grow and are kept, one per use so that an op never hands a buffer to
// itself twice. Valid until the next cuda_scratch call for the same slot (ops run on one stream).
typedef enum {
    SCRATCH_REDUCE = 0,   // partial sums of reductions
    SCRATCH_REDUCE2,      // a second reduction buffer (per-sample ranges, totals)
    SCRATCH_GEMM,         // cuBLASLt workspace
    SCRATCH_ATTN_META,    // attention: sequence lengths, ragged offsets, D = rowsum(dO·O)
    SCRATCH_ATTN_WS,      // cuDNN workspace
    SCRATCH_HOST_RESULT,  // small device results copied back to the host
    SCRATCH_SLOTS
} ScratchSlot;
vfm_status cuda_scratch(ScratchSlot slot, size_t bytes, void **out);
// bytes rounded up to 256: pieces carved one after another from a scratch buffer (which is
// 256-byte aligned, as every cudaMalloc) stay 256-byte aligned.
#define ALIGN256(bytes) (((size_t)(bytes) + 255) & ~(size_t)255)

// ---- element access ---------------------------------------------------------------------------

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(bf16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <> __device__ __forceinline__ bf16 from_f32<bf16>(float v) { return __float2bfloat16_rn(v); }

// Runs BODY with T the C++ type of a float dtype (f32 or bf16); other dtypes return an error.
#define FLOAT_DISPATCH(op, arg, tensor, T, ...)                                   \
    do {                                                                          \
        if ((tensor)->dtype == DT_F32) {                                          \
            typedef float T;                                                      \
            __VA_ARGS__;                                                          \
        } else if ((tensor)->dtype == DT_BF16) {                                  \
            typedef bf16 T;                                                       \
            __VA_ARGS__;                                                          \
        } else {                                                                  \
            return cuda_bad_dtype(op, arg, tensor);                               \
        }                                                                         \
    } while (0)

// ---- 16-byte vector access ----------------------------------------------------------------------
// Kernels that stream activations move 16 bytes per memory access where the data allow. They work
// in chunks of VEC(T) consecutive elements (8 bf16, 4 f32): chunk c of an array of n elements is
// elements [c·N, c·N + N) ∩ [0, n). chunk_read/chunk_write move a chunk with 16-byte accesses when
// the launch's arrays are 16-byte aligned (vec, decided on the host by vec_ok) and the chunk lies
// wholly inside the array, and element by element otherwise (unaligned arrays, a short last chunk).
// Only the width of the access differs: every element gets the same operations in the same order
// on either path, so the two give the same bits (tests/unit/test_cuda_ops.c compares them). Index
// arithmetic is per row and per chunk (ROW_STRIDE, GRID_STRIDE over chunks), never a 64-bit
// division per element. New kernels that stream bf16 should use these helpers.

#define VEC(T) ((int)(16 / sizeof(T)))

// Full unrolling of a loop with a constant trip count, so that arrays indexed by its counter stay
// in registers (nvcc; the host build of the harness ignores it).
#ifdef __CUDACC__
#define UNROLL _Pragma("unroll")
#else
#define UNROLL
#endif

template <typename T> struct alignas(16) Vec16 {
    T v[16 / sizeof(T)];
};

// Where a 16-byte access is about to happen. The CPU harness (tests/harness/device.h) faults a
// misaligned address there, as the GPU does (cudaErrorMisalignedAddress), and counts the accesses.
#ifndef VFM_VECTOR_ACCESS
#define VFM_VECTOR_ACCESS(p) ((void)0)
#endif

// Host: whether every pointer is 16-byte aligned (NULL counts as aligned: an absent operand).
static inline bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }
template <typename... P> static inline int vec_ok(const P *...p) { return (aligned16(p) && ...); }
// Host: vec_ok for row kernels, whose rows of D elements of T start at p + r·D: also D·sizeof(T) a
// multiple of 16, so that every row starts aligned.
template <typename T, typename... P> static inline int vec_rows_ok(int64_t D, const P *...p) {
    return (D * (int64_t)sizeof(T)) % 16 == 0 && vec_ok(p...);
}

template <int N> __host__ __device__ __forceinline__ int64_t chunks_of(int64_t n) { return (n + N - 1) / N; }

// Elements [c·N, c·N + N) of p[n] into v (past n: zero). N·sizeof(T) is a multiple of 16.
template <int N, typename T> __device__ __forceinline__ void chunk_read(T *v, const T *p, int64_t c, int64_t n, int vec) {
    constexpr int P = 16 / sizeof(T);
    int64_t i = c * N;
#if VFM_HARNESS_BREAK == BREAK_VECTOR_TAIL  // the must-fail build reads a short last chunk with 16 bytes
    if (vec && i < n) {
#else
    if (vec && i + N <= n) {
#endif
        UNROLL
        for (int a = 0; a < N; a += P) {
            VFM_VECTOR_ACCESS(p + i + a);
            Vec16<T> x = *reinterpret_cast<const Vec16<T> *>(p + i + a);
            UNROLL
            for (int k = 0; k < P; k++) v[a + k] = x.v[k];
        }
        return;
    }
    UNROLL
    for (int k = 0; k < N; k++) v[k] = i + k < n ? p[i + k] : from_f32<T>(0.f);
}

// v into elements [c·N, c·N + N) ∩ [0, n) of p.
template <int N, typename T> __device__ __forceinline__ void chunk_write(T *p, const T *v, int64_t c, int64_t n, int vec) {
    constexpr int P = 16 / sizeof(T);
    int64_t i = c * N;
    if (vec && i + N <= n) {
        UNROLL
        for (int a = 0; a < N; a += P) {
            Vec16<T> x;
            UNROLL
            for (int k = 0; k < P; k++) x.v[k] = v[a + k];
            VFM_VECTOR_ACCESS(p + i + a);
            *reinterpret_cast<Vec16<T> *>(p + i + a) = x;
        }
        return;
    }
    UNROLL
    for (int k = 0; k < N; k++)
        if (i + k < n) p[i + k] = v[k];
}

// How many elements of chunk c of an array of n lie inside it (N for all but a short last chunk).
template <int N> __device__ __forceinline__ int chunk_len(int64_t c, int64_t n) {
    int64_t left = n - c * N;
    return left < N ? (int)left : N;
}

// The pointwise kernels' chunk: out = f(a) (map1_chunk) or f(a, b) (map2_chunk) element by element
// in f32, rounded once on the store, on chunk c of n elements. out may alias a or b.
template <typename T, class F>
__device__ __forceinline__ void map1_chunk(T *out, const T *a, int64_t c, int64_t n, int vec, F f) {
    constexpr int W = VEC(T);
    T x[W];
    chunk_read<W>(x, a, c, n, vec);
    UNROLL
    for (int k = 0; k < W; k++) x[k] = from_f32<T>(f(to_f32(x[k])));
    chunk_write<W>(out, x, c, n, vec);
}
template <typename T, class F>
__device__ __forceinline__ void map2_chunk(T *out, const T *a, const T *b, int64_t c, int64_t n, int vec, F f) {
    constexpr int W = VEC(T);
    T x[W], y[W];
    chunk_read<W>(x, a, c, n, vec);
    chunk_read<W>(y, b, c, n, vec);
    UNROLL
    for (int k = 0; k < W; k++) x[k] = from_f32<T>(f(to_f32(x[k]), to_f32(y[k])));
    chunk_write<W>(out, x, c, n, vec);
}

// d·ema + one_minus·param, the CPU's expression with explicitly rounded operations (op_ema_update
// and the step-gated EMA of step.cu).
__device__ __forceinline__ float ema_value(float e, float p, float d, float one_minus) {
    return __fadd_rn(__fmul_rn(d, e), __fmul_rn(one_minus, p));
}

// ---- launch geometry --------------------------------------------------------------------------

#define CUDA_THREADS 256
// Blocks for a grid-stride loop over n items (capped: the loop covers the rest).
static inline unsigned cuda_blocks(int64_t n, int threads = CUDA_THREADS) {
    int64_t b = (n + threads - 1) / threads;
    if (b < 1) b = 1;
    if (b > 8192) b = 8192;
    return (unsigned)b;
}
#define GRID_STRIDE(i, n)                                                                       \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

// Rows of a [rows, D] tensor, one warp per row: blocks of dim3(32, ROW_WARPS) threads, ROW_STRIDE
// gives each warp its rows (threadIdx.y), and its lanes take the chunks of the row (LANE_CHUNKS).
#define ROW_WARPS 8
static inline dim3 row_warp_block(void) { return dim3(32, ROW_WARPS); }
static inline unsigned row_warp_grid(int64_t rows) { return cuda_blocks(rows, ROW_WARPS); }
#define ROW_STRIDE(r, rows)                                                                              \
    for (int64_t r = (int64_t)blockIdx.x * blockDim.y + threadIdx.y; r < (rows); r += (int64_t)gridDim.x * blockDim.y)
#define LANE_CHUNKS(c, chunks) for (int64_t c = threadIdx.x; c < (chunks); c += 32)

// ---- fixed-order reductions -------------------------------------------------------------------
// Every thread contributes one value; the result (valid in every thread) is the same for the same
// inputs and block size: warps reduce with a fixed butterfly, then warp 0 adds the warp sums in
// order. blockDim.x must be a multiple of 32 (≤ 1024); every thread of the block must call it.

template <typename V> __device__ __forceinline__ V warp_sum(V v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

template <typename V> __device__ V block_sum(V v) {
    __shared__ V warp_part[32];
    __shared__ V total;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
    v = warp_sum(v);
    __syncthreads();  // warp_part may still be read by a previous call
    if (lane == 0) warp_part[warp] = v;
#if VFM_HARNESS_BREAK != BREAK_NO_BARRIER  // the must-fail build drops this barrier (cuda_launch.h)
    __syncthreads();
#endif
    if (threadIdx.x == 0) {
        V s = warp_part[0];
        for (int w = 1; w < warps; w++) s += warp_part[w];
        total = s;
    }
    __syncthreads();
    return total;
}

__device__ __forceinline__ float block_max(float v) {
    __shared__ float warp_part[32];
    __shared__ float total;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) warp_part[warp] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        float m = warp_part[0];
        for (int w = 1; w < warps; w++) m = fmaxf(m, warp_part[w]);
        total = m;
    }
    __syncthreads();
    return total;
}

// ---- masked per-row losses (defined in edm.cu; the weighted MSE and the DDPM VB term) -----------
// A loss kernel first writes, per row s, term[s] (mask·w·mean_c of the row's values, in double; 0 on
// padding and mask-0 rows, whose values are never read) and masks[s] (the row's mask, 0 on padding).
#define ROW_TERMS_THREADS 1024
// totals[0] = Σ term (0 when term is NULL), totals[1] = Σ masks: one block of ROW_TERMS_THREADS
// threads, fixed order.
__global__ void row_terms_total_kernel(const double *term, const double *masks, int64_t S, double *totals);
// loss[0] = totals[0] / totals[1] (0 without a real row): <<<1, 1>>>.
__global__ void row_terms_loss_kernel(float *loss, const double *totals);
// One block per sample b (<<<B, CUDA_THREADS>>>): sample_sum[b] = Σ term and sample_count[b] = Σ masks
// over the rows mapped to it, in a fixed order; either output may be NULL, term may be NULL.
__global__ void row_terms_sample_kernel(float *sample_sum, float *sample_count, const double *term,
                                        const double *masks, const int32_t *t2s, int64_t S);

// ---- column sums over rows (deterministic) -----------------------------------------------------
// out[b, c] += Σ over the rows r of sample b of term(r, c), for up to two outputs at once: the
// per-sample gradients (dshift, dscale, dgate: tok2sample given, B samples) and the sums over all
// rows (bias and RMSNorm weight gradients: tok2sample NULL, B = 1). A sample's rows are found as
// [first, last] row with its index (integer atomics: the result does not depend on the order) and
// split into K pieces, K a function of the shape only; a block of 32 columns × 8 row lanes sums one
// piece, each lane in row order in f32, the lanes in order; a second kernel adds the K pieces in
// order to out. No floating-point atomics: the same inputs give the same bits.
// Terms: a functor with `__device__ void operator()(int64_t row, int64_t col, float *t) const`
// writing NOUT values.

#define COLSUM_LANES 8

__global__ void sample_ranges_init_kernel(int *ranges, int B);
__global__ void sample_ranges_kernel(const int32_t *t2s, int64_t rows, int B, int *ranges);

template <int NOUT, class Terms>
__global__ void column_sums_partial_kernel(Terms terms, int64_t rows, const int32_t *t2s, const int *ranges,
                                           int64_t D, int B, int K, float *partial) {
    int64_t col = (int64_t)blockIdx.x * 32 + threadIdx.x;
    int b = blockIdx.y, k = blockIdx.z;
    int64_t lo = 0, hi = rows;  // [lo, hi)
    if (t2s) {
        lo = ranges[2 * b];
        hi = (int64_t)ranges[2 * b + 1] + 1;
        if (lo >= hi) lo = hi = 0;
    }
    float acc[NOUT];
    for (int j = 0; j < NOUT; j++) acc[j] = 0.f;
    if (col < D) {
        int64_t n = hi - lo, r0 = lo + n * k / K, r1 = lo + n * (k + 1) / K;
        for (int64_t r = r0 + threadIdx.y; r < r1; r += COLSUM_LANES) {
            if (t2s && t2s[r] != b) continue;
            float t[NOUT];
            terms(r, col, t);
            for (int j = 0; j < NOUT; j++) acc[j] += t[j];
        }
    }
    __shared__ float lane_sum[NOUT][COLSUM_LANES][33];
    for (int j = 0; j < NOUT; j++) lane_sum[j][threadIdx.y][threadIdx.x] = acc[j];
    __syncthreads();
    if (threadIdx.y == 0 && col < D) {
        for (int j = 0; j < NOUT; j++) {
            float s = lane_sum[j][0][threadIdx.x];
            for (int y = 1; y < COLSUM_LANES; y++) s += lane_sum[j][y][threadIdx.x];
            partial[(((int64_t)j * K + k) * B + b) * D + col] = s;
        }
    }
}

// out[b, c] += Σ_k partial[j][k][b][c], k in order: grid (column tiles, samples).
template <typename O>
__global__ void column_sums_finish_kernel(const float *partial, int j, int K, int B, int64_t D, O *out) {
    int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, b = blockIdx.y;
    if (c >= D) return;
    float s = 0.f;
    for (int k = 0; k < K; k++) s += partial[(((int64_t)j * K + k) * B + b) * D + c];
    out[b * D + c] = from_f32<O>(to_f32(out[b * D + c]) + s);
}

// Launches the sums: out0 (and out1 when NOUT == 2) [B, D] += column sums of the terms over the
// rows of each sample (t2s [rows], or NULL for all rows with B = 1). An output may be NULL.
template <int NOUT, class Terms, typename O>
vfm_status column_sums_launch(const Terms &terms, int64_t rows, const int32_t *t2s, int B, int64_t D, O *out0,
                              O *out1) {
    int *ranges = NULL;
    if (t2s) {
        VFM_TRY(cuda_scratch(SCRATCH_REDUCE2, (size_t)2 * B * sizeof(int), (void **)&ranges));
        CUDA_LAUNCH(sample_ranges_init_kernel, cuda_blocks(B), CUDA_THREADS, 0, ranges, B);
        CUDA_LAUNCH(sample_ranges_kernel, cuda_blocks(rows), CUDA_THREADS, 0, t2s, rows, B, ranges);
    }
    int64_t col_tiles = (D + 31) / 32;
    int64_t k = 512 / (col_tiles * B);
    if (k > 64) k = 64;
    if (k > rows) k = rows;
    if (k < 1) k = 1;
    int K = (int)k;
    float *partial = NULL;
    VFM_TRY(cuda_scratch(SCRATCH_REDUCE, (size_t)NOUT * K * B * D * sizeof(float), (void **)&partial));
    dim3 grid((unsigned)col_tiles, (unsigned)B, (unsigned)K), block(32, COLSUM_LANES);
    CUDA_LAUNCH((column_sums_partial_kernel<NOUT, Terms>), grid, block, 0, terms, rows, t2s, ranges, D, B, K, partial);
    O *outs[2] = {out0, out1};
    for (int j = 0; j < NOUT; j++)
        if (outs[j])
            CUDA_LAUNCH(column_sums_finish_kernel<O>, dim3((unsigned)((D + CUDA_THREADS - 1) / CUDA_THREADS), (unsigned)B),
                        CUDA_THREADS, 0, partial, j, K, B, D, outs[j]);
    return VFM_OK;
}

// column_sums_launch for op (its tensor desc named in errors: these kernels serve several ops).
template <int NOUT, class Terms, typename O>
vfm_status column_sums(const char *op, const Tensor *desc, const Terms &terms, int64_t rows, const int32_t *t2s, int B,
                       int64_t D, O *out0, O *out1) {
    if (B <= 0 || D <= 0 || rows <= 0) return VFM_OK;
    vfm_status s = column_sums_launch<NOUT, Terms, O>(terms, rows, t2s, B, D, out0, out1);
    if (s == VFM_OK) return VFM_OK;
    char d[128];
    return vfm_fail_context(s, "%s (%s)", op, tensor_describe(desc, d, sizeof d));
}

#endif
