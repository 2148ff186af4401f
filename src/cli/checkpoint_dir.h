/* What the commands that read checkpoints share: a checkpoint directory from a run directory or an
 * iter_* directory, and the model configuration a checkpoint was saved with. */
#ifndef VFM_CLI_CHECKPOINT_DIR_H
#define VFM_CLI_CHECKPOINT_DIR_H

#include <stddef.h>

#include "core/config.h"
#include "model/dit.h"

/* dir = path itself when it holds DONE, else the newest complete checkpoint under it (VFM_ERR_USAGE
 * naming `flag`, which may be NULL, when there is none). */
vfm_status cli_checkpoint_dir(const char *path, const char *flag, char *dir, size_t n);
/* The saved config (*cfg, config_free it) and the DiTConfig it describes. */
vfm_status cli_checkpoint_config(const char *dir, Config **cfg, DiTConfig *mc);

#endif
