/* Dominant-colour judge and caption colour parser (see colour_score.h). */
#include "data/synthetic/colour_score.h"

#include <ctype.h>
#include <math.h>
#include <string.h>
#include <strings.h>

#define PALETTE_MAX 64

ColourJudge colour_judge_defaults(void) {
    return (ColourJudge){.bright_threshold = 0.25f, .min_bright_pixels = 4, .achromatic_saturation = 0.35f};
}

/* Hue in degrees [0, 360) and saturation (max-min)/max of a colour with max > 0. */
static void hue_saturation(float r, float g, float b, float *hue, float *sat) {
    float mx = fmaxf(r, fmaxf(g, b)), mn = fminf(r, fminf(g, b)), d = mx - mn;
    *sat = mx > 0 ? d / mx : 0;
    float h = 0;
    if (d > 0) {
        if (mx == r) h = 60.0f * fmodf((g - b) / d + 6.0f, 6.0f);
        else if (mx == g) h = 60.0f * ((b - r) / d + 2.0f);
        else h = 60.0f * ((r - g) / d + 4.0f);
    }
    *hue = h;
}

typedef struct {
    int n;
    float hue[PALETTE_MAX];
    int chromatic[PALETTE_MAX];
    int achromatic_entry; /* brightest low-saturation entry, -1 if none */
    int64_t votes[PALETTE_MAX];
    int64_t bright;
} Tally;

static void tally_init(Tally *t, const ColourJudge *judge, const NamedColour *palette, int n_palette) {
    memset(t, 0, sizeof *t);
    t->n = n_palette < PALETTE_MAX ? n_palette : PALETTE_MAX;
    t->achromatic_entry = -1;
    float best_value = -1;
    for (int i = 0; i < t->n; i++) {
        float sat;
        hue_saturation(palette[i].rgb[0], palette[i].rgb[1], palette[i].rgb[2], &t->hue[i], &sat);
        t->chromatic[i] = sat >= judge->achromatic_saturation;
        float value = fmaxf(palette[i].rgb[0], fmaxf(palette[i].rgb[1], palette[i].rgb[2]));
        if (!t->chromatic[i] && value > best_value) {
            best_value = value;
            t->achromatic_entry = i;
        }
    }
}

static void tally_pixel(Tally *t, const ColourJudge *judge, float r, float g, float b) {
    if (!(fmaxf(r, fmaxf(g, b)) > judge->bright_threshold)) return;
    t->bright++;
    float hue, sat;
    hue_saturation(r, g, b, &hue, &sat);
    int best = -1;
    if (sat < judge->achromatic_saturation && t->achromatic_entry >= 0) {
        best = t->achromatic_entry;
    } else {
        float best_d = 1e9f;
        for (int i = 0; i < t->n; i++) {
            if (!t->chromatic[i]) continue;
            float d = fabsf(hue - t->hue[i]);
            if (d > 180.0f) d = 360.0f - d;
            if (d < best_d) {
                best_d = d;
                best = i;
            }
        }
        if (best < 0) best = t->achromatic_entry; /* a palette of achromatic colours only */
    }
    if (best >= 0) t->votes[best]++;
}

static int tally_winner(const Tally *t, const ColourJudge *judge, float *share) {
    if (share) *share = 0;
    if (t->bright < judge->min_bright_pixels || t->bright == 0) return -1;
    int best = -1;
    for (int i = 0; i < t->n; i++)
        if (t->votes[i] > 0 && (best < 0 || t->votes[i] > t->votes[best])) best = i;
    if (best >= 0 && share) *share = (float)t->votes[best] / (float)t->bright;
    return best;
}

int colour_dominant_planar(const ColourJudge *judge, const NamedColour *palette, int n_palette, const float *rgb,
                           int64_t n_pixels, int64_t channel_stride, float *share) {
    Tally t;
    tally_init(&t, judge, palette, n_palette);
    for (int64_t p = 0; p < n_pixels; p++)
        tally_pixel(&t, judge, rgb[p], rgb[channel_stride + p], rgb[2 * channel_stride + p]);
    return tally_winner(&t, judge, share);
}

int colour_dominant_rgb8(const ColourJudge *judge, const NamedColour *palette, int n_palette, const uint8_t *rgb,
                         int64_t n_pixels, float *share) {
    Tally t;
    tally_init(&t, judge, palette, n_palette);
    for (int64_t p = 0; p < n_pixels; p++)
        tally_pixel(&t, judge, rgb[3 * p] / 255.0f, rgb[3 * p + 1] / 255.0f, rgb[3 * p + 2] / 255.0f);
    return tally_winner(&t, judge, share);
}

int caption_find_word(const char *caption, const char *const *words, int n_words) {
    const char *s = caption;
    while (*s) {
        while (*s && !isalpha((unsigned char)*s)) s++;
        const char *w = s;
        while (*s && isalpha((unsigned char)*s)) s++;
        size_t len = (size_t)(s - w);
        if (len == 0) continue;
        for (int i = 0; i < n_words; i++)
            if (strlen(words[i]) == len && strncasecmp(words[i], w, len) == 0) return i;
    }
    return -1;
}

int colour_from_caption(const NamedColour *palette, int n_palette, const char *caption) {
    const char *names[64];
    if (n_palette > 64) n_palette = 64;
    for (int i = 0; i < n_palette; i++) names[i] = palette[i].name;
    return caption_find_word(caption, names, n_palette);
}
