/* GPU: every op except attention (test_cuda_attention.c), CUDA vs the CPU oracle on the same
 * inputs, forward and backward, in f32 (tight bounds: the same arithmetic in another order) and in
 * bf16 (bounds from one bf16 rounding of the outputs, more where a bf16 intermediate is stored);
 * padding rows hold NaN where the op must not read them; backward passes run twice and must give
 * the same bits; the f32 EDM math, AdamW and the small utilities must give the CPU's exact bits.
 * Skipped without a CUDA device (the harness suite runs them on the CPU), except the dtype-contract
 * test (checked before any kernel). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_pair.h"
#include "ops/ops.h"
#include "test.h"

/* The 16-byte vector path of the streaming kernels (cuda_common.h) and their element-by-element path
 * give the same bits. Such a case runs twice: pass 0 on the tensors as allocated (16-byte aligned:
 * vector accesses where the row length allows), pass 1 with every GPU tensor moved off alignment
 * (pair_misalign: element by element). Each pass is checked against the CPU with the same bounds,
 * and every result of pass 1 must have the bits of pass 0's. */
typedef struct {
    void *snap[32];
    int n, pass;
} Paths;

#define MISALIGN(paths, ...)                                                                                \
    do {                                                                                                    \
        Pair *misalign_[] = {__VA_ARGS__};                                                                  \
        if ((paths)->pass)                                                                                  \
            for (size_t i_ = 0; i_ < sizeof misalign_ / sizeof *misalign_; i_++) pair_misalign(misalign_[i_]); \
    } while (0)

static void paths_close(Paths *pp, const char *what, const Pair *p, double atol, double rtol, int line) {
    char w[160];
    snprintf(w, sizeof w, "%s (%s, %s)", what, dtype_name(p->gpu.dtype), pp->pass ? "misaligned" : "aligned");
    pair_close(w, p, atol, rtol, __FILE__, line);
    if (pp->n >= (int)(sizeof pp->snap / sizeof pp->snap[0])) {
        test_fail(__FILE__, line, "Paths: more than %d results", pp->n);
        return;
    }
    if (pp->pass == 0) {
        pp->snap[pp->n++] = pair_snapshot(p);
        return;
    }
    snprintf(w, sizeof w, "%s (%s): the element-by-element path after the vector path", what,
             dtype_name(p->gpu.dtype));
    pair_same_bits(w, p, pp->snap[pp->n], __FILE__, line);
    free(pp->snap[pp->n++]);
}
#define PATHS_CLOSE(pp, what, p, atol, rtol) paths_close((pp), (what), (p), (atol), (rtol), __LINE__)

/* x [R, C]: GELU, SiLU and SwiGLU (F = C/2) forward and backward. */
static void activations_case(DType dt, int64_t R, int64_t C) {
    double rt = TOL(dt, 2e-6, 5e-3);
    Paths pp = {0};
    for (pp.pass = 0; pp.pass < 2; pp.pass++) {
        pp.n = 0;
        Pair x = PAIR_RAND(dt, 1, -4, 4, R, C), dy = PAIR_RAND(dt, 2, -1, 1, R, C);
        Pair y = PAIR_ZEROS(dt, R, C), dx = PAIR_ZEROS(dt, R, C);
        Pair sy = PAIR_ZEROS(dt, R, C / 2), sdy = PAIR_RAND(dt, 3, -1, 1, R, C / 2);
        MISALIGN(&pp, &x, &dy, &y, &dx, &sy, &sdy);
        for (int kind = ACT_GELU_ERF; kind <= ACT_GELU_TANH; kind++) {
            BOTH(op_gelu_forward(&y.cpu, &x.cpu, kind), op_gelu_forward(&y.gpu, &x.gpu, kind));
            PATHS_CLOSE(&pp, kind == ACT_GELU_ERF ? "gelu erf" : "gelu tanh", &y, 1e-6, rt);
            BOTH(op_gelu_backward(&dx.cpu, &dy.cpu, &x.cpu, kind), op_gelu_backward(&dx.gpu, &dy.gpu, &x.gpu, kind));
            PATHS_CLOSE(&pp, kind == ACT_GELU_ERF ? "gelu erf backward" : "gelu tanh backward", &dx, 1e-6, rt);
        }
        BOTH(op_silu_forward(&y.cpu, &x.cpu), op_silu_forward(&y.gpu, &x.gpu));
        PATHS_CLOSE(&pp, "silu", &y, 1e-6, rt);
        BOTH(op_silu_backward(&dx.cpu, &dy.cpu, &x.cpu), op_silu_backward(&dx.gpu, &dy.gpu, &x.gpu));
        PATHS_CLOSE(&pp, "silu backward", &dx, 1e-6, rt);
        BOTH(op_swiglu_forward(&sy.cpu, &x.cpu), op_swiglu_forward(&sy.gpu, &x.gpu));
        PATHS_CLOSE(&pp, "swiglu", &sy, 1e-6, rt);
        BOTH(op_swiglu_backward(&dx.cpu, &sdy.cpu, &x.cpu), op_swiglu_backward(&dx.gpu, &sdy.gpu, &x.gpu));
        PATHS_CLOSE(&pp, "swiglu backward", &dx, 1e-6, rt);
        pair_free(&x), pair_free(&dy), pair_free(&y), pair_free(&dx), pair_free(&sy), pair_free(&sdy);
    }
}

/* [37, 66]: a short last chunk, SwiGLU rows of 33 (element by element); [16, 64]: whole chunks,
 * SwiGLU rows of 32 (vector rows) */
TEST(cuda_pointwise_activations_match_cpu) {
    NEED_GPU();
    for (int di = 0; di < 2; di++) {
        activations_case(GPU_DTYPES[di], 37, 66);
        activations_case(GPU_DTYPES[di], 16, 64);
    }
}

/* y = act(x·wᵀ + b) and its backward with accumulating dw/db (f32 on the GPU) and dx (= or +=). */
static void linear_case(DType dt, int64_t N, int64_t in, int64_t out, Activation act, int bias, int dx_acc) {
    char what[96];
    Pair x = PAIR_RAND(dt, 11, -1, 1, N, in), w = PAIR_RAND(dt, 12, -0.3f, 0.3f, out, in);
    Pair b = PAIR_RAND(dt, 13, -0.5f, 0.5f, out);
    Pair y = PAIR_ZEROS(dt, N, out), pre = PAIR_ZEROS(dt, N, out);
    Tensor *pre_c = act != ACT_NONE ? &pre.cpu : NULL, *pre_g = act != ACT_NONE ? &pre.gpu : NULL;
    BOTH(op_linear_forward(&y.cpu, pre_c, &x.cpu, &w.cpu, bias ? &b.cpu : NULL, act),
         op_linear_forward(&y.gpu, pre_g, &x.gpu, &w.gpu, bias ? &b.gpu : NULL, act));
    double rt = TOL(dt, 1e-5, 1.2e-2);
    snprintf(what, sizeof what, "linear y (%s, act %d, bias %d, %lldx%lldx%lld)", dtype_name(dt), act, bias,
             (long long)N, (long long)in, (long long)out);
    PAIR_CLOSE(what, &y, 1e-5, rt);
    if (act != ACT_NONE) PAIR_CLOSE("linear pre", &pre, 1e-5, rt);

    Pair dy = PAIR_RAND(dt, 14, -1, 1, N, out), dx = PAIR_RAND(dt, 15, -1, 1, N, in);
    Pair dw = PAIR_RAND(DT_F32, 16, -1, 1, out, in), db = PAIR_RAND(DT_F32, 17, -1, 1, out);
    float *dy0 = pair_copy_host(&dy), *dx0 = pair_copy_host(&dx), *dw0 = pair_copy_host(&dw), *db0 = pair_copy_host(&db);
    BOTH(op_linear_backward(&dx.cpu, &dw.cpu, bias ? &db.cpu : NULL, &dy.cpu, &x.cpu, &w.cpu, pre_c, act, dx_acc),
         op_linear_backward(&dx.gpu, &dw.gpu, bias ? &db.gpu : NULL, &dy.gpu, &x.gpu, &w.gpu, pre_g, act, dx_acc));
    snprintf(what, sizeof what, "linear dx (%s, act %d, accumulate %d)", dtype_name(dt), act, dx_acc);
    PAIR_CLOSE(what, &dx, 1e-5, TOL(dt, 1e-5, 1.5e-2));
    PAIR_CLOSE("linear dw (f32, +=)", &dw, 1e-5, TOL(dt, 1e-5, 1e-2));
    if (bias) PAIR_CLOSE("linear db (f32, +=)", &db, 1e-5, TOL(dt, 1e-5, 1e-2));
    if (act != ACT_NONE) PAIR_CLOSE("linear dy -> dpre", &dy, 1e-6, TOL(dt, 1e-5, 1e-2));
    /* the same backward again from the same inputs: the same bits */
    void *sdx = pair_snapshot(&dx), *sdw = pair_snapshot(&dw), *sdb = pair_snapshot(&db);
    pair_upload_values(&dy, dy0), pair_upload_values(&dx, dx0), pair_upload_values(&dw, dw0), pair_upload_values(&db, db0);
    REQUIRE_OK(op_linear_backward(&dx.gpu, &dw.gpu, bias ? &db.gpu : NULL, &dy.gpu, &x.gpu, &w.gpu, pre_g, act, dx_acc));
    PAIR_SAME_BITS("linear dx", &dx, sdx);
    PAIR_SAME_BITS("linear dw", &dw, sdw);
    if (bias) PAIR_SAME_BITS("linear db", &db, sdb);
    free(sdx), free(sdw), free(sdb), free(dy0), free(dx0), free(dw0), free(db0);
    pair_free(&x), pair_free(&w), pair_free(&b), pair_free(&y), pair_free(&pre);
    pair_free(&dy), pair_free(&dx), pair_free(&dw), pair_free(&db);
}

TEST(cuda_linear_matches_cpu) {
    NEED_GPU();
    for (int di = 0; di < 2; di++)
        for (int act = ACT_NONE; act <= ACT_GELU_TANH; act++) {
            linear_case(GPU_DTYPES[di], 37, 64, 96, act, 1, act == ACT_NONE); /* out % 8 == 0: cuBLASLt GELU epilogue */
            linear_case(GPU_DTYPES[di], 29, 40, 36, act, act != ACT_GELU_ERF, 0); /* out % 8 != 0: separate GELU kernel */
        }
    linear_case(DT_BF16, 1, 8, 8, ACT_NONE, 1, 0); /* one row */
}

/* D = 80: vector rows in both dtypes; 83: element by element with a short last chunk; 2112: rows
 * longer than a warp keeps (a block per row), vector. */
static void layernorm_case(DType dt, int64_t D) {
    const int64_t S = PACK_S, B = PACK_B;
    Paths pp = {0};
    for (pp.pass = 0; pp.pass < 2; pp.pass++) {
        pp.n = 0;
        IPair t2s = IPAIR(PACK_T2S, S);
        Pair x = PAIR_RAND(dt, 21, -2, 3, S, D), shift = PAIR_RAND(dt, 22, -1, 1, B, D), scale = PAIR_RAND(dt, 23, -1, 1, B, D);
        pack_nan_padding(&x, D);
        Pair y = PAIR_ZEROS(dt, S, D), mean = PAIR_ZEROS(DT_F32, S), rstd = PAIR_ZEROS(DT_F32, S);
        Pair dy = PAIR_RAND(dt, 24, -1, 1, S, D), dx = PAIR_RAND(dt, 25, -1, 1, S, D);
        Pair dshift = PAIR_RAND(dt, 26, -1, 1, B, D), dscale = PAIR_RAND(dt, 27, -1, 1, B, D);
        pack_nan_padding(&dy, D);
        MISALIGN(&pp, &x, &shift, &scale, &y, &dy, &dx, &dshift, &dscale);
        BOTH(op_layernorm_modulate_forward(&y.cpu, &mean.cpu, &rstd.cpu, &x.cpu, &shift.cpu, &scale.cpu, &t2s.cpu, 1e-6f),
             op_layernorm_modulate_forward(&y.gpu, &mean.gpu, &rstd.gpu, &x.gpu, &shift.gpu, &scale.gpu, &t2s.gpu, 1e-6f));
        PATHS_CLOSE(&pp, "layernorm_modulate y", &y, 1e-5, TOL(dt, 1e-5, 8e-3));
        PATHS_CLOSE(&pp, "layernorm_modulate mean (f32)", &mean, 1e-6, 2e-6);
        PATHS_CLOSE(&pp, "layernorm_modulate rstd (f32)", &rstd, 1e-6, 2e-5);

        float *dx0 = pair_copy_host(&dx), *ds0 = pair_copy_host(&dshift), *dc0 = pair_copy_host(&dscale);
        BOTH(op_layernorm_modulate_backward(&dx.cpu, &dshift.cpu, &dscale.cpu, &dy.cpu, &x.cpu, &mean.cpu, &rstd.cpu,
                                            &scale.cpu, &t2s.cpu),
             op_layernorm_modulate_backward(&dx.gpu, &dshift.gpu, &dscale.gpu, &dy.gpu, &x.gpu, &mean.gpu, &rstd.gpu,
                                            &scale.gpu, &t2s.gpu));
        PATHS_CLOSE(&pp, "layernorm_modulate dx (+=)", &dx, 1e-5, TOL(dt, 2e-5, 1.2e-2));
        PATHS_CLOSE(&pp, "layernorm_modulate dshift (+=)", &dshift, 1e-5, TOL(dt, 1e-5, 1e-2));
        PATHS_CLOSE(&pp, "layernorm_modulate dscale (+=)", &dscale, 1e-5, TOL(dt, 1e-5, 1e-2));
        void *a = pair_snapshot(&dx), *b = pair_snapshot(&dshift), *c = pair_snapshot(&dscale);
        pair_upload_values(&dx, dx0), pair_upload_values(&dshift, ds0), pair_upload_values(&dscale, dc0);
        REQUIRE_OK(op_layernorm_modulate_backward(&dx.gpu, &dshift.gpu, &dscale.gpu, &dy.gpu, &x.gpu, &mean.gpu,
                                                  &rstd.gpu, &scale.gpu, &t2s.gpu));
        PAIR_SAME_BITS("layernorm_modulate dx", &dx, a);
        PAIR_SAME_BITS("layernorm_modulate dshift", &dshift, b);
        PAIR_SAME_BITS("layernorm_modulate dscale", &dscale, c);
        /* without shift and scale */
        BOTH(op_layernorm_modulate_forward(&y.cpu, &mean.cpu, &rstd.cpu, &x.cpu, NULL, NULL, &t2s.cpu, 1e-5f),
             op_layernorm_modulate_forward(&y.gpu, &mean.gpu, &rstd.gpu, &x.gpu, NULL, NULL, &t2s.gpu, 1e-5f));
        PATHS_CLOSE(&pp, "layernorm (no modulation) y", &y, 1e-5, TOL(dt, 1e-5, 8e-3));
        free(a), free(b), free(c), free(dx0), free(ds0), free(dc0);
        pair_free(&x), pair_free(&shift), pair_free(&scale), pair_free(&y), pair_free(&mean), pair_free(&rstd);
        pair_free(&dy), pair_free(&dx), pair_free(&dshift), pair_free(&dscale), ipair_free(&t2s);
    }
}

TEST(cuda_layernorm_modulate_matches_cpu) {
    NEED_GPU();
    const int64_t dims[3] = {80, 83, 2112};
    for (int di = 0; di < 2; di++)
        for (int k = 0; k < 3; k++) layernorm_case(GPU_DTYPES[di], dims[k]);
    /* a row longer than the kernel keeps in registers (32 768 f32 elements) is refused, naming the op */
    Pair x = PAIR_ZEROS(DT_F32, 1, 32772), y = PAIR_ZEROS(DT_F32, 1, 32772);
    Pair m = PAIR_ZEROS(DT_F32, 1), r = PAIR_ZEROS(DT_F32, 1);
    const int32_t one[1] = {0};
    IPair t2s = IPAIR(one, 1);
    vfm_status st = op_layernorm_modulate_forward(&y.gpu, &m.gpu, &r.gpu, &x.gpu, NULL, NULL, &t2s.gpu, 1e-6f);
    CHECK_MSG(st == VFM_ERR_UNSUPPORTED && strstr(vfm_last_error(), "layernorm_modulate_forward: rows of 32772"),
              "an over-long row: %s: %s", vfm_status_name(st), vfm_last_error());
    pair_free(&x), pair_free(&y), pair_free(&m), pair_free(&r), ipair_free(&t2s);
}

/* D = 80: vector rows; 83: element by element */
static void gated_residual_case(DType dt, int64_t D) {
    const int64_t S = PACK_S, B = PACK_B;
    double rt = TOL(dt, 1e-6, 8e-3);
    Paths pp = {0};
    for (pp.pass = 0; pp.pass < 2; pp.pass++) {
        pp.n = 0;
        IPair t2s = IPAIR(PACK_T2S, S);
        Pair x = PAIR_RAND(dt, 31, -1, 1, S, D), y = PAIR_RAND(dt, 32, -1, 1, S, D), gate = PAIR_RAND(dt, 33, -1, 1, B, D);
        pack_nan_padding(&y, D);
        Pair out = PAIR_ZEROS(dt, S, D);
        Pair dout = PAIR_RAND(dt, 34, -1, 1, S, D), dx = PAIR_RAND(dt, 35, -1, 1, S, D), dy = PAIR_ZEROS(dt, S, D);
        Pair dgate = PAIR_RAND(dt, 36, -1, 1, B, D);
        MISALIGN(&pp, &x, &y, &gate, &out, &dout, &dx, &dy, &dgate);
        BOTH(op_gated_residual_forward(&out.cpu, &x.cpu, &y.cpu, &gate.cpu, &t2s.cpu),
             op_gated_residual_forward(&out.gpu, &x.gpu, &y.gpu, &gate.gpu, &t2s.gpu));
        PATHS_CLOSE(&pp, "gated_residual out", &out, 1e-6, rt);
        /* in place, without a gate */
        BOTH(op_gated_residual_forward(&x.cpu, &x.cpu, &y.cpu, NULL, &t2s.cpu),
             op_gated_residual_forward(&x.gpu, &x.gpu, &y.gpu, NULL, &t2s.gpu));
        PATHS_CLOSE(&pp, "gated_residual in place", &x, 1e-6, rt);

        float *dx0 = pair_copy_host(&dx), *dg0 = pair_copy_host(&dgate);
        BOTH(op_gated_residual_backward(&dx.cpu, &dy.cpu, &dgate.cpu, &dout.cpu, &y.cpu, &gate.cpu, &t2s.cpu),
             op_gated_residual_backward(&dx.gpu, &dy.gpu, &dgate.gpu, &dout.gpu, &y.gpu, &gate.gpu, &t2s.gpu));
        PATHS_CLOSE(&pp, "gated_residual dx (+=)", &dx, 1e-6, rt);
        PATHS_CLOSE(&pp, "gated_residual dy", &dy, 1e-6, rt);
        PATHS_CLOSE(&pp, "gated_residual dgate (+=)", &dgate, 1e-5, TOL(dt, 1e-5, 1e-2));
        void *a = pair_snapshot(&dgate);
        pair_upload_values(&dx, dx0), pair_upload_values(&dgate, dg0);
        REQUIRE_OK(op_gated_residual_backward(&dx.gpu, &dy.gpu, &dgate.gpu, &dout.gpu, &y.gpu, &gate.gpu, &t2s.gpu));
        PAIR_SAME_BITS("gated_residual dgate", &dgate, a);
        /* dy aliasing dout, no gate: dout passes through, padding rows become 0 */
        BOTH(op_gated_residual_backward(NULL, &dout.cpu, NULL, &dout.cpu, &y.cpu, NULL, &t2s.cpu),
             op_gated_residual_backward(NULL, &dout.gpu, NULL, &dout.gpu, &y.gpu, NULL, &t2s.gpu));
        PATHS_CLOSE(&pp, "gated_residual dy aliasing dout", &dout, 0, 0);
        free(a), free(dx0), free(dg0);
        pair_free(&x), pair_free(&y), pair_free(&gate), pair_free(&out), pair_free(&dout), pair_free(&dx);
        pair_free(&dy), pair_free(&dgate), ipair_free(&t2s);
    }
}

TEST(cuda_gated_residual_matches_cpu) {
    NEED_GPU();
    for (int di = 0; di < 2; di++) {
        gated_residual_case(GPU_DTYPES[di], 80);
        gated_residual_case(GPU_DTYPES[di], 83);
    }
}

/* d = 72, 128: vector rows; 90: element by element; 2056: a block per row (vector) */
static void rmsnorm_case(DType dt, int64_t d, int with_w) {
    const int64_t N = 21;
    Paths pp = {0};
    for (pp.pass = 0; pp.pass < 2; pp.pass++) {
        pp.n = 0;
        Pair x = PAIR_RAND(dt, 41, -2, 2, N, d), w = PAIR_RAND(dt, 42, 0.5f, 1.5f, d);
        Pair y = PAIR_ZEROS(dt, N, d), rstd = PAIR_ZEROS(DT_F32, N);
        Pair dy = PAIR_RAND(dt, 43, -1, 1, N, d), dx = PAIR_ZEROS(dt, N, d), dw = PAIR_RAND(DT_F32, 44, -1, 1, d);
        MISALIGN(&pp, &x, &w, &y, &dy, &dx, &dw);
        const Tensor *wc = with_w ? &w.cpu : NULL, *wg = with_w ? &w.gpu : NULL;
        BOTH(op_rmsnorm_forward(&y.cpu, &rstd.cpu, &x.cpu, wc, 1e-6f), op_rmsnorm_forward(&y.gpu, &rstd.gpu, &x.gpu, wg, 1e-6f));
        PATHS_CLOSE(&pp, "rmsnorm y", &y, 1e-6, TOL(dt, 2e-6, 8e-3));
        PATHS_CLOSE(&pp, "rmsnorm rstd (f32)", &rstd, 1e-6, 2e-6);
        float *dw0 = pair_copy_host(&dw);
        BOTH(op_rmsnorm_backward(&dx.cpu, with_w ? &dw.cpu : NULL, &dy.cpu, &x.cpu, &rstd.cpu, wc),
             op_rmsnorm_backward(&dx.gpu, with_w ? &dw.gpu : NULL, &dy.gpu, &x.gpu, &rstd.gpu, wg));
        PATHS_CLOSE(&pp, "rmsnorm dx", &dx, 1e-5, TOL(dt, 1e-5, 1e-2));
        if (with_w) {
            PATHS_CLOSE(&pp, "rmsnorm dw (f32, +=)", &dw, 1e-5, TOL(dt, 1e-5, 1e-2));
            void *a = pair_snapshot(&dw);
            pair_upload_values(&dw, dw0);
            REQUIRE_OK(op_rmsnorm_backward(&dx.gpu, &dw.gpu, &dy.gpu, &x.gpu, &rstd.gpu, wg));
            PAIR_SAME_BITS("rmsnorm dw", &dw, a);
            free(a);
        }
        free(dw0);
        pair_free(&x), pair_free(&w), pair_free(&y), pair_free(&rstd), pair_free(&dy), pair_free(&dx), pair_free(&dw);
    }
}

TEST(cuda_rmsnorm_matches_cpu) {
    NEED_GPU();
    const int64_t dims[4] = {72, 128, 90, 2056};
    for (int di = 0; di < 2; di++)
        for (int k = 0; k < 4; k++)
            for (int with_w = 0; with_w < 2; with_w++) rmsnorm_case(GPU_DTYPES[di], dims[k], with_w);
}

TEST(cuda_embeddings_and_patchify_match_cpu) {
    NEED_GPU();
    for (int di = 0; di < 2; di++) {
        DType dt = GPU_DTYPES[di];
        const int64_t B = 5, dim = 256;
        Pair t = PAIR_RAND(DT_F32, 51, 0, 1000, B), out = PAIR_ZEROS(dt, B, dim), dout = PAIR_RAND(dt, 52, -1, 1, B, dim);
        Pair dt_ = PAIR_ZEROS(DT_F32, B);
        for (int flip = 0; flip < 2; flip++) {
            float shift = flip ? 0.f : 1.f;
            BOTH(op_timestep_embedding_forward(&out.cpu, &t.cpu, flip, shift, 10000.f),
                 op_timestep_embedding_forward(&out.gpu, &t.gpu, flip, shift, 10000.f));
            PAIR_CLOSE("timestep embedding", &out, 1e-6, TOL(dt, 1e-6, 5e-3));
            BOTH(op_timestep_embedding_backward(&dt_.cpu, &dout.cpu, &t.cpu, flip, shift, 10000.f),
                 op_timestep_embedding_backward(&dt_.gpu, &dout.gpu, &t.gpu, flip, shift, 10000.f));
            PAIR_CLOSE("timestep embedding dt (f32)", &dt_, 1e-6, 1e-6);
        }
        const int64_t S = PACK_S, D = 96;
        int32_t pos[PACK_S * 3];
        for (int i = 0; i < PACK_S * 3; i++) pos[i] = (i * 7 + 3) % 41;
        IPair t2s = IPAIR(PACK_T2S, S), p = IPAIR(pos, S, 3);
        Pair x = PAIR_RAND(dt, 53, -1, 1, S, D);
        BOTH(op_pos_embed_3d_add(&x.cpu, &p.cpu, &t2s.cpu), op_pos_embed_3d_add(&x.gpu, &p.gpu, &t2s.gpu));
        PAIR_CLOSE("pos_embed_3d_add", &x, 1e-6, TOL(dt, 1e-6, 8e-3));
        /* latent [C=3, T=4, H=6, W=8], patches (2, 2, 2): exact copies both ways */
        Pair lat = PAIR_RAND(dt, 54, -1, 1, 3, 4, 6, 8), tok = PAIR_ZEROS(dt, 2 * 3 * 4, 2 * 2 * 2 * 3);
        BOTH(op_patchify(&tok.cpu, &lat.cpu, 2, 2, 2), op_patchify(&tok.gpu, &lat.gpu, 2, 2, 2));
        PAIR_CLOSE("patchify", &tok, 0, 0);
        Pair back = PAIR_ZEROS(dt, 3, 4, 6, 8);
        BOTH(op_unpatchify(&back.cpu, &tok.cpu, 2, 2, 2), op_unpatchify(&back.gpu, &tok.gpu, 2, 2, 2));
        PAIR_CLOSE("unpatchify", &back, 0, 0);
        pair_free(&t), pair_free(&out), pair_free(&dout), pair_free(&dt_), pair_free(&x), pair_free(&lat);
        pair_free(&tok), pair_free(&back), ipair_free(&t2s), ipair_free(&p);
    }
}

TEST(cuda_lookup_gather_and_2d_embedding_match_cpu) {
    NEED_GPU();
    for (int di = 0; di < 2; di++) {
        DType dt = GPU_DTYPES[di];
        /* class-label lookup with repeated labels; its table gradient is f32 and adds in b order: the
         * CPU's bits even from bf16 dout (the same values, the same additions) */
        const int32_t labels[6] = {3, 0, 3, 4, 1, 3};
        IPair idx = IPAIR(labels, 6);
        Pair table = PAIR_RAND(dt, 121, -1, 1, 5, 40), out = PAIR_ZEROS(dt, 6, 40);
        BOTH(op_embedding_forward(&out.cpu, &table.cpu, &idx.cpu), op_embedding_forward(&out.gpu, &table.gpu, &idx.gpu));
        PAIR_CLOSE("embedding_forward", &out, 0, 0);
        Pair dout = PAIR_RAND(dt, 122, -1, 1, 6, 40), dtable = PAIR_RAND(DT_F32, 123, -1, 1, 5, 40);
        BOTH(op_embedding_backward(&dtable.cpu, &dout.cpu, &idx.cpu),
             op_embedding_backward(&dtable.gpu, &dout.gpu, &idx.gpu));
        PAIR_CLOSE("embedding_backward (f32 table gradient)", &dtable, 0, 0);
        const int32_t bad_labels[3] = {1, 4, 9};
        IPair bad = IPAIR(bad_labels, 3);
        Pair out3 = PAIR_ZEROS(dt, 3, 40);
        /* found on the GPU without a wait, reported by ops_check_index_errors; its row is 0 */
        CHECK_OK(ops_check_index_errors());
        CHECK_OK(op_embedding_forward(&out3.gpu, &table.gpu, &bad.gpu));
        vfm_status st = ops_check_index_errors();
        CHECK_MSG(st == VFM_ERR_SHAPE && strstr(vfm_last_error(), "embedding_forward: idx[2] = 9"), "bad label: %s: %s",
                  vfm_status_name(st), vfm_last_error());
        CHECK_OK(ops_check_index_errors()); /* reported once */
        float got3[3 * 40];
        pair_download(&out3, got3);
        int zero = 1;
        for (int j = 0; j < 40; j++) zero &= got3[2 * 40 + j] == 0.f;
        CHECK_MSG(zero, "the row of the index outside is not 0");
        /* column gather with a repeated column, and its scatter-add backward */
        const int32_t cols[9] = {11, 0, 5, 5, 3, 2, 7, 1, 10};
        IPair cidx = IPAIR(cols, 9);
        Pair in = PAIR_RAND(dt, 124, -1, 1, 7, 12), g = PAIR_ZEROS(dt, 7, 9);
        BOTH(op_gather_columns(&g.cpu, &in.cpu, &cidx.cpu), op_gather_columns(&g.gpu, &in.gpu, &cidx.gpu));
        PAIR_CLOSE("gather_columns", &g, 0, 0);
        Pair dg = PAIR_RAND(dt, 125, -1, 1, 7, 9), din = PAIR_RAND(dt, 126, -1, 1, 7, 12);
        BOTH(op_gather_columns_backward(&din.cpu, &dg.cpu, &cidx.cpu),
             op_gather_columns_backward(&din.gpu, &dg.gpu, &cidx.gpu));
        PAIR_CLOSE("gather_columns_backward (+=)", &din, 0, TOL(dt, 0, 1.2e-2));
        /* 2-D sin-cos position embedding (DiT) */
        int32_t pos[PACK_S * 3];
        for (int i = 0; i < PACK_S * 3; i++) pos[i] = (i * 5 + 1) % 37;
        IPair t2s = IPAIR(PACK_T2S, PACK_S), p = IPAIR(pos, PACK_S, 3);
        Pair x = PAIR_RAND(dt, 127, -1, 1, PACK_S, 48);
        BOTH(op_pos_embed_2d_add(&x.cpu, &p.cpu, &t2s.cpu), op_pos_embed_2d_add(&x.gpu, &p.gpu, &t2s.gpu));
        PAIR_CLOSE("pos_embed_2d_add", &x, 1e-6, TOL(dt, 1e-6, 8e-3));
        pair_free(&table), pair_free(&out), pair_free(&dout), pair_free(&dtable), pair_free(&out3), pair_free(&in);
        pair_free(&g), pair_free(&dg), pair_free(&din), pair_free(&x);
        ipair_free(&idx), ipair_free(&bad), ipair_free(&cidx), ipair_free(&t2s), ipair_free(&p);
    }
}

TEST(cuda_edm_and_loss_match_cpu) {
    NEED_GPU();
    const int64_t S = PACK_S, B = PACK_B, C = 16;
    for (int di = 0; di < 2; di++) {
        DType dt = GPU_DTYPES[di]; /* the network-facing tensors; the EDM math is f32 */
        IPair t2s = IPAIR(PACK_T2S, S);
        Pair sigma = PAIR_RAND(DT_F32, 61, 0.02f, 40.f, B);
        Pair c_skip = PAIR_ZEROS(DT_F32, B), c_out = PAIR_ZEROS(DT_F32, B), c_in = PAIR_ZEROS(DT_F32, B);
        Pair c_noise = PAIR_ZEROS(DT_F32, B), weight = PAIR_ZEROS(DT_F32, B);
        BOTH(op_edm_precondition(&c_skip.cpu, &c_out.cpu, &c_in.cpu, &c_noise.cpu, &weight.cpu, &sigma.cpu, 0.5f),
             op_edm_precondition(&c_skip.gpu, &c_out.gpu, &c_in.gpu, &c_noise.gpu, &weight.gpu, &sigma.gpu, 0.5f));
        PAIR_CLOSE("edm c_skip", &c_skip, 0, 1e-6);
        PAIR_CLOSE("edm c_out", &c_out, 0, 1e-6);
        PAIR_CLOSE("edm c_in", &c_in, 0, 1e-6);
        PAIR_CLOSE("edm c_noise", &c_noise, 0, 1e-6);
        PAIR_CLOSE("edm weight", &weight, 0, 1e-6);
        /* the GPU's coefficients become the inputs of both sides from here on */
        float tmp[PACK_B];
        Pair *coef[3] = {&c_skip, &c_out, &c_in};
        for (int i = 0; i < 3; i++) {
            pair_download(coef[i], tmp);
            memcpy(coef[i]->h, tmp, sizeof tmp);
        }

        Pair x0 = PAIR_RAND(DT_F32, 62, -1, 1, S, C), noise = PAIR_RAND(DT_F32, 63, -3, 3, S, C);
        pack_nan_padding(&x0, C);
        pack_nan_padding(&noise, C);
        Pair x_t = PAIR_ZEROS(DT_F32, S, C), net_in = PAIR_ZEROS(dt, S, C);
        BOTH(op_edm_add_noise(&x_t.cpu, &net_in.cpu, &x0.cpu, &noise.cpu, &sigma.cpu, &c_in.cpu, &t2s.cpu),
             op_edm_add_noise(&x_t.gpu, &net_in.gpu, &x0.gpu, &noise.gpu, &sigma.gpu, &c_in.gpu, &t2s.gpu));
        PAIR_CLOSE("edm x_t (f32: the CPU's bits)", &x_t, 0, 0);
        PAIR_CLOSE("edm net_in", &net_in, 0, TOL(dt, 0, 4e-3));

        Pair F = PAIR_RAND(dt, 64, -2, 2, S, C), den = PAIR_ZEROS(DT_F32, S, C);
        pack_nan_padding(&F, C);
        BOTH(op_edm_denoise(&den.cpu, &x_t.cpu, &F.cpu, &c_skip.cpu, &c_out.cpu, &t2s.cpu),
             op_edm_denoise(&den.gpu, &x_t.gpu, &F.gpu, &c_skip.gpu, &c_out.gpu, &t2s.gpu));
        PAIR_CLOSE("edm denoised (f32: the CPU's bits)", &den, 0, 0);
        Pair dden = PAIR_RAND(DT_F32, 65, -1, 1, S, C), dF = PAIR_ZEROS(dt, S, C);
        pack_nan_padding(&dden, C);
        BOTH(op_edm_denoise_backward(&dF.cpu, &dden.cpu, &c_out.cpu, &t2s.cpu),
             op_edm_denoise_backward(&dF.gpu, &dden.gpu, &c_out.gpu, &t2s.gpu));
        PAIR_CLOSE("edm dF", &dF, 0, TOL(dt, 0, 4e-3));

        /* loss: row 2 (sample 0) masked out and NaN, padding rows NaN */
        Pair target = PAIR_RAND(DT_F32, 66, -1, 1, S, C), mask = PAIR_ZEROS(DT_F32, S);
        for (int64_t s = 0; s < S; s++) mask.h[s] = PACK_T2S[s] < 0 ? NAN : (s == 2 ? 0.f : 1.f);
        pair_upload(&mask);
        for (int64_t c = 0; c < C; c++) den.h[2 * C + c] = NAN;
        pair_upload(&den);
        pack_nan_padding(&target, C);
        Pair loss = PAIR_ZEROS(DT_F32, 1), ssum = PAIR_ZEROS(DT_F32, B), scount = PAIR_ZEROS(DT_F32, B);
        BOTH(op_weighted_mse_forward(&loss.cpu, &ssum.cpu, &scount.cpu, &den.cpu, &target.cpu, &weight.cpu, &mask.cpu, &t2s.cpu),
             op_weighted_mse_forward(&loss.gpu, &ssum.gpu, &scount.gpu, &den.gpu, &target.gpu, &weight.gpu, &mask.gpu,
                                     &t2s.gpu));
        PAIR_CLOSE("weighted mse loss", &loss, 0, 1e-6);
        PAIR_CLOSE("weighted mse sample sums", &ssum, 0, 1e-6);
        PAIR_CLOSE("weighted mse sample counts", &scount, 0, 0);
        Pair dpred = PAIR_ZEROS(DT_F32, S, C);
        BOTH(op_weighted_mse_backward(&dpred.cpu, 0.7, &den.cpu, &target.cpu, &weight.cpu, &mask.cpu, &t2s.cpu),
             op_weighted_mse_backward(&dpred.gpu, 0.7, &den.gpu, &target.gpu, &weight.gpu, &mask.gpu, &t2s.gpu));
        PAIR_CLOSE("weighted mse dpred", &dpred, 0, 1e-6);
        void *a = pair_snapshot(&loss);
        REQUIRE_OK(op_weighted_mse_forward(&loss.gpu, NULL, NULL, &den.gpu, &target.gpu, &weight.gpu, &mask.gpu, &t2s.gpu));
        PAIR_SAME_BITS("weighted mse loss", &loss, a);
        free(a);
        Pair *all[] = {&sigma, &c_skip, &c_out, &c_in, &c_noise, &weight, &x0, &noise, &x_t, &net_in, &F, &den,
                       &dden, &dF, &target, &mask, &loss, &ssum, &scount, &dpred};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) pair_free(all[i]);
        ipair_free(&t2s);
    }
}

/* n = 10007: a short last chunk; aligned and misaligned, both the CPU's bits */
TEST(cuda_adamw_gives_the_cpu_bits) {
    NEED_GPU();
    const int64_t n = 10007;
    Paths pp = {0};
    for (pp.pass = 0; pp.pass < 2; pp.pass++) {
        pp.n = 0;
        Pair p = PAIR_RAND(DT_F32, 71, -1, 1, n), m = PAIR_ZEROS(DT_F32, n), v = PAIR_ZEROS(DT_F32, n);
        MISALIGN(&pp, &p, &m, &v);
        for (int step = 1; step <= 3; step++) {
            Pair g = PAIR_RAND(DT_F32, 72 + step, -2, 2, n);
            MISALIGN(&pp, &g);
            AdamWHyper h = {1e-3f * step, 0.9f, 0.95f, 1e-8f, step == 2 ? 0.f : 0.1f, step, step == 3 ? 0.7f : 1.f, NULL};
            BOTH(op_adamw_step(&p.cpu, &m.cpu, &v.cpu, &g.cpu, &h), op_adamw_step(&p.gpu, &m.gpu, &v.gpu, &g.gpu, &h));
            PATHS_CLOSE(&pp, "adamw param", &p, 0, 0);
            PATHS_CLOSE(&pp, "adamw m", &m, 0, 0);
            PATHS_CLOSE(&pp, "adamw v", &v, 0, 0);
            pair_free(&g);
        }
        pair_free(&p), pair_free(&m), pair_free(&v);
    }
}

TEST(cuda_reductions_match_cpu) {
    NEED_GPU();
    for (int di = 0; di < 2; di++) {
        Pair x = PAIR_RAND(GPU_DTYPES[di], 81, -3, 3, 100003);
        double c = 0, g = 0, g2 = 0;
        BOTH(op_sum_squares(&c, &x.cpu), op_sum_squares(&g, &x.gpu));
        REQUIRE_OK(op_sum_squares(&g2, &x.gpu));
        CHECK_MSG(fabs(g - c) <= 1e-12 * c, "%s sum of squares: GPU %.17g CPU %.17g", dtype_name(GPU_DTYPES[di]), g, c);
        CHECK_MSG(memcmp(&g, &g2, sizeof g) == 0, "sum of squares differs between two runs");
        x.h[5] = NAN, x.h[77] = INFINITY, x.h[100002] = -INFINITY, x.h[1000] = NAN;
        pair_upload(&x);
        int64_t nc = -1, ng = -1;
        BOTH(op_count_nonfinite(&nc, &x.cpu), op_count_nonfinite(&ng, &x.gpu));
        CHECK_MSG(nc == 4 && ng == 4, "%s non-finite count: CPU %lld GPU %lld (want 4)", dtype_name(GPU_DTYPES[di]),
                  (long long)nc, (long long)ng);
        pair_free(&x);
    }
}

/* [17, 24]: whole chunks, column blocks of aligned rows (but the one at column 10); [17, 23]: a
 * short last chunk, rows that start unaligned (element by element) */
static void utilities_case(DType dt, int64_t C) {
    double rt = TOL(dt, 0, 1.2e-2); /* f32: the CPU's bits; bf16: a rounding per op of the chain */
    Paths pp = {0};
    for (pp.pass = 0; pp.pass < 2; pp.pass++) {
        pp.n = 0;
        Pair a = PAIR_RAND(dt, 91, -1, 1, 17, C), b = PAIR_RAND(dt, 92, -1, 1, 17, C), out = PAIR_ZEROS(dt, 17, C);
        Pair chunk = PAIR_ZEROS(dt, 17, 8), copy = PAIR_ZEROS(dt, 17, C);
        MISALIGN(&pp, &a, &b, &out, &chunk, &copy);
        BOTH(op_add(&out.cpu, &a.cpu, &b.cpu), op_add(&out.gpu, &a.gpu, &b.gpu));
        PATHS_CLOSE(&pp, "add", &out, 0, rt);
        BOTH(op_scale(&out.cpu, 0.37), op_scale(&out.gpu, 0.37));
        PATHS_CLOSE(&pp, "scale", &out, 0, rt);
        BOTH(op_axpy(&out.cpu, -1.3, &a.cpu), op_axpy(&out.gpu, -1.3, &a.gpu));
        PATHS_CLOSE(&pp, "axpy", &out, 0, rt);
        BOTH(op_ema_update(&out.cpu, &b.cpu, 0.999), op_ema_update(&out.gpu, &b.gpu, 0.999));
        PATHS_CLOSE(&pp, "ema_update", &out, 0, rt);
        BOTH(op_columns_get(&chunk.cpu, &a.cpu, 8), op_columns_get(&chunk.gpu, &a.gpu, 8));
        PATHS_CLOSE(&pp, "columns_get", &chunk, 0, 0);
        BOTH(op_columns_add(&b.cpu, &chunk.cpu, 10), op_columns_add(&b.gpu, &chunk.gpu, 10));
        PATHS_CLOSE(&pp, "columns_add at column 10 (its rows start unaligned)", &b, 0, rt);
        BOTH(op_columns_add(&b.cpu, &chunk.cpu, C - 8), op_columns_add(&b.gpu, &chunk.gpu, C - 8));
        PATHS_CLOSE(&pp, "columns_add at the last 8 columns", &b, 0, rt);
        BOTH(op_fill(&out.cpu, 0.3), op_fill(&out.gpu, 0.3));
        PATHS_CLOSE(&pp, "fill", &out, 0, rt);
        REQUIRE_OK(op_copy(&copy.gpu, &a.gpu));
        memcpy(copy.h, a.h, (size_t)a.n * sizeof(float));
        PATHS_CLOSE(&pp, "copy", &copy, 0, 0);
        pair_free(&a), pair_free(&b), pair_free(&out), pair_free(&chunk), pair_free(&copy);
    }
}

TEST(cuda_utilities_match_cpu) {
    NEED_GPU();
    for (int di = 0; di < 2; di++) {
        utilities_case(GPU_DTYPES[di], 24);
        utilities_case(GPU_DTYPES[di], 23);
    }
    /* convert: f32 -> bf16 rounds as bf16_from_f32 (to nearest even), bf16 -> f32 exactly; 4099
     * elements (a short last chunk), aligned and misaligned */
    const int64_t n = 4099;
    for (int pass = 0; pass < 2; pass++) {
        Pair f = PAIR_RAND(DT_F32, 93, -100, 100, n), h = PAIR_ZEROS(DT_BF16, n), back = PAIR_ZEROS(DT_F32, n);
        if (pass) pair_misalign(&f), pair_misalign(&h), pair_misalign(&back);
        REQUIRE_OK(op_convert(&h.gpu, &f.gpu));
        uint16_t *bits = malloc((size_t)n * sizeof(uint16_t));
        REQUIRE_OK(device_memcpy(bits, DEV_CPU, h.gpu.data, DEV_CUDA, (size_t)n * sizeof(uint16_t)));
        int64_t wrong = 0;
        for (int64_t i = 0; i < n; i++) wrong += bits[i] != bf16_from_f32(f.h[i]);
        CHECK_MSG(wrong == 0, "convert f32->bf16 (%s): %lld of %lld values round differently from the CPU",
                  pass ? "misaligned" : "aligned", (long long)wrong, (long long)n);
        REQUIRE_OK(op_convert(&back.gpu, &h.gpu));
        for (int64_t i = 0; i < n; i++) back.h[i] = f32_from_bf16(bits[i]);
        PAIR_CLOSE(pass ? "convert bf16->f32 (misaligned)" : "convert bf16->f32", &back, 0, 0);
        free(bits);
        pair_free(&f), pair_free(&h), pair_free(&back);
    }
}

/* A call that broke the dtype contract: a shape error whose message names the op and the argument. */
static void expect_contract_error(vfm_status s, const char *op, const char *arg_text, int line) {
    const char *msg = vfm_last_error();
    if (s != VFM_ERR_SHAPE || !strstr(msg, op) || !strstr(msg, arg_text))
        test_fail(__FILE__, line, "%s: want a shape error naming '%s', got %s: %s", op, arg_text, vfm_status_name(s), msg);
}
#define EXPECT_CONTRACT(call, op, arg_text) expect_contract_error((call), (op), (arg_text), __LINE__)

/* The mixed-precision contract is enforced before any kernel runs, so this runs without a GPU: a
 * wrong dtype names the op and the argument. The fake device pointers are never dereferenced. */
TEST(cuda_dtype_contract_names_op_and_argument) {
    static char fake[256];
    Tensor x = TENSOR(fake, DT_BF16, DEV_CUDA, 4, 8), y = TENSOR(fake, DT_BF16, DEV_CUDA, 4, 8);
    Tensor mean16 = TENSOR(fake, DT_BF16, DEV_CUDA, 4), rstd = TENSOR(fake, DT_F32, DEV_CUDA, 4);
    Tensor t2s = TENSOR(fake, DT_I32, DEV_CUDA, 4);
    EXPECT_CONTRACT(op_layernorm_modulate_forward(&y, &mean16, &rstd, &x, NULL, NULL, &t2s, 1e-6f),
                    "layernorm_modulate_forward", "mean is bf16[4]@cuda, expected f32");
    Tensor w = TENSOR(fake, DT_BF16, DEV_CUDA, 6, 8), dy = TENSOR(fake, DT_BF16, DEV_CUDA, 4, 6);
    Tensor dw16 = TENSOR(fake, DT_BF16, DEV_CUDA, 6, 8);
    EXPECT_CONTRACT(op_linear_backward(NULL, &dw16, NULL, &dy, &x, &w, NULL, ACT_NONE, 0), "linear_backward",
                    "dw is bf16[6,8]@cuda, expected f32");
    Tensor rs16 = TENSOR(fake, DT_BF16, DEV_CUDA, 4);
    EXPECT_CONTRACT(op_rmsnorm_forward(&y, &rs16, &x, NULL, 1e-6f), "rmsnorm_forward", "rstd is bf16[4]@cuda, expected f32");
    Tensor q = TENSOR(fake, DT_BF16, DEV_CUDA, 4, 2, 8), lse16 = TENSOR(fake, DT_BF16, DEV_CUDA, 4, 2);
    Tensor cu = TENSOR(fake, DT_I32, DEV_CUDA, 2);
    VarlenLayout layout = {1, cu, cu, cu, cu, 4, 4};
    EXPECT_CONTRACT(op_attention_forward(&q, &lse16, &q, &q, &q, &layout), "attention_forward",
                    "lse is bf16[4,2]@cuda, expected f32");
    Tensor sigma = TENSOR(fake, DT_F32, DEV_CUDA, 2);
    EXPECT_CONTRACT(op_edm_add_noise(NULL, NULL, &x, &x, &sigma, NULL, &t2s), "edm_add_noise",
                    "x0 is bf16[4,8]@cuda, expected f32");
    Tensor p16 = TENSOR(fake, DT_BF16, DEV_CUDA, 16);
    AdamWHyper h = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.f, 1, 1.f, NULL};
    EXPECT_CONTRACT(op_adamw_step(&p16, &p16, &p16, &p16, &h), "adamw_step", "param is bf16");
    Tensor t16 = TENSOR(fake, DT_BF16, DEV_CUDA, 2), emb = TENSOR(fake, DT_BF16, DEV_CUDA, 2, 16);
    EXPECT_CONTRACT(op_timestep_embedding_forward(&emb, &t16, 1, 0.f, 10000.f), "timestep_embedding_forward",
                    "t is bf16[2]@cuda, expected f32");
    Tensor dtab16 = TENSOR(fake, DT_BF16, DEV_CUDA, 5, 8), lab = TENSOR(fake, DT_I32, DEV_CUDA, 4);
    EXPECT_CONTRACT(op_embedding_backward(&dtab16, &x, &lab), "embedding_backward", "dtable is bf16[5,8]@cuda, expected f32");
    /* the CPU stays strict: one float dtype per call */
    float xf[32] = {0}, rf[4] = {0};
    double md[4] = {0};
    int32_t map[4] = {0, 0, 0, 0};
    Tensor cx = TF32(xf, 4, 8), cy = TF32(xf, 4, 8), cm = TF64(md, 4), cr = TF32(rf, 4), ct = TI32(map, 4);
    EXPECT_CONTRACT(op_layernorm_modulate_forward(&cy, &cm, &cr, &cx, NULL, NULL, &ct, 1e-6f),
                    "layernorm_modulate_forward", "mean is f64[4]@cpu, expected f32");
}
