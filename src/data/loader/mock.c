/* The mock dataset: deterministic random latents and text, packed in order (see source.h).
 * Sample g of the endless stream has identity id = g (or g mod N with dataset.mock_samples = N),
 * shape mock_shapes[id mod K] and values drawn from Philox (stream DATA, uid = id): the same
 * identity always gives the same sample. Packs take consecutive samples while the padded total
 * fits the budget, at most dataset.number_packed_samples of them. A validation split is the same
 * stream with identities offset (identity_offset: id + offset keys its values and its uid; its
 * shape stays that of id). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/philox.h"
#include "data/loader/encode.h"
#include "data/loader/mock.h"
#include "ops/ops.h"

typedef struct Mock {
    MockShape shapes[MOCK_MAX_SHAPES];
    int n_shapes;
    int64_t n_fixed;        /* 0: endless fresh samples */
    uint64_t identity_offset; /* 0 for training; see pack_source_create_split */
    int pt, ph, pw, pad_multiple, text_pad_multiple, text_len, max_per_pack;
    int64_t budget;
    uint64_t seed;
    int rank, world;
    int64_t consumed;       /* global packs consumed by the whole job: this replica takes pack consumed + rank next */
    int64_t cursor_pack;    /* a known position in the stream: global pack index ... */
    int64_t cursor_sample;  /* ... and the stream index of its first sample */
    float *latent, *tokens, *text;
} Mock;

static const MockShape *shape_of(const Mock *m, int64_t id) { return &m->shapes[id % m->n_shapes]; }

static int64_t tokens_of(const Mock *m, const MockShape *s) {
    return (int64_t)(s->t / m->pt) * (s->h / m->ph) * (s->w / m->pw);
}

static int64_t identity_of(const Mock *m, int64_t g) { return m->n_fixed > 0 ? g % m->n_fixed : g; }

/* Samples in the global pack that starts at stream position g. */
static int pack_size_at(const Mock *m, int64_t g) {
    int64_t used = 0;
    int n = 0;
    while (n < m->max_per_pack) {
        int64_t len = pack_padded_len(tokens_of(m, shape_of(m, identity_of(m, g + n))), m->pad_multiple);
        if (n > 0 && used + len > m->budget) break;
        used += len;
        n++;
    }
    return n;
}

static vfm_status make_sample(Mock *m, int64_t g, EncodedSample *s, int token_dim, int text_dim) {
    int64_t local = identity_of(m, g);
    uint64_t id = m->identity_offset + (uint64_t)local;
    const MockShape *sh = shape_of(m, local);
    memset(&s->info, 0, sizeof s->info);
    PackSample *in = &s->info;
    in->uid = id;
    in->latent_shape[0] = sh->c, in->latent_shape[1] = sh->t, in->latent_shape[2] = sh->h, in->latent_shape[3] = sh->w;
    in->grid[0] = sh->t / m->pt, in->grid[1] = sh->h / m->ph, in->grid[2] = sh->w / m->pw;
    in->tokens = in->grid[0] * in->grid[1] * in->grid[2];
    in->text_tokens = m->text_len;
    in->fps = 30.0f;
    in->class_label = -1;
    snprintf(in->source, sizeof in->source, "mock:%llu", (unsigned long long)id);
    Tensor latent = TF32(m->latent, sh->c, sh->t, sh->h, sh->w);
    Tensor tokens = TF32(m->tokens, in->tokens, token_dim);
    Tensor text = TF32(m->text, m->text_len, text_dim);
    VFM_TRY(op_randn_fill(&latent, m->seed, RNG_STREAM_DATA, 0, id, 0, 1.0f));
    VFM_TRY(op_patchify(&tokens, &latent, m->pt, m->ph, m->pw));
    VFM_TRY(op_randn_fill(&text, m->seed, RNG_STREAM_DATA, 1, id, 0, 1.0f));
    s->tokens = m->tokens;
    s->text = m->text;
    return VFM_OK;
}

/* Moves the cursor to global pack g (forward from where it is, or from the start). */
static void seek_pack(Mock *m, int64_t g) {
    if (g < m->cursor_pack) m->cursor_pack = m->cursor_sample = 0;
    while (m->cursor_pack < g) {
        m->cursor_sample += pack_size_at(m, m->cursor_sample);
        m->cursor_pack++;
    }
}

static vfm_status mock_next(PackSource *src, Pack *out) {
    Mock *m = src->impl;
    seek_pack(m, m->consumed + m->rank); /* replica r of R takes packs r, r+R, ... */
    pack_clear(out);
    VFM_TRY(pack_set_pinned(out, pack_source_pinned(src)));
    int n = pack_size_at(m, m->cursor_sample);
    for (int i = 0; i < n; i++) {
        EncodedSample s;
        VFM_TRY(make_sample(m, m->cursor_sample + i, &s, src->token_dim, src->text_dim));
        VFM_TRY(pack_append(out, &s));
    }
    m->consumed += m->world;
    src->stats.packs++;
    src->stats.samples += n;
    src->stats.tokens_real += out->cu_seqlens[n];
    src->stats.tokens_padded += out->n_tokens;
    src->stats.capacity += m->budget;
    return VFM_OK;
}

static vfm_status mock_get_state(PackSource *src, char **json) {
    Mock *m = src->impl;
    json_t *j = json_pack("{s:s,s:I}", "kind", "mock", "global_pack", (json_int_t)m->consumed);
    *json = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(j);
    return *json ? VFM_OK : vfm_fail(VFM_ERR_NOMEM, "mock: state");
}

static vfm_status mock_set_state(PackSource *src, const char *text) {
    Mock *m = src->impl;
    json_error_t err;
    json_t *j = json_loads(text, 0, &err);
    json_t *gp = j ? json_object_get(j, "global_pack") : NULL;
    if (!j || !json_is_integer(gp) || strcmp(json_string_value(json_object_get(j, "kind")) ?: "", "mock") != 0) {
        json_decref(j);
        return vfm_fail(VFM_ERR_FORMAT, "checkpoint: the data-loader state is not a mock-dataset position");
    }
    /* the job's position: a different replica count continues the same stream */
    m->consumed = json_integer_value(gp);
    json_decref(j);
    return VFM_OK;
}

static void mock_destroy(PackSource *src) {
    Mock *m = src->impl;
    if (m) {
        free(m->latent);
        free(m->tokens);
        free(m->text);
        free(m);
    }
    free(src);
}

static vfm_status parse_shape(const char *text, int channels, MockShape *out) {
    int c, t, h, w;
    char tail;
    if (sscanf(text, "%dx%dx%dx%d%c", &c, &t, &h, &w, &tail) != 4 || c <= 0 || t <= 0 || h <= 0 || w <= 0)
        return vfm_fail_at(VFM_ERR_USAGE, NULL, "dataset.mock_shapes", text, "expected a latent shape CxTxHxW, e.g. 16x1x32x32");
    if (c != channels)
        return vfm_fail_at(VFM_ERR_USAGE, NULL, "dataset.mock_shapes", text,
                           "has %d channels but model.in_channels is %d", c, channels);
    *out = (MockShape){c, t, h, w};
    return VFM_OK;
}

vfm_status mock_config_from(MockConfig *mc, const Config *cfg) {
    memset(mc, 0, sizeof *mc);
    mc->channels = (int)cfg_int(cfg, "model.in_channels");
    mc->pt = (int)cfg_int(cfg, "model.patch_temporal");
    mc->ph = mc->pw = (int)cfg_int(cfg, "model.patch_spatial");
    mc->text_dim = (int)cfg_int(cfg, "model.crossattn_emb_size");
    mc->text_len = (int)cfg_int(cfg, "dataset.context_seq_len");
    mc->max_per_pack = (int)cfg_int(cfg, "dataset.number_packed_samples");
    mc->budget = cfg_int(cfg, "dataset.task_encoder_seq_length");
    mc->n_fixed = cfg_int(cfg, "dataset.mock_samples");
    mc->seed = (uint64_t)cfg_int(cfg, "rng.seed");
    /* the same padding rule as real data: lcm(dataset.pad_multiple, TP·CP) */
    VFM_TRY(encode_pad_multiple_from(cfg, mc->budget, &mc->pad_multiple));
    int k = cfg_list_len(cfg, "dataset.mock_shapes");
    if (k > MOCK_MAX_SHAPES)
        return vfm_fail_at(VFM_ERR_USAGE, NULL, "dataset.mock_shapes", NULL, "%d shapes; at most %d", k, MOCK_MAX_SHAPES);
    for (int i = 0; i < k; i++)
        VFM_TRY(parse_shape(cfg_list_str(cfg, "dataset.mock_shapes", i), mc->channels, &mc->shapes[i]));
    if (k == 0) /* one shape from the *_latents keys, which mock_shapes replaces */
        mc->shapes[0] = (MockShape){mc->channels, (int)cfg_int(cfg, "dataset.F_latents"),
                                    (int)cfg_int(cfg, "dataset.H_latents"), (int)cfg_int(cfg, "dataset.W_latents")};
    mc->n_shapes = k > 0 ? k : 1;
    const char *from = k > 0 ? "dataset.mock_shapes" : "dataset.F_latents, dataset.H_latents, dataset.W_latents";
    for (int i = 0; i < mc->n_shapes; i++) {
        const MockShape *sh = &mc->shapes[i];
        if (sh->t % mc->pt || sh->h % mc->ph || sh->w % mc->pw)
            return vfm_fail(VFM_ERR_USAGE, "mock latent shape %dx%dx%dx%d (%s) does not divide by the patch size "
                            "%dx%dx%d (model.patch_temporal, model.patch_spatial)", sh->c, sh->t, sh->h, sh->w, from,
                            mc->pt, mc->ph, mc->pw);
        int64_t tok = (int64_t)(sh->t / mc->pt) * (sh->h / mc->ph) * (sh->w / mc->pw);
        int64_t padded = pack_padded_len(tok, mc->pad_multiple);
        if (padded > mc->budget)
            return vfm_fail(VFM_ERR_USAGE, "mock latent shape %dx%dx%dx%d (%s) takes %lld tokens (padded to "
                            "dataset.pad_multiple), more than dataset.task_encoder_seq_length = %lld", sh->c, sh->t,
                            sh->h, sh->w, from, (long long)padded, (long long)mc->budget);
    }
    return VFM_OK;
}

vfm_status mock_source_create(PackSource **out, const Config *cfg, int rank, int world) {
    return mock_source_create_offset(out, cfg, 0, rank, world);
}

vfm_status mock_source_create_offset(PackSource **out, const Config *cfg, uint64_t identity_offset, int rank, int world) {
    *out = NULL;
    MockConfig mc;
    VFM_TRY(mock_config_from(&mc, cfg));
    return mock_source_from(out, &mc, identity_offset, rank, world);
}

vfm_status mock_source_from(PackSource **out, const MockConfig *mc, uint64_t identity_offset, int rank, int world) {
    *out = NULL;
    PackSource *src = calloc(1, sizeof *src);
    Mock *m = calloc(1, sizeof *m);
    if (!src || !m) {
        free(src);
        free(m);
        return vfm_fail(VFM_ERR_NOMEM, "mock: out of memory");
    }
    src->impl = m;
    src->kind = "mock";
    src->next = mock_next;
    src->get_state = mock_get_state;
    src->set_state = mock_set_state;
    src->destroy = mock_destroy;
    m->pt = mc->pt;
    m->ph = mc->ph;
    m->pw = mc->pw;
    m->text_pad_multiple = 1;
    m->text_len = mc->text_len;
    m->max_per_pack = mc->max_per_pack;
    m->budget = mc->budget;
    m->n_fixed = mc->n_fixed;
    m->identity_offset = identity_offset;
    m->seed = mc->seed;
    m->rank = rank;
    m->world = world;
    m->pad_multiple = mc->pad_multiple;
    m->n_shapes = mc->n_shapes;
    memcpy(m->shapes, mc->shapes, sizeof m->shapes);
    src->token_dim = mc->channels * m->pt * m->ph * m->pw;
    src->text_dim = mc->text_dim;
    int64_t max_elems = 0;
    for (int i = 0; i < m->n_shapes; i++) {
        const MockShape *sh = &m->shapes[i];
        int64_t elems = (int64_t)sh->c * sh->t * sh->h * sh->w;
        if (elems > max_elems) max_elems = elems;
    }
    m->latent = malloc((size_t)max_elems * sizeof(float));
    m->tokens = malloc((size_t)max_elems * sizeof(float));
    m->text = malloc((size_t)(m->text_len > 0 ? m->text_len : 1) * (size_t)src->text_dim * sizeof(float));
    if (!m->latent || !m->tokens || !m->text) {
        mock_destroy(src);
        return vfm_fail(VFM_ERR_NOMEM, "mock: out of memory for a sample of %lld values", (long long)max_elems);
    }
    src->max_samples = m->max_per_pack;
    src->max_tokens = m->budget;
    src->max_text = (int64_t)m->max_per_pack * m->text_len;
    /* one pass over a fixed set: the packs that cover its N samples (the last may run into the next pass) */
    for (int64_t at = 0; m->n_fixed > 0 && at < m->n_fixed; src->epoch_packs++) at += pack_size_at(m, at);
    *out = src;
    return VFM_OK;
}
