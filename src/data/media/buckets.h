/* Aspect buckets for `vfm prepare images|videos`: the list "HxW,HxW,..." (pixels, height first, as
 * the synthetic set's canvases), the bucket whose aspect ratio is nearest a picture's (in log ratio,
 * so 2:1 and 1:2 are equally far from 1:1), and the centred crop of the picture to that aspect. */
#ifndef VFM_DATA_BUCKETS_H
#define VFM_DATA_BUCKETS_H

#include <stddef.h>

#include "core/error.h"

#define BUCKETS_MAX 64
#define BUCKETS_MAX_SIDE 16384
/* About 256x256 pixels each, aspect 1:1, ~4:5, ~3:5 and ~5:12 both ways; sides multiples of 32. */
#define BUCKETS_DEFAULT "256x256,288x224,224x288,320x192,192x320,384x160,160x384"

typedef struct {
    int height, width;
} Bucket;

typedef struct {
    Bucket b[BUCKETS_MAX];
    int n;
} BucketSet;

/* Parses "HxW[,HxW...]": 1..BUCKETS_MAX distinct buckets, sides 1..BUCKETS_MAX_SIDE and multiples of
 * `multiple` (the pixel -> latent factor). Errors are VFM_ERR_USAGE naming the flag and the entry. */
vfm_status buckets_parse(const char *text, int multiple, const char *flag, BucketSet *out);
/* "HxW,HxW,..." into buf. */
void buckets_format(const BucketSet *set, char *buf, size_t n);

/* Index of the bucket whose width/height is nearest `aspect` (display width over height) in
 * |log(aspect) - log(bucket aspect)|; the first in the list on a tie. */
int buckets_nearest(const BucketSet *set, double aspect);

/* A rectangle in source pixel coordinates (pixel (x, y) covers [x, x+1) x [y, y+1)). */
typedef struct {
    double x0, y0, width, height;
} CropRect;

/* The largest centred rectangle of a src_w x src_h picture whose displayed aspect is the bucket's.
 * pixel_aspect: displayed width of one source pixel over its height (a video's sample aspect ratio;
 * 1 for pictures). */
CropRect buckets_center_crop(int src_w, int src_h, double pixel_aspect, const Bucket *bucket);

#endif
