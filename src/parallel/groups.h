/* Process groups (design §4): global ranks laid out [DP][PP][CP][TP], TP innermost, as
 * Megatron-LM orders them:
 *     rank = ((dp·PP + pp)·CP + cp)·TP + tp
 * so a TP group is TP consecutive ranks (one node's NVLink domain), and DP = world / (TP·PP·CP).
 * A group of a kind holds the ranks that differ only in that kind's coordinate(s); members are
 * listed in ascending global rank, which is the "rank order" of every ordered reduction. */
#ifndef VFM_GROUPS_H
#define VFM_GROUPS_H

#include "core/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    GROUP_TP,    /* tensor parallel: same dp, pp, cp */
    GROUP_CP,    /* context parallel: same dp, pp, tp */
    GROUP_PP,    /* pipeline stages: same dp, cp, tp */
    GROUP_DP,    /* data-parallel replicas: same pp, cp, tp */
    GROUP_DP_CP, /* DP×CP (gradients reduce and ZeRO shards here): same pp, tp */
    GROUP_WORLD,
    GROUP_KIND_COUNT
} GroupKind;

typedef struct ParallelLayout {
    int world, rank;                         /* this process */
    int tp, pp, cp, dp;                      /* sizes */
    int tp_rank, pp_rank, cp_rank, dp_rank;  /* this process's coordinates */
} ParallelLayout;

/* Sizes must be >= 1 and TP·PP·CP must divide world; otherwise VFM_ERR_USAGE with a message such as
 * "world size 6 is not divisible by TP·PP·CP = 4 (tensor 2 × pipeline 2 × context 1)". */
vfm_status layout_init(ParallelLayout *l, int world, int rank, int tp, int pp, int cp);
int layout_rank_of(const ParallelLayout *l, int dp, int pp, int cp, int tp);
void layout_coords(const ParallelLayout *l, int rank, int *dp, int *pp, int *cp, int *tp);
int group_size(const ParallelLayout *l, GroupKind kind);
/* Members (ascending global ranks, group_size of them) of the `kind` group that holds `rank`;
 * returns the index of `rank` among them. */
int group_members(const ParallelLayout *l, GroupKind kind, int rank, int *members);
/* Hierarchical context parallelism (a2a+p2p, model.hierarchical_context_parallel_sizes = [A, R],
 * A·R = CP): CP rank c = ring·A + a2a, so an all-to-all group is A consecutive CP ranks (one
 * node's NVLink domain when TP·A ≤ GPUs per node) and a ring joins the ranks with the same a2a
 * index. Members (ascending global ranks) of the all-to-all group (ring = 0) or of the ring
 * (ring = 1) holding `rank`; returns the index of `rank` among them. a2a_size must divide CP. */
int cp_subgroup_members(const ParallelLayout *l, int a2a_size, int ring, int rank, int *members);
/* Expert parallelism (model.expert_model_parallel_size = EP, EP divides DP·CP; EP carved out of
 * DP×CP as Megatron-core does): a rank's index in its DP×CP group is q = dp·CP + cp (ascending
 * global rank); EP consecutive indices form an EP group (same pp, tp; q / EP equal) and EP rank
 * q mod EP holds that share of the experts. Members (ascending global ranks) of the EP group
 * (edp = 0) or of the expert-data-parallel group (edp = 1: same pp, tp and q mod EP; DP·CP/EP
 * ranks, CP included) holding `rank`; returns the index of `rank` among them. */
int ep_index_in_dp_cp(const ParallelLayout *l, int rank);
int ep_subgroup_members(const ParallelLayout *l, int ep, int edp, int rank, int *members);
/* "tp", "cp", "pp", "dp", "dp×cp", "world" */
const char *group_kind_name(GroupKind kind);

#ifdef __cplusplus
}
#endif
#endif
