/* Small DiT fixtures for model tests (see dit_pack.h). */
#include "dit_pack.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

static const int DEFAULT_GRID[DIT_PACK_SAMPLES][3] = {{3, 2, 3}, {1, 1, 5}, {1, 1, 1}, {1, 2, 4}}; /* 18, 5, 1, 8 tokens */
static const int DEFAULT_TEXT_LEN[DIT_PACK_SAMPLES] = {3, 2, 1, 4};

void dit_pack_make(DitPack *p, const DiTConfig *c, int pad, uint64_t seed) {
    dit_pack_make_shaped(p, c, DEFAULT_GRID, DEFAULT_TEXT_LEN, pad, seed);
}

void dit_pack_make_shaped(DitPack *p, const DiTConfig *c, const int GRID[DIT_PACK_SAMPLES][3],
                          const int TEXT_LEN[DIT_PACK_SAMPLES], int pad, uint64_t seed) {
    enum { NS = DIT_PACK_SAMPLES };
    memset(p, 0, sizeof *p);
    int tok = dit_token_dim(c), out = dit_out_dim(c), dt = c->d_text > 0 ? c->d_text : 1;
    p->d_text = dt;
    int max_q = 0, max_kv = 0;
    for (int i = 0; i < NS; i++) {
        int len = GRID[i][0] * GRID[i][1] * GRID[i][2];
        p->cu[i + 1] = p->cu[i] + len;
        p->cu_pad[i + 1] = p->cu_pad[i] + (len + pad - 1) / pad * pad;
        p->cu_text[i + 1] = p->cu_text[i] + TEXT_LEN[i];
        p->cu_text_pad[i + 1] = p->cu_text_pad[i] + (TEXT_LEN[i] + 3) / 4 * 4;
        if (len > max_q) max_q = len;
        if (TEXT_LEN[i] > max_kv) max_kv = TEXT_LEN[i];
    }
    p->S = p->cu_pad[NS], p->L = p->cu_text_pad[NS];
    p->x = calloc((size_t)(p->S * tok), sizeof(float));
    p->dout = calloc((size_t)(p->S * out), sizeof(float));
    p->text = calloc((size_t)(p->L * dt), sizeof(float));
    p->c_noise = malloc(NS * sizeof(float)), p->fps = malloc(NS * sizeof(float));
    p->t2s = malloc((size_t)p->S * sizeof(int32_t)), p->pos = calloc((size_t)(p->S * 3), sizeof(int32_t));
    p->cls = malloc(NS * sizeof(int32_t));
    for (int64_t r = 0; r < p->S; r++) p->t2s[r] = -1;
    for (int i = 0; i < NS; i++) {
        int len = p->cu[i + 1] - p->cu[i];
        test_fill_uniform_f32(p->x + (int64_t)p->cu_pad[i] * tok, (int64_t)len * tok, seed + 10 * i + 1, -1, 1);
        test_fill_uniform_f32(p->dout + (int64_t)p->cu_pad[i] * out, (int64_t)len * out, seed + 10 * i + 2, -1, 1);
        test_fill_uniform_f32(p->text + (int64_t)p->cu_text_pad[i] * dt, (int64_t)TEXT_LEN[i] * dt, seed + 10 * i + 3, -1, 1);
        for (int r = 0; r < len; r++) {
            int64_t row = p->cu_pad[i] + r;
            p->t2s[row] = i;
            p->pos[row * 3] = r / (GRID[i][1] * GRID[i][2]);
            p->pos[row * 3 + 1] = r / GRID[i][2] % GRID[i][1];
            p->pos[row * 3 + 2] = r % GRID[i][2];
        }
        p->c_noise[i] = 0.3f * (float)i - 0.4f;
        p->fps[i] = GRID[i][0] > 1 ? 24.0f : 30.0f;
        p->cls[i] = c->num_classes > 0 ? i % c->num_classes : 0;
    }
    p->tx = TF32(p->x, p->S, tok), p->tdout = TF32(p->dout, p->S, out), p->ttext = TF32(p->text, p->L, dt);
    p->tcn = TF32(p->c_noise, NS), p->tfps = TF32(p->fps, NS), p->tt2s = TI32(p->t2s, p->S);
    p->tpos = TI32(p->pos, p->S, 3), p->tcls = TI32(p->cls, NS);
    p->tcu = TI32(p->cu, NS + 1), p->tcup = TI32(p->cu_pad, NS + 1);
    p->tcut = TI32(p->cu_text, NS + 1), p->tcutp = TI32(p->cu_text_pad, NS + 1);
    DiTInputs *in = &p->in;
    in->x = &p->tx, in->c_noise = &p->tcn, in->fps = &p->tfps, in->text = &p->ttext, in->tok2sample = &p->tt2s;
    in->pos = &p->tpos;
    in->class_labels = c->num_classes > 0 ? &p->tcls : NULL;
    in->self_layout = (VarlenLayout){NS, p->tcu, p->tcup, p->tcu, p->tcup, max_q, max_q};
    in->cross_layout = (VarlenLayout){NS, p->tcu, p->tcup, p->tcut, p->tcutp, max_q, max_kv};
}

void dit_pack_free(DitPack *p) {
    free(p->x), free(p->dout), free(p->text), free(p->c_noise), free(p->fps), free(p->t2s), free(p->pos), free(p->cls);
    memset(p, 0, sizeof *p);
}

DiTConfig dit_test_config(DiTVariant v, int layers) {
    DiTConfig c;
    memset(&c, 0, sizeof c);
    c.variant = v;
    c.hidden = 32, c.layers = layers, c.heads = 4, c.kv_heads = v == DIT_VARIANT_DFM || v == DIT_VARIANT_MOVIEGEN ? 2 : 4;
    c.in_channels = 4, c.out_channels = 4, c.patch_spatial = 2, c.patch_temporal = 1;
    c.d_text = 8, c.adaln_lora = 8, c.fps_dim = 8, c.qk_norm = 1, c.ln_eps = 1e-5f, c.init_std = 0.02f;
    if (v == DIT_VARIANT_ADALN_ZERO) c.num_classes = 3, c.class_dropout_prob = 0.1f, c.learn_sigma = 1;
    dit_config_resolve(&c);
    return c;
}

float *dit_test_weights(const DiTConfig *c, uint64_t seed, int64_t *n) {
    DiT d;
    dit_describe(&d, c);
    *n = d.table.total;
    dit_destroy(&d);
    float *w = malloc((size_t)*n * sizeof(float));
    if (w) test_fill_uniform_f32(w, *n, seed, -0.2f, 0.2f);
    return w;
}

void dit_test_moe_config(DiTConfig *out, DiTVariant v, int token_choice) {
    DiTConfig c = dit_test_config(v, 2);
    c.moe = (MoeSpec){.experts = 4, .ffn = 16, .topk = token_choice ? 2 : 1, .capacity_factor = 2.f,
                      .routing = token_choice ? MOE_TOKEN_AUX_LOSS : MOE_EXPERT_CHOICE,
                      .aux_coeff = token_choice ? 0.01f : 0.f, .z_coeff = token_choice ? 0.001f : 0.f};
    REQUIRE_OK(dit_config_resolve(&c));
    *out = c;
}

void dit_pack_make_replica(DitPack *p, const DiTConfig *c, int i) {
    static const int grids[4][DIT_PACK_SAMPLES][3] = {
        {{3, 3, 5}, {1, 4, 5}, {1, 1, 1}, {2, 2, 3}}, {{1, 2, 3}, {2, 3, 3}, {1, 5, 5}, {1, 1, 2}},
        {{2, 2, 2}, {1, 1, 1}, {3, 2, 5}, {1, 3, 4}}, {{1, 1, 3}, {1, 6, 6}, {2, 1, 4}, {1, 2, 2}}};
    static const int text[DIT_PACK_SAMPLES] = {3, 5, 1, 2};
    REQUIRE(i >= 0 && i < 4);
    dit_pack_make_shaped(p, c, grids[i], text, 4, 900 + (uint64_t)i);
}

double dit_max_abs(const float *x, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) m = fabs(x[i]) > m ? fabs(x[i]) : m;
    return m;
}

double dit_pack_rel_err(const DitPack *p, const float *got, const float *want, int64_t w) {
    double e = 0, m = 0;
    for (int i = 0; i < DIT_PACK_SAMPLES; i++)
        for (int64_t r = p->cu_pad[i]; r < p->cu_pad[i] + p->cu[i + 1] - p->cu[i]; r++)
            for (int64_t k = 0; k < w; k++) {
                double d = fabs((double)got[r * w + k] - want[r * w + k]);
                e = d != d ? INFINITY : d > e ? d : e;
                m = fabs(want[r * w + k]) > m ? fabs(want[r * w + k]) : m;
            }
    return m > 0 ? e / m : e;
}
