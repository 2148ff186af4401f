/* The bytes one rank of a TP/SP/CP layout sends per micro-batch (dit.h dit_comm_bytes): each
 * block's layers count theirs (block.h: the TP regions, CP self-attention), then the output rows'
 * gather and the pipeline's hidden states. A collective over n ranks is counted at its ring volume
 * per rank: all-reduce 2(n-1)/n of the buffer, all-gather and reduce-scatter (n-1)/n of the whole
 * (the ordered sums of comm.h move the same bytes). */
#include <string.h>

#include "model/dit_internal.h"

void dit_comm_bytes(const DiT *m, int64_t tokens, int64_t text, int elem, DiTCommBytes *out) {
    (void)text; /* the text stays whole on every rank: cross-attention moves nothing */
    const DiTConfig *c = &m->cfg;
    int T = m->par.tp, P = m->par.cp, sp = m->par.sequence_parallel && T > 1;
    int mult = P * (sp ? T : 1);
    double S = (double)((tokens + mult - 1) / mult * mult), r = S / P, D = c->hidden, b = elem;
    memset(out, 0, sizeof *out);
    for (int k = 0; k < m->n_blocks; k++) { /* this rank's blocks: all of them, or its pipeline stage's */
        double tf, tb, cf, cb;
        block_comm_bytes(m, &m->blocks[k], r, b, &tf, &tb, &cf, &cb);
        out->tp_forward += tf, out->tp_backward += tb, out->cp_forward += cf, out->cp_backward += cb;
    }
    double ranks = (double)P * (sp ? T : 1); /* the output rows are all-gathered over SP and CP */
    int stages = m->par.pp > 1 ? m->par.pp : 1, V = m->par.vp > 1 ? m->par.vp : 1, last = m->par.pp_rank == stages - 1;
    out->output = ranks > 1 && last ? (ranks - 1) * (S / ranks) * dit_out_dim(c) * b : 0;
    /* PP: the hidden rows leave each of the stage's chunks but the last global one, and their
     * gradients each chunk but global chunk 0 */
    double rows = S / ranks;
    out->pp_forward = stages > 1 ? (V - last) * rows * D * b : 0;
    out->pp_backward = stages > 1 ? (V - (m->par.pp_rank == 0)) * rows * D * b : 0;
}
