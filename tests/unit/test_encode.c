/* Sample encoding (src/data/loader/encode.c): patchify layout, padding to lcm(pad, TP·CP), the
 * patch_temporal crop / repeat rule, text trimming (and the keep_text_padding parity option),
 * metadata, uids, and every skip reason. Samples are built in memory as TarSample parts. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "data/loader/encode.h"
#include "data/formats/npy.h"
#include "data/formats/safetensors.h"
#include "core/fileutil.h"
#include "ops/ops.h"
#include "test.h"

typedef struct {
    TarSample ts;
    TarPart parts[8];
    uint8_t *owned[8];
    char names[8][64];
} MemSample;

static void mem_init(MemSample *m, const char *key) {
    memset(m, 0, sizeof *m);
    m->ts.key = key;
    m->ts.parts = m->parts;
}

/* Adds a part (takes ownership of data). */
static void mem_add(MemSample *m, const char *name, uint8_t *data, size_t size) {
    int i = m->ts.num_parts++;
    snprintf(m->names[i], sizeof m->names[i], "%s", name);
    m->parts[i] = (TarPart){m->names[i], data, size};
    m->owned[i] = data;
}

static void mem_add_npy(MemSample *m, const char *name, const float *x, int ndim, const int64_t *shape) {
    uint8_t *bytes;
    size_t len;
    if (npy_encode(NPY_F4, x, ndim, shape, &bytes, &len) != VFM_OK) {
        test_fail(__FILE__, __LINE__, "npy_encode: %s", vfm_last_error());
        return;
    }
    mem_add(m, name, bytes, len);
}

static void mem_add_text(MemSample *m, const char *name, const char *text) {
    size_t n = strlen(text);
    uint8_t *b = malloc(n + 1);
    memcpy(b, text, n + 1);
    mem_add(m, name, b, n);
}

static void mem_free(MemSample *m) {
    for (int i = 0; i < m->ts.num_parts; i++) free(m->owned[i]);
}

static EncodeConfig base_config(void) {
    EncodeConfig ec;
    memset(&ec, 0, sizeof ec);
    ec.channels = 3;
    ec.pt = 1;
    ec.ph = ec.pw = 2;
    ec.text_dim = 8;
    ec.budget = 512;
    ec.pad_multiple = 64;
    ec.max_text_len = 512;
    ec.default_fps = 30.0f;
    snprintf(ec.dataset, sizeof ec.dataset, "ds");
    return ec;
}

static float *random_f32(int64_t n, uint64_t seed) {
    float *x = malloc((size_t)n * sizeof *x);
    test_fill_uniform_f32(x, n, seed, -1.0f, 1.0f);
    return x;
}

/* Encodes; returns the skip reason, with the sample in *out when ENC_OK. */
static EncodeSkip encode(const EncodeConfig *ec, MemSample *m, EncodedSample *out, char *reason, size_t rn) {
    EncodeSkip skip;
    vfm_status s = encode_sample(ec, &m->ts, "dir/shard-00.tar", 3, out, NULL, &skip, reason, rn);
    if (s != VFM_OK) test_fail(__FILE__, __LINE__, "encode_sample: %s", vfm_last_error());
    return skip;
}

TEST(encode_patchify_matches_op_patchify) {
    /* a video [C=3, T=4, H=4, W=6] with pt=2: tokens equal op_patchify of the latent, bit for bit */
    EncodeConfig ec = base_config();
    ec.pt = 2;
    int64_t shape[4] = {3, 4, 4, 6}, numel = 3 * 4 * 4 * 6;
    float *x = random_f32(numel, 11);
    MemSample m;
    mem_init(&m, "k0");
    mem_add_npy(&m, "latent.npy", x, 4, shape);
    EncodedSample es;
    char reason[256];
    REQUIRE(encode(&ec, &m, &es, reason, sizeof reason) == ENC_OK);
    int64_t tokens = 2 * 2 * 3, td = 3 * 2 * 2 * 2;
    CHECK(es.info.tokens == tokens);
    CHECK(es.info.grid[0] == 2 && es.info.grid[1] == 2 && es.info.grid[2] == 3);
    CHECK(es.info.latent_shape[0] == 3 && es.info.latent_shape[1] == 4);
    CHECK(es.info.tokens_padded == 64);
    CHECK(encode_token_dim(&ec) == td);
    float *ref = malloc((size_t)(tokens * td) * sizeof *ref);
    Tensor lt = TF32(x, 3, 4, 4, 6), tt = TF32(ref, tokens, td);
    REQUIRE_OK(op_patchify(&tt, &lt, 2, 2, 2));
    CHECK_CLOSE_F32("tokens", es.tokens, ref, tokens * td, 0.0, 0.0);
    /* spot-check the layout itself: token (t=1,h=0,w=2), inside it C fastest, then pt, pw, ph */
    int64_t tok = (1 * 2 + 0) * 3 + 2;
    for (int ph = 0; ph < 2; ph++)
        for (int pw = 0; pw < 2; pw++)
            for (int pt = 0; pt < 2; pt++)
                for (int c = 0; c < 3; c++) {
                    int64_t t = 1 * 2 + pt, h = 0 * 2 + ph, w = 2 * 2 + pw;
                    float want = x[((c * 4 + t) * 4 + h) * 6 + w];
                    float got = es.tokens[tok * td + ((ph * 2 + pw) * 2 + pt) * 3 + c];
                    CHECK(got == want);
                }
    /* no text part: the null prompt, one all-zero row */
    CHECK(es.info.text_tokens == 1);
    for (int c = 0; c < 8; c++) CHECK(es.text[c] == 0.0f);
    CHECK(es.info.fps == 30.0f && es.info.class_label == -1 && es.info.caption[0] == 0);
    CHECK(strcmp(es.info.source, "dir/shard-00.tar:k0") == 0);
    encoded_sample_free(&es);
    free(ref);
    free(x);
    mem_free(&m);
}

TEST(encode_pad_multiple_is_lcm_with_tp_cp) {
    static const struct {
        const char *pad, *tp, *cp;
        int want, tpcp;
    } cases[] = {{"dataset.pad_multiple=64", "model.tensor_model_parallel_size=3", "model.context_parallel_size=1", 192, 3},
                 {"dataset.pad_multiple=64", "model.tensor_model_parallel_size=2", "model.context_parallel_size=2", 64, 4},
                 {"dataset.pad_multiple=6", "model.tensor_model_parallel_size=4", "model.context_parallel_size=1", 12, 4},
                 {"dataset.pad_multiple=64", "model.tensor_model_parallel_size=1", "model.context_parallel_size=5", 320, 5}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *ov[] = {cases[i].pad, cases[i].tp, cases[i].cp, "dataset.path=/data/my-set/", "model.in_channels=3",
                            "model.crossattn_emb_size=8", "dataset.task_encoder_seq_length=1024"};
        Config *cfg;
        REQUIRE_OK(config_load(&cfg, NULL, ov, 7));
        EncodeConfig ec;
        REQUIRE_OK(encode_config_from(&ec, cfg));
        CHECK_MSG(ec.pad_multiple == cases[i].want, "case %zu: pad %d, want %d", i, ec.pad_multiple, cases[i].want);
        CHECK(strcmp(ec.dataset, "my-set") == 0);
        /* 7 tokens (H=2, W=14): never skipped for TP·CP divisibility, padded instead */
        float *x = random_f32(3 * 2 * 14, 5);
        int64_t shape[3] = {3, 2, 14};
        MemSample m;
        mem_init(&m, "odd");
        mem_add_npy(&m, "latent.npy", x, 3, shape);
        EncodedSample es;
        char reason[256];
        REQUIRE(encode(&ec, &m, &es, reason, sizeof reason) == ENC_OK);
        CHECK(es.info.tokens == 7 && es.info.tokens_padded == cases[i].want);
        Pack p;
        pack_init(&p, encode_token_dim(&ec), ec.text_dim, ec.pad_multiple, 1);
        CHECK_OK(pack_append(&p, &es));
        CHECK(p.n_tokens == cases[i].want && p.n_tokens % cases[i].tpcp == 0);
        CHECK_OK(pack_validate(&p));
        pack_free(&p);
        encoded_sample_free(&es);
        mem_free(&m);
        free(x);
        config_free(cfg);
    }
    /* a pad multiple larger than the budget is a config error */
    const char *ov[] = {"dataset.pad_multiple=64", "model.tensor_model_parallel_size=3", "dataset.task_encoder_seq_length=128"};
    Config *cfg;
    REQUIRE_OK(config_load(&cfg, NULL, ov, 3));
    EncodeConfig ec;
    CHECK(encode_config_from(&ec, cfg) == VFM_ERR_USAGE);
    config_free(cfg);
}

/* The tokens of latent[C, T, H, W] restricted / repeated to `frames` given by src_frame[]. */
static float *expected_tokens(const float *x, int C, int T, int H, int W, const int *src_frame, int frames, int pt) {
    float *sel = malloc((size_t)(C * frames * H * W) * sizeof *sel);
    for (int c = 0; c < C; c++)
        for (int t = 0; t < frames; t++)
            memcpy(sel + ((int64_t)c * frames + t) * H * W, x + ((int64_t)c * T + src_frame[t]) * H * W,
                   (size_t)(H * W) * sizeof *sel);
    int64_t tokens = (int64_t)(frames / pt) * (H / 2) * (W / 2), td = (int64_t)C * pt * 4;
    float *out = malloc((size_t)(tokens * td) * sizeof *out);
    Tensor lt = TF32(sel, C, frames, H, W), tt = TF32(out, tokens, td);
    if (op_patchify(&tt, &lt, pt, 2, 2) != VFM_OK) test_fail(__FILE__, __LINE__, "patchify: %s", vfm_last_error());
    free(sel);
    return out;
}

TEST(encode_crop_and_repeat_with_pt2) {
    EncodeConfig ec = base_config();
    ec.pt = 2;
    char reason[256];
    EncodedSample es;
    /* odd T = 5: the last frame is cropped */
    {
        float *x = random_f32(3 * 5 * 4 * 4, 21);
        int64_t shape[4] = {3, 5, 4, 4};
        MemSample m;
        mem_init(&m, "odd");
        mem_add_npy(&m, "latent.npy", x, 4, shape);
        REQUIRE(encode(&ec, &m, &es, reason, sizeof reason) == ENC_OK);
        CHECK(es.info.latent_shape[1] == 4 && es.info.grid[0] == 2 && es.info.tokens == 2 * 2 * 2);
        int frames[4] = {0, 1, 2, 3};
        float *ref = expected_tokens(x, 3, 5, 4, 4, frames, 4, 2);
        CHECK_CLOSE_F32("cropped", es.tokens, ref, 8 * 24, 0.0, 0.0);
        free(ref);
        encoded_sample_free(&es);
        mem_free(&m);
        free(x);
    }
    /* an image ([C,H,W], T = 1) is repeated pt times */
    {
        float *x = random_f32(3 * 4 * 6, 22);
        int64_t shape[3] = {3, 4, 6};
        MemSample m;
        mem_init(&m, "img");
        mem_add_npy(&m, "latent.npy", x, 3, shape);
        REQUIRE(encode(&ec, &m, &es, reason, sizeof reason) == ENC_OK);
        CHECK(es.info.latent_shape[1] == 2 && es.info.grid[0] == 1 && es.info.tokens == 2 * 3);
        int frames[2] = {0, 0};
        float *ref = expected_tokens(x, 3, 1, 4, 6, frames, 2, 2);
        CHECK_CLOSE_F32("repeated", es.tokens, ref, 6 * 24, 0.0, 0.0);
        free(ref);
        encoded_sample_free(&es);
        mem_free(&m);
        free(x);
    }
    /* max_frames crops first (T = 7 -> 3), then the pt rule (3 -> 2); [1,C,T,H,W] is squeezed */
    {
        ec.max_frames = 3;
        float *x = random_f32(3 * 7 * 4 * 4, 23);
        int64_t shape[5] = {1, 3, 7, 4, 4};
        MemSample m;
        mem_init(&m, "long");
        mem_add_npy(&m, "latent.npy", x, 5, shape);
        REQUIRE(encode(&ec, &m, &es, reason, sizeof reason) == ENC_OK);
        CHECK(es.info.latent_shape[1] == 2 && es.info.tokens == 4);
        int frames[2] = {0, 1};
        float *ref = expected_tokens(x, 3, 7, 4, 4, frames, 2, 2);
        CHECK_CLOSE_F32("max_frames", es.tokens, ref, 4 * 24, 0.0, 0.0);
        free(ref);
        encoded_sample_free(&es);
        mem_free(&m);
        free(x);
        ec.max_frames = 0;
    }
    /* 1 < T < pt cannot make one temporal patch: skipped */
    {
        ec.pt = 4;
        float *x = random_f32(3 * 3 * 4 * 4, 24);
        int64_t shape[4] = {3, 3, 4, 4};
        MemSample m;
        mem_init(&m, "short");
        mem_add_npy(&m, "latent.npy", x, 4, shape);
        CHECK(encode(&ec, &m, &es, reason, sizeof reason) == ENC_SKIP_PATCH);
        mem_free(&m);
        free(x);
    }
}

TEST(encode_text_trim_and_keep_padding) {
    EncodeConfig ec = base_config();
    float *x = random_f32(3 * 4 * 4, 31);
    int64_t shape[3] = {3, 4, 4};
    /* text [6, 8] with a 2-row zero tail; row 1 is all zero too (inside, kept) */
    float text[6 * 8];
    test_fill_uniform_f32(text, 6 * 8, 32, -1.0f, 1.0f);
    for (int c = 0; c < 8; c++) text[1 * 8 + c] = 0.0f, text[4 * 8 + c] = 0.0f, text[5 * 8 + c] = 0.0f;
    text[5 * 8 + 3] = -0.0f; /* negative zero counts as zero */
    int64_t tshape[3] = {1, 6, 8};
    static const struct {
        int keep, max_len, want;
    } cases[] = {{0, 512, 4}, {1, 512, 6}, {1, 5, 5}, {0, 3, 3}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ec.keep_text_padding = cases[i].keep;
        ec.max_text_len = cases[i].max_len;
        MemSample m;
        mem_init(&m, "t");
        mem_add_npy(&m, "latent.npy", x, 3, shape);
        mem_add_npy(&m, "text.npy", text, 3, tshape);
        EncodedSample es;
        char reason[256];
        REQUIRE(encode(&ec, &m, &es, reason, sizeof reason) == ENC_OK);
        CHECK_MSG(es.info.text_tokens == cases[i].want, "case %zu: %d rows, want %d", i, es.info.text_tokens,
                  cases[i].want);
        CHECK_CLOSE_F32("text rows", es.text, text, (int64_t)cases[i].want * 8, 0.0, 0.0);
        encoded_sample_free(&es);
        mem_free(&m);
    }
    /* an all-zero text keeps one row */
    float zeros[3 * 8] = {0};
    int64_t zshape[2] = {3, 8};
    CHECK(encode_text_real_rows(zeros, 3, 8) == 1);
    ec.keep_text_padding = 0;
    ec.max_text_len = 512;
    MemSample m;
    mem_init(&m, "z");
    mem_add_npy(&m, "latent.npy", x, 3, shape);
    mem_add_npy(&m, "text.npy", zeros, 2, zshape);
    EncodedSample es;
    char reason[256];
    REQUIRE(encode(&ec, &m, &es, reason, sizeof reason) == ENC_OK);
    CHECK(es.info.text_tokens == 1 && es.text[0] == 0.0f);
    encoded_sample_free(&es);
    mem_free(&m);
    free(x);
}

/* dataset.pad_text_to (Wan's rule): every text zero-padded or cut to N rows, its zero tail kept as
 * rows, a sample without text N zero rows; -1 resolves to 512 for model.variant=wan, none otherwise. */
TEST(encode_pad_text_to_pads_with_zero_rows_or_cuts) {
    EncodeConfig ec = base_config();
    float *x = random_f32(3 * 4 * 4, 41);
    int64_t shape[3] = {3, 4, 4};
    float text[6 * 8];
    test_fill_uniform_f32(text, 6 * 8, 42, -1.0f, 1.0f);
    for (int c = 0; c < 8; c++) text[4 * 8 + c] = 0.0f, text[5 * 8 + c] = 0.0f; /* a 2-row zero tail */
    int64_t tshape[2] = {6, 8};
    static const struct {
        int pad, with_text, want;
    } cases[] = {{10, 1, 10}, {3, 1, 3}, {6, 1, 6}, {10, 0, 10}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ec.pad_text_to = cases[i].pad;
        MemSample m;
        mem_init(&m, "p");
        mem_add_npy(&m, "latent.npy", x, 3, shape);
        if (cases[i].with_text) mem_add_npy(&m, "text.npy", text, 2, tshape);
        EncodedSample es;
        char reason[256];
        REQUIRE(encode(&ec, &m, &es, reason, sizeof reason) == ENC_OK);
        CHECK_MSG(es.info.text_tokens == cases[i].want, "case %zu: %d rows, want %d", i, es.info.text_tokens,
                  cases[i].want);
        float want[10 * 8] = {0};
        if (cases[i].with_text) memcpy(want, text, (size_t)(cases[i].pad < 6 ? cases[i].pad : 6) * 8 * sizeof(float));
        CHECK_CLOSE_F32("padded text", es.text, want, (int64_t)cases[i].want * 8, 0.0, 0.0);
        encoded_sample_free(&es);
        mem_free(&m);
    }
    free(x);
    static const struct {
        const char *variant, *pad;
        int want;
    } keys[] = {{"wan", "-1", 512}, {"dfm", "-1", 0}, {"wan", "0", 0}, {"dfm", "7", 7}};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        char v[64], p[64];
        snprintf(v, sizeof v, "model.variant=%s", keys[i].variant);
        snprintf(p, sizeof p, "dataset.pad_text_to=%s", keys[i].pad);
        const char *ov[] = {v, p};
        Config *cfg = NULL;
        REQUIRE_OK(config_load(&cfg, NULL, ov, 2));
        CHECK_MSG(encode_text_pad_rows(cfg) == keys[i].want, "%s %s: %d rows, want %d", v, p, encode_text_pad_rows(cfg),
                  keys[i].want);
        config_free(cfg);
    }
}

TEST(encode_metadata_and_uid) {
    EncodeConfig ec = base_config();
    float *x = random_f32(3 * 4 * 4, 41);
    int64_t shape[3] = {3, 4, 4};
    MemSample m;
    mem_init(&m, "meta");
    mem_add_text(&m, "json", "{\"caption\": \"a red circle\", \"fps\": 24.5, \"class\": 7, "
                             "\"pixel_space\": {\"factor\": 2, \"offset\": 0.5}}");
    mem_add_npy(&m, "latent.npy", x, 3, shape);
    EncodedSample es;
    EncodeSkip skip;
    char reason[256], *pixel = NULL;
    REQUIRE_OK(encode_sample(&ec, &m.ts, "a/b.tar", 2, &es, &pixel, &skip, reason, sizeof reason));
    REQUIRE(skip == ENC_OK);
    CHECK(strcmp(es.info.caption, "a red circle") == 0);
    CHECK(es.info.fps == 24.5f && es.info.class_label == 7);
    CHECK(pixel && strcmp(pixel, "{\"factor\":2,\"offset\":0.5}") == 0);
    CHECK(es.info.uid == sample_uid("ds", "a/b.tar", "meta", 2));
    CHECK(sample_uid("ds", "a/b.tar", "meta", 2) != sample_uid("ds", "a/b.tar", "meta", 3));
    CHECK(sample_uid("ds", "a/b.tar", "meta", 2) != sample_uid("ds", "a/c.tar", "meta", 2));
    CHECK(sample_uid("ds", "a/b.tar", "meta", 2) != sample_uid("dt", "a/b.tar", "meta", 2));
    free(pixel);
    encoded_sample_free(&es);
    mem_free(&m);

    /* a safetensors latent with one tensor reads like the npy one */
    char path[1200];
    snprintf(path, sizeof path, "%s/l.safetensors", test_tmpdir());
    SafetensorsEntry e = {"latent", DT_F32, 3, {3, 4, 4}, x};
    REQUIRE_OK(safetensors_write(path, &e, 1, NULL));
    char *bytes;
    size_t len;
    REQUIRE_OK(read_file_all(path, &bytes, &len));
    mem_init(&m, "st");
    mem_add(&m, "latent.safetensors", (uint8_t *)bytes, len);
    REQUIRE(encode(&ec, &m, &es, reason, sizeof reason) == ENC_OK);
    float *ref = malloc(4 * 12 * sizeof *ref);
    Tensor lt = TF32(x, 3, 1, 4, 4), tt = TF32(ref, 4, 12);
    REQUIRE_OK(op_patchify(&tt, &lt, 1, 2, 2));
    CHECK_CLOSE_F32("safetensors latent", es.tokens, ref, 48, 0.0, 0.0);
    free(ref);
    encoded_sample_free(&es);
    mem_free(&m);
    free(x);
}

TEST(encode_skip_reasons) {
    EncodeConfig ec = base_config();
    float *x = random_f32(3 * 2 * 4 * 4, 51);
    float text[4 * 8];
    test_fill_uniform_f32(text, 32, 52, -1.0f, 1.0f);
    int64_t tshape[2] = {4, 8};
    typedef struct {
        const char *name;
        EncodeSkip want;
        const char *in_reason;
    } Case;
    static const Case cases[] = {
        {"nan", ENC_SKIP_NONFINITE, "NaN"},        {"inf", ENC_SKIP_NONFINITE, "NaN/Inf"},
        {"big", ENC_SKIP_RANGE, "10000 > 1000"},          {"long", ENC_SKIP_TOO_LONG, "task_encoder_seq_length"},
        {"chan", ENC_SKIP_CHANNELS, "in_channels"}, {"odd_h", ENC_SKIP_PATCH, "patch"},
        {"badjson", ENC_SKIP_JSON, "bad json"},    {"jsontype", ENC_SKIP_JSON, "caption"},
        {"jsonfps", ENC_SKIP_JSON, "fps"},         {"nolatent", ENC_SKIP_MISSING, "no latent"},
        {"pth", ENC_SKIP_FORMAT, "pth: neither a torch.save zip archive nor a pickle"},
        {"pickle", ENC_SKIP_FORMAT, "pickle: pickle: byte 2: opcode 0x20"},
        {"evil", ENC_SKIP_REFUSED, "names a global off the unpickler's allow-list: refused, a security event (nothing was run): "
                                   "pickle: pickle: byte 2: global 'posix.system' is not allowed"},
        {"width", ENC_SKIP_TEXT_WIDTH, "crossattn_emb_size"}, {"rank", ENC_SKIP_FORMAT, "is not [C,T,H,W]"},
        {"trunc", ENC_SKIP_FORMAT, "truncated"},   {"textnan", ENC_SKIP_NONFINITE, "text"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const Case *c = &cases[i];
        MemSample m;
        mem_init(&m, c->name);
        float *y = malloc(sizeof(float) * 3 * 2 * 4 * 4);
        memcpy(y, x, sizeof(float) * 3 * 2 * 4 * 4);
        int64_t s[4] = {3, 2, 4, 4};
        if (!strcmp(c->name, "nan")) y[17] = NAN;
        if (!strcmp(c->name, "inf")) y[5] = -INFINITY;
        if (!strcmp(c->name, "big")) y[9] = 1e4f;
        if (!strcmp(c->name, "chan")) s[0] = 2;
        if (!strcmp(c->name, "odd_h")) s[2] = 3; /* H = 3 with a 2x2 patch */
        if (!strcmp(c->name, "badjson")) mem_add_text(&m, "json", "{\"caption\": ");
        if (!strcmp(c->name, "jsontype")) mem_add_text(&m, "json", "{\"caption\": 5}");
        if (!strcmp(c->name, "jsonfps")) mem_add_text(&m, "json", "{\"fps\": -1}");
        if (!strcmp(c->name, "pth")) mem_add_text(&m, "pth", "PK not torch");
        if (!strcmp(c->name, "long")) {
            /* [3, 2, 32, 34]: 2·16·17 = 544 tokens > 512 */
            float *big = calloc(3 * 2 * 32 * 34, sizeof *big);
            int64_t bs[4] = {3, 2, 32, 34};
            mem_add_npy(&m, "latent.npy", big, 4, bs);
            free(big);
        } else if (!strcmp(c->name, "rank")) {
            int64_t rs[2] = {3, 32};
            mem_add_npy(&m, "latent.npy", y, 2, rs);
        } else if (!strcmp(c->name, "trunc")) {
            uint8_t *b;
            size_t len;
            REQUIRE_OK(npy_encode(NPY_F4, y, 4, s, &b, &len));
            mem_add(&m, "latent.npy", b, len - 7);
        } else if (strcmp(c->name, "nolatent") && strcmp(c->name, "pth")) {
            mem_add_npy(&m, "latent.npy", y, 4, s); /* the shapes changed above need no more values */
        }
        if (!strcmp(c->name, "pickle")) mem_add_text(&m, "pickle", "\x80\x04 not a pickle");
        else if (!strcmp(c->name, "evil")) { /* pickle.dumps of a __reduce__ to os.system('true') */
            static const char evil[] = "\x80\x02" "cposix\nsystem\nq\x00X\x04\x00\x00\x00trueq\x01\x85q\x02Rq\x03.";
            uint8_t *b = malloc(sizeof evil);
            memcpy(b, evil, sizeof evil);
            mem_add(&m, "pickle", b, sizeof evil - 1);
        }
        else if (!strcmp(c->name, "width")) {
            int64_t ws[2] = {2, 16};
            mem_add_npy(&m, "text.npy", text, 2, ws);
        } else if (!strcmp(c->name, "textnan")) {
            float t2[32];
            memcpy(t2, text, sizeof t2);
            t2[3] = NAN;
            mem_add_npy(&m, "text.npy", t2, 2, tshape);
        } else {
            mem_add_npy(&m, "text.npy", text, 2, tshape);
        }
        EncodedSample es;
        char reason[512] = "";
        EncodeSkip got = encode(&ec, &m, &es, reason, sizeof reason);
        CHECK_MSG(got == c->want, "%s: got %s (%s), want %s", c->name, encode_skip_name(got), reason,
                  encode_skip_name(c->want));
        CHECK_MSG(strstr(reason, c->in_reason) != NULL, "%s: reason '%s' lacks '%s'", c->name, reason, c->in_reason);
        CHECK(es.tokens == NULL && es.text == NULL);
        if (got == ENC_OK) encoded_sample_free(&es);
        mem_free(&m);
        free(y);
    }
    free(x);
}
