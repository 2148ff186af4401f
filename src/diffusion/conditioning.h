/* The model inputs of a pack that every objective and sampler shares: the text context with the
 * dropped prompts replaced by one all-zero row, fps per sample (30 when unknown), class labels,
 * the token maps and the self/cross attention layouts, on the model's device (the text in its
 * activation dtype). The objective fills in x (the network input) and c_noise (the time input). */
#ifndef VFM_CONDITIONING_H
#define VFM_CONDITIONING_H

#include "data/pack/pack.h"
#include "data/pack/pack_tensors.h"
#include "diffusion/objective_work.h"
#include "model/dit.h"

typedef struct PackConditioning {
    Tensor text;          /* [L, d_text] copy of the pack's text with dropped prompts zeroed (activation dtype) */
    Tensor fps;           /* [B] f32 */
    Tensor labels;        /* [B] i32 class-table rows (when given) */
    Tensor tok2sample, pos, mask; /* views of the pack's tensors: [S] i32, [S, 3] i32, [S] f32 */
    Tensor cu_text_cond;  /* [B+1] i32 text lengths after dropping (a dropped prompt has 1 row) */
    ObjectiveWork *own;   /* the buffers of pack_conditioning_build (NULL with _on: the caller's) */
    DiTInputs in;         /* everything but in.x and in.c_noise */
} PackConditioning;

/* On the host, in f32, for a CPU model or a GPU model that stages host inputs (the samplers).
 * drop [B] (NULL: none dropped); class_row [B] (dit_class_row; NULL: the model takes no class). */
vfm_status pack_conditioning_build(PackConditioning *c, const Pack *p, const int *drop, const int32_t *class_row);
/* On pt's device with the text in dtype `act`, the buffers from w (slot OW_COND); p gives the host
 * side (offsets, samples). */
vfm_status pack_conditioning_build_on(PackConditioning *c, const Pack *p, const PackTensors *pt, DType act,
                                      const int *drop, const int32_t *class_row, ObjectiveWork *w);
void pack_conditioning_free(PackConditioning *c);

#endif
