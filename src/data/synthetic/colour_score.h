/* The demo's judge: which named colour dominates a picture of shapes on black, and which
 * colour a caption asks for. A pixel takes part when its brightest channel exceeds the
 * threshold; it votes for the palette colour nearest in hue (or for the achromatic entry, such
 * as white, when its saturation is low); the most voted colour wins. Hue and saturation ignore
 * brightness, so the dim anti-aliased edge of a red shape still votes red. Palettes hold at most
 * 64 colours (later entries are ignored). */
#ifndef VFM_DATA_COLOUR_SCORE_H
#define VFM_DATA_COLOUR_SCORE_H

#include <stdint.h>

typedef struct {
    const char *name;
    float rgb[3]; /* in [0, 1] */
} NamedColour;

typedef struct {
    float bright_threshold;      /* a pixel counts when max(r,g,b) > this (background is 0) */
    int64_t min_bright_pixels;   /* fewer counted pixels -> no colour (-1) */
    float achromatic_saturation; /* (max-min)/max below this votes for the achromatic entry */
} ColourJudge;

/* bright_threshold 0.25, min_bright_pixels 4, achromatic_saturation 0.35. */
ColourJudge colour_judge_defaults(void);

/* Palette index of the dominant colour, or -1 when fewer than min_bright_pixels pixels are bright.
 * rgb: planar float, channel c of pixel p at rgb[c * channel_stride + p], p < n_pixels
 *      (an image [3, H, W] has channel_stride = H*W; a video [3, T, H, W] has T*H*W).
 * share (may be NULL): the winner's votes / bright pixels (0 when none). */
int colour_dominant_planar(const ColourJudge *judge, const NamedColour *palette, int n_palette, const float *rgb,
                           int64_t n_pixels, int64_t channel_stride, float *share);
/* The same for 8-bit interleaved pixels [n_pixels, 3]. */
int colour_dominant_rgb8(const ColourJudge *judge, const NamedColour *palette, int n_palette, const uint8_t *rgb,
                         int64_t n_pixels, float *share);

/* Index into words[n_words] of the first of them that the caption holds as a whole word (a run of
 * ASCII letters; case-insensitive), or -1 when none is. */
int caption_find_word(const char *caption, const char *const *words, int n_words);
/* Palette index of the first palette colour named as a whole word in caption (case-insensitive),
 * or -1 when none is. */
int colour_from_caption(const NamedColour *palette, int n_palette, const char *caption);

#endif
