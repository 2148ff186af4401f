/* CFG sampling over a pack of [conditional samples | unconditional samples] with the sampler of
 * the objective (see generate.h). */
#include "generate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/philox.h"
#include "data/pack/pack.h"
#include "diffusion/conditioning.h"
#include "diffusion/ddpm.h"
#include "diffusion/flow.h"
#include "diffusion/unipc.h"

typedef struct GenCtx {
    DiT *model;
    const GenerateOptions *opt;
    ObjectiveKind kind;
    float sigma_data;
    Pack pack;          /* 2n samples (n without guidance), no padding */
    int n, halves;
    int64_t S;          /* tokens of the n samples */
    int C, out;         /* values per token in x and in the network output */
    Tensor x_all, net_in, F, denoised, eps_all, v_all; /* x_all: x repeated in every half */
    Tensor sigma, c_skip, c_out, c_in, c_noise;
    int32_t *labels;    /* [B] class labels (cond: the sample's, uncond: null), or NULL */
    PackConditioning cond;
} GenCtx;

/* x into every half of x_all, then net_in = scale·x_all */
static vfm_status fill_halves(GenCtx *g, const Tensor *x, double scale) {
    for (int h = 0; h < g->halves; h++) {
        Tensor half = TF32((float *)g->x_all.data + h * g->S * g->C, g->S, g->C);
        VFM_TRY(op_copy(&half, x));
    }
    VFM_TRY(op_copy(&g->net_in, &g->x_all));
    return scale == 1.0 ? VFM_OK : op_scale(&g->net_in, scale);
}

/* out = pred_c + g·(pred_c − pred_u) from all[S_all, C] (rows of the halves) */
static vfm_status guide(GenCtx *g, const Tensor *all, Tensor *out) {
    Tensor cond = TF32(all->data, g->S, g->C);
    VFM_TRY(op_copy(out, &cond));
    if (g->halves == 2) {
        Tensor uncond = TF32((float *)all->data + g->S * g->C, g->S, g->C);
        VFM_TRY(op_scale(out, 1.0 + g->opt->guidance));
        VFM_TRY(op_axpy(out, -g->opt->guidance, &uncond));
    }
    return VFM_OK;
}

/* the network output F from the current input (options' forward, or dit_forward) */
static vfm_status net_forward(GenCtx *g) {
    if (g->opt->forward) return g->opt->forward(g->opt->forward_ctx, g->model, &g->cond.in, &g->F);
    return dit_forward(g->model, &g->cond.in, &g->F);
}

/* EDM: the guided denoiser D(x; σ). */
static vfm_status edm_denoise(void *ctx, const Tensor *x, double sigma_value, Tensor *out) {
    GenCtx *g = ctx;
    int B = g->pack.n_samples;
    float *sigma = g->sigma.data;
    for (int i = 0; i < B; i++) sigma[i] = (float)sigma_value;
    VFM_TRY(op_edm_precondition(&g->c_skip, &g->c_out, &g->c_in, &g->c_noise, NULL, &g->sigma, g->sigma_data));
    VFM_TRY(fill_halves(g, x, ((float *)g->c_in.data)[0])); /* one σ for every sample */
    VFM_TRY(net_forward(g));
    VFM_TRY(op_edm_denoise(&g->denoised, &g->x_all, &g->F, &g->c_skip, &g->c_out, &g->cond.tok2sample));
    return guide(g, &g->denoised, out);
}

/* Flow: the guided velocity at per-sample times σ_b (time input 1000·σ). */
static vfm_status flow_velocity(void *ctx, const Tensor *x, const double *sigma, Tensor *v) {
    GenCtx *g = ctx;
    float *cn = g->c_noise.data;
    for (int h = 0; h < g->halves; h++)
        for (int b = 0; b < g->n; b++) cn[h * g->n + b] = (float)(1000.0 * sigma[b]);
    VFM_TRY(fill_halves(g, x, 1.0));
    VFM_TRY(net_forward(g));
    return guide(g, &g->F, v);
}

/* DDPM: guided ε at timestep t; v (learned variance) from the conditional half. */
static vfm_status ddpm_eps(void *ctx, const Tensor *x, int timestep, Tensor *eps, Tensor *v) {
    GenCtx *g = ctx;
    float *cn = g->c_noise.data;
    for (int i = 0; i < g->pack.n_samples; i++) cn[i] = (float)timestep;
    VFM_TRY(fill_halves(g, x, 1.0));
    VFM_TRY(net_forward(g));
    if (!v) return guide(g, &g->F, eps);
    VFM_TRY(op_channel_halves_split(&g->eps_all, &g->v_all, &g->F, g->model->cfg.in_channels));
    VFM_TRY(guide(g, &g->eps_all, eps));
    Tensor v_cond = TF32(g->v_all.data, g->S, g->C);
    return op_copy(v, &v_cond);
}

/* Standard-normal noise for the n samples at `step`: each in its canonical layout keyed by uid. */
static vfm_status sample_noise(GenCtx *g, const GenerateSample *s, uint32_t step, Tensor *x) {
    const DiTConfig *mc = &g->model->cfg;
    for (int i = 0; i < g->n; i++) {
        const int32_t *ls = s[i].latent_shape;
        float *canon = malloc((size_t)ls[0] * ls[1] * ls[2] * ls[3] * sizeof(float));
        if (!canon) return vfm_fail(VFM_ERR_NOMEM, "generate: noise");
        Tensor c = TF32(canon, ls[0], ls[1], ls[2], ls[3]);
        Tensor rows = TF32((float *)x->data + (int64_t)g->pack.cu_seqlens_padded[i] * g->C, g->pack.samples[i].tokens, g->C);
        vfm_status st = op_randn_fill(&c, g->opt->seed, RNG_STREAM_SAMPLER, step, s[i].uid, 0, 1.0f);
        if (st == VFM_OK) st = op_patchify(&rows, &c, mc->patch_temporal, mc->patch_spatial, mc->patch_spatial);
        free(canon);
        VFM_TRY(st);
    }
    return VFM_OK;
}

typedef struct DdpmNoiseCtx {
    GenCtx *g;
    const GenerateSample *samples;
} DdpmNoiseCtx;

static vfm_status ddpm_eps_adapter(void *ctx, const Tensor *x, int timestep, Tensor *eps, Tensor *v) {
    return ddpm_eps(((DdpmNoiseCtx *)ctx)->g, x, timestep, eps, v);
}

static vfm_status ddpm_step_noise(void *ctx, int step, Tensor *z) {
    DdpmNoiseCtx *d = ctx;
    return sample_noise(d->g, d->samples, (uint32_t)step, z);
}

static vfm_status build_pack(GenCtx *g, const GenerateSample *s, int n) {
    const DiTConfig *mc = &g->model->cfg;
    VFM_TRY(pack_init(&g->pack, g->C, mc->d_text, 1, 1));
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
            zero_tokens = realloc(zero_tokens, (size_t)e.info.tokens * g->C * sizeof(float));
            memset(zero_tokens, 0, (size_t)e.info.tokens * g->C * sizeof(float));
            e.tokens = zero_tokens;
            st = pack_append(&g->pack, &e);
            if (st == VFM_OK && g->labels) { /* the sample's class, the null class in the unconditional half */
                g->labels[h * n + i] = dit_class_row(mc, s[i].class_label, h == 1 || s[i].class_label < 0);
                if (g->labels[h * n + i] < 0 && (h == 1 || s[i].class_label < 0))
                    st = vfm_fail(VFM_ERR_USAGE, "this model has %d classes and no null class (model.class_dropout_prob "
                                  "= 0): it samples only a given class, without guidance", mc->num_classes);
                else if (g->labels[h * n + i] < 0)
                    st = vfm_fail(VFM_ERR_USAGE, "class %d is not one of the model's %d classes", s[i].class_label,
                                  mc->num_classes);
            }
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
    g.kind = opt->objective ? opt->objective->kind : OBJECTIVE_EDM;
    g.sigma_data = opt->objective ? opt->objective->sigma_data : opt->sigma_data;
    g.n = n;
    g.halves = opt->guidance != 0 ? 2 : 1;
    const DiTConfig *mc = &model->cfg;
    g.C = dit_token_dim(mc);
    g.out = dit_out_dim(mc);
    int learned = g.kind == OBJECTIVE_DDPM && g.out == 2 * g.C;
    if (g.out != g.C && !learned)
        return vfm_fail(VFM_ERR_USAGE, "generate: the model gives %d values per token for %d input values (%s)", g.out,
                        g.C, objective_name(g.kind));
    if (mc->num_classes > 0) g.labels = calloc((size_t)(2 * n), sizeof(int32_t));
    vfm_status st = build_pack(&g, samples, n);
    int B = g.pack.n_samples;
    int64_t S_all = g.pack.n_tokens;
    float *buf = NULL;
    if (st == VFM_OK) {
        buf = calloc((size_t)(3 * S_all * g.C + 2 * S_all * g.out + 5 * B + g.S * g.C), sizeof(float));
        if (!buf) st = vfm_fail(VFM_ERR_NOMEM, "generate: working memory");
    }
    if (st == VFM_OK) st = pack_conditioning_build(&g.cond, &g.pack, NULL, g.labels);
    Tensor x = TF32(NULL, g.S, g.C);
    if (st == VFM_OK) {
        float *f = buf;
        g.x_all = TF32(f, S_all, g.C), f += S_all * g.C;
        g.net_in = TF32(f, S_all, g.C), f += S_all * g.C;
        g.F = TF32(f, S_all, g.out), f += S_all * g.out;
        g.denoised = TF32(f, S_all, g.out), f += S_all * g.out;
        g.eps_all = TF32(f, S_all, g.C), f += S_all * g.C; /* v_all shares denoised (EDM only uses that) */
        g.v_all = TF32(g.denoised.data, S_all, g.C);
        g.sigma = TF32(f, B), f += B;
        g.c_skip = TF32(f, B), f += B;
        g.c_out = TF32(f, B), f += B;
        g.c_in = TF32(f, B), f += B;
        g.c_noise = TF32(f, B), f += B;
        x.data = f;
        g.cond.in.x = &g.net_in;
        g.cond.in.c_noise = &g.c_noise;
        st = dit_reserve(model, S_all, g.pack.n_text, B);
    }
    /* initial noise: each sample's own, in its canonical latent layout, then patchified */
    if (st == VFM_OK) st = sample_noise(&g, samples, 0xffffffffu, &x);
    if (st == VFM_OK && g.kind == OBJECTIVE_EDM) {
        SamplerConfig sc = opt->sampler;
        sc.seed = opt->seed;
        st = edm_heun_sample(&sc, edm_denoise, &g, &x, opt->progress, opt->progress_ctx);
    } else if (st == VFM_OK && g.kind == OBJECTIVE_FLOW) {
        int64_t *rows = malloc((size_t)(n + 1) * sizeof *rows);
        double *shift = malloc((size_t)n * sizeof *shift);
        for (int i = 0; rows && shift && i <= n; i++) {
            rows[i] = g.pack.cu_seqlens_padded[i];
            if (i < n) shift[i] = flow_shift_for(opt->objective, g.pack.samples[i].tokens);
        }
        if (!rows || !shift) st = vfm_fail(VFM_ERR_NOMEM, "generate: flow schedule");
        else if (opt->flow_unipc)
            st = flow_unipc_sample(opt->sampler.num_steps, opt->unipc_order, 1, n, rows, shift, flow_velocity, &g, &x,
                                   opt->progress, opt->progress_ctx);
        else
            st = flow_euler_sample(opt->sampler.num_steps, opt->flow_linear, n, rows, shift, flow_velocity, &g, &x,
                                   opt->progress, opt->progress_ctx);
        free(rows);
        free(shift);
    } else if (st == VFM_OK) {
        DdpmNoiseCtx dn = {&g, samples};
        st = ddpm_reverse_sample(opt->sampler.num_steps, opt->ddim, learned, ddpm_eps_adapter, ddpm_step_noise, &dn, &x,
                                 opt->progress, opt->progress_ctx);
    }
    for (int i = 0; i < n && st == VFM_OK; i++) {
        const int32_t *ls = samples[i].latent_shape;
        Tensor rows = TF32((float *)x.data + (int64_t)g.pack.cu_seqlens_padded[i] * g.C, g.pack.samples[i].tokens, g.C);
        Tensor out = TF32(latents[i], ls[0], ls[1], ls[2], ls[3]);
        st = op_unpatchify(&out, &rows, mc->patch_temporal, mc->patch_spatial, mc->patch_spatial);
        if (st == VFM_OK && g.kind == OBJECTIVE_EDM) st = op_scale(&out, 1.0 / g.sigma_data);
    }
    pack_conditioning_free(&g.cond);
    free(buf);
    free(g.labels);
    pack_free(&g.pack);
    return st;
}
