/* What the variants promise beyond the goldens: the learned-sigma output layout (prediction
 * channels first, per token), class labels and the null class, text that cannot matter without
 * cross-attention, and the configurations that are refused. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/dit.h"
#include "test.h"

static DiTConfig tiny_adaln_zero(void) {
    DiTConfig c = {.variant = DIT_VARIANT_ADALN_ZERO, .hidden = 16, .layers = 2, .heads = 2, .in_channels = 3,
                   .out_channels = 3, .patch_spatial = 2, .patch_temporal = 1, .d_text = 8, .qk_norm = 1,
                   .ln_eps = 1e-5f, .init_std = 0.02f, .num_classes = 4, .class_dropout_prob = 0.1f};
    return c;
}

/* One sample of 2x3 tokens (a 3x4x6 image), null prompt, at c_noise 0.3. */
typedef struct OnePack {
    float x[6 * 12], t[1], fps[1], text[2 * 8];
    int32_t t2s[6], pos[18], cu[2], cu_text[2], cls[1];
    Tensor X, T, F, TEXT, T2S, POS, CLS;
    DiTInputs in;
} OnePack;

static void one_pack(OnePack *p, int32_t class_row, int text_rows) {
    test_fill_uniform_f32(p->x, 6 * 12, 3, -1, 1);
    test_fill_uniform_f32(p->text, 2 * 8, 4, -1, 1);
    p->t[0] = 0.3f, p->fps[0] = 30.0f, p->cls[0] = class_row;
    for (int s = 0; s < 6; s++) p->t2s[s] = 0, p->pos[3 * s] = 0, p->pos[3 * s + 1] = s / 3, p->pos[3 * s + 2] = s % 3;
    p->cu[0] = 0, p->cu[1] = 6, p->cu_text[0] = 0, p->cu_text[1] = text_rows;
    p->X = TF32(p->x, 6, 12), p->T = TF32(p->t, 1), p->F = TF32(p->fps, 1), p->TEXT = TF32(p->text, text_rows, 8);
    p->T2S = TI32(p->t2s, 6), p->POS = TI32(p->pos, 6, 3), p->CLS = TI32(p->cls, 1);
    Tensor cu = TI32(p->cu, 2), cut = TI32(p->cu_text, 2);
    p->in = (DiTInputs){&p->X, &p->T, &p->F, &p->TEXT, &p->T2S, &p->POS, {1, cu, cu, cu, cu, 6, 6},
                        {1, cu, cu, cut, cut, 6, text_rows}, &p->CLS};
}

/* A model with random non-zero weights (the zero-initialised gates would hide everything). */
static int random_model(DiT *m, const DiTConfig *c, uint64_t seed) {
    if (dit_create(m, c, DEV_CPU) != VFM_OK) return 0;
    test_fill_uniform_f32(m->params, m->table.total, seed, -0.3f, 0.3f);
    return dit_reserve(m, 6, 2, 1) == VFM_OK;
}

TEST(model_learn_sigma_output_is_prediction_then_variance_per_token) {
    DiTConfig a = tiny_adaln_zero(), b = a;
    a.learn_sigma = 1;
    DiT ma, mb;
    REQUIRE(random_model(&ma, &a, 5) && dit_create(&mb, &b, DEV_CPU) == VFM_OK);
    REQUIRE_OK(dit_reserve(&mb, 6, 2, 1));
    CHECK(dit_out_dim(&ma.cfg) == 24 && dit_out_dim(&mb.cfg) == 12);
    /* b = a with the final linear's rows for channels c < C of each (ph pw) position */
    for (int i = 0; i < mb.table.count; i++) {
        const ParamEntry *eb = &mb.table.entries[i], *ea = &ma.table.entries[param_table_find(&ma.table, eb->name)];
        if (strncmp(eb->name, "final_layer.linear.", 19) != 0) {
            memcpy(mb.params + eb->offset, ma.params + ea->offset, (size_t)eb->numel * sizeof(float));
            continue;
        }
        int64_t cols = eb->ndim == 2 ? eb->shape[1] : 1;
        for (int64_t r = 0; r < eb->shape[0]; r++) { /* row r = (ph pw) position r/3, channel r%3 */
            int64_t ra = (r / 3) * 6 + r % 3;
            memcpy(mb.params + eb->offset + r * cols, ma.params + ea->offset + ra * cols, (size_t)cols * sizeof(float));
        }
    }
    OnePack p;
    one_pack(&p, 1, 1);
    float ya[6 * 24], yb[6 * 12];
    Tensor YA = TF32(ya, 6, 24), YB = TF32(yb, 6, 12);
    REQUIRE_OK(dit_forward(&ma, &p.in, &YA));
    REQUIRE_OK(dit_forward(&mb, &p.in, &YB));
    double worst = 0, var = 0;
    for (int s = 0; s < 6; s++)
        for (int k = 0; k < 12; k++) {
            int ka = (k / 3) * 6 + k % 3;
            worst = fmax(worst, fabs(ya[s * 24 + ka] - yb[s * 12 + k]));
            var = fmax(var, fabs(ya[s * 24 + ka + 3]));
        }
    /* the same sums, a different GEMM width: within an ulp or two of outputs of order 1 */
    CHECK_MSG(worst <= 1e-6, "prediction channels differ by %g", worst);
    CHECK(var > 0);
    dit_destroy(&ma);
    dit_destroy(&mb);
}

TEST(model_class_labels_and_the_null_class) {
    DiTConfig c = tiny_adaln_zero();
    REQUIRE_OK(dit_config_resolve(&c));
    CHECK(dit_class_row(&c, 2, 0) == 2 && dit_class_row(&c, 2, 1) == 4 && dit_class_row(&c, -1, 0) == 4);
    CHECK(dit_class_row(&c, 4, 0) == -1 && dit_class_row(&c, 9, 1) == 4);
    DiTConfig no_null = c;
    no_null.class_dropout_prob = 0;
    CHECK(dit_class_row(&no_null, 3, 0) == 3 && dit_class_row(&no_null, -1, 0) == -1 && dit_class_row(&no_null, 1, 1) == -1);
    DiTConfig none = c;
    none.num_classes = 0;
    CHECK(dit_class_row(&none, 0, 0) == -1);
    DiT m;
    REQUIRE(random_model(&m, &c, 6));
    int table = param_table_find(&m.table, "y_embedder.embedding_table.weight");
    CHECK(table >= 0 && m.table.entries[table].shape[0] == 5); /* 4 classes + the null row */
    float y[3][6 * 12];
    for (int k = 0; k < 3; k++) {
        OnePack p;
        one_pack(&p, k == 2 ? 4 : k, 1);
        Tensor Y = TF32(y[k], 6, 12);
        REQUIRE_OK(dit_forward(&m, &p.in, &Y));
    }
    CHECK(memcmp(y[0], y[1], sizeof y[0]) != 0 && memcmp(y[0], y[2], sizeof y[0]) != 0);
    OnePack p;
    one_pack(&p, 5, 1); /* outside the table */
    Tensor Y = TF32(y[0], 6, 12);
    CHECK(dit_forward(&m, &p.in, &Y) == VFM_ERR_SHAPE);
    p.in.class_labels = NULL;
    CHECK(dit_forward(&m, &p.in, &Y) == VFM_ERR_SHAPE && strstr(vfm_last_error(), "class label"));
    dit_destroy(&m);
}

/* adaln-zero has no cross-attention by default: the text cannot change the output; with it, it does. */
TEST(model_text_matters_only_with_cross_attention) {
    for (int cross = 0; cross < 2; cross++) {
        DiTConfig c = tiny_adaln_zero();
        c.cross_attention = cross ? DIT_ON : DIT_AUTO;
        DiT m;
        REQUIRE(random_model(&m, &c, 7));
        CHECK(m.cfg.f.cross_attn == cross && m.cfg.f.n_chunks == (cross ? 9 : 6));
        float y[2][6 * 12];
        for (int k = 0; k < 2; k++) {
            OnePack p;
            one_pack(&p, 1, k ? 2 : 1);
            Tensor Y = TF32(y[k], 6, 12);
            REQUIRE_OK(dit_forward(&m, &p.in, &Y));
        }
        CHECK_MSG((memcmp(y[0], y[1], sizeof y[0]) != 0) == cross, "cross-attention %d", cross);
        dit_destroy(&m);
    }
}

TEST(model_refuses_what_a_variant_cannot_build) {
    DiTConfig c = tiny_adaln_zero();
    c.kv_heads = 1; /* the reference's fused qkv has no grouped-query form */
    CHECK(dit_config_resolve(&c) == VFM_ERR_USAGE && strstr(vfm_last_error(), "num_query_groups"));
    c = tiny_adaln_zero();
    c.hidden = 24, c.heads = 2, c.pos_embedding = DIT_POS_SINCOS_3D; /* 3-D needs D % 16 */
    CHECK(dit_config_resolve(&c) == VFM_ERR_USAGE && strstr(vfm_last_error(), "multiple of 16"));
    c.pos_embedding = DIT_POS_AUTO; /* 2-D: D % 4 is enough */
    CHECK(dit_config_resolve(&c) == VFM_OK && c.f.pos == DIT_POS_SINCOS_2D);
    DiTConfig d = {.variant = DIT_VARIANT_DFM, .hidden = 32, .layers = 1, .heads = 2, .fps_dim = 64, .adaln_lora = 8,
                   .in_channels = 4, .out_channels = 4, .patch_spatial = 2, .patch_temporal = 1, .d_text = 8};
    CHECK(dit_config_resolve(&d) == VFM_ERR_USAGE && strstr(vfm_last_error(), "fps_embedding_dim"));
    d.fps_dim = 16, d.adaln_lora = 0;
    CHECK(dit_config_resolve(&d) == VFM_ERR_USAGE && strstr(vfm_last_error(), "adaln_lora_dim"));
    d.adaln_lora = 8, d.variant = DIT_VARIANT_NEMO_ADALN, d.adaln_lora = 0; /* nemo-adaln does not use the rank */
    CHECK(dit_config_resolve(&d) == VFM_OK && d.f.adaln_full && d.f.cond_norm);
}
