/* The whole DiT + EDM objective against the PyTorch twin (reference/model_golden.py): random
 * non-zero weights, a pack of 3 samples of different sizes (one with a dropped prompt) with given
 * σ and noise → network output, loss, every parameter gradient (all asserted non-zero), and the
 * losses of 10 AdamW steps with clipping. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diffusion/edm.h"
#include "golden.h"
#include "model/dit.h"
#include "test.h"
#include "optim/optimizer.h"

typedef struct Case {
    const char *file;
    DiTConfig cfg;
} Case;

static const Case CASES[] = {
    {"model_tiny.bin", {.hidden = 32, .layers = 2, .heads = 4, .kv_heads = 4, .head_dim = 8, .ffn = 128, .in_channels = 4,
                        .out_channels = 4, .patch_spatial = 2, .patch_temporal = 1, .d_text = 16, .adaln_lora = 16,
                        .fps_dim = 16, .qk_norm = 1, .ln_eps = 1e-5f, .init_std = 0.02f}},
    {"model_tiny_pt2_gqa.bin", {.hidden = 32, .layers = 2, .heads = 4, .kv_heads = 2, .head_dim = 8, .ffn = 64,
                                .in_channels = 3, .out_channels = 3, .patch_spatial = 2, .patch_temporal = 2, .d_text = 16,
                                .adaln_lora = 8, .fps_dim = 16, .qk_norm = 1, .ln_eps = 1e-5f, .init_std = 0.02f}},
};

/* Builds the model with the golden weights and the pack of its 3 samples (padded to 8 rows). */
static int setup(const Case *c, Golden *g, DiT *m, Pack *p) {
    if (dit_create(m, &c->cfg, DEV_CPU) != VFM_OK) return 0;
    for (int i = 0; i < m->table.count; i++) {
        char name[160];
        snprintf(name, sizeof name, "param.%s", m->table.entries[i].name);
        const Tensor *t = golden_need(g, name);
        if (!t || tensor_numel(t) != m->table.entries[i].numel) return 0;
        memcpy(m->params + m->table.entries[i].offset, t->data, tensor_bytes(t));
    }
    pack_init(p, dit_token_dim(&c->cfg), c->cfg.d_text, 8, 4);
    for (int i = 0; i < 3; i++) {
        char name[64];
        snprintf(name, sizeof name, "sample%d.latent_shape", i);
        const int32_t *ls = golden_need(g, name)->data;
        snprintf(name, sizeof name, "sample%d.tokens", i);
        const Tensor *tok = golden_need(g, name);
        snprintf(name, sizeof name, "sample%d.text", i);
        const Tensor *text = golden_need(g, name);
        snprintf(name, sizeof name, "sample%d.fps", i);
        EncodedSample s;
        memset(&s, 0, sizeof s);
        s.info.uid = (uint64_t)i;
        memcpy(s.info.latent_shape, ls, sizeof s.info.latent_shape);
        s.info.grid[0] = ls[1] / c->cfg.patch_temporal;
        s.info.grid[1] = ls[2] / c->cfg.patch_spatial;
        s.info.grid[2] = ls[3] / c->cfg.patch_spatial;
        s.info.tokens = (int32_t)tok->shape[0];
        s.info.text_tokens = (int32_t)text->shape[0];
        s.info.fps = (float)golden_scalar(g, name);
        s.tokens = tok->data;
        s.text = text->data;
        if (pack_append(p, &s) != VFM_OK) return 0;
    }
    return dit_reserve(m, p->n_tokens, p->n_text, p->n_samples) == VFM_OK;
}

/* σ, drop flags and token-layout noise of the pack from the golden (prefix "" or "stepK."). */
static void load_draws(const Golden *g, const Pack *p, const char *prefix, EdmDraws *d) {
    d->sigma = calloc(3, sizeof(float));
    d->drop = calloc(3, sizeof(int));
    d->noise = calloc((size_t)(p->n_tokens * p->token_dim), sizeof(float));
    for (int i = 0; i < 3; i++) {
        char name[96];
        snprintf(name, sizeof name, "%ssample%d.sigma", prefix, i);
        d->sigma[i] = (float)golden_scalar(g, name);
        snprintf(name, sizeof name, "sample%d.dropped", i);
        d->drop[i] = (int)golden_scalar(g, name);
        snprintf(name, sizeof name, "%ssample%d.noise", prefix, i);
        const Tensor *n = golden_need(g, name);
        if (n) memcpy(d->noise + (int64_t)p->cu_seqlens_padded[i] * p->token_dim, n->data, tensor_bytes(n));
    }
}

static void free_draws(EdmDraws *d) {
    free(d->sigma);
    free(d->drop);
    free(d->noise);
}

static void check_forward_backward(const Case *c) {
    Golden *g = golden_load(c->file);
    REQUIRE(g);
    DiT m;
    Pack p;
    REQUIRE(setup(c, g, &m, &p));
    EdmDraws d;
    load_draws(g, &p, "", &d);
    double sample_loss[3];
    float *F = calloc((size_t)(p.n_tokens * p.token_dim), sizeof(float));
    EdmStepResult r = {.sample_loss = sample_loss, .F = F};
    CHECK_OK(edm_loss_and_grad_given(&m, 0.5f, &p, &d, 1.0, &r));
    /* f32 here vs f32 torch: the two differ by summation order only; 2e-5 relative on the loss */
    double ref_loss = golden_scalar(g, "loss");
    CHECK_MSG(fabs(r.loss - ref_loss) <= 2e-5 * fabs(ref_loss), "%s: loss %.8f vs %.8f", c->file, r.loss, ref_loss);
    for (int i = 0; i < 3; i++) {
        char name[64];
        snprintf(name, sizeof name, "sample%d.F", i);
        const Tensor *ref = golden_need(g, name);
        if (ref) CHECK_CLOSE_F32(name, F + (int64_t)p.cu_seqlens_padded[i] * p.token_dim, ref->data, tensor_numel(ref), 1e-5, 1e-4);
        snprintf(name, sizeof name, "sample%d.loss", i);
        double ref_i = golden_scalar(g, name);
        CHECK_MSG(fabs(sample_loss[i] - ref_i) <= 2e-5 * fabs(ref_i), "%s: %.8f vs %.8f", name, sample_loss[i], ref_i);
    }
    for (int i = 0; i < m.table.count; i++) {
        const ParamEntry *e = &m.table.entries[i];
        char name[160];
        snprintf(name, sizeof name, "grad.%s", e->name);
        const Tensor *ref = golden_need(g, name);
        if (!ref) continue;
        const float *got = m.grads + e->offset;
        int nonzero = 0;
        for (int64_t k = 0; k < e->numel; k++) nonzero |= got[k] != 0.0f;
        CHECK_MSG(nonzero, "%s: gradient is all zero", name);
        /* gradients of f32 vs f32 runs: relative to the tensor's largest entry */
        check_close_f32(name, got, ref->data, e->numel, 1e-6, 2e-4, __FILE__, __LINE__);
    }
    free(F);
    free_draws(&d);
    pack_free(&p);
    dit_destroy(&m);
    golden_free(g);
}

static void check_trajectory(const Case *c) {
    Golden *g = golden_load(c->file);
    REQUIRE(g);
    DiT m;
    Pack p;
    REQUIRE(setup(c, g, &m, &p));
    const Tensor *losses = golden_need(g, "trajectory.losses");
    REQUIRE(losses);
    OptimConfig oc = {.lr = 1e-3, .min_lr = 1e-3, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-5, .weight_decay = 0.033,
                      .clip_grad = 1.0, .decay_style = LR_DECAY_CONSTANT};
    Optimizer opt;
    REQUIRE_OK(optimizer_init(&opt, &oc, &m.table));
    for (int step = 0; step < 10; step++) {
        char prefix[32];
        snprintf(prefix, sizeof prefix, "step%d.", step);
        EdmDraws d;
        load_draws(g, &p, prefix, &d);
        memset(m.grads, 0, (size_t)m.table.total * sizeof(float));
        EdmStepResult r = {0};
        CHECK_OK(edm_loss_and_grad_given(&m, 0.5f, &p, &d, 1.0, &r));
        double norm;
        CHECK_OK(grad_global_norm(m.grads, m.table.total, &norm));
        CHECK_OK(optimizer_step(&opt, m.params, m.grads, lr_at_step(&oc, step), clip_scale(&oc, norm)));
        double ref = ((const double *)losses->data)[step];
        /* errors compound over steps through the weights: 1e-4 relative */
        CHECK_MSG(fabs(r.loss - ref) <= 1e-4 * fabs(ref), "%s step %d: loss %.8f vs %.8f", c->file, step, r.loss, ref);
        free_draws(&d);
    }
    optimizer_free(&opt);
    pack_free(&p);
    dit_destroy(&m);
    golden_free(g);
}

TEST(model_golden_forward_backward_tiny) { check_forward_backward(&CASES[0]); }
TEST(model_golden_forward_backward_pt2_gqa) { check_forward_backward(&CASES[1]); }
TEST(model_golden_adamw_trajectory_tiny) { check_trajectory(&CASES[0]); }
TEST(model_golden_adamw_trajectory_pt2_gqa) { check_trajectory(&CASES[1]); }
