/* Chooses the PackSource a config asks for (source.c): the mock dataset (mock.h) or WebDataset
 * shards (loader.h). The interface itself is pack_source.h. */
#ifndef VFM_SOURCE_H
#define VFM_SOURCE_H

#include "core/config.h"
#include "data/loader/loader.h"
#include "data/loader/mock.h"
#include "data/loader/pack_source.h"

/* What the data source of a config reads: the mock set's keys (mock.h) or real data's (loader.h),
 * never the other's — a key of the other source that the user set is then named by
 * config_check_unread. */
typedef struct PackSourceConfig {
    int mock;              /* dataset.mock */
    MockConfig mock_cfg;   /* mock */
    LoaderConfig data;     /* real data */
} PackSourceConfig;
/* Reads and checks them (VFM_ERR_USAGE naming the key): dataset.path must name a dataset for real
 * data, dataset.context_embeddings_dim (when set) must equal model.crossattn_emb_size. */
vfm_status pack_source_config_from(PackSourceConfig *sc, const Config *cfg);
/* The training source from read keys. */
vfm_status pack_source_from(PackSource **out, const PackSourceConfig *sc, int rank, int world);

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

#endif
