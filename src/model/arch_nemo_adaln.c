/* nemo-adaln: NeMo's full-rank form of DFM's DiT (research/dfm.md §1.6): dfm's layers
 * (arch_dfm.c) with one Linear(D → 9D) modulation per block (no bias) instead of adaLN-LoRA, and
 * a learnable RMSNorm (eps 1e-6, NeMo's affline_norm) on the conditioning t + fps. */
#include "model/arch.h"

static void features(DiTConfig *c) {
    dit_dfm_features(c);
    c->f.adaln_full = 1;
    c->f.cond_norm = 1;
}

const DiTArch dit_arch_nemo_adaln = {"nemo-adaln", DIT_VARIANT_NEMO_ADALN, features, dit_dfm_build};
