/* What a DiT configuration costs: matmul FLOPs of a forward over a pack, and the names of the
 * parameter groups `vfm model info` reports. */
#include "model/dit.h"

static const char *const GROUP_NAMES[DIT_N_GROUPS] = {
    "patch embedding", "conditioning (t, fps, class)", "adaLN modulation", "self-attention", "cross-attention",
    "MLP", "final layer",
};

const char *dit_group_name(int group) { return group >= 0 && group < DIT_N_GROUPS ? GROUP_NAMES[group] : "?"; }

double dit_forward_flops(const DiTConfig *c, int n, const int32_t *cu_q, const int32_t *cu_text) {
    const DiTFeatures *f = &c->f;
    double D = c->hidden, Dkv = (double)c->kv_heads * c->head_dim, S = 0, attn_self = 0, attn_cross = 0, L = 0;
    for (int i = 0; i < n; i++) {
        double q = cu_q[i + 1] - cu_q[i], l = cu_text[i + 1] - cu_text[i];
        S += q;
        L += l;
        attn_self += q * q;
        attn_cross += q * l;
    }
    double nD = (double)f->n_chunks * D;
    double per_block = 2 * S * D * (D + 2 * Dkv)   /* q, k, v */
                       + 4 * attn_self * D         /* scores and values */
                       + 2 * S * D * D             /* proj */
                       + 2 * 2 * S * D * c->ffn;   /* MLP */
    if (c->f.cross_attn)
        per_block += 2 * S * D * D + 2 * L * c->d_text * 2 * D /* cross q, k, v */
                     + 4 * attn_cross * D + 2 * S * D * D;     /* cross attention, proj */
    /* per sample: the modulation of each block, the embedders, the final modulation */
    per_block += 2 * n * (f->adaln_full ? D * nD : (double)c->adaln_lora * (D + nD));
    double cond = 2 * n * ((double)f->t_freq_dim * D + D * D);
    if (f->fps_embedder) cond += 2 * n * 2.0 * c->fps_dim * c->fps_dim;
    if (f->final_adaln) cond += 2 * n * D * 2 * D;
    double embed = 2 * S * dit_token_dim(c) * D + 2 * S * D * dit_out_dim(c);
    return c->layers * per_block + embed + cond;
}
