/* An architecture of the DiT family: a model.variant, the features its options give, and the list
 * of its layers. Everything else — the parallel layouts, FSDP units, recomputation, FLOP and
 * memory counts, checkpoints — works per layer, so a new architecture gets it by listing its
 * layers (docs/models.md "Adding an architecture"). */
#ifndef VFM_MODEL_ARCH_H
#define VFM_MODEL_ARCH_H

#include "model/dit.h"

typedef struct DiTArch {
    const char *name;   /* model.variant */
    DiTVariant variant;
    /* Fills c->f (zeroed) from c's options (dit_cross_attention and dit_pos_embedding below give
     * the options' value over the architecture's default). */
    void (*features)(DiTConfig *c);
    /* Appends every layer's entries to m->table in the order of the checkpoint files, and fills
     * m's layers: m->patch, m->cond, m->blocks[0, L) (block.h), m->head and m->head_first. */
    void (*build)(DiT *m);
} DiTArch;

extern const DiTArch dit_arch_dfm, dit_arch_nemo_adaln, dit_arch_adaln_zero;
extern const DiTArch dit_arch_moviegen;
extern const DiTArch dit_arch_stdit;
extern const DiTArch dit_arch_wan;
/* ST-DiT's keys (arch_stdit.c): model.stdit_full_attention_every, and model.num_layers counting
 * layers of two blocks (c->layers = 2·num_layers); read for model.variant=stdit only. */
vfm_status dit_stdit_config_from(DiTConfig *c, const Config *cfg);
/* dfm's features and layers (arch_dfm.c), which nemo-adaln shares; its conditioning (t-, [class,]
 * fps-embedders, the norm when c->f.cond_norm), which moviegen shares. */
void dit_dfm_features(DiTConfig *c);
void dit_dfm_build(DiT *m);
void dit_dfm_conditioning(DiT *m);

/* The checks of a model with 3-D RoPE (Wan; dit_config.c). */
vfm_status dit_check_rope(const DiTConfig *c);

/* The architecture of a variant, or NULL. */
const DiTArch *dit_arch(DiTVariant v);
/* The architecture called `name`, or NULL; names lists them ("dfm, nemo-adaln or adaln-zero"). */
const DiTArch *dit_arch_named(const char *name, char *names, size_t size);

/* model.cross_attention (auto, true, false) over the architecture's default. */
static inline int dit_cross_attention(const DiTConfig *c, int dflt) {
    return c->cross_attention == DIT_AUTO ? dflt : c->cross_attention == DIT_ON;
}
/* model.pos_embedding over the architecture's default. */
static inline DiTPosEmbedding dit_pos_embedding(const DiTConfig *c, DiTPosEmbedding dflt) {
    return c->pos_embedding != DIT_POS_AUTO ? c->pos_embedding : dflt;
}

#endif
