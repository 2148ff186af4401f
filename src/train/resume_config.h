/* Resuming with another config (docs/checkpoints.md "Resuming with another config"): the run's config
 * against the one saved with the checkpoint (meta.json), key by key, by each key's resume class
 * (config_keys.c): another model or objective is refused, what a run may change on the way (the
 * schedule, intervals, layout, data stream) is said in one info line per key, paths and logging
 * pass silently. Only the keys the run's set-up read are compared (call it after
 * train_setup_from_config): one this model or data source does not use cannot make another run. */
#ifndef VFM_RESUME_CONFIG_H
#define VFM_RESUME_CONFIG_H

#include "core/config.h"

/* saved_yaml: the checkpoint's config text (CheckpointState.config_yaml; NULL or "": nothing to
 * compare). VFM_ERR_USAGE listing every refused key with both values; the info lines only when
 * `speak` (rank 0). dir names the checkpoint in messages. */
vfm_status resume_config_check(const Config *run, const char *saved_yaml, const char *dir, int speak);

#endif
