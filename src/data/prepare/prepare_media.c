/* `vfm prepare images|videos` (see prepare_media.h): inputs are decoded, cropped, resampled and
 * encoded in parallel a chunk at a time and written in key order into a staged directory. */
#include "data/prepare/prepare_media.h"

#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fileutil.h"
#include "core/timer.h"
#include "data/prepare/caption_encoder.h"
#include "data/loader/encode.h"
#include "data/media/image_decode.h"
#include "data/formats/npy.h"
#include "data/synthetic/synthetic.h"
#include "data/media/video_decode.h"

#define IMAGE_FPS 30 /* design §3's default fps: a picture reads as if it had none (as the synthetic set) */
#define IMAGE_CHUNK 64

PrepareMediaOptions prepare_media_defaults(void) {
    return (PrepareMediaOptions){.factor = 2, .d_text = 64, .samples_per_shard = 256, .fps = PREPARE_MEDIA_DEFAULT_FPS,
                                 .frames = PREPARE_MEDIA_DEFAULT_FRAMES};
}

typedef struct {
    const PrepareMediaOptions *o;
    MediaKind kind;
    const char *what; /* "vfm prepare images" */
    MediaList inputs;
    BucketSet buckets;
    PixelLatentMap map;
    json_t *pixel_space;
} Ctx;

/* One encoded input, made by a worker thread. */
typedef struct {
    uint8_t *latent_npy, *text_npy;
    size_t latent_len, text_len;
    char *json;
    int bucket, frames, text_width, uncaptioned;
    const char *caption_from;
    vfm_status status;
    char error[1024]; /* the worker's message (messages are per thread) */
} Item;

static void item_free(Item *it) {
    free(it->latent_npy);
    free(it->text_npy);
    free(it->json);
    memset(it, 0, sizeof *it);
}

static vfm_status check_options(const PrepareMediaOptions *o, const char *what) {
    if (!o->in_dir || !o->in_dir[0]) return vfm_fail(VFM_ERR_USAGE, "%s: the input folder DIR is required", what);
    if (!o->out_dir || !o->out_dir[0]) return vfm_fail(VFM_ERR_USAGE, "%s: --out DIR is required", what);
    if (o->factor < 1 || o->factor > 16) return vfm_fail(VFM_ERR_USAGE, "%s: --factor %d: want 1..16", what, o->factor);
    if (!o->text_npy && (o->d_text < 1 || o->d_text > 65536))
        return vfm_fail(VFM_ERR_USAGE, "%s: --d-text %d: want 1..65536", what, o->d_text);
    if (o->samples_per_shard < 1) return vfm_fail(VFM_ERR_USAGE, "%s: --samples-per-shard %d: want >= 1", what, o->samples_per_shard);
    if (!(o->fps > 0 && o->fps <= 1000)) return vfm_fail(VFM_ERR_USAGE, "%s: --fps %g: want a number in (0, 1000]", what, o->fps);
    if (o->frames < 1 || o->frames > PREPARE_MEDIA_MAX_FRAMES)
        return vfm_fail(VFM_ERR_USAGE, "%s: --frames %d: want 1..%d", what, o->frames, PREPARE_MEDIA_MAX_FRAMES);
    return VFM_OK;
}

/* ---- the parts of one sample ---- */

/* text.npy: the caption encoder's embedding, or NAME.npy checked and taken as is. */
static vfm_status make_text(const Ctx *c, const char *rel, const char *caption, Item *it) {
    const PrepareMediaOptions *o = c->o;
    if (!o->text_npy) {
        const int L = caption_token_count(caption);
        float *text = malloc((size_t)L * o->d_text * sizeof *text);
        if (!text) return vfm_fail(VFM_ERR_NOMEM, "%s: out of memory", rel);
        CaptionEncoder enc = {o->d_text};
        int n_tokens;
        vfm_status s = caption_encode(&enc, caption, text, L, &n_tokens);
        const int64_t shape[2] = {n_tokens, o->d_text};
        if (s == VFM_OK) s = npy_encode(NPY_F4, text, 2, shape, &it->text_npy, &it->text_len);
        free(text);
        it->text_width = o->d_text;
        return s;
    }
    char path[2200];
    media_sidecar_path(path, sizeof path, o->in_dir, rel, "npy");
    if (!path_exists(path))
        return vfm_fail(VFM_ERR_IO, "%s: --text-npy: no text embedding %s beside it", rel, path);
    VFM_TRY(npy_read_file(path, &it->text_npy, &it->text_len));
    NpyArray a;
    VFM_TRY(npy_parse(it->text_npy, it->text_len, path, &a));
    char reason[256];
    int32_t rows, width;
    if (encode_text_shape(a.ndim, a.shape, &rows, &width, reason, sizeof reason) != ENC_OK)
        return vfm_fail(VFM_ERR_FORMAT, "%s: %s", path, reason);
    if (rows < 1 || width < 1 || width > 65536) return vfm_fail(VFM_ERR_FORMAT, "%s: empty or too wide: %d x %d", path, rows, width);
    float *f = malloc((size_t)a.numel * sizeof *f);
    if (!f) return vfm_fail(VFM_ERR_NOMEM, "%s: out of memory", path);
    npy_to_f32(&a, f);
    int64_t bad = 0;
    for (int64_t i = 0; i < a.numel; i++) bad += !isfinite(f[i]);
    free(f);
    if (bad) return vfm_fail(VFM_ERR_FORMAT, "%s: %" PRId64 " NaN/Inf values", path, bad);
    it->text_width = width;
    return VFM_OK;
}

/* json: ours first, then the other keys of NAME.json. */
static vfm_status make_json(const Ctx *c, int64_t n, const char *rel, const MediaSidecar *side, const char *caption,
                            int src_h, int src_w, double src_fps, Item *it) {
    const Bucket *b = &c->buckets.b[it->bucket];
    char bucket[32];
    snprintf(bucket, sizeof bucket, "%dx%d", b->height, b->width);
    json_t *j = json_object();
    if (caption) json_object_set_new(j, "caption", json_string(caption));
    json_object_set_new(j, "fps", c->kind == MEDIA_VIDEOS ? json_real(c->o->fps) : json_integer(IMAGE_FPS));
    json_object_set_new(j, "pixel_space", json_deep_copy(c->pixel_space)); /* workers share no json value */
    json_object_set_new(j, "source", json_string(rel));
    json_object_set_new(j, "source_size", json_pack("[i,i]", src_h, src_w));
    json_object_set_new(j, "bucket", json_string(bucket));
    if (c->kind == MEDIA_VIDEOS) {
        json_object_set_new(j, "frames", json_integer(it->frames));
        json_object_set_new(j, "source_fps", json_real(src_fps));
    }
    json_object_set_new(j, "index", json_integer(n));
    const char *key;
    json_t *v;
    if (side->meta)
        json_object_foreach(side->meta, key, v) if (!json_object_get(j, key)) json_object_set(j, key, v);
    it->json = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(j);
    return it->json ? VFM_OK : vfm_fail(VFM_ERR_FORMAT, "%s: cannot write the metadata as JSON", rel);
}

/* latent.npy from pixels [3, T, bh, bw]. */
static vfm_status make_latent(const Ctx *c, const float *pixels, int T, const Bucket *b, Item *it) {
    const int f = c->map.factor, h = b->height / f, w = b->width / f;
    float *latent = malloc((size_t)3 * T * h * w * sizeof *latent);
    if (!latent) return vfm_fail(VFM_ERR_NOMEM, "prepare: out of memory");
    vfm_status s = pixel_to_latent(&c->map, pixels, T, b->height, b->width, latent);
    const int64_t shape[4] = {3, T, h, w};
    if (s == VFM_OK) s = npy_encode(NPY_F4, latent, 4, shape, &it->latent_npy, &it->latent_len);
    free(latent);
    return s;
}

/* The largest JPEG DCT shrink (1, 2, 4, 8) that keeps the crop at least twice the bucket's size,
 * so the area filter still does the last step. */
static int jpeg_shrink(const ImageInfo *info, const CropRect *crop, const Bucket *b) {
    if (info->format != IMAGE_JPEG) return 1;
    int s = 8;
    while (s > 1 && (crop->width / s < 2.0 * b->width || crop->height / s < 2.0 * b->height)) s /= 2;
    return s;
}

static vfm_status picture_pixels(const Ctx *c, const char *path, Item *it, float **pixels, int *src_h, int *src_w) {
    char *data;
    size_t size;
    VFM_TRY(read_file_all(path, &data, &size));
    ImageInfo info;
    PixelImage img = {0};
    vfm_status s = image_probe((const uint8_t *)data, size, path, &info);
    if (s == VFM_OK) {
        it->bucket = buckets_nearest(&c->buckets, (double)info.width / info.height);
        const Bucket *b = &c->buckets.b[it->bucket];
        CropRect full = buckets_center_crop(info.width, info.height, 1.0, b);
        s = image_decode((const uint8_t *)data, size, path, jpeg_shrink(&info, &full, b), &img);
    }
    free(data);
    if (s == VFM_OK) {
        const Bucket *b = &c->buckets.b[it->bucket];
        CropRect crop = buckets_center_crop(img.width, img.height, 1.0, b);
        *pixels = malloc((size_t)3 * b->height * b->width * sizeof **pixels);
        s = *pixels ? resample_crop(&img, &crop, b->height, b->width, *pixels, 0) : vfm_fail(VFM_ERR_NOMEM, "%s: out of memory", path);
        *src_h = info.height;
        *src_w = info.width;
        it->frames = 1;
    }
    pixel_image_free(&img);
    return s;
}

static vfm_status video_pixels(const Ctx *c, const char *path, Item *it, float **pixels, int *src_h, int *src_w,
                               double *src_fps) {
    VideoReader *r;
    VideoInfo info;
    VFM_TRY(video_open(&r, path, &info));
    it->bucket = buckets_nearest(&c->buckets, info.width * info.pixel_aspect / info.height);
    const Bucket *b = &c->buckets.b[it->bucket];
    const int max_t = c->o->frames;
    const size_t frame = (size_t)b->height * b->width;
    float *px = malloc((size_t)3 * max_t * frame * sizeof *px);
    vfm_status s = px ? VFM_OK : vfm_fail(VFM_ERR_NOMEM, "%s: out of memory", path);
    int T = 0, got = 1;
    while (s == VFM_OK && T < max_t && got) {
        const PixelImage *img;
        s = video_next_frame(r, c->o->fps, &img, &got);
        if (s != VFM_OK || !got) break;
        if (c->o->cancel && *c->o->cancel) {
            s = vfm_fail(VFM_ERR_IO, "interrupted");
            break;
        }
        CropRect crop = buckets_center_crop(img->width, img->height, info.pixel_aspect, b);
        s = resample_crop(img, &crop, b->height, b->width, px + (size_t)T * frame, (size_t)max_t * frame);
        T++;
    }
    video_close(r);
    if (s == VFM_OK && T == 0) s = vfm_fail(VFM_ERR_FORMAT, "%s: no frame could be decoded", path);
    if (s == VFM_OK && T < max_t) /* [3, max_t, ...] -> [3, T, ...] */
        for (int ch = 1; ch < 3; ch++) memmove(px + (size_t)ch * T * frame, px + (size_t)ch * max_t * frame, (size_t)T * frame * sizeof *px);
    if (s != VFM_OK) {
        free(px);
        return s;
    }
    *pixels = px;
    *src_h = info.height;
    *src_w = info.width;
    *src_fps = info.fps;
    it->frames = T;
    return VFM_OK;
}

static vfm_status encode_item(const Ctx *c, int64_t n, Item *it) {
    const PrepareMediaOptions *o = c->o;
    const char *rel = c->inputs.rel[n];
    char path[2200];
    path_join(path, sizeof path, o->in_dir, rel);
    MediaSidecar side;
    VFM_TRY(media_read_sidecar(o->in_dir, rel, &side));
    vfm_status s = VFM_OK;
    if (!side.caption && !o->text_npy && !o->allow_uncaptioned) {
        char txt[2200];
        media_sidecar_path(txt, sizeof txt, o->in_dir, rel, "txt");
        s = vfm_fail(VFM_ERR_IO, "%s: no caption: put one in %s (or \"caption\" in a .json beside it), or pass --allow-uncaptioned",
                     path, txt);
    }
    it->caption_from = side.caption_from;
    it->uncaptioned = !side.caption;
    float *pixels = NULL;
    int src_h = 0, src_w = 0;
    double src_fps = 0;
    if (s == VFM_OK)
        s = c->kind == MEDIA_IMAGES ? picture_pixels(c, path, it, &pixels, &src_h, &src_w)
                                    : video_pixels(c, path, it, &pixels, &src_h, &src_w, &src_fps);
    if (s == VFM_OK) s = make_latent(c, pixels, it->frames, &c->buckets.b[it->bucket], it);
    free(pixels);
    if (s == VFM_OK) s = make_text(c, rel, side.caption ? side.caption : "", it);
    if (s == VFM_OK) s = make_json(c, n, rel, &side, side.caption, src_h, src_w, src_fps, it);
    media_sidecar_free(&side);
    return s;
}

/* ---- vfm_dataset.json ---- */

static vfm_status write_dataset_json(const Ctx *c, const char *dir, const PrepareMediaResult *r, int64_t captions_txt,
                                     int64_t captions_json) {
    const PrepareMediaOptions *o = c->o;
    const int video = c->kind == MEDIA_VIDEOS;
    json_t *root = json_object(), *buckets = json_array(), *counts = json_object();
    for (int i = 0; i < c->buckets.n; i++) {
        char b[32];
        snprintf(b, sizeof b, "%dx%d", c->buckets.b[i].height, c->buckets.b[i].width);
        json_array_append_new(buckets, json_string(b));
        json_object_set_new(counts, b, json_integer(r->bucket_counts[i]));
    }
    json_object_set_new(root, "kind", json_string(video ? "videos" : "images"));
    json_object_set_new(root, "source", json_string(o->in_dir));
    json_object_set_new(root, "samples", json_integer(r->progress.samples_done));
    json_object_set_new(root, "d_text", json_integer(r->d_text));
    json_object_set_new(root, "caption_encoder", o->text_npy ? json_null() : json_string(CAPTION_ENCODER_ID));
    json_object_set_new(root, "text", json_string(o->text_npy ? "NAME.npy beside each input, stored as is"
                                                              : "the caption through the built-in caption encoder"));
    json_object_set_new(root, "captions", json_pack("{s:I,s:I,s:I}", "txt", (json_int_t)captions_txt, "json",
                                                    (json_int_t)captions_json, "none", (json_int_t)r->uncaptioned));
    json_object_set_new(root, "samples_per_shard", json_integer(o->samples_per_shard));
    json_object_set_new(root, "shards", json_integer(r->progress.shards_done));
    json_object_set_new(root, "shard_pattern", json_string(PREPARE_SHARD_PATTERN));
    json_object_set_new(root, "order", json_string("key %08d of n: the n-th input in byte order of its path under source"));
    json_object_set_new(root, "parts", json_pack("{s:s,s:s,s:s}", "latent.npy",
                                                 video ? "float32 [3, T, H/factor, W/factor], T <= frames"
                                                       : "float32 [3, 1, H/factor, W/factor]",
                                                 "text.npy", o->text_npy ? "NAME.npy as given: [L, d_text] or [1, L, d_text]"
                                                                         : "float32 [L, d_text]",
                                                 "json", video ? "caption, fps, pixel_space, source, source_size, bucket, frames, "
                                                                 "source_fps, index, and the other keys of NAME.json"
                                                               : "caption, fps, pixel_space, source, source_size, bucket, index, "
                                                                 "and the other keys of NAME.json"));
    if (video) {
        json_object_set_new(root, "fps", json_real(o->fps));
        json_object_set_new(root, "frames", json_integer(o->frames));
        json_object_set_new(root, "frames_written", json_integer(r->frames));
    } else {
        json_object_set_new(root, "fps", json_integer(IMAGE_FPS));
    }
    json_object_set(root, "pixel_space", c->pixel_space);
    json_object_set_new(root, "buckets", buckets);
    json_object_set_new(root, "bucket_counts", counts);
    int hw[64][2], n_hw = 0; /* latent sides of the buckets */
    for (int i = 0; i < c->buckets.n && n_hw < 64; i++, n_hw++)
        hw[n_hw][0] = c->buckets.b[i].height / o->factor, hw[n_hw][1] = c->buckets.b[i].width / o->factor;
    PrepareLatents lat = {3, (int)r->d_text, video ? o->frames : 1, n_hw, (const int (*)[2])hw};
    prepare_add_train_keys(root, &lat);
    json_object_set_new(root, "resize", json_string("centre crop to the bucket's aspect, then per axis an area (box) filter "
                                                    "when shrinking, Catmull-Rom bicubic when enlarging; then the pixel_space "
                                                    "box filter by factor"));
    return prepare_write_dataset_json(dir, root);
}

/* ---- the run ---- */

static vfm_status run(Ctx *c, PrepareMediaResult *res) {
    const PrepareMediaOptions *o = c->o;
    const double start = time_now();
    VFM_TRY(check_options(o, c->what));
    vfm_status bs = buckets_parse(o->buckets ? o->buckets : BUCKETS_DEFAULT, o->factor, "--buckets", &c->buckets);
    if (bs != VFM_OK) return vfm_fail_context(bs, "%s", c->what);
    c->map = pixel_latent_map_default();
    c->map.factor = o->factor;
    char ps[512];
    pixel_latent_map_to_json(&c->map, ps, sizeof ps);
    c->pixel_space = json_loads(ps, 0, NULL);
    if (!c->pixel_space) return vfm_fail(VFM_ERR_INTERNAL, "pixel_space: cannot format");
    VFM_TRY(media_list(o->in_dir, c->kind, &c->inputs));
    const int64_t total = c->inputs.n;
    if (total == 0)
        return vfm_fail(VFM_ERR_USAGE, "%s: %s holds no %s (%s)", c->what, o->in_dir, c->kind == MEDIA_IMAGES ? "pictures" : "videos",
                        c->kind == MEDIA_IMAGES ? MEDIA_IMAGE_EXTENSIONS : MEDIA_VIDEO_EXTENSIONS);
    if (total >= PREPARE_MAX_SAMPLES) return vfm_fail(VFM_ERR_USAGE, "%s: %" PRId64 " inputs: at most %lld", c->what, total, PREPARE_MAX_SAMPLES - 1);
    if ((total + o->samples_per_shard - 1) / o->samples_per_shard > PREPARE_MAX_SHARDS)
        return vfm_fail(VFM_ERR_USAGE, "%s: more than %d shards (raise --samples-per-shard)", c->what, PREPARE_MAX_SHARDS);
    res->buckets = c->buckets;
    res->other_files = c->inputs.other_files;
    StagedDir dir;
    VFM_TRY(staged_dir_begin(&dir, o->out_dir, o->force));

    const int chunk_n = c->kind == MEDIA_IMAGES ? IMAGE_CHUNK : 2 * omp_get_max_threads();
    Item *chunk = calloc((size_t)chunk_n, sizeof *chunk);
    ShardSink sink;
    shard_sink_init(&sink, dir.tmp, o->samples_per_shard);
    PrepareProgress *p = &res->progress;
    p->samples_total = total;
    int64_t from_txt = 0, from_json = 0;
    vfm_status s = chunk ? VFM_OK : vfm_fail(VFM_ERR_NOMEM, "prepare: out of memory");
    for (int64_t first = 0; s == VFM_OK && first < total; first += chunk_n) {
        const int64_t count = total - first < chunk_n ? total - first : chunk_n;
#pragma omp parallel for schedule(dynamic, 1)
        for (int64_t i = 0; i < count; i++) {
            Item *it = &chunk[i];
            it->status = c->o->cancel && *c->o->cancel ? vfm_fail(VFM_ERR_IO, "interrupted") : encode_item(c, first + i, it);
            if (it->status != VFM_OK) snprintf(it->error, sizeof it->error, "%s", vfm_last_error());
        }
        for (int64_t i = 0; s == VFM_OK && i < count; i++) {
            Item *it = &chunk[i];
            if (it->status != VFM_OK) {
                s = vfm_fail(it->status, "%s", it->error);
                break;
            }
            if (res->d_text == 0) res->d_text = it->text_width;
            if (it->text_width != res->d_text) {
                s = vfm_fail(VFM_ERR_FORMAT, "%s: its text embedding is %d wide, the first input's %d (--text-npy needs one width)",
                             c->inputs.rel[first + i], it->text_width, res->d_text);
                break;
            }
            const SinkPart parts[3] = {{"latent.npy", it->latent_npy, it->latent_len},
                                       {"text.npy", it->text_npy, it->text_len},
                                       {"json", it->json, strlen(it->json)}};
            s = shard_sink_add(&sink, parts, 3);
            if (s == VFM_OK && sink.samples == total) s = shard_sink_finish(&sink);
            if (s != VFM_OK) break;
            res->bucket_counts[it->bucket]++;
            res->frames += it->frames;
            res->uncaptioned += it->uncaptioned;
            from_txt += it->caption_from && strcmp(it->caption_from, "txt") == 0;
            from_json += it->caption_from && strcmp(it->caption_from, "json") == 0;
            p->samples_done = sink.samples;
            p->shards_done = sink.shards_done;
            p->bytes_written = sink.bytes_written;
            p->seconds = time_now() - start;
            if (o->progress) o->progress(o->progress_ctx, p);
        }
        for (int64_t i = 0; i < count; i++) item_free(&chunk[i]);
        if (s == VFM_OK && o->cancel && *o->cancel) s = vfm_fail(VFM_ERR_IO, "interrupted");
    }
    free(chunk);
    shard_sink_discard(&sink);
    if (s == VFM_OK) s = write_dataset_json(c, dir.tmp, res, from_txt, from_json);
    if (s == VFM_OK) s = staged_dir_commit(&dir, o->force);
    if (s != VFM_OK) {
        staged_dir_abort(&dir);
        return s;
    }
    p->seconds = time_now() - start;
    return VFM_OK;
}

static vfm_status prepare_media(MediaKind kind, const PrepareMediaOptions *o, PrepareMediaResult *result) {
    Ctx c = {.o = o, .kind = kind, .what = kind == MEDIA_IMAGES ? "vfm prepare images" : "vfm prepare videos"};
    PrepareMediaResult local;
    PrepareMediaResult *r = result ? result : &local;
    memset(r, 0, sizeof *r);
    vfm_status s = run(&c, r);
    media_list_free(&c.inputs);
    json_decref(c.pixel_space);
    return s;
}

vfm_status prepare_images(const PrepareMediaOptions *o, PrepareMediaResult *result) { return prepare_media(MEDIA_IMAGES, o, result); }
vfm_status prepare_videos(const PrepareMediaOptions *o, PrepareMediaResult *result) { return prepare_media(MEDIA_VIDEOS, o, result); }
