/* The trainer's step under pipeline parallelism (docs/parallel.md "Pipeline parallelism"): the M
 * packs of the step (every rank of a replica reads the same packs), each padded to the run's fixed
 * pack length and prepared by the objective on every stage (objective_pass_*: the keyed σ, noise,
 * network input and conditioning), then this stage's schedule (pp_schedule_build) run by pp_run
 * with dit_chunk_forward / dit_chunk_backward on pack[mb]; the last stage computes each pack's loss
 * and output gradient after the last chunk's forward. Saved activations come from a free list of
 * DiTSaved slots, as many as the schedule holds in flight. Validation runs the same micro-batches
 * through the forward-only schedule (pp_schedule_forward_only; the last stage takes the losses, no
 * gradient), and validation generation runs the sampler's network forwards chunk by chunk over the
 * stages (train_pipeline_model_forward). Also the fixed pack length of any layout
 * (train.fixed_pack_length: every pack padded, padding masked). */
#ifndef VFM_TRAIN_PIPELINE_H
#define VFM_TRAIN_PIPELINE_H

#include "data/pack/pack.h"
#include "diffusion/objective.h"
#include "model/dit.h"
#include "parallel/comm.h"
#include "parallel/pp_schedule.h"

typedef struct PpMicro {
    Pack pack;             /* a copy of the feed's pack, padded to the fixed length */
    ObjectiveWork work;    /* its objective's memory (kept for the run) */
    ObjectivePass *pass;   /* prepared for the current step */
} PpMicro;

typedef struct TrainPipeline {
    DiT *model;
    const Objective *objective;
    Comm *pp;              /* the PP group (NULL at P = 1) */
    int P, V, M, stage;
    PpSchedule sched;
    PpSchedule fwd_sched;  /* forward only (validation) */
    int forward_only;      /* the run under way has no backward: slots return after each forward */
    PpMicro *micro;        /* [M] */
    DiTSaved **slots;      /* [n_slots] */
    int n_slots, n_free;
    int *free_slots;       /* [n_slots] */
    int *slot_of;          /* [M·V] the slot of (mb, chunk) between its forward and backward */
    double loss_sum;       /* the last stage: the step's Σ pack losses */
    double grad_scale;
} TrainPipeline;

/* P = 1 gives one micro-batch holder for padded single-rank steps (no schedule, no slots). After
 * dit_reserve. VFM_ERR_USAGE naming the pipeline keys and train.global_batch_size when the
 * schedule refuses M. */
vfm_status train_pipeline_init(TrainPipeline *tp, DiT *m, const Objective *o, Comm *pp, int P, int V, int M, int stage);
void train_pipeline_free(TrainPipeline *tp);
/* The checks of the layout keys alone (before any work; exit 2 lines): layers over P·V chunks, the
 * schedule for M micro-batches per replica. */
vfm_status train_pipeline_check(int layers, int P, int V, int64_t M);
/* *dst := a copy of src padded to `rows` token rows (the last sample's padding grows; padding is
 * masked). rows = 0: a plain copy. VFM_ERR_USAGE naming train.fixed_pack_length when the pack is
 * longer or the padding does not keep the pack's padding multiple. */
vfm_status train_pack_fixed(Pack *dst, const Pack *src, int64_t rows);
/* One step's forward and backward over the M prepared micro-batches (tp->micro[k].pass set):
 * gradients added into the model's grads with scale 1/M; *loss_sum: the last stage's Σ pack
 * losses, 0 elsewhere. */
vfm_status train_pipeline_run(TrainPipeline *tp, double *loss_sum);
/* The forward-only schedule over the M prepared micro-batches: no gradient; *loss_sum: the last
 * stage's Σ pack losses, 0 elsewhere (validation). */
vfm_status train_pipeline_eval(TrainPipeline *tp, double *loss_sum);
/* The whole network's forward of one pack under PP (GenerateOptions.forward; ctx a TrainPipeline
 * with P > 1): each stage runs its chunks in global chunk order on the model's own activation slot,
 * receiving the hidden state from the previous stage and sending it on (blocking p2p); the last
 * stage's out[S, out_dim] is broadcast over the PP group, so every stage holds the output.
 * Collective over PP (and the model's TP/CP groups). */
vfm_status train_pipeline_model_forward(void *ctx, DiT *m, const DiTInputs *in, Tensor *out);

#endif
