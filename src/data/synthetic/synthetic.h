/* The synthetic "moving shapes" set: one saturated shape on black per sample, still (image) or
 * moving left/right/up/down (video); a pure function of (seed, index) through Philox; a caption
 * naming colour, shape and motion; and the pixel <-> latent mapping that stores it in pixel space.
 *
 * Caption grammar:  image  "a <colour> <shape>"            e.g. "a red circle"
 *                   video  "a <colour> <shape> moving <direction>"  e.g. "a blue cross moving left"
 * colour ∈ red yellow green cyan blue magenta white; shape ∈ circle square triangle diamond cross;
 * direction ∈ left right up down (image coordinates: "up" = towards row 0).
 *
 * Pixel -> latent (PixelLatentMap): box-filter downsample by `factor`, then per channel
 *     latent = (pixel - offset) * scale;   inverse: pixel = latent / scale + offset
 * (at latent resolution; upsample by `factor` with nearest for viewing). Default: factor 2,
 * offset 0.5, scale 1 — the usual [-1, 1] normalisation times EDM's sigma_data = 0.5. Every
 * channel of every pixel is 0 (background) or 1 (shape) apart from anti-aliased edges, so the
 * latent is ±0.5 almost everywhere and its RMS is ~0.5 = sigma_data however much of the frame
 * is background. Layout [C=3 (r,g,b), T, H, W] float32, pixels in [0, 1]. */
#ifndef VFM_DATA_SYNTHETIC_H
#define VFM_DATA_SYNTHETIC_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "data/synthetic/colour_score.h"

typedef enum { SHAPE_CIRCLE, SHAPE_SQUARE, SHAPE_TRIANGLE, SHAPE_DIAMOND, SHAPE_CROSS, SHAPE_COUNT } SyntheticShape;
typedef enum { MOTION_STILL, MOTION_LEFT, MOTION_RIGHT, MOTION_UP, MOTION_DOWN, MOTION_COUNT } SyntheticMotion;

/* The named colours of the set (also the judge's palette). */
#define SYNTHETIC_N_COLOURS 7
extern const NamedColour synthetic_palette[SYNTHETIC_N_COLOURS];
const char *synthetic_shape_name(int shape);
const char *synthetic_motion_name(int motion); /* "still", "left", ... */

typedef struct {
    int shape, colour, motion; /* SyntheticShape, index into synthetic_palette, SyntheticMotion */
    int frames, height, width; /* T (1 for an image), canvas H x W in pixels */
    float size;                /* side of the shape's bounding square, pixels */
    float x0, y0;              /* centre of the bounding square at frame 0 (pixel (x, y) covers [x, x+1)) */
    float speed;               /* pixels per frame along `motion` (0 when still) */
} SyntheticSpec;

typedef struct {
    int height, width;
} CanvasSize;

#define SYNTHETIC_MAX_CANVASES 8
typedef struct {
    CanvasSize image_canvases[SYNTHETIC_MAX_CANVASES];
    int n_image_canvases;
    CanvasSize video_canvases[SYNTHETIC_MAX_CANVASES];
    int n_video_canvases;
    int min_frames, max_frames;       /* videos: T uniform in [min, max] */
    float min_size, max_size;         /* shape size as a fraction of min(H, W) */
    float min_speed, max_speed;       /* pixels per frame (reduced when the canvas is too small) */
    float position_spread;            /* frame-0 centres from the middle fraction of their room: 1 anywhere, 0 the middle */
} SyntheticConfig;

/* Canvases 32x32, 32x48, 48x32 (H x W) for images and videos; videos of 4..8 frames; shapes
 * 0.375..0.5 of the shorter side (12..16 px on a 32 px side: >= 6 latent pixels at factor 2);
 * 1.5..3 px per frame; centres anywhere the shape fits (position_spread 1). */
SyntheticConfig synthetic_config_defaults(void);

/* The spec of sample `index` (images and videos are separate sequences). Over any run of
 * SYNTHETIC_N_COLOURS * SHAPE_COUNT consecutive indices every (colour, shape) pair occurs
 * exactly once; everything else is drawn from Philox (RNG_STREAM_DATA, uid = index). The
 * shape stays wholly inside the canvas in every frame. */
vfm_status synthetic_spec_generate(const SyntheticConfig *cfg, uint64_t seed, uint64_t index, int is_video,
                                   SyntheticSpec *spec);

/* Renders the spec in [0, 1] on black, anti-aliased with supersample^2 samples per pixel.
 * out: [3, frames, height, width]. */
vfm_status synthetic_render(const SyntheticSpec *spec, int supersample, float *out);

/* Writes the caption (grammar above) into buf; returns its length (as snprintf). */
int synthetic_caption(const SyntheticSpec *spec, char *buf, size_t n);

/* ---- pixel <-> latent ---- */

typedef struct {
    int factor;      /* box-filter downsampling factor (>= 1) */
    int channels;    /* 3: r, g, b */
    float offset[3]; /* latent = (pixel - offset) * scale */
    float scale[3];
} PixelLatentMap;

PixelLatentMap pixel_latent_map_default(void);

/* pixels: [3, frames, height, width] -> latent: [3, frames, height/f, width/f]; height and width
 * must be multiples of the factor. */
vfm_status pixel_to_latent(const PixelLatentMap *map, const float *pixels, int frames, int height, int width,
                           float *latent);
/* latent: [3, frames, h, w] -> pixels: [3, frames, h, w] (the exact inverse of the affine part; no clamping). */
vfm_status latent_to_pixel(const PixelLatentMap *map, const float *latent, int frames, int h, int w, float *pixels);

/* The mapping as the JSON object stored in a sample's metadata under "pixel_space", e.g.
 * {"factor":2,"channels":["r","g","b"],"offset":[0.5,0.5,0.5],"scale":[1,1,1],"layout":"CTHW",...}.
 * Returns the length written (as snprintf). */
int pixel_latent_map_to_json(const PixelLatentMap *map, char *buf, size_t n);
/* Parses that object (text); missing keys keep the default's values; bad values are VFM_ERR_FORMAT. */
vfm_status pixel_latent_map_from_json(const char *json_text, PixelLatentMap *map);

#endif
