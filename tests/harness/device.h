// The CPU harness, device side: included first (g++ -include) when a .cu file of vfm is compiled a
// second time as host C++ for the tests. It gives the CUDA language what a host compiler lacks —
// the qualifiers, the built-in variables, __syncthreads, warp shuffles and votes, atomics, the
// explicitly rounded arithmetic intrinsics — and defines VFM_KERNEL_LAUNCH (src/ops/cuda/
// cuda_launch.h) to run a launch through the block scheduler of launch.cpp. bf16 is cuda_bf16.h's
// own host code. docs/ops.md ("The CPU harness") says what this proves and what it cannot.
#ifndef VFM_HARNESS_DEVICE_H
#define VFM_HARNESS_DEVICE_H

#ifndef __cplusplus
#error "tests/harness/device.h is for the host-C++ build of the .cu files"
#endif

// Qualifiers: cuda_runtime.h keeps definitions made before it. A __shared__ variable is a static in
// the section vfm_shared: the blocks of a launch run one after another, so one copy serves the
// running block, and the scheduler fills the whole section with a poison pattern at each block's
// start (launch.cpp).
#define __global__
#define __device__
#define __host__
#define __shared__ static __attribute__((section("vfm_shared")))
#define __launch_bounds__(...)

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <tuple>
#include <type_traits>

// ---- built-in variables: the scheduler sets them before it resumes a thread --------------------
extern uint3 threadIdx, blockIdx;
extern dim3 blockDim, gridDim;

namespace vfm_harness {

enum WarpOp { WARP_SYNC = 1, WARP_SHFL, WARP_SHFL_XOR, WARP_SHFL_UP, WARP_SHFL_DOWN, WARP_BALLOT };

// __syncthreads: waits until every thread of the block has arrived.
void barrier(void);
// A warp collective: every lane named in mask (this lane among them) must reach the same op with
// the same mask; returns this lane's result (shuffles: the source lane's value; ballot: the bits
// of the lanes whose value is non-zero). A lane outside the mask, a source lane outside it, or a
// lane that never arrives is a fault of the launch.
uint64_t warp_collective(WarpOp op, unsigned mask, uint64_t value, int arg, int width);

// Runs body(ctx) as every thread of every block; the launch's errors and faults are reported by
// cudaGetLastError (launch.cpp).
void run_kernel(const char *name, const void *kernel, dim3 grid, dim3 block, size_t shmem, cudaStream_t stream,
                void (*body)(void *), void *ctx);

// The kernel's arguments converted to its parameter types, as a call converts them (NULL to a
// pointer, int64_t to int), and copied once as the launch's parameter buffer.
template <typename... P> auto argument_binder(void (*)(P...)) {
    return [](P... p) { return std::tuple<std::decay_t<P>...>(p...); };
}

template <typename... P>
void launch(const char *name, void (*kernel)(P...), dim3 grid, dim3 block, size_t shmem, cudaStream_t stream,
            std::tuple<std::decay_t<P>...> params) {
    struct Call {
        void (*kernel)(P...);
        std::tuple<std::decay_t<P>...> *params;
    } call = {kernel, &params};
    // each thread calls the kernel with its own copy of the parameters
    run_kernel(name, (const void *)kernel, grid, block, shmem, stream,
               [](void *c) { std::apply(((Call *)c)->kernel, *((Call *)c)->params); }, &call);
}

template <typename T> uint64_t to_bits(T v) {
    static_assert(sizeof(T) <= 8, "warp shuffles move at most 8 bytes");
    uint64_t b = 0;
    memcpy(&b, &v, sizeof v);
    return b;
}
template <typename T> T from_bits(uint64_t b) {
    T v;
    memcpy(&v, &b, sizeof v);
    return v;
}

// A 16-byte access of a kernel at p (src/ops/cuda/cuda_common.h, VFM_VECTOR_ACCESS): an address that
// is not a multiple of 16 is a fault of the launch, as on the GPU (cudaErrorMisalignedAddress), and
// the thread goes no further; every access is counted (vector_accesses, for the harness's tests).
void vector_access(const void *p);
uint64_t vector_accesses(void);

}  // namespace vfm_harness

#define VFM_VECTOR_ACCESS(p) vfm_harness::vector_access(p)

#define VFM_KERNEL_LAUNCH(kernel, grid, block, shmem, stream, ...)                     \
    vfm_harness::launch(#kernel, kernel, grid, block, shmem, stream,                   \
                        vfm_harness::argument_binder(kernel)(__VA_ARGS__))

// ---- synchronisation, shuffles, votes ----------------------------------------------------------
static inline void __syncthreads(void) { vfm_harness::barrier(); }
static inline void __syncwarp(unsigned mask = 0xffffffffu) {
    vfm_harness::warp_collective(vfm_harness::WARP_SYNC, mask, 0, 0, 32);
}
template <typename T> static inline T __shfl_sync(unsigned mask, T v, int src_lane, int width = 32) {
    using namespace vfm_harness;
    return from_bits<T>(warp_collective(WARP_SHFL, mask, to_bits(v), src_lane, width));
}
template <typename T> static inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
    using namespace vfm_harness;
    return from_bits<T>(warp_collective(WARP_SHFL_XOR, mask, to_bits(v), lane_mask, width));
}
template <typename T> static inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
    using namespace vfm_harness;
    return from_bits<T>(warp_collective(WARP_SHFL_UP, mask, to_bits(v), (int)delta, width));
}
template <typename T> static inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
    using namespace vfm_harness;
    return from_bits<T>(warp_collective(WARP_SHFL_DOWN, mask, to_bits(v), (int)delta, width));
}
static inline unsigned __ballot_sync(unsigned mask, int pred) {
    return (unsigned)vfm_harness::warp_collective(vfm_harness::WARP_BALLOT, mask, pred != 0, 0, 32);
}
static inline int __any_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) != 0; }
static inline int __all_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) == mask; }

// ---- atomics (the blocks run on one host thread; these are real atomics all the same) ----------
#define VFM_HARNESS_ATOMIC_INT(T)                                                                       \
    static inline T atomicAdd(T *p, T v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }          \
    static inline T atomicSub(T *p, T v) { return __atomic_fetch_sub(p, v, __ATOMIC_SEQ_CST); }          \
    static inline T atomicExch(T *p, T v) { return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST); }        \
    static inline T atomicCAS(T *p, T expect, T v) {                                                    \
        __atomic_compare_exchange_n(p, &expect, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);          \
        return expect;                                                                                  \
    }                                                                                                   \
    static inline T atomicMin(T *p, T v) {                                                              \
        T old = __atomic_load_n(p, __ATOMIC_SEQ_CST);                                                   \
        while (v < old && !__atomic_compare_exchange_n(p, &old, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) \
            ;                                                                                           \
        return old;                                                                                     \
    }                                                                                                   \
    static inline T atomicMax(T *p, T v) {                                                              \
        T old = __atomic_load_n(p, __ATOMIC_SEQ_CST);                                                   \
        while (v > old && !__atomic_compare_exchange_n(p, &old, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) \
            ;                                                                                           \
        return old;                                                                                     \
    }
VFM_HARNESS_ATOMIC_INT(int)
VFM_HARNESS_ATOMIC_INT(unsigned)
VFM_HARNESS_ATOMIC_INT(unsigned long long)
VFM_HARNESS_ATOMIC_INT(long long)
#undef VFM_HARNESS_ATOMIC_INT

template <typename F> static inline F vfm_harness_atomic_add_float(F *p, F v) {
    F old, sum;
    __atomic_load(p, &old, __ATOMIC_SEQ_CST);
    do sum = old + v;
    while (!__atomic_compare_exchange(p, &old, &sum, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
    return old;
}
static inline float atomicAdd(float *p, float v) { return vfm_harness_atomic_add_float(p, v); }
static inline double atomicAdd(double *p, double v) { return vfm_harness_atomic_add_float(p, v); }

// ---- arithmetic intrinsics (the host build uses -ffp-contract=off: no fused multiply-add) -------
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __frcp_rn(float a) { return 1.f / a; }
static inline float __fsqrt_rn(float a) { return sqrtf(a); }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dsub_rn(double a, double b) { return a - b; }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline double __ddiv_rn(double a, double b) { return a / b; }
// (__expf and __logf: glibc's own, the exact functions)
static inline float rsqrtf(float a) { return 1.f / sqrtf(a); }
template <typename T> static inline T __ldg(const T *p) { return *p; }
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
static inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
static inline long long min(long long a, long long b) { return a < b ? a : b; }
static inline long long max(long long a, long long b) { return a > b ? a : b; }
static inline long min(long a, long b) { return a < b ? a : b; }
static inline long max(long a, long b) { return a > b ? a : b; }

#endif
