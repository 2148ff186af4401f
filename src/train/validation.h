/* Validation during training (Megatron/DFM semantics): every train.eval_interval steps the loss
 * over train.eval_iters global batches of the validation data, each replica taking its share
 * (eval_iters × micro-batches per replica packs), averaged over the job; the stream restarts at
 * its beginning every time and the draws (σ/t, noise, CFG coins) are keyed by a fixed validation
 * step, so the number is comparable across steps. As DFM does, each rank then generates one
 * sample from the first validation sample's prompt (model.val_generation_num_steps /
 * model.val_generation_guidance and the objective's sampler keys; validation_config_from) into
 * <run>/validation_generation/step=<k>_rank=<r>.png|gif (pixel-space data) or .npy. (Under TP, CP
 * or PP every rank of a replica generates, the model being collective; the trainer gives a run
 * directory only to the rank with tp = cp = pp = 0.)
 * Validation never touches the training state: its own data source, pack and RNG keys, no
 * gradients, no optimizer — weights are bit for bit those of a run without it.
 *
 * The validation data: pack_source_create_split(cfg, "val") — the dataset's val split (Energon's
 * validation order: unshuffled, each sample once per pass), the train split with
 * dataset.use_train_split_for_val (DFM's choice), or the mock set's val samples (other sample
 * identities). A dataset without a val split is a usage error naming the fix, at start. */
#ifndef VFM_VALIDATION_H
#define VFM_VALIDATION_H

#include <stdint.h>

#include "data/media/image_io.h"
#include "data/loader/source.h"
#include "data/synthetic/synthetic.h"
#include "diffusion/generate.h"
#include "diffusion/objective.h"
#include "diffusion/sample_settings.h"
#include "model/dit.h"
#include "parallel/dp.h"
#include "train/train_pipeline.h"

/* The Philox step that keys every validation draw. */
#define VALIDATION_STEP 0xffffff00u

typedef struct Validator {
    int interval;          /* steps between validations; 0 = off */
    int64_t packs;         /* packs per replica per validation */
    PackSource *source;
    char *start;           /* the source's state at its beginning (each validation restarts there) */
    Pack pack;
    GenerateOptions gen;   /* steps, guidance, sampler settings of the validation sample */
    int rank, dp_size;
    char out_dir[1200];    /* <run>/validation_generation, or "" to write no files */
    int has_pixels;
    PixelLatentMap map;
    Comm *ep_comm;         /* expert parallelism: the EP group (validator_set_expert_parallel), or NULL */
} Validator;

/* What validation reads, and only when it will run (train.eval_interval > 0, train.eval_iters > 0
 * and eval_interval <= train.train_iters): train.eval_iters, dataset.use_train_split_for_val,
 * model.val_generation_num_steps, model.val_generation_guidance and the objective's own sampler keys
 * (sample_settings.h). Not sampler.num_steps or sampler.guidance: those are vfm sample's. */
typedef struct ValidationConfig {
    int64_t interval, iters; /* 0: no validation */
    int use_train_split;
    SampleSettings gen;
} ValidationConfig;
vfm_status validation_config_from(ValidationConfig *vc, const Config *cfg, ObjectiveKind kind, int64_t train_iters);

/* Under expert parallelism the ranks of an EP group exchange fixed-size all-to-alls sized by the
 * largest pack each reserved (moe.h), but each rank generates from its own validation sample: the
 * validation sample's forwards first agree on that size over ep_comm (the largest of the group's,
 * reserved again where it grew). NULL: none. */
void validator_set_expert_parallel(Validator *v, Comm *ep_comm);

/* Validation is set up only when it will run (validation_config_from). accum = micro-batches per
 * replica and step. run_dir "" writes no files. */
vfm_status validator_init(Validator *v, const Config *cfg, const Objective *o, int dp_rank, int dp_size, int64_t accum,
                          int rank, const char *run_dir);
void validator_free(Validator *v);
/* 1 when validation runs after `step` steps have completed. */
int validator_due(const Validator *v, int64_t step);

typedef struct ValidationResult {
    double loss;           /* mean over the job's validation packs */
    int64_t packs, samples;
    /* Each kind's mean of its samples' own losses (images: one latent frame; videos: more), and
     * how many; split = 0 under pipeline parallelism, whose last stage returns only the packs' sums. */
    int split;
    double loss_images, loss_videos;
    int64_t images, videos;
    RgbImage picture;      /* this rank's generated picture (first frame, upscaled; empty when not pixel data) */
    char file[256];        /* the file written for it ("" when none) */
} ValidationResult;

/* A collective over the DP group (every rank calls it at the same step). pipe: under pipeline
 * parallelism (P > 1; NULL or P = 1 otherwise) the trainer's pipeline, whose micro-batch holders
 * take the validation packs padded to fixed_len (the run's fixed pack length) in rounds of M
 * through the forward-only schedule; the losses come from the last stage (broadcast over PP) and
 * the sample's network forwards run over the stages (train_pipeline_model_forward). The σ/noise
 * draws are those of P = 1 (keyed by VALIDATION_STEP and the sample), so the loss is the PP1 run's
 * up to the padding's rounding. Collective over PP too. */
vfm_status validator_run(Validator *v, DiT *model, const Objective *o, DataParallel *dp, TrainPipeline *pipe,
                         int64_t fixed_len, int64_t step, ValidationResult *res);
void validation_result_free(ValidationResult *r);

#endif
