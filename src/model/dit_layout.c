/* Which blocks this rank runs and how (dit_internal.h): its blocks under pipeline parallelism
 * (pp_schedule.h's split into P·V chunks), each block's parameters, and each block's
 * recomputation plan inside a chunk (recompute.h). */
#include "model/dit_internal.h"
#include "parallel/pp_schedule.h"

static int vp_of(const DiT *m) { return m->par.vp > 1 ? m->par.vp : 1; }

const DiTBlock *dit_block(const DiT *m, int l) { return &m->blocks[m->block_local[l]]; }

void dit_chunk_blocks(const DiT *m, int chunk, int *b0, int *b1) {
    int first = 0, count = m->cfg.layers;
    if (m->par.pp > 1) pp_chunk_blocks(m->cfg.layers, m->par.pp, vp_of(m), m->par.pp_rank, chunk, &first, &count);
    *b0 = first, *b1 = first + count;
}

void dit_block_layout(const DiT *m, int *block_first, int *n_blocks, int *head_first) {
    for (int k = 0; k < m->n_blocks; k++) block_first[k] = m->blocks[k].first_entry;
    *n_blocks = m->n_blocks;
    *head_first = m->head_first;
}

RecomputeBlock dit_recompute_block(const DiT *m, int b0, int b1, int l) {
    RecomputeBlock p = recompute_block(&m->recompute, b1 - b0, l - b0);
    p.group_first += b0, p.group_end += b0;
    return p;
}

int dit_has_mixer(const DiT *m, MixerKind kind) {
    for (int k = 0; k < m->n_blocks; k++)
        if (block_has(&m->blocks[k], kind)) return 1;
    return 0;
}
