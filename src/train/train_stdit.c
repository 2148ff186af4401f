/* ST-DiT's context-parallel keys (train_parallel.h st_layout_keys): model.cp_comm_type hybrid — the
 * default of model.variant stdit and refused elsewhere — with its full-attention layers' scheme in
 * model.stdit_full_cp_comm_type; plain p2p runs every ST-DiT attention through the ring. */
#include <string.h>

#include "core/config.h"
#include "train/train_parallel.h"

static const char *const FULL_KEY = "model.stdit_full_cp_comm_type";

vfm_status st_layout_keys(TrainLayout *l, const Config *cfg, const char **type) {
    const char *variant = cfg_str(cfg, "model.variant");
    int stdit = strcmp(variant, "stdit") == 0;
    if (stdit && !cfg_user_set(cfg, "model.cp_comm_type")) *type = "hybrid";
    VFM_TRY(cp_comm_type_parse(*type, &l->cp_type));
    l->hybrid = l->cp_type == CP_COMM_HYBRID;
    if (l->hybrid && !stdit)
        return vfm_fail_at(VFM_ERR_USAGE, NULL, "model.cp_comm_type", "hybrid",
                           "needs model.variant=stdit (spatial and temporal attention); %s has full attention only",
                           variant);
    if (stdit && !l->hybrid && l->cp_type != CP_COMM_P2P)
        return vfm_fail_at(VFM_ERR_USAGE, NULL, "model.cp_comm_type", *type,
                           "model.variant=stdit runs its spatial and temporal attention under hybrid (the default) "
                           "or p2p; its full-attention layers take %s", FULL_KEY);
    if (!l->hybrid) {
        if (cfg_user_set(cfg, FULL_KEY))
            return vfm_fail_at(VFM_ERR_USAGE, NULL, FULL_KEY, cfg_str(cfg, FULL_KEY),
                               "applies to model.cp_comm_type=hybrid only (it is %s)", *type);
        return VFM_OK;
    }
    *type = cfg_str(cfg, FULL_KEY);
    VFM_TRY(cp_comm_type_parse(*type, &l->cp_type));
    if (l->cp_type == CP_COMM_HYBRID || l->cp_type == CP_COMM_ALL_GATHER)
        return vfm_fail_at(VFM_ERR_USAGE, NULL, FULL_KEY, *type, "expected p2p, a2a or a2a+p2p");
    return VFM_OK;
}
