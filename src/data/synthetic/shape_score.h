/* The demo's shape judge: which of the synthetic set's five shapes a picture of one shape on black
 * shows, and which shape a caption asks for.
 *
 * A picture becomes a brightness map (the brightest channel of each pixel, 0 below the colour
 * judge's threshold, so the colour does not matter); only its largest 8-connected group of bright
 * pixels is kept (a speck beside the shape moves neither its frame nor its outline); the group's
 * centroid and spread s = sqrt(var_x + var_y) give a frame that follows the shape's position and
 * size; the map is resampled bilinearly on a G x G grid spanning c ± SHAPE_JUDGE_SPAN·s and scaled
 * to unit length. From real renders of each shape (shape_judge_fit) the judge keeps the class
 * means, their centre (the mean of the means: the average of the five shapes, which is what a
 * picture drawn without regard to its shape word looks like) and a template per shape: its mean
 * less the centre, so that what all shapes share (a bright middle) does not dominate the angle.
 * It names the shape whose template is nearest in angle to the picture's vector less the centre,
 * unless the picture is nearer to the centre than to that shape's mean: then it shows no
 * particular shape (a blob is not a circle). Nothing is tuned on generated pictures: the fit
 * reads only the synthetic renderer's own output, at the resolution the demo trains on (the
 * pixel -> latent box filter, inverted to pixels). Its accuracy on held-out renders is tested
 * (>= 95%). */
#ifndef VFM_DATA_SHAPE_SCORE_H
#define VFM_DATA_SHAPE_SCORE_H

#include <stdint.h>

#include "core/error.h"
#include "data/synthetic/synthetic.h"

#define SHAPE_JUDGE_GRID 12
#define SHAPE_JUDGE_SPAN 2.0f
#define SHAPE_JUDGE_NONE (-2) /* bright enough, but like no shape */
/* What `vfm sample --score-shapes` fits on: 200 renders of each shape of seed 1 (a few ms). */
#define SHAPE_JUDGE_FIT_SEED 1
#define SHAPE_JUDGE_FIT_RENDERS 200

typedef struct {
    float bright_threshold; /* a pixel counts when max(r,g,b) > this (the colour judge's 0.25) */
    int64_t min_bright_pixels;
    float centre[SHAPE_JUDGE_GRID * SHAPE_JUDGE_GRID];            /* the mean of the class means */
    float mean[SHAPE_COUNT][SHAPE_JUDGE_GRID * SHAPE_JUDGE_GRID]; /* class means less the centre, unit length */
    float class_mean[SHAPE_COUNT][SHAPE_JUDGE_GRID * SHAPE_JUDGE_GRID]; /* the class means themselves */
    int fitted;
} ShapeJudge;

/* Fits the class means on n_per_shape real renders of each shape (images and the first frame of
 * videos, alternately, from synthetic_spec_generate with `seed` at the default config), mapped to
 * latent resolution with `factor` (the demo's 2) and back to pixels. */
vfm_status shape_judge_fit(ShapeJudge *judge, uint64_t seed, int n_per_shape, int factor);

/* The shape (SyntheticShape) a picture shows; SHAPE_JUDGE_NONE when it is nearer to the average
 * of the shapes than to its nearest shape; -1 when fewer than min_bright_pixels pixels are bright. rgb: planar float [3, height, width] in [0, 1] (channel c of pixel p at
 * rgb[c * channel_stride + p]; a video's first frame has channel_stride = T*H*W).
 * similarity (may be NULL): the cosine with the nearest template. */
int shape_judge_classify(const ShapeJudge *judge, const float *rgb, int height, int width, int64_t channel_stride,
                         float *similarity);

/* The cosine of a picture with one shape's template (the angle shape_judge_classify ranks shapes
 * by); -2 when the picture has too few bright pixels. A graded reading of how near a picture is to
 * the shape its caption asks for, for comparing runs. */
float shape_judge_similarity(const ShapeJudge *judge, const float *rgb, int height, int width, int64_t channel_stride,
                             int shape);

/* The first shape named as a whole word in the caption (case-insensitive), or -1. */
int shape_from_caption(const char *caption);

#endif
