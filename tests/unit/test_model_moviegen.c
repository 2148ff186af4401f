/* moviegen beyond its goldens (test_model_golden.c): the presets' parameter counts against NeMo's
 * (research/pp-fsdp-moe-moviegen.md §4: 1.64 / 6.2 / 36.8 B) and the exact per-block count of NeMo's
 * layer spec; the parameter table (names, shapes, no biases in attention and MLP); the cross-
 * attention without residual (it changes the output only through the MLP); positions outside the
 * learned tables refused; Movie Gen's σ_min in the flow path and target; its keys warn where they do
 * not apply. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capture.h"
#include "core/config.h"
#include "core/log.h"
#include "data/pack/pack.h"
#include "diffusion/objective.h"
#include "model/dit.h"
#include "test.h"
#include "train/train_setup.h"
#include "train/train_config.h"

static int64_t preset_count(const char *preset, DiTConfig *c) {
    char ov[64];
    snprintf(ov, sizeof ov, "model.preset=%s", preset);
    const char *o[1] = {ov};
    Config *cfg;
    if (config_load(&cfg, NULL, o, 1) != VFM_OK) return -1;
    vfm_status s = dit_config_from(c, cfg);
    config_free(cfg);
    if (s != VFM_OK) return -1;
    DiT m;
    dit_describe(&m, c);
    int64_t n = param_table_trainable(&m.table);
    dit_destroy(&m);
    return n;
}

TEST(moviegen_presets_within_one_percent_of_nemo) {
    static const struct { const char *name; double billions; } P[] = {
        {"moviegen-1b", 1.64}, {"moviegen-5b", 6.2}, {"moviegen-30b", 36.8}};
    for (int i = 0; i < 3; i++) {
        DiTConfig c;
        int64_t n = preset_count(P[i].name, &c);
        REQUIRE(n > 0);
        CHECK(c.variant == DIT_VARIANT_MOVIEGEN && c.kv_heads == 8 && c.d_text == c.hidden && c.init_std == 0.01f);
        double rel = (double)n / (P[i].billions * 1e9) - 1;
        CHECK_MSG(fabs(rel) < 0.01, "%s: %lld parameters, %.2f%% from %.2f B", P[i].name, (long long)n, 100 * rel,
                  P[i].billions);
        printf("      %s: %lld parameters (%+.3f%% from NeMo's %.2f B)\n", P[i].name, (long long)n, 100 * rel,
               P[i].billions);
        /* per block: adaLN 6D², its norm D, self-attention 2D² + 2·D·Dkv, cross-attention 2D² + 2·d·D
         * (k, v from the text to D), SwiGLU 3·D·F; the rest: x-embedder, the three position tables,
         * t- and fps-embedders, the conditioning norm, the final Linear */
        int64_t D = c.hidden, L = c.layers, F = c.ffn, Dkv = (int64_t)c.kv_heads * c.head_dim, d = c.d_text;
        int64_t fp = c.fps_dim, tok = 64, out = 64; /* 16 channels, patch 1x2x2 */
        int64_t block = 6 * D * D + D + 2 * D * D + 2 * D * Dkv + 2 * D * D + 2 * d * D + 3 * D * F;
        int64_t rest = (tok * D + D) + (int64_t)(c.pos_rows[0] + c.pos_rows[1] + c.pos_rows[2]) * D +
                       2 * (D * D + D) + 2 * (fp * fp + fp) + D + (D * out + out);
        CHECK_MSG(n == L * block + rest, "%s: %lld vs %lld", P[i].name, (long long)n, (long long)(L * block + rest));
    }
}

static DiTConfig tiny(void) {
    DiTConfig c = {.variant = DIT_VARIANT_MOVIEGEN, .hidden = 16, .layers = 2, .heads = 4, .kv_heads = 2, .ffn = 24,
                   .in_channels = 3, .out_channels = 3, .patch_spatial = 2, .patch_temporal = 1, .d_text = 12,
                   .fps_dim = 8, .ln_eps = 1e-5f, .init_std = 0.01f, .pos_rows = {2, 3, 4}};
    return c;
}

TEST(moviegen_table_is_nemos_layer_spec) {
    DiTConfig c = tiny();
    REQUIRE_OK(dit_config_resolve(&c));
    CHECK(c.f.n_chunks == 6 && c.f.swiglu && c.f.block_rms && c.f.cross_feeds_mlp && c.f.pos == DIT_POS_LEARNED_3D);
    DiT m;
    dit_describe(&m, &c);
    static const struct { const char *name; int64_t d0, d1; } want[] = {
        {"x_embedder.weight", 16, 12}, {"x_embedder.bias", 16, 0}, {"pos_embedder.emb_t.weight", 2, 16},
        {"pos_embedder.emb_h.weight", 3, 16}, {"pos_embedder.emb_w.weight", 4, 16}, {"cond_norm.weight", 16, 0},
        {"blocks.1.adaln.linear.weight", 96, 16}, {"blocks.1.adaln.norm.weight", 16, 0},
        {"blocks.1.self_attn.k.weight", 8, 16}, {"blocks.1.cross_attn.k.weight", 16, 12},
        {"blocks.1.mlp.fc1.weight", 48, 16}, {"blocks.1.mlp.fc2.weight", 16, 24}, {"final_linear.bias", 12, 0}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        int e = param_table_find(&m.table, want[i].name);
        CHECK_MSG(e >= 0, "%s missing", want[i].name);
        if (e < 0) continue;
        const ParamEntry *p = &m.table.entries[e];
        CHECK_MSG(p->shape[0] == want[i].d0 && (want[i].d1 == 0 ? p->ndim == 1 : p->shape[1] == want[i].d1), "%s",
                  want[i].name);
    }
    for (int i = 0; i < m.table.count; i++) { /* NeMo's spec: no biases in the blocks, no QK-norm */
        const char *n = m.table.entries[i].name;
        CHECK_MSG(!(strncmp(n, "blocks.", 7) == 0 && (strstr(n, ".bias") || strstr(n, "_norm."))), "%s", n);
    }
    dit_destroy(&m);
}

/* A pack of one video of 2 or 3 frames (C 3, 4 x 6: grid frames x 2 x 3, 6 tokens a frame, slots of
 * 8 rows) and 2 text rows. Buffers hold the largest: 18 tokens, 24 rows. */
enum { ROWS = 24, TOK = 12 };
typedef struct {
    Pack p;
    float tokens[18 * TOK], text[2 * 12];
} Video;

static void video(Video *v, int frames, const float *tokens) {
    memcpy(v->tokens, tokens, (size_t)frames * 6 * TOK * sizeof(float));
    test_fill_uniform_f32(v->text, 2 * 12, 77, -1, 1);
    pack_init(&v->p, 12, 12, 8, 4);
    EncodedSample s;
    memset(&s, 0, sizeof s);
    s.info.latent_shape[0] = 3, s.info.latent_shape[1] = frames, s.info.latent_shape[2] = 4, s.info.latent_shape[3] = 6;
    s.info.grid[0] = frames, s.info.grid[1] = 2, s.info.grid[2] = 3;
    s.info.tokens = frames * 6, s.info.text_tokens = 2, s.info.fps = 24;
    s.tokens = v->tokens, s.text = v->text;
    pack_append(&v->p, &s);
}

static int random_moviegen(DiT *m, DiTConfig c, uint64_t seed) {
    if (dit_create(m, &c, DEV_CPU) != VFM_OK) return 0;
    test_fill_uniform_f32(m->params, m->table.total, seed, -0.3f, 0.3f);
    return dit_reserve(m, 64, 8, 2) == VFM_OK;
}

/* The loss of the pack at flow time sigma with noise eps and Movie Gen's σ_min; F: the output. */
static double flow_loss(DiT *m, const Video *v, double smin, float sigma, const float *eps, float *F) {
    Objective o;
    memset(&o, 0, sizeof o);
    o.kind = OBJECTIVE_FLOW, o.flow_sigma_min = smin;
    float noise[ROWS * TOK] = {0}, t[1] = {sigma};
    int drop[1] = {0};
    memcpy(noise, eps, (size_t)v->p.samples[0].tokens * TOK * sizeof(float));
    DiffusionDraws d = {.t = t, .drop = drop, .noise = noise};
    ObjectiveResult r = {.F = F};
    if (objective_loss_given(m, &o, &v->p, &d, 0.0, &r) != VFM_OK) return NAN;
    return r.loss;
}

/* Movie Gen's flow at its ends, σ_min 0.25 (large, so that it shows): at σ = 1 (t = 0) the input
 * is the noise, at σ = 0 (t = 1) the data plus σ_min·noise (the output equals a σ_min = 0 run on
 * that data), and the target is (1 − σ_min)·ε − x0 (the loss from the output written out). */
TEST(moviegen_flow_sigma_min_path_and_target) {
    DiT m;
    REQUIRE(random_moviegen(&m, tiny(), 5));
    float x0[18 * TOK], eps[18 * TOK], mixed[18 * TOK], F[ROWS * TOK], G[ROWS * TOK];
    test_fill_uniform_f32(x0, 12 * 12, 3, -1, 1);
    test_fill_uniform_f32(eps, 12 * 12, 4, -1.5f, 1.5f);
    const float smin = 0.25f;
    for (int i = 0; i < 12 * 12; i++) mixed[i] = x0[i] + smin * eps[i];
    Video v, vm;
    video(&v, 2, x0);
    video(&vm, 2, mixed);
    for (int end = 0; end < 2; end++) {
        double loss = flow_loss(&m, &v, smin, (float)end, eps, F);
        double want = 0;
        for (int i = 0; i < 12 * 12; i++) want += pow(F[i] - ((1 - smin) * eps[i] - x0[i]), 2);
        want /= 12 * 12;
        CHECK_MSG(fabs(loss - want) <= 1e-6 * want, "σ = %d: loss %.8g vs %.8g", end, loss, want);
        /* the same input another way: σ = 1 is the noise whatever σ_min; σ = 0 is x0 + σ_min·ε */
        flow_loss(&m, end ? &v : &vm, 0.0, (float)end, eps, G);
        double worst = 0;
        for (int i = 0; i < 12 * 12; i++) worst = fmax(worst, fabs(F[i] - G[i]));
        CHECK_MSG(worst <= 1e-6, "σ = %d: the input differs (outputs %g apart)", end, worst);
    }
    pack_free(&v.p), pack_free(&vm.p);
    dit_destroy(&m);
}

/* The cross-attention has no residual: with every MLP's output weight zero the text cannot reach
 * the output (in dfm it still would, through its own gate); with them, it does. */
TEST(moviegen_cross_attention_reaches_the_output_only_through_the_mlp) {
    DiT m;
    REQUIRE(random_moviegen(&m, tiny(), 6));
    float x0[18 * TOK], eps[18 * TOK] = {0}, F[2][ROWS * TOK];
    test_fill_uniform_f32(x0, 12 * 12, 8, -1, 1);
    for (int zero_fc2 = 0; zero_fc2 < 2; zero_fc2++) {
        if (zero_fc2)
            for (int i = 0; i < m.table.count; i++)
                if (strstr(m.table.entries[i].name, "mlp.fc2.weight"))
                    memset(m.params + m.table.entries[i].offset, 0, (size_t)m.table.entries[i].numel * sizeof(float));
        for (int k = 0; k < 2; k++) {
            Video v;
            video(&v, 2, x0);
            if (k) test_fill_uniform_f32(v.p.text, 2 * 12, 99, -1, 1); /* another prompt */
            flow_loss(&m, &v, 0.0, 0.5f, eps, F[k]);
            pack_free(&v.p);
        }
        int same = memcmp(F[0], F[1], 12 * 12 * sizeof(float)) == 0;
        CHECK_MSG(same == zero_fc2, "MLP %s: the prompt %s the output", zero_fc2 ? "zeroed" : "on",
                  same ? "does not change" : "changes");
    }
    dit_destroy(&m);
}

TEST(moviegen_positions_outside_the_tables_are_refused) {
    DiT m;
    REQUIRE(random_moviegen(&m, tiny(), 7)); /* t table of 2 rows */
    float x0[18 * TOK] = {0}, eps[18 * TOK] = {0}, F[ROWS * TOK];
    Video v;
    video(&v, 2, x0);
    CHECK(!isnan(flow_loss(&m, &v, 0.0, 0.5f, eps, F)));
    pack_free(&v.p);
    video(&v, 3, x0); /* 3 frames: t = 2 */
    CHECK(isnan(flow_loss(&m, &v, 0.0, 0.5f, eps, F)));
    CHECK_MSG(strstr(vfm_last_error(), "t = 2") && strstr(vfm_last_error(), "model.max_frames"), "%s",
              vfm_last_error());
    pack_free(&v.p);
    dit_destroy(&m);
}

/* model.max_* size only moviegen's learned tables, and moviegen has no QK-norm: the run's set-up
 * reads them only where they act, so setting them elsewhere is named (docs/config.md "Keys a run
 * does not use"); moviegen's own use and the defaults stay quiet. */
TEST(moviegen_keys_are_named_where_they_do_not_apply) {
    static const struct {
        const char *a, *b, *c;
        const char *warns; /* NULL: quiet */
        int refused;
    } rows[] = {
        {"model.variant=moviegen", "model.max_img_h=64", NULL, NULL, 0},
        {"model.variant=moviegen", NULL, NULL, NULL, 0},
        {"model.variant=dfm", NULL, NULL, NULL, 0},
        {"model.variant=dfm", "model.max_img_h=64", NULL, "model.max_img_h=64 is set but this run does not use it", 0},
        {"model.variant=moviegen", "model.pos_embedding=sincos3d", "model.max_frames=8",
         "model.max_frames=8 is set but this run does not use it", 0},
        {"model.variant=moviegen", "model.qk_layernorm=true", NULL, "model.qk_layernorm=true", 1},
    };
    log_set_level(LOG_INFO);
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const char *ov[5] = {"model.preset=tiny", "dataset.mock=true", rows[i].a, rows[i].b, rows[i].c};
        int n = 3 + (rows[i].b != NULL) + (rows[i].c != NULL);
        Config *cfg = NULL;
        REQUIRE_OK(config_load(&cfg, NULL, ov, n));
        TrainSetup su;
        Capture cap;
        capture_begin(&cap, 2);
        vfm_status s = train_setup_from_config(&su, cfg, 1);
        char *err = capture_end(&cap);
        if (rows[i].refused) {
            CHECK_MSG(s == VFM_ERR_USAGE && strstr(vfm_last_error(), rows[i].warns), "row %zu: %s", i, vfm_last_error());
        } else {
            CHECK_MSG(s == VFM_OK, "row %zu: %s", i, vfm_last_error());
            if (rows[i].warns) CHECK_MSG(strstr(err, rows[i].warns) != NULL, "row %zu: stderr '%s'", i, err);
            else CHECK_MSG(strstr(err, "warning") == NULL, "row %zu: stderr '%s'", i, err);
        }
        free(err);
        config_free(cfg);
    }
}
