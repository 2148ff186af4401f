/* vfm model info: parameters (by group) and FLOPs of a model configuration. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "commands.h"
#include "core/config.h"
#include "model/dit.h"

static int64_t count_matching(const ParamTable *t, const char *prefix, const char *contains) {
    int64_t n = 0;
    for (int i = 0; i < t->count; i++)
        if (strncmp(t->entries[i].name, prefix, strlen(prefix)) == 0 && (!contains || strstr(t->entries[i].name, contains)))
            n += t->entries[i].numel;
    return n;
}

int cmd_model(int argc, char **argv) {
    ArgFlag flags[] = {
        {"--preset", "NAME", "a model preset (dit-s, dit-b, dit-l, dit-xl, dit-7b, tiny, tiny-demo)", NULL, 0},
        {"--config", "FILE", "a config file (its model.* keys)", NULL, 0},
        {"--seq", "N", "tokens of one sample for the FLOP count (default 1024)", NULL, 0},
        {"--text", "L", "text rows of one sample (default 512, DFM's T5 length)", NULL, 0},
        {"--list", NULL, "print every parameter tensor", NULL, 0},
    };
    int nflags = (int)(sizeof flags / sizeof flags[0]), help;
    ArgList pos;
    vfm_status s = args_parse("model", argc, argv, flags, nflags, &pos, &help);
    if (s != VFM_OK) return cli_report(s);
    if (help || pos.n == 0) {
        args_print_help("model info [--preset NAME | --config FILE] [--seq N] [--text L] [a.b=v ...]",
                        "Prints the parameter count (total and by part) and the FLOPs of one training step per\n"
                        "sample of N tokens (forward + backward = 3x the forward's matmul FLOPs).", flags, nflags);
        return help ? 0 : 2;
    }
    if (strcmp(pos.items[0], "info") != 0) {
        fprintf(stderr, "vfm model: unknown subcommand '%s' (expected info)\n", pos.items[0]);
        return 2;
    }
    const char *ov[260];
    int n = 0;
    char preset[128];
    const char *p = args_value(flags, nflags, "--preset", NULL);
    if (p) {
        snprintf(preset, sizeof preset, "model.preset=%s", p);
        ov[n++] = preset;
    }
    for (int i = 1; i < pos.n; i++) ov[n++] = pos.items[i];
    Config *cfg;
    if ((s = config_load(&cfg, args_value(flags, nflags, "--config", NULL), ov, n)) != VFM_OK) return cli_report(s);
    DiTConfig c;
    if ((s = dit_config_from(&c, cfg)) != VFM_OK) return cli_report(s);
    DiT m;
    dit_describe(&m, &c);
    const ParamTable *t = &m.table;
    int seq = atoi(args_value(flags, nflags, "--seq", "1024")), text = atoi(args_value(flags, nflags, "--text", "512"));
    int32_t cu_q[2] = {0, seq}, cu_t[2] = {0, text};
    double fwd = dit_forward_flops(&c, 1, cu_q, cu_t);
    printf("model %s (preset %s): hidden %d, layers %d, heads %d (head dim %d, kv heads %d), ffn %d, patch %dx%dx%d, "
           "in %d / out %d channels, text width %d\n",
           cfg_str(cfg, "model.variant"), cfg_str(cfg, "model.preset")[0] ? cfg_str(cfg, "model.preset") : "none",
           c.hidden, c.layers, c.heads, c.head_dim, c.kv_heads, c.ffn, c.patch_temporal, c.patch_spatial,
           c.patch_spatial, c.in_channels, c.out_channels, c.d_text);
    printf("parameters: %lld (%.1f M)\n", (long long)t->total, t->total / 1e6);
    printf("  embedders (x, t, fps)     %12lld\n", (long long)(count_matching(t, "x_embedder", NULL) +
                                                             count_matching(t, "t_embedder", NULL) +
                                                             count_matching(t, "fps_embedder", NULL)));
    printf("  adaLN-LoRA                %12lld\n", (long long)count_matching(t, "blocks.", "adaln"));
    printf("  self-attention            %12lld\n", (long long)count_matching(t, "blocks.", "self_attn"));
    printf("  cross-attention           %12lld\n", (long long)count_matching(t, "blocks.", "cross_attn"));
    printf("  MLP                       %12lld\n", (long long)count_matching(t, "blocks.", "mlp"));
    printf("  final linear              %12lld\n", (long long)count_matching(t, "final_linear", NULL));
    printf("FLOPs per sample of %d tokens and %d text rows: forward %.3g, training step %.3g (%.3g per token)\n", seq,
           text, fwd, 3 * fwd, 3 * fwd / seq);
    if (args_flag(flags, nflags, "--list")->present)
        for (int i = 0; i < t->count; i++) {
            const ParamEntry *e = &t->entries[i];
            printf("  %-44s [", e->name);
            for (int d = 0; d < e->ndim; d++) printf("%s%lld", d ? ", " : "", (long long)e->shape[d]);
            printf("]%s\n", e->weight_decay ? "" : "  (no weight decay)");
        }
    dit_destroy(&m);
    config_free(cfg);
    return 0;
}
