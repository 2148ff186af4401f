/* What a DiT configuration costs: the FLOPs of a forward over a pack, the sum of its layers'
 * (each layer counts its own: layer.h FlopShape), and the names of the parameter groups
 * `vfm model info` reports. */
#include "model/dit_internal.h"

static const char *const GROUP_NAMES[DIT_N_GROUPS] = {
    "patch embedding", "conditioning (t, fps, class)", "adaLN modulation", "self-attention", "cross-attention",
    "MLP", "final layer",
};

const char *dit_group_name(int group) { return group >= 0 && group < DIT_N_GROUPS ? GROUP_NAMES[group] : "?"; }

double dit_forward_flops(const DiTConfig *c, int n, const int32_t *cu_q, const int32_t *cu_text) {
    return dit_forward_flops_frames(c, n, cu_q, cu_text, NULL);
}

double dit_forward_flops_frames(const DiTConfig *c, int n, const int32_t *cu_q, const int32_t *cu_text,
                                const int32_t *frames) {
    FlopShape s = {.samples = n};
    for (int i = 0; i < n; i++) {
        double q = cu_q[i + 1] - cu_q[i], l = c->f.cross_attn ? cu_text[i + 1] - cu_text[i] : 0;
        double t = frames && frames[i] > 0 ? frames[i] : 1;
        s.tokens += q;
        s.text += l;
        s.self_pairs += q * q;
        s.cross_pairs += q * l;
        s.spatial_pairs += q * q / t; /* t frames of q/t tokens */
        s.temporal_pairs += q * t;    /* q/t positions of t tokens */
    }
    DiT m; /* the one-rank layers: the whole model's widths */
    dit_describe(&m, c);
    double f = patch_embed_flops(&m, &m.patch, &s) + conditioning_flops(&m, &m.cond, &s) + head_flops(&m, &m.head, &s);
    for (int l = 0; l < m.n_blocks; l++) f += block_flops(&m, &m.blocks[l], &s);
    dit_destroy(&m);
    return f;
}
