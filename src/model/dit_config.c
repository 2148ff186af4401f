/* DiTConfig from the model.* config keys, with the checks that make a config buildable. */
#include <string.h>

#include "core/config.h"
#include "model/dit.h"

vfm_status dit_config_from(DiTConfig *c, const Config *cfg) {
    memset(c, 0, sizeof *c);
    const char *variant = cfg_str(cfg, "model.variant");
    if (strcmp(variant, "dfm") != 0)
        return vfm_fail_at(VFM_ERR_UNSUPPORTED, NULL, "model.variant", variant, "this version builds the 'dfm' DiT only");
    c->hidden = (int)cfg_int(cfg, "model.hidden_size");
    c->layers = (int)cfg_int(cfg, "model.num_layers");
    c->heads = (int)cfg_int(cfg, "model.num_attention_heads");
    int groups = (int)cfg_int(cfg, "model.num_query_groups");
    c->kv_heads = groups > 0 ? groups : c->heads;
    int ffn = (int)cfg_int(cfg, "model.ffn_hidden_size");
    c->ffn = ffn > 0 ? ffn : 4 * c->hidden;
    c->in_channels = (int)cfg_int(cfg, "model.in_channels");
    c->out_channels = (int)cfg_int(cfg, "model.out_channels");
    c->patch_spatial = (int)cfg_int(cfg, "model.patch_spatial");
    c->patch_temporal = (int)cfg_int(cfg, "model.patch_temporal");
    c->d_text = (int)cfg_int(cfg, "model.crossattn_emb_size");
    c->adaln_lora = (int)cfg_int(cfg, "model.adaln_lora_dim");
    c->fps_dim = (int)cfg_int(cfg, "model.fps_embedding_dim");
    c->qk_norm = cfg_bool(cfg, "model.qk_layernorm");
    c->ln_eps = (float)cfg_float(cfg, "model.layernorm_epsilon");
    c->init_std = (float)cfg_float(cfg, "model.init_method_std");
    if (c->hidden % c->heads != 0)
        return vfm_fail(VFM_ERR_USAGE, "model.hidden_size (%d) must be a multiple of model.num_attention_heads (%d)",
                        c->hidden, c->heads);
    c->head_dim = c->hidden / c->heads;
    if (c->heads % c->kv_heads != 0)
        return vfm_fail(VFM_ERR_USAGE, "model.num_query_groups (%d) must divide model.num_attention_heads (%d)",
                        c->kv_heads, c->heads);
    if (c->hidden % 16 != 0)
        return vfm_fail(VFM_ERR_USAGE, "model.hidden_size (%d) must be a multiple of 16 (the 3-D position embedding "
                        "splits it into sin/cos halves of D/4, 3D/8, 3D/8)", c->hidden);
    if (c->fps_dim > c->hidden || c->fps_dim % 2)
        return vfm_fail(VFM_ERR_USAGE, "model.fps_embedding_dim (%d) must be even and at most model.hidden_size (%d)",
                        c->fps_dim, c->hidden);
    return VFM_OK;
}
