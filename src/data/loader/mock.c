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

typedef struct MockShape {
    int c, t, h, w;
} MockShape;

typedef struct Mock {
    MockShape *shapes;
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
        free(m->shapes);
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

vfm_status mock_source_create(PackSource **out, const Config *cfg, int rank, int world) {
    return mock_source_create_offset(out, cfg, 0, rank, world);
}

vfm_status mock_source_create_offset(PackSource **out, const Config *cfg, uint64_t identity_offset, int rank, int world) {
    *out = NULL;
    PackSource *src = calloc(1, sizeof *src);
    Mock *m = calloc(1, sizeof *m);
    src->impl = m;
    src->kind = "mock";
    src->next = mock_next;
    src->get_state = mock_get_state;
    src->set_state = mock_set_state;
    src->destroy = mock_destroy;
    int C = (int)cfg_int(cfg, "model.in_channels");
    m->pt = (int)cfg_int(cfg, "model.patch_temporal");
    m->ph = m->pw = (int)cfg_int(cfg, "model.patch_spatial");
    m->text_pad_multiple = 1;
    m->text_len = (int)cfg_int(cfg, "dataset.context_seq_len");
    m->max_per_pack = (int)cfg_int(cfg, "dataset.number_packed_samples");
    m->budget = cfg_int(cfg, "dataset.task_encoder_seq_length");
    m->n_fixed = cfg_int(cfg, "dataset.mock_samples");
    m->identity_offset = identity_offset;
    m->seed = (uint64_t)cfg_int(cfg, "rng.seed");
    m->rank = rank;
    m->world = world;
    src->token_dim = C * m->pt * m->ph * m->pw;
    src->text_dim = (int)cfg_int(cfg, "model.crossattn_emb_size");
    EncodeConfig ec; /* the same padding rule as real data: lcm(dataset.pad_multiple, TP·CP) */
    vfm_status s = encode_config_from(&ec, cfg);
    m->pad_multiple = ec.pad_multiple;
    if (s == VFM_OK && cfg_is_set(cfg, "dataset.context_embeddings_dim") && cfg_int(cfg, "dataset.context_embeddings_dim") != src->text_dim)
        s = vfm_fail(VFM_ERR_USAGE, "dataset.context_embeddings_dim (%lld) must equal model.crossattn_emb_size (%d)",
                     (long long)cfg_int(cfg, "dataset.context_embeddings_dim"), src->text_dim);
    int k = cfg_list_len(cfg, "dataset.mock_shapes");
    m->n_shapes = k > 0 ? k : 1;
    m->shapes = calloc((size_t)m->n_shapes, sizeof *m->shapes);
    for (int i = 0; s == VFM_OK && i < k; i++) s = parse_shape(cfg_list_str(cfg, "dataset.mock_shapes", i), C, &m->shapes[i]);
    if (s == VFM_OK && k == 0)
        m->shapes[0] = (MockShape){C, (int)cfg_int(cfg, "dataset.F_latents"), (int)cfg_int(cfg, "dataset.H_latents"),
                                   (int)cfg_int(cfg, "dataset.W_latents")};
    int64_t max_elems = 0, max_tokens = 0;
    for (int i = 0; s == VFM_OK && i < m->n_shapes; i++) {
        MockShape *sh = &m->shapes[i];
        if (sh->t % m->pt || sh->h % m->ph || sh->w % m->pw) {
            s = vfm_fail(VFM_ERR_USAGE, "mock latent shape %dx%dx%dx%d does not divide by the patch size %dx%dx%d",
                         sh->c, sh->t, sh->h, sh->w, m->pt, m->ph, m->pw);
            break;
        }
        int64_t tok = tokens_of(m, sh), padded = pack_padded_len(tok, m->pad_multiple);
        if (padded > m->budget)
            s = vfm_fail(VFM_ERR_USAGE, "mock latent shape %dx%dx%dx%d takes %lld tokens (padded), more than "
                         "dataset.task_encoder_seq_length = %lld", sh->c, sh->t, sh->h, sh->w, (long long)padded,
                         (long long)m->budget);
        int64_t elems = (int64_t)sh->c * sh->t * sh->h * sh->w;
        if (elems > max_elems) max_elems = elems;
        if (tok > max_tokens) max_tokens = tok;
    }
    if (s != VFM_OK) {
        mock_destroy(src);
        return s;
    }
    m->latent = malloc((size_t)max_elems * sizeof(float));
    m->tokens = malloc((size_t)max_elems * sizeof(float));
    m->text = malloc((size_t)m->text_len * src->text_dim * sizeof(float));
    src->max_samples = m->max_per_pack;
    src->max_tokens = m->budget;
    src->max_text = (int64_t)m->max_per_pack * m->text_len;
    /* one pass over a fixed set: the packs that cover its N samples (the last may run into the next pass) */
    for (int64_t at = 0; m->n_fixed > 0 && at < m->n_fixed; src->epoch_packs++) at += pack_size_at(m, at);
    *out = src;
    return VFM_OK;
}
