/* The inputs of `vfm prepare images|videos`: the files under a directory whose extension names a
 * picture or a video (recursively; names starting with a dot skipped; symbolic links followed; in
 * byte order of the path relative to the directory), and the sidecar files beside each one, named
 * by the input's path without its extension (NAME):
 *   NAME.txt   the caption (UTF-8; leading and trailing white space dropped)
 *   NAME.json  a JSON object: "caption" (a string) when there is no NAME.txt, and any other
 *              metadata, kept in the sample's json ("class" makes a class-conditional set)
 *   NAME.npy   a text embedding [L, d] or [1, L, d], used with --text-npy */
#ifndef VFM_DATA_MEDIA_INPUTS_H
#define VFM_DATA_MEDIA_INPUTS_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

typedef enum { MEDIA_IMAGES, MEDIA_VIDEOS } MediaKind;

#define MEDIA_IMAGE_EXTENSIONS "png, jpg, jpeg"
#define MEDIA_VIDEO_EXTENSIONS "mp4, m4v, mov, mkv, webm, avi, mpg, mpeg, ts, wmv, flv"

/* 1 when the name's extension (any case) is one of kind's. */
int media_has_kind(const char *name, MediaKind kind);

typedef struct {
    char **rel;          /* paths relative to the directory, '/'-separated, sorted */
    int64_t n, cap;
    int64_t other_files; /* regular files that are neither inputs nor sidecars of one */
} MediaList;

/* Lists the inputs of one kind under dir (VFM_ERR_IO when dir cannot be read). */
vfm_status media_list(const char *dir, MediaKind kind, MediaList *out);
void media_list_free(MediaList *l);

typedef struct {
    char *caption;          /* malloc'd, or NULL when the input has none */
    const char *caption_from; /* "txt", "json" or NULL */
    json_t *meta;           /* NAME.json without "caption" (a new reference), or NULL */
} MediaSidecar;

/* Reads NAME.txt and NAME.json of input rel; errors name the sidecar file. */
vfm_status media_read_sidecar(const char *dir, const char *rel, MediaSidecar *out);
void media_sidecar_free(MediaSidecar *s);

/* dir/NAME.ext for input rel. */
void media_sidecar_path(char *out, size_t n, const char *dir, const char *rel, const char *ext);

#endif
