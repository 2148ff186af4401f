/* The objective interface: configuration, the keyed per-sample draws, and dispatch to the losses
 * through their table (objective_table.c; see objective.h). */
#include "objective.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "core/log.h"
#include "core/philox.h"
#include "diffusion/objective_internal.h"

const char *objective_name(ObjectiveKind kind) { return objective_losses[kind]->name; }

vfm_status objective_from_config(Objective *o, const Config *cfg, const DiTConfig *mc) {
    memset(o, 0, sizeof *o);
    const char *name = cfg_str(cfg, "diffusion.objective");
    o->kind = OBJECTIVE_EDM;
    for (int k = 0; k < OBJECTIVE_KINDS; k++)
        if (!strcmp(name, objective_losses[k]->name)) o->kind = (ObjectiveKind)k;
    o->seed = (uint64_t)cfg_int(cfg, "rng.seed");
    /* only the keys of this objective are read (docs/config.md "Keys a run does not use") */
    if (o->kind == OBJECTIVE_EDM) o->sigma_data = (float)cfg_float(cfg, "model.sigma_data");
    else cfg_warn_unused(cfg, "model.sigma_data", "model.sigma_data applies to diffusion.objective=edm (ignored with %s)",
                         objective_name(o->kind));
    o->p_mean = cfg_float(cfg, "diffusion.p_mean");
    o->p_std = cfg_float(cfg, "diffusion.p_std");
    o->flow_shift = cfg_float(cfg, "diffusion.flow_shift");
    o->flow_shift_base = cfg_int(cfg, "diffusion.flow_shift_base_tokens");
    o->flow_sigma_min = cfg_float(cfg, "diffusion.flow_sigma_min");
    /* the text CFG coin drops the text: a model without cross-attention sees no text */
    if (!mc || mc->f.cross_attn)
        o->cfg_dropout = (float)cfg_float(cfg, "diffusion.cfg_dropout");
    else
        cfg_warn_unused(cfg, "diffusion.cfg_dropout", "diffusion.cfg_dropout drops the text condition; this model has no "
                        "cross-attention (model.cross_attention), so it is ignored%s", mc->num_classes > 0 ?
                        " (the class label's CFG drop is model.class_dropout_prob)" : "");
    o->per_pack = strcmp(cfg_str(cfg, "diffusion.sigma_per"), "pack") == 0;
    o->sigma_min = cfg_float(cfg, "diffusion.sigma_min");
    o->sigma_max = cfg_float(cfg, "diffusion.sigma_max");
    o->clamp = o->sigma_min > 0 || o->sigma_max > 0;
    if (o->clamp && o->kind == OBJECTIVE_DDPM)
        return vfm_fail_at(VFM_ERR_USAGE, NULL, o->sigma_min > 0 ? "diffusion.sigma_min" : "diffusion.sigma_max", NULL,
                           "clamps the EDM or flow sigma; diffusion.objective=ddpm draws integer timesteps (unset it)");
    if (o->sigma_min > 0 && o->sigma_max > 0 && o->sigma_min >= o->sigma_max)
        return vfm_fail(VFM_ERR_USAGE, "diffusion.sigma_min (%g) must be smaller than diffusion.sigma_max (%g)",
                        o->sigma_min, o->sigma_max);
    if (o->kind == OBJECTIVE_FLOW && (o->sigma_min >= 1 || o->sigma_max > 1))
        return vfm_fail(VFM_ERR_USAGE, "diffusion.sigma_min/sigma_max (%g, %g): flow matching's sigma lies in (0, 1]",
                        o->sigma_min, o->sigma_max);
    if (o->flow_shift_base > 0 && o->kind != OBJECTIVE_FLOW)
        return vfm_fail_at(VFM_ERR_USAGE, NULL, "diffusion.flow_shift_base_tokens", NULL,
                           "applies to diffusion.objective=flow only");
    if (o->flow_sigma_min != 0.0 && o->kind != OBJECTIVE_FLOW)
        return vfm_fail_at(VFM_ERR_USAGE, NULL, "diffusion.flow_sigma_min", NULL, "applies to diffusion.objective=flow only");
    if (o->flow_shift != 1.0 && o->kind != OBJECTIVE_FLOW)
        return vfm_fail_at(VFM_ERR_USAGE, NULL, "diffusion.flow_shift", NULL, "applies to diffusion.objective=flow only");
    if (o->kind == OBJECTIVE_DDPM && (o->p_mean != 0.0 || o->p_std != 1.0))
        return vfm_fail(VFM_ERR_USAGE, "diffusion.p_mean and diffusion.p_std shape the EDM and flow time distributions; ddpm draws "
                        "t uniformly (unset them, or set diffusion.p_mean=0 diffusion.p_std=1)");
    return VFM_OK;
}

vfm_status objective_check_model(const Objective *o, const DiTConfig *mc) {
    int in = dit_token_dim(mc), out = dit_out_dim(mc);
    if (out == in) return VFM_OK;
    if (o->kind == OBJECTIVE_DDPM && out == 2 * in) return VFM_OK;
    return vfm_fail(VFM_ERR_USAGE, "the model gives %d output channels for %d input channels (model.out_channels / "
                    "model.learn_sigma, model.in_channels): diffusion.objective=%s needs them equal%s", out / (in / mc->in_channels),
                    mc->in_channels, objective_name(o->kind),
                    o->kind == OBJECTIVE_DDPM ? ", or twice the input channels (learned sigma)" : "");
}

float objective_draw_time(const Objective *o, uint32_t step, uint64_t uid, int64_t tokens) {
    double v = objective_losses[o->kind]->draw_time(o, step, uid, tokens);
    if (o->sigma_min > 0 && v < o->sigma_min) v = o->sigma_min;
    if (o->sigma_max > 0 && v > o->sigma_max) v = o->sigma_max;
    return (float)v;
}

int objective_draw_text_drop(const Objective *o, uint32_t step, uint64_t uid) {
    if (o->cfg_dropout <= 0) return 0;
    return philox_uniform_at(o->seed, RNG_STREAM_CFG, step, uid, 0) < o->cfg_dropout;
}

int objective_draw_class_drop(const Objective *o, const DiTConfig *mc, uint32_t step, uint64_t uid) {
    if (mc->class_dropout_prob <= 0) return 0;
    return philox_uniform_at(o->seed, RNG_STREAM_CFG, step, uid, 1) < mc->class_dropout_prob;
}

vfm_status diffusion_pack_noise_on(Tensor *noise, const Pack *pack, const DiTConfig *mc, uint64_t seed,
                                   uint32_t stream, uint32_t step, ObjectiveWork *w) {
    int d = pack->token_dim;
    Device dev = noise->device;
    VFM_TRY(op_fill(noise, 0.0));
    int64_t most = 0;
    for (int i = 0; i < pack->n_samples; i++) {
        const int32_t *ls = pack->samples[i].latent_shape;
        int64_t n = (int64_t)ls[0] * ls[1] * ls[2] * ls[3];
        if (n > most) most = n;
    }
    void *canon;
    VFM_TRY(objective_work_slot(w, dev, OW_CANON, (size_t)most * sizeof(float), &canon));
    for (int i = 0; i < pack->n_samples; i++) {
        const PackSample *s = &pack->samples[i];
        const int32_t *ls = s->latent_shape;
        Tensor c = TENSOR(canon, DT_F32, dev, ls[0], ls[1], ls[2], ls[3]);
        Tensor rows = TENSOR((float *)noise->data + (int64_t)pack->cu_seqlens_padded[i] * d, DT_F32, dev, s->tokens, d);
        VFM_TRY(op_randn_fill(&c, seed, stream, step, s->uid, 0, 1.0f));
        VFM_TRY(op_patchify(&rows, &c, mc->patch_temporal, mc->patch_spatial, mc->patch_spatial));
    }
    return VFM_OK;
}

vfm_status diffusion_pack_noise(float *noise, const Pack *pack, const DiTConfig *mc, uint64_t seed, uint32_t stream,
                                uint32_t step) {
    ObjectiveWork w;
    memset(&w, 0, sizeof w);
    Tensor t = TF32(noise, pack->n_tokens, pack->token_dim);
    vfm_status s = diffusion_pack_noise_on(&t, pack, mc, seed, stream, step, &w);
    objective_work_free(&w);
    return s;
}

vfm_status objective_draw_times(const Objective *o, const DiTConfig *mc, const Pack *p, uint32_t step,
                                DiffusionDraws *d) {
    int B = p->n_samples;
    memset(d, 0, sizeof *d);
    d->t = malloc((size_t)(B ? B : 1) * sizeof(float));
    d->drop = malloc((size_t)(B ? B : 1) * sizeof(int));
    if (mc->num_classes > 0) d->class_row = malloc((size_t)(B ? B : 1) * sizeof(int32_t));
    if (!d->t || !d->drop || (mc->num_classes > 0 && !d->class_row))
        return vfm_fail(VFM_ERR_NOMEM, "diffusion: draws for %d samples", B);
    for (int i = 0; i < B; i++) {
        const PackSample *s = &p->samples[i];
        uint64_t key_uid = o->per_pack ? p->samples[0].uid : s->uid;
        d->t[i] = objective_draw_time(o, step, key_uid, s->tokens);
        d->drop[i] = objective_draw_text_drop(o, step, key_uid);
        if (!d->class_row) continue;
        d->class_row[i] = dit_class_row(mc, s->class_label, objective_draw_class_drop(o, mc, step, key_uid));
        if (d->class_row[i] < 0)
            return vfm_fail(VFM_ERR_USAGE, "%s: class label %d does not fit model.num_classes=%d (an unlabelled "
                            "sample needs the null class: model.class_dropout_prob > 0)", s->source, s->class_label,
                            mc->num_classes);
    }
    return VFM_OK;
}

vfm_status objective_draw(const Objective *o, const DiTConfig *mc, const Pack *p, uint32_t step, DiffusionDraws *d) {
    VFM_TRY(objective_draw_times(o, mc, p, step, d));
    d->noise = malloc((size_t)(p->n_tokens * p->token_dim > 0 ? p->n_tokens * p->token_dim : 1) * sizeof(float));
    if (!d->noise) return vfm_fail(VFM_ERR_NOMEM, "diffusion: noise of %lld tokens", (long long)p->n_tokens);
    return diffusion_pack_noise(d->noise, p, mc, o->seed, RNG_STREAM_NOISE, step);
}

void diffusion_draws_free(DiffusionDraws *d) {
    free(d->t);
    free(d->drop);
    free(d->class_row);
    free(d->noise);
    memset(d, 0, sizeof *d);
}

/* The pack's tensors (pt, or the pack copied or viewed), the noise (draws->noise copied or viewed,
 * or drawn on the device at `step`) and the conditioning, on the model's device. */
static vfm_status batch_begin(ObjectiveBatch *b, DiT *model, const Objective *o, const Pack *p, const PackTensors *pt,
                              const DiffusionDraws *d, uint32_t step, ObjectiveWork *w, ObjectiveResult *res) {
    memset(b, 0, sizeof *b);
    b->pack = p;
    b->draws = d;
    b->work = w;
    b->device = model->device;
    b->act = model->act_dtype;
    if (!pt) {
        VFM_TRY(pack_tensors_upload(&w->pack, b->device, p, ops_stream()));
        pt = &w->pack;
    } else if (pt->device != b->device) {
        return vfm_fail(VFM_ERR_INTERNAL, "objective: the pack's tensors are on the %s, the model on the %s",
                        device_name(pt->device), device_name(b->device));
    }
    b->pt = pt;
    int64_t S = p->n_tokens, C = p->token_dim;
    if (d->noise && b->device == DEV_CPU) {
        b->noise = TF32(d->noise, S, C);
    } else {
        void *nb;
        VFM_TRY(objective_work_slot(w, b->device, OW_NOISE, (size_t)(S * C) * sizeof(float), &nb));
        b->noise = TENSOR(nb, DT_F32, b->device, S, C);
        if (d->noise) VFM_TRY(objective_put(&b->noise, d->noise));
        else VFM_TRY(diffusion_pack_noise_on(&b->noise, p, &model->cfg, o->seed, RNG_STREAM_NOISE, step, w));
    }
    VFM_TRY(pack_conditioning_build_on(&b->cond, p, pt, b->act, d->drop, d->class_row, w));
    for (int i = 0; i < p->n_samples; i++) {
        if (res->t) res->t[i] = d->t[i];
        if (res->dropped) res->dropped[i] = d->drop[i];
    }
    return VFM_OK;
}

static vfm_status batch_prepare(DiT *model, const Objective *o, ObjectiveBatch *b) {
    VFM_TRY(objective_losses[o->kind]->prepare(model, o, b));
    b->cond.in.x = &b->in_x;
    b->cond.in.c_noise = &b->in_c_noise;
    return VFM_OK;
}

static vfm_status batch_finish(DiT *model, const Objective *o, ObjectiveBatch *b, double grad_scale,
                               ObjectiveResult *res) {
    return objective_losses[o->kind]->finish(model, b, grad_scale, res);
}

/* prepare, the whole model forward, the loss, and with grad_scale > 0 the model's backward */
static vfm_status run_batch(DiT *model, const Objective *o, ObjectiveBatch *b, double grad_scale, ObjectiveResult *res) {
    const Pack *p = b->pack;
    VFM_TRY(batch_prepare(model, o, b));
    VFM_TRY(dit_reserve(model, p->n_tokens, p->n_text, p->n_samples));
    VFM_TRY(dit_forward(model, &b->cond.in, &b->F));
    VFM_TRY(batch_finish(model, o, b, grad_scale, res));
    model->loss_grad_scale = grad_scale;
    if (grad_scale > 0) VFM_TRY(dit_backward(model, &b->cond.in, &b->dF));
    return VFM_OK;
}

vfm_status objective_loss_given(DiT *model, const Objective *o, const Pack *pack, const DiffusionDraws *draws,
                                double grad_scale, ObjectiveResult *res) {
    if (!draws->noise) return vfm_fail(VFM_ERR_INTERNAL, "objective_loss_given: the draws hold no noise");
    ObjectiveWork w;
    memset(&w, 0, sizeof w);
    ObjectiveBatch b;
    vfm_status s = batch_begin(&b, model, o, pack, NULL, draws, 0, &w, res);
    if (s == VFM_OK) s = run_batch(model, o, &b, grad_scale, res);
    objective_work_free(&w);
    return s;
}

vfm_status objective_loss_and_grad_on(DiT *model, const Objective *o, const Pack *pack, const PackTensors *pt,
                                      ObjectiveWork *work, uint32_t step, double grad_scale, ObjectiveResult *res) {
    DiffusionDraws d;
    ObjectiveWork tmp;
    memset(&tmp, 0, sizeof tmp);
    ObjectiveWork *w = work ? work : &tmp;
    ObjectiveBatch b;
    vfm_status s = objective_draw_times(o, &model->cfg, pack, step, &d);
    if (s == VFM_OK) s = batch_begin(&b, model, o, pack, pt, &d, step, w, res);
    if (s == VFM_OK) s = run_batch(model, o, &b, grad_scale, res);
    diffusion_draws_free(&d);
    if (!work) objective_work_free(&tmp);
    return s;
}

vfm_status objective_loss_and_grad(DiT *model, const Objective *o, const Pack *pack, uint32_t step, double grad_scale,
                                   ObjectiveResult *res) {
    return objective_loss_and_grad_on(model, o, pack, NULL, NULL, step, grad_scale, res);
}

vfm_status objective_loss(DiT *model, const Objective *o, const Pack *pack, uint32_t step, ObjectiveResult *res) {
    return objective_loss_and_grad(model, o, pack, step, 0.0, res);
}

/* ---- in halves (pipeline parallelism) ---- */

struct ObjectivePass {
    DiT *model;
    Objective o;
    DiffusionDraws d;
    ObjectiveBatch b;
};

vfm_status objective_pass_begin(DiT *model, const Objective *o, const Pack *pack, const PackTensors *pt,
                                ObjectiveWork *work, uint32_t step, ObjectivePass **out) {
    ObjectivePass *p = calloc(1, sizeof *p);
    if (!p) return vfm_fail(VFM_ERR_NOMEM, "objective: a pass");
    p->model = model;
    p->o = *o;
    ObjectiveResult none;
    memset(&none, 0, sizeof none);
    vfm_status s = objective_draw_times(o, &model->cfg, pack, step, &p->d);
    if (s == VFM_OK) s = batch_begin(&p->b, model, o, pack, pt, &p->d, step, work, &none);
    if (s == VFM_OK) s = batch_prepare(model, o, &p->b);
    if (s != VFM_OK) {
        objective_pass_end(p);
        return s;
    }
    *out = p;
    return VFM_OK;
}

const DiTInputs *objective_pass_inputs(const ObjectivePass *p) { return &p->b.cond.in; }

Tensor *objective_pass_output(ObjectivePass *p) { return &p->b.F; }

vfm_status objective_pass_loss(ObjectivePass *p, double grad_scale, ObjectiveResult *res) {
    return batch_finish(p->model, &p->o, &p->b, grad_scale, res);
}

const Tensor *objective_pass_output_grad(const ObjectivePass *p) { return &p->b.dF; }

void objective_pass_end(ObjectivePass *p) {
    if (!p) return;
    diffusion_draws_free(&p->d);
    free(p);
}
