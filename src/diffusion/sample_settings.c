/* Sampler keys by objective (see sample_settings.h). */
#include "diffusion/sample_settings.h"

#include <string.h>

vfm_status sample_settings_from_config(SampleSettings *s, const Config *cfg, ObjectiveKind kind, int validation) {
    memset(s, 0, sizeof *s);
    sampler_config_default(&s->sampler);
    const char *name = objective_name(kind);
    s->sampler.num_steps = (int)cfg_int(cfg, validation ? "model.val_generation_num_steps" : "sampler.num_steps");
    s->guidance = cfg_float(cfg, validation ? "model.val_generation_guidance" : "sampler.guidance");
    static const char *const edm_keys[] = {"sampler.rho", "sampler.s_churn", "sampler.sigma_min", "sampler.sigma_max"};
    if (kind == OBJECTIVE_EDM) {
        s->sampler.rho = cfg_float(cfg, "sampler.rho");
        s->sampler.s_churn = cfg_float(cfg, "sampler.s_churn");
        s->sampler.sigma_min = cfg_float(cfg, "sampler.sigma_min");
        s->sampler.sigma_max = cfg_float(cfg, "sampler.sigma_max");
    } else {
        for (int i = 0; i < 4; i++)
            cfg_warn_unused(cfg, edm_keys[i], "%s applies to diffusion.objective=edm (ignored with %s)", edm_keys[i], name);
    }
    if (kind == OBJECTIVE_DDPM) s->ddim = cfg_bool(cfg, "sampler.ddim");
    else cfg_warn_unused(cfg, "sampler.ddim", "sampler.ddim applies to diffusion.objective=ddpm (ignored with %s)", name);
    static const char *const flow_keys[] = {"sampler.flow_schedule", "sampler.flow_solver", "sampler.unipc_order"};
    if (kind == OBJECTIVE_FLOW) {
        s->flow_unipc = strcmp(cfg_str(cfg, "sampler.flow_solver"), "unipc") == 0;
        if (s->flow_unipc) {
            s->unipc_order = (int)cfg_int(cfg, "sampler.unipc_order");
            cfg_warn_unused(cfg, "sampler.flow_schedule", "sampler.flow_schedule applies to the Euler sampler; "
                            "sampler.flow_solver=unipc steps on its own times (ignored)");
        } else {
            s->flow_linear = strcmp(cfg_str(cfg, "sampler.flow_schedule"), "linear") == 0;
            cfg_warn_unused(cfg, "sampler.unipc_order", "sampler.unipc_order applies to sampler.flow_solver=unipc "
                            "(ignored with euler)");
        }
    } else {
        for (int i = 0; i < 3; i++)
            cfg_warn_unused(cfg, flow_keys[i], "%s applies to diffusion.objective=flow (ignored with %s)", flow_keys[i],
                            name);
    }
    if (kind == OBJECTIVE_DDPM && s->sampler.num_steps < 2)
        return vfm_fail_at(VFM_ERR_USAGE, NULL, validation ? "model.val_generation_num_steps" : "sampler.num_steps", "1",
                           "ddpm sampling needs at least 2");
    return VFM_OK;
}

void sample_settings_apply(const SampleSettings *s, GenerateOptions *g) {
    g->sampler = s->sampler;
    g->ddim = s->ddim;
    g->flow_linear = s->flow_linear;
    g->flow_unipc = s->flow_unipc;
    g->unipc_order = s->unipc_order;
    g->guidance = s->guidance;
}
