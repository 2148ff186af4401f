/* The run's config against the checkpoint's (see resume_config.h). */
#include "train/resume_config.h"

#include <stdlib.h>
#include <string.h>

#include "core/bytebuf.h"
#include "core/log.h"

vfm_status resume_config_check(const Config *run, const char *saved_yaml, const char *dir, int speak) {
    if (!saved_yaml || !saved_yaml[0]) return VFM_OK;
    Config *saved;
    LogLevel level = log_get_level();
    log_set_level(LOG_ERROR); /* keys the checkpoint's vfm wrote that this one warns about */
    vfm_status s = config_from_yaml_string(&saved, saved_yaml, "the checkpoint's config");
    log_set_level(level);
    if (s != VFM_OK) return vfm_fail(s, "%s: meta.json: %s", dir, vfm_last_error());
    ByteBuf refused = {0};
    int n_refused = 0;
    for (int i = 0; i < config_registry_count(); i++) {
        CfgKeyInfo k;
        config_registry_key(i, &k);
        /* a key this run does not use (another variant's, the mock set's under real data) cannot make
         * it another run: only what its set-up read is compared */
        if (k.resume == CFG_RESUME_FREE || k.unused || !cfg_was_read(run, k.name)) continue;
        char was[256], now[256];
        cfg_value_text(saved, k.name, was, sizeof was);
        cfg_value_text(run, k.name, now, sizeof now);
        if (strcmp(was, now) == 0) continue; /* the YAML text of a value reads back to it exactly */
        if (k.resume == CFG_RESUME_REFUSE) {
            bytebuf_printf(&refused, "%s%s (checkpoint %s, this run %s)", n_refused ? "; " : "", k.name, was, now);
            n_refused++;
        } else if (speak) {
            log_info("resume: %s is %s in this run, %s in the checkpoint", k.name, now, was);
        }
    }
    config_free(saved);
    if (!n_refused) return VFM_OK;
    s = vfm_fail(VFM_ERR_USAGE, "%s: this run's config makes another model or objective than the checkpoint's: %s. "
                 "Resume with the checkpoint's values (its config is in meta.json), or start a new run from its "
                 "weights with checkpoint.load=%s checkpoint.finetune=true", dir, bytebuf_str(&refused), dir);
    free(refused.data);
    return s;
}
