/* The mock dataset's constructors (mock.c). */
#ifndef VFM_DATA_MOCK_H
#define VFM_DATA_MOCK_H

#include <stdint.h>

#include "core/config.h"
#include "data/loader/pack_source.h"

/* The mock dataset (research/dfm.md §3.4; `dataset.mock: true`): standard-normal latents of the
 * configured shapes and random text embeddings, packed greedily up to the token budget.
 * identity_offset: added to every sample identity (0 for training; see pack_source_create_split). */
vfm_status mock_source_create(PackSource **out, const Config *cfg, int rank, int world);
vfm_status mock_source_create_offset(PackSource **out, const Config *cfg, uint64_t identity_offset, int rank, int world);

#endif
