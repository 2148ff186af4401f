/* Every key of a training run, read where it applies (see train_setup.h). */
#include "train/train_setup.h"

#include <stdio.h>
#include <string.h>

#include "core/log.h"
#include "train/train_config.h"

/* The ddp.* keys: the sharding strategy, and the keys of the DP path it takes. */
static vfm_status read_sharding(TrainSetup *su, const Config *cfg) {
    VFM_TRY(dp_sharding_from_config(cfg, &su->sharding));
    if (su->sharding >= DP_SHARD_OPTIM_GRADS) {
        su->fsdp_unsharded_accumulation = cfg_bool(cfg, "ddp.fsdp_unsharded_accumulation");
        static const char *const bucket_keys[] = {"ddp.bucket_size_mb", "ddp.overlap_grad_reduce"};
        for (int i = 0; i < 2; i++)
            cfg_warn_unused(cfg, bucket_keys[i], "%s does not apply to %s: FSDP reduces each transformer block's "
                            "gradients (one unit) right after its backward", bucket_keys[i], dp_sharding_name(su->sharding));
    } else {
        su->bucket_mb = cfg_float(cfg, "ddp.bucket_size_mb");
        su->overlap_grad_reduce = cfg_bool(cfg, "ddp.overlap_grad_reduce");
        if (su->layout.pp > 1 && su->overlap_grad_reduce && cfg_user_set(cfg, "ddp.overlap_grad_reduce"))
            log_warn("config: ddp.overlap_grad_reduce does not apply under pipeline parallelism: the gradient buckets "
                     "are reduced after the step's schedule");
        cfg_warn_unused(cfg, "ddp.fsdp_unsharded_accumulation", "ddp.fsdp_unsharded_accumulation applies to optim_grads "
                        "and optim_grads_params only (the strategy is %s)", dp_sharding_name(su->sharding));
    }
    if (!cfg_bool(cfg, "ddp.check_for_nan_in_grad"))
        log_warn("config: ddp.check_for_nan_in_grad=false is ignored: vfm always checks the gradient for NaN/Inf and "
                 "skips such steps");
    return VFM_OK;
}

/* model.expert_model_parallel_size: read only with experts (it splits them); set without them it
 * is refused, as is a size that does not divide them. DP is known at launch (train_layout_check). */
static vfm_status read_expert_parallel(TrainSetup *su, const Config *cfg) {
    static const char *key = "model.expert_model_parallel_size";
    su->layout.ep = 1;
    if (su->model.moe.experts <= 0) {
        if (cfg_user_set(cfg, key) && cfg_int(cfg, key) != 1)
            return vfm_fail_at(VFM_ERR_USAGE, NULL, key, NULL, "expert parallelism needs experts: set "
                               "model.num_moe_experts (it is 0)");
        return VFM_OK;
    }
    int ep = (int)cfg_int(cfg, key);
    if (su->model.moe.experts % ep != 0)
        return vfm_fail_at(VFM_ERR_USAGE, NULL, key, NULL, "%d must divide model.num_moe_experts (%d): every EP rank "
                           "holds the same number of experts", ep, su->model.moe.experts);
    su->layout.ep = ep;
    return VFM_OK;
}

/* The trainer's own keys: steps, batch, logging, device, run directory, checkpoints, EMA. */
static void read_run(TrainSetup *su, const Config *cfg) {
    su->train_iters = cfg_int(cfg, "train.train_iters");
    su->global_batch_size = cfg_int(cfg, "train.global_batch_size");
    su->fixed_pack_length = cfg_int(cfg, "train.fixed_pack_length");
    su->max_nonfinite = (int)cfg_int(cfg, "train.max_nonfinite_steps");
    su->log_interval = (int)cfg_int(cfg, "logger.log_interval");
    su->threads = (int)cfg_int(cfg, "train.threads");
    snprintf(su->device, sizeof su->device, "%s", cfg_str(cfg, "train.device"));
    su->seed = (uint64_t)cfg_int(cfg, "rng.seed");
    snprintf(su->run_dir, sizeof su->run_dir, "%s", cfg_str(cfg, "checkpoint.save"));
    if (su->run_dir[0]) { /* checkpoint.save null saves nothing: no checkpoints to space or keep */
        su->save_interval = (int)cfg_int(cfg, "checkpoint.save_interval");
        su->keep = (int)cfg_int(cfg, "checkpoint.keep");
    }
    snprintf(su->tensorboard_dir, sizeof su->tensorboard_dir, "%s", cfg_str(cfg, "logger.tensorboard_dir"));
    snprintf(su->load, sizeof su->load, "%s", cfg_str(cfg, "checkpoint.load"));
    if (su->load[0]) {
        su->finetune = cfg_bool(cfg, "checkpoint.finetune");
        if (!su->finetune) su->load_optim = cfg_bool(cfg, "checkpoint.load_optim");
        else cfg_warn_unused(cfg, "checkpoint.load_optim", "checkpoint.load_optim does not apply with "
                             "checkpoint.finetune=true: fine-tuning loads the weights only");
    }
    su->ema = cfg_bool(cfg, "ema.enabled");
    if (su->ema) su->ema_decay = cfg_float(cfg, "ema.decay");
}

vfm_status train_setup_from_config(TrainSetup *su, const Config *cfg, int warn) {
    memset(su, 0, sizeof *su);
    su->log_level = log_level_from_string(cfg_str(cfg, "logger.level"));
    if (cfg_int(cfg, "train.micro_batch_size") != 1) /* the registry admits 1 only: a micro-batch is one pack */
        return vfm_fail_at(VFM_ERR_USAGE, NULL, "train.micro_batch_size", NULL, "a micro-batch is one pack (1)");
    VFM_TRY(dit_config_from(&su->model, cfg));
    VFM_TRY(train_layout_from(&su->layout, cfg, warn));
    VFM_TRY(read_expert_parallel(su, cfg));
    VFM_TRY(recompute_from_config(cfg, &su->recompute));
    VFM_TRY(read_sharding(su, cfg));
    VFM_TRY(objective_from_config(&su->objective, cfg, &su->model));
    VFM_TRY(objective_check_model(&su->objective, &su->model));
    VFM_TRY(optim_config_from(&su->optim, cfg));
    read_run(su, cfg);
    /* the data: the model's fps embedding is what reads a sample's fps */
    if (!su->model.f.fps_embedder && !cfg_bool(cfg, "dataset.mock"))
        cfg_warn_unused(cfg, "dataset.default_fps", "dataset.default_fps does not apply: model.variant=%s has no fps "
                        "embedding", dit_variant_name(su->model.variant));
    VFM_TRY(pack_source_config_from(&su->data, cfg));
    VFM_TRY(validation_config_from(&su->validation, cfg, su->objective.kind, su->train_iters));
    VFM_TRY(sample_settings_from_config(&su->sample_defaults, cfg, su->objective.kind, 0));
    if (warn && su->validation.interval > 0) {
        /* the two sampler keys validation does not read: say so, since they look as if it did */
        static const char *const pairs[][2] = {{"sampler.num_steps", "model.val_generation_num_steps"},
                                               {"sampler.guidance", "model.val_generation_guidance"}};
        for (int i = 0; i < 2; i++)
            if (cfg_user_set(cfg, pairs[i][0]))
                log_info("config: %s is vfm sample's default (saved with the run); validation generates with %s",
                         pairs[i][0], pairs[i][1]);
    }
    return config_check_unread(cfg, warn);
}
