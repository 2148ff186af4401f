/* Writes the synthetic moving-shapes set as WebDataset shards (see prepare_synthetic.h). Samples are
 * built in parallel a chunk at a time and written in key order, so the bytes do not depend on the
 * thread count. */
#include "data/prepare/prepare_synthetic.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/fileutil.h"
#include "core/timer.h"
#include "data/prepare/caption_encoder.h"
#include "data/formats/npy.h"
#include "data/synthetic/synthetic.h"

/* Samples encoded at once before they are written in order (bounds memory, not results). */
#define PREPARE_CHUNK 128

PrepareSyntheticOptions prepare_synthetic_defaults(void) {
    return (PrepareSyntheticOptions){.d_text = 64, .factor = 2, .samples_per_shard = 256, .supersample = 4,
                                     .position_spread = 1.0f};
}

static vfm_status check_options(const PrepareSyntheticOptions *o, const SyntheticConfig *cfg) {
    const char *what = "vfm prepare synthetic";
    if (!o->out_dir || !o->out_dir[0]) return vfm_fail(VFM_ERR_USAGE, "%s: --out DIR is required", what);
    if (strlen(o->out_dir) > 1000) return vfm_fail(VFM_ERR_USAGE, "%s: --out: path longer than 1000 bytes", what);
    if (o->images < 0 || o->videos < 0)
        return vfm_fail(VFM_ERR_USAGE, "%s: --images %" PRId64 " --videos %" PRId64 ": want counts >= 0", what, o->images, o->videos);
    if (o->images + o->videos < 1) return vfm_fail(VFM_ERR_USAGE, "%s: nothing to prepare (give --images N and/or --videos M)", what);
    if (o->images >= PREPARE_MAX_SAMPLES || o->videos >= PREPARE_MAX_SAMPLES || o->images + o->videos >= PREPARE_MAX_SAMPLES)
        return vfm_fail(VFM_ERR_USAGE, "%s: %" PRId64 " samples: at most %lld in all", what, o->images + o->videos,
                        PREPARE_MAX_SAMPLES - 1);
    if (o->seed > (uint64_t)INT64_MAX) return vfm_fail(VFM_ERR_USAGE, "%s: --seed %" PRIu64 ": want 0..%" PRId64, what, o->seed, INT64_MAX);
    if (o->d_text < 1 || o->d_text > 65536) return vfm_fail(VFM_ERR_USAGE, "%s: --d-text %d: want 1..65536", what, o->d_text);
    if (o->supersample < 1 || o->supersample > 16)
        return vfm_fail(VFM_ERR_USAGE, "%s: --supersample %d: want 1..16", what, o->supersample);
    if (!(o->position_spread >= 0 && o->position_spread <= 1))
        return vfm_fail(VFM_ERR_USAGE, "%s: --position-spread %g: want 0..1", what, (double)o->position_spread);
    if (o->samples_per_shard < 1) return vfm_fail(VFM_ERR_USAGE, "%s: --samples-per-shard %d: want >= 1", what, o->samples_per_shard);
    int64_t shards = (o->images + o->videos + o->samples_per_shard - 1) / o->samples_per_shard;
    if (shards > PREPARE_MAX_SHARDS)
        return vfm_fail(VFM_ERR_USAGE, "%s: %" PRId64 " shards: at most %d (raise --samples-per-shard)", what, shards, PREPARE_MAX_SHARDS);
    if (o->factor < 1 || o->factor > 16) return vfm_fail(VFM_ERR_USAGE, "%s: --factor %d: want 1..16", what, o->factor);
    for (int v = 0; v < 2; v++) {
        const CanvasSize *c = v ? cfg->video_canvases : cfg->image_canvases;
        for (int i = 0; i < (v ? cfg->n_video_canvases : cfg->n_image_canvases); i++)
            if (c[i].height % o->factor || c[i].width % o->factor)
                return vfm_fail(VFM_ERR_USAGE, "%s: --factor %d does not divide the %dx%d canvas (use 1, 2, 4, 8 or 16)", what,
                                o->factor, c[i].height, c[i].width);
    }
    return VFM_OK;
}

/* ---- one sample ---- */

typedef struct {
    uint8_t *latent_npy, *text_npy;
    size_t latent_len, text_len;
    char json[1024];
    size_t json_len;
    vfm_status status;
    char error[512]; /* the worker thread's message (messages are per thread) */
} EncodedSample;

typedef struct {
    const PrepareSyntheticOptions *o;
    SyntheticConfig cfg;
    PixelLatentMap map;
    char pixel_space_json[512];
} PrepareContext;

static vfm_status encode_sample(const PrepareContext *ctx, int64_t n, EncodedSample *out) {
    const PrepareSyntheticOptions *o = ctx->o;
    int is_video = n >= o->images;
    uint64_t index = (uint64_t)(is_video ? n - o->images : n);
    SyntheticSpec spec;
    VFM_TRY(synthetic_spec_generate(&ctx->cfg, o->seed, index, is_video, &spec));
    const int T = spec.frames, f = ctx->map.factor, h = spec.height / f, w = spec.width / f;
    char caption[128];
    synthetic_caption(&spec, caption, sizeof caption);
    const int L = caption_token_count(caption);
    float *pixels = malloc(sizeof(float) * 3 * (size_t)T * spec.height * spec.width);
    float *latent = malloc(sizeof(float) * 3 * (size_t)T * h * w);
    float *text = malloc(sizeof(float) * (size_t)L * o->d_text);
    vfm_status s = pixels && latent && text ? VFM_OK : vfm_fail(VFM_ERR_NOMEM, "sample %" PRId64 ": out of memory", n);
    if (s == VFM_OK) s = synthetic_render(&spec, o->supersample, pixels);
    if (s == VFM_OK) s = pixel_to_latent(&ctx->map, pixels, T, spec.height, spec.width, latent);
    int n_tokens = 0;
    CaptionEncoder enc = {o->d_text};
    if (s == VFM_OK) s = caption_encode(&enc, caption, text, L, &n_tokens);
    const int64_t latent_shape[4] = {3, T, h, w}, text_shape[2] = {n_tokens, o->d_text};
    if (s == VFM_OK) s = npy_encode(NPY_F4, latent, 4, latent_shape, &out->latent_npy, &out->latent_len);
    if (s == VFM_OK) s = npy_encode(NPY_F4, text, 2, text_shape, &out->text_npy, &out->text_len);
    if (s == VFM_OK) {
        /* caption and names are words of the fixed vocabulary: nothing needs escaping */
        int len = snprintf(out->json, sizeof out->json,
                           "{\"caption\":\"%s\",\"fps\":%d,\"pixel_space\":%s,\"shape\":\"%s\",\"colour\":\"%s\",\"motion\":\"%s\","
                           "\"index\":%" PRId64 "}",
                           caption, is_video ? PREPARE_VIDEO_FPS : PREPARE_IMAGE_FPS, ctx->pixel_space_json,
                           synthetic_shape_name(spec.shape), synthetic_palette[spec.colour].name,
                           synthetic_motion_name(spec.motion), n);
        if (len < 0 || (size_t)len >= sizeof out->json) s = vfm_fail(VFM_ERR_INTERNAL, "sample %" PRId64 ": json too long", n);
        else out->json_len = (size_t)len;
    }
    free(pixels);
    free(latent);
    free(text);
    return s;
}

static void encoded_free(EncodedSample *e) {
    free(e->latent_npy);
    free(e->text_npy);
    memset(e, 0, sizeof *e);
}

/* ---- vfm_dataset.json ---- */

static vfm_status write_dataset_json(const PrepareContext *ctx, int64_t shards) {
    const PrepareSyntheticOptions *o = ctx->o;
    json_t *root = json_object(), *colours = json_array(), *shapes = json_array(), *directions = json_array(),
           *canvases = json_array();
    for (int i = 0; i < SYNTHETIC_N_COLOURS; i++) json_array_append_new(colours, json_string(synthetic_palette[i].name));
    for (int i = 0; i < SHAPE_COUNT; i++) json_array_append_new(shapes, json_string(synthetic_shape_name(i)));
    for (int i = MOTION_LEFT; i < MOTION_COUNT; i++) json_array_append_new(directions, json_string(synthetic_motion_name(i)));
    for (int i = 0; i < ctx->cfg.n_image_canvases; i++) {
        char c[32];
        snprintf(c, sizeof c, "%dx%d", ctx->cfg.image_canvases[i].height, ctx->cfg.image_canvases[i].width);
        json_array_append_new(canvases, json_string(c));
    }
    json_t *pixel_space = json_loads(ctx->pixel_space_json, 0, NULL);
    json_object_set_new(root, "kind", json_string("synthetic"));
    json_object_set_new(root, "images", json_integer(o->images));
    json_object_set_new(root, "videos", json_integer(o->videos));
    json_object_set_new(root, "samples", json_integer(o->images + o->videos));
    json_object_set_new(root, "seed", json_integer((json_int_t)o->seed));
    json_object_set_new(root, "d_text", json_integer(o->d_text));
    json_object_set_new(root, "caption_encoder", json_string(CAPTION_ENCODER_ID));
    json_object_set_new(root, "supersample", json_integer(o->supersample));
    json_object_set_new(root, "position_spread", json_real(o->position_spread));
    json_object_set_new(root, "samples_per_shard", json_integer(o->samples_per_shard));
    json_object_set_new(root, "shards", json_integer(shards));
    json_object_set_new(root, "shard_pattern", json_string(PREPARE_SHARD_PATTERN));
    json_object_set_new(root, "order", json_string("key %08d of n: image n for n < images, else video n - images"));
    json_object_set_new(root, "parts", json_pack("{s:s,s:s,s:s}", "latent.npy", "float32 [3, T, H/factor, W/factor]",
                                                 "text.npy", "float32 [L, d_text]", "json",
                                                 "caption, fps, pixel_space, shape, colour, motion, index"));
    json_object_set_new(root, "fps", json_pack("{s:i,s:i}", "image", PREPARE_IMAGE_FPS, "video", PREPARE_VIDEO_FPS));
    json_object_set_new(root, "pixel_space", pixel_space ? pixel_space : json_null());
    json_object_set_new(root, "captions", json_string("image: a <colour> <shape>; video: a <colour> <shape> moving <direction>"));
    json_object_set_new(root, "colours", colours);
    json_object_set_new(root, "shapes", shapes);
    json_object_set_new(root, "directions", directions);
    json_object_set_new(root, "canvases", canvases);
    json_object_set_new(root, "video_frames", json_pack("[i,i]", ctx->cfg.min_frames, ctx->cfg.max_frames));
    int hw[2 * SYNTHETIC_MAX_CANVASES][2], n_hw = 0; /* latent sides: images', and videos' when there are any */
    for (int i = 0; i < ctx->cfg.n_image_canvases && o->images > 0; i++, n_hw++)
        hw[n_hw][0] = ctx->cfg.image_canvases[i].height / o->factor, hw[n_hw][1] = ctx->cfg.image_canvases[i].width / o->factor;
    for (int i = 0; i < ctx->cfg.n_video_canvases && o->videos > 0; i++, n_hw++)
        hw[n_hw][0] = ctx->cfg.video_canvases[i].height / o->factor, hw[n_hw][1] = ctx->cfg.video_canvases[i].width / o->factor;
    PrepareLatents lat = {3, o->d_text, o->videos > 0 ? ctx->cfg.max_frames : 1, n_hw, (const int (*)[2])hw};
    prepare_add_train_keys(root, &lat);
    if (!pixel_space) {
        json_decref(root);
        return vfm_fail(VFM_ERR_INTERNAL, "%s: cannot format", PREPARE_DATASET_FILE);
    }
    return prepare_write_dataset_json(o->out_dir, root);
}

/* ---- the run ---- */

static vfm_status add_sample(ShardSink *sink, const EncodedSample *e) {
    const SinkPart parts[3] = {{"latent.npy", e->latent_npy, e->latent_len},
                               {"text.npy", e->text_npy, e->text_len},
                               {"json", e->json, e->json_len}};
    return shard_sink_add(sink, parts, 3);
}

vfm_status prepare_synthetic(const PrepareSyntheticOptions *o, PrepareProgress *result) {
    const double start = time_now();
    PrepareContext ctx = {.o = o, .cfg = synthetic_config_defaults(), .map = pixel_latent_map_default()};
    VFM_TRY(check_options(o, &ctx.cfg));
    ctx.cfg.position_spread = o->position_spread;
    ctx.map.factor = o->factor;
    pixel_latent_map_to_json(&ctx.map, ctx.pixel_space_json, sizeof ctx.pixel_space_json);

    VFM_TRY(mkdir_p(o->out_dir));
    if (access(o->out_dir, W_OK) != 0) return vfm_fail(VFM_ERR_IO, "%s: not writable: %s", o->out_dir, strerror(errno));
    VFM_TRY(prepare_clear_dir(o->out_dir, o->force));

    const int64_t total = o->images + o->videos;
    PrepareProgress progress = {.samples_total = total};
    EncodedSample *chunk = calloc(PREPARE_CHUNK, sizeof *chunk);
    if (!chunk) return vfm_fail(VFM_ERR_NOMEM, "prepare: out of memory");
    ShardSink sink;
    shard_sink_init(&sink, o->out_dir, o->samples_per_shard);
    vfm_status s = VFM_OK;
    for (int64_t first = 0; s == VFM_OK && first < total; first += PREPARE_CHUNK) {
        const int64_t count = total - first < PREPARE_CHUNK ? total - first : PREPARE_CHUNK;
#pragma omp parallel for schedule(dynamic, 1)
        for (int64_t i = 0; i < count; i++) {
            EncodedSample *e = &chunk[i];
            e->status = encode_sample(&ctx, first + i, e);
            if (e->status != VFM_OK) snprintf(e->error, sizeof e->error, "%s", vfm_last_error());
        }
        for (int64_t i = 0; s == VFM_OK && i < count; i++) {
            if (chunk[i].status != VFM_OK) {
                s = vfm_fail(chunk[i].status, "%s", chunk[i].error);
                break;
            }
            s = add_sample(&sink, &chunk[i]);
            if (s == VFM_OK && sink.samples == total) s = shard_sink_finish(&sink);
            if (s != VFM_OK) break;
            progress.samples_done = sink.samples;
            progress.shards_done = sink.shards_done;
            progress.bytes_written = sink.bytes_written;
            progress.seconds = time_now() - start;
            if (o->progress) o->progress(o->progress_ctx, &progress);
        }
        for (int64_t i = 0; i < count; i++) encoded_free(&chunk[i]);
    }
    free(chunk);
    shard_sink_discard(&sink);
    if (s == VFM_OK) s = write_dataset_json(&ctx, progress.shards_done);
    if (s != VFM_OK) return s;
    progress.seconds = time_now() - start;
    if (result) *result = progress;
    return VFM_OK;
}
