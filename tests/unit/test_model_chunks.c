/* The DiT split into chunks of blocks (dit.h "chunks", the pipeline stages' unit): a chain of
 * chunk forwards and backwards, each with its own saved activations and in the order a pipeline
 * runs them, gives the whole model's output and block gradients bit for bit; the conditioning
 * embedders (which every chunk runs itself) get the same gradient up to summation order. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/dit.h"
#include "test.h"

enum { S = 6, TOK = 12, NT = 2, DT = 8, LAYERS = 5 };

typedef struct Pack {
    float x[S * TOK], t[1], fps[1], text[NT * DT];
    int32_t t2s[S], pos[3 * S], cu[2], cu_text[2], cls[1];
    Tensor X, T, F, TEXT, T2S, POS, CLS;
    DiTInputs in;
} Pack;

static void make_pack(Pack *p, uint64_t seed) {
    test_fill_uniform_f32(p->x, S * TOK, seed, -1, 1);
    test_fill_uniform_f32(p->text, NT * DT, seed + 1, -1, 1);
    p->t[0] = 0.3f, p->fps[0] = 24.0f, p->cls[0] = 2;
    for (int s = 0; s < S; s++) p->t2s[s] = 0, p->pos[3 * s] = 0, p->pos[3 * s + 1] = s / 3, p->pos[3 * s + 2] = s % 3;
    p->cu[0] = 0, p->cu[1] = S, p->cu_text[0] = 0, p->cu_text[1] = NT;
    p->X = TF32(p->x, S, TOK), p->T = TF32(p->t, 1), p->F = TF32(p->fps, 1), p->TEXT = TF32(p->text, NT, DT);
    p->T2S = TI32(p->t2s, S), p->POS = TI32(p->pos, S, 3), p->CLS = TI32(p->cls, 1);
    Tensor cu = TI32(p->cu, 2), cut = TI32(p->cu_text, 2);
    p->in = (DiTInputs){&p->X, &p->T, &p->F, &p->TEXT, &p->T2S, &p->POS, {1, cu, cu, cu, cu, S, S},
                        {1, cu, cu, cut, cut, S, NT}, &p->CLS};
}

/* Runs every chunk [bounds[k], bounds[k+1]) for two packs in a 1F1B-like order (F0 of both
 * packs, then backward of pack 0, ...), each (pack, chunk) in its own slot; fills out[2] and the
 * model's gradients. */
static int run_chunks(DiT *m, Pack *p, const int *bounds, int n, float out[2][S * 24], const float dout[2][S * 24]) {
    enum { MAXC = 4 };
    DiTSaved *slot[2][MAXC];
    float h[2][MAXC + 1][S * 16], g[2][MAXC + 1][S * 16];
    int64_t rows;
    if (dit_hidden_rows(m, &p[0].in, &rows) != VFM_OK || rows != S) return 0;
    for (int b = 0; b < 2; b++)
        for (int k = 0; k < n; k++)
            if (dit_saved_create(m, &slot[b][k]) != VFM_OK) return 0;
    int od = dit_out_dim(&m->cfg);
    for (int b = 0; b < 2; b++)
        for (int k = 0; k < n; k++) {
            Tensor x = TF32(h[b][k], S, 16), y = TF32(h[b][k + 1], S, 16), o = TF32(out[b], S, od);
            if (dit_chunk_forward(m, slot[b][k], &p[b].in, bounds[k], bounds[k + 1], k ? &x : NULL,
                                  k + 1 < n ? &y : NULL, k + 1 < n ? NULL : &o) != VFM_OK)
                return 0;
            memset(h[b][k], 0xff, sizeof h[b][k]); /* the caller may reuse x once the forward returned */
        }
    for (int b = 0; b < 2; b++)
        for (int k = n - 1; k >= 0; k--) {
            Tensor dy = TF32(g[b][k + 1], S, 16), dx = TF32(g[b][k], S, 16), d = TF32((float *)dout[b], S, od);
            if (dit_chunk_backward(m, slot[b][k], &p[b].in, bounds[k], bounds[k + 1], k + 1 < n ? &dy : NULL,
                                   k ? &dx : NULL, k + 1 < n ? NULL : &d) != VFM_OK)
                return 0;
        }
    for (int b = 0; b < 2; b++)
        for (int k = 0; k < n; k++) dit_saved_destroy(m, slot[b][k]);
    return 1;
}

TEST(model_chunks_chain_to_the_whole_model) {
    static const DiTVariant variants[] = {DIT_VARIANT_ADALN_ZERO, DIT_VARIANT_NEMO_ADALN, DIT_VARIANT_MOVIEGEN};
    for (int vi = 0; vi < 3; vi++) {
        DiTConfig c = {.variant = variants[vi], .hidden = 16, .layers = LAYERS, .heads = 2, .in_channels = 3,
                       .out_channels = 3, .patch_spatial = 2, .patch_temporal = 1, .d_text = DT, .qk_norm = 1,
                       .ln_eps = 1e-5f, .init_std = 0.02f, .adaln_lora = 4, .fps_dim = 8};
        if (variants[vi] == DIT_VARIANT_ADALN_ZERO) c.num_classes = 4, c.class_dropout_prob = 0.1f, c.cross_attention = DIT_ON;
        REQUIRE_OK(dit_config_resolve(&c));
        DiT m;
        REQUIRE_OK(dit_create(&m, &c, DEV_CPU));
        test_fill_uniform_f32(m.params, m.table.total, 11 + vi, -0.3f, 0.3f);
        REQUIRE_OK(dit_reserve(&m, S, NT, 1));
        int od = dit_out_dim(&c);
        Pack p[2];
        make_pack(&p[0], 21), make_pack(&p[1], 31);
        static float out_ref[2][S * 24], out[2][S * 24], dout[2][S * 24];
        test_fill_uniform_f32(dout[0], S * od, 41, -1, 1);
        test_fill_uniform_f32(dout[1], S * od, 42, -1, 1);
        /* the whole model, pack after pack */
        for (int b = 0; b < 2; b++) {
            Tensor o = TF32(out_ref[b], S, od), d = TF32(dout[b], S, od);
            REQUIRE_OK(dit_forward(&m, &p[b].in, &o));
            REQUIRE_OK(dit_backward(&m, &p[b].in, &d));
        }
        float *g_ref = malloc((size_t)m.table.total * sizeof(float));
        memcpy(g_ref, m.grads, (size_t)m.table.total * sizeof(float));
        static const int splits[3][5] = {{0, LAYERS}, {0, 1, LAYERS}, {0, 1, 2, 4, LAYERS}};
        static const int nsplit[3] = {1, 2, 4};
        for (int si = 0; si < 3; si++) {
            memset(m.grads, 0, (size_t)m.table.total * sizeof(float));
            REQUIRE(run_chunks(&m, p, splits[si], nsplit[si], out, (const float(*)[S * 24])dout));
            CHECK_MSG(memcmp(out, out_ref, sizeof out) == 0, "variant %d split %d: output not bitwise", vi, si);
            /* blocks, patch embedder, final layer: bitwise; conditioning: summation order */
            int cond = 0;
            for (int e = 0; e < m.table.count; e++) {
                const ParamEntry *pe = &m.table.entries[e];
                const float *a = m.grads + pe->offset, *r = g_ref + pe->offset;
                if (!(pe->reduce_groups & REDUCE_PP)) {
                    CHECK_MSG(memcmp(a, r, (size_t)pe->numel * sizeof(float)) == 0, "variant %d split %d: %s", vi, si,
                              pe->name);
                    continue;
                }
                cond++;
                double worst = 0, scale = 0;
                for (int64_t i = 0; i < pe->numel; i++) worst = fmax(worst, fabs(a[i] - r[i])), scale = fmax(scale, fabs(r[i]));
                CHECK_MSG(worst <= 1e-5 * scale + 1e-12, "variant %d split %d: %s off by %g (max %g)", vi, si,
                          pe->name, worst, scale);
                if (nsplit[si] == 1) CHECK(worst == 0);
            }
            CHECK(cond >= 4); /* t embedder (2 linears) at least */
        }
        /* the chunk interface refuses ends that do not fit */
        Tensor o = TF32(out[0], S, od);
        CHECK(dit_chunk_forward(&m, NULL, &p[0].in, 1, LAYERS, NULL, NULL, &o) == VFM_ERR_INTERNAL);
        CHECK(dit_chunk_forward(&m, NULL, &p[0].in, 0, LAYERS + 1, NULL, NULL, &o) == VFM_ERR_INTERNAL);
        free(g_ref);
        dit_destroy(&m);
    }
}
