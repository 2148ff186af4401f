/* PackSource: where the trainer gets its packs. The mock dataset and the WebDataset loader both
 * implement it, so the trainer takes packs from either unchanged. A source belongs to one
 * replica (data-parallel rank r of R) and yields that replica's packs of the global pack stream:
 * packs r, r+R, r+2R, ... Its state is the position the trainer consumed, saved in checkpoints
 * as JSON and restored exactly. */
#ifndef VFM_SOURCE_H
#define VFM_SOURCE_H

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

/* Builds the training source a config asks for (dataset.mock or dataset.path, split
 * dataset.split) for replica `rank` of `world` data-parallel replicas. patch sizes and channel
 * count come from the model keys. */
vfm_status pack_source_create(PackSource **out, const Config *cfg, int rank, int world);

/* The source of one split for validation (or testing): `split` is "train", "val" or "test" (any
 * split name the dataset defines). It yields what Energon's validation loader yields: the split's
 * samples in index order, unshuffled; a metadataset's datasets one after another (a blend is not
 * drawn, Energon concatenates for validation), each once; packed by first-fit-decreasing over
 * dataset.packing_buffer_size samples as in training. The stream is endless (each epoch the same
 * packs again) and replica r of R takes packs r, r+R, ... of it; one pass is `epoch_packs` global
 * packs. With dataset.use_train_split_for_val=true, "val" reads the train split.
 * dataset.path: a dataset without .nv-meta/split.yaml has only a train split: asking it for
 * "val" is VFM_ERR_USAGE with a line saying how to add one (the caller may warn and go on).
 * dataset.mock: "train" is the training stream itself; "val" and "test" are the same generator
 * with sample identities offset by 2^62 ("val") and 2^62 + 2^61 ("test"), so their latents, texts
 * and noise never coincide with training samples; any other name is VFM_ERR_USAGE. */
vfm_status pack_source_create_split(PackSource **out, const Config *cfg, const char *split, int rank, int world);
void pack_source_destroy(PackSource *s);
/* Asks the source to build its packs in page-locked memory from now on (its reader threads read it). */
void pack_source_pin(PackSource *s, int on);
/* What a source reads: the current pin_packs (safe from any thread). */
int pack_source_pinned(const PackSource *s);

/* The mock dataset (research/dfm.md §3.4; `dataset.mock: true`): standard-normal latents of the
 * configured shapes and random text embeddings, packed greedily up to the token budget.
 * identity_offset: added to every sample identity (0 for training; see pack_source_create_split). */
vfm_status mock_source_create(PackSource **out, const Config *cfg, int rank, int world);
vfm_status mock_source_create_offset(PackSource **out, const Config *cfg, uint64_t identity_offset, int rank, int world);
/* WebDataset shards (or a metadataset) at dataset.path (data/loader/loader.c): training on dataset.split. */
vfm_status webdataset_source_create(PackSource **out, const Config *cfg, int rank, int world);
/* The same for `split`; validation != 0: unshuffled and unblended (see pack_source_create_split). */
vfm_status webdataset_source_open(PackSource **out, const Config *cfg, const char *split, int validation, int rank,
                                  int world);

#endif
