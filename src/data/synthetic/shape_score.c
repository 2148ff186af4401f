/* The shape judge (see shape_score.h): a normalised brightness map, nearest class mean by angle. */
#include "data/synthetic/shape_score.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define G SHAPE_JUDGE_GRID

/* The judged brightness of pixel p: its brightest channel, 0 at or below the threshold. */
static float brightness(const float *rgb, int64_t stride, int64_t p, float threshold) {
    float v = fmaxf(rgb[p], fmaxf(rgb[stride + p], rgb[2 * stride + p]));
    return v > threshold ? fminf(v, 1.0f) : 0.0f;
}

static float bilinear(const float *map, int height, int width, float y, float x) {
    int y0 = (int)floorf(y), x0 = (int)floorf(x);
    float fy = y - (float)y0, fx = x - (float)x0, sum = 0;
    for (int dy = 0; dy < 2; dy++)
        for (int dx = 0; dx < 2; dx++) {
            int yy = y0 + dy, xx = x0 + dx;
            if (yy < 0 || yy >= height || xx < 0 || xx >= width) continue;
            sum += (dy ? fy : 1 - fy) * (dx ? fx : 1 - fx) * map[(int64_t)yy * width + xx];
        }
    return sum;
}

/* Keeps the largest 8-connected group of bright pixels (by brightness mass) and clears the rest:
 * a speck or a second faint blob beside the shape moves neither its frame nor its outline. The
 * sums of the kept group replace *mass, *sx, *sy. */
static void keep_largest_object(float *map, int height, int width, double *mass, double *sx, double *sy) {
    int64_t n = (int64_t)height * width;
    int *label = calloc((size_t)n, sizeof(int)), *stack = malloc((size_t)n * sizeof(int));
    if (!label || !stack) { /* keep the whole map: the frame is then the plain one */
        free(label);
        free(stack);
        return;
    }
    int best = 0, next = 0;
    double best_mass = 0, best_sx = 0, best_sy = 0;
    for (int64_t start = 0; start < n; start++) {
        if (map[start] <= 0 || label[start]) continue;
        int top = 0;
        double m = 0, x_sum = 0, y_sum = 0;
        label[start] = ++next;
        stack[top++] = (int)start;
        while (top) {
            int p = stack[--top], y = p / width, x = p % width;
            m += map[p], x_sum += map[p] * (x + 0.5), y_sum += map[p] * (y + 0.5);
            for (int dy = -1; dy <= 1; dy++)
                for (int dx = -1; dx <= 1; dx++) {
                    int yy = y + dy, xx = x + dx;
                    if (yy < 0 || yy >= height || xx < 0 || xx >= width) continue;
                    int q = yy * width + xx;
                    if (map[q] > 0 && !label[q]) label[q] = next, stack[top++] = q;
                }
        }
        if (m > best_mass) best = next, best_mass = m, best_sx = x_sum, best_sy = y_sum;
    }
    for (int64_t p = 0; p < n; p++)
        if (label[p] != best) map[p] = 0;
    *mass = best_mass, *sx = best_sx, *sy = best_sy;
    free(label);
    free(stack);
}

/* out[G*G]: the unit-length descriptor of the picture; 0 when too few pixels are bright. */
static int describe(const float *rgb, int height, int width, int64_t stride, float threshold, int64_t min_bright,
                    float *out) {
    int64_t n = (int64_t)height * width, bright = 0;
    float *map = malloc((size_t)n * sizeof(float));
    if (!map) return 0;
    double mass = 0, sx = 0, sy = 0;
    for (int y = 0; y < height; y++)
        for (int x = 0; x < width; x++) {
            int64_t p = (int64_t)y * width + x;
            float v = brightness(rgb, stride, p, threshold);
            map[p] = v;
            bright += v > 0;
            mass += v;
            sx += v * (x + 0.5);
            sy += v * (y + 0.5);
        }
    if (bright < min_bright || mass <= 0) {
        free(map);
        return 0;
    }
    keep_largest_object(map, height, width, &mass, &sx, &sy);
    double cx = sx / mass, cy = sy / mass, vxx = 0, vyy = 0;
    for (int y = 0; y < height; y++)
        for (int x = 0; x < width; x++) {
            float v = map[(int64_t)y * width + x];
            vxx += v * (x + 0.5 - cx) * (x + 0.5 - cx);
            vyy += v * (y + 0.5 - cy) * (y + 0.5 - cy);
        }
    float s = (float)sqrt((vxx + vyy) / mass);
    if (s < 0.5f) s = 0.5f;
    double norm = 0;
    for (int i = 0; i < G; i++)
        for (int j = 0; j < G; j++) {
            /* grid cell centres over [c - span·s, c + span·s]; pixel centres sit at (x + 0.5) */
            float u = -SHAPE_JUDGE_SPAN + 2 * SHAPE_JUDGE_SPAN * ((float)j + 0.5f) / G;
            float w = -SHAPE_JUDGE_SPAN + 2 * SHAPE_JUDGE_SPAN * ((float)i + 0.5f) / G;
            float v = bilinear(map, height, width, (float)cy + w * s - 0.5f, (float)cx + u * s - 0.5f);
            out[i * G + j] = v;
            norm += (double)v * v;
        }
    free(map);
    if (norm <= 0) return 0;
    float inv = (float)(1.0 / sqrt(norm));
    for (int k = 0; k < G * G; k++) out[k] *= inv;
    return 1;
}

/* desc[G*G] of one real render (the first frame), mapped to latent resolution and back to pixels */
static vfm_status describe_render(const ShapeJudge *judge, const SyntheticSpec *spec, int factor, float *desc, int *ok) {
    PixelLatentMap map = pixel_latent_map_default();
    map.factor = factor;
    SyntheticSpec one = *spec;
    one.frames = 1;
    int H = one.height, W = one.width, h = H / factor, w = W / factor;
    float *pix = malloc((size_t)3 * H * W * sizeof(float)), *lat = malloc((size_t)3 * h * w * sizeof(float));
    vfm_status s = pix && lat ? VFM_OK : vfm_fail(VFM_ERR_NOMEM, "shape judge: a %dx%d render", H, W);
    if (s == VFM_OK) s = synthetic_render(&one, 4, pix);
    if (s == VFM_OK) s = pixel_to_latent(&map, pix, 1, H, W, lat);
    if (s == VFM_OK) s = latent_to_pixel(&map, lat, 1, h, w, pix);
    *ok = s == VFM_OK && describe(pix, h, w, (int64_t)h * w, judge->bright_threshold, judge->min_bright_pixels, desc);
    free(pix);
    free(lat);
    return s;
}

/* The cosine of desc (a unit-length descriptor) less the centre with class c's mean. */
static float similarity_to(const ShapeJudge *judge, const float *desc, int c) {
    double dot = 0, norm = 0;
    for (int k = 0; k < G * G; k++) {
        double v = desc[k] - judge->centre[k];
        dot += v * judge->mean[c][k];
        norm += v * v;
    }
    return norm > 0 ? (float)(dot / sqrt(norm)) : -1.0f;
}

vfm_status shape_judge_fit(ShapeJudge *judge, uint64_t seed, int n_per_shape, int factor) {
    memset(judge, 0, sizeof *judge);
    judge->bright_threshold = 0.25f;
    judge->min_bright_pixels = 4;
    if (n_per_shape < 1) return vfm_fail(VFM_ERR_USAGE, "shape judge: %d renders per shape (want >= 1)", n_per_shape);
    if (factor < 1 || 32 % factor) return vfm_fail(VFM_ERR_USAGE, "shape judge: factor %d does not divide 32", factor);
    SyntheticConfig cfg = synthetic_config_defaults();
    int n = SHAPE_COUNT * n_per_shape, *shape = malloc((size_t)n * sizeof(int));
    float *desc = malloc((size_t)n * G * G * sizeof(float));
    if (!shape || !desc) {
        free(shape);
        free(desc);
        return vfm_fail(VFM_ERR_NOMEM, "shape judge: %d descriptors", n);
    }
    /* the set's schedule cycles through the shapes, so 5·n consecutive indices give n of each;
     * images and videos' first frames alternate in runs of five */
    vfm_status s = VFM_OK;
    int kept = 0, count[SHAPE_COUNT] = {0};
    for (int i = 0; i < n && s == VFM_OK; i++) {
        SyntheticSpec spec;
        int ok = 0;
        s = synthetic_spec_generate(&cfg, seed, (uint64_t)i, (i / SHAPE_COUNT) % 2, &spec);
        if (s == VFM_OK) s = describe_render(judge, &spec, factor, desc + (size_t)kept * G * G, &ok);
        if (s == VFM_OK && ok) count[shape[kept++] = spec.shape]++;
    }
    for (int c = 0; c < SHAPE_COUNT && s == VFM_OK; c++)
        if (!count[c]) s = vfm_fail(VFM_ERR_INTERNAL, "shape judge: no render of %s was bright enough", synthetic_shape_name(c));
    if (s == VFM_OK) {
        /* class means; the centre is their mean; each class's template is its mean less the centre */
        double sum[SHAPE_COUNT][G * G];
        memset(sum, 0, sizeof sum);
        for (int i = 0; i < kept; i++)
            for (int k = 0; k < G * G; k++) sum[shape[i]][k] += desc[(size_t)i * G * G + k] / count[shape[i]];
        for (int k = 0; k < G * G; k++) {
            double centre = 0;
            for (int c = 0; c < SHAPE_COUNT; c++) centre += sum[c][k] / SHAPE_COUNT;
            judge->centre[k] = (float)centre;
        }
        for (int c = 0; c < SHAPE_COUNT; c++) {
            double norm = 0;
            for (int k = 0; k < G * G; k++) norm += pow(sum[c][k] - judge->centre[k], 2);
            for (int k = 0; k < G * G; k++) judge->mean[c][k] = (float)((sum[c][k] - judge->centre[k]) / sqrt(norm));
            for (int k = 0; k < G * G; k++) judge->class_mean[c][k] = (float)sum[c][k];
        }
        judge->fitted = 1;
    }
    free(shape);
    free(desc);
    return s;
}

int shape_judge_classify(const ShapeJudge *judge, const float *rgb, int height, int width, int64_t channel_stride,
                         float *similarity) {
    float desc[G * G];
    if (similarity) *similarity = 0;
    if (!judge->fitted ||
        !describe(rgb, height, width, channel_stride, judge->bright_threshold, judge->min_bright_pixels, desc))
        return -1;
    int best = -1;
    float best_sim = -2;
    for (int c = 0; c < SHAPE_COUNT; c++) {
        float sim = similarity_to(judge, desc, c);
        if (sim > best_sim) best_sim = sim, best = c;
    }
    if (similarity) *similarity = best_sim;
    /* the centre is the average of the five shapes: what a picture drawn without regard to the shape looks like */
    double d_centre = 0, d_best = 0;
    for (int k = 0; k < G * G; k++) {
        d_centre += pow(desc[k] - judge->centre[k], 2);
        d_best += pow(desc[k] - judge->class_mean[best][k], 2);
    }
    return d_best < d_centre ? best : SHAPE_JUDGE_NONE;
}

float shape_judge_similarity(const ShapeJudge *judge, const float *rgb, int height, int width, int64_t channel_stride,
                             int shape) {
    float desc[G * G];
    if (!judge->fitted || shape < 0 || shape >= SHAPE_COUNT ||
        !describe(rgb, height, width, channel_stride, judge->bright_threshold, judge->min_bright_pixels, desc))
        return -2;
    return similarity_to(judge, desc, shape);
}

int shape_from_caption(const char *caption) {
    const char *names[SHAPE_COUNT];
    for (int c = 0; c < SHAPE_COUNT; c++) names[c] = synthetic_shape_name(c);
    return caption_find_word(caption, names, SHAPE_COUNT);
}
