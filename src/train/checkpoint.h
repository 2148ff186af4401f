/* Checkpoints (design §3, docs/checkpoints.md): <run>/iter_0000100/ holding meta.json,
 * model.safetensors (named like the PyTorch twin), optim.<rank>.safetensors (Adam moments),
 * ema.safetensors (when EMA is on), and DONE last. Written into a temporary directory, every file
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

/* What one save writes; NULL buffers are skipped. */
typedef struct CheckpointData {
    const ParamTable *table;
    const float *params;     /* [table->total] */
    const float *adam_m, *adam_v;
    const float *ema;
} CheckpointData;

/* Saves <run_dir>/iter_%07lld and keeps the newest `keep` complete checkpoints. */
vfm_status checkpoint_save(const char *run_dir, const CheckpointState *st, const CheckpointData *d, int keep);
/* The newest complete checkpoint directory under run_dir; *found = 0 when there is none. */
vfm_status checkpoint_find_latest(const char *run_dir, char *out, size_t n, int *found);
/* Reads meta.json of a checkpoint directory. */
vfm_status checkpoint_read_meta(const char *dir, CheckpointState *st);
/* Loads weights (always), Adam moments (when adam_m/adam_v are non-NULL) and EMA (when ema is
 * non-NULL; falls back to the weights when the checkpoint has none). Every table entry must be
 * present with its shape. */
vfm_status checkpoint_load_tensors(const char *dir, const CheckpointData *d);
/* Loads a safetensors file of named tensors into a buffer laid out by the table. */
vfm_status load_named_tensors(const char *path, const ParamTable *t, const char *prefix, float *buf);

#endif
