/* WebDataset pack source (filled in by the data slice). */
#include "data/source.h"

vfm_status webdataset_source_create(PackSource **out, const Config *cfg, int rank, int world) {
    (void)cfg;
    (void)rank;
    (void)world;
    *out = NULL;
    return vfm_fail(VFM_ERR_UNSUPPORTED, "dataset.path: WebDataset loading is not implemented yet; use dataset.mock=true");
}
