/* The tensor-parallel region of a token mixer (layer.h): Megatron's column-parallel linears read
 * the region's rows, a row-parallel linear closes it with a sum over TP; under sequence
 * parallelism the rows are gathered on the way in and the sum is a reduce-scatter on the way out. */
#include "model/dit_internal.h"

vfm_status region_enter(const DiT *m, const Acts *a, const Tensor *xm, Tensor *full) {
    TpContext tpc = dit_tp_context(m);
    *full = tpc.sequence_parallel ? a->xm_full : *xm;
    return tp_region_enter_forward(&tpc, full, xm);
}

vfm_status region_exit(const DiT *m, const Acts *a, Tensor *local, const Tensor *x, const Linear *l, int skip) {
    TpContext tpc = dit_tp_context(m);
    Tensor partial = tpc.sequence_parallel ? a->partial : *local;
    VFM_TRY(linear_forward(m, &partial, NULL, x, l, ACT_NONE));
    if (skip) return tp_sp_scatter(&tpc, local, &partial);
    return tp_region_exit_forward(&tpc, local, &partial);
}

vfm_status region_exit_backward(const DiT *m, Acts *a, Tensor *dpartial) {
    TpContext tpc = dit_tp_context(m);
    *dpartial = tpc.sequence_parallel ? a->d_partial : a->d_branch;
    return tp_region_exit_backward(&tpc, dpartial, &a->d_branch);
}

vfm_status region_enter_backward(const DiT *m, Acts *a) {
    TpContext tpc = dit_tp_context(m);
    return tp_region_enter_backward(&tpc, &a->d_xm, &a->d_xm_full);
}

/* A collective over n ranks counts at its ring volume per rank: all-reduce 2(n-1)/n of the buffer,
 * all-gather and reduce-scatter (n-1)/n of the whole each (docs/parallel.md). */
void region_comm_bytes(const DiT *m, double r, double b, double *fwd, double *bwd) {
    int T = m->par.tp, sp = m->par.sequence_parallel && T > 1;
    double share = T > 1 ? (double)(T - 1) / T : 0, D = m->cfg.hidden;
    *fwd = 2 * share * r * D * b;              /* all-reduce, or all-gather + reduce-scatter */
    *bwd = (sp ? 3 : 2) * share * r * D * b;   /* + the re-gather under SP */
}
