/* Model presets (model.preset): each is a list of key=value settings applied after the defaults
 * and before the config file, so the file and overrides can still change any of them. */
#include <string.h>

#include "config_internal.h"

typedef struct {
    const char *name;
    const char *const *settings; /* NULL-terminated "key=value" */
} CfgPreset;

#define SETTINGS(...) ((const char *const[]){__VA_ARGS__, NULL})
#define DIT_SIZE(hidden, layers, heads) \
    SETTINGS("model.hidden_size=" #hidden, "model.num_layers=" #layers, "model.num_attention_heads=" #heads)
#define MOVIEGEN(hidden, layers, heads, ffn)                                                                      \
    SETTINGS("model.variant=moviegen", "model.hidden_size=" #hidden, "model.num_layers=" #layers,                 \
             "model.num_attention_heads=" #heads, "model.num_query_groups=8", "model.ffn_hidden_size=" #ffn,      \
             "model.crossattn_emb_size=" #hidden, "model.init_method_std=0.01", "model.max_frames=128",           \
             "model.max_img_h=240", "model.max_img_w=240", "model.patch_spatial=2")

#define WAN_SIZE(hidden, ffn, layers, heads)                                                                     \
    SETTINGS("model.variant=wan", "model.hidden_size=" #hidden, "model.ffn_hidden_size=" #ffn,                        \
             "model.num_layers=" #layers, "model.num_attention_heads=" #heads, "model.in_channels=16",                 \
             "model.out_channels=16", "model.patch_spatial=2", "model.patch_temporal=1",                              \
             "model.crossattn_emb_size=4096", "model.layernorm_epsilon=1e-6")

static const CfgPreset g_presets[] = {
    {"tiny", SETTINGS("model.hidden_size=64", "model.num_layers=2", "model.num_attention_heads=4", "model.in_channels=4",
                      "model.out_channels=4", "model.patch_spatial=2", "model.crossattn_emb_size=32",
                      "model.adaln_lora_dim=32", "model.fps_embedding_dim=32")},
    {"tiny-demo", SETTINGS("model.hidden_size=128", "model.num_layers=4", "model.num_attention_heads=4",
                           "model.in_channels=3", "model.out_channels=3", "model.patch_spatial=2",
                           "model.crossattn_emb_size=64", "model.adaln_lora_dim=64", "model.fps_embedding_dim=64")},
    {"dit-s", DIT_SIZE(384, 12, 6)},
    {"dit-b", DIT_SIZE(768, 12, 12)},
    {"dit-l", DIT_SIZE(1024, 24, 16)},
    {"dit-xl", DIT_SIZE(1152, 28, 16)},
    /* NeMo paper's DiT-7B (the 519 TFLOP/s figure) and NeMo's code config of that name */
    {"dit-7b", DIT_SIZE(4096, 28, 32)},
    {"dit-7b-nemo", DIT_SIZE(3072, 32, 24)},
    /* NeMo benchmarks a "DiT 28B" but publishes no config: MovieGen-30B's width and depth */
    {"dit-28b", DIT_SIZE(6144, 48, 48)},
    /* MovieGen as NeMo configures it (DiTLlama{1B,5B,30B}Config; research/pp-fsdp-moe-moviegen.md §4):
     * 8 kv groups, SwiGLU width, init std 0.01, learned position over 128 x 240 x 240 latents; the
     * text is D wide (NeMo's cross-attention reads D-wide context; Movie Gen projects its text to D) */
    {"moviegen-1b", MOVIEGEN(2048, 16, 32, 8192)},
    {"moviegen-5b", MOVIEGEN(3072, 32, 24, 8192)},
    {"moviegen-30b", MOVIEGEN(6144, 48, 48, 16384)},
    /* NeMo's ECDiT-1B (research/pp-fsdp-moe-moviegen.md §3): MovieGen-1B with every MLP a mixture of
     * 64 SwiGLU experts of width 1024, expert choice with capacity factor 8 (top-1 as NeMo names
     * it): 64·C_b = 8·T_b slots per sample, the dense 8192-wide MLP's FLOPs per token */
    {"ecdit-1b", SETTINGS("model.variant=moviegen", "model.hidden_size=2048", "model.num_layers=16",
                          "model.num_attention_heads=32", "model.num_query_groups=8", "model.ffn_hidden_size=8192",
                          "model.crossattn_emb_size=2048", "model.init_method_std=0.01", "model.max_frames=128",
                          "model.max_img_h=240", "model.max_img_w=240", "model.patch_spatial=2",
                          "model.num_moe_experts=64", "model.moe_ffn_hidden_size=1024",
                          "model.moe_router_load_balancing_type=expert_choice", "model.moe_router_topk=1",
                          "model.moe_expert_capacity_factor=8")},
    /* NeMo's ST-DiT configs (nemo/collections/diffusion/models/model.py: STDiTV3_XLConfig,
     * STDiTXLConfig, STDiT3BConfig); num_layers counts ST-DiT layers of two blocks */
#define STDIT_SIZE(hidden, layers, heads, ffn)                                                                      \
    SETTINGS("model.variant=stdit", "model.hidden_size=" #hidden, "model.num_layers=" #layers,                         \
             "model.num_attention_heads=" #heads, "model.ffn_hidden_size=" #ffn, "model.crossattn_emb_size=1024")
    {"stdit3-xl", STDIT_SIZE(1152, 28, 16, 4608)},
    {"stdit-xl", STDIT_SIZE(1536, 24, 12, 6144)},
    {"stdit-3b", STDIT_SIZE(2048, 24, 16, 8192)},
    /* Wan 2.1 text-to-video (diffusers' Wan2.1-T2V-*-Diffusers configs; docs/models.md "Wan 2.1") */
    {"wan2.1-1.3b", WAN_SIZE(1536, 8960, 30, 12)},
    {"wan2.1-14b", WAN_SIZE(5120, 13824, 40, 40)},
};
#define NPRESETS ((int)(sizeof g_presets / sizeof g_presets[0]))

const char *const *cfg_preset_settings(const char *name) {
    for (int i = 0; i < NPRESETS; i++)
        if (strcmp(g_presets[i].name, name) == 0) return g_presets[i].settings;
    return NULL;
}

const char *const *config_preset_names(void) {
    static const char *names[NPRESETS + 1];
    for (int i = 0; i < NPRESETS; i++) names[i] = g_presets[i].name;
    names[NPRESETS] = NULL;
    return names;
}
