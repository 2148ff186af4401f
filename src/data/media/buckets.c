/* Aspect buckets: parsing, the nearest bucket, the centred crop (see buckets.h). */
#include "data/media/buckets.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static vfm_status bad(const char *flag, const char *entry, size_t len, const char *why) {
    return vfm_fail(VFM_ERR_USAGE, "%s: bucket '%.*s': %s", flag, (int)len, entry, why);
}

vfm_status buckets_parse(const char *text, int multiple, const char *flag, BucketSet *out) {
    memset(out, 0, sizeof *out);
    if (multiple < 1) multiple = 1;
    const char *p = text;
    if (!p || !*p) return vfm_fail(VFM_ERR_USAGE, "%s: empty bucket list (want HxW[,HxW...], e.g. 256x256,192x320)", flag);
    for (;;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char entry[64];
        if (len == 0 || len >= sizeof entry) return bad(flag, p, len, "want HxW, e.g. 256x256 (height x width in pixels)");
        memcpy(entry, p, len);
        entry[len] = 0;
        char *x = strchr(entry, 'x'), *e1, *e2;
        if (!x) return bad(flag, p, len, "want HxW, e.g. 256x256 (height x width in pixels)");
        errno = 0;
        long h = strtol(entry, &e1, 10), w = strtol(x + 1, &e2, 10);
        if (e1 != x || *e2 || e1 == entry || x[1] == 0 || errno == ERANGE || entry[0] == '-' || x[1] == '-' ||
            entry[0] == '+' || x[1] == '+')
            return bad(flag, p, len, "want HxW, e.g. 256x256 (height x width in pixels)");
        if (h < 1 || w < 1 || h > BUCKETS_MAX_SIDE || w > BUCKETS_MAX_SIDE) {
            char why[96];
            snprintf(why, sizeof why, "sides must be 1..%d pixels", BUCKETS_MAX_SIDE);
            return bad(flag, p, len, why);
        }
        if (h % multiple || w % multiple) {
            char why[128];
            snprintf(why, sizeof why, "sides must be multiples of the factor %d", multiple);
            return bad(flag, p, len, why);
        }
        for (int i = 0; i < out->n; i++)
            if (out->b[i].height == h && out->b[i].width == w) return bad(flag, p, len, "listed twice");
        if (out->n == BUCKETS_MAX) {
            char why[64];
            snprintf(why, sizeof why, "more than %d buckets", BUCKETS_MAX);
            return bad(flag, p, len, why);
        }
        out->b[out->n].height = (int)h;
        out->b[out->n].width = (int)w;
        out->n++;
        if (!end) break;
        p = end + 1;
    }
    return VFM_OK;
}

void buckets_format(const BucketSet *set, char *buf, size_t n) {
    size_t k = 0;
    if (n) buf[0] = 0;
    for (int i = 0; i < set->n && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%dx%d", i ? "," : "", set->b[i].height, set->b[i].width);
}

int buckets_nearest(const BucketSet *set, double aspect) {
    int best = 0;
    double best_d = INFINITY, la = log(aspect);
    for (int i = 0; i < set->n; i++) {
        double d = fabs(la - log((double)set->b[i].width / set->b[i].height));
        if (d < best_d - 1e-12) {
            best_d = d;
            best = i;
        }
    }
    return best;
}

CropRect buckets_center_crop(int src_w, int src_h, double pixel_aspect, const Bucket *bucket) {
    if (!(pixel_aspect > 0)) pixel_aspect = 1;
    const double want = (double)bucket->width / bucket->height; /* displayed width over height */
    double disp_w = src_w * pixel_aspect, crop_h = src_h, crop_disp_w = crop_h * want;
    if (crop_disp_w > disp_w) { /* too narrow for full height: full width, crop rows */
        crop_disp_w = disp_w;
        crop_h = disp_w / want;
    }
    double crop_w = crop_disp_w / pixel_aspect;
    if (crop_w > src_w) crop_w = src_w;
    if (crop_h > src_h) crop_h = src_h;
    CropRect r = {(src_w - crop_w) / 2, (src_h - crop_h) / 2, crop_w, crop_h};
    return r;
}
