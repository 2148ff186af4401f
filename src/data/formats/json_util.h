/* Sample metadata JSON (a tar part's bytes) over jansson: parsing with the sample named in errors, and
 * typed lookups with defaults that refuse values of the wrong type. */
#ifndef VFM_DATA_JSON_UTIL_H
#define VFM_DATA_JSON_UTIL_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Parses bytes (need not be NUL-terminated) that must hold one JSON object. `context` names the source
 * in errors, e.g. "shard-000.tar: sample 12 (key '000012'): json". On success *out is a new reference
 * (json_decref it). */
vfm_status json_parse_part(const void *data, size_t size, const char *context, json_t **out);

/* Lookups in an object: a missing key or a JSON null gives the default; a value of another type is
 * VFM_ERR_FORMAT naming context, key and value. */
/* Any JSON number. */
vfm_status json_get_number(const json_t *obj, const char *key, double dflt, const char *context, double *out);
/* A JSON integer, or a real with an integral value (30.0), within int64. */
vfm_status json_get_int(const json_t *obj, const char *key, int64_t dflt, const char *context, int64_t *out);
/* A JSON string; *out points into obj (valid while obj lives) or is dflt. */
vfm_status json_get_string(const json_t *obj, const char *key, const char *dflt, const char *context, const char **out);
/* true / false. */
vfm_status json_get_bool(const json_t *obj, const char *key, int dflt, const char *context, int *out);

#ifdef __cplusplus
}
#endif
#endif
