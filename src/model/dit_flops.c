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

/* This rank's layers (its TP widths, its stage's blocks and ends) over its rows: R = S/CP query rows
 * of each sample against all S keys (self) and the L text rows (cross). Attention's share is the
 * same sum with only the score pairs (every linear counts rows, the scores count pairs). */
void dit_rank_forward_flops(const DiT *m, int64_t tokens, int64_t text, int samples, double *matmul, double *attention) {
    double S = (double)tokens, P = m->par.cp > 1 ? m->par.cp : 1, L = m->cfg.f.cross_attn ? (double)text : 0;
    double per = samples > 0 ? S / samples : 0, R = S / P;
    /* samples of one frame as far as ST-DiT's factorised attention goes (the planner knows no frames) */
    FlopShape s = {.tokens = R, .text = L, .samples = samples, .self_pairs = R * per,
                   .cross_pairs = R * (samples > 0 ? L / samples : 0), .spatial_pairs = R * per, .temporal_pairs = R};
    FlopShape pairs = {.self_pairs = s.self_pairs, .cross_pairs = s.cross_pairs, .spatial_pairs = s.spatial_pairs,
                       .temporal_pairs = s.temporal_pairs};
    double f = patch_embed_flops(m, &m->patch, &s) + conditioning_flops(m, &m->cond, &s) + head_flops(m, &m->head, &s);
    double a = 0;
    for (int l = 0; l < m->n_blocks; l++) {
        f += block_flops(m, &m->blocks[l], &s);
        a += block_flops(m, &m->blocks[l], &pairs);
    }
    *matmul = f - a;
    *attention = a;
}
