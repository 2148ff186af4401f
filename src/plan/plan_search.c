/* The search over layouts (plan.h plan_search). Every combination of
 *   TP  the divisors of a node's GPUs that split the heads, kv heads and MLP (dit_check_parallel);
 *   PP  the divisors of what is left, up to 8 and the number of blocks, V = 1 … 4 (L ≥ P·V, M ≥ P
 *       for V > 1);
 *   SP  on and off (TP > 1);
 *   CP  the divisors of what is left, with each cp_comm_type whose head rules hold (a2a+p2p with the
 *       all-to-all inside a node, A = GPUs per node / TP, and the ring across nodes);
 *   DP  what is left, when it divides the global batch, with each sharding strategy (ZeRO-2/3 not
 *       with PP, as the trainer refuses it);
 *   recomputation: none; when none does not fit, selective, full block n with the smallest n that
 *       fits (memory falls as n grows), and full uniform 1 — a plan that fits without recomputing
 *       is never slower, so the others are not kept beside it;
 * each kept to the keys the user fixed. Those that fit come first, fastest first; then the others,
 * closest to fitting first. */
#include <stdlib.h>
#include <string.h>

#include "plan/plan_internal.h"

static int cmp_result(const void *a, const void *b) {
    const PlanResult *x = a, *y = b;
    if (x->fits != y->fits) return y->fits - x->fits;
    double kx = x->fits ? x->time.step : x->over_bytes, ky = y->fits ? y->time.step : y->over_bytes;
    return kx < ky ? -1 : kx > ky ? 1 : 0;
}

static vfm_status keep(PlanList *out, const PlanResult *res) {
    if (out->n == out->cap) {
        int cap = out->cap ? 2 * out->cap : 256;
        PlanResult *p = realloc(out->items, (size_t)cap * sizeof *p);
        if (!p) return vfm_fail(VFM_ERR_NOMEM, "plan: %d layouts", cap);
        out->items = p, out->cap = cap;
    }
    out->items[out->n++] = *res;
    return VFM_OK;
}

/* Evaluates pl on its structure's described stages; VFM_ERR_USAGE (a layout that does not build) is
 * not an error of the search. */
static vfm_status try_layout(const PlanRequest *r, const PlanLayout *pl, PlanStages *stages, PlanList *out, PlanResult *res,
                             int *ok) {
    *ok = 0;
    vfm_status s = plan_evaluate_on(r, pl, stages, res);
    if (s == VFM_ERR_USAGE) {
        vfm_clear_error();
        return VFM_OK;
    }
    VFM_TRY(s);
    out->considered++;
    *ok = 1;
    return VFM_OK;
}

/* The blocks of the largest pipeline chunk (recompute_resolve's bound). */
static int chunk_blocks(const PlanRequest *r, const PlanLayout *pl) {
    int C = pl->l.pp * (pl->l.vp > 1 ? pl->l.vp : 1);
    return (r->model.layers + C - 1) / C;
}

/* The recomputation plans of one structure and strategy (the header's rule), or the user's. */
static vfm_status search_recompute(const PlanRequest *r, PlanLayout pl, PlanStages *stages, PlanList *out) {
    PlanResult res;
    int ok, n = chunk_blocks(r, &pl);
    if (r->fixed.recompute) {
        if (recompute_resolve(r->fixed.rc_granularity, r->fixed.rc_method, r->fixed.rc_layers, n, &pl.rc) != VFM_OK) {
            vfm_clear_error();
            return VFM_OK;
        }
        VFM_TRY(try_layout(r, &pl, stages, out, &res, &ok));
        return ok ? keep(out, &res) : VFM_OK;
    }
    memset(&pl.rc, 0, sizeof pl.rc);
    VFM_TRY(try_layout(r, &pl, stages, out, &res, &ok));
    if (!ok) return VFM_OK;
    VFM_TRY(keep(out, &res));
    if (res.fits) return VFM_OK;
    pl.rc = (RecomputeConfig){RECOMPUTE_SELECTIVE, RECOMPUTE_METHOD_NONE, 0};
    VFM_TRY(try_layout(r, &pl, stages, out, &res, &ok));
    if (ok) VFM_TRY(keep(out, &res));
    /* full block k: the smallest k that fits, by bisection */
    int lo = 1, hi = n, best = 0;
    PlanResult best_res;
    while (lo <= hi) {
        int k = (lo + hi) / 2;
        pl.rc = (RecomputeConfig){RECOMPUTE_FULL, RECOMPUTE_BLOCK, k};
        VFM_TRY(try_layout(r, &pl, stages, out, &res, &ok));
        if (ok && res.fits) best = k, best_res = res, hi = k - 1;
        else lo = k + 1;
    }
    if (best) VFM_TRY(keep(out, &best_res));
    if (best != n) { /* uniform 1 keeps less than any block k (one input per block, one group's scratch) */
        pl.rc = (RecomputeConfig){RECOMPUTE_FULL, RECOMPUTE_UNIFORM, 1};
        VFM_TRY(try_layout(r, &pl, stages, out, &res, &ok));
        if (ok) VFM_TRY(keep(out, &res));
    }
    return VFM_OK;
}

static int fixed_ok(int fixed, int v) { return !fixed || fixed == v; }

static vfm_status search_dp(const PlanRequest *r, PlanLayout pl, PlanStages *stages, PlanList *out) {
    int rest = r->gpus / (pl.l.tp * pl.l.cp * pl.l.pp);
    pl.dp = rest;
    if (r->global_batch % rest != 0) return VFM_OK;
    pl.microbatches = r->global_batch / rest;
    if (pl.l.vp > 1 && pl.microbatches < pl.l.pp) return VFM_OK;
    pl.overlap_grad_reduce = r->fixed.overlap_grad_reduce ? r->fixed.overlap_grad_reduce == 2 : 1;
    for (int s = DP_SHARD_NO_SHARD; s <= DP_SHARD_OPTIM_GRADS_PARAMS; s++) {
        if (!fixed_ok(r->fixed.sharding, s + 1)) continue;
        if (s >= DP_SHARD_OPTIM_GRADS && pl.l.pp > 1) continue;
        pl.sharding = (DpSharding)s;
        VFM_TRY(search_recompute(r, pl, stages, out));
    }
    return VFM_OK;
}

/* SP, CP and its mode over the stages of one (TP, PP, V), described once: they change only where a
 * pack's rows go, which the described models read from their DiTParallel (plan_relayout). */
static vfm_status search_rows(const PlanRequest *r, PlanLayout pl, PlanStages *stages, PlanList *out) {
    const DiTConfig *c = &r->model;
    int rest = r->gpus / (pl.l.tp * pl.l.pp);
    for (int sp = pl.l.tp > 1; sp >= 0; sp--) {
        if (pl.l.tp > 1 && !fixed_ok(r->fixed.sp, sp + 1)) continue;
        for (int C = 1; C <= rest && C <= 64; C++) {
            if (rest % C || !fixed_ok(r->fixed.cp, C)) continue;
            int dp = rest / C;
            if (r->global_batch % dp || (pl.l.vp > 1 && r->global_batch / dp < pl.l.pp)) continue;
            for (int t = CP_COMM_P2P; t <= CP_COMM_ALL_GATHER; t++) {
                if (C == 1 && t != CP_COMM_P2P) break;
                if (C > 1 && !fixed_ok(r->fixed.cp_type, t + 1)) continue;
                int A = 0;
                if (t == CP_COMM_A2A_P2P) { /* the all-to-all inside a node, the ring across */
                    A = r->fixed.a2a_size ? r->fixed.a2a_size : r->gpus_per_node / pl.l.tp;
                    if (A < 2 || A >= C || C % A) continue;
                }
                if (dit_check_parallel(c, pl.l.tp, sp, C, (CpCommType)t, t == CP_COMM_A2A ? C : A) != VFM_OK) {
                    vfm_clear_error();
                    continue;
                }
                pl.l.sp = sp, pl.l.cp = C, pl.l.cp_type = (CpCommType)t, pl.l.a2a_size = A;
                plan_stages_relayout(&pl, stages);
                VFM_TRY(search_dp(r, pl, stages, out));
            }
        }
    }
    return VFM_OK;
}

/* One (TP, PP, V): its stages described once (plan_stages_describe). */
static vfm_status search_structure(const PlanRequest *r, PlanLayout pl, PlanList *out) {
    PlanStages stages;
    vfm_status s = plan_stages_describe(r, &pl, &stages);
    if (s == VFM_ERR_USAGE) { /* this structure does not build */
        vfm_clear_error();
        return VFM_OK;
    }
    VFM_TRY(s);
    s = search_rows(r, pl, &stages, out);
    plan_stages_free(&stages);
    return s;
}

static vfm_status search_pp(const PlanRequest *r, PlanLayout pl, PlanList *out) {
    int rest = r->gpus / pl.l.tp;
    for (int P = 1; P <= rest && P <= 8 && P <= r->model.layers; P++) {
        if (rest % P || !fixed_ok(r->fixed.pp, P)) continue;
        for (int V = 1; V <= (P > 1 ? 4 : 1); V++) {
            if (P * V > r->model.layers || !fixed_ok(r->fixed.vp, V)) continue;
            pl.l.pp = P, pl.l.vp = V;
            VFM_TRY(search_structure(r, pl, out));
        }
    }
    return VFM_OK;
}

vfm_status plan_search(const PlanRequest *req, PlanList *out) {
    memset(out, 0, sizeof *out);
    PlanRequest copy = *req, *r = &copy;
    plan_request_flops(r);
    if (r->gpus < 1) return vfm_fail(VFM_ERR_USAGE, "--gpus %d: at least one GPU", r->gpus);
    vfm_status s = VFM_OK;
    for (int T = 1; T <= r->gpus_per_node && T <= r->gpus && s == VFM_OK; T++) {
        if (r->gpus_per_node % T || r->gpus % T || !fixed_ok(r->fixed.tp, T)) continue;
        if (dit_check_parallel(&r->model, T, 0, 1, CP_COMM_P2P, 0) != VFM_OK) {
            vfm_clear_error();
            continue;
        }
        PlanLayout pl;
        memset(&pl, 0, sizeof pl);
        pl.l.tp = T, pl.l.cp = 1;
        s = search_pp(r, pl, out);
    }
    if (s != VFM_OK) {
        plan_list_free(out);
        return s;
    }
    if (out->n == 0) {
        plan_list_free(out);
        return vfm_fail(VFM_ERR_USAGE, "no layout of %d GPU%s runs this model: the global batch (%lld packs) must divide "
                        "by the data-parallel size, TP by the heads, kv heads and MLP width, and the fixed keys must "
                        "hold (--gpus, --global-batch, the keys given)", r->gpus, r->gpus > 1 ? "s" : "",
                        (long long)r->global_batch);
    }
    qsort(out->items, (size_t)out->n, sizeof *out->items, cmp_result);
    for (int i = 0; i < out->n; i++) out->n_fit += out->items[i].fits;
    return VFM_OK;
}

void plan_list_free(PlanList *l) {
    free(l->items);
    memset(l, 0, sizeof *l);
}
