/* Checkpoint directory and saved model configuration for the model commands (see model_load.h). */
#include "checkpoint_dir.h"

#include <stdio.h>

#include "core/fileutil.h"
#include "core/log.h"
#include "train/checkpoint.h"

vfm_status cli_checkpoint_dir(const char *path, const char *flag, char *dir, size_t n) {
    char done[1300];
    path_join(done, sizeof done, path, "DONE");
    if (path_exists(done)) {
        snprintf(dir, n, "%s", path);
        return VFM_OK;
    }
    int found = 0;
    VFM_TRY(checkpoint_find_latest(path, dir, n, &found));
    return found ? VFM_OK : vfm_fail_at(VFM_ERR_USAGE, NULL, flag, path, "holds no complete checkpoint");
}

vfm_status cli_checkpoint_config(const char *dir, Config **cfg, DiTConfig *mc) {
    CheckpointState st;
    VFM_TRY(checkpoint_read_meta(dir, &st));
    int level = log_get_level();
    log_set_level(LOG_ERROR); /* the saved config may name keys this build warns about */
    vfm_status s = config_from_yaml_string(cfg, st.config_yaml, "checkpoint config");
    log_set_level(level);
    checkpoint_state_free(&st);
    VFM_TRY(s);
    s = dit_config_from(mc, *cfg);
    if (s != VFM_OK) {
        config_free(*cfg);
        *cfg = NULL;
    }
    return s;
}
