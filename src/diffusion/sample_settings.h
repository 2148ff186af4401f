/* The sampler keys of a run, read for its objective: what `vfm sample` uses by default and what
 * validation generates with (docs/diffusion.md "Sampling", docs/training.md "Validation"). */
#ifndef VFM_SAMPLE_SETTINGS_H
#define VFM_SAMPLE_SETTINGS_H

#include "core/config.h"
#include "diffusion/generate.h"
#include "diffusion/objective.h"
#include "diffusion/sampler.h"

typedef struct SampleSettings {
    SamplerConfig sampler; /* num_steps; edm: sigma_min, sigma_max, rho, s_churn */
    int ddim;              /* ddpm: sampler.ddim */
    int flow_linear;       /* flow: sampler.flow_schedule=linear */
    int flow_unipc;        /* flow: sampler.flow_solver=unipc */
    int unipc_order;       /* flow, unipc: sampler.unipc_order */
    double guidance;
} SampleSettings;

/* Reads the steps and guidance — sampler.num_steps and sampler.guidance, or for validation
 * model.val_generation_num_steps and model.val_generation_guidance — and the sampler keys of this
 * objective only (edm: sampler.rho, s_churn, sigma_min, sigma_max; ddpm: sampler.ddim; flow:
 * sampler.flow_solver, then sampler.flow_schedule for euler or sampler.unipc_order for unipc). Another objective's
 * (or solver's) sampler key that the user set is named in a warning. */
vfm_status sample_settings_from_config(SampleSettings *s, const Config *cfg, ObjectiveKind kind, int validation);
/* Copies the settings into generation options (the rest of *g is left as it is). */
void sample_settings_apply(const SampleSettings *s, GenerateOptions *g);

#endif
