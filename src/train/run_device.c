/* train.device resolution and the out-of-memory advice (run_device.h). */
#include "run_device.h"

#include <stdio.h>
#include <string.h>

vfm_status run_select_device(const Config *cfg, Device *out, const char **why) {
    return run_select_device_named(cfg_str(cfg, "train.device"), out, why);
}

vfm_status run_select_device_named(const char *dev, Device *out, const char **why) {
    int gpus = device_cuda_count();
    *out = DEV_CPU;
    if (strcmp(dev, "cpu") == 0) {
        *why = "train.device=cpu";
        return VFM_OK;
    }
    if (strcmp(dev, "cuda") == 0) {
        if (gpus == 0)
            return vfm_fail_at(VFM_ERR_USAGE, NULL, "train.device", dev,
                               "no CUDA GPU here (or this vfm was built without nvcc: see vfm version); use auto or cpu");
        *out = DEV_CUDA;
        *why = "train.device=cuda";
        return VFM_OK;
    }
    if (gpus > 0) {
        *out = DEV_CUDA;
        *why = "train.device=auto found a GPU";
    } else {
        *why = "train.device=auto found no GPU";
    }
    return VFM_OK;
}

const char *const RUN_MEMORY_KEYS[] = {"dataset.task_encoder_seq_length", "dataset.max_frames",
                                       "dataset.max_text_len",            "model.num_layers",
                                       "model.hidden_size",               "model.ffn_hidden_size",
                                       "model.recompute_granularity",     "ddp.use_distributed_optimizer",
                                       NULL};

vfm_status run_memory_hint(vfm_status s, const Config *cfg, int replicas) {
    if (s != VFM_ERR_NOMEM || !cfg) return s;
    char msg[1500], v[8][64];
    for (int i = 0; RUN_MEMORY_KEYS[i]; i++) cfg_value_text(cfg, RUN_MEMORY_KEYS[i], v[i], sizeof v[i]);
    snprintf(msg, sizeof msg, "%s", vfm_last_error());
    /* only what applies to this run and is not already so (docs/training.md "Out of memory") */
    char cv[8];
    cfg_value_text(cfg, "dataset.mock", cv, sizeof cv);
    int real_data = strcmp(cv, "true") != 0;
    char packs[256], recompute[160] = "", zero[200] = "";
    if (real_data)
        snprintf(packs, sizeof packs, "dataset.task_encoder_seq_length=%s tokens per pack, dataset.max_frames=%s, "
                 "dataset.max_text_len=%s", v[0], v[1], v[2]);
    else
        snprintf(packs, sizeof packs, "dataset.task_encoder_seq_length=%s tokens per pack", v[0]);
    if (strcmp(v[6], "full") != 0)
        snprintf(recompute, sizeof recompute, ", activation recomputation (now %s: model.recompute_granularity=full "
                 "model.recompute_method=uniform model.recompute_num_layers=1)", v[6][0] && strcmp(v[6], "\"\"") ? v[6] : "none");
    if (replicas > 1 && strcmp(v[7], "true") != 0)
        snprintf(zero, sizeof zero, ", or ddp.use_distributed_optimizer=true (now %s: shards the Adam moments over the "
                 "%d data-parallel ranks)", v[7], replicas);
    return vfm_fail(s, "%s. To use less memory: smaller packs (%s), a smaller model (model.num_layers=%s, "
                    "model.hidden_size=%s, model.ffn_hidden_size=%s)%s%s", msg, packs, v[3], v[4], v[5], recompute, zero);
}
