/* Checkpoints (design §3, docs/checkpoints.md): <run>/iter_0000100/ holding meta.json,
 * model.safetensors (full tensors named like the PyTorch twin, whatever the layout),
 * optim.safetensors (full Adam moments), ema.safetensors (when EMA is on), and DONE last. Written into a temporary directory, every file
 * fsynced, renamed into place, the parent fsynced, then DONE: a directory without DONE is never
 * loaded. `--resume auto` loads the newest directory with DONE. */
#ifndef VFM_CHECKPOINT_H
#define VFM_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "model/params.h"

typedef struct CheckpointState {
    int64_t step;            /* iterations completed */
    int64_t optimizer_step;  /* AdamW updates applied (skipped steps do not count) */
    int64_t consumed_samples;
    uint64_t seed;
    char *loader_state;      /* JSON text of the data loader position (owned) */
    char *config_yaml;       /* the merged config (owned) */
    char *data_info;         /* JSON object describing the training data (owned; see trainer.c) */
    int world_size, dp, tp, pp, cp;
} CheckpointState;

void checkpoint_state_free(CheckpointState *s);

/* The weights one save writes (EMA may be NULL). Optimizer state is written per rank by
 * dp_optim_save (parallel/dp.h) into the staging directory. */
typedef struct CheckpointData {
    const ParamTable *table;
    const float *params;     /* [table->total] */
    const float *ema;
} CheckpointData;

/* A save in phases, so every rank of a job can add its files (the trainer runs a barrier between
 * phases; run_dir must be on a file system all ranks share):
 *   checkpoint_begin        rank 0: a fresh staging directory <run>/iter_%07lld.tmp
 *   (every rank)            its slices of model.safetensors, ema.safetensors and optim.safetensors
 *                           (train/train_parallel.h; checkpoint_write_model writes the first two
 *                           whole from one process)
 *   checkpoint_write_meta   rank 0: meta.json
 *   checkpoint_commit       rank 0: fsync, rename to iter_%07lld, fsync the run directory, DONE,
 *                           then keep only the newest `keep` complete checkpoints. */
void checkpoint_stage_dir(const char *run_dir, int64_t step, char *out, size_t n);
vfm_status checkpoint_begin(const char *run_dir, int64_t step);
vfm_status checkpoint_write_model(const char *stage_dir, const CheckpointState *st, const CheckpointData *d);
/* rank 0 of a parallel job: meta.json alone (the weight and optimizer files come from every rank,
 * train/train_parallel.h); full: the single-rank table (its parameter count is recorded). */
vfm_status checkpoint_write_meta(const char *stage_dir, const CheckpointState *st, const ParamTable *full);
vfm_status checkpoint_commit(const char *run_dir, int64_t step, int keep);
/* All phases in one process (no optimizer state): tests and tools. */
vfm_status checkpoint_save(const char *run_dir, const CheckpointState *st, const CheckpointData *d, int keep);
/* The newest complete checkpoint directory under run_dir; *found = 0 when there is none. */
vfm_status checkpoint_find_latest(const char *run_dir, char *out, size_t n, int *found);
/* Reads meta.json of a checkpoint directory. */
vfm_status checkpoint_read_meta(const char *dir, CheckpointState *st);
/* Loads weights (always) and EMA (when ema is non-NULL; falls back to the weights when the
 * checkpoint has none). Every table entry must be present with its shape. */
vfm_status checkpoint_load_tensors(const char *dir, const CheckpointData *d);
/* Writes buf[t->total] (host f32, laid out by the table) as a safetensors file of named f32 tensors
 * (prefix + entry name); meta: NULL-terminated key, value pairs or NULL. */
vfm_status save_named_tensors(const char *path, const ParamTable *t, const char *prefix, const float *buf,
                              const char *const *meta);
/* Loads a safetensors file of named tensors into a buffer laid out by the table. */
vfm_status load_named_tensors(const char *path, const ParamTable *t, const char *prefix, float *buf);

#endif
