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
    if (!f->adaln_full && !f->mod_table && c->adaln_lora <= 0) /* dfm: adaLN-LoRA */
        return vfm_fail(VFM_ERR_USAGE, "model.adaln_lora_dim (%d) must be positive", c->adaln_lora);
    if (c->num_classes < 0 || c->class_dropout_prob < 0 || c->class_dropout_prob > 1)
        return vfm_fail(VFM_ERR_USAGE, "model.num_classes (%d) must be >= 0 and model.class_dropout_prob (%g) in [0, 1]",
                        c->num_classes, c->class_dropout_prob);
    if (f->pos == DIT_POS_ROPE_3D) VFM_TRY(dit_check_rope(c));
    if (c->moe.experts > 0) {
        MoeSpec *e = &c->moe;
        if (e->ffn <= 0) e->ffn = c->ffn;
        if (e->routing == MOE_EXPERT_CHOICE) e->topk = 1;
        if (e->topk < 1 || e->topk > e->experts)
            return vfm_fail(VFM_ERR_USAGE, "model.moe_router_topk (%d) must be in [1, model.num_moe_experts = %d]",
                            e->topk, e->experts);
        if (e->capacity_factor < 0)
            return vfm_fail(VFM_ERR_USAGE, "model.moe_expert_capacity_factor (%g) must be >= 0 (0: no token dropped)",
                            e->capacity_factor);
    }
    if (f->cross_attn && c->d_text <= 0)
        return vfm_fail(VFM_ERR_USAGE, "model.crossattn_emb_size (%d) must be positive with cross-attention", c->d_text);
    static const int DEFAULT_ROWS[3] = {34, 40, 40}; /* DFM's max_frames 34 / pt 1, max_img 80 / p 2 */
    for (int k = 0; k < 3; k++) {
        if (c->pos_rows[k] == 0) c->pos_rows[k] = DEFAULT_ROWS[k];
        if (f->pos == DIT_POS_LEARNED_3D && c->pos_rows[k] < 1)
            return vfm_fail(VFM_ERR_USAGE, "model.max_frames, model.max_img_h, model.max_img_w must be at least one "
                            "patch (the learned position's %s table has %d rows)", k == 0 ? "t" : k == 1 ? "h" : "w",
                            c->pos_rows[k]);
    }
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
    if (c->cross_attention == DIT_OFF)
        return vfm_fail(VFM_ERR_USAGE, "model.cross_attention=false: model.variant=%s always attends to the text "
                        "(use auto)", dit_variant_name(c->variant));
    if (c->pos_embedding != DIT_POS_AUTO)
        return vfm_fail(VFM_ERR_USAGE, "model.pos_embedding: model.variant=%s places tokens by 3-D RoPE (use auto)",
                        dit_variant_name(c->variant));
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
        return vfm_fail_at(VFM_ERR_USAGE, NULL, "model.variant", variant, "%s", expected);
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
    c->cross_attention = auto_bool(cfg_str(cfg, "model.cross_attention"));
    c->num_classes = (int)cfg_int(cfg, "model.num_classes");
    c->learn_sigma = cfg_bool(cfg, "model.learn_sigma");
    const char *pos = cfg_str(cfg, "model.pos_embedding");
    c->pos_embedding = strcmp(pos, "sincos3d") == 0 ? DIT_POS_SINCOS_3D
                       : strcmp(pos, "sincos2d") == 0 ? DIT_POS_SINCOS_2D : DIT_POS_AUTO;
    /* The keys only some variants have are read only for them, so a key the model does not use is
     * never read (docs/config.md "Keys a run does not use"); the fields stay 0. */
    int dit = c->variant == DIT_VARIANT_ADALN_ZERO, wan = c->variant == DIT_VARIANT_WAN;
    int cross = c->cross_attention == DIT_AUTO ? !dit : c->cross_attention == DIT_ON;
    if (c->variant == DIT_VARIANT_DFM) c->adaln_lora = (int)cfg_int(cfg, "model.adaln_lora_dim");
    if (!dit && !wan) c->fps_dim = (int)cfg_int(cfg, "model.fps_embedding_dim"); /* wan: no fps embedding */
    if (!dit && !wan) /* adaln-zero: DiT's own init; wan: diffusers' */
        c->init_std = (float)cfg_float(cfg, "model.init_method_std");
    /* adaln-zero: cross-attention only; moviegen: none; wan: always, over all heads */
    if (c->variant != DIT_VARIANT_MOVIEGEN && !wan && (!dit || cross))
        c->qk_norm = cfg_bool(cfg, "model.qk_layernorm");
    if (!dit || (cross && c->qk_norm)) c->ln_eps = (float)cfg_float(cfg, "model.layernorm_epsilon");
    if (c->num_classes > 0) c->class_dropout_prob = (float)cfg_float(cfg, "model.class_dropout_prob");
    /* the learned position's tables (moviegen only), in patches as NeMo's FactorizedLearnable3DEmbedding */
    if (c->variant == DIT_VARIANT_MOVIEGEN && c->pos_embedding == DIT_POS_AUTO) {
        int pt = c->patch_temporal > 0 ? c->patch_temporal : 1, p = c->patch_spatial > 0 ? c->patch_spatial : 1;
        c->pos_rows[0] = (int)cfg_int(cfg, "model.max_frames") / pt;
        c->pos_rows[1] = (int)cfg_int(cfg, "model.max_img_h") / p;
        c->pos_rows[2] = (int)cfg_int(cfg, "model.max_img_w") / p;
        for (int k = 0; k < 3; k++)
            if (c->pos_rows[k] == 0) c->pos_rows[k] = -1; /* less than one patch: refused by the resolve */
    }
    VFM_TRY(dit_stdit_config_from(c, cfg));
    /* mixture of experts: its keys read only with experts, each routing's only for it */
    c->moe.experts = (int)cfg_int(cfg, "model.num_moe_experts");
    if (c->moe.experts > 0) {
        const char *lb = cfg_str(cfg, "model.moe_router_load_balancing_type");
        c->moe.routing = strcmp(lb, "expert_choice") == 0 ? MOE_EXPERT_CHOICE
                         : strcmp(lb, "aux_loss") == 0 ? MOE_TOKEN_AUX_LOSS : MOE_TOKEN_NONE;
        c->moe.ffn = cfg_int(cfg, "model.moe_ffn_hidden_size");
        c->moe.capacity_factor = (float)cfg_float(cfg, "model.moe_expert_capacity_factor");
        c->moe.z_coeff = (float)cfg_float(cfg, "model.moe_z_loss_coeff");
        c->moe.topk = 1;
        if (c->moe.routing != MOE_EXPERT_CHOICE) {
            c->moe.topk = (int)cfg_int(cfg, "model.moe_router_topk");
            if (!cfg_bool(cfg, "model.moe_router_pre_softmax"))
                return vfm_fail_at(VFM_ERR_USAGE, NULL, "model.moe_router_pre_softmax", "false",
                                   "true: vfm's router takes the softmax over all experts before the top-k (with k = 1 a "
                                   "softmax after it makes every weight 1 and the router learns nothing; the post-top-k "
                                   "form for k > 1 is not implemented)");
        }
        if (c->moe.routing == MOE_TOKEN_AUX_LOSS) c->moe.aux_coeff = (float)cfg_float(cfg, "model.moe_aux_loss_coeff");
    }
    return dit_config_resolve(c);
}
