/* A training run's set-up from its config: every key `vfm train` reads, read here, once, into
 * plain values the trainer builds the run from (docs/config.md "Keys a run does not use").
 *
 * Only the keys that apply to this run are read — those of its model variant, objective, data
 * source (mock or real), schedule and layout — so that config_check_unread (called last) names
 * every key the user set that this run does not use: a warning, or for a key that gives the model
 * its shape exit 2. The struct holds no pointers, so two set-ups compare with memcmp: the registry
 * test (tests/unit/test_config_registry.c) sets each key in each mode and asks that the set-up
 * changed, or that a warning or an error named the key. */
#ifndef VFM_TRAIN_SETUP_H
#define VFM_TRAIN_SETUP_H

#include <stdint.h>

#include "core/config.h"
#include "data/loader/source.h"
#include "diffusion/objective.h"
#include "diffusion/sample_settings.h"
#include "model/dit.h"
#include "optim/optimizer.h"
#include "parallel/recompute.h"
#include "parallel/sharding.h"
#include "train/train_parallel.h"
#include "train/validation.h"

typedef struct TrainSetup {
    int log_level;               /* logger.level (LogLevel) */
    DiTConfig model;
    TrainLayout layout;
    RecomputeConfig recompute;
    DpSharding sharding;
    int fsdp_unsharded_accumulation; /* ZeRO-2/3 only */
    double bucket_mb;            /* not under ZeRO-2/3 */
    int overlap_grad_reduce;     /* not under ZeRO-2/3 */
    Objective objective;
    OptimConfig optim;
    PackSourceConfig data;
    ValidationConfig validation;
    SampleSettings sample_defaults; /* vfm sample's, saved with the run's config */
    int64_t train_iters, global_batch_size, fixed_pack_length;
    int max_nonfinite, log_interval, threads;
    char device[16];             /* train.device */
    uint64_t seed;
    char run_dir[1024];          /* checkpoint.save ("": nothing is saved) */
    int save_interval, keep;     /* with a run directory */
    char tensorboard_dir[1024];  /* logger.tensorboard_dir as given ("" = <run>/tb_logs) */
    char load[1024];             /* checkpoint.load */
    int finetune, load_optim;    /* with checkpoint.load */
    int ema;                     /* ema.enabled */
    double ema_decay;
} TrainSetup;

/* Reads the run's keys into *su (zeroed first) and checks them (VFM_ERR_USAGE naming the key); then
 * config_check_unread. warn: this rank speaks for the job (rank 0): warnings about the layout and
 * about keys that do not apply are printed only then. */
vfm_status train_setup_from_config(TrainSetup *su, const Config *cfg, int warn);

#endif
