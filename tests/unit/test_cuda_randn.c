/* GPU: the Philox normal fill gives the same bits on the GPU as on the CPU (design §3), for f32
 * and (rounded once) bf16. Skipped without a CUDA device (the harness suite runs them on the CPU). */
#include <stdlib.h>
#include <string.h>

#include "core/philox.h"
#include "ops/ops.h"
#include "test.h"

TEST(cuda_randn_fill_bit_identical_to_cpu) {
    NEED_GPU();
    const int64_t n = 1 << 20;
    float *cpu = malloc((size_t)n * sizeof(float)), *back = malloc((size_t)n * sizeof(float));
    uint16_t *back16 = malloc((size_t)n * sizeof(uint16_t));
    Tensor c = TF32(cpu, n), g, g16;
    REQUIRE_OK(tensor_alloc(&g, DT_F32, DEV_CUDA, 1, &n));
    REQUIRE_OK(tensor_alloc(&g16, DT_BF16, DEV_CUDA, 1, &n));
    const uint64_t seeds[2] = {1234, 0x123456789abcdefull};
    for (int k = 0; k < 2; k++) {
        REQUIRE_OK(op_randn_fill(&c, seeds[k], RNG_STREAM_NOISE, 77, 0xfeedface12345ull, 3 + k, 0.5f));
        REQUIRE_OK(op_randn_fill(&g, seeds[k], RNG_STREAM_NOISE, 77, 0xfeedface12345ull, 3 + k, 0.5f));
        REQUIRE_OK(op_randn_fill(&g16, seeds[k], RNG_STREAM_NOISE, 77, 0xfeedface12345ull, 3 + k, 0.5f));
        REQUIRE_OK(device_memcpy(back, DEV_CPU, g.data, DEV_CUDA, (size_t)n * sizeof(float)));
        REQUIRE_OK(device_memcpy(back16, DEV_CPU, g16.data, DEV_CUDA, (size_t)n * sizeof(uint16_t)));
        int64_t diff = 0, diff16 = 0;
        for (int64_t i = 0; i < n; i++) {
            diff += memcmp(&cpu[i], &back[i], sizeof(float)) != 0;
            diff16 += back16[i] != bf16_from_f32(cpu[i]);
        }
        CHECK_MSG(diff == 0, "seed %d: %lld of %lld f32 values differ between CPU and GPU", k, (long long)diff, (long long)n);
        CHECK_MSG(diff16 == 0, "seed %d: %lld bf16 values differ", k, (long long)diff16);
    }
    tensor_free(&g);
    tensor_free(&g16);
    free(cpu), free(back), free(back16);
}
