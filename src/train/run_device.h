/* Where a run trains (train.device: auto | cpu | cuda) and the advice an out-of-memory error gets:
 * shared by the trainer and `vfm bench`. */
#ifndef VFM_RUN_DEVICE_H
#define VFM_RUN_DEVICE_H

#include "core/config.h"
#include "core/tensor.h"

/* The device train.device asks for: cpu; cuda (exit 2 naming the key when this build or machine
 * has no GPU); auto = cuda when a GPU is present, else cpu.
 * *why receives a short reason for the choice (for the log line). */
vfm_status run_select_device(const Config *cfg, Device *out, const char **why);
/* The same for a train.device value already read. */
vfm_status run_select_device_named(const char *dev, Device *out, const char **why);

/* When s is VFM_ERR_NOMEM: appends to the current message the config keys that make this run use
 * less memory, with its values — only those that apply to it (the real-data crops without
 * dataset.mock, ZeRO-1 with several data-parallel replicas) and that are not already at what they
 * suggest (recomputation unless full, ZeRO-1 unless on). replicas: data-parallel × context-parallel
 * ranks (0 or 1: one). Returns s unchanged. */
vfm_status run_memory_hint(vfm_status s, const Config *cfg, int replicas);
/* The keys that message names (NULL-terminated; a test checks each exists in the registry). */
extern const char *const RUN_MEMORY_KEYS[];

#endif
