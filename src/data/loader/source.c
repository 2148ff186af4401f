/* Chooses the pack source a config asks for: training, or one split for validation. */
#include "data/loader/source.h"

#include <stdlib.h>
#include <string.h>

#include "data/loader/loader.h"
#include "data/loader/mock.h"

vfm_status pack_source_create(PackSource **out, const Config *cfg, int rank, int world) {
    *out = NULL;
    if (cfg_bool(cfg, "dataset.mock")) return mock_source_create(out, cfg, rank, world);
    const char *path = cfg_str(cfg, "dataset.path");
    if (!path[0])
        return vfm_fail_at(VFM_ERR_USAGE, NULL, "dataset.path", "",
                           "no dataset: set dataset.path to a WebDataset directory, or dataset.mock=true (--mock)");
    return webdataset_source_create(out, cfg, rank, world);
}

vfm_status pack_source_create_split(PackSource **out, const Config *cfg, const char *split, int rank, int world) {
    *out = NULL;
    if (!split || !split[0]) return vfm_fail(VFM_ERR_USAGE, "pack_source_create_split: no split named");
    if (!strcmp(split, "val") && cfg_bool(cfg, "dataset.use_train_split_for_val")) split = "train";
    if (cfg_bool(cfg, "dataset.mock")) {
        if (!strcmp(split, "train")) return mock_source_create(out, cfg, rank, world);
        if (!strcmp(split, "val")) return mock_source_create_offset(out, cfg, 1ULL << 62, rank, world);
        if (!strcmp(split, "test")) return mock_source_create_offset(out, cfg, (1ULL << 62) + (1ULL << 61), rank, world);
        return vfm_fail(VFM_ERR_USAGE, "the mock dataset has the splits train, val and test, not '%s'", split);
    }
    const char *path = cfg_str(cfg, "dataset.path");
    if (!path[0])
        return vfm_fail_at(VFM_ERR_USAGE, NULL, "dataset.path", "",
                           "no dataset: set dataset.path to a WebDataset directory, or dataset.mock=true (--mock)");
    return webdataset_source_open(out, cfg, split, 1, rank, world);
}
