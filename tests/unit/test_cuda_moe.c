/* GPU: the mixture-of-experts ops (ops.h "mixture of experts"), CUDA against the CPU oracle on the
 * same inputs: the selections give the same slots (ties included), the router's f32 math matches
 * closely, permute is exact, the combine and grouped GEMM match in f32 and within bf16 rounding.
 * Skipped without a CUDA device (the harness suite runs them on the CPU). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_pair.h"
#include "ops/ops.h"
#include "test.h"

#define BOTH(cpu_call, gpu_call) \
    do {                         \
        REQUIRE_OK(cpu_call);    \
        REQUIRE_OK(gpu_call);    \
    } while (0)

enum { S = 13, E = 4, B = 3, C = 7, D = 24, F = 8 };
/* samples in padded slots [0, 6), [6, 9), [9, 13): 4, 3 and 2 real rows */
static const int32_t T2S[S] = {0, 0, 0, 0, -1, -1, 1, 1, 1, 2, 2, -1, -1};
static const int32_t CU_TOK[B + 1] = {0, 6, 9, 13}, CU_CAP[B + 1] = {0, 3, 5, 7};

/* The GPU side of an i32 pair as host values. */
static void ipair_download(const IPair *p, int32_t *out, int64_t n) {
    Tensor h = TI32(out, n);
    Tensor g = p->gpu;
    g.ndim = 1, g.shape[0] = n;
    REQUIRE_OK(tensor_copy(&h, &g));
}

static int same_i32(const char *what, const IPair *p, int64_t n) {
    int32_t got[S * E > E * C ? S * E : E * C];
    ipair_download(p, got, n);
    int ok = memcmp(got, p->h, (size_t)n * sizeof(int32_t)) == 0;
    CHECK_MSG(ok, "%s: the GPU's slots differ from the CPU's", what);
    return ok;
}

TEST(cuda_moe_ops_match_cpu) {
    NEED_GPU();
    int32_t zeros[S * E > E * C ? S * E : E * C];
    memset(zeros, 0, sizeof zeros);
    IPair t2s = IPAIR(T2S, S), cu = IPAIR(CU_TOK, B + 1), cc = IPAIR(CU_CAP, B + 1);
    for (int k = 1; k <= 2; k++) {
        /* router math in f32; a tie between experts 1 and 2 on row 0 and between rows 6 and 8 */
        Pair logits = PAIR_RAND(DT_F32, 200 + k, -2, 2, S, E);
        logits.h[0 * E + 1] = logits.h[0 * E + 2] = 1.5f;
        logits.h[6 * E + 3] = logits.h[8 * E + 3];
        pair_upload(&logits);
        pair_nan_rows(&logits, E, 4, 6);
        Pair probs = PAIR_ZEROS(DT_F32, S, E), lse = PAIR_ZEROS(DT_F32, S), masked = PAIR_ZEROS(DT_F32, S, E);
        BOTH(op_moe_softmax(&probs.cpu, &lse.cpu, &logits.cpu, &t2s.cpu),
             op_moe_softmax(&probs.gpu, &lse.gpu, &logits.gpu, &t2s.gpu));
        PAIR_CLOSE("moe_softmax probs", &probs, 0, 1e-6);
        PAIR_CLOSE("moe_softmax lse", &lse, 0, 1e-6);
        pair_upload(&probs); /* both sides select from the same bits */
        pair_upload(&lse);
        int kk = k == 1 ? E : k; /* k = 1: expert choice's all-candidates mask */
        BOTH(op_moe_topk_mask(&masked.cpu, &probs.cpu, &t2s.cpu, kk),
             op_moe_topk_mask(&masked.gpu, &probs.gpu, &t2s.gpu, kk));
        float got[S * E];
        pair_download(&masked, got);
        CHECK_MSG(memcmp(got, masked.h, sizeof got) == 0, "moe_topk_mask: the GPU's mask differs from the CPU's");
        IPair st = IPAIR(zeros, E, C), ts = IPAIR(zeros, S, E);
        Pair sw = PAIR_ZEROS(DT_F32, E, C);
        BOTH(op_moe_topc(&st.cpu, &sw.cpu, &ts.cpu, &masked.cpu, &cu.cpu, &cc.cpu),
             op_moe_topc(&st.gpu, &sw.gpu, &ts.gpu, &masked.gpu, &cu.gpu, &cc.gpu));
        same_i32("moe_topc slot_tok", &st, E * C);
        same_i32("moe_topc tok_slot", &ts, S * E);
        PAIR_CLOSE("moe_topc slot_w", &sw, 0, 0);
        Pair losses = PAIR_ZEROS(DT_F32, 2);
        BOTH(op_moe_router_losses(&losses.cpu, &probs.cpu, &lse.cpu, &masked.cpu, &t2s.cpu, kk),
             op_moe_router_losses(&losses.gpu, &probs.gpu, &lse.gpu, &masked.gpu, &t2s.gpu, kk));
        PAIR_CLOSE("moe_router_losses", &losses, 0, 1e-6);
        Pair dw = PAIR_RAND(DT_F32, 210 + k, -1, 1, E * C), dl = PAIR_ZEROS(DT_F32, S, E);
        BOTH(op_moe_router_backward(&dl.cpu, &dw.cpu, &ts.cpu, &probs.cpu, &lse.cpu, &masked.cpu, &t2s.cpu, kk, 0.3f,
                                    0.2f),
             op_moe_router_backward(&dl.gpu, &dw.gpu, &ts.gpu, &probs.gpu, &lse.gpu, &masked.gpu, &t2s.gpu, kk, 0.3f,
                                    0.2f));
        PAIR_CLOSE("moe_router_backward", &dl, 1e-7, 1e-6);
        for (int di = 0; di < 2; di++) { /* the token rows in f32 and bf16 */
            DType dt = di ? DT_BF16 : DT_F32;
            Pair x = PAIR_RAND(dt, 220 + k, -1, 1, S, D), xe = PAIR_ZEROS(dt, E * C, D);
            pair_nan_rows(&x, D, 4, 6);
            BOTH(op_moe_permute(&xe.cpu, &x.cpu, &st.cpu), op_moe_permute(&xe.gpu, &x.gpu, &st.gpu));
            PAIR_CLOSE("moe_permute", &xe, 0, 0);
            Pair w1 = PAIR_RAND(dt, 230 + k, -0.5f, 0.5f, E * F, D), h = PAIR_ZEROS(dt, E * C, F),
                 pre = PAIR_ZEROS(dt, E * C, F);
            BOTH(op_grouped_linear_forward(&h.cpu, &pre.cpu, &xe.cpu, &w1.cpu, E, ACT_GELU_TANH),
                 op_grouped_linear_forward(&h.gpu, &pre.gpu, &xe.gpu, &w1.gpu, E, ACT_GELU_TANH));
            PAIR_CLOSE("grouped_linear_forward", &h, 1e-6, TOL(dt, 1e-5, 1.6e-2));
            Pair dh = PAIR_RAND(dt, 240 + k, -1, 1, E * C, F), dxe = PAIR_ZEROS(dt, E * C, D);
            Pair dw1 = PAIR_ZEROS(DT_F32, E * F, D);
            pair_upload(&pre);
            BOTH(op_grouped_linear_backward(&dxe.cpu, &dw1.cpu, &dh.cpu, &xe.cpu, &w1.cpu, &pre.cpu, E, ACT_GELU_TANH, 0),
                 op_grouped_linear_backward(&dxe.gpu, &dw1.gpu, &dh.gpu, &xe.gpu, &w1.gpu, &pre.gpu, E, ACT_GELU_TANH,
                                            0));
            PAIR_CLOSE("grouped_linear_backward dx", &dxe, 1e-6, TOL(dt, 1e-5, 2e-2));
            PAIR_CLOSE("grouped_linear_backward dw", &dw1, 1e-6, TOL(dt, 1e-5, 2e-2));
            Pair y = PAIR_ZEROS(dt, S, D), ye = PAIR_RAND(dt, 250 + k, -1, 1, E * C, D);
            BOTH(op_moe_combine(&y.cpu, &ye.cpu, &sw.cpu, &ts.cpu), op_moe_combine(&y.gpu, &ye.gpu, &sw.gpu, &ts.gpu));
            PAIR_CLOSE("moe_combine", &y, 0, TOL(dt, 1e-6, 1e-2));
            void *snap = pair_snapshot(&y);
            REQUIRE_OK(op_moe_combine(&y.gpu, &ye.gpu, &sw.gpu, &ts.gpu));
            PAIR_SAME_BITS("moe_combine twice", &y, snap);
            free(snap);
            BOTH(op_moe_combine(&y.cpu, &ye.cpu, NULL, &ts.cpu), op_moe_combine(&y.gpu, &ye.gpu, NULL, &ts.gpu));
            PAIR_CLOSE("moe_combine (weights 1)", &y, 0, TOL(dt, 1e-6, 1e-2));
            Pair dy = PAIR_RAND(dt, 260 + k, -1, 1, S, D), dye = PAIR_ZEROS(dt, E * C, D);
            Pair dsw = PAIR_ZEROS(DT_F32, E * C);
            BOTH(op_moe_combine_backward(&dye.cpu, &dsw.cpu, &dy.cpu, &ye.cpu, &sw.cpu, &st.cpu),
                 op_moe_combine_backward(&dye.gpu, &dsw.gpu, &dy.gpu, &ye.gpu, &sw.gpu, &st.gpu));
            PAIR_CLOSE("moe_combine_backward dye", &dye, 0, TOL(dt, 1e-6, 1e-2));
            PAIR_CLOSE("moe_combine_backward dw", &dsw, 1e-6, TOL(dt, 1e-6, 1e-2));
            pair_free(&x), pair_free(&xe), pair_free(&w1), pair_free(&h), pair_free(&pre), pair_free(&dh);
            pair_free(&dxe), pair_free(&dw1), pair_free(&y), pair_free(&ye), pair_free(&dy), pair_free(&dye);
            pair_free(&dsw);
        }
        pair_free(&logits), pair_free(&probs), pair_free(&lse), pair_free(&masked), pair_free(&sw);
        pair_free(&losses), pair_free(&dw), pair_free(&dl);
        ipair_free(&st), ipair_free(&ts);
    }
    ipair_free(&t2s), ipair_free(&cu), ipair_free(&cc);
}
