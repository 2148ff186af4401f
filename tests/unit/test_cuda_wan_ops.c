/* GPU: Wan's ops (3-D RoPE, RMSNorm over a row split across ranks) against the CPU oracle on the
 * same inputs, in f32 and bf16, forward and backward; the weight gradient's sum twice gives the same
 * bits. Skipped without a CUDA device (the harness suite runs them on the CPU). */
#include <math.h>
#include <stdlib.h>

#include "gpu_pair.h"
#include "ops/ops.h"
#include "test.h"

static const DType DTS[2] = {DT_F32, DT_BF16};
#define BOTH(cpu_call, gpu_call)  \
    do {                          \
        REQUIRE_OK(cpu_call);     \
        REQUIRE_OK(gpu_call);     \
    } while (0)

TEST(cuda_rope_3d_matches_cpu) {
    NEED_GPU();
    enum { N = 7, H = 3, HD = 16 };
    int32_t pos[N * 3] = {0, 0, 0, 1, 2, 3, 4, 0, 7, 2, 5, 1, 9, 9, 9, 30, 17, 44, 3, 3, 0};
    for (int di = 0; di < 2; di++) {
        DType dt = DTS[di];
        Pair x = PAIR_RAND(dt, 51, -2, 2, N, H, HD), y = PAIR_ZEROS(dt, N, H, HD);
        IPair p = IPAIR(pos, N, 3);
        for (int inverse = 0; inverse < 2; inverse++) {
            BOTH(op_rope_3d(&y.cpu, &x.cpu, &p.cpu, 10000.0f, inverse), op_rope_3d(&y.gpu, &x.gpu, &p.gpu, 10000.0f, inverse));
            PAIR_CLOSE(inverse ? "rope_3d inverse" : "rope_3d", &y, 1e-6, TOL(dt, 2e-6, 8e-3));
        }
        pair_free(&x), pair_free(&y), ipair_free(&p);
    }
}

TEST(cuda_rmsnorm_split_matches_cpu) {
    NEED_GPU();
    for (int di = 0; di < 2; di++) {
        DType dt = DTS[di];
        int64_t N = 21, d = 40, n = 80; /* this rank's 40 columns of an 80-wide row */
        Pair x = PAIR_RAND(dt, 61, -2, 2, N, d), w = PAIR_RAND(dt, 62, 0.5f, 1.5f, d);
        Pair ss = PAIR_ZEROS(DT_F32, N), rstd = PAIR_ZEROS(DT_F32, N), y = PAIR_ZEROS(dt, N, d);
        BOTH(op_rmsnorm_sumsq(&ss.cpu, &x.cpu), op_rmsnorm_sumsq(&ss.gpu, &x.gpu));
        PAIR_CLOSE("rmsnorm_sumsq (f32)", &ss, 1e-5, 2e-6);
        pair_upload(&ss); /* both sides from the CPU's statistic, as after an all-reduce */
        BOTH(op_rmsnorm_split_forward(&y.cpu, &rstd.cpu, &x.cpu, &w.cpu, &ss.cpu, n, 1e-6f),
             op_rmsnorm_split_forward(&y.gpu, &rstd.gpu, &x.gpu, &w.gpu, &ss.gpu, n, 1e-6f));
        PAIR_CLOSE("rmsnorm_split y", &y, 1e-6, TOL(dt, 2e-6, 8e-3));
        PAIR_CLOSE("rmsnorm_split rstd (f32)", &rstd, 1e-6, 2e-6);
        Pair dy = PAIR_RAND(dt, 63, -1, 1, N, d), dot = PAIR_ZEROS(DT_F32, N), dx = PAIR_ZEROS(dt, N, d);
        Pair dw = PAIR_RAND(DT_F32, 64, -1, 1, d);
        BOTH(op_rmsnorm_dot(&dot.cpu, &dy.cpu, &x.cpu, &w.cpu), op_rmsnorm_dot(&dot.gpu, &dy.gpu, &x.gpu, &w.gpu));
        PAIR_CLOSE("rmsnorm_dot (f32)", &dot, 1e-5, TOL(dt, 2e-6, 1e-2));
        pair_upload(&dot);
        pair_upload(&rstd);
        float *dw0 = pair_copy_host(&dw);
        BOTH(op_rmsnorm_split_backward(&dx.cpu, &dw.cpu, &dy.cpu, &x.cpu, &rstd.cpu, &w.cpu, &dot.cpu, n),
             op_rmsnorm_split_backward(&dx.gpu, &dw.gpu, &dy.gpu, &x.gpu, &rstd.gpu, &w.gpu, &dot.gpu, n));
        PAIR_CLOSE("rmsnorm_split dx", &dx, 1e-5, TOL(dt, 1e-5, 1e-2));
        PAIR_CLOSE("rmsnorm_split dw (f32, +=)", &dw, 1e-5, TOL(dt, 1e-5, 1e-2));
        void *a = pair_snapshot(&dw);
        pair_upload_values(&dw, dw0);
        REQUIRE_OK(op_rmsnorm_split_backward(&dx.gpu, &dw.gpu, &dy.gpu, &x.gpu, &rstd.gpu, &w.gpu, &dot.gpu, n));
        PAIR_SAME_BITS("rmsnorm_split dw", &dw, a);
        free(a), free(dw0);
        pair_free(&x), pair_free(&w), pair_free(&ss), pair_free(&rstd), pair_free(&y);
        pair_free(&dy), pair_free(&dot), pair_free(&dx), pair_free(&dw);
    }
}
