/* The step time of one layout (plan.h PlanTime). Per micro-batch, on the slowest pipeline stage:
 *  - GEMMs: the stage's linear FLOPs on this rank (dit_rank_forward_flops: its TP widths, its CP rows)
 *    x 3 (forward, and the backward's two GEMMs per linear) at the device's GEMM rate;
 *  - attention: its FLOPs at the fused attention's forward rate, and 2.5 x them at the backward
 *    rate (the FlashAttention papers count the backward so; the rates in plan_device.c are theirs);
 *  - elementwise work (norms, modulation, residuals, activations, casts): memory-bound, taken as
 *    three passes over the activations the forward keeps (written in the forward, read in the
 *    backward, their gradients written and read once more) at the device's memory bandwidth — an
 *    assumption, stated in docs/plan.md;
 *  - recomputation: the replayed forward of the blocks it recomputes (full), or their attention
 *    (selective), with the collectives the replay repeats;
 *  - TP/SP collectives on the critical path (dit_comm_bytes' TP regions; not overlapped), the CP
 *    ring hidden behind the attention it feeds (p2p: only what exceeds the attention's time shows;
 *    all-to-all and all-gather: not overlapped), the pipeline's hidden states (batched p2p, not
 *    overlapped), the output rows' gather.
 * The step: M micro-batches, the pipeline's bubble of (P−1)/V micro-batch times, the gradient
 * reduction (overlapped with the last micro-batch's backward with ddp.overlap_grad_reduce and no PP;
 * ZeRO-2/3's per-unit reduce-scatters with every backward and ZeRO-3's prefetched gathers with the
 * compute; ZeRO-1's parameter all-gather after the update is not), and the optimizer's memory-bound
 * update. Links: NVLink within a node, the network between nodes (the request's bandwidths). */
#include <math.h>
#include <string.h>

#include "plan/plan_internal.h"

/* FlashAttention-2 §3.1 and FlashAttention-3 count a backward pass as 2.5 forward passes of FLOPs. */
#define ATTN_BWD_FLOPS 2.5
/* Elementwise traffic: passes over the forward's kept activations (above). */
#define ELEMENTWISE_PASSES 3.0
/* AdamW per element: reads parameter, gradient, m, v and writes parameter, m, v, in fp32. */
#define ADAM_BYTES 28.0

/* The attention rate at head dim d: the table's 64 and 128 rows, linear between them. */
static double attn_rate(const double rate[2], int d) {
    if (d <= 64) return rate[0];
    if (d >= 128) return rate[1];
    return rate[0] + (rate[1] - rate[0]) * (d - 64) / 64.0;
}

/* Bandwidth in bytes/s of a group whose members are `stride` ranks apart, `size` of them. */
static double link(const PlanRequest *r, int stride, int size) {
    int intra = (int64_t)stride * size <= r->gpus_per_node;
    return (intra ? r->intra_gb_s : r->inter_gb_s) * 1e9;
}

vfm_status plan_stage_time(const PlanRequest *r, const PlanLayout *pl, PlanStage *st, PlanStageTime *t) {
    memset(t, 0, sizeof *t);
    const DiT *m = &st->m;
    const PlanDevice *d = &r->dev;
    int64_t rows = plan_pack_rows(r, pl);
    DType dt = plan_act_dtype(r);
    double mm, at;
    dit_rank_forward_flops(m, rows, r->text, 1, &mm, &at);
    /* which of the stage's blocks recompute what */
    int full = 0, sel = 0, chunks = pl->l.pp > 1 && pl->l.vp > 1 ? pl->l.vp : 1;
    for (int v = 0; v < chunks; v++) {
        int b0, b1;
        dit_chunk_blocks(m, v, &b0, &b1);
        for (int l = b0; l < b1; l++) {
            RecomputeBlock p = recompute_block(&pl->rc, b1 - b0, l - b0);
            full += p.mode == RECOMPUTE_FULL, sel += p.mode == RECOMPUTE_SELECTIVE;
        }
    }
    double f_full = m->n_blocks ? (double)full / m->n_blocks : 0, f_sel = m->n_blocks ? (double)sel / m->n_blocks : 0;
    DiTCommBytes cb;
    dit_comm_bytes(m, rows, r->text, (int)dtype_size(dt), &cb);
    t->local_params = m->table.total;
    for (int i = 0; i < m->table.count; i++) {
        const ParamEntry *e = &m->table.entries[i];
        if (dp_entry_reduces_over_tp(e, pl->l.sp)) t->tp_summed += e->numel;
    }
    int first[4096], nb = 0, head_first = 0;
    if (m->n_blocks <= 4096) {
        dit_block_layout(m, first, &nb, &head_first);
        for (int i = nb ? first[0] : 0; i < head_first; i++) t->block_params += m->table.entries[i].numel;
    }
    /* the activations the forward keeps, without recomputation: the elementwise traffic */
    size_t slot = 0, scratch = 0;
    VFM_TRY(plan_stage_acts(r, pl, st, dt, NULL, &slot, &scratch));
    int hd = m->cfg.head_dim;

    double gemm_rate = d->peak_tflops * d->gemm_efficiency * 1e12;
    double fwd_rate = attn_rate(d->attn_fwd_tflops, hd) * 1e12, bwd_rate = attn_rate(d->attn_bwd_tflops, hd) * 1e12;
    double attn_f = at / fwd_rate, attn_b = ATTN_BWD_FLOPS * at / bwd_rate;
    t->gemm = 3 * mm / gemm_rate;
    t->attention = attn_f + attn_b;
    t->elementwise = ELEMENTWISE_PASSES * (double)slot * chunks / (d->hbm_gb_s * 1e9);
    if (!d->cpu && pl->sharding == DP_SHARD_OPTIM_GRADS_PARAMS) /* ZeRO-3: each gathered fp32 unit made bf16 (dit_fsdp.c), */
        t->elementwise += (2 + f_full) * 6.0 * (double)t->block_params / (d->hbm_gb_s * 1e9); /* forward, backward, replay */
    t->recompute = f_full * (mm / gemm_rate + attn_f + t->elementwise / ELEMENTWISE_PASSES) + f_sel * attn_f;
    t->compute_bwd = 2 * mm / gemm_rate + attn_b + t->elementwise * 2 / ELEMENTWISE_PASSES;

    int T = pl->l.tp, P = pl->l.cp;
    double tp_bw = link(r, 1, T), cp_bw = link(r, T, P), pp_bw = link(r, T * P, pl->l.pp);
    t->tp = (cb.tp_forward * (1 + f_full) + cb.tp_backward) / tp_bw;
    double cp = (cb.cp_forward * (1 + f_full + f_sel) + cb.cp_backward) / cp_bw;
    if (pl->l.cp_type == CP_COMM_P2P) cp = fmax(0, cp - t->attention); /* each hop posted before its tile */
    t->cp = cp + cb.output / (P > 1 ? cp_bw : tp_bw);
    t->pp_p2p = (cb.pp_forward + cb.pp_backward) / pp_bw;
    t->total = t->gemm + t->attention + t->elementwise + t->recompute + t->tp + t->cp + t->pp_p2p;
    return VFM_OK;
}

/* Exposed seconds per step of the data-parallel traffic, given the slowest stage's micro-batch. */
static double dp_time(const PlanRequest *r, const PlanLayout *pl, const PlanStageTime *st) {
    int n = pl->dp * pl->l.cp;
    double bw = link(r, 1, r->gpus), frac = n > 1 ? (double)(n - 1) / n : 0, M = (double)pl->microbatches;
    double grads = frac * 4.0 * (double)st->local_params; /* one reduce-scatter (or all-gather) of fp32 */
    int T = pl->l.tp;
    double t = T > 1 ? 2.0 * (T - 1) / T * 4.0 * (double)st->tp_summed / link(r, 1, T) : 0;
    int overlap = pl->overlap_grad_reduce && pl->l.pp <= 1;
    switch (pl->sharding) {
    case DP_SHARD_NO_SHARD: /* all-reduce, bucket by bucket */
        return t + (overlap ? fmax(0, 2 * grads / bw - st->compute_bwd) : 2 * grads / bw);
    case DP_SHARD_OPTIM: /* reduce-scatter (overlappable), then the parameters' all-gather after the update */
        return t + (overlap ? fmax(0, grads / bw - st->compute_bwd) : grads / bw) + grads / bw;
    case DP_SHARD_OPTIM_GRADS: /* a unit's reduce-scatter after its backward, every micro-batch */
        return t + M * fmax(0, grads / bw - st->compute_bwd) + grads / bw;
    default: { /* ZeRO-3: + the blocks' gathers (fp32 pieces, made bf16 after), prefetched, before forward and backward */
        double gathers = 2 * frac * 4.0 * (double)st->block_params;
        return t + M * fmax(0, (grads + gathers) / bw - st->total) + grads / bw;
    }
    }
}

void plan_step_time(const PlanRequest *r, const PlanLayout *pl, const PlanStageTime *w, PlanTime *out) {
    memset(out, 0, sizeof *out);
    const PlanStageTime worst = *w;
    double M = (double)pl->microbatches;
    out->gemm = M * worst.gemm, out->attention = M * worst.attention, out->elementwise = M * worst.elementwise;
    out->recompute = M * worst.recompute, out->tp = M * worst.tp, out->cp = M * worst.cp, out->pp_p2p = M * worst.pp_p2p;
    out->bubble = pl->l.pp > 1 ? worst.total * (pl->l.pp - 1) / (pl->l.vp > 1 ? pl->l.vp : 1) : 0;
    out->dp = dp_time(r, pl, &worst);
    int n = pl->dp * pl->l.cp;
    double shard = pl->sharding == DP_SHARD_NO_SHARD ? (double)worst.local_params : ceil((double)worst.local_params / n);
    /* the bf16 copy of the new weights (dit_refresh_weights): under ZeRO-3 only the whole units' */
    double copied = pl->sharding == DP_SHARD_OPTIM_GRADS_PARAMS ? (double)(worst.local_params - worst.block_params)
                                                                : (double)worst.local_params;
    double copy = !r->dev.cpu ? 6.0 * copied : 0;
    out->optimizer = (ADAM_BYTES * shard + copy + (r->ema ? 12.0 * shard : 0)) / (r->dev.hbm_gb_s * 1e9);
    out->step = M * worst.total + out->bubble + out->dp + out->optimizer;
    double model_flops = 3 * r->sample_flops * (double)r->global_batch; /* the seeds' count: 3 x the forward */
    out->tokens_per_second_per_gpu = (double)r->global_batch * (double)r->seq / out->step / r->gpus;
    out->model_tflops_per_gpu = model_flops / out->step / r->gpus / 1e12;
    const char *names[PLAN_TIME_PARTS];
    double parts[PLAN_TIME_PARTS];
    plan_time_parts(out, names, parts);
    int k = 0;
    for (int i = 1; i < PLAN_TIME_PARTS; i++)
        if (parts[i] > parts[k]) k = i;
    out->dominant = names[k];
}


void plan_time_parts(const PlanTime *t, const char **names, double *seconds) {
    static const char *const NAMES[PLAN_TIME_PARTS] = {
        "GEMMs", "attention", "elementwise", "recomputation", "TP collectives", "CP attention traffic", "PP messages",
        "PP bubble", "DP gradient traffic", "optimizer"};
    double v[PLAN_TIME_PARTS] = {t->gemm, t->attention, t->elementwise, t->recompute, t->tp, t->cp, t->pp_p2p,
                                 t->bubble, t->dp, t->optimizer};
    for (int i = 0; i < PLAN_TIME_PARTS; i++) names[i] = NAMES[i], seconds[i] = v[i];
}
