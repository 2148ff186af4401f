/* stdit: a Spatio-Temporal DiT (docs/models.md "ST-DiT"; seeds' third architecture): nemo-adaln's
 * layers (arch_dfm.c, arch_nemo_adaln.c) with every block's self-attention factorised. An ST-DiT
 * layer is two blocks, each with its own full-rank adaLN (9 chunks), self-attention, cross-attention
 * to the text and MLP, as NeMo's STDiTV3 layer lists them:
 *   block 2k     spatial:  the h·w tokens of one frame attend to each other
 *   block 2k+1   temporal: the t tokens at one position attend to each other
 * and every model.stdit_full_attention_every-th layer's spatial block attends over the whole
 * sample (full 3-D attention: where ring context parallelism applies). An image is one frame: its
 * temporal attention is over one token. model.num_layers counts layers: c->layers = 2·num_layers. */
#include <stdio.h>

#include "core/config.h"
#include "model/arch.h"
#include "model/block.h"

static void features(DiTConfig *c) {
    dit_dfm_features(c);
    c->f.adaln_full = 1;
    c->f.cond_norm = 1;
    c->f.factorised = 1;
}

static AttnSpan block_span(const DiTConfig *c, int l) {
    if (l % 2) return ATTN_SPAN_TEMPORAL;
    int layer = l / 2 + 1, k = c->stdit_full_every;
    return k > 0 && layer % k == 0 ? ATTN_SPAN_FULL : ATTN_SPAN_SPATIAL;
}

static void build(DiT *m) {
    dit_dfm_build(m);
    for (int l = 0; l < m->cfg.layers; l++) m->blocks[l].sub[0].attn.span = block_span(&m->cfg, l);
}

vfm_status dit_stdit_config_from(DiTConfig *c, const Config *cfg) {
    /* read for stdit only: set for another variant it is a shape key the run does not use (refused) */
    if (c->variant != DIT_VARIANT_STDIT) return VFM_OK;
    const char *key = "model.stdit_full_attention_every";
    int every = (int)cfg_int(cfg, key);
    char value[32];
    snprintf(value, sizeof value, "%d", every);
    if (every > c->layers)
        return vfm_fail_at(VFM_ERR_USAGE, NULL, key, value, "is past model.num_layers = %d: no layer would have full "
                           "attention (0 = never)", c->layers);
    c->stdit_full_every = every;
    c->layers *= 2;
    return VFM_OK;
}

const DiTArch dit_arch_stdit = {"stdit", DIT_VARIANT_STDIT, features, build};
