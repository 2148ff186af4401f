/* The context-parallel split of a pack (design §4, research/context-parallel.md §1): every sample
 * is padded to a multiple of P (the encoder pads to lcm(dataset.pad_multiple, TP·CP)) and cut into
 * P equal contiguous chunks of c_i = padded_i / P rows; CP rank r holds chunk r of every sample,
 * back to back, so its local pack has S / P rows and the same sample order. Attention is
 * non-causal, so every (query chunk, key chunk) tile costs the same and no zig-zag is needed.
 *
 * Chunk j of sample i holds clamp(L_i - j·c_i, 0, c_i) real rows (L_i the real length): a sample
 * shorter than (P-1)·c_i leaves the last ranks without queries, which is legal everywhere (a
 * sample with no real rows in a chunk is an empty sequence for attention, padding for per-token
 * ops). Local row offsets are cu_padded_local[i] = cu_seqlens_padded[i] / P on every rank; only the
 * real lengths differ per chunk.
 *
 * CpChunks holds these arrays for one pack and hands out VarlenLayouts for "queries of chunk a
 * against keys of chunk b" (the tiles of ring attention), for cross-attention of a chunk against
 * the whole text (the text stays whole on every rank: no communication), and for the whole pack.
 * The same arrays with P = R (< CP) describe the super-chunks of hierarchical CP.
 *
 * The layout tensors live on the device given at init (small i32 arrays, copied once per pack);
 * the host copies are for the row copies below. */
#ifndef VFM_CP_LAYOUT_H
#define VFM_CP_LAYOUT_H

#include <stdint.h>

#include "ops/ops.h"

typedef struct CpChunks {
    int n_samples, parts;       /* samples in the pack, chunks per sample (P) */
    int64_t rows;               /* rows of one rank's chunk set: cu_padded[n] = S / P */
    Device device;              /* where the layout tensors live */
    /* host arrays, each [n+1] unless noted */
    int32_t *cu_seqlens;        /* the whole pack's real offsets (as given) */
    int32_t *cu_seqlens_padded; /* the whole pack's padded offsets (as given) */
    int32_t *cu_padded;         /* local padded offsets: cu_seqlens_padded / P */
    int32_t *cu_valid;          /* [parts][n+1]: cumulative real lengths of chunk j */
    int *max_valid;             /* [parts]: longest real length in chunk j */
    int max_len;                /* longest real sample */
    /* the same arrays as layout tensors on `device` */
    Tensor t_cu_seqlens, t_cu_seqlens_padded, t_cu_padded;
    Tensor *t_cu_valid;         /* [parts] */
    /* cp_chunks_diagonal: sequences whose rows all lie in one chunk (ST-DiT's frames, st_layout.h):
     * a tile of two different chunks has no keys (t_cu_zero, [n+1] zeros) */
    int diagonal;
    Tensor t_cu_zero;
} CpChunks;

/* From a pack's cu_seqlens[n+1] and cu_seqlens_padded[n+1] (host arrays): every padded length must
 * be a multiple of parts (VFM_ERR_USAGE naming the sample, its padded length and the pad rule
 * otherwise). */
vfm_status cp_chunks_init(CpChunks *c, int n, const int32_t *cu_seqlens, const int32_t *cu_seqlens_padded, int parts,
                          Device device);
void cp_chunks_free(CpChunks *c);
/* Marks c diagonal: cp_tile_layout(c, a, b) with a != b has no keys, so ring attention over c
 * computes attention inside each chunk only (while the ring still moves every block). */
vfm_status cp_chunks_diagonal(CpChunks *c);
/* Real rows of chunk j of sample i. */
int cp_chunk_valid(const CpChunks *c, int chunk, int sample);

/* Self-attention tile: the queries of chunk q_chunk against the keys of chunk kv_chunk, both held
 * in chunk-set tensors of c->rows rows (the returned layout points into c; none when c is
 * diagonal and the chunks differ). */
VarlenLayout cp_tile_layout(const CpChunks *c, int q_chunk, int kv_chunk);
/* The queries of chunk q_chunk against every key of the sample (keys in a whole-pack tensor). */
VarlenLayout cp_gathered_kv_layout(const CpChunks *c, int q_chunk);
/* Cross-attention of chunk q_chunk's queries against the whole text: the kv side (cu_kv,
 * cu_kv_padded, max_kv) of the whole pack's cross layout, unchanged. */
VarlenLayout cp_cross_layout(const CpChunks *c, int q_chunk, const VarlenLayout *whole_cross);
/* The whole pack's self-attention layout (P = 1 view). */
VarlenLayout cp_whole_layout(const CpChunks *c);

/* Row copies between a whole tensor and one chunk set, any row width and dtype, any device (one
 * op_copy per sample). Sample i's chunk `chunk` is the c_i = cu_local[i+1] - cu_local[i] rows at
 * [cu_local[i]·parts + chunk·c_i, +c_i) of whole[cu_local[n]·parts, ...] and at [cu_local[i], +c_i)
 * of local[cu_local[n], ...]. cp_take_chunk: local = that chunk of whole; cp_put_chunk: the inverse
 * (writes only those rows of whole). */
vfm_status cp_take_chunk(Tensor *local, const Tensor *whole, const int32_t *cu_local, int n, int parts, int chunk);
vfm_status cp_put_chunk(Tensor *whole, const Tensor *local, const int32_t *cu_local, int n, int parts, int chunk);

#endif
