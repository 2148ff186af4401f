/* Small DiT fixtures for model tests (recomputation; tests/unit and tests/mpi): a pack of four
 * samples of different sizes (a 3-frame video of 18 tokens, images of 5, 1 and 8 tokens) in slots
 * padded to a multiple of `pad` rows, their text rows, random seeded values, and the DiTInputs over
 * them; a small model configuration per variant and random weights for it. */
#ifndef VFM_TEST_DIT_PACK_H
#define VFM_TEST_DIT_PACK_H

#include "model/dit.h"

enum { DIT_PACK_SAMPLES = 4 };

typedef struct DitPack {
    int64_t S, L;     /* rows of the pack and of the text */
    int d_text;
    int32_t cu[DIT_PACK_SAMPLES + 1], cu_pad[DIT_PACK_SAMPLES + 1];
    int32_t cu_text[DIT_PACK_SAMPLES + 1], cu_text_pad[DIT_PACK_SAMPLES + 1];
    float *x, *text, *c_noise, *fps, *dout; /* [S,tok], [L,d_text], [B], [B], [S,out] */
    int32_t *t2s, *pos, *cls;               /* [S], [S,3], [B] */
    Tensor tx, ttext, tcn, tfps, tt2s, tpos, tcls, tdout, tcu, tcup, tcut, tcutp;
    DiTInputs in;
} DitPack;

/* c: the model's configuration (widths; class labels when it has classes). */
void dit_pack_make(DitPack *p, const DiTConfig *c, int pad, uint64_t seed);
/* The same with other samples: grid[i] = (frames, rows, columns) of sample i in tokens, text_len[i]
 * its text rows. */
void dit_pack_make_shaped(DitPack *p, const DiTConfig *c, const int grid[DIT_PACK_SAMPLES][3],
                          const int text_len[DIT_PACK_SAMPLES], int pad, uint64_t seed);
void dit_pack_free(DitPack *p);

/* Hidden 32, 4 heads, text width 8: dfm with 2 kv heads (GQA), cross-attention and QK-norm;
 * adaln-zero with 3 classes (a null class) and learned sigma; moviegen with 2 kv heads. */
DiTConfig dit_test_config(DiTVariant v, int layers);
/* The single-rank table's weights, uniform in [-0.2, 0.2] (random: zero-initialised gates would
 * hide a broken backward); *n = the table's size. Free with free(). */
float *dit_test_weights(const DiTConfig *c, uint64_t seed, int64_t *n);

/* The MoE tests' model: dit_test_config(v, 2) with an MoE MLP of 4 experts of width 16, expert
 * choice (capacity factor 2) or token choice top-2 with the load-balancing and z losses. */
void dit_test_moe_config(DiTConfig *out, DiTVariant v, int token_choice);
/* Pack i (0..3) of a world of replicas: its own sample shapes (45..1 tokens), 4-row slots, and values. */
void dit_pack_make_replica(DitPack *p, const DiTConfig *c, int i);
/* max|x| over n values, and max|got - want| over the real rows of pack p relative to max|want|
 * (inf on NaN); rows are w wide. */
double dit_max_abs(const float *x, int64_t n);
double dit_pack_rel_err(const DitPack *p, const float *got, const float *want, int64_t w);

#endif
