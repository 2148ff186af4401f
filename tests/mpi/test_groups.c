/* Rank layout [DP][PP][CP][TP]: coordinates, member lists, the not-divisible error, and one comm
 * per group at this job's world size. */
#include <string.h>

#include "mpi_test.h"
#include "parallel/groups.h"

static void check_members(const ParallelLayout *l, GroupKind kind, int rank, const int *want, int n) {
    int got[64];
    CHECK(group_size(l, kind) == n);
    int self = group_members(l, kind, rank, got);
    for (int i = 0; i < n; i++)
        CHECK_MSG(got[i] == want[i], "%s group of rank %d: member %d is %d, expected %d", group_kind_name(kind), rank, i,
                  got[i], want[i]);
    CHECK(got[self] == rank);
}

TEST(groups_layout_tp2_pp2) {
    ParallelLayout l;
    REQUIRE_OK(layout_init(&l, 8, 5, 2, 2, 1));
    CHECK(l.dp == 2);
    CHECK(l.dp_rank == 1 && l.pp_rank == 0 && l.cp_rank == 0 && l.tp_rank == 1);
    check_members(&l, GROUP_TP, 5, (int[]){4, 5}, 2);
    check_members(&l, GROUP_PP, 5, (int[]){5, 7}, 2);
    check_members(&l, GROUP_DP, 5, (int[]){1, 5}, 2);
    check_members(&l, GROUP_CP, 5, (int[]){5}, 1);
    check_members(&l, GROUP_DP_CP, 5, (int[]){1, 5}, 2);
    check_members(&l, GROUP_WORLD, 5, (int[]){0, 1, 2, 3, 4, 5, 6, 7}, 8);
}

TEST(groups_layout_tp2_cp2) {
    ParallelLayout l;
    REQUIRE_OK(layout_init(&l, 8, 3, 2, 1, 2));
    CHECK(l.dp == 2 && l.dp_rank == 0 && l.cp_rank == 1 && l.tp_rank == 1 && l.pp_rank == 0);
    check_members(&l, GROUP_TP, 3, (int[]){2, 3}, 2);
    check_members(&l, GROUP_CP, 3, (int[]){1, 3}, 2);
    check_members(&l, GROUP_DP, 3, (int[]){3, 7}, 2);
    check_members(&l, GROUP_DP_CP, 3, (int[]){1, 3, 5, 7}, 4);
    check_members(&l, GROUP_PP, 3, (int[]){3}, 1);
}

/* Expert parallelism carved out of DP×CP (q = dp·CP + cp): at TP2 × CP2 × DP2 (world 8), EP2 pairs
 * the CP ranks of one replica and the expert-data-parallel group joins the replicas; EP4 spans both
 * replicas. Every member list holds the rank itself and agrees on its EP index. */
TEST(groups_expert_parallel_within_dp_cp) {
    ParallelLayout l;
    REQUIRE_OK(layout_init(&l, 8, 3, 2, 1, 2)); /* rank 3: dp 0, cp 1, tp 1 */
    int got[8];
    CHECK(ep_index_in_dp_cp(&l, 3) == 1 && ep_index_in_dp_cp(&l, 7) == 3);
    int self = ep_subgroup_members(&l, 2, 0, 3, got);
    CHECK_MSG(self == 1 && got[0] == 1 && got[1] == 3, "EP2 group of rank 3: %d, %d", got[0], got[1]);
    self = ep_subgroup_members(&l, 2, 1, 3, got);
    CHECK_MSG(self == 0 && got[0] == 3 && got[1] == 7, "EP2's expert-data-parallel group of rank 3: %d, %d", got[0], got[1]);
    self = ep_subgroup_members(&l, 4, 0, 3, got);
    CHECK(self == 1 && got[0] == 1 && got[1] == 3 && got[2] == 5 && got[3] == 7);
    self = ep_subgroup_members(&l, 4, 1, 3, got);
    CHECK(self == 0 && got[0] == 3);
    REQUIRE_OK(layout_init(&l, 4, 2, 1, 1, 1)); /* DP4: EP2 pairs consecutive DP ranks */
    ep_subgroup_members(&l, 2, 0, 2, got);
    CHECK(got[0] == 2 && got[1] == 3);
    ep_subgroup_members(&l, 2, 1, 2, got);
    CHECK(got[0] == 0 && got[1] == 2);
}

/* For many layouts: coordinates round-trip, and each kind's groups partition the world into
 * groups of equal size whose members agree on the member list and differ only in that kind's
 * coordinates. */
TEST(groups_layout_properties) {
    static const int layouts[][4] = {{1, 1, 1, 1}, {2, 1, 1, 1}, {2, 2, 1, 1}, {4, 2, 1, 1}, {4, 1, 2, 1},
                                     {4, 1, 1, 2}, {8, 2, 2, 2}, {16, 2, 2, 2}, {12, 2, 1, 3}, {24, 3, 2, 2}};
    for (size_t k = 0; k < sizeof layouts / sizeof layouts[0]; k++) {
        int world = layouts[k][0];
        ParallelLayout l;
        REQUIRE_OK(layout_init(&l, world, 0, layouts[k][1], layouts[k][2], layouts[k][3]));
        CHECK(l.dp * l.tp * l.pp * l.cp == world);
        for (int r = 0; r < world; r++) {
            int c[4];
            layout_coords(&l, r, &c[0], &c[1], &c[2], &c[3]);
            CHECK(layout_rank_of(&l, c[0], c[1], c[2], c[3]) == r);
            CHECK(c[3] == r % l.tp); /* TP innermost */
        }
        for (int kind = 0; kind < GROUP_KIND_COUNT; kind++) {
            int n = group_size(&l, (GroupKind)kind), covered = 0;
            for (int r = 0; r < world; r++) {
                int m[64], m2[64];
                group_members(&l, (GroupKind)kind, r, m);
                for (int i = 1; i < n; i++) CHECK(m[i] > m[i - 1]);
                for (int i = 0; i < n; i++) {
                    group_members(&l, (GroupKind)kind, m[i], m2);
                    CHECK(memcmp(m, m2, (size_t)n * sizeof *m) == 0);
                    int a[4], b[4];
                    layout_coords(&l, r, &a[0], &a[1], &a[2], &a[3]);
                    layout_coords(&l, m[i], &b[0], &b[1], &b[2], &b[3]);
                    /* coordinates a group may vary: dp, pp, cp, tp */
                    static const int varies[GROUP_KIND_COUNT][4] = {
                        {0, 0, 0, 1}, {0, 0, 1, 0}, {0, 1, 0, 0}, {1, 0, 0, 0}, {1, 0, 1, 0}, {1, 1, 1, 1}};
                    for (int d = 0; d < 4; d++) CHECK(varies[kind][d] || a[d] == b[d]);
                }
                if (m[0] == r) covered += n; /* count each group once, at its first member */
            }
            CHECK_MSG(covered == world, "layout %d, %s groups cover %d of %d ranks", (int)k,
                      group_kind_name((GroupKind)kind), covered, world);
        }
    }
}

TEST(groups_world_not_divisible) {
    ParallelLayout l;
    CHECK(layout_init(&l, 6, 0, 2, 2, 1) == VFM_ERR_USAGE);
    CHECK_MSG(strcmp(vfm_last_error(), "world size 6 is not divisible by TP·PP·CP = 4 (tensor 2 × pipeline 2 × context 1)") == 0,
              "message: %s", vfm_last_error());
    CHECK(layout_init(&l, 4, 0, 1, 1, 3) == VFM_ERR_USAGE);
    CHECK_MSG(strcmp(vfm_last_error(), "world size 4 is not divisible by TP·PP·CP = 3 (tensor 1 × pipeline 1 × context 3)") == 0,
              "message: %s", vfm_last_error());
    CHECK(layout_init(&l, 4, 0, 0, 1, 1) == VFM_ERR_USAGE);
    CHECK(strstr(vfm_last_error(), "model.tensor_model_parallel_size") != NULL);
    CHECK(layout_init(&l, 6, 0, 3, 1, 2) == VFM_OK && l.dp == 1);
}

/* Every group of a few layouts at this world size gets a comm; an all-reduce of the global ranks
 * over it gives the sum of its member list, with both reductions. */
TEST(groups_comms_at_world_size) {
    static const int layouts[][3] = {{1, 1, 1}, {2, 1, 1}, {1, 2, 1}, {1, 1, 2}, {2, 2, 1}, {2, 1, 2}, {4, 1, 1}};
    int world = mt_world(), tried = 0;
    for (size_t k = 0; k < sizeof layouts / sizeof layouts[0]; k++) {
        int tp = layouts[k][0], pp = layouts[k][1], cp = layouts[k][2];
        if (world % (tp * pp * cp)) continue;
        tried++;
        ParallelLayout l;
        REQUIRE_OK(layout_init(&l, world, mt_rank(), tp, pp, cp));
        for (int kind = 0; kind < GROUP_KIND_COUNT; kind++) {
            Comm c;
            REQUIRE_OK(comm_create_group(&c, &l, (GroupKind)kind, COMM_BACKEND_MPI));
            int m[64];
            int self = group_members(&l, (GroupKind)kind, mt_rank(), m);
            CHECK(c.size == group_size(&l, (GroupKind)kind) && c.rank == self);
            int64_t want = 0;
            for (int i = 0; i < c.size; i++) want += m[i];
            int64_t got[2] = {mt_rank(), mt_rank()};
            CHECK_OK(comm_all_reduce(&c, &got[0], 1, DT_I64, COMM_SUM));
            CHECK_OK(comm_all_reduce(&c, &got[1], 1, DT_I64, COMM_SUM_ORDERED));
            CHECK_MSG(got[0] == want && got[1] == want, "layout tp%d pp%d cp%d, %s group: sums %lld %lld, want %lld", tp, pp,
                      cp, group_kind_name((GroupKind)kind), (long long)got[0], (long long)got[1], (long long)want);
            comm_free(&c);
        }
    }
    CHECK(tried >= 1);
}
