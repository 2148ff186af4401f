/* What a training run holds, by part, read from the buffers it allocated (the figures `vfm plan`'s
 * memory model is checked against: tests/mpi/plan_memory.sh). */
#ifndef VFM_TRAIN_MEMORY_H
#define VFM_TRAIN_MEMORY_H

#include <stdint.h>

#include "model/dit.h"
#include "optim/optimizer.h"
#include "parallel/fsdp.h"

typedef struct TrainMemory {
    int64_t params;      /* the weights the forward reads: the model's fp32 buffer (and its bf16 copy on the
                          * GPU), or FSDP's: ZeRO-2 every parameter, ZeRO-3 its pieces and the whole units */
    int64_t grads;       /* the model's gradient buffer, or FSDP's reduced pieces and flat shard */
    int64_t optimizer;   /* Adam m and v (this rank's range), and ZeRO-3's fp32 master shard */
    int64_t ema;         /* the EMA copy (0 without ema.enabled) */
    int64_t activations; /* the activation arenas' high-water mark (dit_activation_peak and the pipeline's slots) */
} TrainMemory;

/* m: the model; f: its FSDP state or NULL; o: the optimizer; ema_elems: f32 elements of the EMA copy;
 * slots_peak: the pipeline slots' high-water marks added up (0 without PP). */
void train_memory_held(const DiT *m, const Fsdp *f, const Optimizer *o, int64_t ema_elems, size_t slots_peak,
                       TrainMemory *out);

#endif
