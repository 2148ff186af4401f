/* YAML to jansson with PyYAML's YAML 1.1 scalar typing, and PyYAML-style string output (see
 * yaml_json.h). The reader walks libyaml's events recursively; plain scalars are typed by the
 * implicit resolvers of PyYAML's SafeLoader (null, bool, int, float, timestamp kept as text). */
#include "data/formats/yaml_json.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "core/fileutil.h"

#define MAX_DEPTH 64

/* ---- plain scalar resolution (PyYAML resolver.py patterns, written out by hand) ---- */

static int is_null_plain(const char *t) {
    return !*t || !strcmp(t, "~") || !strcmp(t, "null") || !strcmp(t, "Null") || !strcmp(t, "NULL");
}

/* 1 true, 0 false, -1 not a bool. */
static int bool_plain(const char *t) {
    static const char *yes[] = {"yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"};
    static const char *no[] = {"no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"};
    for (int i = 0; i < 9; i++) {
        if (!strcmp(t, yes[i])) return 1;
        if (!strcmp(t, no[i])) return 0;
    }
    return -1;
}

static const char *skip_sign(const char *t) { return *t == '-' || *t == '+' ? t + 1 : t; }

/* Matches `[chars]+` (at least one) using a predicate; returns the end or NULL. */
static const char *span(const char *t, int (*ok)(int)) {
    const char *p = t;
    while (*p && ok((unsigned char)*p)) p++;
    return p > t ? p : NULL;
}
static int is_bin_(int c) { return c == '0' || c == '1' || c == '_'; }
static int is_oct_(int c) { return (c >= '0' && c <= '7') || c == '_'; }
static int is_dec_(int c) { return isdigit(c) || c == '_'; }
static int is_hex_(int c) { return isxdigit(c) || c == '_'; }

/* `(?::[0-5]?[0-9])+` from t: the end, or NULL when there is no such group. */
static const char *sexagesimal_tail(const char *t) {
    const char *p = t;
    int groups = 0;
    while (*p == ':') {
        const char *q = p + 1;
        if (q[0] >= '0' && q[0] <= '5' && isdigit((unsigned char)q[1])) q += 2;
        else if (isdigit((unsigned char)q[0])) q += 1;
        else break;
        p = q;
        groups++;
    }
    return groups ? p : NULL;
}

static int is_int_plain(const char *t) {
    const char *s = skip_sign(t), *e;
    if (s[0] == '0' && s[1] == 'b') return (e = span(s + 2, is_bin_)) && !*e;
    if (s[0] == '0' && s[1] == 'x') return (e = span(s + 2, is_hex_)) && !*e;
    if (s[0] == '0' && !s[1]) return 1;
    if (s[0] == '0') return (e = span(s + 1, is_oct_)) && !*e;
    if (s[0] >= '1' && s[0] <= '9') {
        e = span(s, is_dec_);
        if (!*e) return 1;
        e = sexagesimal_tail(e);
        return e && !*e;
    }
    return 0;
}

static int is_exponent(const char *e) {
    if (*e != 'e' && *e != 'E') return 0;
    e++;
    if (*e != '-' && *e != '+') return 0;
    e++;
    const char *d = e;
    while (isdigit((unsigned char)*e)) e++;
    return e > d && !*e;
}

static int is_float_plain(const char *t) {
    const char *s = skip_sign(t), *e;
    if (!strcmp(s, ".inf") || !strcmp(s, ".Inf") || !strcmp(s, ".INF")) return 1;
    if (!strcmp(t, ".nan") || !strcmp(t, ".NaN") || !strcmp(t, ".NAN")) return 1;
    if (t[0] == '.' && isdigit((unsigned char)t[1])) { /* \.[0-9][0-9_]*(exp)? (no sign) */
        e = span(t + 1, is_dec_);
        return !*e || is_exponent(e);
    }
    if (!isdigit((unsigned char)s[0])) return 0;
    e = span(s, is_dec_);
    if (*e == '.') { /* [0-9][0-9_]*\.[0-9_]*(exp)? */
        e++;
        while (is_dec_((unsigned char)*e)) e++;
        return !*e || is_exponent(e);
    }
    e = sexagesimal_tail(e); /* [0-9][0-9_]*(:[0-5]?[0-9])+\.[0-9_]* */
    if (!e || *e != '.') return 0;
    e++;
    while (is_dec_((unsigned char)*e)) e++;
    return !*e;
}

static int digits(const char *p, int n) {
    for (int i = 0; i < n; i++)
        if (!isdigit((unsigned char)p[i])) return 0;
    return 1;
}

/* PyYAML's timestamp: a date, or date + time with optional fraction and zone. */
static int is_timestamp_plain(const char *t) {
    if (!digits(t, 4) || t[4] != '-') return 0;
    if (digits(t + 5, 2) && t[7] == '-' && digits(t + 8, 2) && !t[10]) return 1;
    const char *p = t + 5;
    int n = isdigit((unsigned char)p[1]) ? 2 : 1;
    if (!digits(p, n) || p[n] != '-') return 0;
    p += n + 1;
    n = isdigit((unsigned char)p[1]) ? 2 : 1;
    if (!digits(p, n)) return 0;
    p += n;
    if (*p == 'T' || *p == 't') p++;
    else if (*p == ' ' || *p == '\t') while (*p == ' ' || *p == '\t') p++;
    else return 0;
    n = isdigit((unsigned char)p[1]) ? 2 : 1;
    if (!digits(p, n) || p[n] != ':' || !digits(p + n + 1, 2) || p[n + 3] != ':' || !digits(p + n + 4, 2)) return 0;
    p += n + 6;
    if (*p == '.') {
        p++;
        while (isdigit((unsigned char)*p)) p++;
    }
    while (*p == ' ' || *p == '\t') p++;
    if (*p == 'Z') p++;
    else if (*p == '-' || *p == '+') {
        p++;
        n = isdigit((unsigned char)p[1]) ? 2 : 1;
        if (!digits(p, n)) return 0;
        p += n;
        if (*p == ':') {
            if (!digits(p + 1, 2)) return 0;
            p += 3;
        }
    }
    return !*p;
}

/* 1 when a plain scalar with this text would load as something other than a string. */
static int plain_is_typed(const char *t) {
    return is_null_plain(t) || bool_plain(t) >= 0 || is_int_plain(t) || is_float_plain(t) || is_timestamp_plain(t) ||
           !strcmp(t, "<<") || !strcmp(t, "=");
}

/* ---- scalar construction ---- */

static void strip_underscores(const char *t, char *out, size_t cap) {
    size_t k = 0;
    for (; *t && k + 1 < cap; t++)
        if (*t != '_') out[k++] = *t;
    out[k] = 0;
}

static json_t *int_value(const char *t) {
    char b[256];
    strip_underscores(t, b, sizeof b);
    int neg = b[0] == '-';
    const char *s = skip_sign(b);
    int base = 10;
    if (s[0] == '0' && s[1] == 'b') base = 2, s += 2;
    else if (s[0] == '0' && s[1] == 'x') base = 16, s += 2;
    else if (s[0] == '0' && s[1]) base = 8, s += 1;
    if (strchr(s, ':')) { /* base 60 */
        double v = 0;
        for (const char *p = s; *p;) {
            char *end;
            v = v * 60 + strtod(p, &end);
            p = *end == ':' ? end + 1 : end;
        }
        return v <= 9.2e18 ? json_integer((json_int_t)(neg ? -v : v)) : json_real(neg ? -v : v);
    }
    errno = 0;
    unsigned long long u = strtoull(s, NULL, base);
    if (errno || u > (unsigned long long)INT64_MAX) return json_real((neg ? -1.0 : 1.0) * strtod(s, NULL));
    return json_integer(neg ? -(json_int_t)u : (json_int_t)u);
}

static json_t *float_value(const char *t) {
    char b[256];
    strip_underscores(t, b, sizeof b);
    for (char *p = b; *p; p++) *p = (char)tolower((unsigned char)*p);
    int neg = b[0] == '-';
    const char *s = skip_sign(b);
    if (!strcmp(s, ".inf") || !strcmp(s, ".nan")) /* jansson has no inf / nan: keep the text */
        return json_string(t);
    if (strchr(s, ':')) {
        double v = 0;
        for (const char *p = s; *p;) {
            char *end;
            v = v * 60 + strtod(p, &end);
            p = *end == ':' ? end + 1 : end;
        }
        return json_real(neg ? -v : v);
    }
    return json_real(strtod(b, NULL));
}

static json_t *plain_value(const char *t) {
    if (is_null_plain(t)) return json_null();
    int b = bool_plain(t);
    if (b >= 0) return json_boolean(b);
    if (is_int_plain(t)) return int_value(t);
    if (is_float_plain(t)) return float_value(t);
    return json_string(t);
}

/* ---- the reader ---- */

typedef struct {
    yaml_parser_t parser;
    const char *source;
    json_t *anchors; /* name -> node */
} Reader;

static vfm_status parse_error(Reader *r) {
    const yaml_parser_t *p = &r->parser;
    if (p->error == YAML_MEMORY_ERROR) return vfm_fail(VFM_ERR_NOMEM, "out of memory reading YAML");
    return vfm_fail(VFM_ERR_FORMAT, "%s:%d: YAML syntax error: %s", r->source, (int)p->problem_mark.line + 1,
                    p->problem ? p->problem : "unreadable text");
}

static vfm_status next_event(Reader *r, yaml_event_t *ev) {
    return yaml_parser_parse(&r->parser, ev) ? VFM_OK : parse_error(r);
}

static vfm_status parse_node(Reader *r, yaml_event_t *ev, int depth, json_t **out);

static vfm_status keep_anchor(Reader *r, const yaml_char_t *anchor, json_t *node) {
    if (anchor && json_object_set(r->anchors, (const char *)anchor, node) != 0)
        return vfm_fail(VFM_ERR_NOMEM, "out of memory reading YAML");
    return VFM_OK;
}

static vfm_status scalar_node(Reader *r, yaml_event_t *ev, json_t **out) {
    const char *text = (const char *)ev->data.scalar.value;
    size_t len = ev->data.scalar.length;
    if (memchr(text, 0, len))
        return vfm_fail(VFM_ERR_FORMAT, "%s:%d: a string holds a NUL character", r->source, (int)ev->start_mark.line + 1);
    const char *tag = (const char *)ev->data.scalar.tag;
    if (tag && !strcmp(tag, "tag:yaml.org,2002:str")) *out = json_stringn(text, len);
    else if (tag && !strcmp(tag, "tag:yaml.org,2002:null")) *out = json_null();
    else if (tag && !strcmp(tag, "tag:yaml.org,2002:bool")) *out = json_boolean(bool_plain(text) == 1);
    else if (tag && !strcmp(tag, "tag:yaml.org,2002:int") && is_int_plain(text)) *out = int_value(text);
    else if (tag && !strcmp(tag, "tag:yaml.org,2002:float") && (is_float_plain(text) || is_int_plain(text)))
        *out = float_value(text);
    else if (ev->data.scalar.plain_implicit && !tag) *out = plain_value(text);
    else *out = json_stringn(text, len);
    if (!*out) return vfm_fail(VFM_ERR_FORMAT, "%s:%d: a string is not valid UTF-8", r->source, (int)ev->start_mark.line + 1);
    return keep_anchor(r, ev->data.scalar.anchor, *out);
}

static vfm_status sequence_node(Reader *r, yaml_event_t *start, int depth, json_t **out) {
    json_t *arr = json_array();
    if (!arr) return vfm_fail(VFM_ERR_NOMEM, "out of memory reading YAML");
    vfm_status s = VFM_OK;
    while (s == VFM_OK) {
        yaml_event_t ev;
        if ((s = next_event(r, &ev)) != VFM_OK) break;
        if (ev.type == YAML_SEQUENCE_END_EVENT) {
            yaml_event_delete(&ev);
            break;
        }
        json_t *item = NULL;
        s = parse_node(r, &ev, depth + 1, &item);
        yaml_event_delete(&ev);
        if (s == VFM_OK && json_array_append_new(arr, item) != 0) s = vfm_fail(VFM_ERR_NOMEM, "out of memory reading YAML");
    }
    /* the anchor is known once the node is complete: an alias inside it is an error, never a cycle */
    if (s == VFM_OK) s = keep_anchor(r, start->data.sequence_start.anchor, arr);
    if (s != VFM_OK) json_decref(arr);
    else *out = arr;
    return s;
}

/* The text a mapping key stands for. */
static vfm_status key_text(Reader *r, json_t *key, int line, char *buf, size_t cap, const char **out) {
    if (json_is_string(key)) *out = json_string_value(key);
    else if (json_is_integer(key)) snprintf(buf, cap, "%lld", (long long)json_integer_value(key)), *out = buf;
    else if (json_is_real(key)) snprintf(buf, cap, "%.17g", json_real_value(key)), *out = buf;
    else if (json_is_true(key) || json_is_false(key)) snprintf(buf, cap, "%s", json_is_true(key) ? "True" : "False"), *out = buf;
    else if (json_is_null(key)) snprintf(buf, cap, "None"), *out = buf;
    else return vfm_fail(VFM_ERR_FORMAT, "%s:%d: a mapping key must be a scalar", r->source, line);
    return VFM_OK;
}

static vfm_status mapping_node(Reader *r, yaml_event_t *start, int depth, json_t **out) {
    json_t *obj = json_object();
    if (!obj) return vfm_fail(VFM_ERR_NOMEM, "out of memory reading YAML");
    vfm_status s = VFM_OK;
    while (s == VFM_OK) {
        yaml_event_t ev;
        if ((s = next_event(r, &ev)) != VFM_OK) break;
        if (ev.type == YAML_MAPPING_END_EVENT) {
            yaml_event_delete(&ev);
            break;
        }
        int line = (int)ev.start_mark.line + 1;
        json_t *key = NULL, *value = NULL;
        s = parse_node(r, &ev, depth + 1, &key);
        yaml_event_delete(&ev);
        if (s == VFM_OK && (s = next_event(r, &ev)) == VFM_OK) {
            s = parse_node(r, &ev, depth + 1, &value);
            yaml_event_delete(&ev);
        }
        char buf[64];
        const char *k = NULL;
        if (s == VFM_OK) s = key_text(r, key, line, buf, sizeof buf, &k);
        if (s == VFM_OK && json_object_set(obj, k, value) != 0) s = vfm_fail(VFM_ERR_NOMEM, "out of memory reading YAML");
        json_decref(key);
        json_decref(value);
    }
    if (s == VFM_OK) s = keep_anchor(r, start->data.mapping_start.anchor, obj);
    if (s != VFM_OK) json_decref(obj);
    else *out = obj;
    return s;
}

static vfm_status parse_node(Reader *r, yaml_event_t *ev, int depth, json_t **out) {
    *out = NULL;
    if (depth > MAX_DEPTH)
        return vfm_fail(VFM_ERR_FORMAT, "%s:%d: nested deeper than %d levels", r->source, (int)ev->start_mark.line + 1,
                        MAX_DEPTH);
    switch (ev->type) {
    case YAML_SCALAR_EVENT: return scalar_node(r, ev, out);
    case YAML_SEQUENCE_START_EVENT: return sequence_node(r, ev, depth, out);
    case YAML_MAPPING_START_EVENT: return mapping_node(r, ev, depth, out);
    case YAML_ALIAS_EVENT: {
        json_t *target = json_object_get(r->anchors, (const char *)ev->data.alias.anchor);
        if (!target)
            return vfm_fail(VFM_ERR_FORMAT, "%s:%d: unknown alias *%s", r->source, (int)ev->start_mark.line + 1,
                            (const char *)ev->data.alias.anchor);
        *out = json_incref(target);
        return VFM_OK;
    }
    default:
        return vfm_fail(VFM_ERR_FORMAT, "%s:%d: unexpected YAML event", r->source, (int)ev->start_mark.line + 1);
    }
}

vfm_status yaml_to_json(const char *text, size_t len, const char *source, json_t **out) {
    *out = NULL;
    Reader r = {.source = source ? source : "YAML"};
    if (!yaml_parser_initialize(&r.parser)) return vfm_fail(VFM_ERR_NOMEM, "out of memory reading YAML");
    r.anchors = json_object();
    yaml_parser_set_input_string(&r.parser, (const unsigned char *)text, len);
    vfm_status s = r.anchors ? VFM_OK : vfm_fail(VFM_ERR_NOMEM, "out of memory reading YAML");
    json_t *doc = NULL;
    int in_doc = 0, docs = 0;
    while (s == VFM_OK) {
        yaml_event_t ev;
        if ((s = next_event(&r, &ev)) != VFM_OK) break;
        yaml_event_type_t type = ev.type;
        if (type == YAML_DOCUMENT_START_EVENT) {
            in_doc = 1;
            if (++docs > 1) s = vfm_fail(VFM_ERR_FORMAT, "%s: holds more than one YAML document", r.source);
        } else if (type == YAML_DOCUMENT_END_EVENT) {
            in_doc = 0;
        } else if (in_doc && !doc && type != YAML_STREAM_START_EVENT && type != YAML_STREAM_END_EVENT) {
            s = parse_node(&r, &ev, 0, &doc);
        }
        yaml_event_delete(&ev);
        if (type == YAML_STREAM_END_EVENT) break;
    }
    yaml_parser_delete(&r.parser);
    json_decref(r.anchors);
    if (s != VFM_OK) {
        json_decref(doc);
        return s;
    }
    *out = doc ? doc : json_null();
    return VFM_OK;
}

vfm_status yaml_load_file(const char *path, json_t **out) {
    char *text;
    size_t size;
    VFM_TRY(read_file_all(path, &text, &size));
    vfm_status s = yaml_to_json(text, size, path, out);
    free(text);
    return s;
}

/* ---- writing strings as PyYAML does ---- */

/* PyYAML emitter's analysis of a scalar (ASCII view: every byte >= 0x80 or control is special). */
typedef struct {
    int allow_block_plain, allow_single_quoted;
} Analysis;

static int is_ws(char c) { return c == 0 || c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

static Analysis analyze(const char *s) {
    Analysis a = {1, 1};
    size_t n = strlen(s);
    if (n == 0) return a; /* empty: handled by the resolver (it reads as null) */
    int block_ind = 0, line_breaks = 0, special = 0;
    int leading_space = 0, leading_break = 0, trailing_space = 0, trailing_break = 0, break_space = 0, space_break = 0;
    if (!strncmp(s, "---", 3) || !strncmp(s, "...", 3)) block_ind = 1;
    int preceded_ws = 1, followed_ws = n == 1 || is_ws(s[1]);
    int prev_space = 0, prev_break = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (i == 0) {
            if (strchr("#,[]{}&*!|>'\"%@`", c)) block_ind = 1;
            if ((c == '?' || c == ':') && followed_ws) block_ind = 1;
            if (c == '-' && followed_ws) block_ind = 1;
        } else {
            if (c == ':' && followed_ws) block_ind = 1;
            if (c == '#' && preceded_ws) block_ind = 1;
        }
        if (c == '\n') line_breaks = 1;
        if (!(c == '\n' || (c >= 0x20 && c <= 0x7e))) special = 1;
        if (c == ' ') {
            if (i == 0) leading_space = 1;
            if (i == n - 1) trailing_space = 1;
            if (prev_break) break_space = 1;
            prev_space = 1, prev_break = 0;
        } else if (c == '\n') {
            if (i == 0) leading_break = 1;
            if (i == n - 1) trailing_break = 1;
            if (prev_space) space_break = 1;
            prev_space = 0, prev_break = 1;
        } else {
            prev_space = prev_break = 0;
        }
        preceded_ws = is_ws(c);
        followed_ws = i + 2 >= n || is_ws(s[i + 2]);
    }
    if (leading_space || leading_break || trailing_space || trailing_break) a.allow_block_plain = 0;
    if (break_space) a.allow_block_plain = a.allow_single_quoted = 0;
    if (space_break || special) a.allow_block_plain = a.allow_single_quoted = 0;
    if (line_breaks) a.allow_block_plain = 0;
    if (block_ind) a.allow_block_plain = 0;
    return a;
}

char *yaml_format_string(const char *s) {
    size_t n = strlen(s);
    char *out = malloc(10 * n + 16);
    if (!out) return NULL;
    Analysis a = analyze(s);
    if (!plain_is_typed(s) && n > 0 && a.allow_block_plain) {
        memcpy(out, s, n + 1);
        return out;
    }
    size_t k = 0;
    /* PyYAML writes a line break inside single quotes as two breaks plus the indentation of the
     * context, which this function does not know; double quotes (\n) read back the same anywhere */
    if (a.allow_single_quoted && !strchr(s, '\n')) {
        out[k++] = '\'';
        for (size_t i = 0; i < n; i++) {
            if (s[i] == '\'') out[k++] = '\'';
            out[k++] = s[i];
        }
        out[k++] = '\'';
        out[k] = 0;
        return out;
    }
    /* double-quoted with PyYAML's escapes (code points of UTF-8 text; a stray byte as itself) */
    out[k++] = '"';
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        uint32_t cp = c;
        size_t len = 1;
        if (c >= 0xc0 && c < 0xe0 && i + 1 < n) cp = (uint32_t)(c & 0x1f) << 6 | (s[i + 1] & 0x3f), len = 2;
        else if (c >= 0xe0 && c < 0xf0 && i + 2 < n)
            cp = (uint32_t)(c & 0x0f) << 12 | (uint32_t)(s[i + 1] & 0x3f) << 6 | (s[i + 2] & 0x3f), len = 3;
        else if (c >= 0xf0 && i + 3 < n)
            cp = (uint32_t)(c & 0x07) << 18 | (uint32_t)(s[i + 1] & 0x3f) << 12 | (uint32_t)(s[i + 2] & 0x3f) << 6 |
                 (s[i + 3] & 0x3f), len = 4;
        i += len;
        const char *esc = NULL;
        switch (cp) {
        case 0x07: esc = "\\a"; break;
        case 0x08: esc = "\\b"; break;
        case 0x09: esc = "\\t"; break;
        case 0x0a: esc = "\\n"; break;
        case 0x0b: esc = "\\v"; break;
        case 0x0c: esc = "\\f"; break;
        case 0x0d: esc = "\\r"; break;
        case 0x1b: esc = "\\e"; break;
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case 0x85: esc = "\\N"; break;
        case 0xa0: esc = "\\_"; break;
        case 0x2028: esc = "\\L"; break;
        case 0x2029: esc = "\\P"; break;
        default: break;
        }
        if (esc) k += (size_t)sprintf(out + k, "%s", esc);
        else if (cp >= 0x20 && cp <= 0x7e) out[k++] = (char)cp;
        else if (cp <= 0xff) k += (size_t)sprintf(out + k, "\\x%02X", cp);
        else if (cp <= 0xffff) k += (size_t)sprintf(out + k, "\\u%04X", cp);
        else k += (size_t)sprintf(out + k, "\\U%08X", cp);
    }
    out[k++] = '"';
    out[k] = 0;
    return out;
}
