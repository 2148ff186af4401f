/* The moving-shapes set: spec generator (determinism, schedule, bounds, caption grammar),
 * renderer geometry (area, centroid, motion), pixel <-> latent mapping, and the colour judge. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/synthetic/colour_score.h"
#include "data/synthetic/synthetic.h"
#include "test.h"

static float *render_alloc(const SyntheticSpec *s, int supersample) {
    float *px = malloc(sizeof(float) * 3 * (size_t)s->frames * s->height * s->width);
    if (synthetic_render(s, supersample, px) != VFM_OK) {
        free(px);
        return NULL;
    }
    return px;
}

/* Mass (sum of the max channel) and centroid of frame t; pixel (x, y) has its centre at (x+0.5, y+0.5). */
static double frame_moments(const float *px, const SyntheticSpec *s, int t, double *cx, double *cy) {
    int64_t plane = (int64_t)s->frames * s->height * s->width;
    double m = 0, mx = 0, my = 0;
    for (int y = 0; y < s->height; y++)
        for (int x = 0; x < s->width; x++) {
            int64_t p = ((int64_t)t * s->height + y) * s->width + x;
            double v = fmax(px[p], fmax(px[plane + p], px[2 * plane + p]));
            m += v;
            mx += v * (x + 0.5);
            my += v * (y + 0.5);
        }
    *cx = m > 0 ? mx / m : 0;
    *cy = m > 0 ? my / m : 0;
    return m;
}

TEST(synthetic_palette_is_distinct_saturated_and_bright) {
    CHECK(SYNTHETIC_N_COLOURS >= 6);
    for (int i = 0; i < SYNTHETIC_N_COLOURS; i++) {
        const float *c = synthetic_palette[i].rgb;
        CHECK_MSG(fmaxf(c[0], fmaxf(c[1], c[2])) == 1.0f, "%s is not at full brightness", synthetic_palette[i].name);
        for (int j = 0; j < i; j++) {
            CHECK(strcmp(synthetic_palette[i].name, synthetic_palette[j].name) != 0);
            const float *d = synthetic_palette[j].rgb;
            float dist = fabsf(c[0] - d[0]) + fabsf(c[1] - d[1]) + fabsf(c[2] - d[2]);
            CHECK_MSG(dist >= 1.0f, "%s and %s too close", synthetic_palette[i].name, synthetic_palette[j].name);
        }
    }
}

TEST(synthetic_spec_is_a_pure_function_of_seed_and_index) {
    SyntheticConfig cfg = synthetic_config_defaults();
    for (int is_video = 0; is_video < 2; is_video++)
        for (uint64_t index = 0; index < 20; index++) {
            SyntheticSpec a, b, c, d;
            REQUIRE_OK(synthetic_spec_generate(&cfg, 1234, index, is_video, &a));
            REQUIRE_OK(synthetic_spec_generate(&cfg, 1234, index, is_video, &b));
            REQUIRE_OK(synthetic_spec_generate(&cfg, 1234, index + 1, is_video, &c));
            REQUIRE_OK(synthetic_spec_generate(&cfg, 1235, index, is_video, &d));
            CHECK(memcmp(&a, &b, sizeof a) == 0);
            CHECK(memcmp(&a, &c, sizeof a) != 0);
            CHECK(a.x0 != d.x0 || a.y0 != d.y0);
            if (index < 3) {
                float *pa = render_alloc(&a, 4), *pb = render_alloc(&b, 4);
                REQUIRE(pa && pb);
                CHECK(memcmp(pa, pb, sizeof(float) * 3 * (size_t)a.frames * a.height * a.width) == 0);
                free(pa);
                free(pb);
            }
        }
    /* Pinned: a change to the generator changes every dataset built from it; update these on purpose only. */
    static const char *const pinned[2][3] = {
        {"a cyan diamond", "a blue cross", "a magenta circle"},
        {"a blue circle moving right", "a magenta square moving down", "a white triangle moving up"},
    };
    static const int pinned_shape[2][3][3] = {{{32, 32, 1}, {32, 48, 1}, {48, 32, 1}}, {{48, 32, 4}, {48, 32, 4}, {48, 32, 7}}};
    for (int is_video = 0; is_video < 2; is_video++)
        for (int index = 0; index < 3; index++) {
            SyntheticSpec s;
            char caption[128];
            REQUIRE_OK(synthetic_spec_generate(&cfg, 1, (uint64_t)index, is_video, &s));
            synthetic_caption(&s, caption, sizeof caption);
            CHECK_MSG(strcmp(caption, pinned[is_video][index]) == 0, "seed 1 %s %d: \"%s\"", is_video ? "video" : "image",
                      index, caption);
            const int *hwt = pinned_shape[is_video][index];
            CHECK_MSG(s.height == hwt[0] && s.width == hwt[1] && s.frames == hwt[2], "seed 1 %s %d: %dx%d, %d frames",
                      is_video ? "video" : "image", index, s.height, s.width, s.frames);
        }
}

TEST(synthetic_schedule_covers_every_colour_shape_pair) {
    SyntheticConfig cfg = synthetic_config_defaults();
    const int pairs = SYNTHETIC_N_COLOURS * SHAPE_COUNT;
    static const uint64_t starts[] = {0, 17, 1000003};
    for (int is_video = 0; is_video < 2; is_video++)
        for (int k = 0; k < 3; k++) {
            int seen[SYNTHETIC_N_COLOURS][SHAPE_COUNT] = {{0}};
            for (int i = 0; i < pairs; i++) {
                SyntheticSpec s;
                REQUIRE_OK(synthetic_spec_generate(&cfg, 42, starts[k] + (uint64_t)i, is_video, &s));
                seen[s.colour][s.shape]++;
            }
            for (int c = 0; c < SYNTHETIC_N_COLOURS; c++)
                for (int sh = 0; sh < SHAPE_COUNT; sh++)
                    CHECK_MSG(seen[c][sh] == 1, "start %llu: (%d, %d) seen %d times", (unsigned long long)starts[k], c, sh,
                              seen[c][sh]);
        }
}

TEST(synthetic_specs_stay_inside_the_canvas_and_captions_follow_the_grammar) {
    SyntheticConfig cfg = synthetic_config_defaults();
    int motions[MOTION_COUNT] = {0}, canvases[3] = {0}, frames_seen[9] = {0};
    const int n = 3000;
    for (int is_video = 0; is_video < 2; is_video++)
        for (int i = 0; i < n; i++) {
            SyntheticSpec s;
            REQUIRE_OK(synthetic_spec_generate(&cfg, 7, (uint64_t)i, is_video, &s));
            int which = -1;
            for (int k = 0; k < 3; k++)
                if (s.height == cfg.image_canvases[k].height && s.width == cfg.image_canvases[k].width) which = k;
            REQUIRE(which >= 0);
            canvases[which]++;
            float side = (float)(s.height < s.width ? s.height : s.width);
            CHECK(s.size >= cfg.min_size * side - 1e-4f && s.size <= cfg.max_size * side + 1e-4f);
            motions[s.motion]++;
            if (is_video) {
                REQUIRE(s.frames >= cfg.min_frames && s.frames <= cfg.max_frames);
                frames_seen[s.frames]++;
                CHECK(s.motion != MOTION_STILL);
                CHECK(s.speed >= 0.5f * cfg.min_speed && s.speed <= cfg.max_speed);
            } else {
                CHECK(s.frames == 1 && s.motion == MOTION_STILL && s.speed == 0.0f);
            }
            float vx = s.motion == MOTION_RIGHT ? 1.0f : s.motion == MOTION_LEFT ? -1.0f : 0.0f;
            float vy = s.motion == MOTION_DOWN ? 1.0f : s.motion == MOTION_UP ? -1.0f : 0.0f;
            float r = 0.5f * s.size;
            for (int t = 0; t < s.frames; t += s.frames - 1 > 0 ? s.frames - 1 : 1) {
                float cx = s.x0 + vx * s.speed * (float)t, cy = s.y0 + vy * s.speed * (float)t;
                CHECK_MSG(cx - r >= 0.999f && cx + r <= (float)s.width - 0.999f && cy - r >= 0.999f &&
                              cy + r <= (float)s.height - 0.999f,
                          "index %d frame %d: box [%.2f, %.2f] x [%.2f, %.2f] leaves %dx%d", i, t, cx - r, cx + r, cy - r,
                          cy + r, s.height, s.width);
            }
            char caption[128], colour[32], shape[32], moving[32], dir[32], extra[32];
            synthetic_caption(&s, caption, sizeof caption);
            int fields = sscanf(caption, "a %31s %31s %31s %31s %31s", colour, shape, moving, dir, extra);
            CHECK(strcmp(colour, synthetic_palette[s.colour].name) == 0);
            CHECK(strcmp(shape, synthetic_shape_name(s.shape)) == 0);
            if (is_video) CHECK(fields == 4 && strcmp(moving, "moving") == 0 && strcmp(dir, synthetic_motion_name(s.motion)) == 0);
            else CHECK_MSG(fields == 2, "image caption \"%s\"", caption);
        }
    /* every motion, canvas and frame count occurs, roughly evenly (expected n/4, n/3·2, n/5; ±20%) */
    CHECK(motions[MOTION_STILL] == n);
    for (int m = MOTION_LEFT; m <= MOTION_DOWN; m++) CHECK_MSG(abs(motions[m] - n / 4) < n / 20, "motion %d: %d", m, motions[m]);
    for (int k = 0; k < 3; k++) CHECK_MSG(abs(canvases[k] - 2 * n / 3) < 2 * n / 15, "canvas %d: %d", k, canvases[k]);
    for (int f = cfg.min_frames; f <= cfg.max_frames; f++) CHECK_MSG(abs(frames_seen[f] - n / 5) < n / 25, "T=%d: %d", f, frames_seen[f]);
}

/* position_spread: 0 puts every still in the middle of its canvas and every video's path in the
 * middle of its room; 0.5 keeps the middle half; 1 (the default) gives the same specs as before. */
TEST(synthetic_position_spread_centres_stills_and_keeps_the_default_specs) {
    SyntheticConfig any = synthetic_config_defaults(), mid = any, half = any;
    CHECK(any.position_spread == 1.0f);
    mid.position_spread = 0;
    half.position_spread = 0.5f;
    float spread_any = 0, spread_half = 0;
    for (int is_video = 0; is_video < 2; is_video++)
        for (int i = 0; i < 400; i++) {
            SyntheticSpec a, m, h;
            REQUIRE_OK(synthetic_spec_generate(&any, 3, (uint64_t)i, is_video, &a));
            REQUIRE_OK(synthetic_spec_generate(&mid, 3, (uint64_t)i, is_video, &m));
            REQUIRE_OK(synthetic_spec_generate(&half, 3, (uint64_t)i, is_video, &h));
            /* everything but the place is the same draw */
            CHECK(a.shape == m.shape && a.colour == m.colour && a.size == m.size && a.frames == m.frames &&
                  a.height == m.height && a.width == m.width && a.motion == m.motion && a.speed == m.speed);
            float vx = a.motion == MOTION_RIGHT ? 1.0f : a.motion == MOTION_LEFT ? -1.0f : 0.0f;
            float vy = a.motion == MOTION_DOWN ? 1.0f : a.motion == MOTION_UP ? -1.0f : 0.0f;
            float travel = a.speed * (float)(a.frames - 1);
            /* the middle of the path is the middle of the canvas */
            float mx = m.x0 + 0.5f * vx * travel, my = m.y0 + 0.5f * vy * travel;
            CHECK_MSG(fabsf(mx - 0.5f * (float)m.width) < 1e-4f && fabsf(my - 0.5f * (float)m.height) < 1e-4f,
                      "%s %d: path middle (%.3f, %.3f) on %dx%d", is_video ? "video" : "image", i, mx, my, m.height, m.width);
            spread_any += fabsf(a.x0 + 0.5f * vx * travel - 0.5f * (float)a.width);
            spread_half += fabsf(h.x0 + 0.5f * vx * travel - 0.5f * (float)h.width);
        }
    CHECK_MSG(fabsf(spread_half / spread_any - 0.5f) < 1e-3f, "spread 0.5 / 1: %.4f", spread_half / spread_any);
    SyntheticConfig bad = any;
    bad.position_spread = 1.5f;
    SyntheticSpec s;
    CHECK(synthetic_spec_generate(&bad, 3, 0, 0, &s) == VFM_ERR_USAGE);
}

TEST(synthetic_render_area_matches_the_geometry) {
    /* analytic areas for half-side r: circle pi r^2, square 4r^2, triangle 2r^2, diamond 2r^2,
     * cross two 2r x 2r/3 bars minus their (2r/3)^2 overlap = 20r^2/9 */
    const float r = 6.5f;
    const double area[SHAPE_COUNT] = {M_PI * r * r, 4.0 * r * r, 2.0 * r * r, 2.0 * r * r, 20.0 * r * r / 9.0};
    for (int shape = 0; shape < SHAPE_COUNT; shape++) {
        SyntheticSpec s = {.shape = shape, .colour = 3, .motion = MOTION_STILL, .frames = 1, .height = 24, .width = 28,
                           .size = 2 * r, .x0 = 13.3f, .y0 = 11.8f};
        float *px = render_alloc(&s, 8);
        REQUIRE(px);
        const int64_t plane = 24 * 28;
        double mass = 0, outside = 0;
        for (int y = 0; y < 24; y++)
            for (int x = 0; x < 28; x++) {
                float g = px[plane + y * 28 + x];
                mass += g;
                int in_box = x + 1 > s.x0 - r && x < s.x0 + r && y + 1 > s.y0 - r && y < s.y0 + r;
                if (!in_box) outside += g;
                CHECK(px[y * 28 + x] == 0.0f);        /* cyan: no red */
                CHECK(px[2 * plane + y * 28 + x] == g); /* blue = green */
            }
        /* 8x8 samples per pixel: the area is off by at most about one sample row along the outline (~2%) */
        CHECK_MSG(fabs(mass - area[shape]) <= 0.025 * area[shape], "%s: area %.2f, want %.2f", synthetic_shape_name(shape), mass,
                  area[shape]);
        CHECK(outside == 0.0);
        free(px);
    }
}

TEST(synthetic_red_circle_is_red_and_centred_where_the_spec_says) {
    SyntheticSpec s = {.shape = SHAPE_CIRCLE, .colour = 0, .motion = MOTION_STILL, .frames = 1, .height = 32, .width = 48,
                       .size = 13.0f, .x0 = 17.3f, .y0 = 20.6f};
    REQUIRE(strcmp(synthetic_palette[0].name, "red") == 0);
    float *px = render_alloc(&s, 4);
    REQUIRE(px);
    double cx, cy;
    frame_moments(px, &s, 0, &cx, &cy);
    /* symmetric 4x4 sampling of a disc: the centroid is off by well under a tenth of a sample spacing */
    CHECK_MSG(fabs(cx - 17.3) < 0.03 && fabs(cy - 20.6) < 0.03, "centroid (%.4f, %.4f)", cx, cy);
    ColourJudge judge = colour_judge_defaults();
    float share;
    int colour = colour_dominant_planar(&judge, synthetic_palette, SYNTHETIC_N_COLOURS, px, 32 * 48, 32 * 48, &share);
    CHECK(colour == 0);
    CHECK(share == 1.0f);
    free(px);
}

TEST(synthetic_video_centroid_moves_with_the_caption) {
    for (int motion = MOTION_LEFT; motion <= MOTION_DOWN; motion++) {
        SyntheticSpec s = {.shape = SHAPE_CIRCLE, .colour = 4, .motion = motion, .frames = 6, .height = 48, .width = 48,
                           .size = 12.0f, .x0 = 24.2f, .y0 = 23.7f, .speed = 2.3f};
        s.x0 += motion == MOTION_LEFT ? 5.0f : motion == MOTION_RIGHT ? -5.0f : 0.0f;
        s.y0 += motion == MOTION_UP ? 5.0f : motion == MOTION_DOWN ? -5.0f : 0.0f;
        float *px = render_alloc(&s, 4);
        REQUIRE(px);
        double vx = motion == MOTION_RIGHT ? 1 : motion == MOTION_LEFT ? -1 : 0;
        double vy = motion == MOTION_DOWN ? 1 : motion == MOTION_UP ? -1 : 0;
        double m0, px0, py0;
        m0 = frame_moments(px, &s, 0, &px0, &py0);
        for (int t = 1; t < s.frames; t++) {
            double cx, cy, m = frame_moments(px, &s, t, &cx, &cy);
            double step_x = cx - px0, step_y = cy - py0;
            CHECK_MSG(fabs(step_x - vx * 2.3) < 0.05 && fabs(step_y - vy * 2.3) < 0.05, "%s frame %d: step (%.3f, %.3f)",
                      synthetic_motion_name(motion), t, step_x, step_y);
            /* sampling a shifted disc changes its sampled area by a few samples at most */
            CHECK_MSG(fabs(m - m0) < 0.02 * m0, "%s frame %d: mass %.2f vs %.2f", synthetic_motion_name(motion), t, m, m0);
            px0 = cx;
            py0 = cy;
        }
        free(px);
    }
}

TEST(synthetic_latent_mapping_roundtrips_every_palette_colour) {
    PixelLatentMap map = pixel_latent_map_default();
    CHECK(map.factor == 2 && map.channels == 3);
    enum { T = 2, H = 4, W = 6 };
    float pixels[3 * T * H * W], latent[3 * T * 2 * 3], back[3 * T * 2 * 3];
    for (int k = 0; k < SYNTHETIC_N_COLOURS; k++) {
        for (int c = 0; c < 3; c++)
            for (int p = 0; p < T * H * W; p++) pixels[c * T * H * W + p] = synthetic_palette[k].rgb[c];
        REQUIRE_OK(pixel_to_latent(&map, pixels, T, H, W, latent));
        REQUIRE_OK(latent_to_pixel(&map, latent, T, 2, 3, back));
        float want[3 * T * 2 * 3], want_latent[3 * T * 2 * 3];
        for (int c = 0; c < 3; c++)
            for (int p = 0; p < T * 2 * 3; p++) {
                want[c * T * 6 + p] = synthetic_palette[k].rgb[c];
                want_latent[c * T * 6 + p] = synthetic_palette[k].rgb[c] - 0.5f; /* ±0.5: RMS = sigma_data */
            }
        CHECK_CLOSE_F32(synthetic_palette[k].name, back, want, 3 * T * 6, 1.0 / 255, 0);
        CHECK_CLOSE_F32("latent", latent, want_latent, 3 * T * 6, 1e-6, 0);
    }
    /* the box filter on random pixels, against a direct sum */
    test_fill_uniform_f32(pixels, 3 * T * H * W, 3, 0.0f, 1.0f);
    REQUIRE_OK(pixel_to_latent(&map, pixels, T, H, W, latent));
    float ref[3 * T * 2 * 3];
    for (int c = 0; c < 3; c++)
        for (int t = 0; t < T; t++)
            for (int y = 0; y < 2; y++)
                for (int x = 0; x < 3; x++) {
                    const float *src = pixels + ((c * T + t) * H + 2 * y) * W + 2 * x;
                    ref[((c * T + t) * 2 + y) * 3 + x] = (src[0] + src[1] + src[W] + src[W + 1]) / 4 - 0.5f;
                }
    CHECK_CLOSE_F32("box filter", latent, ref, 3 * T * 6, 1e-6, 0);
    /* a custom map inverts too */
    PixelLatentMap custom = {.factor = 1, .channels = 3, .offset = {0.1f, 0.2f, 0.3f}, .scale = {2.0f, -1.5f, 0.7f}};
    float latent_full[3 * T * H * W], back_full[3 * T * H * W];
    REQUIRE_OK(pixel_to_latent(&custom, pixels, T, H, W, latent_full));
    REQUIRE_OK(latent_to_pixel(&custom, latent_full, T, H, W, back_full));
    CHECK_CLOSE_F32("custom map", back_full, pixels, 3 * T * H * W, 1e-6, 0);
    CHECK(pixel_to_latent(&map, pixels, T, 5, 6, latent) == VFM_ERR_SHAPE); /* 5 rows: not a multiple of 2 */
    custom.scale[1] = 0;
    CHECK(pixel_to_latent(&custom, pixels, T, H, W, latent) == VFM_ERR_USAGE);
}

TEST(synthetic_latent_rms_is_near_sigma_data) {
    /* Every latent value is ±0.5 except on anti-aliased edges, so the RMS sits just under 0.5. */
    SyntheticConfig cfg = synthetic_config_defaults();
    PixelLatentMap map = pixel_latent_map_default();
    for (int is_video = 0; is_video < 2; is_video++) {
        double sum_sq = 0, count = 0;
        for (int i = 0; i < 20; i++) {
            SyntheticSpec s;
            REQUIRE_OK(synthetic_spec_generate(&cfg, 9, (uint64_t)i, is_video, &s));
            float *px = render_alloc(&s, 4);
            REQUIRE(px);
            int64_t n = 3 * (int64_t)s.frames * (s.height / 2) * (s.width / 2);
            float *lat = malloc(sizeof(float) * (size_t)n);
            REQUIRE_OK(pixel_to_latent(&map, px, s.frames, s.height, s.width, lat));
            for (int64_t k = 0; k < n; k++) {
                sum_sq += (double)lat[k] * lat[k];
                CHECK(lat[k] >= -0.5f && lat[k] <= 0.5f);
            }
            count += (double)n;
            free(lat);
            free(px);
        }
        double rms = sqrt(sum_sq / count);
        CHECK_MSG(rms > 0.45 && rms <= 0.5, "%s latent RMS %.4f", is_video ? "video" : "image", rms);
    }
}

TEST(synthetic_pixel_map_json_roundtrip) {
    PixelLatentMap map = {.factor = 4, .channels = 3, .offset = {0.5f, 0.25f, 0.125f}, .scale = {1.0f, 2.0f, 0.5f}}, back;
    char json[512];
    int len = pixel_latent_map_to_json(&map, json, sizeof json);
    REQUIRE(len > 0 && len < (int)sizeof json);
    REQUIRE_OK(pixel_latent_map_from_json(json, &back));
    CHECK(back.factor == 4 && back.channels == 3);
    CHECK(memcmp(back.offset, map.offset, sizeof map.offset) == 0 && memcmp(back.scale, map.scale, sizeof map.scale) == 0);
    REQUIRE_OK(pixel_latent_map_from_json("{}", &back)); /* defaults */
    CHECK(back.factor == 2 && back.offset[0] == 0.5f && back.scale[2] == 1.0f);
    CHECK(pixel_latent_map_from_json("{\"factor\": 0}", &back) == VFM_ERR_FORMAT);
    CHECK(pixel_latent_map_from_json("{\"scale\": [1, 0, 1]}", &back) == VFM_ERR_FORMAT);
    CHECK(pixel_latent_map_from_json("{\"offset\": [1, 2]}", &back) == VFM_ERR_FORMAT);
    CHECK(pixel_latent_map_from_json("[1, 2]", &back) == VFM_ERR_FORMAT);
    CHECK(pixel_latent_map_from_json("{\"factor\": 2", &back) == VFM_ERR_FORMAT);
}

/* ---- the colour judge ---- */

TEST(colour_score_recovers_every_colour_and_shape_at_the_smallest_size) {
    SyntheticConfig cfg = synthetic_config_defaults();
    PixelLatentMap map = pixel_latent_map_default();
    ColourJudge judge = colour_judge_defaults();
    const int H = 32, W = 32, h = H / 2, w = W / 2;
    float px[3 * H * W], lat[3 * h * w], back[3 * h * w];
    for (int colour = 0; colour < SYNTHETIC_N_COLOURS; colour++)
        for (int shape = 0; shape < SHAPE_COUNT; shape++) {
            /* the smallest shape the generator makes, off the pixel grid */
            SyntheticSpec s = {.shape = shape, .colour = colour, .motion = MOTION_STILL, .frames = 1, .height = H, .width = W,
                               .size = cfg.min_size * (float)H, .x0 = 11.37f, .y0 = 19.81f};
            REQUIRE_OK(synthetic_render(&s, 4, px));
            REQUIRE_OK(pixel_to_latent(&map, px, 1, H, W, lat));
            REQUIRE_OK(latent_to_pixel(&map, lat, 1, h, w, back));
            float share;
            int got = colour_dominant_planar(&judge, synthetic_palette, SYNTHETIC_N_COLOURS, back, h * w, h * w, &share);
            CHECK_MSG(got == colour, "%s %s at %dx%d latent: judged %s", synthetic_palette[colour].name,
                      synthetic_shape_name(shape), h, w, got >= 0 ? synthetic_palette[got].name : "none");
            CHECK_MSG(share == 1.0f, "%s %s: share %.3f", synthetic_palette[colour].name, synthetic_shape_name(shape), share);
            /* and on the 8-bit full-resolution picture */
            uint8_t rgb8[3 * H * W];
            for (int p = 0; p < H * W; p++)
                for (int c = 0; c < 3; c++) rgb8[3 * p + c] = (uint8_t)lrintf(px[c * H * W + p] * 255.0f);
            CHECK(colour_dominant_rgb8(&judge, synthetic_palette, SYNTHETIC_N_COLOURS, rgb8, H * W, NULL) == colour);
        }
}

TEST(colour_score_none_dim_pixels_and_majority) {
    ColourJudge judge = colour_judge_defaults();
    enum { N = 100 };
    float img[3 * N] = {0};
    float share = -1;
    CHECK(colour_dominant_planar(&judge, synthetic_palette, SYNTHETIC_N_COLOURS, img, N, N, &share) == -1);
    CHECK(share == 0.0f);
    /* three bright pixels: below min_bright_pixels (4) */
    for (int p = 0; p < 3; p++) img[p] = 1.0f;
    CHECK(colour_dominant_planar(&judge, synthetic_palette, SYNTHETIC_N_COLOURS, img, N, N, NULL) == -1);
    /* many pixels just under the threshold don't count */
    for (int p = 10; p < 60; p++) img[2 * N + p] = 0.24f;
    CHECK(colour_dominant_planar(&judge, synthetic_palette, SYNTHETIC_N_COLOURS, img, N, N, NULL) == -1);
    /* 20 dim-but-bright blue pixels (an anti-aliased edge) and 5 bright red: blue wins, share 20/25 */
    for (int p = 10; p < 30; p++) img[2 * N + p] = 0.3f;
    for (int p = 3; p < 5; p++) img[p] = 1.0f;
    CHECK(colour_dominant_planar(&judge, synthetic_palette, SYNTHETIC_N_COLOURS, img, N, N, &share) == 4);
    CHECK_MSG(fabsf(share - 0.8f) < 1e-6f, "share %.4f", share);
    /* hue, not RGB distance: orange-ish (1, 0.45, 0) is red, (1, 0.55, 0) is yellow; light grey is white */
    const float probes[4][3] = {{1, 0.45f, 0}, {1, 0.55f, 0}, {0.6f, 0.6f, 0.55f}, {0.2f, 0.3f, 0.9f}};
    const char *want[4] = {"red", "yellow", "white", "blue"};
    for (int k = 0; k < 4; k++) {
        float one[3 * 4];
        for (int c = 0; c < 3; c++)
            for (int p = 0; p < 4; p++) one[c * 4 + p] = probes[k][c];
        int got = colour_dominant_planar(&judge, synthetic_palette, SYNTHETIC_N_COLOURS, one, 4, 4, NULL);
        CHECK_MSG(got >= 0 && strcmp(synthetic_palette[got].name, want[k]) == 0, "probe %d judged %d", k, got);
    }
}

TEST(colour_score_finds_the_colour_word_in_a_caption) {
    const NamedColour *pal = synthetic_palette;
    const int n = SYNTHETIC_N_COLOURS;
#define NAME_OF(caption) (colour_from_caption(pal, n, caption) >= 0 ? pal[colour_from_caption(pal, n, caption)].name : "none")
    CHECK(strcmp(NAME_OF("a red circle moving left"), "red") == 0);
    CHECK(strcmp(NAME_OF("A BLUE square"), "blue") == 0);
    CHECK(strcmp(NAME_OF("the magenta, triangle."), "magenta") == 0);
    CHECK(strcmp(NAME_OF("off-white cross"), "white") == 0);
    CHECK(strcmp(NAME_OF("reddish bluegreen shapes"), "none") == 0);
    CHECK(strcmp(NAME_OF(""), "none") == 0);
    CHECK(strcmp(NAME_OF("a green and red square"), "green") == 0); /* the first one named */
#undef NAME_OF
    SyntheticConfig cfg = synthetic_config_defaults();
    for (int i = 0; i < 50; i++) {
        SyntheticSpec s;
        char caption[128];
        REQUIRE_OK(synthetic_spec_generate(&cfg, 3, (uint64_t)i, i & 1, &s));
        synthetic_caption(&s, caption, sizeof caption);
        CHECK(colour_from_caption(pal, n, caption) == s.colour);
    }
}
