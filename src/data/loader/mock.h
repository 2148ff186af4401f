/* The mock dataset's constructors (mock.c). */
#ifndef VFM_DATA_MOCK_H
#define VFM_DATA_MOCK_H

#include <stdint.h>

#include "core/config.h"
#include "data/loader/pack_source.h"

typedef struct MockShape {
    int c, t, h, w;
} MockShape;

#define MOCK_MAX_SHAPES 64

/* What the mock dataset reads: model.in_channels, model.patch_*, model.crossattn_emb_size (the text
 * width), dataset.context_seq_len, number_packed_samples, task_encoder_seq_length, mock_samples,
 * mock_shapes (or, without it, F_latents, H_latents, W_latents), pad_multiple (with TP·CP),
 * context_embeddings_dim (must equal the text width) and rng.seed — nothing of real data's. */
typedef struct MockConfig {
    int channels, pt, ph, pw, text_dim, text_len, max_per_pack, pad_multiple;
    int64_t budget, n_fixed;
    uint64_t seed;
    int n_shapes;
    MockShape shapes[MOCK_MAX_SHAPES];
} MockConfig;
/* Reads and checks the keys (shapes parse, divide by the patch, fit the budget); VFM_ERR_USAGE
 * naming the key otherwise. */
vfm_status mock_config_from(MockConfig *mc, const Config *cfg);

/* The mock dataset (research/dfm.md §3.4; `dataset.mock: true`): standard-normal latents of the
 * configured shapes and random text embeddings, packed greedily up to the token budget.
 * identity_offset: added to every sample identity (0 for training; see pack_source_create_split). */
vfm_status mock_source_from(PackSource **out, const MockConfig *mc, uint64_t identity_offset, int rank, int world);
vfm_status mock_source_create(PackSource **out, const Config *cfg, int rank, int world);
vfm_status mock_source_create_offset(PackSource **out, const Config *cfg, uint64_t identity_offset, int rank, int world);

#endif
