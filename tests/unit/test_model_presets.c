/* Preset sizes against the parameter counts of DFM's models (research/dfm.md §1.7: DiT-S 46.5 M,
 * DiT-XL 671.8 M trainable) and the parameter table's bookkeeping. */
#include <stdio.h>
#include <string.h>

#include "core/config.h"
#include "model/dit.h"
#include "test.h"

static int64_t preset_params(const char *preset) {
    char ov[64];
    snprintf(ov, sizeof ov, "model.preset=%s", preset);
    const char *o[1] = {ov};
    Config *cfg;
    if (config_load(&cfg, NULL, o, 1) != VFM_OK) return -1;
    DiTConfig c;
    DiT m;
    if (dit_config_from(&c, cfg) != VFM_OK) return -1;
    dit_describe(&m, &c);
    int64_t n = m.table.total;
    /* offsets are contiguous and names unique */
    int64_t off = 0;
    for (int i = 0; i < m.table.count; i++) {
        if (m.table.entries[i].offset != off) return -2;
        off += m.table.entries[i].numel;
        if (param_table_find(&m.table, m.table.entries[i].name) != i) return -3;
    }
    dit_destroy(&m);
    config_free(cfg);
    return n;
}

TEST(model_presets_match_dfm_parameter_counts) {
    /* per layer 14D² + 2·1024·D + 2560·D + 4·hd (dfm.md), plus the embedders and the final linear */
    CHECK_MSG(preset_params("dit-s") == 46486208, "dit-s: %lld", (long long)preset_params("dit-s"));
    CHECK_MSG(preset_params("dit-xl") == 671805248, "dit-xl: %lld", (long long)preset_params("dit-xl"));
    CHECK(preset_params("dit-b") > 140000000 && preset_params("dit-b") < 146000000);
    CHECK(preset_params("tiny") > 0);
}
