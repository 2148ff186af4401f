/* Internal to src/diffusion: one pack ready for an objective's loss on the model's device — the
 * pack's tensors, the noise, the conditioning and the working memory — and the helpers the three
 * losses share (objective_batch.c). */
#ifndef VFM_OBJECTIVE_INTERNAL_H
#define VFM_OBJECTIVE_INTERNAL_H

#include "diffusion/conditioning.h"
#include "diffusion/objective.h"

typedef struct ObjectiveBatch {
    const Pack *pack;            /* the host side: samples, offsets */
    const PackTensors *pt;       /* the pack's arrays on the model's device */
    const DiffusionDraws *draws; /* host: t, drop, class_row (the noise is `noise`) */
    Tensor noise;                /* [S, token_dim] f32 on the model's device */
    PackConditioning cond;       /* on the model's device, text in its activation dtype */
    ObjectiveWork *work;
    Device device;
    DType act;                   /* the model's activation dtype: net input, F, dF */
    /* set by the prepare half (cond.in.x and cond.in.c_noise point at in_x and in_c_noise) */
    Tensor in_x;                 /* [S, token_dim] the network input */
    Tensor in_c_noise;           /* [B] f32 the network's time input */
    Tensor F, dF;                /* [S, out_dim] the network output and the loss's gradient of it */
} ObjectiveBatch;

/* One objective as the dispatcher (objective.c) sees it: a row of objective_losses, by kind
 * (objective_table.c). Each loss runs in two halves around the model (edm.c, flow.c, ddpm.c), so
 * that a pipeline stage can run the model's chunks in between: prepare computes the network input
 * and sets in_x, in_c_noise, F and dF (tensors in b->work, kept until the work's next prepare);
 * finish reads F and gives the loss into res (and the per-sample losses, F), and with
 * grad_scale > 0 writes grad_scale·∂loss/∂F into dF (the model's backward from dF adds the weight
 * gradients). draw_time gives one sample's training time from its keyed draw, before
 * diffusion.sigma_min/max clamp it (σ; DDPM: the integer timestep). */
typedef struct ObjectiveLoss {
    const char *name; /* diffusion.objective's value */
    double (*draw_time)(const Objective *o, uint32_t step, uint64_t uid, int64_t tokens);
    vfm_status (*prepare)(DiT *model, const Objective *o, ObjectiveBatch *b);
    vfm_status (*finish)(DiT *model, ObjectiveBatch *b, double grad_scale, ObjectiveResult *res);
} ObjectiveLoss;

extern const ObjectiveLoss edm_loss, flow_loss, ddpm_loss;
extern const ObjectiveLoss *const objective_losses[OBJECTIVE_KINDS];

/* dst (a device tensor, f32 or i32) := n host values (the per-sample inputs of a loss). */
vfm_status objective_put(Tensor *dst, const void *host);
/* host[numel] := the values of a small device tensor (f32 or i32); waits for the device. */
vfm_status objective_get(void *host, const Tensor *src);
/* [n] view of the 1-D f32 tensor t from element `at` (several small results in one tensor, fetched
 * with one copy). */
Tensor objective_slice(const Tensor *t, int64_t at, int64_t n);
/* *host = t's values (a small f32 tensor) in host memory: t's own data on the CPU, else a copy in
 * b->work's host buffer (valid until the next use of it); waits for the device. */
vfm_status objective_fetch(ObjectiveBatch *b, const Tensor *t, const float **host);
/* With res->loss_into (and no host output asked for): the first n values of stats (the pack's loss
 * terms) added to it on the device, *done = 1, nothing fetched; else *done = 0. */
vfm_status objective_loss_on_device(const Tensor *stats, int n, int n_samples, ObjectiveResult *res, int *done);
/* res->F (host f32 [S, w]) from the network output F (activation dtype); scratch: an f32 tensor of
 * F's size used when F is bf16. A no-op when res->F is NULL. */
vfm_status objective_output_to_host(ObjectiveResult *res, const Tensor *F, Tensor *scratch);
/* *f32 := an f32 twin of the activation-dtype tensor t: t itself when act is f32 (the CPU), else a
 * tensor carved next (for the layouts of edm.c, flow.c, ddpm.c). */
Tensor objective_carve_f32_twin(Carver *k, const Tensor *t);
/* dst := src converted, skipped when they are one tensor (an f32 twin). */
vfm_status objective_convert(Tensor *dst, const Tensor *src);

#endif
