/* GPU: the flow-matching and DDPM ops (src/ops/cuda/diffusion.cu) against the CPU oracle on the
 * same inputs: noise_mix (f32: the CPU's bits; a bf16 x_t within one rounding), the channel halves
 * (copies: exact in both dtypes), the DDPM variational-bound term and its gradient (double math per
 * element; only the order of the row sums differs: 1e-6 relative) with the decoder NLL at t = 0 and
 * x0 at the ±0.999 edges, and the reverse step (without noise the CPU's bits in f32). Padding rows
 * hold NaN; backward passes run twice and must give the same bits. Skipped without a CUDA device
 * (the harness suite runs them on the CPU). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "diffusion/ddpm.h"
#include "gpu_pair.h"
#include "ops/ops.h"
#include "test.h"

/* 11 rows, 3 samples, padding rows 3-4 and 9-10 */
#define DS 11
#define DB 3
static const int32_t T2S[DS] = {0, 0, 0, -1, -1, 1, 1, 1, 2, -1, -1};

static void nan_padding(Pair *p, int64_t cols) {
    pair_nan_rows(p, cols, 3, 5);
    pair_nan_rows(p, cols, 9, 11);
}

TEST(cuda_noise_mix_and_channel_halves_match_cpu) {
    NEED_GPU();
    const int64_t C = 8;
    const DType dts[2] = {DT_F32, DT_BF16};
    for (int di = 0; di < 2; di++) {
        DType dt = dts[di];
        IPair t2s = IPAIR(T2S, DS);
        Pair x0 = PAIR_RAND(DT_F32, 71, -1, 1, DS, C), noise = PAIR_RAND(DT_F32, 72, -3, 3, DS, C);
        Pair a = PAIR_RAND(DT_F32, 73, 0, 1, DB), s = PAIR_RAND(DT_F32, 74, 0, 1, DB);
        nan_padding(&x0, C);
        nan_padding(&noise, C);
        Pair x_t = PAIR_ZEROS(dt, DS, C);
        BOTH(op_noise_mix(&x_t.cpu, &x0.cpu, &noise.cpu, &a.cpu, &s.cpu, &t2s.cpu),
             op_noise_mix(&x_t.gpu, &x0.gpu, &noise.gpu, &a.gpu, &s.gpu, &t2s.gpu));
        /* bf16: the CPU's f32 value rounded once (half an ulp of bf16 = 2^-9 relative) */
        PAIR_CLOSE("noise_mix x_t", &x_t, 0, TOL(dt, 0, 4e-3));

        /* learned-sigma halves with group g = 2 and two groups per row: [DS, 8] <-> 2 x [DS, 4] */
        Pair F = PAIR_RAND(dt, 75, -2, 2, DS, 2 * C), first = PAIR_ZEROS(dt, DS, C), second = PAIR_ZEROS(dt, DS, C);
        BOTH(op_channel_halves_split(&first.cpu, &second.cpu, &F.cpu, C / 2),
             op_channel_halves_split(&first.gpu, &second.gpu, &F.gpu, C / 2));
        PAIR_CLOSE("channel_halves_split first", &first, 0, 0);
        PAIR_CLOSE("channel_halves_split second", &second, 0, 0);
        Pair merged = PAIR_ZEROS(dt, DS, 2 * C);
        BOTH(op_channel_halves_merge(&merged.cpu, &first.cpu, &second.cpu, C / 2),
             op_channel_halves_merge(&merged.gpu, &first.gpu, &second.gpu, C / 2));
        PAIR_CLOSE("channel_halves_merge", &merged, 0, 0);
        BOTH(op_channel_halves_merge(&merged.cpu, &first.cpu, NULL, C / 2),
             op_channel_halves_merge(&merged.gpu, &first.gpu, NULL, C / 2));
        PAIR_CLOSE("channel_halves_merge (second half zero)", &merged, 0, 0);
        Pair *all[] = {&x0, &noise, &a, &s, &x_t, &F, &first, &second, &merged};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) pair_free(all[i]);
        ipair_free(&t2s);
    }
}

TEST(cuda_ddpm_vb_matches_cpu) {
    NEED_GPU();
    const int64_t C = 6;
    IPair t2s = IPAIR(T2S, DS);
    DdpmChain chain;
    REQUIRE_OK(ddpm_chain_init(&chain, 0));
    const int steps[DB] = {0, 7, 640}; /* t = 0: the decoder NLL */
    Pair coef = PAIR_ZEROS(DT_F32, DB, DDPM_VB_NCOEF);
    for (int b = 0; b < DB; b++) {
        double k[DDPM_VB_NCOEF];
        ddpm_vb_coef(&chain, steps[b], k);
        for (int j = 0; j < DDPM_VB_NCOEF; j++) coef.h[b * DDPM_VB_NCOEF + j] = (float)k[j];
    }
    pair_upload(&coef);
    Pair v = PAIR_RAND(DT_F32, 81, -1, 1, DS, C), eps = PAIR_RAND(DT_F32, 82, -2, 2, DS, C);
    Pair x_t = PAIR_RAND(DT_F32, 83, -2, 2, DS, C), x0 = PAIR_RAND(DT_F32, 84, -1, 1, DS, C);
    x0.h[0] = -1.0f, x0.h[1] = 1.0f, x0.h[C] = 0.9995f; /* the decoder's edge bins */
    pair_upload(&x0);
    Pair mask = PAIR_ZEROS(DT_F32, DS);
    for (int64_t r = 0; r < DS; r++) mask.h[r] = T2S[r] < 0 ? NAN : (r == 6 ? 0.f : 1.f);
    pair_upload(&mask);
    Pair *rows[] = {&v, &eps, &x_t, &x0};
    for (int i = 0; i < 4; i++) nan_padding(rows[i], C);
    Pair loss = PAIR_ZEROS(DT_F32, 1), ssum = PAIR_ZEROS(DT_F32, DB), dv = PAIR_ZEROS(DT_F32, DS, C);
    BOTH(op_ddpm_vb_forward(&loss.cpu, &ssum.cpu, &v.cpu, &eps.cpu, &x_t.cpu, &x0.cpu, &coef.cpu, &mask.cpu, &t2s.cpu),
         op_ddpm_vb_forward(&loss.gpu, &ssum.gpu, &v.gpu, &eps.gpu, &x_t.gpu, &x0.gpu, &coef.gpu, &mask.gpu, &t2s.gpu));
    CHECK_MSG(loss.h[0] > 0 && isfinite(loss.h[0]), "the CPU's VB loss %g is not a positive number", loss.h[0]);
    PAIR_CLOSE("ddpm_vb loss", &loss, 0, 1e-6);
    PAIR_CLOSE("ddpm_vb sample sums", &ssum, 0, 1e-6);
    BOTH(op_ddpm_vb_backward(&dv.cpu, 0.6, &v.cpu, &eps.cpu, &x_t.cpu, &x0.cpu, &coef.cpu, &mask.cpu, &t2s.cpu),
         op_ddpm_vb_backward(&dv.gpu, 0.6, &v.gpu, &eps.gpu, &x_t.gpu, &x0.gpu, &coef.gpu, &mask.gpu, &t2s.gpu));
    PAIR_CLOSE("ddpm_vb dv", &dv, 0, 1e-6);
    void *snap = pair_snapshot(&dv);
    REQUIRE_OK(op_ddpm_vb_backward(&dv.gpu, 0.6, &v.gpu, &eps.gpu, &x_t.gpu, &x0.gpu, &coef.gpu, &mask.gpu, &t2s.gpu));
    PAIR_SAME_BITS("ddpm_vb dv run twice", &dv, snap);
    free(snap);
    Pair *all[] = {&coef, &v, &eps, &x_t, &x0, &mask, &loss, &ssum, &dv};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) pair_free(all[i]);
    ipair_free(&t2s);
}

TEST(cuda_ddpm_step_matches_cpu) {
    NEED_GPU();
    const int64_t N = 37;
    DdpmStepCoef c = {1.3, 0.4, 0.8, 0.15, 0.05, -6.0, -4.5, -5.0};
    const DType dts[2] = {DT_F32, DT_BF16};
    for (int di = 0; di < 2; di++) {
        DType dt = dts[di];
        Pair x = PAIR_RAND(dt, 91, -2, 2, N), eps = PAIR_RAND(dt, 92, -2, 2, N), v = PAIR_RAND(dt, 93, -1, 1, N);
        Pair z = PAIR_RAND(dt, 94, -3, 3, N), out = PAIR_ZEROS(dt, N);
        BOTH(op_ddpm_step(&out.cpu, &x.cpu, &eps.cpu, NULL, NULL, &c), op_ddpm_step(&out.gpu, &x.gpu, &eps.gpu, NULL, NULL, &c));
        PAIR_CLOSE("ddpm_step without noise (f32: the CPU's bits)", &out, 0, TOL(dt, 0, 4e-3));
        BOTH(op_ddpm_step(&out.cpu, &x.cpu, &eps.cpu, NULL, &z.cpu, &c),
             op_ddpm_step(&out.gpu, &x.gpu, &eps.gpu, NULL, &z.gpu, &c));
        PAIR_CLOSE("ddpm_step fixed variance", &out, 0, TOL(dt, 1e-6, 4e-3));
        BOTH(op_ddpm_step(&out.cpu, &x.cpu, &eps.cpu, &v.cpu, &z.cpu, &c),
             op_ddpm_step(&out.gpu, &x.gpu, &eps.gpu, &v.gpu, &z.gpu, &c));
        PAIR_CLOSE("ddpm_step learned variance", &out, 0, TOL(dt, 1e-6, 4e-3));
        Pair *all[] = {&x, &eps, &v, &z, &out};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) pair_free(all[i]);
    }
}
