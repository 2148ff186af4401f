/* ST-DiT's rows on one rank (dit_internal.h, parallel/st_layout.h): every sample's frames and
 * tokens per frame from its positions, its slot of whole frames (t padded to a multiple of CP),
 * this rank's spatial and temporal layouts, the attention over them, and the moves between the
 * frame and temporal layouts. */
#include <stdlib.h>
#include <string.h>

#include "model/dit_internal.h"

static int gcd(int a, int b) { return b ? gcd(b, a % b) : a; }

static int sp_tp(const DiT *m) { return m->par.sequence_parallel && m->par.tp > 1 ? m->par.tp : 1; }

int32_t dit_st_slot(const DiT *m, int t, int n) {
    if (t <= 0 || n <= 0) return 0;
    int P = m->par.cp, step = sp_tp(m) / gcd(n, sp_tp(m)); /* F·n divides by TP: F a multiple of step */
    int F = (t + P - 1) / P;
    F = (F + step - 1) / step * step;
    return (int32_t)P * F * n;
}

vfm_status dit_st_shapes(const DiT *m, const DiTInputs *in, const Placement *pl, int *t, int *n) {
    (void)m;
    int64_t rows = pl->S_in;
    int32_t *pos = malloc((size_t)(rows > 0 ? rows : 1) * 3 * sizeof *pos);
    if (!pos) return vfm_fail(VFM_ERR_NOMEM, "stdit: positions of %lld rows", (long long)rows);
    vfm_status s = tensor_numel(in->pos) < rows * 3 || in->pos->dtype != DT_I32
                       ? vfm_fail(VFM_ERR_SHAPE, "stdit: the pack's positions must be [%lld, 3] i32", (long long)rows)
                       : device_memcpy(pos, DEV_CPU, in->pos->data, in->pos->device, (size_t)rows * 3 * sizeof *pos);
    for (int i = 0; i < pl->n && s == VFM_OK; i++) {
        int64_t first = pl->cu_in_pad[i], len = pl->cu_real[i + 1] - pl->cu_real[i];
        t[i] = len > 0 ? pos[(first + len - 1) * 3] + 1 : 0;
        n[i] = t[i] > 0 ? (int)(len / t[i]) : 0;
        int ok = len == 0 || (t[i] > 0 && len % t[i] == 0);
        for (int f = 0; f < t[i] && ok; f++) /* frame f starts at row f·n with t = f, h = w = 0 */
            ok = pos[(first + (int64_t)f * n[i]) * 3] == f && pos[(first + (int64_t)f * n[i]) * 3 + 1] == 0 &&
                 pos[(first + (int64_t)f * n[i]) * 3 + 2] == 0;
        if (!ok)
            s = vfm_fail(VFM_ERR_USAGE, "model.variant=stdit: sample %d's %lld tokens are not frames of equal size in "
                         "t-major order (its positions end at frame %d)", i, (long long)len, t[i] - 1);
    }
    free(pos);
    return s;
}

vfm_status dit_st_plan(const DiT *m, Placement *pl, const int *t, const int *n) {
    int P = m->par.cp, N = pl->n;
    StSample *smp = malloc((size_t)(N > 0 ? N : 1) * sizeof *smp);
    if (!smp) return vfm_fail(VFM_ERR_NOMEM, "stdit: %d samples", N);
    for (int i = 0; i < N; i++) {
        smp[i].n = n[i], smp[i].t = t[i];
        if (pl->identity) { /* one rank: the caller's slots, every frame */
            smp[i].off = pl->cu_in_pad[i], smp[i].frames = t[i];
        } else {
            int32_t slot = pl->cu_pad[i + 1] - pl->cu_pad[i];
            smp[i].off = pl->ch.cu_padded[i], smp[i].frames = n[i] > 0 ? slot / (P * n[i]) : 0;
        }
    }
    vfm_status s = st_layout_init(&pl->st, smp, N, pl->R, P, m->par.cp_rank, P > 1 && !m->par.st_hybrid, m->device);
    pl->have_st = s == VFM_OK;
    free(smp);
    return s;
}

/* The chunk set of a span and whether it runs through the ring. */
static const CpChunks *span_chunks(const Acts *a, AttnSpan span, int *ring) {
    const StLayout *st = &a->pl.st;
    *ring = span == ATTN_SPAN_SPATIAL ? st->spatial_ring : st->temporal_ring;
    return span == ATTN_SPAN_SPATIAL ? &st->spatial : &st->temporal;
}

vfm_status dit_st_attention_forward(const DiT *m, const Acts *a, AttnSpan span, Tensor *o, Tensor *lse,
                                    const Tensor *q, const Tensor *k, const Tensor *v) {
    int ring;
    const CpChunks *ch = span_chunks(a, span, &ring);
    if (ring) return cp_attention_forward(&m->par.cpa, ch, o, lse, q, k, v);
    VarlenLayout l = cp_whole_layout(ch);
    return op_attention_forward(o, lse, q, k, v, &l);
}

vfm_status dit_st_attention_backward(const DiT *m, const Acts *a, AttnSpan span, Tensor *dq, Tensor *dk, Tensor *dv,
                                     const Tensor *dout, const Tensor *q, const Tensor *k, const Tensor *v,
                                     const Tensor *o, const Tensor *lse) {
    int ring;
    const CpChunks *ch = span_chunks(a, span, &ring);
    if (ring) return cp_attention_backward(&m->par.cpa, ch, dq, dk, dv, dout, q, k, v, o, lse);
    VarlenLayout l = cp_whole_layout(ch);
    return op_attention_backward(dq, dk, dv, dout, q, k, v, o, lse, &l);
}

vfm_status dit_st_to_positions(const DiT *m, const Acts *a, Tensor *y, const Tensor *x, int skip) {
    return st_to_positions(&a->pl.st, m->par.cp_comm, y, x, skip);
}

vfm_status dit_st_to_frames(const DiT *m, const Acts *a, Tensor *x, const Tensor *y) {
    return st_to_frames(&a->pl.st, m->par.cp_comm, x, y);
}

double dit_cp_bytes_sent(const DiT *m) {
    const Comm *c[] = {m->par.cp_comm, m->par.cpa.cp, m->par.cpa.a2a, m->par.cpa.ring};
    double sum = 0;
    for (int i = 0; i < 4; i++) {
        int seen = !c[i];
        for (int j = 0; j < i && !seen; j++) seen = c[j] == c[i];
        if (!seen) sum += c[i]->bytes_sent;
    }
    return sum;
}

/* ---- bytes (docs/parallel.md "ST-DiT's hybrid parallelism") ---------------------------------- */

void dit_st_span_blocks(const DiT *m, int counts[3]) {
    counts[0] = counts[1] = counts[2] = 0;
    for (int k = 0; k < m->n_blocks; k++)
        if (m->blocks[k].n_sub > 0 && m->blocks[k].sub[0].kind == MIXER_SELF_ATTENTION)
            counts[m->blocks[k].sub[0].attn.span]++;
}

void dit_st_block_bytes(const DiT *m, int n, const int *t, const int *tokens, int cp_rank, int elem, double out[3][2]) {
    int P = m->par.cp;
    double R = 0, a = 0, b = 0; /* a: real rows this rank sends to others' positions; b: rows it sends back */
    for (int i = 0; i < n; i++) {
        int32_t slot = dit_st_slot(m, t[i], tokens[i]);
        R += (double)slot / P;
        if (!slot) continue;
        int F = slot / (P * tokens[i]), mine = t[i] - cp_rank * F;
        mine = mine < 0 ? 0 : mine > F ? F : mine;
        double pos = (double)((int64_t)(cp_rank + 1) * tokens[i] / P - (int64_t)cp_rank * tokens[i] / P);
        a += (double)mine * ((double)tokens[i] - pos);
        b += pos * (double)(t[i] - mine);
    }
    memset(out, 0, 3 * sizeof out[0]);
    if (P <= 1) return;
    AttentionLayer full = {.self = 1, .kv_heads = m->cfg.kv_heads, .span = ATTN_SPAN_FULL};
    attention_cp_bytes(m, &full, R, elem, &out[0][0], &out[0][1]);
    if (!m->par.st_hybrid) { /* plain p2p: every attention through the ring over R rows */
        out[1][0] = out[2][0] = out[0][0], out[1][1] = out[2][1] = out[0][1];
        return;
    }
    double D = m->cfg.hidden, Dq = (double)m->heads_local * m->cfg.head_dim;
    out[2][0] = (a * D + b * Dq) * elem; /* x to the positions, o back to the frames */
    out[2][1] = (a * Dq + b * D) * elem; /* d(o) to the positions, d(x) back */
}
