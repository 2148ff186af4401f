/* Chooses the pack source a config asks for: training, or one split for validation. */
#include "data/loader/source.h"

#include <stdlib.h>
#include <string.h>

#include "core/log.h"

vfm_status pack_source_config_from(PackSourceConfig *sc, const Config *cfg) {
    memset(sc, 0, sizeof *sc);
    sc->mock = cfg_bool(cfg, "dataset.mock");
    if (sc->mock) {
        const char *split = cfg_str(cfg, "dataset.split");
        if (strcmp(split, "train") != 0)
            log_warn("config: dataset.split=%s: the mock dataset trains on its train stream (dataset.split selects the "
                     "shards of a WebDataset)", split);
        VFM_TRY(mock_config_from(&sc->mock_cfg, cfg));
    } else {
        VFM_TRY(loader_config_from(&sc->data, cfg));
        if (!sc->data.path[0])
            return vfm_fail_at(VFM_ERR_USAGE, NULL, "dataset.path", "",
                               "no dataset: set dataset.path to a WebDataset directory, or dataset.mock=true (--mock)");
    }
    /* DFM's key for the text width: the model's (the mock set makes text that wide; real data is
     * checked against it when read) */
    int text_dim = sc->mock ? sc->mock_cfg.text_dim : sc->data.ec.text_dim;
    int64_t dim = cfg_int(cfg, "dataset.context_embeddings_dim");
    if (cfg_user_set(cfg, "dataset.context_embeddings_dim") && dim != text_dim)
        return vfm_fail(VFM_ERR_USAGE, "dataset.context_embeddings_dim (%lld) must equal model.crossattn_emb_size (%d)",
                        (long long)dim, text_dim);
    return VFM_OK;
}

vfm_status pack_source_from(PackSource **out, const PackSourceConfig *sc, int rank, int world) {
    *out = NULL;
    if (sc->mock) return mock_source_from(out, &sc->mock_cfg, 0, rank, world);
    return webdataset_source_from(out, &sc->data, sc->data.split, 0, rank, world);
}

vfm_status pack_source_create(PackSource **out, const Config *cfg, int rank, int world) {
    *out = NULL;
    PackSourceConfig sc;
    VFM_TRY(pack_source_config_from(&sc, cfg));
    return pack_source_from(out, &sc, rank, world);
}

vfm_status pack_source_create_split(PackSource **out, const Config *cfg, const char *split, int rank, int world) {
    *out = NULL;
    if (!split || !split[0]) return vfm_fail(VFM_ERR_USAGE, "pack_source_create_split: no split named");
    if (!strcmp(split, "val") && cfg_bool(cfg, "dataset.use_train_split_for_val")) split = "train";
    PackSourceConfig sc;
    VFM_TRY(pack_source_config_from(&sc, cfg));
    if (sc.mock) {
        if (!strcmp(split, "train")) return mock_source_from(out, &sc.mock_cfg, 0, rank, world);
        if (!strcmp(split, "val")) return mock_source_from(out, &sc.mock_cfg, 1ULL << 62, rank, world);
        if (!strcmp(split, "test")) return mock_source_from(out, &sc.mock_cfg, (1ULL << 62) + (1ULL << 61), rank, world);
        return vfm_fail(VFM_ERR_USAGE, "the mock dataset has the splits train, val and test, not '%s'", split);
    }
    return webdataset_source_from(out, &sc.data, split, 1, rank, world);
}
