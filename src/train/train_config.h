/* The training keys read by the trainer itself: the optimizer and LR schedule, and the checks
 * that make every accepted key do something — what this version cannot do is refused with
 * VFM_ERR_USAGE naming the key (exit 2), what vfm does anyway is said once with a warning. */
#ifndef VFM_TRAIN_CONFIG_H
#define VFM_TRAIN_CONFIG_H

#include "core/config.h"
#include "optim/optimizer.h"

/* optimizer.*, scheduler.* (decay_iters 0 = train.train_iters). */
vfm_status optim_config_from(OptimConfig *o, const Config *cfg);
/* The parallel layout, device, pack length, data split, DDP and scheduler keys this version can
 * and cannot honour. */
vfm_status train_check_keys(const Config *cfg);

#endif
