/* GPU: the NCCL backend's ordered row sum (comm_nccl.cu's kernel, which adds the ranks' rows in a
 * fixed order) gives the bits of its CPU twin comm_sum_rows_ordered, in f32, f64 and bf16 (each
 * addition rounded to bf16: the TP partial sums of bf16 activations), on data whose sum depends on
 * the order. Needs a CUDA device and a build with the NCCL backend, not NCCL itself.
 * Skipped without a CUDA device (the harness suite runs it on the CPU). */
#include <stdlib.h>
#include <string.h>

#include "core/cuda_runtime_shim.h"
#include "parallel/comm_internal.h"
#include "test.h"

/* The rows summed on the GPU (es bytes per element) into got. */
static void gpu_sum(void *got, const void *rows, int n_rows, int64_t count, size_t es, DType dt) {
    void *d_rows = NULL, *d_out = NULL;
    REQUIRE_OK(vfm_cuda_malloc((size_t)n_rows * count * es, &d_rows));
    REQUIRE_OK(vfm_cuda_malloc((size_t)count * es, &d_out));
    REQUIRE_OK(vfm_cuda_memcpy(d_rows, 1, rows, 0, (size_t)n_rows * count * es));
    CHECK_OK(nccl_sum_rows_ordered(d_out, d_rows, n_rows, count, dt));
    CHECK_OK(vfm_cuda_memcpy(got, 0, d_out, 1, (size_t)count * es));
    vfm_cuda_free(d_rows), vfm_cuda_free(d_out);
}

TEST(cuda_nccl_ordered_sum_kernel_matches_cpu_bits) {
    NEED_GPU();
#ifndef VFM_NCCL
    SKIP("this build has no NCCL backend");
#endif
    const int rows = 5;
    const int64_t count = 4099;
    float *x = malloc(rows * count * sizeof *x), *cpu = malloc(count * sizeof *x), *gpu = malloc(count * sizeof *x);
    double *x64 = malloc(rows * count * sizeof *x64), *cpu64 = malloc(count * sizeof *x64);
    double *gpu64 = malloc(count * sizeof *x64);
    REQUIRE(x && cpu && gpu && x64 && cpu64 && gpu64);
    test_fill_order_sensitive_f32(x, rows * count, 11);
    for (int64_t i = 0; i < rows * count; i++) x64[i] = (double)x[i] * (1.0 + 1e-9 * (double)(i % 7));
    comm_sum_rows_ordered(cpu, x, rows, count, DT_F32);
    comm_sum_rows_ordered(cpu64, x64, rows, count, DT_F64);
    gpu_sum(gpu, x, rows, count, sizeof *x, DT_F32);
    gpu_sum(gpu64, x64, rows, count, sizeof *x64, DT_F64);
    CHECK_MSG(memcmp(gpu, cpu, count * sizeof *x) == 0, "GPU ordered sum f32: not the CPU's bits");
    CHECK_MSG(memcmp(gpu64, cpu64, count * sizeof *x64) == 0, "GPU ordered sum f64: not the CPU's bits");
    uint16_t *x16 = malloc(rows * count * sizeof *x16), *cpu16 = malloc(count * sizeof *x16);
    uint16_t *gpu16 = malloc(count * sizeof *x16);
    REQUIRE(x16 && cpu16 && gpu16);
    for (int64_t i = 0; i < rows * count; i++) x16[i] = bf16_from_f32(x[i] * (float)(1 + i % 3)); /* all exponents */
    REQUIRE_OK(comm_sum_rows_ordered(cpu16, x16, rows, count, DT_BF16));
    gpu_sum(gpu16, x16, rows, count, sizeof *x16, DT_BF16);
    CHECK_MSG(memcmp(gpu16, cpu16, count * sizeof *x16) == 0, "GPU ordered sum bf16: not the CPU's bits");
    int64_t rounded = 0; /* the data makes the per-addition rounding matter: not the f32 sum rounded once */
    for (int64_t i = 0; i < count; i++) {
        float f = 0;
        for (int r = 0; r < rows; r++) f += f32_from_bf16(x16[(int64_t)r * count + i]);
        rounded += bf16_from_f32(f) != cpu16[i];
    }
    CHECK_MSG(rounded > count / 20, "only %lld of %lld bf16 sums depend on rounding each addition", (long long)rounded,
              (long long)count);
    free(x16), free(cpu16), free(gpu16);
    free(x), free(cpu), free(gpu), free(x64), free(cpu64), free(gpu64);
}
