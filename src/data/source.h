/* PackSource: where the trainer gets its packs. The mock dataset and the WebDataset loader both
 * implement it, so the trainer takes packs from either unchanged. A source belongs to one
 * replica (data-parallel rank r of R) and yields that replica's packs of the global pack stream:
 * packs r, r+R, r+2R, ... Its state is the position the trainer consumed, saved in checkpoints
 * as JSON and restored exactly. */
#ifndef VFM_SOURCE_H
#define VFM_SOURCE_H

#include <stdint.h>

#include "core/config.h"
#include "data/pack.h"

typedef struct PackSourceStats {
    int64_t packs, samples, tokens_real, tokens_padded, capacity;
    int64_t skipped;           /* samples skipped as broken or too long */
    double wait_seconds;       /* time next() spent waiting for data */
} PackSourceStats;

typedef struct PackSource PackSource;
struct PackSource {
    const char *kind;          /* "mock", "webdataset" */
    int token_dim, text_dim;
    int64_t max_tokens;        /* largest pack (padded rows) the source produces */
    int64_t max_text;          /* largest text rows of a pack */
    int max_samples;           /* most samples in one pack */
    PackSourceStats stats;
    /* What the data is, for checkpoints and `vfm sample` (NULL when unknown): the pixel-space
     * mapping of the dataset as a JSON object, and the id of the caption encoder that made its
     * text embeddings (e.g. "vfm-hashed-words-v1"). Owned by the source. */
    const char *pixel_space_json;
    const char *text_encoder;
    /* Fills `out` (cleared first) with this replica's next pack. */
    vfm_status (*next)(PackSource *s, Pack *out);
    /* The consumed position as JSON (malloc'd) / restores it. */
    vfm_status (*get_state)(PackSource *s, char **json);
    vfm_status (*set_state)(PackSource *s, const char *json);
    void (*destroy)(PackSource *s);
    void *impl;
};

/* Builds the source a config asks for (dataset.mock or dataset.path) for replica `rank` of
 * `world` data-parallel replicas. patch sizes and channel count come from the model keys. */
vfm_status pack_source_create(PackSource **out, const Config *cfg, int rank, int world);
void pack_source_destroy(PackSource *s);

/* The mock dataset (research/dfm.md §3.4; `dataset.mock: true`): standard-normal latents of the
 * configured shapes and random text embeddings, packed greedily up to the token budget. */
vfm_status mock_source_create(PackSource **out, const Config *cfg, int rank, int world);
/* WebDataset shards under dataset.path (data/loader.c). */
vfm_status webdataset_source_create(PackSource **out, const Config *cfg, int rank, int world);

#endif
