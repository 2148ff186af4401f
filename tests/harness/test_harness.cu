// The CPU harness's own tests (names harness_*), with kernels of their own: barriers order the
// threads of a block and a missing one is seen; __shared__ memory is poisoned at each block's start;
// the threads run in varying orders; warp shuffles, votes and atomics; launch sizes the GPU refuses
// are errors naming the kernel; misused barriers and shuffles are faults; a kernel writing past a
// cudaMalloc'd buffer is stopped by AddressSanitizer; a misaligned 16-byte access is a fault, and the
// streaming kernels use 16-byte accesses exactly where their tensors allow. Compiled like the .cu
// files of src/ (device.h first), linked only into build/vfm_harness_tests.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ops/cuda/cuda_common.h"
#include "ops/ops.h"
extern "C" {
#include "../unit/test.h"
}

// ---- kernels ---------------------------------------------------------------------------------

// out[b·n + t] = 3·((t+1) % n) + 1 through shared memory, with (barrier = 1) or without the barrier
// between the writes and the reads.
__global__ void rotate_kernel(int *out, int barrier) {
    __shared__ int s[1024];
    int t = threadIdx.x, n = blockDim.x;
    s[t] = 3 * t + 1;
    if (barrier) __syncthreads();
    out[blockIdx.x * n + t] = s[(t + 1) % n];
}

// Block b reads its shared word before anyone writes it, then writes it (for the next block).
__global__ void read_before_write_kernel(unsigned *out) {
    __shared__ unsigned word;
    if (threadIdx.x == 0) out[blockIdx.x] = word;
    __syncthreads();
    if (threadIdx.x == 0) word = 7;
}

// seq[b·n + t]: the rank at which thread t of block b first ran.
__global__ void first_run_kernel(int *seq, int *counters) {
    seq[blockIdx.x * blockDim.x + threadIdx.x] = atomicAdd(&counters[blockIdx.x], 1);
}

// Per warp: the butterfly sum of the lane numbers, a ballot, shfl / shfl_up / shfl_down, and a
// shuffle among the lower half-warp only (its mask).
__global__ void warp_kernel(float *sum, unsigned *ballot, int *moved) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    float v = (float)lane;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    sum[threadIdx.x] = v;
    unsigned b = __ballot_sync(0xffffffffu, lane % 3 == 0);
    if (lane == 0) ballot[w] = b;
    int x = 100 * w + lane;
    moved[3 * threadIdx.x + 0] = __shfl_sync(0xffffffffu, x, 5);
    moved[3 * threadIdx.x + 1] = __shfl_up_sync(0xffffffffu, x, 2);
    moved[3 * threadIdx.x + 2] = __shfl_down_sync(0xffffffffu, x, 2);
    if (lane < 16) moved[3 * threadIdx.x] += 1000 * __shfl_sync(0x0000ffffu, lane, 3);
}

// The lower half-warp reads lane 20, which its mask leaves out.
__global__ void bad_shuffle_kernel(int *out) {
    int lane = threadIdx.x & 31;
    if (lane < 16) out[lane] = __shfl_sync(0x0000ffffu, lane, 20);
}

// Half the block leaves before the barrier the other half waits in.
__global__ void divergent_barrier_kernel(int *out) {
    if (threadIdx.x < 16) return;
    __syncthreads();
    out[threadIdx.x] = 1;
}

__global__ void noop_kernel(int *out) {
    if (out && threadIdx.x == 0 && blockIdx.x == 0) out[0] = 1;
}

// Every thread writes x[i] for i up to n inclusive: one element past a buffer of n.
__global__ void one_past_kernel(float *x, int n) {
    for (int i = threadIdx.x; i <= n; i += blockDim.x) x[i] = 1.f;
}

__global__ void atomics_kernel(int *count, unsigned long long *least, int *most) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    atomicAdd(count, 1);
    atomicMin(least, (unsigned long long)(1000 + (i * 7919) % 997));
    atomicMax(most, (i * 31) % 1009);
}

// ---- helpers -----------------------------------------------------------------------------------

template <typename T> static T *device_array(size_t n) {
    void *p = NULL;
    if (cudaMalloc(&p, n * sizeof(T)) != cudaSuccess) return NULL;
    cudaMemset(p, 0, n * sizeof(T));
    return (T *)p;
}

template <typename T> static void to_host(T *host, const T *dev, size_t n) {
    CHECK(cudaMemcpy(host, dev, n * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
}

// cudaGetLastError is e and its string holds every one of the words.
static void expect_error(cudaError_t e, const char *w1, const char *w2) {
    cudaError_t got = cudaGetLastError();
    const char *msg = cudaGetErrorString(got);
    CHECK_MSG(got == e, "error %d (%s), expected %d", (int)got, msg, (int)e);
    CHECK_MSG(strstr(msg, w1) && (!w2 || strstr(msg, w2)), "message \"%s\" lacks \"%s\" / \"%s\"", msg, w1,
              w2 ? w2 : "");
}

static vfm_status launch_too_wide(void) {
    CUDA_LAUNCH(noop_kernel, 1, 2048, 0, (int *)NULL);
    return VFM_OK;
}

// ---- tests -------------------------------------------------------------------------------------

TEST(harness_barrier_orders_shared_memory_and_a_missing_one_is_seen) {
    const int blocks = 24, n = 256;
    int *d = device_array<int>(blocks * n), *h = (int *)malloc(blocks * n * sizeof(int));
    REQUIRE(d && h);
    VFM_KERNEL_LAUNCH(rotate_kernel, blocks, n, 0, 0, d, 1);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    to_host(h, d, blocks * n);
    int bad = 0;
    for (int i = 0; i < blocks * n; i++) bad += h[i] != 3 * ((i % n + 1) % n) + 1;
    CHECK_MSG(bad == 0, "with the barrier: %d wrong values", bad);
    VFM_KERNEL_LAUNCH(rotate_kernel, blocks, n, 0, 0, d, 0);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    to_host(h, d, blocks * n);
    int wrong_blocks = 0, poison = 0;
    for (int b = 0; b < blocks; b++) {
        int wrong = 0;
        for (int t = 0; t < n; t++) {
            wrong += h[b * n + t] != 3 * ((t + 1) % n) + 1;
            poison += h[b * n + t] == -1;
        }
        wrong_blocks += wrong > 0;
    }
    CHECK_MSG(wrong_blocks > 0 && poison > 0, "without the barrier: %d of %d blocks wrong, %d poison reads",
              wrong_blocks, blocks, poison);
    cudaFree(d), free(h);
}

TEST(harness_shared_memory_is_poisoned_at_each_block_start) {
    const int blocks = 8;
    unsigned *d = device_array<unsigned>(blocks), h[blocks];
    REQUIRE(d);
    VFM_KERNEL_LAUNCH(read_before_write_kernel, blocks, 64, 0, 0, d);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    to_host(h, d, blocks);
    for (int b = 0; b < blocks; b++) CHECK_MSG(h[b] == 0xffffffffu, "block %d read 0x%08x, not the poison", b, h[b]);
    cudaFree(d);
}

TEST(harness_threads_run_forward_reverse_and_shuffled) {
    const int blocks = 64, n = 128;
    int *seq = device_array<int>(blocks * n), *counters = device_array<int>(blocks);
    int *h = (int *)malloc(blocks * n * sizeof(int));
    REQUIRE(seq && counters && h);
    VFM_KERNEL_LAUNCH(first_run_kernel, blocks, n, 0, 0, seq, counters);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    to_host(h, seq, blocks * n);
    int forward = 0, reverse = 0, other = 0;
    for (int b = 0; b < blocks; b++) {
        int f = 1, r = 1;
        for (int t = 0; t < n; t++) f &= h[b * n + t] == t, r &= h[b * n + t] == n - 1 - t;
        forward += f, reverse += r, other += !f && !r;
    }
    CHECK_MSG(forward > 0 && reverse > 0 && other > 0, "orders over %d blocks: %d forward, %d reverse, %d other",
              blocks, forward, reverse, other);
    cudaFree(seq), cudaFree(counters), free(h);
}

TEST(harness_warp_shuffles_votes_and_atomics) {
    const int n = 64;
    float *sum = device_array<float>(n);
    unsigned *ballot = device_array<unsigned>(2);
    int *moved = device_array<int>(3 * n);
    REQUIRE(sum && ballot && moved);
    VFM_KERNEL_LAUNCH(warp_kernel, 1, n, 0, 0, sum, ballot, moved);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    float hs[n];
    unsigned hb[2];
    int hm[3 * n];
    to_host(hs, sum, n), to_host(hb, ballot, 2), to_host(hm, moved, 3 * n);
    unsigned want_ballot = 0;
    for (int l = 0; l < 32; l += 3) want_ballot |= 1u << l;
    for (int i = 0; i < n; i++) {
        int w = i / 32, lane = i % 32, x = 100 * w + lane;
        CHECK_MSG(hs[i] == 496.f, "thread %d: butterfly sum %g", i, hs[i]);
        int half = lane < 16 ? 3000 : 0;  // the half-warp shuffle from lane 3
        CHECK_MSG(hm[3 * i] == 100 * w + 5 + half, "thread %d: shfl from lane 5 (and 3) gave %d", i, hm[3 * i]);
        CHECK_MSG(hm[3 * i + 1] == (lane < 2 ? x : x - 2), "thread %d: shfl_up gave %d", i, hm[3 * i + 1]);
        CHECK_MSG(hm[3 * i + 2] == (lane >= 30 ? x : x + 2), "thread %d: shfl_down gave %d", i, hm[3 * i + 2]);
    }
    CHECK(hb[0] == want_ballot && hb[1] == want_ballot);
    int *count = device_array<int>(1), *most = device_array<int>(1);
    unsigned long long *least = device_array<unsigned long long>(1), big = ~0ull;
    REQUIRE(count && most && least);
    cudaMemcpy(least, &big, sizeof big, cudaMemcpyHostToDevice);
    VFM_KERNEL_LAUNCH(atomics_kernel, 5, 192, 0, 0, count, least, most);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    int hc, hmost;
    unsigned long long hl;
    to_host(&hc, count, 1), to_host(&hmost, most, 1), to_host(&hl, least, 1);
    int want_most = 0;
    unsigned long long want_least = ~0ull;
    for (int i = 0; i < 5 * 192; i++) {
        if ((i * 31) % 1009 > want_most) want_most = (i * 31) % 1009;
        if (1000ull + (i * 7919) % 997 < want_least) want_least = 1000ull + (i * 7919) % 997;
    }
    CHECK_MSG(hc == 5 * 192 && hl == want_least && hmost == want_most, "atomics: %d %llu %d", hc, hl, hmost);
    cudaFree(sum), cudaFree(ballot), cudaFree(moved), cudaFree(count), cudaFree(most), cudaFree(least);
}

TEST(harness_launch_limits_are_errors_naming_the_kernel) {
    VFM_KERNEL_LAUNCH(noop_kernel, 1, 1025, 0, 0, (int *)NULL);
    expect_error(cudaErrorInvalidConfiguration, "noop_kernel", "1025 threads");
    VFM_KERNEL_LAUNCH(noop_kernel, 1, dim3(1, 1, 65), 0, 0, (int *)NULL);
    expect_error(cudaErrorInvalidConfiguration, "noop_kernel", "z <= 64");
    VFM_KERNEL_LAUNCH(noop_kernel, dim3(1, 65536), 32, 0, 0, (int *)NULL);
    expect_error(cudaErrorInvalidConfiguration, "noop_kernel", "65535");
    VFM_KERNEL_LAUNCH(noop_kernel, 1, 32, 48 * 1024 + 1, 0, (int *)NULL);
    expect_error(cudaErrorInvalidConfiguration, "noop_kernel", "cudaFuncAttributeMaxDynamicSharedMemorySize");
    CHECK(cudaFuncSetAttribute((const void *)noop_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 100 << 10) ==
          cudaSuccess);
    VFM_KERNEL_LAUNCH(noop_kernel, 1, 32, 100 << 10, 0, (int *)NULL);
    CHECK(cudaGetLastError() == cudaSuccess);
    CHECK(cudaFuncSetAttribute((const void *)noop_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 228 << 10) ==
          cudaErrorInvalidValue);
    cudaGetLastError();
    // through vfm's own launch macro: a vfm error naming the kernel and the size
    CHECK(launch_too_wide() != VFM_OK);
    CHECK_MSG(strstr(vfm_last_error(), "noop_kernel") && strstr(vfm_last_error(), "2048 threads"), "%s",
              vfm_last_error());
}

TEST(harness_shuffle_outside_its_mask_is_a_fault) {
    int *d = device_array<int>(32);
    REQUIRE(d);
    VFM_KERNEL_LAUNCH(bad_shuffle_kernel, 1, 32, 0, 0, d);
    expect_error(cudaErrorLaunchFailure, "bad_shuffle_kernel", "not in the mask");
    // the fault is sticky, as on the GPU
    CHECK(cudaDeviceSynchronize() == cudaErrorLaunchFailure);
}

TEST(harness_barrier_after_an_exit_is_a_fault) {
    int *d = device_array<int>(32);
    REQUIRE(d);
    VFM_KERNEL_LAUNCH(divergent_barrier_kernel, 1, 32, 0, 0, d);
    expect_error(cudaErrorLaunchFailure, "divergent_barrier_kernel", "16 have exited");
}

TEST(harness_kernel_writing_past_a_buffer_is_stopped_by_asan) {
    char log[1400];
    snprintf(log, sizeof log, "%s/asan.txt", test_tmpdir());
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {  // the child runs the faulty kernel, its report going to the log
        if (!freopen(log, "w", stderr)) _exit(3);
        float *x = device_array<float>(100);
        VFM_KERNEL_LAUNCH(one_past_kernel, 1, 64, 0, 0, x, 100);
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK_MSG(!(WIFEXITED(status) && WEXITSTATUS(status) == 0), "the kernel wrote past its buffer unnoticed");
    FILE *f = fopen(log, "r");
    REQUIRE(f);
    char text[4096] = {0};
    size_t got = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[got] = 0;
    CHECK_MSG(strstr(text, "heap-buffer-overflow") && strstr(text, "one_past_kernel"), "child's report: %.600s", text);
}

// ---- 16-byte vector accesses (cuda_common.h chunk_read / chunk_write) ----------------------------

// One chunk of 8 bf16 from in to out, with the vector path allowed.
__global__ void vector_copy_kernel(bf16 *out, const bf16 *in) {
    bf16 v[8];
    chunk_read<8>(v, in, 0, 8, 1);
    chunk_write<8>(out, v, 0, 8, 1);
}

TEST(harness_misaligned_vector_access_is_a_fault) {
    bf16 *in = device_array<bf16>(16), *out = device_array<bf16>(16);
    REQUIRE(in && out);
    uint64_t before = vfm_harness::vector_accesses();
    VFM_KERNEL_LAUNCH(vector_copy_kernel, 1, 1, 0, 0, out, in);
    CHECK(cudaGetLastError() == cudaSuccess);
    CHECK_MSG(vfm_harness::vector_accesses() - before == 2, "%llu 16-byte accesses, want 2",
              (unsigned long long)(vfm_harness::vector_accesses() - before));
    VFM_KERNEL_LAUNCH(vector_copy_kernel, 1, 1, 0, 0, out, in + 1);  // 2 bytes past a 16-byte boundary
    expect_error(cudaErrorLaunchFailure, "vector_copy_kernel", "misaligned");
}

// A zero-filled device tensor [rows, cols] of dt, 16-byte aligned or (misaligned) one element past.
struct DevTensor {
    Tensor t;
    void *base;
};
static DevTensor dev_tensor(DType dt, int64_t rows, int64_t cols, int misaligned) {
    DevTensor d;
    size_t elem = dtype_size(dt), bytes = (size_t)(rows * cols + 1) * elem;
    d.base = NULL;
    if (cudaMalloc(&d.base, bytes) != cudaSuccess) d.base = NULL;
    else cudaMemset(d.base, 0, bytes);
    int64_t shape[2] = {rows, cols};
    d.t = tensor_make(d.base ? (char *)d.base + (misaligned ? elem : 0) : NULL, dt, DEV_CUDA, 2, shape);
    return d;
}

// The call succeeds and makes `want` 16-byte accesses on aligned tensors, none on misaligned ones.
static void expect_vector_accesses(const char *what, int misaligned, vfm_status s, uint64_t before, uint64_t want,
                                   int line) {
    uint64_t got = vfm_harness::vector_accesses() - before;
    if (s != VFM_OK) test_fail(__FILE__, line, "%s: %s: %s", what, vfm_status_name(s), vfm_last_error());
    else if (got != (misaligned ? 0 : want))
        test_fail(__FILE__, line, "%s (%s): %llu 16-byte accesses, want %llu", what,
                  misaligned ? "misaligned" : "aligned", (unsigned long long)got,
                  (unsigned long long)(misaligned ? 0 : want));
}
#define EXPECT_VECTOR(what, mis, call, want)                                     \
    do {                                                                         \
        uint64_t before_ = vfm_harness::vector_accesses();                       \
        vfm_status s_ = (call);                                                  \
        expect_vector_accesses((what), (mis), s_, before_, (want), __LINE__);   \
    } while (0)

// The streaming kernels move every whole chunk with 16-byte accesses when their tensors are aligned
// and the row length allows, and none otherwise (test_cuda_ops.c checks both paths' values and bits).
TEST(harness_streaming_kernels_take_the_vector_path_where_aligned) {
    const int32_t pack[13] = {0, 0, 0, 0, -1, -1, 1, 1, 1, 2, 2, -1, -1};  // 9 real rows, 4 padding
    DevTensor t2s = dev_tensor(DT_I32, 13, 1, 0);
    REQUIRE(t2s.base);
    REQUIRE(cudaMemcpy(t2s.t.data, pack, sizeof pack, cudaMemcpyHostToDevice) == cudaSuccess);
    t2s.t.ndim = 1;
    for (int mis = 0; mis < 2; mis++) {
        DevTensor x = dev_tensor(DT_BF16, 37, 66, mis), y = dev_tensor(DT_BF16, 37, 66, mis);
        // 2442 elements: 305 whole chunks of 8, read and written (the last 2 elements one by one)
        EXPECT_VECTOR("gelu_forward bf16 [37,66]", mis, op_gelu_forward(&y.t, &x.t, ACT_GELU_TANH), 2 * 305);
        DevTensor a = dev_tensor(DT_BF16, 13, 80, mis), o = dev_tensor(DT_BF16, 13, 80, mis);
        DevTensor sh = dev_tensor(DT_BF16, 3, 80, mis), sc = dev_tensor(DT_BF16, 3, 80, mis);
        DevTensor mean = dev_tensor(DT_F32, 13, 1, 0), rstd = dev_tensor(DT_F32, 13, 1, 0);
        mean.t.ndim = rstd.t.ndim = 1;
        // 10 chunks a row: a real row reads x, shift, scale and writes y; a padding row writes y
        EXPECT_VECTOR("layernorm_modulate_forward bf16 [13,80]", mis,
                      op_layernorm_modulate_forward(&o.t, &mean.t, &rstd.t, &a.t, &sh.t, &sc.t, &t2s.t, 1e-6f),
                      9 * 4 * 10 + 4 * 10);
        DevTensor b = dev_tensor(DT_BF16, 13, 80, mis);
        // real rows read x, y, gate and write out; padding rows read x and write out
        EXPECT_VECTOR("gated_residual_forward bf16 [13,80]", mis,
                      op_gated_residual_forward(&o.t, &a.t, &b.t, &sh.t, &t2s.t), 9 * 4 * 10 + 4 * 2 * 10);
        DevTensor r = dev_tensor(DT_F32, 21, 128, mis), ry = dev_tensor(DT_F32, 21, 128, mis);
        DevTensor rr = dev_tensor(DT_F32, 21, 1, 0);
        rr.t.ndim = 1;
        EXPECT_VECTOR("rmsnorm_forward f32 [21,128]", mis, op_rmsnorm_forward(&ry.t, &rr.t, &r.t, NULL, 1e-6f),
                      21 * 2 * 32);
        DevTensor p = dev_tensor(DT_F32, 1, 10007, mis), m = dev_tensor(DT_F32, 1, 10007, mis);
        DevTensor v = dev_tensor(DT_F32, 1, 10007, mis), g = dev_tensor(DT_F32, 1, 10007, mis);
        AdamWHyper h = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1, 1.f, NULL};
        // 2501 whole chunks of 4: p, m, v, g read, p, m, v written
        EXPECT_VECTOR("adamw_step f32 [10007]", mis, op_adamw_step(&p.t, &m.t, &v.t, &g.t, &h), 2501 * 7);
        DevTensor hb = dev_tensor(DT_BF16, 1, 10007, mis);
        // 1250 whole chunks of 8: two 16-byte reads of f32, one write of bf16
        EXPECT_VECTOR("convert f32 -> bf16 [10007]", mis, op_convert(&hb.t, &p.t), 1250 * 3);
        DevTensor odd = dev_tensor(DT_BF16, 13, 83, 0), oddy = dev_tensor(DT_BF16, 13, 83, 0);
        // rows of 83 bf16 do not start 16-byte aligned: element by element even on aligned tensors
        EXPECT_VECTOR("layernorm_modulate_forward bf16 [13,83]", 1,
                      op_layernorm_modulate_forward(&oddy.t, &mean.t, &rstd.t, &odd.t, NULL, NULL, &t2s.t, 1e-6f), 0);
        DevTensor *all[] = {&x, &y, &a, &b, &o, &sh, &sc, &mean, &rstd, &r, &ry, &rr, &p, &m, &v, &g, &hb, &odd, &oddy};
        for (DevTensor *d : all) cudaFree(d->base);
    }
    cudaFree(t2s.base);
}
