/* The shape judge (src/data/synthetic/shape_score.h): fitted on real renders of one seed, it names
 * the shape of >= 95% of held-out real renders of another seed (images and every frame of videos,
 * at the demo's resolution), per shape too; what captions ask; what it refuses to judge. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/synthetic/shape_score.h"
#include "test.h"

/* The judge's verdicts on the frames of n held-out renders (seed 99), at latent resolution. */
static void held_out(const ShapeJudge *j, int n, int right[SHAPE_COUNT], int total[SHAPE_COUNT]) {
    SyntheticConfig cfg = synthetic_config_defaults();
    PixelLatentMap map = pixel_latent_map_default();
    memset(right, 0, SHAPE_COUNT * sizeof *right);
    memset(total, 0, SHAPE_COUNT * sizeof *total);
    for (int i = 0; i < n; i++) {
        SyntheticSpec s;
        REQUIRE_OK(synthetic_spec_generate(&cfg, 99, (uint64_t)i, i % 3 == 2, &s));
        int H = s.height, W = s.width, h = H / map.factor, w = W / map.factor;
        int64_t plane = (int64_t)s.frames * h * w;
        float *pix = malloc(sizeof(float) * 3 * (size_t)s.frames * H * W);
        float *lat = malloc(sizeof(float) * 3 * (size_t)plane);
        REQUIRE_OK(synthetic_render(&s, 4, pix));
        REQUIRE_OK(pixel_to_latent(&map, pix, s.frames, H, W, lat));
        REQUIRE_OK(latent_to_pixel(&map, lat, s.frames, h, w, pix));
        for (int t = 0; t < s.frames; t++) {
            int got = shape_judge_classify(j, pix + (int64_t)t * h * w, h, w, plane, NULL);
            total[s.shape]++;
            right[s.shape] += got == s.shape;
        }
        free(pix);
        free(lat);
    }
}

TEST(shape_judge_names_held_out_real_renders) {
    ShapeJudge j;
    REQUIRE_OK(shape_judge_fit(&j, 7, 200, 2));
    int right[SHAPE_COUNT], total[SHAPE_COUNT], all_right = 0, all = 0;
    held_out(&j, 1500, right, total);
    for (int c = 0; c < SHAPE_COUNT; c++) {
        all_right += right[c];
        all += total[c];
        printf("  %-8s %4d/%4d\n", synthetic_shape_name(c), right[c], total[c]);
        CHECK_MSG(right[c] >= 0.90 * total[c], "%s: %d of %d held-out renders", synthetic_shape_name(c), right[c], total[c]);
    }
    printf("  shape judge on held-out real renders: %d/%d = %.1f%%\n", all_right, all, 100.0 * all_right / all);
    CHECK_MSG(all_right >= 0.95 * all, "%d of %d held-out renders", all_right, all);
}

TEST(shape_judge_ignores_colour_refuses_blobs_and_dark_pictures) {
    ShapeJudge j;
    REQUIRE_OK(shape_judge_fit(&j, 7, 50, 2));
    SyntheticConfig cfg = synthetic_config_defaults();
    PixelLatentMap map = pixel_latent_map_default();
    for (int i = 0; i < 35; i++) { /* every (colour, shape) pair */
        SyntheticSpec s;
        REQUIRE_OK(synthetic_spec_generate(&cfg, 5, (uint64_t)i, 0, &s));
        s.size = 15; /* large and centred: an unambiguous picture of its shape */
        s.x0 = s.width / 2.0f, s.y0 = s.height / 2.0f;
        int h = s.height / 2, w = s.width / 2;
        float *pix = malloc(sizeof(float) * 3 * (size_t)s.height * s.width), *lat = malloc(sizeof(float) * 3 * (size_t)h * w);
        REQUIRE_OK(synthetic_render(&s, 4, pix));
        REQUIRE_OK(pixel_to_latent(&map, pix, 1, s.height, s.width, lat));
        REQUIRE_OK(latent_to_pixel(&map, lat, 1, h, w, pix));
        int got = shape_judge_classify(&j, pix, h, w, (int64_t)h * w, NULL);
        CHECK_MSG(got == s.shape, "a %s %s judged %s", synthetic_palette[s.colour].name, synthetic_shape_name(s.shape),
                  synthetic_shape_name(got));
        /* two specks in a corner (as a sampler leaves): only the largest object is judged */
        pix[0] = pix[1 + w] = 1;
        got = shape_judge_classify(&j, pix, h, w, (int64_t)h * w, NULL);
        CHECK_MSG(got == s.shape, "a %s %s with specks judged %s", synthetic_palette[s.colour].name,
                  synthetic_shape_name(s.shape), synthetic_shape_name(got));
        free(pix);
        free(lat);
    }
    /* a round blob of the right size is not a circle: it is nearer to the average of the five shapes */
    for (float sd = 1.0f; sd <= 3.0f; sd += 0.5f) {
        float blob[3 * 16 * 24] = {0};
        for (int y = 0; y < 16; y++)
            for (int x = 0; x < 24; x++)
                blob[y * 24 + x] = expf(-((x - 11.5f) * (x - 11.5f) + (y - 7.5f) * (y - 7.5f)) / (2 * sd * sd));
        int got = shape_judge_classify(&j, blob, 16, 24, 16 * 24, NULL);
        CHECK_MSG(got == SHAPE_JUDGE_NONE, "a blob of sd %.1f judged %s", sd, synthetic_shape_name(got));
    }
    float dark[3 * 16 * 16] = {0};
    dark[5] = dark[256 + 5] = 1; /* one bright pixel */
    CHECK(shape_judge_classify(&j, dark, 16, 16, 256, NULL) == -1);
    ShapeJudge unfitted;
    memset(&unfitted, 0, sizeof unfitted);
    CHECK(shape_judge_classify(&unfitted, dark, 16, 16, 256, NULL) == -1);
    CHECK(shape_judge_fit(&unfitted, 7, 0, 2) == VFM_ERR_USAGE);
}

TEST(shape_from_caption_finds_the_shape_word) {
    CHECK(shape_from_caption("a red circle") == SHAPE_CIRCLE);
    CHECK(shape_from_caption("A Blue CROSS moving left") == SHAPE_CROSS);
    CHECK(shape_from_caption("a green triangle, then a square") == SHAPE_TRIANGLE);
    CHECK(shape_from_caption("a diamonds ring") == -1); /* whole words only */
    CHECK(shape_from_caption("") == -1);
}
