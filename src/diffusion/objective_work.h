/* The memory an objective works in, on the model's device (diffusion/objective.h): grow-only
 * buffers reused from pack to pack (the trainer keeps one ObjectiveWork for the whole run, so a
 * step allocates nothing), and the carving of tensors out of them. On the CPU the buffers are host
 * memory and the tensors the CPU ops read. A zeroed ObjectiveWork is empty and valid. */
#ifndef VFM_OBJECTIVE_WORK_H
#define VFM_OBJECTIVE_WORK_H

#include <stddef.h>

#include "core/tensor.h"
#include "data/pack/pack_tensors.h"

typedef enum {
    OW_MAIN = 0,  /* the objective's own tensors (edm.c, flow.c, ddpm.c) */
    OW_COND,      /* the conditioning (conditioning.c): text, fps, labels, text offsets */
    OW_NOISE,     /* the pack's noise [S, token_dim] f32 */
    OW_CANON,     /* one sample's noise in its canonical latent layout */
    OW_SLOTS
} ObjectiveWorkSlot;

typedef struct ObjectiveWork {
    Device device;
    void *slot[OW_SLOTS];
    size_t bytes[OW_SLOTS];
    PackTensors pack;     /* a host pack copied to the device by the objective itself (CUDA) */
    void *host;           /* host staging of per-sample values */
    size_t host_bytes;
} ObjectiveWork;

/* Slot `slot` of at least `bytes` on dev (grown when smaller; its contents are then lost). */
vfm_status objective_work_slot(ObjectiveWork *w, Device dev, ObjectiveWorkSlot slot, size_t bytes, void **out);
/* Host memory of at least `bytes` (reused by the next call). */
vfm_status objective_work_host(ObjectiveWork *w, size_t bytes, void **out);
/* Waits for the device's queued work (kernels may still read the buffers), then frees everything. */
void objective_work_free(ObjectiveWork *w);

/* Tensors carved one after the other from a slot: a layout function runs twice, first with base
 * NULL (it only adds up the bytes, 256-byte aligned per tensor), then over the slot. */
typedef struct Carver {
    char *base;
    size_t at;
    Device device;
} Carver;
Tensor carve(Carver *c, DType dt, int ndim, const int64_t *shape);
#define CARVE(c, dt, ...) \
    carve((c), (dt), (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__})
/* Runs layout(c, ctx) once to size slot `slot`, reserves it, and runs it again over the slot. */
vfm_status carve_slot(ObjectiveWork *w, Device dev, ObjectiveWorkSlot slot, void (*layout)(Carver *c, void *ctx),
                      void *ctx);

#endif
