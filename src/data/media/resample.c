/* Area / bicubic resampling of a crop rectangle, separable: rows first, then columns (see resample.h). */
#include "data/media/resample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

vfm_status pixel_image_alloc(PixelImage *img, int width, int height, int depth) {
    memset(img, 0, sizeof *img);
    if (width < 1 || height < 1 || (depth != 8 && depth != 16) || (int64_t)width * height > ((int64_t)1 << 30))
        return vfm_fail(VFM_ERR_SHAPE, "picture %dx%d (%d-bit) out of range", width, height, depth);
    size_t stride = (size_t)width * 3 * (size_t)(depth / 8);
    img->data = malloc(stride * (size_t)height);
    if (!img->data) return vfm_fail(VFM_ERR_NOMEM, "picture %dx%d: out of memory", width, height);
    img->width = width;
    img->height = height;
    img->depth = depth;
    img->stride = stride;
    return VFM_OK;
}

void pixel_image_free(PixelImage *img) {
    free(img->data);
    memset(img, 0, sizeof *img);
}

/* Filter taps of one axis: output i reads source first[i] .. first[i] + taps - 1 with weight[i * taps + k]. */
typedef struct {
    int taps;
    int *first;
    float *weight;
    int lo, hi; /* source range any output reads: [lo, hi) */
} AxisFilter;

static void axis_free(AxisFilter *f) {
    free(f->first);
    free(f->weight);
}

static double cubic(double x) { /* Keys, a = -0.5 */
    x = fabs(x);
    if (x < 1) return (1.5 * x - 2.5) * x * x + 1;
    if (x < 2) return ((-0.5 * x + 2.5) * x - 4) * x + 2;
    return 0;
}

/* Output n pixels from source [x0, x0 + len) of an axis of src_n pixels. */
static vfm_status axis_build(AxisFilter *f, int src_n, double x0, double len, int n) {
    memset(f, 0, sizeof *f);
    const double scale = len / n; /* source pixels per output pixel */
    const int area = scale > 1.0 + 1e-9;
    f->taps = area ? (int)ceil(scale) + 2 : 4;
    f->first = malloc((size_t)n * sizeof *f->first);
    f->weight = calloc((size_t)n * (size_t)f->taps, sizeof *f->weight);
    if (!f->first || !f->weight) {
        axis_free(f);
        return vfm_fail(VFM_ERR_NOMEM, "resample: out of memory");
    }
    f->lo = src_n;
    f->hi = 0;
    for (int i = 0; i < n; i++) {
        float *w = f->weight + (size_t)i * f->taps;
        int first;
        if (area) {
            double a = x0 + i * scale, b = a + scale;
            first = (int)floor(a);
            if (first < 0) first = 0;
            if (first > src_n - 1) first = src_n - 1;
            double sum = 0;
            for (int k = 0; k < f->taps; k++) {
                int j = first + k;
                if (j >= src_n) break;
                double lo = a > j ? a : j, hi = b < j + 1 ? b : j + 1;
                if (hi > lo) w[k] = (float)(hi - lo), sum += hi - lo;
            }
            for (int k = 0; k < f->taps && sum > 0; k++) w[k] = (float)(w[k] / sum);
        } else {
            double c = x0 + (i + 0.5) * scale - 0.5; /* source coordinate of the output pixel's centre */
            int j0 = (int)floor(c) - 1;
            /* taps j0 .. j0+3, clamped to the picture: a clamped tap adds its weight to the edge pixel */
            first = j0 < 0 ? 0 : j0;
            if (first > src_n - 4) first = src_n - 4 > 0 ? src_n - 4 : 0;
            for (int k = 0; k < 4; k++) {
                int j = j0 + k, jc = j < 0 ? 0 : j >= src_n ? src_n - 1 : j;
                int slot = jc - first;
                if (slot >= 0 && slot < f->taps) w[slot] += (float)cubic(c - j);
            }
        }
        f->first[i] = first;
        if (first < f->lo) f->lo = first;
        int last = first;
        for (int k = 0; k < f->taps; k++)
            if (w[k] != 0.0f && first + k < src_n) last = first + k;
        if (last + 1 > f->hi) f->hi = last + 1;
    }
    return VFM_OK;
}

vfm_status resample_crop(const PixelImage *src, const CropRect *crop, int out_h, int out_w, float *out,
                         size_t out_stride) {
    if (out_h < 1 || out_w < 1) return vfm_fail(VFM_ERR_SHAPE, "resample: output %dx%d", out_h, out_w);
    if (!(crop->width > 0 && crop->height > 0 && crop->x0 >= -1e-6 && crop->y0 >= -1e-6 &&
          crop->x0 + crop->width <= src->width + 1e-6 && crop->y0 + crop->height <= src->height + 1e-6))
        return vfm_fail(VFM_ERR_SHAPE, "resample: crop %g,%g %gx%g outside the %dx%d picture", crop->x0, crop->y0,
                        crop->width, crop->height, src->width, src->height);
    if (!out_stride) out_stride = (size_t)out_h * out_w;
    AxisFilter fx, fy;
    VFM_TRY(axis_build(&fx, src->width, crop->x0, crop->width, out_w));
    vfm_status s = axis_build(&fy, src->height, crop->y0, crop->height, out_h);
    if (s != VFM_OK) {
        axis_free(&fx);
        return s;
    }
    const int rows = fy.hi - fy.lo;
    float *line = malloc((size_t)(fx.hi - fx.lo) * 3 * sizeof(float));
    float *tmp = malloc((size_t)rows * out_w * 3 * sizeof(float)); /* [rows, out_w, 3] */
    if (!line || !tmp) {
        s = vfm_fail(VFM_ERR_NOMEM, "resample: out of memory");
        goto done;
    }
    const float unit = src->depth == 16 ? 1.0f / 65535.0f : 1.0f / 255.0f;
    for (int y = fy.lo; y < fy.hi; y++) {
        const uint8_t *row = src->data + (size_t)y * src->stride;
        const int n = (fx.hi - fx.lo) * 3;
        if (src->depth == 16) {
            const uint16_t *r16 = (const uint16_t *)(const void *)row + (size_t)fx.lo * 3;
            for (int k = 0; k < n; k++) line[k] = r16[k] * unit;
        } else {
            const uint8_t *r8 = row + (size_t)fx.lo * 3;
            for (int k = 0; k < n; k++) line[k] = r8[k] * unit;
        }
        float *dst = tmp + (size_t)(y - fy.lo) * out_w * 3;
        for (int i = 0; i < out_w; i++) {
            const float *w = fx.weight + (size_t)i * fx.taps;
            const float *px = line + (size_t)(fx.first[i] - fx.lo) * 3;
            float r = 0, g = 0, b = 0;
            for (int k = 0; k < fx.taps && fx.first[i] + k < fx.hi; k++) {
                r += w[k] * px[3 * k];
                g += w[k] * px[3 * k + 1];
                b += w[k] * px[3 * k + 2];
            }
            dst[3 * i] = r, dst[3 * i + 1] = g, dst[3 * i + 2] = b;
        }
    }
    for (int j = 0; j < out_h; j++) {
        const float *w = fy.weight + (size_t)j * fy.taps;
        for (int c = 0; c < 3; c++) {
            float *o = out + c * out_stride + (size_t)j * out_w;
            for (int i = 0; i < out_w; i++) {
                float v = 0;
                for (int k = 0; k < fy.taps && fy.first[j] + k < fy.hi; k++)
                    v += w[k] * tmp[((size_t)(fy.first[j] + k - fy.lo) * out_w + i) * 3 + c];
                o[i] = v < 0.0f ? 0.0f : v > 1.0f ? 1.0f : v;
            }
        }
    }
done:
    free(line);
    free(tmp);
    axis_free(&fx);
    axis_free(&fy);
    return s;
}
