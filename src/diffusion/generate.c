/* CFG sampling over a pack of [conditional samples | unconditional samples] (see generate.h). */
#include "generate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/philox.h"
#include "data/pack.h"

typedef struct GenCtx {
    DiT *model;
    const GenerateOptions *opt;
    Pack pack;          /* 2n samples (n without guidance), no padding */
    int n, halves;
    int64_t S;          /* tokens of the n samples */
    Tensor x_all, net_in, F, denoised, tok2sample, pos, text; /* x_all: x repeated in every half */
    Tensor sigma, c_skip, c_out, c_in, c_noise, fps, class_row;
    int32_t *class_rows;  /* [2n] the null class for every sample (class-conditional models) */
    DiTInputs in;
} GenCtx;

static vfm_status denoise(void *ctx, const Tensor *x, double sigma_value, Tensor *out) {
    GenCtx *g = ctx;
    int B = g->pack.n_samples, C = g->pack.token_dim;
    float *sigma = g->sigma.data;
    for (int i = 0; i < B; i++) sigma[i] = (float)sigma_value;
    VFM_TRY(op_edm_precondition(&g->c_skip, &g->c_out, &g->c_in, &g->c_noise, NULL, &g->sigma, g->opt->sigma_data));
    for (int h = 0; h < g->halves; h++) { /* the same x for the conditional and unconditional halves */
        Tensor half = TF32((float *)g->x_all.data + h * g->S * C, g->S, C);
        VFM_TRY(op_copy(&half, x));
    }
    VFM_TRY(op_copy(&g->net_in, &g->x_all));
    VFM_TRY(op_scale(&g->net_in, ((float *)g->c_in.data)[0])); /* one σ for every sample */
    VFM_TRY(dit_forward(g->model, &g->in, &g->F));
    VFM_TRY(op_edm_denoise(&g->denoised, &g->x_all, &g->F, &g->c_skip, &g->c_out, &g->tok2sample));
    Tensor cond = TF32(g->denoised.data, g->S, C);
    VFM_TRY(op_copy(out, &cond));
    if (g->halves == 2) {
        Tensor uncond = TF32((float *)g->denoised.data + g->S * C, g->S, C);
        VFM_TRY(op_scale(out, 1.0 + g->opt->guidance));
        VFM_TRY(op_axpy(out, -g->opt->guidance, &uncond));
    }
    return VFM_OK;
}

static vfm_status build_pack(GenCtx *g, const GenerateSample *s, int n) {
    const DiTConfig *mc = &g->model->cfg;
    int C = dit_token_dim(mc);
    pack_init(&g->pack, C, mc->d_text, 1, 1);
    float *zero_text = calloc((size_t)mc->d_text, sizeof(float));
    float *zero_tokens = NULL;
    vfm_status st = VFM_OK;
    for (int h = 0; h < g->halves && st == VFM_OK; h++) {
        for (int i = 0; i < n && st == VFM_OK; i++) {
            const int32_t *ls = s[i].latent_shape;
            if (ls[0] != mc->in_channels || ls[1] % mc->patch_temporal || ls[2] % mc->patch_spatial ||
                ls[3] % mc->patch_spatial) {
                st = vfm_fail(VFM_ERR_USAGE, "sample latent %dx%dx%dx%d does not fit the model (channels %d, patch %dx%dx%d)",
                              ls[0], ls[1], ls[2], ls[3], mc->in_channels, mc->patch_temporal, mc->patch_spatial,
                              mc->patch_spatial);
                break;
            }
            EncodedSample e;
            memset(&e, 0, sizeof e);
            memcpy(e.info.latent_shape, ls, sizeof e.info.latent_shape);
            e.info.grid[0] = ls[1] / mc->patch_temporal;
            e.info.grid[1] = ls[2] / mc->patch_spatial;
            e.info.grid[2] = ls[3] / mc->patch_spatial;
            e.info.tokens = e.info.grid[0] * e.info.grid[1] * e.info.grid[2];
            e.info.fps = s[i].fps > 0 ? s[i].fps : 30.0f;
            e.info.uid = s[i].uid;
            int cond = h == 0 && s[i].text && s[i].text_rows > 0;
            e.info.text_tokens = cond ? s[i].text_rows : 1;
            e.text = cond ? (float *)s[i].text : zero_text;
            zero_tokens = realloc(zero_tokens, (size_t)e.info.tokens * C * sizeof(float));
            memset(zero_tokens, 0, (size_t)e.info.tokens * C * sizeof(float));
            e.tokens = zero_tokens;
            st = pack_append(&g->pack, &e);
        }
        if (h == 0) g->S = g->pack.n_tokens;
    }
    free(zero_text);
    free(zero_tokens);
    return st;
}

vfm_status generate_latents(DiT *model, const GenerateOptions *opt, const GenerateSample *samples, int n,
                            float **latents) {
    GenCtx g;
    memset(&g, 0, sizeof g);
    g.model = model;
    g.opt = opt;
    g.n = n;
    g.halves = opt->guidance != 0 ? 2 : 1;
    vfm_status st = build_pack(&g, samples, n);
    const DiTConfig *mc = &model->cfg;
    int C = dit_token_dim(mc), B = g.pack.n_samples;
    int64_t S_all = g.pack.n_tokens;
    float *buf = NULL;
    if (st == VFM_OK) {
        buf = calloc((size_t)(4 * S_all * C + 6 * B + g.S * C), sizeof(float));
        if (!buf) st = vfm_fail(VFM_ERR_NOMEM, "generate: working memory");
    }
    if (st == VFM_OK) {
        float *f = buf;
        g.x_all = TF32(f, S_all, C), f += S_all * C;
        g.net_in = TF32(f, S_all, C), f += S_all * C;
        g.F = TF32(f, S_all, C), f += S_all * C;
        g.denoised = TF32(f, S_all, C), f += S_all * C;
        g.sigma = TF32(f, B), f += B;
        g.c_skip = TF32(f, B), f += B;
        g.c_out = TF32(f, B), f += B;
        g.c_in = TF32(f, B), f += B;
        g.c_noise = TF32(f, B), f += B;
        g.fps = TF32(f, B), f += B;
        for (int i = 0; i < B; i++) ((float *)g.fps.data)[i] = g.pack.samples[i].fps;
        g.tok2sample = TI32(g.pack.token_sample, S_all);
        g.pos = TI32(g.pack.token_pos, S_all, 3);
        g.text = TF32(g.pack.text, g.pack.n_text, g.pack.text_dim);
        int max_q = 0, max_kv = 0;
        for (int i = 0; i < B; i++) {
            if (g.pack.samples[i].tokens > max_q) max_q = g.pack.samples[i].tokens;
            if (g.pack.samples[i].text_tokens > max_kv) max_kv = g.pack.samples[i].text_tokens;
        }
        Tensor cu_q = TI32(g.pack.cu_seqlens, B + 1), cu_qp = TI32(g.pack.cu_seqlens_padded, B + 1);
        Tensor cu_t = TI32(g.pack.cu_text, B + 1), cu_tp = TI32(g.pack.cu_text_padded, B + 1);
        g.in = (DiTInputs){&g.net_in, &g.c_noise, &g.fps, &g.text, &g.tok2sample, &g.pos,
                           (VarlenLayout){B, cu_q, cu_qp, cu_q, cu_qp, max_q, max_q},
                           (VarlenLayout){B, cu_q, cu_qp, cu_t, cu_tp, max_q, max_kv}, NULL};
        /* class-conditional models sample unconditionally (the null class) until sampling takes a class */
        if (mc->num_classes > 0) {
            g.class_rows = malloc((size_t)B * sizeof(int32_t));
            for (int i = 0; g.class_rows && i < B; i++) g.class_rows[i] = dit_class_row(mc, -1, 1);
            if (!g.class_rows || g.class_rows[0] < 0)
                st = vfm_fail(VFM_ERR_USAGE, "this model has %d classes and no null class (model.class_dropout_prob = 0): "
                              "it cannot sample without a class", mc->num_classes);
            g.class_row = TI32(g.class_rows, B);
            g.in.class_labels = &g.class_row;
        }
        if (st == VFM_OK) st = dit_reserve(model, S_all, g.pack.n_text, B);
    }
    /* initial noise: each sample's own, in its canonical latent layout, then patchified */
    Tensor x = TF32(buf ? buf + 4 * S_all * C + 6 * B : NULL, g.S, C);
    for (int i = 0; i < n && st == VFM_OK; i++) {
        const int32_t *ls = samples[i].latent_shape;
        float *canon = malloc((size_t)ls[0] * ls[1] * ls[2] * ls[3] * sizeof(float));
        Tensor c = TF32(canon, ls[0], ls[1], ls[2], ls[3]);
        Tensor rows = TF32((float *)x.data + (int64_t)g.pack.cu_seqlens_padded[i] * C, g.pack.samples[i].tokens, C);
        st = op_randn_fill(&c, opt->seed, RNG_STREAM_SAMPLER, 0xffffffffu, samples[i].uid, 0, 1.0f);
        if (st == VFM_OK) st = op_patchify(&rows, &c, mc->patch_temporal, mc->patch_spatial, mc->patch_spatial);
        free(canon);
    }
    if (st == VFM_OK) {
        SamplerConfig sc = opt->sampler;
        sc.seed = opt->seed;
        st = edm_heun_sample(&sc, denoise, &g, &x, opt->progress, opt->progress_ctx);
    }
    for (int i = 0; i < n && st == VFM_OK; i++) {
        const int32_t *ls = samples[i].latent_shape;
        Tensor rows = TF32((float *)x.data + (int64_t)g.pack.cu_seqlens_padded[i] * C, g.pack.samples[i].tokens, C);
        Tensor out = TF32(latents[i], ls[0], ls[1], ls[2], ls[3]);
        st = op_unpatchify(&out, &rows, mc->patch_temporal, mc->patch_spatial, mc->patch_spatial);
        if (st == VFM_OK) st = op_scale(&out, 1.0 / opt->sigma_data);
    }
    free(buf);
    free(g.class_rows);
    pack_free(&g.pack);
    return st;
}
