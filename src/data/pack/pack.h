/* The pack: one micro-batch of packed samples (design §3 "Packed sequences"). Images and videos
 * of any size share one token sequence; each sample's tokens are padded to a multiple of the pad
 * size with zero rows (so per-row ops stay finite), and the token -> sample map marks padding
 * rows with -1 so attention and the loss never read them. The text context is packed the same
 * way with its own cumulative lengths. Everything here lives on the CPU; the trainer copies what
 * a GPU needs. */
#ifndef VFM_PACK_H
#define VFM_PACK_H

#include <stdint.h>

#include "core/error.h"

typedef struct PackSample {
    uint64_t uid;             /* RNG identity: hash(dataset, shard, key, epoch); mock: global index */
    int32_t latent_shape[4];  /* C, T, H, W of the latent as encoded (after any crop / repeat) */
    int32_t grid[3];          /* token grid t, h, w = T/pt, H/ph, W/pw */
    int32_t tokens;           /* real tokens = t·h·w */
    int32_t tokens_padded;    /* tokens rounded up to the pad multiple */
    int32_t text_tokens;      /* real text rows (>= 1: an empty prompt is one zero row) */
    int32_t text_tokens_padded;
    float fps;
    int32_t class_label;      /* -1 when absent */
    char source[192];         /* "shard.tar:key" (or "mock:N"): named in messages */
    char caption[256];        /* for logs and validation pictures; may be empty */
} PackSample;

/* One sample ready to pack: unpadded tokens [tokens, token_dim] and text [text_tokens, text_dim]. */
typedef struct EncodedSample {
    PackSample info;
    float *tokens;
    float *text;
} EncodedSample;

typedef struct Pack {
    int n_samples;
    int64_t n_tokens;          /* S = cu_seqlens_padded[n]: token rows, padding included */
    int64_t n_text;            /* L = cu_text_padded[n] */
    int token_dim;             /* C·pt·ph·pw */
    int text_dim;              /* d_text */
    int pad_multiple;          /* token padding multiple */
    int text_pad_multiple;     /* text padding multiple */
    float *tokens;             /* [S, token_dim] clean latent tokens, zero padding rows */
    float *text;               /* [L, text_dim], zero padding rows */
    int32_t *cu_seqlens;       /* [n+1] cumulative real token counts */
    int32_t *cu_seqlens_padded;/* [n+1] cumulative padded token counts: sample i starts at row [i] */
    int32_t *cu_text;          /* [n+1] */
    int32_t *cu_text_padded;   /* [n+1] */
    int32_t *token_sample;     /* [S] sample index, -1 on padding rows */
    int32_t *token_pos;        /* [S, 3] (t, h, w), 0 on padding rows */
    float *loss_mask;          /* [S] 1 on real rows, 0 on padding */
    PackSample *samples;       /* [n] */
    /* allocation sizes */
    int cap_samples;
    int64_t cap_tokens, cap_text;
    int pinned;                /* the arrays (not `samples`) are page-locked host memory (cudaMallocHost) */
} Pack;

/* An empty pack (its offset arrays hold the leading 0). VFM_ERR_NOMEM, and *p all zero (pack_free
 * is safe), when that memory cannot be had. */
vfm_status pack_init(Pack *p, int token_dim, int text_dim, int pad_multiple, int text_pad_multiple);
void pack_free(Pack *p);
void pack_clear(Pack *p);
/* Moves the pack's arrays (contents kept) into page-locked host memory (pinned = 1; needs a CUDA
 * device) or back into malloc'd memory; later growth stays in that kind. A no-op when already so. */
vfm_status pack_set_pinned(Pack *p, int pinned);
/* Padded token count a sample of `tokens` real tokens takes in a pack. */
int64_t pack_padded_len(int64_t tokens, int pad_multiple);
/* Appends a sample: copies its tokens and text, pads both, fills the maps and grid positions. */
vfm_status pack_append(Pack *p, const EncodedSample *s);
/* Checks every invariant (monotone offsets, map agrees with offsets, zero padding, finite real
 * rows); VFM_ERR_INTERNAL naming the first violation. Used by tests and debug runs. */
vfm_status pack_validate(const Pack *p);
/* Real tokens / padded tokens. */
double pack_fill_ratio(const Pack *p);
/* Pads the pack to `rows` token rows (>= n_tokens, n_tokens + a multiple of pad_multiple; a pack
 * with samples): the last sample's padding grows by zero rows mapped to -1, masked out of the loss.
 * The fixed pack length of pipeline parallelism (train.fixed_pack_length). */
vfm_status pack_pad_to(Pack *p, int64_t rows);
/* Deep copy into dst, initialised (its memory is freed first) or freshly zeroed. */
vfm_status pack_copy(Pack *dst, const Pack *src);

#endif
