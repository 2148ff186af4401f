/* EdmConfig from the diffusion.* keys. */
#include <string.h>

#include "core/config.h"
#include "diffusion/edm.h"

vfm_status edm_config_from(EdmConfig *e, const Config *cfg) {
    memset(e, 0, sizeof *e);
    const char *objective = cfg_str(cfg, "diffusion.objective");
    if (strcmp(objective, "edm") != 0)
        return vfm_fail_at(VFM_ERR_UNSUPPORTED, NULL, "diffusion.objective", objective, "only 'edm' in this version");
    e->sigma_data = (float)cfg_float(cfg, "model.sigma_data");
    e->p_mean = (float)cfg_float(cfg, "diffusion.p_mean");
    e->p_std = (float)cfg_float(cfg, "diffusion.p_std");
    e->cfg_dropout = (float)cfg_float(cfg, "diffusion.cfg_dropout");
    e->sigma_per_pack = strcmp(cfg_str(cfg, "diffusion.sigma_per"), "pack") == 0;
    e->seed = (uint64_t)cfg_int(cfg, "rng.seed");
    return VFM_OK;
}
