/* The objective interface: configuration, the keyed per-sample draws, and dispatch to the EDM,
 * flow-matching and DDPM losses (see objective.h). */
#include "objective.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "core/log.h"
#include "core/philox.h"
#include "diffusion/ddpm.h"
#include "diffusion/edm.h"
#include "diffusion/flow.h"

const char *objective_name(ObjectiveKind kind) {
    return kind == OBJECTIVE_FLOW ? "flow" : kind == OBJECTIVE_DDPM ? "ddpm" : "edm";
}

vfm_status objective_from_config(Objective *o, const Config *cfg) {
    memset(o, 0, sizeof *o);
    const char *name = cfg_str(cfg, "diffusion.objective");
    o->kind = strcmp(name, "flow") == 0 ? OBJECTIVE_FLOW : strcmp(name, "ddpm") == 0 ? OBJECTIVE_DDPM : OBJECTIVE_EDM;
    o->seed = (uint64_t)cfg_int(cfg, "rng.seed");
    o->sigma_data = (float)cfg_float(cfg, "model.sigma_data");
    o->p_mean = cfg_float(cfg, "diffusion.p_mean");
    o->p_std = cfg_float(cfg, "diffusion.p_std");
    o->flow_shift = cfg_float(cfg, "diffusion.flow_shift");
    o->flow_shift_base = cfg_int(cfg, "diffusion.flow_shift_base_tokens");
    o->cfg_dropout = (float)cfg_float(cfg, "diffusion.cfg_dropout");
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
    if (o->flow_shift != 1.0 && o->kind != OBJECTIVE_FLOW)
        return vfm_fail_at(VFM_ERR_USAGE, NULL, "diffusion.flow_shift", NULL, "applies to diffusion.objective=flow only");
    if (o->kind == OBJECTIVE_DDPM && (o->p_mean != 0.0 || o->p_std != 1.0))
        return vfm_fail(VFM_ERR_USAGE, "diffusion.p_mean/p_std shape the EDM and flow time distributions; ddpm draws "
                        "t uniformly (unset them)");
    /* settings of another objective's sampler: said once, not silently ignored */
    static const char *edm_only[] = {"model.sigma_data", "sampler.rho", "sampler.s_churn", "sampler.sigma_min",
                                     "sampler.sigma_max"};
    for (int i = 0; i < 5 && o->kind != OBJECTIVE_EDM; i++)
        if (cfg_is_set(cfg, edm_only[i]))
            log_warn("config: %s applies to diffusion.objective=edm (ignored with %s)", edm_only[i], objective_name(o->kind));
    if (o->kind != OBJECTIVE_DDPM && cfg_is_set(cfg, "sampler.ddim") && cfg_bool(cfg, "sampler.ddim"))
        log_warn("config: sampler.ddim applies to diffusion.objective=ddpm (ignored with %s)", objective_name(o->kind));
    if (o->kind != OBJECTIVE_FLOW && cfg_is_set(cfg, "sampler.flow_schedule"))
        log_warn("config: sampler.flow_schedule applies to diffusion.objective=flow (ignored with %s)",
                 objective_name(o->kind));
    return VFM_OK;
}

vfm_status objective_check_model(const Objective *o, const DiTConfig *mc) {
    int in = dit_token_dim(mc), out = dit_out_dim(mc);
    if (out == in) return VFM_OK;
    if (o->kind == OBJECTIVE_DDPM && out == 2 * in) return VFM_OK;
    return vfm_fail(VFM_ERR_USAGE, "the model gives %d output channels for %d input channels (model.out_channels / "
                    "model.learn_sigma): diffusion.objective=%s needs them equal%s", out / (in / mc->in_channels),
                    mc->in_channels, objective_name(o->kind),
                    o->kind == OBJECTIVE_DDPM ? ", or twice the input channels (learned sigma)" : "");
}

float objective_draw_time(const Objective *o, uint32_t step, uint64_t uid, int64_t tokens) {
    if (o->kind == OBJECTIVE_DDPM) {
        double u = philox_uniform_at(o->seed, RNG_STREAM_SIGMA, step, uid, 0);
        int t = (int)(u * DDPM_NUM_TIMESTEPS);
        return (float)(t < DDPM_NUM_TIMESTEPS ? t : DDPM_NUM_TIMESTEPS - 1);
    }
    float z = philox_normal_at(o->seed, RNG_STREAM_SIGMA, step, uid, 0);
    double v;
    if (o->kind == OBJECTIVE_EDM) {
        v = expf((float)o->p_mean + (float)o->p_std * z); /* float, as EDM always drew it */
    } else {
        double n = o->p_mean + o->p_std * (double)z;
        v = flow_shift_sigma(1.0 / (1.0 + exp(-n)), flow_shift_for(o, tokens));
    }
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

vfm_status diffusion_pack_noise(float *noise, const Pack *pack, const DiTConfig *mc, uint64_t seed, uint32_t stream,
                                uint32_t step) {
    int d = pack->token_dim;
    memset(noise, 0, (size_t)(pack->n_tokens * d) * sizeof(float));
    for (int i = 0; i < pack->n_samples; i++) {
        const PackSample *s = &pack->samples[i];
        const int32_t *ls = s->latent_shape;
        int64_t n = (int64_t)ls[0] * ls[1] * ls[2] * ls[3];
        float *canon = malloc((size_t)n * sizeof(float));
        if (!canon) return vfm_fail(VFM_ERR_NOMEM, "diffusion: noise for %s", s->source);
        Tensor c = TF32(canon, ls[0], ls[1], ls[2], ls[3]);
        Tensor rows = TF32(noise + (int64_t)pack->cu_seqlens_padded[i] * d, s->tokens, d);
        vfm_status st = op_randn_fill(&c, seed, stream, step, s->uid, 0, 1.0f);
        if (st == VFM_OK) st = op_patchify(&rows, &c, mc->patch_temporal, mc->patch_spatial, mc->patch_spatial);
        free(canon);
        VFM_TRY(st);
    }
    return VFM_OK;
}

vfm_status objective_draw(const Objective *o, const DiTConfig *mc, const Pack *p, uint32_t step, DiffusionDraws *d) {
    int B = p->n_samples;
    memset(d, 0, sizeof *d);
    d->t = malloc((size_t)B * sizeof(float));
    d->drop = malloc((size_t)B * sizeof(int));
    d->noise = malloc((size_t)(p->n_tokens * p->token_dim) * sizeof(float));
    if (mc->num_classes > 0) d->class_row = malloc((size_t)B * sizeof(int32_t));
    if (!d->t || !d->drop || !d->noise || (mc->num_classes > 0 && !d->class_row))
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
    return diffusion_pack_noise(d->noise, p, mc, o->seed, RNG_STREAM_NOISE, step);
}

void diffusion_draws_free(DiffusionDraws *d) {
    free(d->t);
    free(d->drop);
    free(d->class_row);
    free(d->noise);
    memset(d, 0, sizeof *d);
}

vfm_status objective_loss_given(DiT *model, const Objective *o, const Pack *pack, const DiffusionDraws *draws,
                                double grad_scale, ObjectiveResult *res) {
    switch (o->kind) {
    case OBJECTIVE_FLOW: return flow_loss_given(model, pack, draws, grad_scale, res);
    case OBJECTIVE_DDPM: return ddpm_loss_given(model, pack, draws, grad_scale, res);
    case OBJECTIVE_EDM: break;
    }
    return edm_loss_and_grad_given(model, o->sigma_data, pack, draws, grad_scale, res);
}

vfm_status objective_loss_and_grad(DiT *model, const Objective *o, const Pack *pack, uint32_t step, double grad_scale,
                                   ObjectiveResult *res) {
    DiffusionDraws d;
    vfm_status s = objective_draw(o, &model->cfg, pack, step, &d);
    if (s == VFM_OK) s = objective_loss_given(model, o, pack, &d, grad_scale, res);
    diffusion_draws_free(&d);
    return s;
}

vfm_status objective_loss(DiT *model, const Objective *o, const Pack *pack, uint32_t step, ObjectiveResult *res) {
    return objective_loss_and_grad(model, o, pack, step, 0.0, res);
}
