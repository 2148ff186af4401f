/* PackSource: where the trainer gets its packs (the interface; source.h chooses one for a
 * config). The mock dataset and the WebDataset loader both implement it, so the trainer takes
 * packs from either unchanged. A source belongs to one replica (data-parallel rank r of R) and
 * yields that replica's packs of the global pack stream: packs r, r+R, r+2R, ... Its state is the
 * position the trainer consumed, saved in checkpoints as JSON and restored exactly. */
#ifndef VFM_DATA_PACK_SOURCE_H
#define VFM_DATA_PACK_SOURCE_H

#include <stdint.h>

#include "core/config.h"
#include "data/pack/pack.h"

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
    int64_t epoch_packs;       /* global packs (all replicas together) in one pass over the data (epoch 0 of
                                * the plan; a blend: one chunk); 0 when the data is endless fresh samples */
    PackSourceStats stats;
    /* What the data is, for checkpoints and `vfm sample` (NULL when unknown): the pixel-space
     * mapping of the dataset as a JSON object, and the id of the caption encoder that made its
     * text embeddings (e.g. "vfm-hashed-words-v1"). Owned by the source. */
    const char *pixel_space_json;
    const char *text_encoder;
    /* 1: build packs in page-locked host memory (pack_set_pinned), set by pack_source_pin when the
     * run is on a GPU; packs built before it was set stay in ordinary memory. */
    int pin_packs;
    /* Fills `out` (cleared first) with this replica's next pack. */
    vfm_status (*next)(PackSource *s, Pack *out);
    /* The consumed position as JSON (malloc'd) / restores it. */
    vfm_status (*get_state)(PackSource *s, char **json);
    vfm_status (*set_state)(PackSource *s, const char *json);
    void (*destroy)(PackSource *s);
    void *impl;
};

void pack_source_destroy(PackSource *s);
/* Asks the source to build its packs in page-locked memory from now on (its reader threads read it). */
void pack_source_pin(PackSource *s, int on);
/* What a source reads: the current pin_packs (safe from any thread). */
int pack_source_pinned(const PackSource *s);

#endif
