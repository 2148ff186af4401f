// The CPU harness's own tests (names harness_*), with kernels of their own: barriers order the
// threads of a block and a missing one is seen; __shared__ memory is poisoned at each block's start;
// the threads run in varying orders; warp shuffles, votes and atomics; launch sizes the GPU refuses
// are errors naming the kernel; misused barriers and shuffles are faults; a kernel writing past a
// cudaMalloc'd buffer is stopped by AddressSanitizer. Compiled like the .cu files of src/ (device.h
// first), linked only into build/vfm_harness_tests.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ops/cuda/cuda_common.h"
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
