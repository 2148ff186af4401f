/* AdamW over the parameter table (decoupled weight decay only on >= 2-D weights), global
 * gradient-norm clipping, and the learning-rate schedule: linear warmup from lr_warmup_init,
 * then cosine, linear or constant decay to min_lr, or WSD (warmup-stable-decay: the peak until the
 * last lr_wsd_decay_iters of the decay, then exponential, linear, cosine or minus-sqrt annealing to
 * min_lr), as Megatron's OptimizerParamScheduler computes it. */
#ifndef VFM_OPTIMIZER_H
#define VFM_OPTIMIZER_H

#include <stdint.h>

#include "model/params.h"

typedef enum { LR_DECAY_COSINE, LR_DECAY_LINEAR, LR_DECAY_CONSTANT, LR_DECAY_WSD } LrDecayStyle;
typedef enum { WSD_EXPONENTIAL, WSD_LINEAR, WSD_COSINE, WSD_MINUS_SQRT } WsdDecayStyle;

typedef struct OptimConfig {
    double lr, min_lr;
    double beta1, beta2, eps;
    double weight_decay;
    double clip_grad;      /* 0 = no clipping */
    int64_t warmup_iters;
    double warmup_init;
    int64_t decay_iters;   /* iterations over which warmup + decay run (train_iters by default) */
    LrDecayStyle decay_style;
    int64_t wsd_decay_iters;  /* WSD: the annealing phase is the last wsd_decay_iters of decay_iters */
    WsdDecayStyle wsd_style;
} OptimConfig;

/* Learning rate used by 0-based iteration `step` (as Megatron: step 0 of a warmup uses
 * lr_warmup_init; the peak is reached at step = warmup_iters). */
double lr_at_step(const OptimConfig *c, int64_t step);

typedef struct Optimizer {
    OptimConfig cfg;
    const ParamTable *table;
    int64_t begin, end;    /* the elements of the flat buffer this optimizer updates */
    float *m, *v;          /* [end - begin] Adam moments, f32, on `device` */
    int64_t step;          /* updates applied so far (bias correction uses step + 1) */
    Device device;         /* where m, v and the params and grads it updates live */
    /* NULL, or the training step's state on `device` (ops.h "the training step's scalars"): then
     * the clip factor, the bias corrections and whether to update at all come from it (grad_scale
     * and step are not used; a skipped step writes nothing), and its STEP_ADAM_T is the count —
     * `step` is brought up to date by whoever reads the state (the trainer, with its counters). */
    const Tensor *gate;
} Optimizer;

vfm_status optimizer_init(Optimizer *o, const OptimConfig *c, const ParamTable *t);
/* An optimizer for elements [begin, end) only (a ZeRO-1 shard); m and v hold just those. */
vfm_status optimizer_init_range(Optimizer *o, const OptimConfig *c, const ParamTable *t, int64_t begin, int64_t end);
/* The same with m and v on `device` (the params and grads handed to optimizer_step live there too). */
vfm_status optimizer_init_on(Optimizer *o, const OptimConfig *c, const ParamTable *t, int64_t begin, int64_t end,
                             Device device);
void optimizer_free(Optimizer *o);
/* A host copy of o (m and v in host memory, the rest the same), for writing checkpoints; free with
 * optimizer_free. */
vfm_status optimizer_host_copy(const Optimizer *o, Optimizer *host);
/* o's moments (and step) from a host optimizer of the same range (reading checkpoints). */
vfm_status optimizer_copy_from_host(Optimizer *o, const Optimizer *host);
/* √(Σ grad²) over the whole buffer (fixed reduction order). */
vfm_status grad_global_norm(const float *grads, int64_t n, double *norm);
/* The same for a buffer on `device`. */
vfm_status grad_global_norm_on(Device device, const float *grads, int64_t n, double *norm);
/* One AdamW update of the optimizer's elements of every trainable entry with learning rate lr;
 * gradients are multiplied by grad_scale first (clipping). params and grads span the whole table.
 * With o->gate, grad_scale and step come from the step state instead. */
vfm_status optimizer_step(Optimizer *o, float *params, const float *grads, double lr, double grad_scale);
/* As optimizer_step with buffers that hold only the optimizer's elements: params[end - begin] and
 * grads[end - begin] start at element `begin` (a ZeRO shard kept on its own, as FSDP keeps its
 * fp32 master and reduced gradients). The same arithmetic, bit for bit. */
vfm_status optimizer_step_range(Optimizer *o, float *params, const float *grads, double lr, double grad_scale);
/* Clip coefficient for a gradient norm: min(1, clip / (norm + 1e-6)), 1 when clipping is off. */
double clip_scale(const OptimConfig *c, double norm);

#endif
