/* The training loop: config → model, data source, optimizer; per step gradient accumulation over
 * the global batch (one pack per micro-batch), NaN/Inf step skipping, clipping, AdamW, EMA,
 * logging (stdout + metrics.jsonl), and checkpoints with exact resume. */
#ifndef VFM_TRAINER_H
#define VFM_TRAINER_H

#include "core/error.h"

typedef struct TrainOptions {
    const char *config_path;      /* YAML file or NULL */
    const char *const *overrides; /* a.b.c=value */
    int n_overrides;
    const char *resume;           /* NULL, "auto" (newest complete checkpoint of checkpoint.save) or a directory */
    /* Out (may be NULL): 1 when the run failed on a check every rank makes alike before any work
     * (config, parallel layout), so the caller may end every rank quietly instead of aborting the
     * job, rank 0 alone reporting the one line. */
    int *failed_everywhere;
    /* Out (may be NULL): the signal (SIGTERM, SIGUSR1) that stopped the run after a checkpoint,
     * 0 when it ran to the end (stop_signal.h). */
    int *stopped_by_signal;
} TrainOptions;

vfm_status train_run(const TrainOptions *opt);

#endif
