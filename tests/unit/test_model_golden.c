/* The whole DiT + objective against the PyTorch twin (reference/model_golden.py for EDM with every
 * variant: dfm (and its pt 2 + grouped-query case), adaln-zero with class labels, adaln-zero with
 * cross-attention, class labels and a conv3d patch, nemo-adaln with a text width != D, stdit (spatial,
 * temporal and full-attention blocks; two videos of different T and H·W and an image: stdit_golden.py);
 * reference/objectives_golden.py for flow matching and DDPM, the latter also on the DiT paper's
 * setting: adaln-zero, classes, learned sigma). Random non-zero weights, a pack of 3 samples of
 * different sizes (a dropped prompt or label) with given σ/t and noise → network output, loss,
 * every parameter gradient (all asserted non-zero), and the losses of 10 AdamW steps with clipping.
 * reference/moviegen_golden.py for moviegen (GQA, a text width != D, 2- and 3-frame videos) under EDM
 * and Movie Gen's flow matching (σ_min 1e-5). reference/moe_model_golden.py for whole MoE models: a
 * tiny ECDiT (moviegen, SwiGLU experts, expert choice with capacity factor 2) and dfm with erf-GELU
 * experts under token choice top-2 with drops, both under EDM.
 * Each file carries its configuration (and "objective": 0 flow, 1 ddpm; absent: EDM). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diffusion/objective.h"
#include "golden.h"
#include "model/dit.h"
#include "test.h"
#include "optim/optimizer.h"

/* The DiTConfig the twin wrote (DiTConfig.c_ints in reference/model_torch.py). */
static int config_from_golden(const Golden *g, DiTConfig *c) {
    const Tensor *ti = golden_need(g, "config.ints"), *tf = golden_need(g, "config.floats");
    if (!ti || !tf || tensor_numel(ti) != 18 || tensor_numel(tf) != 2) return 0;
    const int32_t *v = ti->data;
    const float *f = tf->data;
    memset(c, 0, sizeof *c);
    c->variant = (DiTVariant)v[0];
    c->hidden = v[1], c->layers = v[2], c->heads = v[3], c->kv_heads = v[4], c->ffn = v[5];
    c->in_channels = v[6], c->out_channels = v[7], c->patch_spatial = v[8], c->patch_temporal = v[9];
    c->d_text = v[10], c->adaln_lora = v[11], c->fps_dim = v[12], c->qk_norm = v[13], c->cross_attention = v[14];
    c->num_classes = v[15], c->learn_sigma = v[16], c->pos_embedding = (DiTPosEmbedding)v[17];
    c->ln_eps = f[0], c->class_dropout_prob = f[1], c->init_std = 0.02f;
    const Tensor *rows = golden_get(g, "config.pos_rows"); /* moviegen's learned position */
    for (int k = 0; rows && k < 3; k++) c->pos_rows[k] = ((const int32_t *)rows->data)[k];
    const Tensor *moe = golden_get(g, "config.moe"), *moe_f = golden_get(g, "config.moe_floats");
    if (moe && moe_f) { /* MoE MLPs (reference/moe_model_golden.py): E, F, k, routing; f, aux, z */
        const int32_t *mv = moe->data;
        const float *mf = moe_f->data;
        c->moe = (MoeSpec){.experts = mv[0], .ffn = mv[1], .topk = mv[2], .routing = (MoeRouting)mv[3],
                           .capacity_factor = mf[0], .aux_coeff = mf[1], .z_coeff = mf[2]};
    }
    if (c->variant == DIT_VARIANT_STDIT) { /* layers of two blocks (reference/stdit_golden.py) */
        c->layers *= 2;
        c->stdit_full_every = (int)golden_scalar(g, "config.stdit_full_every");
    }
    return dit_config_resolve(c) == VFM_OK;
}

/* Builds the model with the golden weights and the pack of its 3 samples (padded to 8 rows). */
static int setup(Golden *g, DiT *m, Pack *p) {
    DiTConfig cfg;
    if (!config_from_golden(g, &cfg) || dit_create(m, &cfg, DEV_CPU) != VFM_OK) return 0;
    int n_params = 0;
    for (int i = 0; i < m->table.count; i++) {
        char name[160];
        snprintf(name, sizeof name, "param.%s", m->table.entries[i].name);
        const Tensor *t = golden_need(g, name);
        if (!t || tensor_numel(t) != m->table.entries[i].numel) return 0;
        memcpy(m->params + m->table.entries[i].offset, t->data, tensor_bytes(t));
    }
    /* every tensor of the twin's state dict is a table entry (names agree both ways) */
    for (int i = 0; i < golden_count(g); i++) n_params += strncmp(golden_name(g, i), "param.", 6) == 0;
    if (n_params != m->table.count) return 0;
    pack_init(p, dit_token_dim(&cfg), cfg.d_text, 8, 4);
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
        s.info.grid[0] = ls[1] / cfg.patch_temporal;
        s.info.grid[1] = ls[2] / cfg.patch_spatial;
        s.info.grid[2] = ls[3] / cfg.patch_spatial;
        s.info.tokens = (int32_t)tok->shape[0];
        s.info.text_tokens = (int32_t)text->shape[0];
        s.info.fps = (float)golden_scalar(g, name);
        s.tokens = tok->data;
        s.text = text->data;
        if (pack_append(p, &s) != VFM_OK) return 0;
    }
    return dit_reserve(m, p->n_tokens, p->n_text, p->n_samples) == VFM_OK;
}

/* The golden's objective (EDM when it names none; σ_data 0.5). */
static Objective objective_of(const Golden *g) {
    Objective o;
    memset(&o, 0, sizeof o);
    const Tensor *k = golden_get(g, "objective");
    o.kind = !k ? OBJECTIVE_EDM : ((const int32_t *)k->data)[0] == 0 ? OBJECTIVE_FLOW : OBJECTIVE_DDPM;
    o.sigma_data = 0.5f;
    const Tensor *smin = golden_get(g, "flow_sigma_min"); /* Movie Gen's flow matching */
    if (smin) o.flow_sigma_min = ((const double *)smin->data)[0];
    return o;
}

/* σ/t, drop flags and token-layout noise of the pack from the golden (prefix "" or "stepK."). */
static void load_draws(const Golden *g, const Pack *p, const char *prefix, DiffusionDraws *d) {
    memset(d, 0, sizeof *d);
    d->class_row = golden_get(g, "sample0.class_row") ? calloc(3, sizeof(int32_t)) : NULL;
    d->sigma = calloc(3, sizeof(float));
    d->drop = calloc(3, sizeof(int));
    d->noise = calloc((size_t)(p->n_tokens * p->token_dim), sizeof(float));
    for (int i = 0; i < 3; i++) {
        char name[96];
        snprintf(name, sizeof name, "%ssample%d.%s", prefix, i, golden_get(g, "objective") ? "t" : "sigma");
        d->sigma[i] = (float)golden_scalar(g, name);
        snprintf(name, sizeof name, "sample%d.dropped", i);
        d->drop[i] = (int)golden_scalar(g, name);
        snprintf(name, sizeof name, "sample%d.class_row", i);
        if (d->class_row) d->class_row[i] = (int32_t)golden_scalar(g, name);
        snprintf(name, sizeof name, "%ssample%d.noise", prefix, i);
        const Tensor *n = golden_need(g, name);
        if (n) memcpy(d->noise + (int64_t)p->cu_seqlens_padded[i] * p->token_dim, n->data, tensor_bytes(n));
    }
}

static void free_draws(DiffusionDraws *d) {
    free(d->sigma);
    free(d->drop);
    free(d->noise);
    free(d->class_row);
}

static void check_forward_backward(const char *file) {
    Golden *g = golden_load(file);
    REQUIRE(g);
    DiT m;
    Pack p;
    REQUIRE(setup(g, &m, &p));
    DiffusionDraws d;
    load_draws(g, &p, "", &d);
    double sample_loss[3];
    int out = dit_out_dim(&m.cfg);
    float *F = calloc((size_t)(p.n_tokens * out), sizeof(float));
    ObjectiveResult r = {.sample_loss = sample_loss, .F = F};
    Objective o = objective_of(g);
    CHECK_OK(objective_loss_given(&m, &o, &p, &d, 1.0, &r));
    /* f32 here vs f32 torch: the two differ by summation order only; 2e-5 relative on the loss */
    double ref_loss = golden_scalar(g, "loss");
    CHECK_MSG(fabs(r.loss - ref_loss) <= 2e-5 * fabs(ref_loss), "%s: loss %.8f vs %.8f", file, r.loss, ref_loss);
    for (int i = 0; i < 3; i++) {
        char name[64];
        snprintf(name, sizeof name, "sample%d.F", i);
        const Tensor *ref = golden_need(g, name);
        if (ref) CHECK_CLOSE_F32(name, F + (int64_t)p.cu_seqlens_padded[i] * out, ref->data, tensor_numel(ref), 1e-5, 1e-4);
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

static void check_trajectory(const char *file) {
    Golden *g = golden_load(file);
    REQUIRE(g);
    DiT m;
    Pack p;
    REQUIRE(setup(g, &m, &p));
    const Tensor *losses = golden_need(g, "trajectory.losses");
    REQUIRE(losses);
    OptimConfig oc = {.lr = 1e-3, .min_lr = 1e-3, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-5, .weight_decay = 0.033,
                      .clip_grad = 1.0, .decay_style = LR_DECAY_CONSTANT};
    Optimizer opt;
    REQUIRE_OK(optimizer_init(&opt, &oc, &m.table));
    for (int step = 0; step < 10; step++) {
        char prefix[32];
        snprintf(prefix, sizeof prefix, "step%d.", step);
        DiffusionDraws d;
        load_draws(g, &p, prefix, &d);
        memset(m.grads, 0, (size_t)m.table.total * sizeof(float));
        ObjectiveResult r = {0};
        Objective o = objective_of(g);
        CHECK_OK(objective_loss_given(&m, &o, &p, &d, 1.0, &r));
        double norm;
        CHECK_OK(grad_global_norm(m.grads, m.table.total, &norm));
        CHECK_OK(optimizer_step(&opt, m.params, m.grads, lr_at_step(&oc, step), clip_scale(&oc, norm)));
        double ref = ((const double *)losses->data)[step];
        /* errors compound over steps through the weights: 1e-4 relative */
        CHECK_MSG(fabs(r.loss - ref) <= 1e-4 * fabs(ref), "%s step %d: loss %.8f vs %.8f", file, step, r.loss, ref);
        free_draws(&d);
    }
    optimizer_free(&opt);
    pack_free(&p);
    dit_destroy(&m);
    golden_free(g);
}

TEST(model_golden_forward_backward_tiny) { check_forward_backward("model_tiny.bin"); }
TEST(model_golden_forward_backward_pt2_gqa) { check_forward_backward("model_tiny_pt2_gqa.bin"); }
TEST(model_golden_forward_backward_adaln_zero) { check_forward_backward("model_adaln_zero.bin"); }
TEST(model_golden_forward_backward_adaln_zero_cross) { check_forward_backward("model_adaln_zero_cross.bin"); }
TEST(model_golden_forward_backward_nemo_adaln) { check_forward_backward("model_nemo_adaln.bin"); }
TEST(model_golden_adamw_trajectory_tiny) { check_trajectory("model_tiny.bin"); }
TEST(model_golden_adamw_trajectory_pt2_gqa) { check_trajectory("model_tiny_pt2_gqa.bin"); }
TEST(model_golden_adamw_trajectory_adaln_zero) { check_trajectory("model_adaln_zero.bin"); }
TEST(model_golden_adamw_trajectory_adaln_zero_cross) { check_trajectory("model_adaln_zero_cross.bin"); }
TEST(model_golden_adamw_trajectory_nemo_adaln) { check_trajectory("model_nemo_adaln.bin"); }
/* moviegen (reference/moviegen_golden.py): EDM as NeMo trains it, and Movie Gen's flow (σ_min 1e-5) */
TEST(model_golden_forward_backward_moviegen) { check_forward_backward("model_moviegen.bin"); }
TEST(model_golden_adamw_trajectory_moviegen) { check_trajectory("model_moviegen.bin"); }
TEST(objective_golden_flow_moviegen_forward_backward) { check_forward_backward("objective_flow_moviegen.bin"); }
TEST(objective_golden_flow_moviegen_trajectory) { check_trajectory("objective_flow_moviegen.bin"); }
TEST(model_golden_forward_backward_moe_moviegen) { check_forward_backward("model_moe_moviegen.bin"); }
TEST(model_golden_adamw_trajectory_moe_moviegen) { check_trajectory("model_moe_moviegen.bin"); }
TEST(model_golden_forward_backward_moe_dfm_token_choice) { check_forward_backward("model_moe_dfm_token_choice.bin"); }
TEST(model_golden_adamw_trajectory_moe_dfm_token_choice) { check_trajectory("model_moe_dfm_token_choice.bin"); }
TEST(model_golden_forward_backward_stdit) { check_forward_backward("model_stdit.bin"); }
TEST(model_golden_adamw_trajectory_stdit) { check_trajectory("model_stdit.bin"); }
TEST(objective_golden_flow_forward_backward) { check_forward_backward("objective_flow.bin"); }
TEST(objective_golden_flow_trajectory) { check_trajectory("objective_flow.bin"); }
TEST(objective_golden_ddpm_dit_learned_sigma_forward_backward) { check_forward_backward("objective_ddpm_dit.bin"); }
TEST(objective_golden_ddpm_dit_learned_sigma_trajectory) { check_trajectory("objective_ddpm_dit.bin"); }
TEST(objective_golden_ddpm_fixed_sigma_forward_backward) { check_forward_backward("objective_ddpm_fixed_sigma.bin"); }
TEST(objective_golden_ddpm_fixed_sigma_trajectory) { check_trajectory("objective_ddpm_fixed_sigma.bin"); }
