/* Sample encoding: one tar sample -> patchified tokens, trimmed text and metadata, or a skip
 * with its reason (see encode.h; the order of checks follows DFM's DiTTaskEncoder). */
#include "data/loader/encode.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/hash.h"
#include "data/formats/json_util.h"
#include "data/formats/npy.h"
#include "data/formats/safetensors.h"
#include "data/formats/torch_tensor.h"
#include "ops/ops.h"

const char *encode_skip_name(EncodeSkip reason) {
    static const char *names[ENC_SKIP_COUNT] = {"ok",        "read",      "missing-part", "unsupported",
                                                "format",    "json",      "nonfinite",    "range",
                                                "channels",  "text-width", "patch",       "too-long",
                                                "refused"};
    return reason >= 0 && reason < ENC_SKIP_COUNT ? names[reason] : "?";
}

static int64_t gcd64(int64_t a, int64_t b) {
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

vfm_status encode_pad_multiple_from(const Config *cfg, int64_t budget, int *out) {
    int64_t pad = cfg_int(cfg, "dataset.pad_multiple");
    int64_t tpcp = cfg_int(cfg, "model.tensor_model_parallel_size") * cfg_int(cfg, "model.context_parallel_size");
    int64_t lcm = pad / gcd64(pad, tpcp) * tpcp;
    if (lcm > budget)
        return vfm_fail_at(VFM_ERR_USAGE, NULL, "dataset.pad_multiple", NULL,
                           "the pad multiple lcm(dataset.pad_multiple, TP·CP) = %lld exceeds "
                           "dataset.task_encoder_seq_length = %lld", (long long)lcm, (long long)budget);
    *out = (int)lcm;
    return VFM_OK;
}

vfm_status encode_config_from(EncodeConfig *ec, const Config *cfg) {
    memset(ec, 0, sizeof *ec);
    ec->channels = (int)cfg_int(cfg, "model.in_channels");
    ec->pt = (int)cfg_int(cfg, "model.patch_temporal");
    ec->ph = ec->pw = (int)cfg_int(cfg, "model.patch_spatial");
    ec->text_dim = (int)cfg_int(cfg, "model.crossattn_emb_size");
    ec->budget = cfg_int(cfg, "dataset.task_encoder_seq_length");
    VFM_TRY(encode_pad_multiple_from(cfg, ec->budget, &ec->pad_multiple));
    ec->max_frames = (int)cfg_int(cfg, "dataset.max_frames");
    ec->pad_text_to = encode_text_pad_rows(cfg);
    if (ec->pad_text_to > 0) { /* every text is pad_text_to rows: the trim and its bound do not apply */
        ec->max_text_len = INT32_MAX;
        static const char *const trim_keys[] = {"dataset.max_text_len", "dataset.keep_text_padding"};
        for (int i = 0; i < 2; i++)
            cfg_warn_unused(cfg, trim_keys[i], "%s does not apply: dataset.pad_text_to makes every text %d rows",
                            trim_keys[i], ec->pad_text_to);
    } else {
        ec->max_text_len = (int)cfg_int(cfg, "dataset.max_text_len");
        ec->keep_text_padding = cfg_bool(cfg, "dataset.keep_text_padding");
    }
    ec->default_fps = (float)cfg_float(cfg, "dataset.default_fps");
    const char *path = cfg_str(cfg, "dataset.path");
    size_t len = strlen(path);
    while (len > 1 && path[len - 1] == '/') len--;
    size_t start = len;
    while (start > 0 && path[start - 1] != '/') start--;
    snprintf(ec->dataset, sizeof ec->dataset, "%.*s", (int)(len - start), path + start);
    return VFM_OK;
}

int encode_token_dim(const EncodeConfig *ec) { return ec->channels * ec->pt * ec->ph * ec->pw; }

/* ---- parts ---- */

static int name_is(const char *name, const char *const *options) {
    for (; *options; options++)
        if (strcmp(name, *options) == 0) return 1;
    return 0;
}

void encode_find_parts(const char *const *names, int n, SampleParts *out) {
    static const char *const npy_latent[] = {"latent.npy", NULL}, *const st_latent[] = {"latent.safetensors", NULL},
                             *const pth_latent[] = {"pth", ".pth", "latent.pth", NULL},
                             *const npy_text[] = {"text.npy", NULL},
                             *const pickle_text[] = {"pickle", ".pickle", "text.pickle", NULL},
                             *const json_names[] = {"json", ".json", NULL};
    *out = (SampleParts){-1, -1, -1, PART_NONE, PART_NONE};
    /* npy and safetensors win over torch's formats, whatever the tar order */
    for (int i = 0; i < n; i++) {
        PartFormat lf = name_is(names[i], npy_latent) ? PART_NPY
                        : name_is(names[i], st_latent) ? PART_SAFETENSORS
                        : name_is(names[i], pth_latent) ? PART_PTH
                                                         : PART_NONE;
        if (lf != PART_NONE && (out->latent < 0 || (out->latent_format == PART_PTH && lf != PART_PTH))) {
            out->latent = i;
            out->latent_format = lf;
        }
        PartFormat tf = name_is(names[i], npy_text) ? PART_NPY : name_is(names[i], pickle_text) ? PART_PICKLE : PART_NONE;
        if (tf != PART_NONE && (out->text < 0 || (out->text_format == PART_PICKLE && tf == PART_NPY))) {
            out->text = i;
            out->text_format = tf;
        }
        if (out->json < 0 && name_is(names[i], json_names)) out->json = i;
    }
}

EncodeSkip encode_check_parts(const SampleParts *sp, const char *const *names, char *reason, size_t reason_size) {
    if (sp->latent < 0) {
        snprintf(reason, reason_size, "no latent part (latent.npy, latent.safetensors or pth)");
        return ENC_SKIP_MISSING;
    }
    (void)names;
    return ENC_OK;
}

/* ---- shapes ---- */

static void shape_text(int ndim, const int64_t *shape, char *buf, size_t n) {
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < ndim && k < n; d++) k += (size_t)snprintf(buf + k, n - k, "%s%lld", d ? "," : "", (long long)shape[d]);
    if (k < n) snprintf(buf + k, n - k, "]");
}

static int fits_i32(const int64_t *shape, int ndim) {
    for (int d = 0; d < ndim; d++)
        if (shape[d] < 0 || shape[d] > INT32_MAX) return 0;
    return 1;
}

EncodeSkip encode_latent_shape(int ndim, const int64_t *shape, int32_t out[4], char *reason, size_t reason_size) {
    char text[96];
    shape_text(ndim, shape, text, sizeof text);
    const int64_t *s = shape;
    int n = ndim;
    if (n == 5 && s[0] == 1) s++, n--;
    if ((n != 4 && n != 3) || !fits_i32(s, n)) {
        snprintf(reason, reason_size, "latent shape %s is not [C,T,H,W], [1,C,T,H,W] or [C,H,W]", text);
        return ENC_SKIP_FORMAT;
    }
    if (n == 4) out[0] = (int32_t)s[0], out[1] = (int32_t)s[1], out[2] = (int32_t)s[2], out[3] = (int32_t)s[3];
    else out[0] = (int32_t)s[0], out[1] = 1, out[2] = (int32_t)s[1], out[3] = (int32_t)s[2];
    if (out[0] < 1 || out[1] < 1 || out[2] < 1 || out[3] < 1) {
        snprintf(reason, reason_size, "latent shape %s is empty", text);
        return ENC_SKIP_FORMAT;
    }
    return ENC_OK;
}

EncodeSkip encode_text_shape(int ndim, const int64_t *shape, int32_t *rows, int32_t *width, char *reason,
                             size_t reason_size) {
    const int64_t *s = shape;
    int n = ndim;
    if (n == 3 && s[0] == 1) s++, n--;
    if (n != 2 || !fits_i32(s, n) || s[1] < 1) {
        char text[96];
        shape_text(ndim, shape, text, sizeof text);
        snprintf(reason, reason_size, "text embedding shape %s is not [L,d] or [1,L,d]", text);
        return ENC_SKIP_FORMAT;
    }
    *rows = (int32_t)s[0];
    *width = (int32_t)s[1];
    return ENC_OK;
}

int32_t encode_text_real_rows(const float *text, int32_t rows, int32_t width) {
    int32_t real = rows;
    while (real > 1) {
        const float *row = text + (int64_t)(real - 1) * width;
        int zero = 1;
        for (int32_t c = 0; c < width && zero; c++) zero = row[c] == 0.0f;
        if (!zero) break;
        real--;
    }
    return real < 1 ? 1 : real;
}

/* ---- metadata ---- */

EncodeSkip encode_read_json(const void *data, size_t size, float default_fps, SampleMeta *out, char *reason,
                            size_t reason_size) {
    memset(out, 0, sizeof *out);
    out->fps = default_fps;
    out->class_label = -1;
    if (!data) return ENC_OK;
    json_t *obj = NULL;
    const char *caption = "";
    double fps = default_fps;
    int64_t label = -1;
    vfm_status s = json_parse_part(data, size, "json", &obj);
    if (s == VFM_OK) s = json_get_string(obj, "caption", "", "json", &caption);
    if (s == VFM_OK) s = json_get_number(obj, "fps", default_fps, "json", &fps);
    if (s == VFM_OK) s = json_get_int(obj, "class", -1, "json", &label);
    if (s == VFM_OK && !(isfinite(fps) && fps > 0 && fps < 1e6))
        s = vfm_fail(VFM_ERR_FORMAT, "json: key 'fps': %g is not a frame rate in (0, 1e6)", fps);
    if (s == VFM_OK && (label < -1 || label > INT32_MAX))
        s = vfm_fail(VFM_ERR_FORMAT, "json: key 'class': %lld is not a class label (>= 0)", (long long)label);
    json_t *ps = s == VFM_OK ? json_object_get(obj, "pixel_space") : NULL;
    if (ps && !json_is_object(ps) && !json_is_null(ps))
        s = vfm_fail(VFM_ERR_FORMAT, "json: key 'pixel_space': expected an object");
    if (s != VFM_OK) {
        snprintf(reason, reason_size, "bad json: %s", vfm_last_error());
        json_decref(obj);
        return ENC_SKIP_JSON;
    }
    snprintf(out->caption, sizeof out->caption, "%s", caption);
    out->fps = (float)fps;
    out->class_label = (int32_t)label;
    if (json_is_object(ps)) out->pixel_space = json_dumps(ps, JSON_COMPACT);
    json_decref(obj);
    return ENC_OK;
}

int encode_text_pad_rows(const Config *cfg) {
    int64_t n = cfg_int(cfg, "dataset.pad_text_to");
    if (n >= 0) return (int)n;
    return strcmp(cfg_str(cfg, "model.variant"), "wan") == 0 ? 512 : 0;
}

/* ---- lengths under a config ---- */

EncodeSkip encode_lengths(const EncodeConfig *ec, const int32_t shape[4], int32_t text_width, int32_t text_len,
                          int32_t text_real, EncodeLengths *out, char *reason, size_t reason_size) {
    memset(out, 0, sizeof *out);
    int32_t C = shape[0], T = shape[1], H = shape[2], W = shape[3];
    if (C != ec->channels) {
        snprintf(reason, reason_size, "latent has %d channels, model.in_channels is %d", C, ec->channels);
        return ENC_SKIP_CHANNELS;
    }
    if (text_width > 0 && text_width != ec->text_dim) {
        snprintf(reason, reason_size, "text embedding width %d, model.crossattn_emb_size is %d", text_width, ec->text_dim);
        return ENC_SKIP_TEXT_WIDTH;
    }
    if (H % ec->ph || W % ec->pw) {
        snprintf(reason, reason_size, "latent H×W %d×%d does not divide by the patch %d×%d", H, W, ec->ph, ec->pw);
        return ENC_SKIP_PATCH;
    }
    int32_t frames = T;
    if (ec->max_frames > 0 && frames > ec->max_frames) frames = ec->max_frames;
    if (ec->pt > 1) {
        if (frames == 1) frames = ec->pt; /* an image is repeated pt times */
        else frames -= frames % ec->pt;   /* frames beyond a multiple of pt are cropped */
        if (frames == 0) {
            snprintf(reason, reason_size, "latent has %d frames, fewer than model.patch_temporal = %d", T, ec->pt);
            return ENC_SKIP_PATCH;
        }
    }
    int64_t tokens = (int64_t)(frames / ec->pt) * (H / ec->ph) * (W / ec->pw);
    int64_t padded = pack_padded_len(tokens, ec->pad_multiple);
    if (padded > ec->budget) {
        snprintf(reason, reason_size, "%lld tokens (%lld padded to a multiple of %d) exceed "
                 "dataset.task_encoder_seq_length = %lld", (long long)tokens, (long long)padded, ec->pad_multiple,
                 (long long)ec->budget);
        return ENC_SKIP_TOO_LONG;
    }
    out->frames = frames;
    out->grid[0] = frames / ec->pt;
    out->grid[1] = H / ec->ph;
    out->grid[2] = W / ec->pw;
    out->tokens = (int32_t)tokens;
    out->tokens_padded = (int32_t)padded;
    int32_t rows = text_len <= 0 ? 1 : ec->keep_text_padding ? text_len : text_real;
    if (rows > ec->max_text_len) rows = ec->max_text_len;
    if (ec->pad_text_to > 0) rows = ec->pad_text_to; /* zero rows after the text, or the text cut */
    out->text_rows = rows < 1 ? 1 : rows;
    return ENC_OK;
}

uint64_t sample_uid(const char *dataset, const char *shard_rel, const char *key, uint64_t epoch) {
    uint64_t h = hash_string64(dataset);
    h = hash_combine64(h, hash_string64(shard_rel));
    h = hash_combine64(h, hash_string64(key));
    return hash_combine64(h, epoch);
}

/* ---- decoding ---- */

/* A torch part (pth / pickle) decoded to f32. */
static EncodeSkip decode_torch(const void *bytes, size_t size, const char *name, float **data, int *ndim,
                               int64_t *shape, char *reason, size_t reason_size) {
    TorchTensor t;
    vfm_status s = torch_tensor_decode(bytes, size, name, &t);
    if (s == VFM_ERR_NOMEM) return ENC_SKIP_COUNT;
    if (s == VFM_ERR_REFUSED) {
        snprintf(reason, reason_size, "part '%s' names a global off the unpickler's allow-list: refused, a security event "
                 "(nothing was run): %s", name, vfm_last_error());
        return ENC_SKIP_REFUSED;
    }
    if (s != VFM_OK) {
        snprintf(reason, reason_size, "%s", vfm_last_error());
        return s == VFM_ERR_UNSUPPORTED ? ENC_SKIP_UNSUPPORTED : ENC_SKIP_FORMAT;
    }
    EncodeSkip skip = ENC_OK;
    if (t.ndim > VFM_MAX_DIMS) {
        snprintf(reason, reason_size, "%s: %d dimensions", name, t.ndim);
        skip = ENC_SKIP_FORMAT;
    } else if (!(*data = malloc((size_t)(t.numel ? t.numel : 1) * sizeof(float)))) {
        skip = ENC_SKIP_COUNT;
    } else {
        *ndim = t.ndim;
        for (int d = 0; d < t.ndim; d++) shape[d] = t.shape[d];
        torch_tensor_to_f32(&t, *data);
    }
    torch_tensor_free(&t);
    return skip;
}

EncodeSkip encode_decode_part(const void *bytes, size_t size, const char *name, PartFormat format, float **data,
                              int *ndim, int64_t *shape, char *reason, size_t reason_size) {
    *data = NULL;
    if (format == PART_PTH || format == PART_PICKLE)
        return decode_torch(bytes, size, name, data, ndim, shape, reason, reason_size);
    if (format == PART_NPY) {
        NpyArray a;
        if (npy_parse(bytes, size, name, &a) != VFM_OK) {
            snprintf(reason, reason_size, "%s", vfm_last_error());
            return ENC_SKIP_FORMAT;
        }
        if (a.ndim > VFM_MAX_DIMS) {
            snprintf(reason, reason_size, "%s: %d dimensions", name, a.ndim);
            return ENC_SKIP_FORMAT;
        }
        *ndim = a.ndim;
        for (int d = 0; d < a.ndim; d++) shape[d] = a.shape[d];
        *data = malloc((size_t)(a.numel ? a.numel : 1) * sizeof(float));
        if (!*data) return ENC_SKIP_COUNT;
        npy_to_f32(&a, *data);
        return ENC_OK;
    }
    SafetensorsFile *f = NULL;
    DType dt;
    if (safetensors_open_memory(&f, bytes, size, name) != VFM_OK) {
        snprintf(reason, reason_size, "%s", vfm_last_error());
        return ENC_SKIP_FORMAT;
    }
    if (safetensors_count(f) != 1) {
        snprintf(reason, reason_size, "%s holds %d tensors, expected one", name, safetensors_count(f));
        safetensors_close(f);
        return ENC_SKIP_FORMAT;
    }
    safetensors_info(f, 0, &dt, ndim, shape);
    int64_t numel = 1;
    for (int d = 0; d < *ndim; d++) numel *= shape[d];
    *data = malloc((size_t)(numel ? numel : 1) * sizeof(float));
    if (!*data) {
        safetensors_close(f);
        return ENC_SKIP_COUNT;
    }
    vfm_status s = safetensors_read_f32(f, 0, *data, numel);
    safetensors_close(f);
    if (s != VFM_OK) {
        snprintf(reason, reason_size, "%s", vfm_last_error());
        free(*data);
        *data = NULL;
        return ENC_SKIP_FORMAT;
    }
    return ENC_OK;
}

void encoded_sample_free(EncodedSample *s) {
    free(s->tokens);
    free(s->text);
    s->tokens = s->text = NULL;
}

vfm_status encode_sample(const EncodeConfig *ec, const TarSample *ts, const char *shard_rel, uint64_t epoch,
                         EncodedSample *out, char **pixel_space, EncodeSkip *skip, char *reason, size_t reason_size) {
    memset(out, 0, sizeof *out);
    if (pixel_space) *pixel_space = NULL;
    reason[0] = 0;
    const char *names[256];
    int n = ts->num_parts < 256 ? ts->num_parts : 256;
    for (int i = 0; i < n; i++) names[i] = ts->parts[i].name;
    SampleParts sp;
    encode_find_parts(names, n, &sp);
    float *latent = NULL, *text = NULL, *cropped = NULL;
    int ndim = 0, tndim = 0;
    int64_t shape[VFM_MAX_DIMS], tshape[VFM_MAX_DIMS];
    int32_t lshape[4], text_len = 0, text_width = 0, text_real = 0;
    vfm_status status = VFM_OK;
    SampleMeta meta;
    memset(&meta, 0, sizeof meta);
    /* The tensor parts are decoded first: one whose pickle names a global off the allow-list is a
     * security event, named before anything else the sample gets wrong. */
    char lreason[512] = "", treason[512] = "";
    EncodeSkip lskip = ENC_SKIP_MISSING, tskip = ENC_OK;
    if (sp.latent >= 0) {
        const TarPart *lp = &ts->parts[sp.latent];
        lskip = encode_decode_part(lp->data, lp->size, lp->name, sp.latent_format, &latent, &ndim, shape, lreason,
                                   sizeof lreason);
    }
    if (sp.text >= 0) {
        const TarPart *tp = &ts->parts[sp.text];
        tskip = encode_decode_part(tp->data, tp->size, tp->name, sp.text_format, &text, &tndim, tshape, treason,
                                   sizeof treason);
    }
    if (lskip == ENC_SKIP_REFUSED || tskip == ENC_SKIP_REFUSED) {
        *skip = ENC_SKIP_REFUSED;
        snprintf(reason, reason_size, "%s", lskip == ENC_SKIP_REFUSED ? lreason : treason);
        goto done;
    }
    *skip = encode_check_parts(&sp, names, reason, reason_size);
    if (*skip != ENC_OK) goto done;
    const TarPart *jp = sp.json >= 0 ? &ts->parts[sp.json] : NULL;
    *skip = encode_read_json(jp ? jp->data : NULL, jp ? jp->size : 0, ec->default_fps, &meta, reason, reason_size);
    if (*skip != ENC_OK) goto done;

    *skip = lskip;
    if (*skip != ENC_OK) snprintf(reason, reason_size, "%s", lreason);
    if (*skip == ENC_OK) *skip = encode_latent_shape(ndim, shape, lshape, reason, reason_size);
    if (*skip == ENC_OK) {
        int64_t numel = (int64_t)lshape[0] * lshape[1] * lshape[2] * lshape[3];
        float worst = 0.0f;
        for (int64_t i = 0; i < numel; i++) {
            float v = latent[i];
            if (!isfinite(v)) {
                snprintf(reason, reason_size, "latent has NaN/Inf values");
                *skip = ENC_SKIP_NONFINITE;
                break;
            }
            if (fabsf(v) > worst) worst = fabsf(v);
        }
        if (*skip == ENC_OK && worst > ENCODE_MAX_ABS) {
            snprintf(reason, reason_size, "latent has |x| = %g > %g", worst, ENCODE_MAX_ABS);
            *skip = ENC_SKIP_RANGE;
        }
    }
    if (*skip == ENC_OK && sp.text >= 0) {
        *skip = tskip;
        if (*skip != ENC_OK) snprintf(reason, reason_size, "%s", treason);
        if (*skip == ENC_OK) *skip = encode_text_shape(tndim, tshape, &text_len, &text_width, reason, reason_size);
        if (*skip == ENC_OK) {
            for (int64_t i = 0; i < (int64_t)text_len * text_width; i++)
                if (!isfinite(text[i])) {
                    snprintf(reason, reason_size, "text embedding has NaN/Inf values");
                    *skip = ENC_SKIP_NONFINITE;
                    break;
                }
            if (text_len > 0) text_real = encode_text_real_rows(text, text_len, text_width);
        }
    }
    EncodeLengths len;
    if (*skip == ENC_OK) *skip = encode_lengths(ec, lshape, text_width, text_len, text_real, &len, reason, reason_size);
    if (*skip == ENC_SKIP_COUNT) status = vfm_fail(VFM_ERR_NOMEM, "encode: out of memory");
    if (*skip != ENC_OK) goto done;

    int32_t C = lshape[0], T = lshape[1];
    int64_t frame = (int64_t)lshape[2] * lshape[3];
    int td = encode_token_dim(ec);
    cropped = malloc((size_t)(C * len.frames * frame) * sizeof(float));
    out->tokens = malloc((size_t)len.tokens * (size_t)td * sizeof(float));
    out->text = calloc((size_t)len.text_rows * (size_t)ec->text_dim, sizeof(float));
    if (!cropped || !out->tokens || !out->text) {
        status = vfm_fail(VFM_ERR_NOMEM, "encode: out of memory");
        goto done;
    }
    for (int32_t c = 0; c < C; c++)
        for (int32_t t = 0; t < len.frames; t++) {
            int32_t src_t = T == 1 ? 0 : t;
            memcpy(cropped + ((int64_t)c * len.frames + t) * frame, latent + ((int64_t)c * T + src_t) * frame,
                   (size_t)frame * sizeof(float));
        }
    Tensor lt = TF32(cropped, C, len.frames, lshape[2], lshape[3]);
    Tensor tok = TF32(out->tokens, len.tokens, td);
    status = op_patchify(&tok, &lt, ec->pt, ec->ph, ec->pw);
    if (status != VFM_OK) goto done;
    if (text_len > 0) {
        int32_t copy = len.text_rows < text_len ? len.text_rows : text_len;
        memcpy(out->text, text, (size_t)copy * (size_t)text_width * sizeof(float));
    }
    PackSample *in = &out->info;
    in->uid = sample_uid(ec->dataset, shard_rel, ts->key, epoch);
    in->latent_shape[0] = C, in->latent_shape[1] = len.frames, in->latent_shape[2] = lshape[2],
    in->latent_shape[3] = lshape[3];
    memcpy(in->grid, len.grid, sizeof in->grid);
    in->tokens = len.tokens;
    in->tokens_padded = len.tokens_padded;
    in->text_tokens = len.text_rows;
    in->text_tokens_padded = len.text_rows;
    in->fps = meta.fps;
    in->class_label = meta.class_label;
    snprintf(in->source, sizeof in->source, "%s:%s", shard_rel, ts->key);
    snprintf(in->caption, sizeof in->caption, "%s", meta.caption);
    if (pixel_space) {
        *pixel_space = meta.pixel_space;
        meta.pixel_space = NULL;
    }

done:
    free(meta.pixel_space);
    free(latent);
    free(text);
    free(cropped);
    if (status != VFM_OK || *skip != ENC_OK) encoded_sample_free(out);
    if (status != VFM_OK) *skip = ENC_SKIP_COUNT;
    return status;
}
