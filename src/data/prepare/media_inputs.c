/* Finding the pictures or videos of a folder and their sidecar files (see media_inputs.h). */
#include "data/prepare/media_inputs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "core/fileutil.h"

static const char *const k_image_ext[] = {"png", "jpg", "jpeg", NULL};
static const char *const k_video_ext[] = {"mp4", "m4v", "mov", "mkv", "webm", "avi", "mpg", "mpeg", "ts", "wmv", "flv", NULL};
static const char *const k_sidecar_ext[] = {"txt", "json", "npy", NULL};

static int ext_in(const char *name, const char *const *list) {
    const char *dot = strrchr(name, '.');
    if (!dot || dot == name) return 0;
    for (; *list; list++)
        if (strcasecmp(dot + 1, *list) == 0) return 1;
    return 0;
}

int media_has_kind(const char *name, MediaKind kind) {
    return ext_in(name, kind == MEDIA_IMAGES ? k_image_ext : k_video_ext);
}

static int list_add(MediaList *l, const char *rel) {
    if (l->n == l->cap) {
        int64_t cap = l->cap ? 2 * l->cap : 256;
        char **r = realloc(l->rel, (size_t)cap * sizeof *r);
        if (!r) return -1;
        l->rel = r;
        l->cap = cap;
    }
    if (!(l->rel[l->n] = strdup(rel))) return -1;
    l->n++;
    return 0;
}

typedef struct {
    MediaKind kind;
    MediaList *out;
} MediaWalk;

static vfm_status add_media(void *ctx, const char *rel, const char *name, const struct stat *st) {
    (void)st;
    MediaWalk *w = ctx;
    if (media_has_kind(name, w->kind)) {
        if (list_add(w->out, rel) != 0) return vfm_fail(VFM_ERR_NOMEM, "prepare: out of memory");
    } else if (!ext_in(name, k_sidecar_ext)) {
        w->out->other_files++;
    }
    return VFM_OK;
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

vfm_status media_list(const char *dir, MediaKind kind, MediaList *out) {
    memset(out, 0, sizeof *out);
    if (!dir_exists(dir)) return vfm_fail(VFM_ERR_IO, "%s: not a directory", dir);
    MediaWalk w = {kind, out};
    vfm_status s = walk_files(dir, add_media, &w);
    if (s != VFM_OK) {
        media_list_free(out);
        return s;
    }
    if (out->n) qsort(out->rel, (size_t)out->n, sizeof *out->rel, by_name);
    return VFM_OK;
}

void media_list_free(MediaList *l) {
    for (int64_t i = 0; i < l->n; i++) free(l->rel[i]);
    free(l->rel);
    memset(l, 0, sizeof *l);
}

void media_sidecar_path(char *out, size_t n, const char *dir, const char *rel, const char *ext) {
    const char *slash = strrchr(rel, '/'), *dot = strrchr(rel, '.');
    size_t stem = dot && (!slash || dot > slash + 1) ? (size_t)(dot - rel) : strlen(rel);
    snprintf(out, n, "%s/%.*s.%s", dir, (int)stem, rel, ext);
}

/* The caption text: trimmed, valid UTF-8 without NUL bytes. */
static vfm_status take_caption(const char *path, const char *text, size_t len, char **out) {
    while (len && (text[len - 1] == ' ' || text[len - 1] == '\t' || text[len - 1] == '\n' || text[len - 1] == '\r')) len--;
    while (len && (*text == ' ' || *text == '\t' || *text == '\n' || *text == '\r')) text++, len--;
    if (memchr(text, 0, len)) return vfm_fail(VFM_ERR_FORMAT, "%s: the caption holds a NUL byte", path);
    json_t *check = json_stringn(text, len); /* NULL for invalid UTF-8 */
    if (!check) return vfm_fail(VFM_ERR_FORMAT, "%s: the caption is not valid UTF-8", path);
    json_decref(check);
    *out = strndup(text, len);
    return *out ? VFM_OK : vfm_fail(VFM_ERR_NOMEM, "%s: out of memory", path);
}

vfm_status media_read_sidecar(const char *dir, const char *rel, MediaSidecar *out) {
    memset(out, 0, sizeof *out);
    char path[2200];
    media_sidecar_path(path, sizeof path, dir, rel, "txt");
    vfm_status s = VFM_OK;
    if (path_exists(path)) {
        char *text;
        size_t len;
        VFM_TRY(read_file_all(path, &text, &len));
        s = take_caption(path, text, len, &out->caption);
        free(text);
        VFM_TRY(s);
        out->caption_from = "txt";
    }
    media_sidecar_path(path, sizeof path, dir, rel, "json");
    if (!path_exists(path)) return VFM_OK;
    json_error_t err;
    json_t *meta = json_load_file(path, JSON_REJECT_DUPLICATES, &err);
    if (!meta) s = vfm_fail(VFM_ERR_FORMAT, "%s: bad JSON at line %d: %s", path, err.line, err.text);
    else if (!json_is_object(meta)) s = vfm_fail(VFM_ERR_FORMAT, "%s: want a JSON object", path);
    json_t *cap = s == VFM_OK ? json_object_get(meta, "caption") : NULL;
    if (cap && !json_is_string(cap) && !json_is_null(cap))
        s = vfm_fail(VFM_ERR_FORMAT, "%s: \"caption\" must be a string", path);
    if (s == VFM_OK && cap && json_is_string(cap) && !out->caption) {
        s = take_caption(path, json_string_value(cap), json_string_length(cap), &out->caption);
        if (s == VFM_OK) out->caption_from = "json";
    }
    if (s == VFM_OK) {
        json_object_del(meta, "caption");
        out->meta = meta;
    } else {
        json_decref(meta);
        media_sidecar_free(out);
    }
    return s;
}

void media_sidecar_free(MediaSidecar *s) {
    free(s->caption);
    json_decref(s->meta);
    memset(s, 0, sizeof *s);
}
