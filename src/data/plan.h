/* The training stream plan (design §3 "Data"): an endless concatenation of per-epoch plans. The
 * plan of epoch e holds every usable sample exactly once and is a pure function of (seed, e, the
 * samples' padded token lengths): the order is shuffled (Philox Fisher–Yates, stream DATA) when
 * shuffling is on, cut into buffers of `buffer_size` samples, each buffer packed
 * first-fit-decreasing by padded length into bins of at most `budget` tokens (ties in the order),
 * and the bins shuffled within their buffer. Global pack g is the g-th bin of that stream;
 * replica r of R takes packs r, r+R, r+2R, ... */
#ifndef VFM_DATA_PLAN_H
#define VFM_DATA_PLAN_H

#include <stdint.h>

#include "core/error.h"

typedef struct PlanConfig {
    uint64_t seed;        /* rng.seed */
    int shuffle;          /* dataset.shuffle: shuffle the order and the bins */
    int64_t buffer_size;  /* dataset.packing_buffer_size */
    int64_t budget;       /* dataset.task_encoder_seq_length */
} PlanConfig;

typedef struct EpochPlan {
    int64_t epoch;
    int64_t n_items;      /* every usable sample once */
    int64_t n_packs;
    int64_t *items;       /* [n_items] usable-sample numbers 0..n-1, pack after pack */
    int64_t *pack_start;  /* [n_packs + 1] pack p is items[pack_start[p] .. pack_start[p+1]) */
} EpochPlan;

/* The plan of one epoch. lengths[n]: padded token length of each usable sample, each in [1, budget]. */
vfm_status plan_epoch(const PlanConfig *pc, const int32_t *lengths, int64_t n, int64_t epoch, EpochPlan *out);
void epoch_plan_free(EpochPlan *p);

/* First-fit-decreasing of lengths[n] into bins of `budget`: bin[i] gets the bin of item i; returns
 * the bin count. Items sort by length, longest first, ties in index order; each goes into the
 * first bin it fits. */
int64_t plan_first_fit_decreasing(const int32_t *lengths, int64_t n, int64_t budget, int64_t *bin);

/* The endless stream over a fixed set of samples. Not thread-safe: one caller at a time. */
typedef struct Plan Plan;
vfm_status plan_create(Plan **out, const PlanConfig *pc, const int32_t *lengths, int64_t n);
void plan_free(Plan *p);
/* Global pack g: its epoch, its index in that epoch, and its samples (*items points into the
 * plan and stays valid until the next plan_* call). */
vfm_status plan_pack(Plan *p, int64_t g, int64_t *epoch, int64_t *pack_in_epoch, const int64_t **items, int *n_items);
/* Packs in epoch e. */
vfm_status plan_epoch_packs(Plan *p, int64_t epoch, int64_t *n_packs);

#endif
