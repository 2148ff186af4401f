/* jansson helpers for sample metadata: parse a part's bytes, read typed values with defaults. */
#include "data/formats/json_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static const char *json_type_text(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a real number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "?";
}

/* The value as compact JSON text for messages (at most 60 characters). */
static void value_text(const json_t *v, char *buf, size_t n) {
    char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    snprintf(buf, n, "%.60s", s ? s : "?");
    free(s);
}

static vfm_status wrong_type(const json_t *v, const char *key, const char *want, const char *context) {
    char text[64];
    value_text(v, text, sizeof text);
    return vfm_fail_at(VFM_ERR_FORMAT, context, key, text, "expected %s, got %s", want, json_type_text(v));
}

vfm_status json_parse_part(const void *data, size_t size, const char *context, json_t **out) {
    json_error_t err;
    *out = NULL;
    json_t *root = json_loadb(data, size, JSON_DECODE_ANY, &err);
    if (!root)
        return vfm_fail(VFM_ERR_FORMAT, "%s: invalid JSON at line %d column %d: %s", context, err.line, err.column,
                        err.text);
    if (!json_is_object(root)) {
        vfm_status s = vfm_fail(VFM_ERR_FORMAT, "%s: JSON metadata is %s, expected an object", context,
                                json_type_text(root));
        json_decref(root);
        return s;
    }
    *out = root;
    return VFM_OK;
}

static const json_t *lookup(const json_t *obj, const char *key) {
    const json_t *v = json_object_get(obj, key);
    return v && !json_is_null(v) ? v : NULL;
}

vfm_status json_get_number(const json_t *obj, const char *key, double dflt, const char *context, double *out) {
    const json_t *v = lookup(obj, key);
    *out = dflt;
    if (!v) return VFM_OK;
    if (!json_is_number(v)) return wrong_type(v, key, "a number", context);
    *out = json_number_value(v);
    return VFM_OK;
}

vfm_status json_get_int(const json_t *obj, const char *key, int64_t dflt, const char *context, int64_t *out) {
    const json_t *v = lookup(obj, key);
    *out = dflt;
    if (!v) return VFM_OK;
    if (json_is_integer(v)) {
        *out = (int64_t)json_integer_value(v);
        return VFM_OK;
    }
    if (json_is_real(v)) {
        double d = json_real_value(v);
        if (d == floor(d) && fabs(d) < 9.2e18) {
            *out = (int64_t)d;
            return VFM_OK;
        }
    }
    return wrong_type(v, key, "an integer", context);
}

vfm_status json_get_string(const json_t *obj, const char *key, const char *dflt, const char *context, const char **out) {
    const json_t *v = lookup(obj, key);
    *out = dflt;
    if (!v) return VFM_OK;
    if (!json_is_string(v)) return wrong_type(v, key, "a string", context);
    *out = json_string_value(v);
    return VFM_OK;
}

vfm_status json_get_bool(const json_t *obj, const char *key, int dflt, const char *context, int *out) {
    const json_t *v = lookup(obj, key);
    *out = dflt;
    if (!v) return VFM_OK;
    if (!json_is_boolean(v)) return wrong_type(v, key, "true or false", context);
    *out = json_is_true(v);
    return VFM_OK;
}
