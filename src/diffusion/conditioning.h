/* The model inputs of a pack that every objective and sampler shares: the text context with the
 * dropped prompts replaced by one all-zero row, fps per sample (30 when unknown), class labels,
 * the token maps and the self/cross attention layouts. The objective fills in x (the network
 * input) and c_noise (the time input). */
#ifndef VFM_CONDITIONING_H
#define VFM_CONDITIONING_H

#include "data/pack.h"
#include "model/dit.h"

typedef struct PackConditioning {
    Tensor text;          /* [L, d_text] copy of the pack's text with dropped prompts zeroed */
    Tensor fps;           /* [B] */
    Tensor labels;        /* [B] i32 class-table rows (when given) */
    Tensor tok2sample, pos, mask; /* views of the pack: [S] i32, [S, 3] i32, [S] */
    int32_t *cu_text_cond;/* [B+1] text lengths after dropping (a dropped prompt has 1 row) */
    float *buf;
    DiTInputs in;         /* everything but in.x and in.c_noise */
} PackConditioning;

/* drop [B] (NULL: none dropped); class_row [B] (dit_class_row; NULL: the model takes no class). */
vfm_status pack_conditioning_build(PackConditioning *c, const Pack *p, const int *drop, const int32_t *class_row);
void pack_conditioning_free(PackConditioning *c);

#endif
