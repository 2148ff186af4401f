/* Sample encoding (DFM's task encoder, research/dfm.md §3.2): one WebDataset sample (its tar
 * parts) -> an EncodedSample ready for pack_append: the latent cropped / repeated along T,
 * patchified into tokens, its text embedding cut to its real length, its metadata; or a skip
 * with a reason. Also the pieces the length index and the planner share with it: which parts a
 * sample holds, latent and text shape rules, token counts under a config, sample uids.
 * Schema: docs/data-format.md "Sample schema". */
#ifndef VFM_DATA_ENCODE_H
#define VFM_DATA_ENCODE_H

#include <stddef.h>
#include <stdint.h>

#include "core/config.h"
#include "core/error.h"
#include "data/pack/pack.h"
#include "data/formats/tar.h"

/* Why a sample is skipped. The first group is found by reading the sample (config-independent,
 * recorded in the length index); the second depends on the model and dataset keys. */
typedef enum {
    ENC_OK = 0,
    ENC_SKIP_READ,        /* the shard or the sample could not be read */
    ENC_SKIP_MISSING,     /* no latent part */
    ENC_SKIP_UNSUPPORTED, /* a part in a form vfm does not read (a compressed zip record in a pth) */
    ENC_SKIP_FORMAT,      /* a malformed tensor part, or a shape of the wrong rank */
    ENC_SKIP_JSON,        /* bad json metadata */
    ENC_SKIP_NONFINITE,   /* NaN or Inf in the latent or the text */
    ENC_SKIP_RANGE,       /* |x| > 1e3 in the latent */
    ENC_SKIP_CHANNELS,    /* latent channels != model.in_channels */
    ENC_SKIP_TEXT_WIDTH,  /* text width != model.crossattn_emb_size */
    ENC_SKIP_PATCH,       /* H or W not divisible by the patch, or 1 < T < patch_temporal */
    ENC_SKIP_TOO_LONG,    /* more tokens (padded) than dataset.task_encoder_seq_length */
    ENC_SKIP_REFUSED,     /* a pickle naming a global off the unpickler's allow-list: a security event,
                           * named first among the sample's problems (nothing was run) */
    ENC_SKIP_COUNT
} EncodeSkip;

/* Short name of a reason ("nonfinite", "too-long", ...). */
const char *encode_skip_name(EncodeSkip reason);

#define ENCODE_MAX_ABS 1e3f /* DFM's bound on latent values */

typedef struct EncodeConfig {
    int channels;          /* model.in_channels */
    int pt, ph, pw;        /* model.patch_temporal, model.patch_spatial (twice) */
    int text_dim;          /* model.crossattn_emb_size */
    int64_t budget;        /* dataset.task_encoder_seq_length: most padded tokens of a sample (and a pack) */
    int pad_multiple;      /* lcm(dataset.pad_multiple, TP·CP) */
    int max_frames;        /* dataset.max_frames (0: no crop) */
    int max_text_len;      /* dataset.max_text_len */
    int keep_text_padding; /* dataset.keep_text_padding */
    int pad_text_to;       /* dataset.pad_text_to resolved (encode_text_pad_rows): 0 = none */
    float default_fps;     /* dataset.default_fps */
    char dataset[256];     /* basename of dataset.path: part of every sample uid */
} EncodeConfig;

/* The real-data keys of a sample's encoding (and model.in_channels, patch_*, crossattn_emb_size). */
vfm_status encode_config_from(EncodeConfig *ec, const Config *cfg);
/* lcm(dataset.pad_multiple, TP·CP): every sample's tokens pad to a multiple of it; VFM_ERR_USAGE
 * naming dataset.pad_multiple when it exceeds the pack budget. */
vfm_status encode_pad_multiple_from(const Config *cfg, int64_t budget, int *out);
int encode_token_dim(const EncodeConfig *ec); /* C·pt·ph·pw */

/* Which parts of a sample hold what. Names: latent `latent.npy` | `latent.safetensors` | `pth` |
 * `.pth` | `latent.pth` (torch.save); text `text.npy` | `pickle` | `.pickle` | `text.pickle`
 * (pickle.dumps of a torch tensor); metadata `json` | `.json`. The pth / pickle spellings are DFM's
 * (research/dfm.md §3.1); when a sample holds several, npy / safetensors win over them. */
typedef enum { PART_NONE = 0, PART_NPY, PART_SAFETENSORS, PART_PTH, PART_PICKLE } PartFormat;
typedef struct SampleParts {
    int latent, text, json;           /* part indices, -1 when absent */
    PartFormat latent_format, text_format;
} SampleParts;
/* names[n]: the sample's part names in tar order. */
void encode_find_parts(const char *const *names, int n, SampleParts *out);
/* The skip a sample's parts imply (no latent part), with the reason text; ENC_OK otherwise. */
EncodeSkip encode_check_parts(const SampleParts *sp, const char *const *names, char *reason, size_t reason_size);

/* Latent shape rule: [C,T,H,W], [1,C,T,H,W] (leading 1 squeezed) or [C,H,W] (an image: T = 1). */
EncodeSkip encode_latent_shape(int ndim, const int64_t *shape, int32_t out[4], char *reason, size_t reason_size);
/* Text shape rule: [L,d] or [1,L,d]. */
EncodeSkip encode_text_shape(int ndim, const int64_t *shape, int32_t *rows, int32_t *width, char *reason,
                             size_t reason_size);

/* Decodes a tensor part (npy, safetensors holding one tensor, torch.save pth, pickled tensor) to
 * float32: *data (malloc'd, caller frees), *ndim and shape[VFM_MAX_DIMS]. ENC_SKIP_FORMAT (or
 * ENC_SKIP_UNSUPPORTED) with the reason on bad bytes, a refused pickle global included;
 * ENC_SKIP_COUNT when out of memory. `name` is the part name (it starts the reason). */
EncodeSkip encode_decode_part(const void *bytes, size_t size, const char *name, PartFormat format, float **data,
                              int *ndim, int64_t *shape, char *reason, size_t reason_size);

/* Real text rows of text[rows, width]: all-zero tail rows dropped, at least one kept. */
int32_t encode_text_real_rows(const float *text, int32_t rows, int32_t width);

/* Metadata from a json part: caption, fps, class, pixel_space. */
typedef struct SampleMeta {
    char caption[256];
    float fps;
    int32_t class_label;   /* -1 when absent */
    char *pixel_space;     /* compact JSON text of the pixel_space object (malloc'd) or NULL */
} SampleMeta;
/* ENC_OK or ENC_SKIP_JSON with the reason. data may be NULL (no json part: defaults). */
EncodeSkip encode_read_json(const void *data, size_t size, float default_fps, SampleMeta *out, char *reason,
                            size_t reason_size);

/* What a sample becomes under a config, from its shape alone. */
typedef struct EncodeLengths {
    int32_t frames;        /* T after the max_frames crop and the patch_temporal crop / repeat */
    int32_t grid[3];       /* frames/pt, H/ph, W/pw */
    int32_t tokens, tokens_padded;
    int32_t text_rows;     /* text rows the sample contributes (>= 1) */
} EncodeLengths;
/* shape: the latent [C,T,H,W]; text_width: 0 when there is no text part; text_len: rows of the
 * text part (0 = none: the null prompt); text_real: its rows without the all-zero tail. Config
 * skips: channels, text width, patch, too long. */
EncodeSkip encode_lengths(const EncodeConfig *ec, const int32_t shape[4], int32_t text_width, int32_t text_len,
                          int32_t text_real, EncodeLengths *out, char *reason, size_t reason_size);

/* The sample uid: hash of (dataset name, shard path relative to the dataset, sample key, epoch). */
uint64_t sample_uid(const char *dataset, const char *shard_rel, const char *key, uint64_t epoch);

/* Encodes one sample read from shard `shard_rel` for `epoch`. On ENC_OK in *skip, out holds owned
 * tokens [tokens, C·pt·ph·pw] and text [text_rows, d_text] (free with encoded_sample_free) and
 * *pixel_space (when not NULL) the json's pixel_space text or NULL (caller frees). Otherwise
 * *skip and reason say why it is skipped and out holds nothing. Returns non-OK only for an
 * internal failure (out of memory). */
vfm_status encode_sample(const EncodeConfig *ec, const TarSample *ts, const char *shard_rel, uint64_t epoch,
                         EncodedSample *out, char **pixel_space, EncodeSkip *skip, char *reason, size_t reason_size);
void encoded_sample_free(EncodedSample *s);

/* dataset.pad_text_to resolved: the rows every sample's text is zero-padded or cut to (-1: 512 for
 * model.variant=wan, Wan's padded umT5 context; 0 otherwise), 0 = none. */
int encode_text_pad_rows(const Config *cfg);

#endif
