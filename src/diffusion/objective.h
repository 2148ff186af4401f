/* The training objective, one interface for the trainer, validation and `vfm sample`
 * (`diffusion.objective`, docs/diffusion.md):
 *   edm   Karras et al. / DFM (edm.h): x_t = σ_data·x0 + σ·ε, preconditioned denoiser, x0 loss;
 *   flow  flow matching: x_σ = (1−σ)·x0 + σ·ε (σ = 1 is noise), velocity target ε − x0,
 *         logit-normal σ with an optional (resolution-dependent) shift; net time input 1000·σ;
 *   ddpm  the DiT paper's DDPM: linear β 1e-4…0.02 over 1000 steps, ε-prediction, and with a
 *         2×-channel output the learned-range variance trained by the VB term; time input t.
 * Per sample of a pack (design §3): the time (σ or t), the text-drop coin, the class-drop coin and
 * the noise are pure functions of (rng.seed, stream, step, sample uid, element), so packing,
 * parallel layout and resume do not change them. A dropped prompt is one all-zero text row; a
 * dropped or missing class label is the null class `model.num_classes` (dit_class_row).
 * Where: on the model's device, through the op API. The draws of time and coins are made on the
 * host (a few values per sample) and copied up; the noise is drawn by op_randn_fill on the device
 * (the same bits on CPU and GPU); the pack comes as its tensors on the device (pack_tensors.h) or
 * is copied up by the objective; the network input, F and dF are in the model's activation dtype
 * (bf16 on a GPU), the rest of the objective's math in f32 (ops.h's mixed-precision contract). On
 * the CPU everything is f32 in host memory, bit for bit as before the objectives moved. */
#ifndef VFM_OBJECTIVE_H
#define VFM_OBJECTIVE_H

#include <stdint.h>

#include "data/pack/pack.h"
#include "data/pack/pack_tensors.h"
#include "diffusion/objective_work.h"
#include "model/dit.h"

typedef struct Config Config;

typedef enum { OBJECTIVE_EDM = 0, OBJECTIVE_FLOW = 1, OBJECTIVE_DDPM = 2 } ObjectiveKind;
#define OBJECTIVE_KINDS 3

#define DDPM_NUM_TIMESTEPS 1000

typedef struct Objective {
    ObjectiveKind kind;
    uint64_t seed;
    float sigma_data;        /* EDM: x0 = σ_data·latent; 0.5 */
    double p_mean, p_std;    /* EDM: ln σ ~ N(p_mean, p_std²); flow: logit σ ~ N(p_mean, p_std²) */
    int clamp;               /* diffusion.sigma_min/max set: training σ clamped to [sigma_min, sigma_max] */
    double sigma_min, sigma_max;
    double flow_shift;       /* σ' = sσ/(1 + (s−1)σ); 1 = no shift */
    int64_t flow_shift_base; /* > 0: s = flow_shift·√(tokens / flow_shift_base) per sample (resolution-dependent) */
    double flow_sigma_min;   /* Movie Gen's σ_min: x_σ = (1−σ)·x0 + (σ + σ_min·(1−σ))·ε, target (1−σ_min)·ε − x0 */
    float cfg_dropout;       /* probability a sample's text is dropped */
    int per_pack;            /* DFM parity: one time and one coin per pack (from its first sample) */
} Objective;

/* From the diffusion.*, model.sigma_data (edm) and rng.seed keys. Bad combinations are VFM_ERR_USAGE
 * naming the key. mc: the model, whose cross-attention decides whether diffusion.cfg_dropout applies
 * (NULL: read it anyway). (Classes are the model's: model.num_classes, model.class_dropout_prob.) */
vfm_status objective_from_config(Objective *o, const Config *cfg, const DiTConfig *mc);
const char *objective_name(ObjectiveKind kind);
/* The model's output fits the objective: as many values per token as it takes in, or for ddpm also
 * twice that (learned variance). VFM_ERR_USAGE naming model.out_channels otherwise. */
vfm_status objective_check_model(const Objective *o, const DiTConfig *mc);

/* The random inputs of one step. `t` is the per-sample time: EDM σ, flow σ ∈ (0, 1), DDPM the
 * timestep index 0…999 (as a float); EDM code calls it sigma. */
typedef struct DiffusionDraws {
    union {
        float *t;
        float *sigma;
    };
    int *drop;            /* [B] 1: the sample's text is dropped */
    int32_t *class_row;   /* [B] class-table row the model sees (dit_class_row: the label, or the null class
                           * num_classes after the class CFG coin), NULL for models without classes */
    float *noise;         /* [S, token_dim], zero on padding rows */
} DiffusionDraws;

/* The per-sample draws (exposed for tests). */
float objective_draw_time(const Objective *o, uint32_t step, uint64_t uid, int64_t tokens);
int objective_draw_text_drop(const Objective *o, uint32_t step, uint64_t uid);
/* The class label's own CFG coin (element 1 of the CFG stream), probability model.class_dropout_prob. */
int objective_draw_class_drop(const Objective *o, const DiTConfig *mc, uint32_t step, uint64_t uid);
/* The per-sample draws of a pack at `step`: t, drop, class_row (malloc'd; noise NULL). */
vfm_status objective_draw_times(const Objective *o, const DiTConfig *mc, const Pack *p, uint32_t step,
                                DiffusionDraws *d);
/* All draws of a pack at `step`, the noise on the host (malloc'd; free with diffusion_draws_free). */
vfm_status objective_draw(const Objective *o, const DiTConfig *mc, const Pack *p, uint32_t step, DiffusionDraws *d);
void diffusion_draws_free(DiffusionDraws *d);

/* Standard-normal noise for every real element of a pack, in token layout [S, token_dim] (zero on
 * padding rows): each sample's noise is drawn in its canonical latent layout (C, T, H, W) keyed by
 * its uid, then patchified. */
vfm_status diffusion_pack_noise(float *noise, const Pack *pack, const DiTConfig *mc, uint64_t seed, uint32_t stream,
                                uint32_t step);
/* The same into noise [S, token_dim] f32 on any device (each sample's canonical noise in w's slot
 * OW_CANON): bit for bit the host's values on a GPU. */
vfm_status diffusion_pack_noise_on(Tensor *noise, const Pack *pack, const DiTConfig *mc, uint64_t seed,
                                   uint32_t stream, uint32_t step, ObjectiveWork *w);

typedef struct ObjectiveResult {
    double loss;         /* the pack's loss (mean over its real tokens) */
    int n_samples;
    double *sample_loss; /* [n] each sample's own loss (mean over its tokens), owned by the caller or NULL */
    union {              /* [n] the time per sample, or NULL */
        float *t;
        float *sigma;
    };
    int *dropped;        /* [n] 1 when the sample's text was dropped, or NULL */
    float *F;            /* [S, out_dim] the network output, or NULL */
    /* NULL, or a step state (ops.h, f64 on the model's device): the pack's loss is added to its
     * STEP_LOSS on the device and not read on the host (res->loss is then NaN) when nothing else
     * is asked for on the host (sample_loss and F NULL): the training step's way */
    Tensor *loss_into;
} ObjectiveResult;

/* Loss of one pack with given draws (draws->noise required, host memory); when grad_scale > 0 also
 * adds grad_scale·∂loss/∂θ into model->grads (grad_scale = 1/micro-batches so accumulated
 * gradients average). A GPU model gets the pack and the draws copied up first. */
vfm_status objective_loss_given(DiT *model, const Objective *o, const Pack *pack, const DiffusionDraws *draws,
                                double grad_scale, ObjectiveResult *res);
/* With the keyed draws of training step `step` (the noise drawn on the model's device). pt: the
 * pack's tensors on the model's device (pack_tensors.h; NULL: copied up, or viewed on the CPU,
 * here); work: memory kept between calls (NULL: allocated and freed here). */
vfm_status objective_loss_and_grad_on(DiT *model, const Objective *o, const Pack *pack, const PackTensors *pt,
                                      ObjectiveWork *work, uint32_t step, double grad_scale, ObjectiveResult *res);
/* objective_loss_and_grad_on without pt and work. */
vfm_status objective_loss_and_grad(DiT *model, const Objective *o, const Pack *pack, uint32_t step, double grad_scale,
                                   ObjectiveResult *res);
/* The loss without the backward (validation). */
vfm_status objective_loss(DiT *model, const Objective *o, const Pack *pack, uint32_t step, ObjectiveResult *res);

/* The objective in halves around the model, for a pipeline stage that runs the model's chunks itself
 * (docs/parallel.md "Pipeline parallelism"): objective_pass_begin draws and prepares one pack
 * (σ or t, noise, network input, conditioning: keyed by sample uid, so every stage prepares the
 * same) into `work` (one work per pass alive at once; the pass reads the pack and pt until it
 * ends); the model's inputs are objective_pass_inputs; its last chunk writes objective_pass_output
 * [S, out_dim]; objective_pass_loss computes the loss from it and with grad_scale > 0 the gradient
 * objective_pass_output_grad [S, out_dim] that the last chunk's backward starts from. Prepare +
 * dit_forward + loss + dit_backward is objective_loss_and_grad_on, bit for bit. */
typedef struct ObjectivePass ObjectivePass;
vfm_status objective_pass_begin(DiT *model, const Objective *o, const Pack *pack, const PackTensors *pt,
                                ObjectiveWork *work, uint32_t step, ObjectivePass **pass);
const DiTInputs *objective_pass_inputs(const ObjectivePass *p);
Tensor *objective_pass_output(ObjectivePass *p);
vfm_status objective_pass_loss(ObjectivePass *p, double grad_scale, ObjectiveResult *res);
const Tensor *objective_pass_output_grad(const ObjectivePass *p);
void objective_pass_end(ObjectivePass *p); /* NULL: nothing */

#endif
