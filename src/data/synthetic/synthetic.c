/* Moving-shapes renderer, spec generator, captions and the pixel <-> latent mapping
 * (see synthetic.h for the grammar and the mapping). */
#include "data/synthetic/synthetic.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/philox.h"

/* Pure hues 60 degrees apart plus white: they stay apart after box filtering, which only
 * mixes a colour with black (same hue, lower value). */
const NamedColour synthetic_palette[SYNTHETIC_N_COLOURS] = {
    {"red", {1, 0, 0}},  {"yellow", {1, 1, 0}},  {"green", {0, 1, 0}}, {"cyan", {0, 1, 1}},
    {"blue", {0, 0, 1}}, {"magenta", {1, 0, 1}}, {"white", {1, 1, 1}},
};

static const char *const shape_names[SHAPE_COUNT] = {"circle", "square", "triangle", "diamond", "cross"};
static const char *const motion_names[MOTION_COUNT] = {"still", "left", "right", "up", "down"};

const char *synthetic_shape_name(int shape) { return shape >= 0 && shape < SHAPE_COUNT ? shape_names[shape] : "?"; }
const char *synthetic_motion_name(int motion) {
    return motion >= 0 && motion < MOTION_COUNT ? motion_names[motion] : "?";
}

SyntheticConfig synthetic_config_defaults(void) {
    SyntheticConfig c = {0};
    const CanvasSize canvases[3] = {{32, 32}, {32, 48}, {48, 32}};
    for (int i = 0; i < 3; i++) c.image_canvases[i] = c.video_canvases[i] = canvases[i];
    c.n_image_canvases = c.n_video_canvases = 3;
    c.min_frames = 4;
    c.max_frames = 8;
    c.min_size = 0.375f;
    c.max_size = 0.5f;
    c.min_speed = 1.5f;
    c.max_speed = 3.0f;
    c.position_spread = 1.0f;
    return c;
}

/* Draw slots of one sample (element indices in Philox's counter). */
enum { DRAW_CANVAS, DRAW_FRAMES, DRAW_SIZE, DRAW_SPEED, DRAW_MOTION, DRAW_X, DRAW_Y };
/* Per-seed offsets that rotate the (colour, shape) schedule; drawn at a uid no sample uses. */
#define SCHEDULE_UID UINT64_MAX

static int pick(float u, int n) { /* u in (0,1) -> 0..n-1 */
    int k = (int)(u * (float)n);
    return k < n ? k : n - 1;
}

static void motion_vector(int motion, float *vx, float *vy) {
    *vx = motion == MOTION_RIGHT ? 1.0f : motion == MOTION_LEFT ? -1.0f : 0.0f;
    *vy = motion == MOTION_DOWN ? 1.0f : motion == MOTION_UP ? -1.0f : 0.0f;
}

vfm_status synthetic_spec_generate(const SyntheticConfig *cfg, uint64_t seed, uint64_t index, int is_video,
                                   SyntheticSpec *spec) {
    is_video = is_video != 0;
    int n_canvases = is_video ? cfg->n_video_canvases : cfg->n_image_canvases;
    const CanvasSize *canvases = is_video ? cfg->video_canvases : cfg->image_canvases;
    if (n_canvases <= 0 || n_canvases > SYNTHETIC_MAX_CANVASES)
        return vfm_fail(VFM_ERR_USAGE, "synthetic: %d %s canvas sizes (want 1..%d)", n_canvases, is_video ? "video" : "image",
                        SYNTHETIC_MAX_CANVASES);
    if (is_video && (cfg->min_frames < 2 || cfg->max_frames < cfg->min_frames))
        return vfm_fail(VFM_ERR_USAGE, "synthetic: video frames %d..%d (want 2 <= min <= max)", cfg->min_frames, cfg->max_frames);
    if (!(cfg->position_spread >= 0 && cfg->position_spread <= 1))
        return vfm_fail(VFM_ERR_USAGE, "synthetic: position spread %g (want 0..1)", cfg->position_spread);
    if (!(cfg->min_size > 0 && cfg->max_size >= cfg->min_size && cfg->max_size < 1))
        return vfm_fail(VFM_ERR_USAGE, "synthetic: shape size %g..%g of the canvas (want 0 < min <= max < 1)", cfg->min_size,
                        cfg->max_size);
    if (!(cfg->min_speed > 0 && cfg->max_speed >= cfg->min_speed))
        return vfm_fail(VFM_ERR_USAGE, "synthetic: speed %g..%g (want 0 < min <= max)", cfg->min_speed, cfg->max_speed);

    const uint32_t step = (uint32_t)is_video;
#define DRAW(slot) philox_uniform_at(seed, RNG_STREAM_DATA, step, index, (slot))
    uint64_t colour_offset = (uint64_t)pick(philox_uniform_at(seed, RNG_STREAM_DATA, step, SCHEDULE_UID, 0), SYNTHETIC_N_COLOURS);
    uint64_t shape_offset = (uint64_t)pick(philox_uniform_at(seed, RNG_STREAM_DATA, step, SCHEDULE_UID, 1), SHAPE_COUNT);
    /* 7 colours and 5 shapes are coprime, so (index mod 7, index mod 5) runs through every pair
     * once per 35 consecutive indices (Chinese remainder theorem) while both change every index. */
    _Static_assert(SYNTHETIC_N_COLOURS == 7 && SHAPE_COUNT == 5, "the schedule needs coprime colour and shape counts");
    memset(spec, 0, sizeof *spec);
    spec->colour = (int)((index % SYNTHETIC_N_COLOURS + colour_offset) % SYNTHETIC_N_COLOURS);
    spec->shape = (int)((index % SHAPE_COUNT + shape_offset) % SHAPE_COUNT);

    CanvasSize canvas = canvases[pick(DRAW(DRAW_CANVAS), n_canvases)];
    if (canvas.height < 8 || canvas.width < 8)
        return vfm_fail(VFM_ERR_USAGE, "synthetic: canvas %dx%d smaller than 8x8", canvas.height, canvas.width);
    spec->height = canvas.height;
    spec->width = canvas.width;
    spec->frames = is_video ? cfg->min_frames + pick(DRAW(DRAW_FRAMES), cfg->max_frames - cfg->min_frames + 1) : 1;
    float side = (float)(canvas.height < canvas.width ? canvas.height : canvas.width);
    spec->size = side * (cfg->min_size + (cfg->max_size - cfg->min_size) * DRAW(DRAW_SIZE));
    spec->motion = is_video ? MOTION_LEFT + pick(DRAW(DRAW_MOTION), 4) : MOTION_STILL;

    /* The centre stays within [r + margin, extent - r - margin] on its axis in every frame. */
    const float margin = 1.0f, r = 0.5f * spec->size;
    float vx, vy;
    motion_vector(spec->motion, &vx, &vy);
    float along = vx != 0 ? (float)canvas.width : (float)canvas.height;
    float room = along - 2 * (r + margin);
    float travel = 0;
    if (spec->motion != MOTION_STILL) {
        spec->speed = cfg->min_speed + (cfg->max_speed - cfg->min_speed) * DRAW(DRAW_SPEED);
        float max_speed = room / (float)(spec->frames - 1);
        if (spec->speed > max_speed) spec->speed = max_speed;
        travel = spec->speed * (float)(spec->frames - 1);
    }
    /* the speed may shrink to fit the canvas, but never below half the configured minimum */
    if (side - 2 * (r + margin) < 0 ||
        (spec->motion != MOTION_STILL && room < 0.5f * cfg->min_speed * (float)(spec->frames - 1)))
        return vfm_fail(VFM_ERR_USAGE, "synthetic: a %.1f px shape has no room to move %d frames on a %dx%d canvas",
                        spec->size, spec->frames, canvas.height, canvas.width);
    float lo_x = r + margin, hi_x = (float)canvas.width - r - margin;
    float lo_y = r + margin, hi_y = (float)canvas.height - r - margin;
    /* the frame-0 centre range shrinks by the travel on the side the shape moves towards */
    if (vx > 0) hi_x -= travel;
    if (vx < 0) lo_x += travel;
    if (vy > 0) hi_y -= travel;
    if (vy < 0) lo_y += travel;
    /* position_spread < 1 keeps the middle of each range (at 1 the arithmetic is unchanged) */
    if (cfg->position_spread < 1) {
        const float cut = 0.5f * (1.0f - cfg->position_spread), wx = hi_x - lo_x, wy = hi_y - lo_y;
        lo_x += cut * wx, hi_x -= cut * wx;
        lo_y += cut * wy, hi_y -= cut * wy;
    }
    spec->x0 = lo_x + (hi_x - lo_x) * DRAW(DRAW_X);
    spec->y0 = lo_y + (hi_y - lo_y) * DRAW(DRAW_Y);
#undef DRAW
    return VFM_OK;
}

/* Inside test relative to the centre of the bounding square of half-side r. */
static int shape_contains(int shape, float dx, float dy, float r) {
    float ax = fabsf(dx), ay = fabsf(dy);
    switch (shape) {
    case SHAPE_CIRCLE: return dx * dx + dy * dy <= r * r;
    case SHAPE_SQUARE: return ax <= r && ay <= r;
    case SHAPE_TRIANGLE: return dy >= -r && dy <= r && ax <= 0.5f * (dy + r); /* apex up, base down */
    case SHAPE_DIAMOND: return ax + ay <= r;
    case SHAPE_CROSS: return (ax <= r / 3 && ay <= r) || (ay <= r / 3 && ax <= r); /* arms a third of the side wide */
    default: return 0;
    }
}

vfm_status synthetic_render(const SyntheticSpec *spec, int supersample, float *out) {
    if (spec->shape < 0 || spec->shape >= SHAPE_COUNT || spec->colour < 0 || spec->colour >= SYNTHETIC_N_COLOURS ||
        spec->motion < 0 || spec->motion >= MOTION_COUNT)
        return vfm_fail(VFM_ERR_USAGE, "synthetic: bad spec (shape %d, colour %d, motion %d)", spec->shape, spec->colour,
                        spec->motion);
    if (spec->frames < 1 || spec->height < 1 || spec->width < 1 || supersample < 1 || supersample > 16)
        return vfm_fail(VFM_ERR_USAGE, "synthetic: bad render size %dx%dx%d, supersample %d", spec->frames, spec->height,
                        spec->width, supersample);
    const int T = spec->frames, H = spec->height, W = spec->width, ss = supersample;
    const int64_t plane = (int64_t)T * H * W;
    const float *rgb = synthetic_palette[spec->colour].rgb;
    const float r = 0.5f * spec->size, inv_samples = 1.0f / (float)(ss * ss);
    float vx, vy;
    motion_vector(spec->motion, &vx, &vy);
    for (int t = 0; t < T; t++) {
        float cx = spec->x0 + vx * spec->speed * (float)t, cy = spec->y0 + vy * spec->speed * (float)t;
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++) {
                int hits = 0;
                for (int sy = 0; sy < ss; sy++)
                    for (int sx = 0; sx < ss; sx++) {
                        float px = (float)x + ((float)sx + 0.5f) / (float)ss, py = (float)y + ((float)sy + 0.5f) / (float)ss;
                        hits += shape_contains(spec->shape, px - cx, py - cy, r);
                    }
                float coverage = (float)hits * inv_samples;
                int64_t p = ((int64_t)t * H + y) * W + x;
                for (int c = 0; c < 3; c++) out[c * plane + p] = coverage * rgb[c];
            }
    }
    return VFM_OK;
}

int synthetic_caption(const SyntheticSpec *spec, char *buf, size_t n) {
    const char *colour = spec->colour >= 0 && spec->colour < SYNTHETIC_N_COLOURS ? synthetic_palette[spec->colour].name : "?";
    if (spec->motion == MOTION_STILL) return snprintf(buf, n, "a %s %s", colour, synthetic_shape_name(spec->shape));
    return snprintf(buf, n, "a %s %s moving %s", colour, synthetic_shape_name(spec->shape), synthetic_motion_name(spec->motion));
}

/* ---- pixel <-> latent ---- */

PixelLatentMap pixel_latent_map_default(void) {
    return (PixelLatentMap){.factor = 2, .channels = 3, .offset = {0.5f, 0.5f, 0.5f}, .scale = {1.0f, 1.0f, 1.0f}};
}

static vfm_status map_check(const PixelLatentMap *map) {
    if (map->factor < 1 || map->channels != 3) return vfm_fail(VFM_ERR_USAGE, "pixel map: factor %d, channels %d (want >= 1, 3)", map->factor, map->channels);
    for (int c = 0; c < 3; c++)
        if (!(map->scale[c] != 0) || !isfinite(map->scale[c]) || !isfinite(map->offset[c]))
            return vfm_fail(VFM_ERR_USAGE, "pixel map: channel %d offset %g scale %g (want finite, scale != 0)", c, map->offset[c], map->scale[c]);
    return VFM_OK;
}

vfm_status pixel_to_latent(const PixelLatentMap *map, const float *pixels, int frames, int height, int width,
                           float *latent) {
    VFM_TRY(map_check(map));
    const int f = map->factor;
    if (frames < 1 || height < f || width < f || height % f || width % f)
        return vfm_fail(VFM_ERR_SHAPE, "pixel map: %dx%d frame is not a positive multiple of factor %d", height, width, f);
    const int h = height / f, w = width / f;
    const int64_t in_plane = (int64_t)frames * height * width, out_plane = (int64_t)frames * h * w;
    const float inv_area = 1.0f / (float)(f * f);
    for (int c = 0; c < 3; c++)
        for (int t = 0; t < frames; t++)
            for (int y = 0; y < h; y++)
                for (int x = 0; x < w; x++) {
                    const float *src = pixels + c * in_plane + ((int64_t)t * height + (int64_t)y * f) * width + (int64_t)x * f;
                    float sum = 0;
                    for (int dy = 0; dy < f; dy++)
                        for (int dx = 0; dx < f; dx++) sum += src[(int64_t)dy * width + dx];
                    latent[c * out_plane + ((int64_t)t * h + y) * w + x] = (sum * inv_area - map->offset[c]) * map->scale[c];
                }
    return VFM_OK;
}

vfm_status latent_to_pixel(const PixelLatentMap *map, const float *latent, int frames, int h, int w, float *pixels) {
    VFM_TRY(map_check(map));
    const int64_t plane = (int64_t)frames * h * w;
    for (int c = 0; c < 3; c++)
        for (int64_t p = 0; p < plane; p++) pixels[c * plane + p] = latent[c * plane + p] / map->scale[c] + map->offset[c];
    return VFM_OK;
}

int pixel_latent_map_to_json(const PixelLatentMap *map, char *buf, size_t n) {
    return snprintf(buf, n,
                    "{\"factor\":%d,\"channels\":[\"r\",\"g\",\"b\"],\"offset\":[%.9g,%.9g,%.9g],\"scale\":[%.9g,%.9g,%.9g],"
                    "\"layout\":\"CTHW\",\"pixel_range\":[0,1],"
                    "\"inverse\":\"pixel = latent / scale + offset, then repeat each pixel factor x factor\"}",
                    map->factor, (double)map->offset[0], (double)map->offset[1], (double)map->offset[2], (double)map->scale[0],
                    (double)map->scale[1], (double)map->scale[2]);
}

static vfm_status json_triple(json_t *root, const char *key, float out[3]) {
    json_t *v = json_object_get(root, key);
    if (!v) return VFM_OK;
    if (!json_is_array(v) || json_array_size(v) != 3) return vfm_fail_at(VFM_ERR_FORMAT, NULL, key, NULL, "want an array of 3 numbers");
    for (int c = 0; c < 3; c++) {
        json_t *e = json_array_get(v, (size_t)c);
        if (!json_is_number(e)) return vfm_fail_at(VFM_ERR_FORMAT, NULL, key, NULL, "element %d is not a number", c);
        out[c] = (float)json_number_value(e);
    }
    return VFM_OK;
}

vfm_status pixel_latent_map_from_json(const char *json_text, PixelLatentMap *map) {
    *map = pixel_latent_map_default();
    json_error_t err;
    json_t *root = json_loads(json_text, 0, &err);
    if (!root || !json_is_object(root)) {
        json_decref(root);
        return vfm_fail(VFM_ERR_FORMAT, "pixel_space: not a JSON object (%s)", root ? "wrong type" : err.text);
    }
    vfm_status s = VFM_OK;
    json_t *factor = json_object_get(root, "factor");
    if (factor) {
        if (!json_is_integer(factor) || json_integer_value(factor) < 1 || json_integer_value(factor) > 64)
            s = vfm_fail_at(VFM_ERR_FORMAT, NULL, "pixel_space.factor", NULL, "want an integer in [1, 64]");
        else map->factor = (int)json_integer_value(factor);
    }
    if (s == VFM_OK) s = json_triple(root, "offset", map->offset);
    if (s == VFM_OK) s = json_triple(root, "scale", map->scale);
    json_decref(root);
    if (s == VFM_OK) s = map_check(map);
    if (s != VFM_OK && s != VFM_ERR_FORMAT) s = vfm_fail_context(VFM_ERR_FORMAT, "pixel_space");
    return s;
}
