/* The optimizer and learning-rate schedule keys (read by train_setup.c). */
#ifndef VFM_TRAIN_CONFIG_H
#define VFM_TRAIN_CONFIG_H

#include "core/config.h"
#include "optim/optimizer.h"

/* optimizer.*, scheduler.* (decay_iters 0 = train.train_iters): only the keys of the chosen
 * schedule are read (warmup_init with warmup iterations; min_lr and decay_iters unless constant;
 * the lr_wsd_* keys with WSD), another's set by the user is named in a warning. */
vfm_status optim_config_from(OptimConfig *o, const Config *cfg);

#endif
