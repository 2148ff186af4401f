/* Optimizer and schedule keys (see train_config.h). */
#include "train_config.h"

#include <string.h>

#include "core/log.h"

vfm_status optim_config_from(OptimConfig *o, const Config *cfg) {
    memset(o, 0, sizeof *o);
    const char *name = cfg_str(cfg, "optimizer.optimizer"); /* the registry admits "adam" only */
    if (strcmp(name, "adam") != 0)
        return vfm_fail_at(VFM_ERR_USAGE, NULL, "optimizer.optimizer", name, "only adam (AdamW) in this version");
    o->lr = cfg_float(cfg, "optimizer.lr");
    o->beta1 = cfg_float(cfg, "optimizer.adam_beta1");
    o->beta2 = cfg_float(cfg, "optimizer.adam_beta2");
    o->eps = cfg_float(cfg, "optimizer.adam_eps");
    o->weight_decay = cfg_float(cfg, "optimizer.weight_decay");
    o->clip_grad = cfg_float(cfg, "optimizer.clip_grad");
    o->warmup_iters = cfg_int(cfg, "scheduler.lr_warmup_iters");
    /* the keys of the schedule's other parts are read only when the schedule has them */
    if (o->warmup_iters > 0) o->warmup_init = cfg_float(cfg, "scheduler.lr_warmup_init");
    const char *style = cfg_str(cfg, "scheduler.lr_decay_style");
    o->decay_style = strcmp(style, "constant") == 0 ? LR_DECAY_CONSTANT
                     : strcmp(style, "linear") == 0 ? LR_DECAY_LINEAR
                     : strcmp(style, "WSD") == 0    ? LR_DECAY_WSD
                                                    : LR_DECAY_COSINE;
    if (o->decay_style == LR_DECAY_CONSTANT) { /* the peak after warmup, for good: no decay, no floor */
        o->min_lr = o->lr;
        o->decay_iters = cfg_int(cfg, "train.train_iters");
        cfg_warn_unused(cfg, "optimizer.min_lr", "optimizer.min_lr does not apply to scheduler.lr_decay_style=constant "
                        "(ignored)");
        cfg_warn_unused(cfg, "scheduler.lr_decay_iters", "scheduler.lr_decay_iters does not apply to "
                        "scheduler.lr_decay_style=constant (ignored)");
    } else {
        o->min_lr = cfg_float(cfg, "optimizer.min_lr");
        o->decay_iters = cfg_int(cfg, "scheduler.lr_decay_iters");
        if (o->decay_iters == 0) o->decay_iters = cfg_int(cfg, "train.train_iters");
    }
    if (o->decay_style == LR_DECAY_WSD) {
        const char *wsd = cfg_str(cfg, "scheduler.lr_wsd_decay_style");
        o->wsd_style = strcmp(wsd, "linear") == 0 ? WSD_LINEAR
                       : strcmp(wsd, "cosine") == 0 ? WSD_COSINE
                       : strcmp(wsd, "minus_sqrt") == 0 ? WSD_MINUS_SQRT
                                                        : WSD_EXPONENTIAL;
        o->wsd_decay_iters = cfg_int(cfg, "scheduler.lr_wsd_decay_iters");
    } else {
        cfg_warn_unused(cfg, "scheduler.lr_wsd_decay_iters", "scheduler.lr_wsd_decay_iters applies only with "
                        "scheduler.lr_decay_style=WSD (ignored with %s)", style);
        cfg_warn_unused(cfg, "scheduler.lr_wsd_decay_style", "scheduler.lr_wsd_decay_style applies only with "
                        "scheduler.lr_decay_style=WSD (ignored with %s)", style);
    }
    if (o->min_lr > o->lr)
        return vfm_fail(VFM_ERR_USAGE, "optimizer.min_lr (%g) is larger than optimizer.lr (%g)", o->min_lr, o->lr);
    if (o->decay_style == LR_DECAY_WSD && o->wsd_decay_iters <= 0)
        return vfm_fail_at(VFM_ERR_USAGE, NULL, "scheduler.lr_wsd_decay_iters", "0",
                           "scheduler.lr_decay_style=WSD needs the length of its final annealing (> 0)");
    if (o->decay_style == LR_DECAY_WSD && o->wsd_decay_iters > o->decay_iters)
        return vfm_fail(VFM_ERR_USAGE, "scheduler.lr_wsd_decay_iters (%lld) is longer than the decay (%lld steps: "
                        "scheduler.lr_decay_iters, or train.train_iters when it is 0)", (long long)o->wsd_decay_iters,
                        (long long)o->decay_iters);
    return VFM_OK;
}
