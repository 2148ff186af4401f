/* Config values: typing and validation of parsed values against the registry, the merge
 * (defaults → preset → file → overrides), accessors, copy/compare, and the YAML writer whose
 * output reads back to the same values. */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bytebuf.h"
#include "config_internal.h"
#include "log.h"

/* ---- scalar grammar (docs/config.md "Value syntax") ---- */

static int parse_int_text(const char *t, int64_t *out) {
    const char *p = t + (*t == '+' || *t == '-');
    if (!isdigit((unsigned char)*p)) return 0;
    while (isdigit((unsigned char)*p)) p++;
    if (*p) return 0;
    errno = 0;
    long long v = strtoll(t, NULL, 10);
    if (errno) return 0;
    *out = (int64_t)v;
    return 1;
}

/* [+-] (digits [. digits] | . digits) [(e|E) [+-] digits], finite. */
static int parse_float_text(const char *t, double *out) {
    const char *p = t + (*t == '+' || *t == '-');
    int digits = 0;
    while (isdigit((unsigned char)*p)) p++, digits++;
    if (*p == '.')
        for (p++; isdigit((unsigned char)*p); p++) digits++;
    if (!digits) return 0;
    if (*p == 'e' || *p == 'E') {
        p++;
        p += (*p == '+' || *p == '-');
        if (!isdigit((unsigned char)*p)) return 0;
        while (isdigit((unsigned char)*p)) p++;
    }
    if (*p) return 0;
    double v = strtod(t, NULL);
    if (!isfinite(v)) return 0;
    *out = v;
    return 1;
}

static int parse_bool_text(const char *t, int *out) {
    static const char *const words[2][9] = {
        {"false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF"},
        {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON"},
    };
    for (int v = 0; v < 2; v++)
        for (int i = 0; i < 9; i++)
            if (strcmp(t, words[v][i]) == 0) {
                *out = v;
                return 1;
            }
    return 0;
}

/* Decodes one UTF-8 character; returns its length, 0 when invalid (overlong, surrogate, > U+10FFFF). */
static int utf8_decode(const unsigned char *s, uint32_t *cp) {
    if (s[0] < 0x80) {
        *cp = s[0];
        return 1;
    }
    int len = (s[0] & 0xE0) == 0xC0 ? 2 : (s[0] & 0xF0) == 0xE0 ? 3 : (s[0] & 0xF8) == 0xF0 ? 4 : 0;
    if (!len) return 0;
    uint32_t c = s[0] & (0x7F >> len);
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        c = (c << 6) | (s[i] & 0x3F);
    }
    static const uint32_t min_for_len[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (c < min_for_len[len] || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return 0;
    *cp = c;
    return len;
}

static int utf8_valid(const char *s) {
    uint32_t cp;
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        int len = utf8_decode(p, &cp);
        if (!len) return 0;
        p += len;
    }
    return 1;
}

typedef struct {
    double lo, hi;
    int lo_open, hi_open;
} NumRange;

/* "[8, 65536]", "(0, 1]", "[0, inf)" */
static NumRange parse_range(const char *r) {
    NumRange R;
    char *end;
    R.lo_open = r[0] == '(';
    R.lo = strtod(r + 1, &end);
    R.hi = strtod(end + 1, &end);
    R.hi_open = *end == ')';
    return R;
}

static int in_range(double v, const char *range) {
    if (!range) return 1;
    NumRange R = parse_range(range);
    if (R.lo_open ? !(v > R.lo) : !(v >= R.lo)) return 0;
    if (isinf(R.hi)) return 1;
    return R.hi_open ? v < R.hi : v <= R.hi;
}

/* ---- values ---- */

static void value_clear(CfgValue *v) {
    free(v->s);
    free(v->ints);
    free(v->floats);
    for (int i = 0; i < v->n && v->strs; i++) free(v->strs[i]);
    free(v->strs);
    memset(v, 0, sizeof *v);
}

static int is_list(CfgType t) { return t == CFG_INT_LIST || t == CFG_FLOAT_LIST || t == CFG_STRING_LIST; }

/* The value as the user wrote it, for messages. */
static void pvalue_text(const PValue *v, ByteBuf *b) {
    if (v->kind == PV_MAP) {
        bytebuf_puts(b, "{...}");
        return;
    }
    if (v->kind == PV_SCALAR) {
        bytebuf_puts(b, v->scalar.is_null && !v->scalar.text[0] ? "null" : v->scalar.text);
        return;
    }
    bytebuf_puts(b, "[");
    for (int i = 0; i < v->n; i++) {
        if (i) bytebuf_puts(b, ", ");
        bytebuf_puts(b, v->items[i].is_null && !v->items[i].text[0] ? "null" : v->items[i].text);
    }
    bytebuf_puts(b, "]");
}

static int convert_list_item(CfgType type, const PScalar *sc, CfgValue *out, int i) {
    switch (type) {
    case CFG_INT_LIST: return !sc->is_null && parse_int_text(sc->text, &out->ints[i]);
    case CFG_FLOAT_LIST: return !sc->is_null && parse_float_text(sc->text, &out->floats[i]);
    default:
        if (!utf8_valid(sc->text)) return 0;
        out->strs[i] = strdup(sc->is_null ? "" : sc->text);
        return out->strs[i] != NULL;
    }
}

/* Reads a parsed value with the key's type; on failure a message naming where, key, value and what
 * is allowed. */
static vfm_status convert_value(const CfgKeyDef *def, const PValue *pv, const char *where, CfgValue *out) {
    memset(out, 0, sizeof *out);
    const PScalar *sc = pv->kind == PV_SCALAR ? &pv->scalar : NULL;
    int ok = 0, in_bounds = 1;
    const char *problem = NULL;
    switch (def->type) {
    case CFG_INT:
        ok = sc && !sc->is_null && parse_int_text(sc->text, &out->i);
        if (ok) in_bounds = in_range((double)out->i, def->range);
        break;
    case CFG_FLOAT:
        ok = sc && !sc->is_null && parse_float_text(sc->text, &out->f);
        if (ok) in_bounds = in_range(out->f, def->range);
        break;
    case CFG_BOOL: ok = sc && !sc->is_null && parse_bool_text(sc->text, &out->b); break;
    case CFG_STRING:
        if (!sc) break;
        if (!utf8_valid(sc->text)) {
            problem = "not valid UTF-8";
            break;
        }
        out->s = strdup(sc->is_null ? "" : sc->text);
        if (!out->s) return vfm_fail(VFM_ERR_NOMEM, "out of memory");
        ok = 1;
        if (def->choices) {
            ok = 0;
            for (int c = 0; def->choices[c]; c++)
                if (strcmp(def->choices[c], out->s) == 0) ok = 1;
        }
        break;
    case CFG_IGNORED:
        out->s = strdup(sc && !sc->is_null ? sc->text : "");
        if (!out->s) return vfm_fail(VFM_ERR_NOMEM, "out of memory");
        ok = 1;
        break;
    case CFG_INT_LIST:
    case CFG_FLOAT_LIST:
    case CFG_STRING_LIST:
        if (sc && sc->is_null) { /* null: the empty list */
            ok = 1;
            break;
        }
        if (pv->kind != PV_LIST) break;
        out->n = pv->n;
        size_t n = (size_t)(pv->n ? pv->n : 1);
        if (def->type == CFG_INT_LIST) out->ints = calloc(n, sizeof(int64_t));
        if (def->type == CFG_FLOAT_LIST) out->floats = calloc(n, sizeof(double));
        if (def->type == CFG_STRING_LIST) out->strs = calloc(n, sizeof(char *));
        if (!out->ints && !out->floats && !out->strs) return vfm_fail(VFM_ERR_NOMEM, "out of memory");
        ok = 1;
        for (int i = 0; i < pv->n && ok; i++) ok = convert_list_item(def->type, &pv->items[i], out, i);
        break;
    }
    if (ok && in_bounds) return VFM_OK;
    value_clear(out);
    char allowed[256];
    cfg_allowed_text(def, allowed, sizeof allowed);
    ByteBuf text = {0};
    pvalue_text(pv, &text);
    vfm_status s;
    if (problem)
        s = vfm_fail_at(VFM_ERR_USAGE, where, def->name, bytebuf_str(&text), "%s; expected %s", problem, allowed);
    else
        s = vfm_fail_at(VFM_ERR_USAGE, where, def->name, bytebuf_str(&text), "%sexpected %s",
                        in_bounds ? "" : "out of range; ", allowed);
    free(text.data);
    return s;
}

static vfm_status copy_value(CfgType type, const CfgValue *src, CfgValue *dst) {
    *dst = *src;
    dst->s = NULL;
    dst->ints = NULL;
    dst->floats = NULL;
    dst->strs = NULL;
    size_t n = (size_t)(src->n ? src->n : 1);
    int oom = 0;
    if (src->s) oom |= !(dst->s = strdup(src->s));
    if (type == CFG_INT_LIST && (dst->ints = malloc(n * sizeof(int64_t))))
        memcpy(dst->ints, src->ints, (size_t)src->n * sizeof(int64_t));
    if (type == CFG_FLOAT_LIST && (dst->floats = malloc(n * sizeof(double))))
        memcpy(dst->floats, src->floats, (size_t)src->n * sizeof(double));
    if (type == CFG_STRING_LIST && (dst->strs = calloc(n, sizeof(char *))))
        for (int i = 0; i < src->n; i++) oom |= !(dst->strs[i] = strdup(src->strs[i]));
    if (type == CFG_INT_LIST) oom |= !dst->ints;
    if (type == CFG_FLOAT_LIST) oom |= !dst->floats;
    if (type == CFG_STRING_LIST) oom |= !dst->strs;
    if (oom) {
        value_clear(dst);
        return vfm_fail(VFM_ERR_NOMEM, "out of memory copying the config");
    }
    return VFM_OK;
}

static int values_equal(CfgType type, const CfgValue *a, const CfgValue *b) {
    switch (type) {
    case CFG_INT: return a->i == b->i;
    case CFG_FLOAT: return memcmp(&a->f, &b->f, sizeof(double)) == 0;
    case CFG_BOOL: return a->b == b->b;
    case CFG_STRING:
    case CFG_IGNORED: return strcmp(a->s, b->s) == 0;
    case CFG_INT_LIST: return a->n == b->n && (a->n == 0 || memcmp(a->ints, b->ints, (size_t)a->n * sizeof(int64_t)) == 0);
    case CFG_FLOAT_LIST:
        return a->n == b->n && (a->n == 0 || memcmp(a->floats, b->floats, (size_t)a->n * sizeof(double)) == 0);
    case CFG_STRING_LIST:
        if (a->n != b->n) return 0;
        for (int i = 0; i < a->n; i++)
            if (strcmp(a->strs[i], b->strs[i]) != 0) return 0;
        return 1;
    }
    return 0;
}

/* ---- Config objects ---- */

void config_free(Config *cfg) {
    if (!cfg) return;
    for (int i = 0; cfg->values && i < cfg_key_count; i++) value_clear(&cfg->values[i]);
    free(cfg->values);
    free(cfg->source);
    free(cfg->warned);
    free(cfg->read);
    free(cfg);
}

static vfm_status config_alloc(Config **out) {
    Config *c = calloc(1, sizeof *c);
    if (c) {
        c->values = calloc((size_t)cfg_key_count, sizeof(CfgValue));
        c->source = calloc((size_t)cfg_key_count, 1);
        c->warned = calloc((size_t)cfg_key_count, 1);
        c->read = calloc((size_t)cfg_key_count, 1);
    }
    if (!c || !c->values || !c->source || !c->warned || !c->read) {
        config_free(c);
        return vfm_fail(VFM_ERR_NOMEM, "out of memory for the config");
    }
    *out = c;
    return VFM_OK;
}

vfm_status cfg_value_from_text(const CfgKeyDef *def, const char *text, const char *where, CfgValue *out) {
    PValue pv;
    memset(out, 0, sizeof *out);
    VFM_TRY(cfg_parse_value_text(text, where, def->name, &pv));
    vfm_status s = convert_value(def, &pv, where, out);
    pvalue_free(&pv);
    return s;
}

void cfg_value_clear(CfgValue *value) { value_clear(value); }

static vfm_status config_defaults(Config **out) {
    VFM_TRY(config_alloc(out));
    for (int i = 0; i < cfg_key_count; i++) {
        vfm_status s = cfg_value_from_text(&cfg_key_defs[i], cfg_key_defs[i].def, "registry default", &(*out)->values[i]);
        if (s != VFM_OK) {
            config_free(*out);
            *out = NULL;
            return s == VFM_ERR_NOMEM ? s : VFM_ERR_INTERNAL;
        }
    }
    return VFM_OK;
}

vfm_status config_copy(Config **out, const Config *cfg) {
    VFM_TRY(config_alloc(out));
    for (int i = 0; i < cfg_key_count; i++) {
        vfm_status s = copy_value(cfg_key_defs[i].type, &cfg->values[i], &(*out)->values[i]);
        if (s != VFM_OK) {
            config_free(*out);
            *out = NULL;
            return s;
        }
    }
    memcpy((*out)->source, cfg->source, (size_t)cfg_key_count);
    memcpy((*out)->warned, cfg->warned, (size_t)cfg_key_count);
    memcpy((*out)->read, cfg->read, (size_t)cfg_key_count);
    return VFM_OK;
}

int config_equal(const Config *a, const Config *b, char *first_diff, size_t first_diff_size) {
    for (int i = 0; i < cfg_key_count; i++)
        if (!values_equal(cfg_key_defs[i].type, &a->values[i], &b->values[i])) {
            if (first_diff && first_diff_size) snprintf(first_diff, first_diff_size, "%s", cfg_key_defs[i].name);
            return 0;
        }
    return 1;
}

/* ---- applying values ---- */

vfm_status cfg_apply_value(Config *cfg, const char *key, const PValue *value, const char *where, int source) {
    int idx = cfg_find_key(key);
    if (idx < 0) idx = cfg_find_ignored_parent(key);
    if (idx < 0) {
        if (cfg_is_group(key)) {
            if (value->kind == PV_SCALAR && value->scalar.is_null) return VFM_OK; /* "model:" with nothing under it */
            ByteBuf text = {0};
            pvalue_text(value, &text);
            vfm_status s = vfm_fail_at(VFM_ERR_USAGE, where, key, bytebuf_str(&text),
                                       "expected a mapping of %s.* keys", key);
            free(text.data);
            return s;
        }
        return vfm_fail_at(VFM_ERR_USAGE, where, NULL, NULL, "unknown key '%s'; did you mean '%s'?", key,
                           cfg_suggest_key(key));
    }
    const CfgKeyDef *def = &cfg_key_defs[idx];
    CfgValue v;
    VFM_TRY(convert_value(def, value, where, &v));
    /* a file vfm wrote sets every key: a value it did not change from the default (or preset) is
     * not the user's */
    if (source == CFG_SRC_SAVED && !values_equal(def->type, &v, &cfg->values[idx])) source = CFG_SRC_FILE;
    value_clear(&cfg->values[idx]);
    cfg->values[idx] = v;
    cfg->source[idx] = (unsigned char)source;
    if (def->unused && source >= CFG_SRC_FILE && !cfg->warned[idx]) {
        log_warn("config: '%s' is not used by vfm (ignored)", def->name);
        cfg->warned[idx] = 1;
    }
    return VFM_OK;
}

/* "a.b.c=value" (a leading '+', Hydra's "add", is accepted) → key and parsed value. */
static vfm_status parse_assignment(const char *text, const char *where, PEntry *out) {
    memset(out, 0, sizeof *out);
    const char *eq = strchr(text, '=');
    const char *k = text, *kend = eq;
    while (*k == ' ' || *k == '\t') k++;
    if (*k == '+') k++;
    while (kend && kend > k && (kend[-1] == ' ' || kend[-1] == '\t')) kend--;
    if (!eq || kend <= k)
        return vfm_fail_at(VFM_ERR_USAGE, where, NULL, NULL, "expected key=value (like model.hidden_size=256), got '%s'",
                           text);
    out->key = strndup(k, (size_t)(kend - k));
    if (!out->key) return vfm_fail(VFM_ERR_NOMEM, "out of memory");
    vfm_status s = cfg_parse_value_text(eq + 1, where, out->key, &out->value);
    if (s != VFM_OK) {
        free(out->key);
        out->key = NULL;
    }
    return s;
}

vfm_status cfg_apply_assignment(Config *cfg, const char *assignment, const char *where, int source) {
    PEntry e;
    VFM_TRY(parse_assignment(assignment, where, &e));
    vfm_status s = cfg_apply_value(cfg, e.key, &e.value, where, source);
    free(e.key);
    pvalue_free(&e.value);
    return s;
}

vfm_status config_set(Config *cfg, const char *key, const char *value_text) {
    PValue pv;
    VFM_TRY(cfg_parse_value_text(value_text, NULL, key, &pv));
    vfm_status s = cfg_apply_value(cfg, key, &pv, NULL, CFG_SRC_OVERRIDE);
    pvalue_free(&pv);
    return s;
}

static const PEntry *last_entry(const PEntries *e, const char *key) {
    for (int i = e->n - 1; i >= 0; i--)
        if (strcmp(e->items[i].key, key) == 0) return &e->items[i];
    return NULL;
}

static const char *const k_command_line = "command line";

/* defaults → preset → file entries → overrides. file_source: CFG_SRC_FILE, or CFG_SRC_SAVED for a
 * file vfm wrote. */
static vfm_status merge(Config *cfg, const PEntries *file, const char *file_name, int file_source,
                        const PEntries *overrides) {
    char where[1100];
    const PEntry *preset = last_entry(overrides, "model.preset");
    if (preset) {
        VFM_TRY(cfg_apply_value(cfg, preset->key, &preset->value, k_command_line, CFG_SRC_OVERRIDE));
    } else if ((preset = last_entry(file, "model.preset"))) {
        snprintf(where, sizeof where, "%s:%d", file_name, preset->line);
        VFM_TRY(cfg_apply_value(cfg, preset->key, &preset->value, where, file_source));
    }
    cfg->read[cfg_find_key("model.preset")] = 1; /* the merge is what reads it */
    const char *name = cfg_str(cfg, "model.preset");
    const char *const *settings = cfg_preset_settings(name);
    snprintf(where, sizeof where, "preset '%s'", name);
    for (int i = 0; settings && settings[i]; i++) {
        vfm_status s = cfg_apply_assignment(cfg, settings[i], where, CFG_SRC_PRESET);
        if (s != VFM_OK) return VFM_ERR_INTERNAL; /* a broken preset table: the registry tests catch it */
    }
    for (int i = 0; i < file->n; i++) {
        snprintf(where, sizeof where, "%s:%d", file_name, file->items[i].line);
        VFM_TRY(cfg_apply_value(cfg, file->items[i].key, &file->items[i].value, where, file_source));
    }
    for (int i = 0; i < overrides->n; i++)
        VFM_TRY(cfg_apply_value(cfg, overrides->items[i].key, &overrides->items[i].value, k_command_line,
                                CFG_SRC_OVERRIDE));
    return VFM_OK;
}

static vfm_status load_text(Config **out, const char *text, size_t len, const char *source_name,
                            const char *const *overrides, int n) {
    *out = NULL;
    PEntries file = {0}, over = {0};
    vfm_status s = VFM_OK;
    if (text) s = cfg_yaml_parse(text, len, source_name, &file);
    if (s == VFM_OK && n > 0) {
        over.items = calloc((size_t)n, sizeof(PEntry));
        if (!over.items) s = vfm_fail(VFM_ERR_NOMEM, "out of memory");
        for (int i = 0; i < n && s == VFM_OK; i++) {
            s = parse_assignment(overrides[i], k_command_line, &over.items[i]);
            if (s == VFM_OK) over.n++;
        }
    }
    Config *cfg = NULL;
    if (s == VFM_OK) s = config_defaults(&cfg);
    int saved = text && strncmp(text, CFG_SAVED_HEADER, strlen(CFG_SAVED_HEADER)) == 0;
    if (s == VFM_OK) s = merge(cfg, &file, source_name, saved ? CFG_SRC_SAVED : CFG_SRC_FILE, &over);
    pentries_free(&file);
    pentries_free(&over);
    if (s != VFM_OK) {
        config_free(cfg);
        return s;
    }
    *out = cfg;
    return VFM_OK;
}

static vfm_status read_whole_file(const char *path, char **text, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return vfm_fail(VFM_ERR_USAGE, "cannot read config file '%s': %s", path, strerror(errno));
    ByteBuf b = {0};
    char chunk[8192];
    size_t got;
    while ((got = fread(chunk, 1, sizeof chunk, f)) > 0) bytebuf_put(&b, chunk, got);
    int err = ferror(f) ? errno : 0;
    fclose(f);
    if (err) {
        free(b.data);
        return vfm_fail(VFM_ERR_USAGE, "cannot read config file '%s': %s", path, strerror(err));
    }
    if (b.failed) {
        free(b.data);
        return vfm_fail(VFM_ERR_NOMEM, "out of memory reading '%s'", path);
    }
    *text = b.data ? (char *)b.data : strdup("");
    *len = b.len;
    return *text ? VFM_OK : vfm_fail(VFM_ERR_NOMEM, "out of memory reading '%s'", path);
}

vfm_status config_load(Config **out, const char *yaml_path, const char *const *overrides, int n) {
    *out = NULL;
    char *text = NULL;
    size_t len = 0;
    if (yaml_path) VFM_TRY(read_whole_file(yaml_path, &text, &len));
    vfm_status s = load_text(out, text, len, yaml_path, overrides, n);
    free(text);
    return s;
}

vfm_status config_from_yaml_string(Config **out, const char *yaml_text, const char *source_name) {
    return load_text(out, yaml_text, strlen(yaml_text), source_name ? source_name : "config text", NULL, 0);
}

/* ---- accessors ---- */

static int key_or_die(const char *fn, const char *key, int want) {
    int idx = cfg_find_key(key);
    if (idx < 0) {
        log_error("config: %s(\"%s\"): no such key in the registry", fn, key);
        abort();
    }
    CfgType t = cfg_key_defs[idx].type;
    if (want >= 0 && (int)t != want) {
        log_error("config: %s(\"%s\"): the key's type is %s", fn, key, cfg_type_name(t));
        abort();
    }
    return idx;
}

/* An accessor's lookup: the key's index, marked read. */
static int read_key(const Config *cfg, const char *fn, const char *key, int want) {
    int idx = key_or_die(fn, key, want);
    cfg->read[idx] = 1;
    return idx;
}

int64_t cfg_int(const Config *cfg, const char *key) { return cfg->values[read_key(cfg, "cfg_int", key, CFG_INT)].i; }
double cfg_float(const Config *cfg, const char *key) { return cfg->values[read_key(cfg, "cfg_float", key, CFG_FLOAT)].f; }
int cfg_bool(const Config *cfg, const char *key) { return cfg->values[read_key(cfg, "cfg_bool", key, CFG_BOOL)].b; }
const char *cfg_str(const Config *cfg, const char *key) { return cfg->values[read_key(cfg, "cfg_str", key, CFG_STRING)].s; }
int cfg_is_set(const Config *cfg, const char *key) { return cfg->source[key_or_die("cfg_is_set", key, -1)] != CFG_SRC_DEFAULT; }
int cfg_user_set(const Config *cfg, const char *key) { return cfg->source[key_or_die("cfg_user_set", key, -1)] >= CFG_SRC_FILE; }
int cfg_was_read(const Config *cfg, const char *key) { return cfg->read[key_or_die("cfg_was_read", key, -1)]; }
void cfg_mark_read(const Config *cfg, const char *key) { cfg->read[key_or_die("cfg_mark_read", key, -1)] = 1; }

int cfg_list_len(const Config *cfg, const char *key) {
    int idx = read_key(cfg, "cfg_list_len", key, -1);
    if (!is_list(cfg_key_defs[idx].type)) {
        log_error("config: cfg_list_len(\"%s\"): the key's type is %s", key, cfg_type_name(cfg_key_defs[idx].type));
        abort();
    }
    return cfg->values[idx].n;
}

static const CfgValue *list_item_or_die(const Config *cfg, const char *fn, const char *key, int type, int index) {
    const CfgValue *v = &cfg->values[read_key(cfg, fn, key, type)];
    if (index < 0 || index >= v->n) {
        log_error("config: %s(\"%s\", %d): index out of range (the list has %d items)", fn, key, index, v->n);
        abort();
    }
    return v;
}

int64_t cfg_list_int(const Config *cfg, const char *key, int index) {
    return list_item_or_die(cfg, "cfg_list_int", key, CFG_INT_LIST, index)->ints[index];
}
double cfg_list_float(const Config *cfg, const char *key, int index) {
    return list_item_or_die(cfg, "cfg_list_float", key, CFG_FLOAT_LIST, index)->floats[index];
}
const char *cfg_list_str(const Config *cfg, const char *key, int index) {
    return list_item_or_die(cfg, "cfg_list_str", key, CFG_STRING_LIST, index)->strs[index];
}

int cfg_warn_unused(const Config *cfg, const char *key, const char *fmt, ...) {
    int idx = key_or_die("cfg_warn_unused", key, -1);
    if (cfg->source[idx] < CFG_SRC_FILE) return 0;
    cfg->read[idx] = 1;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    log_warn("config: %s", msg);
    return 1;
}

vfm_status config_check_unread(const Config *cfg, int warn) {
    ByteBuf refused = {0};
    int n_refused = 0;
    for (int i = 0; i < cfg_key_count; i++) {
        const CfgKeyDef *def = &cfg_key_defs[i];
        /* keys vfm never uses warned when they were set (cfg_apply_value) */
        if (def->unused || cfg->read[i] || cfg->source[i] < CFG_SRC_FILE) continue;
        char value[160];
        char *text = cfg_value_format(def, &cfg->values[i]);
        snprintf(value, sizeof value, "%s", text ? text : "?");
        free(text);
        if (def->shape) {
            bytebuf_printf(&refused, "%s%s=%s (%s)", n_refused ? "; " : "", def->name, value, def->help);
            n_refused++;
        } else if (warn) {
            log_warn("config: %s=%s is set but this run does not use it (ignored): %s", def->name, value, def->help);
        }
        cfg->read[i] = 1; /* said once */
    }
    if (!n_refused) return VFM_OK;
    vfm_status s = vfm_fail(VFM_ERR_USAGE, "%s: set, but this model does not use %s (it would be built without %s); "
                            "unset %s", bytebuf_str(&refused), n_refused > 1 ? "them" : "it",
                            n_refused > 1 ? "them" : "it", n_refused > 1 ? "them" : "it");
    free(refused.data);
    return s;
}

/* ---- YAML output ---- */

/* Shortest %.Ng that reads back to the same bits; like Python repr: exponent below 1e-4 and from 1e17,
 * without '+' or leading zeros ("1e-5"), ".0" added when it would otherwise read as an integer. */
static void format_float(ByteBuf *b, double v) {
    char tmp[48];
    int prec = 1;
    for (; prec < 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*g", prec, v);
        if (strtod(tmp, NULL) == v) break;
    }
    snprintf(tmp, sizeof tmp, "%.*e", prec - 1, v);
    int exponent = atoi(strchr(tmp, 'e') + 1);
    if (exponent >= prec && exponent < 17) prec = exponent + 1;
    snprintf(tmp, sizeof tmp, "%.*g", prec, v);
    char *e = strchr(tmp, 'e');
    if (e) { /* e+05 → e5, e-05 → e-5 */
        char *digits = e + 1 + (e[1] == '+' || e[1] == '-');
        char *first = digits;
        while (*first == '0' && first[1]) first++;
        memmove(digits, first, strlen(first) + 1);
        if (e[1] == '+') memmove(e + 1, e + 2, strlen(e + 2) + 1);
    }
    if (!strpbrk(tmp, ".e")) strcat(tmp, ".0");
    bytebuf_puts(b, tmp);
}

/* 1 when a plain (unquoted) scalar would read back as this exact string in any YAML 1.1 or 1.2
 * reader: nothing null/bool/number-like, no indicators, no escapes. */
static int plain_safe(const char *s, int in_flow) {
    if (!s[0]) return 0;
    if (strchr("-?:,[]{}#&*!|>'\"%@`.+ ", s[0])) return 0;
    size_t len = strlen(s);
    if (s[len - 1] == ' ' || s[len - 1] == ':') return 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if (*p < 0x20 || *p >= 0x7F) return 0;
    if (strstr(s, ": ") || strstr(s, " #")) return 0;
    if (in_flow && strpbrk(s, ",[]{}:#")) return 0;
    int64_t i;
    double f;
    int bl;
    if (parse_int_text(s, &i) || parse_float_text(s, &f) || parse_bool_text(s, &bl)) return 0;
    static const char *const yaml11[] = {"null", "Null", "NULL", "~", "y", "Y", "n", "N", NULL};
    for (int k = 0; yaml11[k]; k++)
        if (strcmp(s, yaml11[k]) == 0) return 0;
    /* numbers in other YAML dialects: 0x1F, 0o17, 1_000, 12:30 (sexagesimal), 2024-01-01 */
    if (isdigit((unsigned char)s[0]) && strspn(s, "0123456789abcdefABCDEFxXoO_:.+-") == len) return 0;
    return 1;
}

/* A string as YAML: plain when safe, else double-quoted, pure ASCII (\", \\, \n, \t, \xNN, \uNNNN). */
static void format_string(ByteBuf *b, const char *s, int in_flow) {
    if (plain_safe(s, in_flow)) {
        bytebuf_puts(b, s);
        return;
    }
    bytebuf_puts(b, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        uint32_t cp;
        int len = utf8_decode(p, &cp);
        if (!len) { /* values are validated on the way in; never reached */
            cp = 0xFFFD;
            len = 1;
        }
        p += len;
        if (cp == '"') bytebuf_puts(b, "\\\"");
        else if (cp == '\\') bytebuf_puts(b, "\\\\");
        else if (cp == '\n') bytebuf_puts(b, "\\n");
        else if (cp == '\t') bytebuf_puts(b, "\\t");
        else if (cp < 0x20 || cp == 0x7F) bytebuf_printf(b, "\\x%02X", (unsigned)cp);
        else if (cp < 0x80) bytebuf_put(b, &(char){(char)cp}, 1);
        else if (cp <= 0xFFFF) bytebuf_printf(b, "\\u%04X", (unsigned)cp);
        else bytebuf_printf(b, "\\U%08X", (unsigned)cp);
    }
    bytebuf_puts(b, "\"");
}

static void format_value(ByteBuf *b, const CfgKeyDef *def, const CfgValue *v) {
    switch (def->type) {
    case CFG_INT: bytebuf_printf(b, "%" PRId64, v->i); return;
    case CFG_FLOAT: format_float(b, v->f); return;
    case CFG_BOOL: bytebuf_puts(b, v->b ? "true" : "false"); return;
    case CFG_STRING: format_string(b, v->s, 0); return;
    case CFG_IGNORED:
        if (v->s[0]) format_string(b, v->s, 0);
        else bytebuf_puts(b, "null");
        return;
    case CFG_INT_LIST:
    case CFG_FLOAT_LIST:
    case CFG_STRING_LIST:
        bytebuf_puts(b, "[");
        for (int i = 0; i < v->n; i++) {
            if (i) bytebuf_puts(b, ", ");
            if (def->type == CFG_INT_LIST) bytebuf_printf(b, "%" PRId64, v->ints[i]);
            else if (def->type == CFG_FLOAT_LIST) format_float(b, v->floats[i]);
            else format_string(b, v->strs[i], 1);
        }
        bytebuf_puts(b, "]");
        return;
    }
}

char *cfg_value_format(const CfgKeyDef *def, const CfgValue *value) {
    ByteBuf b = {0};
    format_value(&b, def, value);
    if (b.failed) {
        free(b.data);
        return NULL;
    }
    return b.data ? (char *)b.data : strdup("");
}

int cfg_value_text(const Config *cfg, const char *key, char *buf, size_t size) {
    int idx = key_or_die("cfg_value_text", key, -1);
    ByteBuf b = {0};
    format_value(&b, &cfg_key_defs[idx], &cfg->values[idx]);
    int len = (int)b.len;
    if (size) snprintf(buf, size, "%s", bytebuf_str(&b));
    free(b.data);
    return len;
}

/* Unused keys nobody set are written as comments: reading the file back must not warn about them. */
static int written_as_comment(const Config *cfg, int i) {
    return cfg_key_defs[i].unused && cfg->source[i] == CFG_SRC_DEFAULT;
}

/* 1 when some key from index `from` on lies under the group prefix[0..len) and is written live. */
static int group_has_live_key(const Config *cfg, int from, const char *prefix, size_t len) {
    for (int j = from; j < cfg_key_count; j++)
        if (strncmp(cfg_key_defs[j].name, prefix, len) == 0 && cfg_key_defs[j].name[len] == '.' &&
            !written_as_comment(cfg, j))
            return 1;
    return 0;
}

static void write_yaml(const Config *cfg, ByteBuf *b) {
    bytebuf_puts(b, CFG_SAVED_HEADER " (`vfm config keys` describes them). Keys vfm does not use\n"
               "# are commented out unless they were set.\n");
    const char *prev = "";
    for (int i = 0; i < cfg_key_count; i++) {
        const char *name = cfg_key_defs[i].name;
        /* Group components shared with the previous key are already open. */
        size_t shared = 0;
        int shared_depth = 0;
        for (size_t k = 0; name[k] && name[k] == prev[k]; k++)
            if (name[k] == '.') {
                shared = k + 1;
                shared_depth++;
            }
        int depth = shared_depth;
        const char *part = name + shared;
        if (shared == 0 && i > 0) bytebuf_puts(b, "\n");
        for (const char *dot; (dot = strchr(part, '.')); part = dot + 1, depth++) {
            int live = group_has_live_key(cfg, i, name, (size_t)(dot - name));
            bytebuf_printf(b, "%*s%s%.*s:\n", 2 * depth, "", live ? "" : "# ", (int)(dot - part), part);
        }
        bytebuf_printf(b, "%*s%s%s: ", 2 * depth, "", written_as_comment(cfg, i) ? "# " : "", part);
        format_value(b, &cfg_key_defs[i], &cfg->values[i]);
        bytebuf_puts(b, "\n");
        prev = name;
    }
}

vfm_status config_to_yaml_string(const Config *cfg, char **out) {
    ByteBuf b = {0};
    write_yaml(cfg, &b);
    if (b.failed || !b.data) {
        free(b.data);
        return vfm_fail(VFM_ERR_NOMEM, "out of memory writing the config");
    }
    *out = (char *)b.data;
    return VFM_OK;
}

vfm_status config_write_yaml(const Config *cfg, FILE *f) {
    char *text;
    VFM_TRY(config_to_yaml_string(cfg, &text));
    size_t len = strlen(text);
    int ok = fwrite(text, 1, len, f) == len && fflush(f) == 0;
    free(text);
    if (!ok) return vfm_fail(VFM_ERR_IO, "cannot write the config as YAML: %s", strerror(errno));
    return VFM_OK;
}
