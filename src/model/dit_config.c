/* DiTConfig from the model.* config keys, the features of its architecture (arch.h), and the
 * checks that make a configuration buildable. */
#include <stdio.h>
#include <string.h>

#include "core/config.h"
#include "model/arch.h"

const char *dit_variant_name(DiTVariant v) {
    const DiTArch *arch = dit_arch(v);
    return arch ? arch->name : "?";
}

vfm_status dit_config_resolve(DiTConfig *c) {
    const DiTArch *arch = dit_arch(c->variant);
    if (!arch) return vfm_fail(VFM_ERR_USAGE, "model.variant: unknown variant %d", (int)c->variant);
    if (c->hidden <= 0 || c->heads <= 0 || c->layers <= 0)
        return vfm_fail(VFM_ERR_USAGE, "model: hidden_size, num_layers and num_attention_heads must be positive");
    if (c->kv_heads <= 0) c->kv_heads = c->heads;
    if (c->ffn <= 0) c->ffn = 4 * c->hidden;
    memset(&c->f, 0, sizeof c->f);
    arch->features(c);
    const DiTFeatures *f = &c->f;
    if (c->hidden % c->heads != 0)
        return vfm_fail(VFM_ERR_USAGE, "model.hidden_size (%d) must be a multiple of model.num_attention_heads (%d)",
                        c->hidden, c->heads);
    c->head_dim = c->hidden / c->heads;
    if (c->heads % c->kv_heads != 0)
        return vfm_fail(VFM_ERR_USAGE, "model.num_query_groups (%d) must divide model.num_attention_heads (%d)",
                        c->kv_heads, c->heads);
    if (f->fused_qkv && c->kv_heads != c->heads)
        return vfm_fail(VFM_ERR_USAGE, "model.num_query_groups (%d): model.variant=%s has no grouped-query attention "
                        "(use 0)", c->kv_heads, dit_variant_name(c->variant));
    if (f->pos == DIT_POS_SINCOS_3D && c->hidden % 16 != 0)
        return vfm_fail(VFM_ERR_USAGE, "model.hidden_size (%d) must be a multiple of 16 (the 3-D position embedding "
                        "splits it into sin/cos halves of D/4, 3D/8, 3D/8)", c->hidden);
    if (f->pos == DIT_POS_SINCOS_2D && c->hidden % 4 != 0)
        return vfm_fail(VFM_ERR_USAGE, "model.hidden_size (%d) must be a multiple of 4 (the 2-D position embedding "
                        "splits it into sin/cos halves of D/2 each)", c->hidden);
    if (f->fps_embedder && (c->fps_dim > c->hidden || c->fps_dim < 2 || c->fps_dim % 2))
        return vfm_fail(VFM_ERR_USAGE, "model.fps_embedding_dim (%d) must be even and at most model.hidden_size (%d)",
                        c->fps_dim, c->hidden);
    if (!f->adaln_full && c->adaln_lora <= 0)
        return vfm_fail(VFM_ERR_USAGE, "model.adaln_lora_dim (%d) must be positive", c->adaln_lora);
    if (c->num_classes < 0 || c->class_dropout_prob < 0 || c->class_dropout_prob > 1)
        return vfm_fail(VFM_ERR_USAGE, "model.num_classes (%d) must be >= 0 and model.class_dropout_prob (%g) in [0, 1]",
                        c->num_classes, c->class_dropout_prob);
    if (f->pos == DIT_POS_ROPE_3D) VFM_TRY(dit_check_rope(c));
    if (f->cross_attn && c->d_text <= 0)
        return vfm_fail(VFM_ERR_USAGE, "model.crossattn_emb_size (%d) must be positive with cross-attention", c->d_text);
    return VFM_OK;
}

/* What Wan's layout needs (3-D RoPE and its output token order). */
vfm_status dit_check_rope(const DiTConfig *c) {
    if (c->head_dim < 6 || c->head_dim % 2)
        return vfm_fail(VFM_ERR_USAGE, "model.hidden_size / model.num_attention_heads = %d: 3-D RoPE needs an even head "
                        "dimension of at least 6", c->head_dim);
    if (c->patch_temporal != 1)
        return vfm_fail(VFM_ERR_USAGE, "model.patch_temporal (%d) must be 1 for model.variant=%s", c->patch_temporal,
                        dit_variant_name(c->variant));
    if (c->num_classes > 0 || c->learn_sigma)
        return vfm_fail(VFM_ERR_USAGE, "model.num_classes (%d) and model.learn_sigma: model.variant=%s has neither",
                        c->num_classes, dit_variant_name(c->variant));
    if (c->kv_heads != c->heads)
        return vfm_fail(VFM_ERR_USAGE, "model.num_query_groups (%d): model.variant=%s has no grouped-query attention "
                        "(use 0)", c->kv_heads, dit_variant_name(c->variant));
    return VFM_OK;
}

/* "auto", "true", "false" (the registry allows nothing else). */
static int auto_bool(const char *s) { return strcmp(s, "auto") == 0 ? DIT_AUTO : strcmp(s, "true") == 0 ? DIT_ON : DIT_OFF; }

vfm_status dit_config_from(DiTConfig *c, const Config *cfg) {
    memset(c, 0, sizeof *c);
    const char *variant = cfg_str(cfg, "model.variant");
    char names[128], expected[160];
    const DiTArch *arch = dit_arch_named(variant, names, sizeof names);
    if (!arch) {
        snprintf(expected, sizeof expected, "expected %s", names);
        return vfm_fail_at(VFM_ERR_USAGE, NULL, "model.variant", variant, expected);
    }
    c->variant = arch->variant;
    c->hidden = (int)cfg_int(cfg, "model.hidden_size");
    c->layers = (int)cfg_int(cfg, "model.num_layers");
    c->heads = (int)cfg_int(cfg, "model.num_attention_heads");
    c->kv_heads = (int)cfg_int(cfg, "model.num_query_groups");
    c->ffn = (int)cfg_int(cfg, "model.ffn_hidden_size");
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
    c->cross_attention = auto_bool(cfg_str(cfg, "model.cross_attention"));
    c->num_classes = (int)cfg_int(cfg, "model.num_classes");
    c->class_dropout_prob = (float)cfg_float(cfg, "model.class_dropout_prob");
    c->learn_sigma = cfg_bool(cfg, "model.learn_sigma");
    const char *pos = cfg_str(cfg, "model.pos_embedding");
    c->pos_embedding = strcmp(pos, "sincos3d") == 0 ? DIT_POS_SINCOS_3D
                       : strcmp(pos, "sincos2d") == 0 ? DIT_POS_SINCOS_2D : DIT_POS_AUTO;
    return dit_config_resolve(c);
}
