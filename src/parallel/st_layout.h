/* The layouts of ST-DiT's factorised attention on one rank (docs/parallel.md "ST-DiT's hybrid
 * parallelism"; research/context-parallel.md §6). A sample's tokens are frames (t-major, n = h·w
 * tokens each); spatial attention runs over the n tokens of one frame, temporal attention over the
 * t tokens at one position. Under CP every sample is split by whole frames: its slot holds P·F
 * frame slots (t padded up to a multiple of P), CP rank r holding frames [r·F, (r+1)·F) — the
 * contiguous chunks of cp_layout.h, whose real rows are whole frames. So:
 *
 *  spatial   attention runs over the frames of this rank's chunk: local (`spatial`, one part), or
 *            under plain p2p through the ring over `spatial` (P parts, diagonal: the ring moves
 *            every K/V block but a frame only meets itself);
 *  temporal  needs every frame of a position. Hybrid: an all-to-all regroups the rows from
 *            "frames split" to "positions split" (rank ρ gets positions [⌊ρn/P⌋, ⌊(ρ+1)n/P⌋) of
 *            every sample, all its real frames, as runs of t rows: the `temporal` layout, local),
 *            and the inverse brings the result back. Plain p2p (and one rank): a local permutation
 *            to position-major runs of this rank's F frame slots, and the ring over `temporal`
 *            (P parts) — one rank: the runs are the whole positions.
 *
 * The row moves are row gathers (op_embedding_forward as a lookup of rows) by index tensors made
 * here on the host for the pack, and, for the hybrid, one all-to-all (posted as point-to-point
 * exchanges before the local rows move, so a GPU overlaps them). */
#ifndef VFM_ST_LAYOUT_H
#define VFM_ST_LAYOUT_H

#include "parallel/comm.h"
#include "parallel/cp_layout.h"

/* One sample on this rank: its chunk at local row `off` holds `frames` frame slots of `n` tokens
 * (row off + φ·n + p is frame rank·frames + φ, position p) of the sample's `t` real frames; a frame
 * slot at or past t is padding. Every rank has the same off and frames. */
typedef struct StSample {
    int64_t off;
    int frames, n, t;
} StSample;

typedef struct StLayout {
    int P, rank;             /* the CP size and this rank */
    int all_to_all;          /* 1: the hybrid's all-to-all (P > 1); 0: a local permutation */
    int64_t rows;            /* R: rows of the frame layout (this rank's chunk set) */
    int64_t rows_t;          /* rows of the temporal layout (R unless all_to_all) */
    CpChunks spatial;        /* frames: one part, or P parts (ring: diagonal) */
    CpChunks temporal;       /* position runs: one part (local), or P parts (ring) */
    int spatial_ring, temporal_ring; /* attention through the CP ring over the P parts */
    Device device;
    /* local permutation: Y = X[perm], X = Y[inv] (bijections of R rows) */
    Tensor perm, inv;
    /* all-to-all: send = X[send_idx] (grouped by destination), Y = recv[recv_to_y]; back:
     * send' = Y[y_to_recv], X = recv'[x_from] with padding rows from the zero row n_send */
    Tensor send_idx, recv_to_y, y_to_recv, x_from;
    int64_t n_send, n_recv;
    int64_t *send_counts, *send_displs, *recv_counts, *recv_displs; /* [P] rows */
} StLayout;

/* The layouts of a pack of n samples on CP rank `rank` of P (rows: this rank's chunk set).
 * ring: plain p2p (every attention through the CP ring); otherwise the hybrid. One rank: local. */
vfm_status st_layout_init(StLayout *s, const StSample *smp, int n, int64_t rows, int P, int rank, int ring,
                          Device device);
void st_layout_free(StLayout *s);

/* y[rows_t, w] = the temporal layout of x[rows, w] (any w, x's dtype and device); comm: the CP
 * group (all_to_all only). skip: the tests' broken variant (the exchange left out). */
vfm_status st_to_positions(const StLayout *s, Comm *comm, Tensor *y, const Tensor *x, int skip);
/* x[rows, w] = the frame layout of y[rows_t, w] (padding rows 0 after an all-to-all). */
vfm_status st_to_frames(const StLayout *s, Comm *comm, Tensor *x, const Tensor *y);

/* Bytes this rank sends in one st_to_positions (back = 0) or st_to_frames (back = 1) of rows of
 * `row_bytes` bytes: the rows it addresses to other ranks (0 without the all-to-all). */
double st_regroup_bytes(const StLayout *s, double row_bytes, int back);

#endif
