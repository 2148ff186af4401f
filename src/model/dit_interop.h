/* Weights in and out of the DiT reference's world (facebookresearch/DiT models.py, docs/models.md):
 * the adaln-zero variant's table already uses the reference's names and layouts, so a state dict
 * moves without renaming; this adds what the reference has and vfm does not keep: the fixed
 * `pos_embed` buffer for one input size (export), and a configuration read from a state dict's
 * shapes (import). A state dict arrives through a WeightSource, so safetensors files and, later,
 * torch.save files share the same import. */
#ifndef VFM_DIT_INTEROP_H
#define VFM_DIT_INTEROP_H

#include "model/dit.h"

/* Named tensors to import: count, name and shape of tensor i, and a reader into f32. */
typedef struct WeightSource {
    int count;
    const char *what;  /* the file, for messages */
    void *ctx;
    const char *(*name)(void *ctx, int i);
    int (*shape)(void *ctx, int i, int64_t *shape); /* returns ndim; shape[VFM_MAX_DIMS] */
    vfm_status (*read_f32)(void *ctx, int i, float *out, int64_t numel);
} WeightSource;

/* The reference's pos_embed for an input of grid x grid tokens: out[grid·grid, D] (rows h·grid + w),
 * computed with op_pos_embed_2d_add (CPU, f32). */
vfm_status dit_reference_pos_embed(const DiTConfig *c, int grid, float *out);

/* "key=value" settings (at most 16, each < 96 chars) that describe an adaln-zero state dict: width,
 * depth, channels, patch, MLP width, classes (the table's rows less the null row: the reference's
 * class_dropout_prob > 0), learned sigma, cross-attention and text width. The head count is not in
 * the shapes: the caller supplies it. */
vfm_status dit_reference_settings(const WeightSource *src, char settings[16][96], int *n);

/* Fills m->params from the source: every table entry must be there with its shape; every source
 * tensor must be a table entry, except `pos_embed` (the fixed buffer, recomputed by vfm), which is
 * skipped. *skipped (optional) counts what was skipped. */
vfm_status dit_load_weights(DiT *m, const WeightSource *src, int *skipped);

#endif
