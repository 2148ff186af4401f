/* The trainer's packs on the model's device, one ahead: on CUDA the source builds its packs in
 * page-locked host memory (pack_source_pin), and when pack i is handed out the next pack is taken
 * from the source and its copy to the GPU issued on a copy stream of its own, so that copy overlaps
 * the compute of pack i; events order the copy before the compute that reads it, and the compute of
 * a slot's previous pack before the copy that overwrites it (two slots). On the CPU it is the
 * source's next() into one pack and views of it (no prefetch, nothing else changes).
 * Because a pack is taken from the source one early, the position to checkpoint is the one from
 * before that pack: pack_feed_get_state. */
#ifndef VFM_PACK_FEED_H
#define VFM_PACK_FEED_H

#include "data/pack/pack_tensors.h"
#include "data/loader/pack_source.h"

typedef struct PackFeed {
    PackSource *src;
    Device device;
    void *compute_stream;     /* where the packs' tensors are read (a cudaStream_t; NULL = legacy default) */
    void *copy_stream;        /* CUDA: the copies */
    Pack pack[2];
    PackTensors pt[2];
    void *copied[2], *used[2];/* CUDA events: slot j's copy done; the compute that read slot j done */
    int cur;                  /* the slot handed out last, -1 before the first */
    int ahead;                /* 1: slot cur^1 holds the next pack, taken and its copy issued */
    char *state_ahead;        /* the source's position from before the pack ahead (malloc'd) */
} PackFeed;

/* For packs of token_dim / text_dim values per row (the source's). dev DEV_CUDA pins the source's
 * packs and creates the stream and events; compute_stream: the ops' stream (ops_stream()). */
vfm_status pack_feed_init(PackFeed *f, PackSource *src, Device dev, void *compute_stream);
/* The next pack: *pack (host) and *pt (its tensors on the device, ready for work issued on the
 * compute stream after this call); both valid until the second call after this one. *wait += the
 * seconds spent waiting for the source. On CUDA the pack after it is taken and its copy issued. */
vfm_status pack_feed_next(PackFeed *f, const Pack **pack, const PackTensors **pt, double *wait);
/* The source's position as JSON (malloc'd), excluding a pack taken ahead. */
vfm_status pack_feed_get_state(PackFeed *f, char **json);
/* Waits for the copies in flight, then frees everything (the source stays the caller's). */
void pack_feed_free(PackFeed *f);

#endif
