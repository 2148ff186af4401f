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
                                       "ddp.use_distributed_optimizer",   NULL};

vfm_status run_memory_hint(vfm_status s, const Config *cfg) {
    if (s != VFM_ERR_NOMEM || !cfg) return s;
    char msg[1024], vals[7][64];
    for (int i = 0; RUN_MEMORY_KEYS[i] && i < 7; i++) cfg_value_text(cfg, RUN_MEMORY_KEYS[i], vals[i], sizeof vals[i]);
    snprintf(msg, sizeof msg, "%s", vfm_last_error());
    return vfm_fail(s,
                    "%s. To use less memory: smaller packs (dataset.task_encoder_seq_length=%s tokens per pack, "
                    "dataset.max_frames=%s, dataset.max_text_len=%s), a smaller model (model.num_layers=%s, "
                    "model.hidden_size=%s, model.ffn_hidden_size=%s), or with several GPUs "
                    "ddp.use_distributed_optimizer=true (now %s: shards the Adam moments over the data-parallel ranks)",
                    msg, vals[0], vals[1], vals[2], vals[3], vals[4], vals[5], vals[6]);
}
