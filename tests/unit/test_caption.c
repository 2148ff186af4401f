/* The built-in caption encoder: pinned output (it must never change), word splitting,
 * the null token, near-orthogonal words, unit-variance entries, capacity errors. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "data/prepare/caption_encoder.h"
#include "test.h"

TEST(caption_word_hash_is_fnv1a_64) {
    /* published FNV-1a 64 test vectors */
    CHECK(caption_word_hash("", 0) == 0xcbf29ce484222325ull);
    CHECK(caption_word_hash("a", 1) == 0xaf63dc4c8601ec8cull);
    CHECK(caption_word_hash("foobar", 6) == 0x85944171f73967e8ull);
    CHECK(caption_word_hash("FooBar", 6) == 0x85944171f73967e8ull); /* lower-cased first */
}

TEST(caption_embedding_is_pinned) {
    /* Trained models depend on these exact bits: if this fails, the encoder changed. Do not
     * update the numbers; restore the encoder (or add a new encoder id). */
    static const float red[8] = {1.68471348f, 0.725347579f, 1.32822669f, -0.196935892f,
                                 -0.100754708f, 0.153114006f, -0.97874397f, -0.377024114f};
    static const float circle[8] = {-1.41763568f, 0.83150661f, 1.52730215f, 1.13471627f,
                                    2.58264995f, -0.0855441988f, -0.766228557f, 0.133819833f};
    CaptionEncoder enc = {8};
    float out[3 * 8];
    int n;
    REQUIRE_OK(caption_encode(&enc, "Red circle", out, 3, &n));
    REQUIRE(n == 2);
    CHECK(memcmp(out, red, sizeof red) == 0);
    CHECK(memcmp(out + 8, circle, sizeof circle) == 0);
    /* a wider encoder extends the same vectors: the first 8 entries of d_text = 20 are the d_text = 8 ones */
    CaptionEncoder wide = {20};
    float w[20];
    caption_word_embedding(&wide, "red", 3, w);
    CHECK(memcmp(w, red, sizeof red) == 0);
}

TEST(caption_encode_splits_words_and_ignores_case_and_punctuation) {
    CaptionEncoder enc = {16};
    float a[8 * 16], b[8 * 16], c[8 * 16];
    int na, nb, nc;
    REQUIRE_OK(caption_encode(&enc, "a red circle moving left", a, 8, &na));
    REQUIRE_OK(caption_encode(&enc, "  A RED, circle -- Moving left!\n", b, 8, &nb));
    CHECK(na == 5 && nb == 5);
    CHECK(memcmp(a, b, sizeof(float) * 5 * 16) == 0);
    CHECK(caption_token_count("a red circle moving left") == 5);
    CHECK(caption_token_count("class 7 item2") == 3); /* digits are word characters */
    /* the same word gives the same token wherever it stands */
    REQUIRE_OK(caption_encode(&enc, "left circle", c, 8, &nc));
    CHECK(nc == 2);
    CHECK(memcmp(c, a + 4 * 16, sizeof(float) * 16) == 0);
    CHECK(memcmp(c + 16, a + 2 * 16, sizeof(float) * 16) == 0);
}

TEST(caption_empty_is_one_zero_token) {
    CaptionEncoder enc = {12};
    float out[2 * 12];
    static const char *const empties[] = {"", "   ", ",.;!? -"};
    for (int k = 0; k < 3; k++) {
        for (int i = 0; i < 24; i++) out[i] = 7.0f;
        int n = -1;
        REQUIRE_OK(caption_encode(&enc, empties[k], out, 2, &n));
        CHECK(n == 1 && caption_token_count(empties[k]) == 1);
        for (int i = 0; i < 12; i++) CHECK(out[i] == 0.0f);
        CHECK(out[12] == 7.0f); /* nothing written past the token */
    }
    int n = -1;
    REQUIRE_OK(caption_encode(&enc, NULL, out, 1, &n));
    CHECK(n == 1 && out[0] == 0.0f);
}

TEST(caption_words_are_near_orthogonal_with_unit_variance) {
    static const char *const words[] = {"a",    "moving", "red",    "yellow", "green",  "cyan",    "blue",   "magenta",
                                        "white", "circle", "square", "triangle", "diamond", "cross", "left", "right",
                                        "up",   "down",   "reds",   "red1"};
    enum { NW = sizeof words / sizeof words[0], D = 256 };
    CaptionEncoder enc = {D};
    static float v[NW][D];
    double sum = 0, sum_sq = 0;
    for (int i = 0; i < NW; i++) {
        caption_word_embedding(&enc, words[i], strlen(words[i]), v[i]);
        for (int j = 0; j < D; j++) {
            sum += v[i][j];
            sum_sq += (double)v[i][j] * v[i][j];
        }
    }
    /* 5120 standard normals: mean sd 0.014, variance sd 0.02 (x4 margin) */
    double mean = sum / (NW * D), var = sum_sq / (NW * D) - mean * mean;
    CHECK_MSG(fabs(mean) < 0.06 && fabs(var - 1) < 0.08, "mean %.4f variance %.4f", mean, var);
    /* cosine of two independent 256-d Gaussian vectors has sd 1/16; 190 pairs, bound at ~4.8 sd */
    double worst = 0;
    for (int i = 0; i < NW; i++)
        for (int k = 0; k < i; k++) {
            double dot = 0, ni = 0, nk = 0;
            for (int j = 0; j < D; j++) {
                dot += (double)v[i][j] * v[k][j];
                ni += (double)v[i][j] * v[i][j];
                nk += (double)v[k][j] * v[k][j];
            }
            double cosine = fabs(dot / sqrt(ni * nk));
            if (cosine > worst) worst = cosine;
        }
    CHECK_MSG(worst < 0.3, "largest |cosine| between different words %.3f", worst);
}

TEST(caption_encode_reports_capacity_and_bad_width) {
    CaptionEncoder enc = {4};
    float out[2 * 4];
    int n = 0;
    CHECK(caption_encode(&enc, "one two three", out, 2, &n) == VFM_ERR_SHAPE);
    CHECK(n == 3);
    CaptionEncoder bad = {0};
    CHECK(caption_encode(&bad, "x", out, 2, &n) == VFM_ERR_USAGE);
}
