/* Pack assembly: appending encoded samples with zero padding, maps and positions. */
#include "data/pack/pack.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/cuda_runtime_shim.h"

vfm_status pack_init(Pack *p, int token_dim, int text_dim, int pad_multiple, int text_pad_multiple) {
    memset(p, 0, sizeof *p);
    p->token_dim = token_dim;
    p->text_dim = text_dim;
    p->pad_multiple = pad_multiple > 0 ? pad_multiple : 1;
    p->text_pad_multiple = text_pad_multiple > 0 ? text_pad_multiple : 1;
    p->cu_seqlens = calloc(1, sizeof(int32_t));
    p->cu_seqlens_padded = calloc(1, sizeof(int32_t));
    p->cu_text = calloc(1, sizeof(int32_t));
    p->cu_text_padded = calloc(1, sizeof(int32_t));
    if (p->cu_seqlens && p->cu_seqlens_padded && p->cu_text && p->cu_text_padded) return VFM_OK;
    pack_free(p);
    return vfm_fail(VFM_ERR_NOMEM, "pack: out of memory for an empty pack");
}

/* The arrays of a pack whose storage may be page-locked (samples is always malloc'd: it never goes
 * to a GPU), with their row sizes and capacity fields. */
#define PACK_ARRAYS(p) {(void **)&(p)->tokens, (void **)&(p)->text, (void **)&(p)->cu_seqlens, \
                        (void **)&(p)->cu_seqlens_padded, (void **)&(p)->cu_text, (void **)&(p)->cu_text_padded, \
                        (void **)&(p)->token_sample, (void **)&(p)->token_pos, (void **)&(p)->loss_mask}
enum { PACK_N_ARRAYS = 9 };

static void array_free(void *q, int pinned) {
    if (pinned) vfm_cuda_host_free(q);
    else free(q);
}

void pack_free(Pack *p) {
    void **arrays[PACK_N_ARRAYS] = PACK_ARRAYS(p);
    for (int i = 0; i < PACK_N_ARRAYS; i++) array_free(*arrays[i], p->pinned);
    free(p->samples);
    memset(p, 0, sizeof *p);
}

void pack_clear(Pack *p) {
    p->n_samples = 0;
    p->n_tokens = 0;
    p->n_text = 0;
}

vfm_status pack_set_pinned(Pack *p, int pinned) {
    pinned = pinned != 0;
    if (p->pinned == pinned) return VFM_OK;
    int64_t offsets = p->cap_samples ? p->cap_samples + 1 : 1;
    int64_t rows[PACK_N_ARRAYS] = {p->cap_tokens, p->cap_text, offsets, offsets, offsets, offsets, p->cap_tokens,
                                   p->cap_tokens, p->cap_tokens};
    size_t row_bytes[PACK_N_ARRAYS] = {(size_t)p->token_dim * sizeof(float), (size_t)p->text_dim * sizeof(float),
                                       sizeof(int32_t), sizeof(int32_t), sizeof(int32_t), sizeof(int32_t),
                                       sizeof(int32_t), 3 * sizeof(int32_t), sizeof(float)};
    void **arrays[PACK_N_ARRAYS] = PACK_ARRAYS(p);
    void *moved[PACK_N_ARRAYS] = {0};
    vfm_status s = VFM_OK;
    for (int i = 0; i < PACK_N_ARRAYS && s == VFM_OK; i++) {
        if (!*arrays[i]) continue;
        size_t bytes = (size_t)(rows[i] > 0 ? rows[i] : 1) * row_bytes[i];
        if (pinned) s = vfm_cuda_host_alloc(bytes, &moved[i]);
        else if (!(moved[i] = malloc(bytes))) s = vfm_fail(VFM_ERR_NOMEM, "pack: %zu bytes", bytes);
        if (s == VFM_OK) memcpy(moved[i], *arrays[i], (size_t)(rows[i] > 0 ? rows[i] : 0) * row_bytes[i]);
    }
    for (int i = 0; i < PACK_N_ARRAYS; i++) {
        if (s != VFM_OK) {
            array_free(moved[i], pinned);
            continue;
        }
        if (!*arrays[i]) continue;
        array_free(*arrays[i], p->pinned);
        *arrays[i] = moved[i];
    }
    if (s == VFM_OK) p->pinned = pinned;
    return s;
}

int64_t pack_padded_len(int64_t tokens, int pad_multiple) {
    if (pad_multiple <= 1) return tokens;
    return (tokens + pad_multiple - 1) / pad_multiple * pad_multiple;
}

static int64_t grown_capacity(int64_t cap, int64_t need) {
    int64_t c = cap ? cap : 256;
    while (c < need) c *= 2;
    return c;
}

/* *ptr (old_rows rows, their contents kept) grown to rows rows of row_bytes; page-locked when pinned. */
static vfm_status resize_in(void **ptr, int pinned, int64_t old_rows, int64_t rows, size_t row_bytes) {
    if (!pinned) {
        void *q = realloc(*ptr, (size_t)rows * row_bytes);
        if (!q) return vfm_fail(VFM_ERR_NOMEM, "pack: cannot grow to %lld rows", (long long)rows);
        *ptr = q;
        return VFM_OK;
    }
    void *q = NULL;
    VFM_TRY(vfm_cuda_host_alloc((size_t)rows * row_bytes, &q));
    if (*ptr && old_rows > 0) memcpy(q, *ptr, (size_t)(old_rows < rows ? old_rows : rows) * row_bytes);
    vfm_cuda_host_free(*ptr);
    *ptr = q;
    return VFM_OK;
}

static vfm_status resize(void **ptr, int64_t rows, size_t row_bytes) {
    void *q = realloc(*ptr, (size_t)rows * row_bytes);
    if (!q) return vfm_fail(VFM_ERR_NOMEM, "pack: cannot grow to %lld rows", (long long)rows);
    *ptr = q;
    return VFM_OK;
}

static vfm_status reserve(Pack *p, int n, int64_t tokens, int64_t text) {
    int pin = p->pinned;
    if (n + 1 > p->cap_samples) {
        int cap = p->cap_samples ? p->cap_samples : 8;
        while (cap < n + 1) cap *= 2;
        /* the offsets hold cap_samples + 1 entries once grown (1 after pack_init) */
        int64_t old = p->cap_samples ? p->cap_samples + 1 : 1;
        VFM_TRY(resize((void **)&p->samples, cap, sizeof *p->samples));
        VFM_TRY(resize_in((void **)&p->cu_seqlens, pin, old, cap + 1, sizeof(int32_t)));
        VFM_TRY(resize_in((void **)&p->cu_seqlens_padded, pin, old, cap + 1, sizeof(int32_t)));
        VFM_TRY(resize_in((void **)&p->cu_text, pin, old, cap + 1, sizeof(int32_t)));
        VFM_TRY(resize_in((void **)&p->cu_text_padded, pin, old, cap + 1, sizeof(int32_t)));
        p->cap_samples = cap;
    }
    if (tokens > p->cap_tokens) {
        int64_t cap = grown_capacity(p->cap_tokens, tokens), old = p->cap_tokens;
        VFM_TRY(resize_in((void **)&p->tokens, pin, old, cap, (size_t)p->token_dim * sizeof(float)));
        VFM_TRY(resize_in((void **)&p->token_sample, pin, old, cap, sizeof(int32_t)));
        VFM_TRY(resize_in((void **)&p->token_pos, pin, old, cap, 3 * sizeof(int32_t)));
        VFM_TRY(resize_in((void **)&p->loss_mask, pin, old, cap, sizeof(float)));
        p->cap_tokens = cap;
    }
    if (text > p->cap_text) {
        int64_t cap = grown_capacity(p->cap_text, text);
        VFM_TRY(resize_in((void **)&p->text, pin, p->cap_text, cap, (size_t)p->text_dim * sizeof(float)));
        p->cap_text = cap;
    }
    return VFM_OK;
}

vfm_status pack_append(Pack *p, const EncodedSample *s) {
    const PackSample *in = &s->info;
    int64_t real = (int64_t)in->grid[0] * in->grid[1] * in->grid[2];
    if (real != in->tokens || real <= 0)
        return vfm_fail(VFM_ERR_INTERNAL, "pack: %s: grid %dx%dx%d does not give %d tokens", in->source, in->grid[0],
                        in->grid[1], in->grid[2], in->tokens);
    if (in->text_tokens < 1)
        return vfm_fail(VFM_ERR_INTERNAL, "pack: %s: a sample needs at least one text row", in->source);
    int64_t padded = pack_padded_len(real, p->pad_multiple);
    int64_t text_padded = pack_padded_len(in->text_tokens, p->text_pad_multiple);
    int n = p->n_samples;
    VFM_TRY(reserve(p, n, p->n_tokens + padded, p->n_text + text_padded));

    int64_t row0 = p->n_tokens, d = p->token_dim;
    memcpy(p->tokens + row0 * d, s->tokens, (size_t)(real * d) * sizeof(float));
    memset(p->tokens + (row0 + real) * d, 0, (size_t)((padded - real) * d) * sizeof(float));
    for (int64_t r = 0; r < padded; r++) {
        int64_t row = row0 + r;
        int is_real = r < real;
        p->token_sample[row] = is_real ? n : -1;
        p->loss_mask[row] = is_real ? 1.0f : 0.0f;
        int32_t *pos = p->token_pos + 3 * row;
        if (is_real) {
            int64_t hw = (int64_t)in->grid[1] * in->grid[2];
            pos[0] = (int32_t)(r / hw);
            pos[1] = (int32_t)((r % hw) / in->grid[2]);
            pos[2] = (int32_t)(r % in->grid[2]);
        } else {
            pos[0] = pos[1] = pos[2] = 0;
        }
    }
    int64_t trow0 = p->n_text, td = p->text_dim;
    memcpy(p->text + trow0 * td, s->text, (size_t)(in->text_tokens * td) * sizeof(float));
    memset(p->text + (trow0 + in->text_tokens) * td, 0, (size_t)((text_padded - in->text_tokens) * td) * sizeof(float));

    p->samples[n] = *in;
    p->samples[n].tokens_padded = (int32_t)padded;
    p->samples[n].text_tokens_padded = (int32_t)text_padded;
    p->cu_seqlens[n + 1] = p->cu_seqlens[n] + (int32_t)real;
    p->cu_seqlens_padded[n + 1] = p->cu_seqlens_padded[n] + (int32_t)padded;
    p->cu_text[n + 1] = p->cu_text[n] + in->text_tokens;
    p->cu_text_padded[n + 1] = p->cu_text_padded[n] + (int32_t)text_padded;
    p->n_samples = n + 1;
    p->n_tokens += padded;
    p->n_text += text_padded;
    return VFM_OK;
}

vfm_status pack_validate(const Pack *p) {
    if (p->cu_seqlens[0] != 0 || p->cu_seqlens_padded[0] != 0 || p->cu_text[0] != 0 || p->cu_text_padded[0] != 0)
        return vfm_fail(VFM_ERR_INTERNAL, "pack: offsets do not start at 0");
    if (p->cu_seqlens_padded[p->n_samples] != p->n_tokens || p->cu_text_padded[p->n_samples] != p->n_text)
        return vfm_fail(VFM_ERR_INTERNAL, "pack: padded offsets do not end at the row counts");
    for (int i = 0; i < p->n_samples; i++) {
        const PackSample *s = &p->samples[i];
        int32_t real = p->cu_seqlens[i + 1] - p->cu_seqlens[i];
        int32_t span = p->cu_seqlens_padded[i + 1] - p->cu_seqlens_padded[i];
        int32_t treal = p->cu_text[i + 1] - p->cu_text[i];
        int32_t tspan = p->cu_text_padded[i + 1] - p->cu_text_padded[i];
        if (real != s->tokens || span != s->tokens_padded || real > span || treal != s->text_tokens || treal > tspan ||
            treal < 1)
            return vfm_fail(VFM_ERR_INTERNAL, "pack: sample %d (%s) lengths disagree with offsets", i, s->source);
        for (int32_t r = 0; r < span; r++) {
            int64_t row = p->cu_seqlens_padded[i] + r;
            int expect = r < real ? i : -1;
            if (p->token_sample[row] != expect || p->loss_mask[row] != (r < real ? 1.0f : 0.0f))
                return vfm_fail(VFM_ERR_INTERNAL, "pack: row %lld maps to %d, expected %d", (long long)row,
                                p->token_sample[row], expect);
            for (int c = 0; c < p->token_dim; c++) {
                float v = p->tokens[row * p->token_dim + c];
                if (r >= real && v != 0.0f)
                    return vfm_fail(VFM_ERR_INTERNAL, "pack: padding row %lld is not zero", (long long)row);
                if (r < real && !isfinite(v))
                    return vfm_fail(VFM_ERR_INTERNAL, "pack: row %lld of %s is not finite", (long long)row, s->source);
            }
        }
    }
    return VFM_OK;
}

double pack_fill_ratio(const Pack *p) {
    return p->n_tokens ? (double)p->cu_seqlens[p->n_samples] / (double)p->n_tokens : 0.0;
}

vfm_status pack_pad_to(Pack *p, int64_t rows) {
    if (rows == p->n_tokens) return VFM_OK;
    int n = p->n_samples;
    if (n == 0 || rows < p->n_tokens || (rows - p->n_tokens) % p->pad_multiple != 0)
        return vfm_fail(VFM_ERR_INTERNAL, "pack: cannot pad %lld rows of %d samples to %lld (padding multiple %d)",
                        (long long)p->n_tokens, n, (long long)rows, p->pad_multiple);
    VFM_TRY(reserve(p, n, rows, p->n_text));
    int64_t at = p->n_tokens, extra = rows - at;
    memset(p->tokens + at * p->token_dim, 0, (size_t)(extra * p->token_dim) * sizeof(float));
    memset(p->token_pos + 3 * at, 0, (size_t)(3 * extra) * sizeof(int32_t));
    for (int64_t r = at; r < rows; r++) {
        p->token_sample[r] = -1;
        p->loss_mask[r] = 0.0f;
    }
    p->samples[n - 1].tokens_padded += (int32_t)extra;
    p->cu_seqlens_padded[n] = (int32_t)rows;
    p->n_tokens = rows;
    return VFM_OK;
}

vfm_status pack_copy(Pack *dst, const Pack *src) {
    pack_free(dst);
    VFM_TRY(pack_init(dst, src->token_dim, src->text_dim, src->pad_multiple, src->text_pad_multiple));
    VFM_TRY(reserve(dst, src->n_samples, src->n_tokens, src->n_text));
    dst->n_samples = src->n_samples;
    dst->n_tokens = src->n_tokens;
    dst->n_text = src->n_text;
    size_t n1 = (size_t)(src->n_samples + 1) * sizeof(int32_t);
    memcpy(dst->samples, src->samples, (size_t)src->n_samples * sizeof *src->samples);
    memcpy(dst->cu_seqlens, src->cu_seqlens, n1);
    memcpy(dst->cu_seqlens_padded, src->cu_seqlens_padded, n1);
    memcpy(dst->cu_text, src->cu_text, n1);
    memcpy(dst->cu_text_padded, src->cu_text_padded, n1);
    memcpy(dst->tokens, src->tokens, (size_t)(src->n_tokens * src->token_dim) * sizeof(float));
    memcpy(dst->text, src->text, (size_t)(src->n_text * src->text_dim) * sizeof(float));
    memcpy(dst->token_sample, src->token_sample, (size_t)src->n_tokens * sizeof(int32_t));
    memcpy(dst->token_pos, src->token_pos, (size_t)src->n_tokens * 3 * sizeof(int32_t));
    memcpy(dst->loss_mask, src->loss_mask, (size_t)src->n_tokens * sizeof(float));
    return VFM_OK;
}
