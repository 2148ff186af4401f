/* The bytes one rank of a TP/SP/CP layout sends per micro-batch (dit.h dit_comm_bytes), counted
 * from what dit.c, dit_parallel.c and parallel/cp_attention.c move. A collective over n ranks is
 * counted at its ring volume per rank: all-reduce 2(n-1)/n of the buffer, all-gather and
 * reduce-scatter (n-1)/n of the whole (the ordered sums of comm.h move the same bytes). */
#include "model/dit_internal.h"

/* Self-attention through CP, per layer: rows r per rank, h q heads and g kv heads per TP rank. */
static void cp_layer_bytes(const CpAttention *a, int P, double r, double h, double g, double d, double b, double *fwd,
                           double *bwd) {
    *fwd = *bwd = 0;
    if (P <= 1) return;
    if (a->type == CP_COMM_ALL_GATHER) { /* K, V gathered; backward: again, and dK, dV reduce-scattered */
        *fwd = 2.0 * (P - 1) * r * g * d * b;
        *bwd = 4.0 * (P - 1) * r * g * d * b;
        return;
    }
    int A = a->type == CP_COMM_P2P ? 1 : a->type == CP_COMM_A2A ? P : (a->A > 0 ? a->A : 1);
    int R = P / A;
    double ph = A > 1 ? h / A : h, pg = A > 1 ? (g >= A ? g / A : 1) : g, lse = 4;
    if (A > 1) { /* all-to-all (A-1)/A of each buffer of A·r rows: q, k, v, o back, lse back */
        *fwd += (A - 1) * r * ((2 * ph + 2 * pg) * d * b + ph * lse);
        /* backward: q, k, v, o, lse, dO again, then dq, dk, dv back */
        *bwd += (A - 1) * r * ((3 * ph + 2 * pg) * d * b + ph * lse + (ph + 2 * pg) * d * b);
    }
    if (R > 1) { /* the ring over super-chunks of A·r rows: K, V hops; backward also dK, dV every step */
        double rows = A * r;
        *fwd += 2.0 * (R - 1) * rows * pg * d * b;
        *bwd += (2.0 * (R - 1) + 2.0 * R) * rows * pg * d * b;
    }
}

void dit_comm_bytes(const DiT *m, int64_t tokens, int64_t text, int elem, DiTCommBytes *out) {
    (void)text; /* the text stays whole on every rank: cross-attention moves nothing */
    const DiTConfig *c = &m->cfg;
    int T = m->par.tp, P = m->par.cp, sp = m->par.sequence_parallel && T > 1;
    int mult = P * (sp ? T : 1);
    double S = (double)((tokens + mult - 1) / mult * mult), r = S / P, D = c->hidden, b = elem;
    double regions = c->f.cross_attn ? 3 : 2, share = T > 1 ? (double)(T - 1) / T : 0;
    double L = m->n_blocks; /* this rank's blocks: all of them, or its pipeline stage's */
    out->tp_forward = L * regions * 2 * share * r * D * b;       /* all-reduce, or all-gather + reduce-scatter */
    out->tp_backward = L * regions * (sp ? 3 : 2) * share * r * D * b; /* + the re-gather under SP */
    double fwd, bwd;
    cp_layer_bytes(&m->par.cpa, P, r, m->heads_local, m->kv_heads_local, c->head_dim, b, &fwd, &bwd);
    out->cp_forward = L * fwd;
    out->cp_backward = L * bwd;
    double ranks = (double)P * (sp ? T : 1); /* the output rows are all-gathered over SP and CP */
    int stages = m->par.pp > 1 ? m->par.pp : 1, V = m->par.vp > 1 ? m->par.vp : 1, last = m->par.pp_rank == stages - 1;
    out->output = ranks > 1 && last ? (ranks - 1) * (S / ranks) * dit_out_dim(c) * b : 0;
    /* PP: the hidden rows leave each of the stage's chunks but the last global one, and their
     * gradients each chunk but global chunk 0 */
    double rows = S / ranks;
    out->pp_forward = stages > 1 ? (V - last) * rows * D * b : 0;
    out->pp_backward = stages > 1 ? (V - (m->par.pp_rank == 0)) * rows * D * b : 0;
}
