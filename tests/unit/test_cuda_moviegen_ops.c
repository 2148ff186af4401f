/* GPU: MovieGen's ops (RMSNorm + modulate, the learned factorized 3-D position), CUDA vs the CPU
 * oracle on the same inputs in f32 and bf16, NaN in the padding rows the ops must not read, the
 * backward run twice for the same bits; the position's f32 table gradient is the CPU's bits (the
 * same additions in the same order). Skipped without a GPU; the harness suite runs them on the CPU. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_pair.h"
#include "ops/ops.h"
#include "test.h"

TEST(cuda_rmsnorm_modulate_matches_cpu) {
    NEED_GPU();
    const int64_t S = PACK_S, B = PACK_B, D = 80;
    for (int di = 0; di < 2; di++) {
        DType dt = GPU_DTYPES[di];
        IPair t2s = IPAIR(PACK_T2S, S);
        Pair x = PAIR_RAND(dt, 31, -2, 3, S, D), w = PAIR_RAND(dt, 32, 0.5f, 1.5f, D);
        Pair shift = PAIR_RAND(dt, 33, -1, 1, B, D), scale = PAIR_RAND(dt, 34, -1, 1, B, D);
        pack_nan_padding(&x, D);
        Pair y = PAIR_ZEROS(dt, S, D), rstd = PAIR_ZEROS(DT_F32, S);
        BOTH(op_rmsnorm_modulate_forward(&y.cpu, &rstd.cpu, &x.cpu, &w.cpu, &shift.cpu, &scale.cpu, &t2s.cpu, 1e-5f),
             op_rmsnorm_modulate_forward(&y.gpu, &rstd.gpu, &x.gpu, &w.gpu, &shift.gpu, &scale.gpu, &t2s.gpu, 1e-5f));
        PAIR_CLOSE("rmsnorm_modulate y", &y, 1e-5, TOL(dt, 1e-5, 8e-3));
        PAIR_CLOSE("rmsnorm_modulate rstd (f32)", &rstd, 1e-6, 2e-6);

        Pair dy = PAIR_RAND(dt, 35, -1, 1, S, D), dx = PAIR_RAND(dt, 36, -1, 1, S, D);
        Pair dw = PAIR_RAND(DT_F32, 37, -1, 1, D), dshift = PAIR_RAND(dt, 38, -1, 1, B, D);
        Pair dscale = PAIR_RAND(dt, 39, -1, 1, B, D);
        pack_nan_padding(&dy, D);
        float *dx0 = pair_copy_host(&dx), *dw0 = pair_copy_host(&dw), *ds0 = pair_copy_host(&dshift);
        float *dc0 = pair_copy_host(&dscale);
        BOTH(op_rmsnorm_modulate_backward(&dx.cpu, &dw.cpu, &dshift.cpu, &dscale.cpu, &dy.cpu, &x.cpu, &rstd.cpu, &w.cpu,
                                          &scale.cpu, &t2s.cpu),
             op_rmsnorm_modulate_backward(&dx.gpu, &dw.gpu, &dshift.gpu, &dscale.gpu, &dy.gpu, &x.gpu, &rstd.gpu, &w.gpu,
                                          &scale.gpu, &t2s.gpu));
        PAIR_CLOSE("rmsnorm_modulate dx (+=)", &dx, 1e-5, TOL(dt, 2e-5, 1.2e-2));
        PAIR_CLOSE("rmsnorm_modulate dw (f32, +=)", &dw, 1e-5, TOL(dt, 1e-5, 1e-2));
        PAIR_CLOSE("rmsnorm_modulate dshift (+=)", &dshift, 1e-5, TOL(dt, 1e-5, 1e-2));
        PAIR_CLOSE("rmsnorm_modulate dscale (+=)", &dscale, 1e-5, TOL(dt, 1e-5, 1e-2));
        void *a = pair_snapshot(&dx), *b = pair_snapshot(&dw), *c = pair_snapshot(&dshift), *e = pair_snapshot(&dscale);
        pair_upload_values(&dx, dx0), pair_upload_values(&dw, dw0), pair_upload_values(&dshift, ds0);
        pair_upload_values(&dscale, dc0);
        REQUIRE_OK(op_rmsnorm_modulate_backward(&dx.gpu, &dw.gpu, &dshift.gpu, &dscale.gpu, &dy.gpu, &x.gpu, &rstd.gpu,
                                                &w.gpu, &scale.gpu, &t2s.gpu));
        PAIR_SAME_BITS("rmsnorm_modulate dx", &dx, a);
        PAIR_SAME_BITS("rmsnorm_modulate dw", &dw, b);
        PAIR_SAME_BITS("rmsnorm_modulate dshift", &dshift, c);
        PAIR_SAME_BITS("rmsnorm_modulate dscale", &dscale, e);
        /* without weight, shift and scale */
        BOTH(op_rmsnorm_modulate_forward(&y.cpu, &rstd.cpu, &x.cpu, NULL, NULL, NULL, &t2s.cpu, 1e-6f),
             op_rmsnorm_modulate_forward(&y.gpu, &rstd.gpu, &x.gpu, NULL, NULL, NULL, &t2s.gpu, 1e-6f));
        PAIR_CLOSE("rmsnorm (plain) y", &y, 1e-5, TOL(dt, 1e-5, 8e-3));
        free(a), free(b), free(c), free(e), free(dx0), free(dw0), free(ds0), free(dc0);
        pair_free(&x), pair_free(&w), pair_free(&shift), pair_free(&scale), pair_free(&y), pair_free(&rstd);
        pair_free(&dy), pair_free(&dx), pair_free(&dw), pair_free(&dshift), pair_free(&dscale), ipair_free(&t2s);
    }
}

TEST(cuda_pos_embed_learned_matches_cpu) {
    NEED_GPU();
    const int64_t S = PACK_S, D = 72, NT = 3, NH = 70, NW = 5; /* NH spans two row tiles of the backward */
    int32_t pos[PACK_S * 3];
    for (int s = 0; s < PACK_S; s++) {
        pos[3 * s] = s % 3, pos[3 * s + 1] = (s * 29) % 70, pos[3 * s + 2] = (s * 7) % 5;
        if (PACK_T2S[s] < 0) pos[3 * s + 1] = 9999; /* padding rows are never read */
    }
    for (int di = 0; di < 2; di++) {
        DType dt = GPU_DTYPES[di];
        IPair t2s = IPAIR(PACK_T2S, S), p = IPAIR(pos, S, 3);
        Pair et = PAIR_RAND(dt, 41, -1, 1, NT, D), eh = PAIR_RAND(dt, 42, -1, 1, NH, D), ew = PAIR_RAND(dt, 43, -1, 1, NW, D);
        Pair out = PAIR_RAND(dt, 44, -1, 1, S, D);
        BOTH(op_pos_embed_learned_forward(&out.cpu, &et.cpu, &eh.cpu, &ew.cpu, &p.cpu, &t2s.cpu),
             op_pos_embed_learned_forward(&out.gpu, &et.gpu, &eh.gpu, &ew.gpu, &p.gpu, &t2s.gpu));
        PAIR_CLOSE("pos_embed_learned_forward", &out, 0, TOL(dt, 0, 8e-3));
        Pair dout = PAIR_RAND(dt, 45, -1, 1, S, D);
        pack_nan_padding(&dout, D);
        Pair dt_ = PAIR_RAND(DT_F32, 46, -1, 1, NT, D), dh = PAIR_RAND(DT_F32, 47, -1, 1, NH, D);
        Pair dw = PAIR_RAND(DT_F32, 48, -1, 1, NW, D);
        BOTH(op_pos_embed_learned_backward(&dt_.cpu, &dh.cpu, &dw.cpu, &dout.cpu, &p.cpu, &t2s.cpu),
             op_pos_embed_learned_backward(&dt_.gpu, &dh.gpu, &dw.gpu, &dout.gpu, &p.gpu, &t2s.gpu));
        PAIR_CLOSE("pos_embed_learned_backward dtab_t (f32, +=)", &dt_, 0, 0);
        PAIR_CLOSE("pos_embed_learned_backward dtab_h (f32, +=)", &dh, 0, 0);
        PAIR_CLOSE("pos_embed_learned_backward dtab_w (f32, +=)", &dw, 0, 0);
        pair_free(&et), pair_free(&eh), pair_free(&ew), pair_free(&out), pair_free(&dout), pair_free(&dt_);
        pair_free(&dh), pair_free(&dw), ipair_free(&t2s), ipair_free(&p);
    }
}
