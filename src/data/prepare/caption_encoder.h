/* The built-in caption encoder: a deterministic text embedding for pixel-space datasets and
 * `vfm sample --prompt`. Lower-case the caption (ASCII), split it into words (runs of ASCII
 * letters, digits and non-ASCII bytes; anything else separates), one token per word, in order.
 * A word's token is d_text standard normals (unit variance, like a layer-normed T5 output, so a
 * default-initialised projection gives O(1) attention logits) drawn by Philox with
 * seed = FNV-1a-64(word), stream RNG_STREAM_DATA, step CAPTION_ENCODER_STEP, uid 0, element j.
 * No position signal: the set's captions name each attribute once, so a bag of words says it all.
 * A caption without words is one all-zero token (design §3's null prompt).
 *
 * The embedding is part of every model trained on it: changing anything here (the word split,
 * the hash, the draw) silently invalidates those models. Do not; add a new encoder id instead. */
#ifndef VFM_DATA_CAPTION_ENCODER_H
#define VFM_DATA_CAPTION_ENCODER_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

#define CAPTION_ENCODER_ID "vfm-hashed-words-v1"
#define CAPTION_ENCODER_STEP 0x54585431u /* "TXT1" */

typedef struct {
    int d_text; /* embedding width, 1..65536 */
} CaptionEncoder;

/* Number of tokens caption_encode produces: the word count, at least 1. */
int caption_token_count(const char *caption);

/* FNV-1a 64 of the lower-cased bytes of word[0..len). */
uint64_t caption_word_hash(const char *word, size_t len);

/* The token of one word. out: [d_text]. */
void caption_word_embedding(const CaptionEncoder *enc, const char *word, size_t len, float *out);

/* out: [capacity, d_text]; writes n_tokens = caption_token_count(caption) rows, or fails with
 * VFM_ERR_SHAPE when capacity is smaller. */
vfm_status caption_encode(const CaptionEncoder *enc, const char *caption, float *out, int capacity, int *n_tokens);

#endif
