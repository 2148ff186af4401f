/* Chooses the pack source a config asks for. */
#include "data/source.h"

#include <stdlib.h>

vfm_status pack_source_create(PackSource **out, const Config *cfg, int rank, int world) {
    *out = NULL;
    if (cfg_bool(cfg, "dataset.mock")) return mock_source_create(out, cfg, rank, world);
    const char *path = cfg_str(cfg, "dataset.path");
    if (!path[0])
        return vfm_fail_at(VFM_ERR_USAGE, NULL, "dataset.path", "",
                           "no dataset: set dataset.path to a WebDataset directory, or dataset.mock=true (--mock)");
    return webdataset_source_create(out, cfg, rank, world);
}

void pack_source_destroy(PackSource *s) {
    if (s && s->destroy) s->destroy(s);
}
