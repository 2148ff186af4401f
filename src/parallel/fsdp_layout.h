/* The unit layout of ZeRO-2/3 (fsdp.h "Units"): one flat unit per transformer block, one for
 * the entries before the blocks and one for those after them, each padded to a multiple of n
 * ranks. A pure function of the table, the blocks and n, read by the FSDP runtime (fsdp.c) and
 * by the memory figures of each sharding strategy (sharding.c). */
#ifndef VFM_FSDP_LAYOUT_H
#define VFM_FSDP_LAYOUT_H

#include <stdint.h>

#include "core/error.h"
#include "model/params.h"
#include "parallel/pp_stage.h"

typedef struct FsdpUnit {
    int first_entry, end_entry;  /* entries [first_entry, end_entry) */
    int64_t begin, end;          /* flat elements [begin, end) */
    int64_t shard;               /* S_u: each rank's piece, padded */
    int64_t slot;                /* where this unit's piece sits in the rank's piece buffers */
    int block;                   /* block number, or -1 (embedders, final layer) */
    int sharded_params;          /* ZeRO-3 block unit: parameters gathered on demand */
} FsdpUnit;

/* The unit layout: a pure function of the table, the blocks and n. */
typedef struct FsdpLayout {
    FsdpUnit *units;
    int n_units, n;
    int64_t slots;               /* Σ S_u: the length of a rank's piece buffers */
    int64_t max_unit_padded;     /* max n·S_u over all units */
    int64_t max_block_padded;    /* max n·S_u over the block units (ZeRO-3 gather buffers) */
    int64_t unsharded_params;    /* elements of the units that stay whole under ZeRO-3 */
} FsdpLayout;

/* shard_params: 1 for ZeRO-3 (block units' parameters sharded). */
vfm_status fsdp_layout_init(FsdpLayout *l, const ParamTable *t, const PpBlocks *blocks, int n, int shard_params);
void fsdp_layout_free(FsdpLayout *l);
int fsdp_layout_unit_of_entry(const FsdpLayout *l, int entry);
/* Rank j's piece of unit u, real elements only: flat [*lo, *hi) (empty for a tail rank). */
void fsdp_unit_piece(const FsdpUnit *u, int j, int64_t *lo, int64_t *hi);

#endif
