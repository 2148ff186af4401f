/* The attention layer's cost (attention.h): FLOPs of a sample and the bytes context parallelism
 * sends per layer. A file of its own: the ST-DiT's byte counts (dit_stdit.c) read it, and
 * attention.c calls dit_stdit.c, so keeping them together would tie the two files in a circle. */
#include "model/dit_internal.h"

static int local_heads(const DiT *m, int heads) { return heads / m->par.tp; }

double attention_flops(const DiT *m, const AttentionLayer *at, const FlopShape *s) {
    double kv_rows = at->self ? s->tokens : s->text, pairs = !at->self                     ? s->cross_pairs
                                                             : at->span == ATTN_SPAN_SPATIAL  ? s->spatial_pairs
                                                             : at->span == ATTN_SPAN_TEMPORAL ? s->temporal_pairs
                                                                                             : s->self_pairs;
    return linear_flops(m, &at->q, s->tokens) + linear_flops(m, &at->k, kv_rows) + linear_flops(m, &at->v, kv_rows) +
           4 * pairs * (double)at->q.out /* scores and values over every head */ + linear_flops(m, &at->proj, s->tokens);
}

/* Per layer and rank, with P CP ranks of r rows, h q heads and g kv heads per TP rank of d values. */
void attention_cp_bytes(const DiT *m, const AttentionLayer *at, double r, double b, double *fwd, double *bwd) {
    const CpAttention *cpa = &m->par.cpa;
    int P = m->par.cp;
    double h = m->heads_local, g = local_heads(m, at->kv_heads), d = m->cfg.head_dim;
    *fwd = *bwd = 0;
    if (P <= 1 || !at->self) return; /* cross-attention sees the whole text on every rank */
    if (at->span != ATTN_SPAN_FULL && m->par.st_hybrid) { /* ST-DiT's hybrid: frames and positions that divide */
        double moved = at->span == ATTN_SPAN_TEMPORAL ? r * (P - 1) / P : 0; /* (dit_st_block_bytes: a pack's own) */
        *fwd = *bwd = moved * (m->cfg.hidden + h * d) * b;
        return;
    }
    if (cpa->type == CP_COMM_ALL_GATHER) { /* K, V gathered; backward: again, and dK, dV reduce-scattered */
        *fwd = 2.0 * (P - 1) * r * g * d * b;
        *bwd = 4.0 * (P - 1) * r * g * d * b;
        return;
    }
    int A = cpa->type == CP_COMM_P2P ? 1 : cpa->type == CP_COMM_A2A ? P : (cpa->A > 0 ? cpa->A : 1);
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
