/* Hashed-word caption encoder (see caption_encoder.h; its output must never change). */
#include "data/prepare/caption_encoder.h"

#include <string.h>

#include "core/philox.h"

static int is_word_byte(unsigned char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch >= 0x80;
}

static unsigned char ascii_lower(unsigned char ch) { return ch >= 'A' && ch <= 'Z' ? (unsigned char)(ch + 32) : ch; }

/* Finds the next word at or after *pos; returns 0 at the end. */
static int next_word(const char *s, size_t *pos, const char **word, size_t *len) {
    size_t i = *pos;
    while (s[i] && !is_word_byte((unsigned char)s[i])) i++;
    if (!s[i]) {
        *pos = i;
        return 0;
    }
    size_t start = i;
    while (s[i] && is_word_byte((unsigned char)s[i])) i++;
    *word = s + start;
    *len = i - start;
    *pos = i;
    return 1;
}

int caption_token_count(const char *caption) {
    size_t pos = 0, len;
    const char *word;
    int n = 0;
    while (caption && next_word(caption, &pos, &word, &len)) n++;
    return n > 0 ? n : 1;
}

uint64_t caption_word_hash(const char *word, size_t len) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len; i++) {
        h ^= ascii_lower((unsigned char)word[i]);
        h *= 0x100000001b3ull;
    }
    return h;
}

void caption_word_embedding(const CaptionEncoder *enc, const char *word, size_t len, float *out) {
    uint32_t key[2];
    philox_key(caption_word_hash(word, len), RNG_STREAM_DATA, key);
    for (int j = 0; j < enc->d_text; j += 4) {
        float z[4];
        philox_normal4(key, (uint64_t)j >> 2, CAPTION_ENCODER_STEP, 0, z);
        for (int k = 0; k < 4 && j + k < enc->d_text; k++) out[j + k] = z[k];
    }
}

vfm_status caption_encode(const CaptionEncoder *enc, const char *caption, float *out, int capacity, int *n_tokens) {
    if (enc->d_text < 1 || enc->d_text > 65536) return vfm_fail(VFM_ERR_USAGE, "caption encoder: d_text %d not in [1, 65536]", enc->d_text);
    int n = caption_token_count(caption);
    *n_tokens = n;
    if (n > capacity)
        return vfm_fail(VFM_ERR_SHAPE, "caption encoder: %d tokens do not fit in %d rows (\"%.60s\")", n, capacity, caption ? caption : "");
    const size_t d = (size_t)enc->d_text;
    memset(out, 0, d * sizeof *out); /* the null token, when there are no words */
    size_t pos = 0, len;
    const char *word;
    for (int i = 0; caption && next_word(caption, &pos, &word, &len); i++) caption_word_embedding(enc, word, len, out + (size_t)i * d);
    return VFM_OK;
}
