/* The training stream plan (design §3 "Data"): an endless concatenation of per-epoch plans. The
 * plan of epoch e holds every usable sample exactly once and is a pure function of (seed, e, the
 * samples' padded token lengths): the order is shuffled (Philox Fisher–Yates, stream DATA) when
 * shuffling is on, cut into buffers of `buffer_size` samples, each buffer packed
 * first-fit-decreasing by padded length into bins of at most `budget` tokens (ties in the order),
 * and the bins shuffled within their buffer. Global pack g is the g-th bin of that stream;
 * replica r of R takes packs r, r+R, r+2R, ...
 *
 * A blend of several datasets (a metadataset's `blend` / `blend_epochized`) is planned the same
 * way over a stream of samples whose datasets are drawn at random from the seed, as Energon draws
 * them: each dataset repeats its own shuffled epochs; position i of the blended stream draws its
 * dataset with probability ∝ weight (Philox, stream DATA, keyed by the chunk and i); the stream is
 * cut into chunks of Σ dataset sizes (`blend`) or of each dataset's size × repetitions
 * (`blend_epochized`: within a chunk a dataset leaves the draw once it gave its share), and a chunk
 * is this plan's "epoch": packed by buffers as above. Every item carries the epoch of its own
 * dataset (that sample's uid epoch). */
#ifndef VFM_DATA_PLAN_H
#define VFM_DATA_PLAN_H

#include <stdint.h>

#include "core/error.h"

/* One dataset of a blend: its usable samples are the numbers [first, first + count). */
typedef struct PlanSource {
    int64_t first, count;
    double weight;        /* PLAN_BLEND_WEIGHT: relative weight (> 0) */
    double repetitions;   /* PLAN_BLEND_EPOCHIZED: samples per chunk = count·repetitions */
    uint64_t id;          /* keys its own epoch shuffles (stable: not a path) */
} PlanSource;

enum { PLAN_SINGLE = 0, PLAN_BLEND_WEIGHT = 1, PLAN_BLEND_EPOCHIZED = 2 };

typedef struct PlanConfig {
    uint64_t seed;        /* rng.seed */
    int shuffle;          /* dataset.shuffle: shuffle the order and the bins */
    int64_t buffer_size;  /* dataset.packing_buffer_size */
    int64_t budget;       /* dataset.task_encoder_seq_length */
} PlanConfig;

typedef struct PlanBlend {
    int mode;             /* PLAN_BLEND_WEIGHT or PLAN_BLEND_EPOCHIZED */
    int n_sources;        /* the datasets, covering the usable numbers 0..n-1 in order */
    const PlanSource *sources;
} PlanBlend;

typedef struct EpochPlan {
    int64_t epoch;
    int64_t n_items;      /* every usable sample once (a blend: the chunk's samples) */
    int64_t n_packs;
    int64_t *items;       /* [n_items] usable-sample numbers 0..n-1, pack after pack */
    int64_t *item_epoch;  /* [n_items] the epoch of each item's own dataset (= epoch unless blended) */
    int64_t *pack_start;  /* [n_packs + 1] pack p is items[pack_start[p] .. pack_start[p+1]) */
} EpochPlan;

/* The plan of one epoch of a single dataset. lengths[n]: padded token length of each usable
 * sample, each in [1, budget]. */
vfm_status plan_epoch(const PlanConfig *pc, const int32_t *lengths, int64_t n, int64_t epoch, EpochPlan *out);
void epoch_plan_free(EpochPlan *p);

/* First-fit-decreasing of lengths[n] into bins of `budget`: bin[i] gets the bin of item i; returns
 * the bin count. Items sort by length, longest first, ties in index order; each goes into the
 * first bin it fits. */
int64_t plan_first_fit_decreasing(const int32_t *lengths, int64_t n, int64_t budget, int64_t *bin);

/* The endless stream over a fixed set of samples (a single dataset or a blend). Not thread-safe:
 * one caller at a time. */
typedef struct Plan Plan;
vfm_status plan_create(Plan **out, const PlanConfig *pc, const int32_t *lengths, int64_t n);
/* The same over a blend (blend NULL or mode PLAN_SINGLE: plan_create). */
vfm_status plan_create_blend(Plan **out, const PlanConfig *pc, const PlanBlend *blend, const int32_t *lengths, int64_t n);
void plan_free(Plan *p);
/* Global pack g: its epoch (a blend: its chunk), its index in that epoch, its samples and their
 * own epochs (*items, *item_epochs point into the plan and stay valid until the next plan_* call;
 * item_epochs may be NULL). */
vfm_status plan_pack(Plan *p, int64_t g, int64_t *epoch, int64_t *pack_in_epoch, const int64_t **items,
                     const int64_t **item_epochs, int *n_items);
/* Packs in epoch e. */
vfm_status plan_epoch_packs(Plan *p, int64_t epoch, int64_t *n_packs);

#endif
