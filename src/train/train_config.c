/* Optimizer/schedule keys and the accepted-but-not-yet-possible checks (see train_config.h). */
#include "train_config.h"

#include <string.h>

#include "core/log.h"
#include "parallel/recompute.h"
#include "parallel/sharding.h"

vfm_status optim_config_from(OptimConfig *o, const Config *cfg) {
    memset(o, 0, sizeof *o);
    const char *name = cfg_str(cfg, "optimizer.optimizer"); /* the registry admits "adam" only */
    if (strcmp(name, "adam") != 0)
        return vfm_fail_at(VFM_ERR_USAGE, NULL, "optimizer.optimizer", name, "only adam (AdamW) in this version");
    o->lr = cfg_float(cfg, "optimizer.lr");
    o->min_lr = cfg_float(cfg, "optimizer.min_lr");
    o->beta1 = cfg_float(cfg, "optimizer.adam_beta1");
    o->beta2 = cfg_float(cfg, "optimizer.adam_beta2");
    o->eps = cfg_float(cfg, "optimizer.adam_eps");
    o->weight_decay = cfg_float(cfg, "optimizer.weight_decay");
    o->clip_grad = cfg_float(cfg, "optimizer.clip_grad");
    o->warmup_iters = cfg_int(cfg, "scheduler.lr_warmup_iters");
    o->warmup_init = cfg_float(cfg, "scheduler.lr_warmup_init");
    o->decay_iters = cfg_int(cfg, "scheduler.lr_decay_iters");
    if (o->decay_iters == 0) o->decay_iters = cfg_int(cfg, "train.train_iters");
    const char *style = cfg_str(cfg, "scheduler.lr_decay_style");
    o->decay_style = strcmp(style, "constant") == 0 ? LR_DECAY_CONSTANT
                     : strcmp(style, "linear") == 0 ? LR_DECAY_LINEAR
                     : strcmp(style, "WSD") == 0    ? LR_DECAY_WSD
                                                    : LR_DECAY_COSINE;
    const char *wsd = cfg_str(cfg, "scheduler.lr_wsd_decay_style");
    o->wsd_style = strcmp(wsd, "linear") == 0 ? WSD_LINEAR
                   : strcmp(wsd, "cosine") == 0 ? WSD_COSINE
                   : strcmp(wsd, "minus_sqrt") == 0 ? WSD_MINUS_SQRT
                                                    : WSD_EXPONENTIAL;
    o->wsd_decay_iters = cfg_int(cfg, "scheduler.lr_wsd_decay_iters");
    if (o->min_lr > o->lr)
        return vfm_fail(VFM_ERR_USAGE, "optimizer.min_lr (%g) is larger than optimizer.lr (%g)", o->min_lr, o->lr);
    if (o->decay_style == LR_DECAY_WSD && o->wsd_decay_iters <= 0)
        return vfm_fail_at(VFM_ERR_USAGE, NULL, "scheduler.lr_wsd_decay_iters", "0",
                           "scheduler.lr_decay_style=WSD needs the length of its final annealing (> 0)");
    if (o->decay_style == LR_DECAY_WSD && o->wsd_decay_iters > o->decay_iters)
        return vfm_fail(VFM_ERR_USAGE, "scheduler.lr_wsd_decay_iters (%lld) is longer than the decay (%lld steps)",
                        (long long)o->wsd_decay_iters, (long long)o->decay_iters);
    if (o->decay_style != LR_DECAY_WSD &&
        (cfg_is_set(cfg, "scheduler.lr_wsd_decay_iters") || cfg_is_set(cfg, "scheduler.lr_wsd_decay_style")))
        log_warn("config: scheduler.lr_wsd_decay_* apply only with scheduler.lr_decay_style=WSD (ignored with %s)", style);
    return VFM_OK;
}

vfm_status train_check_keys(const Config *cfg) {
    if (cfg_int(cfg, "train.micro_batch_size") != 1) /* the registry admits 1 only: a micro-batch is one pack */
        return vfm_fail_at(VFM_ERR_USAGE, NULL, "train.micro_batch_size", NULL, "a micro-batch is one pack (1)");
    const char *split = cfg_str(cfg, "dataset.split");
    if (strcmp(split, "train") != 0 && cfg_bool(cfg, "dataset.mock"))
        log_warn("config: dataset.split=%s: the mock dataset trains on its train stream (dataset.split selects the "
                 "shards of a WebDataset)", split);
    /* sharding: contradictory key pairs exit 2 (sharding.h); the trainer shards by the resolved strategy */
    DpSharding sharding;
    VFM_TRY(dp_sharding_from_config(cfg, &sharding));
    if (sharding >= DP_SHARD_OPTIM_GRADS) {
        if (cfg_is_set(cfg, "ddp.bucket_size_mb") || cfg_is_set(cfg, "ddp.overlap_grad_reduce"))
            log_warn("config: ddp.bucket_size_mb and ddp.overlap_grad_reduce do not apply to %s: FSDP reduces each "
                     "transformer block's gradients (one unit) right after its backward", dp_sharding_name(sharding));
    } else if (cfg_int(cfg, "model.pipeline_model_parallel_size") > 1 && cfg_is_set(cfg, "ddp.overlap_grad_reduce") &&
               cfg_bool(cfg, "ddp.overlap_grad_reduce")) {
        log_warn("config: ddp.overlap_grad_reduce does not apply under pipeline parallelism: the gradient buckets are "
                 "reduced after the step's schedule");
    }
    if (sharding < DP_SHARD_OPTIM_GRADS && cfg_is_set(cfg, "ddp.fsdp_unsharded_accumulation")) {
        log_warn("config: ddp.fsdp_unsharded_accumulation applies to optim_grads and optim_grads_params only (the "
                 "strategy is %s)", dp_sharding_name(sharding));
    }
    RecomputeConfig recompute; /* the keys' rules (recompute.h); the trainer hands the plan to the model */
    VFM_TRY(recompute_from_config(cfg, &recompute));
    /* moviegen's keys (docs/models.md "moviegen") */
    int moviegen = strcmp(cfg_str(cfg, "model.variant"), "moviegen") == 0;
    if (!moviegen || strcmp(cfg_str(cfg, "model.pos_embedding"), "auto") != 0) {
        static const char *const max_keys[] = {"model.max_frames", "model.max_img_h", "model.max_img_w"};
        for (int i = 0; i < 3; i++)
            if (cfg_is_set(cfg, max_keys[i]))
                log_warn("config: %s sizes moviegen's learned position (model.variant=moviegen, "
                         "model.pos_embedding=auto): ignored here", max_keys[i]);
    }
    if (moviegen && cfg_is_set(cfg, "model.qk_layernorm") && cfg_bool(cfg, "model.qk_layernorm"))
        log_warn("config: model.qk_layernorm does not apply to moviegen (NeMo's MovieGen has no QK-norm): ignored");
    if (!cfg_bool(cfg, "ddp.check_for_nan_in_grad"))
        log_warn("config: ddp.check_for_nan_in_grad=false is ignored: vfm always checks the gradient for NaN/Inf and "
                 "skips such steps");
    return VFM_OK;
}
