/* Generation: CFG sampling over packs of [conditional | unconditional] samples. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diffusion/generate.h"
#include "test.h"

static void tiny_model(DiT *m, int text_matters) {
    DiTConfig c = {.hidden = 32, .layers = 2, .heads = 4, .kv_heads = 4, .head_dim = 8, .ffn = 64, .in_channels = 3,
                   .out_channels = 3, .patch_spatial = 2, .patch_temporal = 1, .d_text = 8, .adaln_lora = 8,
                   .fps_dim = 16, .qk_norm = 1, .ln_eps = 1e-5f, .init_std = 0.02f};
    dit_create(m, &c, DEV_CPU);
    dit_init_weights(m, 3);
    float *noise = malloc((size_t)m->table.total * sizeof(float));
    test_fill_uniform_f32(noise, m->table.total, 5, -0.1f, 0.1f);
    for (int64_t i = 0; i < m->table.total; i++) m->params[i] += noise[i];
    free(noise);
    for (int l = 0; l < c.layers; l++) {
        /* the cross-attention output projection: off (the text cannot matter) or strong */
        char name[64];
        snprintf(name, sizeof name, "blocks.%d.cross_attn.proj.weight", l);
        int id = param_table_find(&m->table, name);
        CHECK_MSG(id >= 0, "no %s", name);
        if (id < 0) return;
        const ParamEntry *e = &m->table.entries[id];
        for (int64_t k = 0; k < e->numel; k++) m->params[e->offset + k] *= text_matters ? 30.0f : 0.0f;
    }
}

static void run(DiT *m, double guidance, int n, const float *text, float **out) {
    GenerateSample s[4];
    for (int i = 0; i < n; i++) {
        s[i] = (GenerateSample){{3, i == 1 ? 2 : 1, 4, 6}, text, text ? 2 : 0, 30.0f, (uint64_t)i, -1};
    }
    GenerateOptions o;
    memset(&o, 0, sizeof o);
    sampler_config_default(&o.sampler);
    o.sampler.num_steps = 4;
    o.guidance = guidance;
    o.sigma_data = 0.5f;
    o.seed = 11;
    vfm_status st = generate_latents(m, &o, s, n, out);
    if (st != VFM_OK) test_fail(__FILE__, __LINE__, "%s", vfm_last_error());
}

TEST(generate_finite_deterministic_and_independent_of_batching) {
    DiT m;
    tiny_model(&m, 1);
    float text[16];
    test_fill_uniform_f32(text, 16, 2, -1, 1);
    float *a[2], *b[2], *alone[1];
    for (int i = 0; i < 2; i++) a[i] = malloc(3 * 2 * 4 * 6 * sizeof(float)), b[i] = malloc(3 * 2 * 4 * 6 * sizeof(float));
    alone[0] = malloc(3 * 4 * 6 * sizeof(float));
    run(&m, 3.0, 2, text, a);
    run(&m, 3.0, 2, text, b);
    run(&m, 3.0, 1, text, alone);
    for (int i = 0; i < 3 * 4 * 6; i++) CHECK(isfinite(a[0][i]));
    for (int i = 0; i < 3 * 2 * 4 * 6; i++) CHECK(isfinite(a[1][i]));
    CHECK(memcmp(a[0], b[0], 3 * 4 * 6 * sizeof(float)) == 0);
    CHECK(memcmp(a[1], b[1], 3 * 2 * 4 * 6 * sizeof(float)) == 0);
    /* sample 0 alone equals sample 0 in a batch of two (attention never crosses samples) */
    CHECK_CLOSE_F32("batched vs alone", a[0], alone[0], 3 * 4 * 6, 1e-5, 1e-4);
    for (int i = 0; i < 2; i++) free(a[i]), free(b[i]);
    free(alone[0]);
    dit_destroy(&m);
}

TEST(generate_guidance_only_acts_through_the_text) {
    DiT m;
    tiny_model(&m, 0);
    float text[16];
    test_fill_uniform_f32(text, 16, 2, -1, 1);
    float *g0[1], *g7[1];
    g0[0] = malloc(3 * 4 * 6 * sizeof(float));
    g7[0] = malloc(3 * 4 * 6 * sizeof(float));
    run(&m, 0.0, 1, text, g0);
    run(&m, 7.0, 1, text, g7);
    /* D_c == D_u, so (1+g)·D_c − g·D_u == D_c up to float rounding, which 4 steps from σ = 80
     * carry to ~3e-5 of the largest value */
    CHECK_CLOSE_F32("g=7 vs g=0 when text cannot matter", g7[0], g0[0], 3 * 4 * 6, 1e-5, 1e-4);
    dit_destroy(&m);
    tiny_model(&m, 1);
    run(&m, 0.0, 1, text, g0);
    run(&m, 7.0, 1, text, g7);
    double diff = 0, top = 0;
    for (int i = 0; i < 3 * 4 * 6; i++) {
        if (fabs(g7[0][i] - g0[0][i]) > diff) diff = fabs(g7[0][i] - g0[0][i]);
        if (fabs(g0[0][i]) > top) top = fabs(g0[0][i]);
    }
    CHECK_MSG(diff > 1e-2 * top, "guidance changed little (%g of %g) although the text matters", diff, top);
    free(g0[0]);
    free(g7[0]);
    dit_destroy(&m);
}

/* Flow and DDPM (learned sigma: a 2C-channel model) sample through the same CFG pack: finite,
 * deterministic, and a sample alone equals it in a batch. */
static void run_objective(DiT *m, const Objective *o, int ddim, int n, const float *text, float **out) {
    GenerateSample s[2];
    for (int i = 0; i < n; i++) s[i] = (GenerateSample){{3, i == 1 ? 2 : 1, 4, 6}, text, 2, 30.0f, (uint64_t)i, -1};
    GenerateOptions opt;
    memset(&opt, 0, sizeof opt);
    sampler_config_default(&opt.sampler);
    opt.sampler.num_steps = 5;
    opt.objective = o;
    opt.ddim = ddim;
    opt.guidance = 2.0;
    opt.seed = 11;
    vfm_status st = generate_latents(m, &opt, s, n, out);
    if (st != VFM_OK) test_fail(__FILE__, __LINE__, "%s", vfm_last_error());
}

TEST(generate_flow_and_ddpm_finite_deterministic_and_batch_invariant) {
    float text[16];
    test_fill_uniform_f32(text, 16, 2, -1, 1);
    for (int k = 0; k < 3; k++) { /* flow, ddpm (ancestral), ddpm (DDIM) with learned sigma */
        DiT m;
        DiTConfig c = {.hidden = 32, .layers = 2, .heads = 4, .kv_heads = 4, .head_dim = 8, .ffn = 64, .in_channels = 3,
                       .out_channels = 3, .patch_spatial = 2, .patch_temporal = 1, .d_text = 8, .adaln_lora = 8,
                       .fps_dim = 16, .qk_norm = 1, .ln_eps = 1e-5f, .init_std = 0.02f, .learn_sigma = k > 0};
        REQUIRE_OK(dit_create(&m, &c, DEV_CPU));
        REQUIRE_OK(dit_init_weights(&m, 3));
        float *noise = malloc((size_t)m.table.total * sizeof(float));
        test_fill_uniform_f32(noise, m.table.total, 5, -0.1f, 0.1f);
        for (int64_t i = 0; i < m.table.total; i++) m.params[i] += noise[i];
        free(noise);
        /* an untrained model's ε̂ does not explain x: the reverse chain amplifies x by up to
         * 1/√ᾱ = 157 at t = 999, and a learned variance far outside [-1, 1] blows it up; a small
         * output layer keeps the run finite while still depending on every input */
        for (int e = 0; e < 2 && k > 0; e++) {
            int id = param_table_find(&m.table, e ? "final_linear.bias" : "final_linear.weight");
            REQUIRE(id >= 0);
            const ParamEntry *pe = &m.table.entries[id];
            for (int64_t i = 0; i < pe->numel; i++) m.params[pe->offset + i] *= 0.02f;
        }
        Objective o;
        memset(&o, 0, sizeof o);
        o.kind = k == 0 ? OBJECTIVE_FLOW : OBJECTIVE_DDPM;
        o.flow_shift = 1.0;
        int64_t n0 = 3 * 4 * 6, n1 = 3 * 2 * 4 * 6;
        float *a[2] = {malloc(n0 * sizeof(float)), malloc(n1 * sizeof(float))};
        float *b[2] = {malloc(n0 * sizeof(float)), malloc(n1 * sizeof(float))};
        float *alone[1] = {malloc(n0 * sizeof(float))};
        run_objective(&m, &o, k == 2, 2, text, a);
        run_objective(&m, &o, k == 2, 2, text, b);
        run_objective(&m, &o, k == 2, 1, text, alone);
        int finite = 1;
        for (int64_t i = 0; i < n0; i++) finite &= isfinite(a[0][i]) != 0;
        for (int64_t i = 0; i < n1; i++) finite &= isfinite(a[1][i]) != 0;
        CHECK_MSG(finite, "case %d: non-finite values", k);
        CHECK(memcmp(a[0], b[0], n0 * sizeof(float)) == 0 && memcmp(a[1], b[1], n1 * sizeof(float)) == 0);
        CHECK_CLOSE_F32(k == 0 ? "flow: batched vs alone" : "ddpm: batched vs alone", a[0], alone[0], n0, 1e-5, 1e-4);
        double top = 0;
        for (int64_t i = 0; i < n0; i++) top = fmax(top, fabs(a[0][i]));
        CHECK_MSG(top > 0.1 && top < 1e4, "case %d: the sample's largest value is %g", k, top);
        free(a[0]), free(a[1]), free(b[0]), free(b[1]), free(alone[0]);
        dit_destroy(&m);
    }
}
