/* Rank layout [DP][PP][CP][TP] and group membership (see groups.h). */
#include "groups.h"

#include <string.h>

vfm_status layout_init(ParallelLayout *l, int world, int rank, int tp, int pp, int cp) {
    memset(l, 0, sizeof *l);
    static const char *keys[] = {"model.tensor_model_parallel_size", "model.pipeline_model_parallel_size",
                                 "model.context_parallel_size"};
    const int sizes[] = {tp, pp, cp};
    for (int i = 0; i < 3; i++)
        if (sizes[i] < 1) return vfm_fail(VFM_ERR_USAGE, "%s is %d; it must be at least 1", keys[i], sizes[i]);
    if (world < 1 || rank < 0 || rank >= world)
        return vfm_fail(VFM_ERR_INTERNAL, "rank %d of world size %d", rank, world);
    long long model = (long long)tp * pp * cp;
    if (world % model != 0)
        return vfm_fail(VFM_ERR_USAGE, "world size %d is not divisible by TP·PP·CP = %lld (tensor %d × pipeline %d × context %d)",
                        world, model, tp, pp, cp);
    l->world = world;
    l->rank = rank;
    l->tp = tp;
    l->pp = pp;
    l->cp = cp;
    l->dp = world / (int)model;
    layout_coords(l, rank, &l->dp_rank, &l->pp_rank, &l->cp_rank, &l->tp_rank);
    return VFM_OK;
}

int layout_rank_of(const ParallelLayout *l, int dp, int pp, int cp, int tp) {
    return ((dp * l->pp + pp) * l->cp + cp) * l->tp + tp;
}

void layout_coords(const ParallelLayout *l, int rank, int *dp, int *pp, int *cp, int *tp) {
    *tp = rank % l->tp;
    rank /= l->tp;
    *cp = rank % l->cp;
    rank /= l->cp;
    *pp = rank % l->pp;
    *dp = rank / l->pp;
}

int group_size(const ParallelLayout *l, GroupKind kind) {
    switch (kind) {
    case GROUP_TP: return l->tp;
    case GROUP_CP: return l->cp;
    case GROUP_PP: return l->pp;
    case GROUP_DP: return l->dp;
    case GROUP_DP_CP: return l->dp * l->cp;
    default: return l->world;
    }
}

int group_members(const ParallelLayout *l, GroupKind kind, int rank, int *members) {
    int dp, pp, cp, tp, n = 0, self = 0;
    layout_coords(l, rank, &dp, &pp, &cp, &tp);
    /* walk the coordinates this kind varies, outermost first: ascending global rank */
    int d0 = dp, d1 = dp + 1, p0 = pp, p1 = pp + 1, c0 = cp, c1 = cp + 1, t0 = tp, t1 = tp + 1;
    switch (kind) {
    case GROUP_TP: t0 = 0, t1 = l->tp; break;
    case GROUP_CP: c0 = 0, c1 = l->cp; break;
    case GROUP_PP: p0 = 0, p1 = l->pp; break;
    case GROUP_DP: d0 = 0, d1 = l->dp; break;
    case GROUP_DP_CP: d0 = 0, d1 = l->dp, c0 = 0, c1 = l->cp; break;
    default: d0 = 0, d1 = l->dp, p0 = 0, p1 = l->pp, c0 = 0, c1 = l->cp, t0 = 0, t1 = l->tp; break;
    }
    for (int d = d0; d < d1; d++)
        for (int p = p0; p < p1; p++)
            for (int c = c0; c < c1; c++)
                for (int t = t0; t < t1; t++) {
                    int r = layout_rank_of(l, d, p, c, t);
                    if (r == rank) self = n;
                    members[n++] = r;
                }
    return self;
}

int cp_subgroup_members(const ParallelLayout *l, int a2a_size, int ring, int rank, int *members) {
    int dp, pp, cp, tp, n = 0, self = 0;
    layout_coords(l, rank, &dp, &pp, &cp, &tp);
    int a = cp % a2a_size, g = cp / a2a_size, rings = l->cp / a2a_size;
    for (int k = 0; k < (ring ? rings : a2a_size); k++) {
        int c = ring ? k * a2a_size + a : g * a2a_size + k;
        int r = layout_rank_of(l, dp, pp, c, tp);
        if (r == rank) self = n;
        members[n++] = r;
    }
    return self;
}

int ep_index_in_dp_cp(const ParallelLayout *l, int rank) {
    int dp, pp, cp, tp;
    layout_coords(l, rank, &dp, &pp, &cp, &tp);
    return dp * l->cp + cp;
}

int ep_subgroup_members(const ParallelLayout *l, int ep, int edp, int rank, int *members) {
    int dp, pp, cp, tp, n = 0, self = 0;
    layout_coords(l, rank, &dp, &pp, &cp, &tp);
    int q = dp * l->cp + cp, g = q / ep, e = q % ep;
    for (int k = 0; k < (edp ? l->dp * l->cp / ep : ep); k++) {
        int qk = edp ? k * ep + e : g * ep + k;
        int r = layout_rank_of(l, qk / l->cp, pp, qk % l->cp, tp);
        if (r == rank) self = n;
        members[n++] = r;
    }
    return self;
}

const char *group_kind_name(GroupKind kind) {
    static const char *names[] = {"tp", "cp", "pp", "dp", "dp×cp", "world"};
    return kind >= 0 && kind < GROUP_KIND_COUNT ? names[kind] : "?";
}
