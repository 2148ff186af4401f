/* Reading config text: a YAML document (libyaml events) becomes a list of dotted-key entries in
 * document order, and an override's value text becomes one parsed value. No typing happens here:
 * the key's registry type decides how a scalar reads (config.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "config_internal.h"

void pvalue_free(PValue *v) {
    free(v->scalar.text);
    for (int i = 0; i < v->n; i++) free(v->items[i].text);
    free(v->items);
    memset(v, 0, sizeof *v);
}

void pentries_free(PEntries *e) {
    for (int i = 0; i < e->n; i++) {
        free(e->items[i].key);
        pvalue_free(&e->items[i].value);
    }
    free(e->items);
    memset(e, 0, sizeof *e);
}

static int is_null_text(const char *t) {
    return t[0] == 0 || strcmp(t, "~") == 0 || strcmp(t, "null") == 0 || strcmp(t, "Null") == 0 ||
           strcmp(t, "NULL") == 0;
}

static char *dup_text(const char *s, size_t len) {
    char *d = malloc(len + 1);
    if (d) {
        memcpy(d, s, len);
        d[len] = 0;
    }
    return d;
}

typedef struct {
    yaml_parser_t parser;
    const char *source;
    PEntries *out;
} YamlReader;

static vfm_status syntax_error(const yaml_parser_t *p, const char *where, const char *key, const char *value) {
    if (p->error == YAML_MEMORY_ERROR) return vfm_fail(VFM_ERR_NOMEM, "out of memory reading YAML");
    const char *problem = p->problem ? p->problem : "unreadable text";
    if (key) return vfm_fail_at(VFM_ERR_USAGE, where, key, value, "YAML syntax error: %s", problem);
    char loc[1100];
    if (p->error == YAML_READER_ERROR) /* bad encoding: libyaml knows the byte offset, not the line */
        return vfm_fail_at(VFM_ERR_USAGE, where, NULL, NULL, "YAML syntax error: %s at byte %zu", problem,
                           p->problem_offset);
    snprintf(loc, sizeof loc, "%s:%d", where, (int)p->problem_mark.line + 1);
    if (p->context)
        return vfm_fail_at(VFM_ERR_USAGE, loc, NULL, NULL, "YAML syntax error: %s (%s at line %d)", problem,
                           p->context, (int)p->context_mark.line + 1);
    return vfm_fail_at(VFM_ERR_USAGE, loc, NULL, NULL, "YAML syntax error: %s", problem);
}

static vfm_status next_event(YamlReader *r, yaml_event_t *ev) {
    if (!yaml_parser_parse(&r->parser, ev)) return syntax_error(&r->parser, r->source, NULL, NULL);
    return VFM_OK;
}

static int event_line(const yaml_event_t *ev) { return (int)ev->start_mark.line + 1; }

/* Consumes the rest of a node whose first event (`first`) was already read. */
static vfm_status skip_node(YamlReader *r, const yaml_event_t *first) {
    if (first->type != YAML_SEQUENCE_START_EVENT && first->type != YAML_MAPPING_START_EVENT) return VFM_OK;
    for (int depth = 1; depth > 0;) {
        yaml_event_t ev;
        VFM_TRY(next_event(r, &ev));
        if (ev.type == YAML_SEQUENCE_START_EVENT || ev.type == YAML_MAPPING_START_EVENT) depth++;
        if (ev.type == YAML_SEQUENCE_END_EVENT || ev.type == YAML_MAPPING_END_EVENT) depth--;
        yaml_event_delete(&ev);
    }
    return VFM_OK;
}

static vfm_status scalar_from_event(const yaml_event_t *ev, const char *where, const char *key, PScalar *out) {
    const char *value = (const char *)ev->data.scalar.value;
    size_t len = ev->data.scalar.length;
    if (memchr(value, 0, len))
        return vfm_fail_at(VFM_ERR_USAGE, where, key, NULL, "a string may not contain a NUL character");
    out->text = dup_text(value, len);
    if (!out->text) return vfm_fail(VFM_ERR_NOMEM, "out of memory reading YAML");
    out->quoted = !ev->data.scalar.plain_implicit;
    out->is_null = !out->quoted && is_null_text(out->text);
    return VFM_OK;
}

/* Reads the scalars of a sequence whose start event was consumed. */
static vfm_status read_list(const char *where, const char *key, PValue *out,
                            vfm_status (*next)(void *, yaml_event_t *), void *ctx) {
    out->kind = PV_LIST;
    int cap = 0;
    for (;;) {
        yaml_event_t ev;
        VFM_TRY(next(ctx, &ev));
        if (ev.type == YAML_SEQUENCE_END_EVENT) {
            yaml_event_delete(&ev);
            return VFM_OK;
        }
        if (ev.type != YAML_SCALAR_EVENT) {
            yaml_event_delete(&ev);
            return vfm_fail_at(VFM_ERR_USAGE, where, key, NULL,
                               "a list may only hold plain values (no nested lists, mappings or aliases)");
        }
        if (out->n == cap) {
            cap = cap ? 2 * cap : 8;
            PScalar *grown = realloc(out->items, sizeof(PScalar) * (size_t)cap);
            if (!grown) {
                yaml_event_delete(&ev);
                return vfm_fail(VFM_ERR_NOMEM, "out of memory reading YAML");
            }
            out->items = grown;
        }
        memset(&out->items[out->n], 0, sizeof(PScalar));
        vfm_status s = scalar_from_event(&ev, where, key, &out->items[out->n]);
        yaml_event_delete(&ev);
        if (s != VFM_OK) return s;
        out->n++;
    }
}

static vfm_status reader_next(void *ctx, yaml_event_t *ev) { return next_event((YamlReader *)ctx, ev); }

static vfm_status add_entry(YamlReader *r, char *key, PValue *value, int line) {
    PEntries *e = r->out;
    if (e->n == e->cap) {
        int cap = e->cap ? 2 * e->cap : 32;
        PEntry *grown = realloc(e->items, sizeof(PEntry) * (size_t)cap);
        if (!grown) return vfm_fail(VFM_ERR_NOMEM, "out of memory reading YAML");
        e->items = grown;
        e->cap = cap;
    }
    e->items[e->n++] = (PEntry){.key = key, .value = *value, .line = line};
    memset(value, 0, sizeof *value);
    return VFM_OK;
}

static vfm_status read_mapping(YamlReader *r, const char *prefix);

/* Reads the value node of `full` (a malloc'd dotted name this function takes over). */
static vfm_status read_value(YamlReader *r, char *full, int line) {
    char where[1100];
    snprintf(where, sizeof where, "%s:%d", r->source, line);
    for (int i = 0; i < r->out->n; i++)
        if (strcmp(r->out->items[i].key, full) == 0) {
            vfm_status s = vfm_fail_at(VFM_ERR_USAGE, where, NULL, NULL, "duplicate key '%s' (first on line %d)", full,
                                       r->out->items[i].line);
            free(full);
            return s;
        }
    yaml_event_t ev;
    vfm_status s = next_event(r, &ev);
    if (s != VFM_OK) {
        free(full);
        return s;
    }
    PValue value = {0};
    int ignored = cfg_find_ignored_parent(full) >= 0;
    switch (ev.type) {
    case YAML_SCALAR_EVENT:
        value.kind = PV_SCALAR;
        s = scalar_from_event(&ev, where, full, &value.scalar);
        break;
    case YAML_SEQUENCE_START_EVENT:
        if (ignored) {
            value.kind = PV_MAP;
            s = skip_node(r, &ev);
        } else {
            s = read_list(where, full, &value, reader_next, r);
        }
        break;
    case YAML_MAPPING_START_EVENT:
        if (ignored || cfg_find_key(full) >= 0) { /* a mapping for a plain key: the merge step names the error */
            value.kind = PV_MAP;
            s = skip_node(r, &ev);
            break;
        }
        yaml_event_delete(&ev);
        s = read_mapping(r, full);
        free(full);
        return s;
    default:
        s = vfm_fail_at(VFM_ERR_USAGE, where, full, NULL, "YAML aliases (*name) are not supported");
        break;
    }
    yaml_event_delete(&ev);
    if (s == VFM_OK) s = add_entry(r, full, &value, line);
    if (s != VFM_OK) {
        free(full);
        pvalue_free(&value);
    }
    return s;
}

/* Reads the key/value pairs of a mapping whose start event was consumed. */
static vfm_status read_mapping(YamlReader *r, const char *prefix) {
    typedef struct {
        char *name;
        int line;
    } Seen;
    Seen *seen = NULL;
    int nseen = 0, cap = 0;
    vfm_status s = VFM_OK;
    for (;;) {
        yaml_event_t ev;
        s = next_event(r, &ev);
        if (s != VFM_OK) break;
        if (ev.type == YAML_MAPPING_END_EVENT) {
            yaml_event_delete(&ev);
            break;
        }
        int line = event_line(&ev);
        char where[1100];
        snprintf(where, sizeof where, "%s:%d", r->source, line);
        if (ev.type != YAML_SCALAR_EVENT || ev.data.scalar.length == 0) {
            yaml_event_delete(&ev);
            s = vfm_fail_at(VFM_ERR_USAGE, where, NULL, NULL, "a key must be a plain name");
            break;
        }
        const char *name = (const char *)ev.data.scalar.value;
        size_t plen = strlen(prefix);
        char *full = malloc(plen + strlen(name) + 2);
        if (!full) {
            yaml_event_delete(&ev);
            s = vfm_fail(VFM_ERR_NOMEM, "out of memory reading YAML");
            break;
        }
        sprintf(full, "%s%s%s", prefix, plen ? "." : "", name);
        yaml_event_delete(&ev);
        for (int i = 0; i < nseen && s == VFM_OK; i++)
            if (strcmp(seen[i].name, full) == 0)
                s = vfm_fail_at(VFM_ERR_USAGE, where, NULL, NULL, "duplicate key '%s' (first on line %d)", full,
                                seen[i].line);
        if (s == VFM_OK && nseen == cap) {
            cap = cap ? 2 * cap : 16;
            Seen *grown = realloc(seen, sizeof(Seen) * (size_t)cap);
            if (grown) seen = grown;
            else s = vfm_fail(VFM_ERR_NOMEM, "out of memory reading YAML");
        }
        if (s == VFM_OK) {
            seen[nseen].name = strdup(full);
            seen[nseen].line = line;
            if (!seen[nseen].name) s = vfm_fail(VFM_ERR_NOMEM, "out of memory reading YAML");
            else nseen++;
        }
        if (s != VFM_OK) {
            free(full);
            break;
        }
        s = read_value(r, full, line);
        if (s != VFM_OK) break;
    }
    for (int i = 0; i < nseen; i++) free(seen[i].name);
    free(seen);
    return s;
}

static vfm_status read_document(YamlReader *r) {
    yaml_event_t ev;
    VFM_TRY(next_event(r, &ev)); /* stream start */
    yaml_event_delete(&ev);
    VFM_TRY(next_event(r, &ev));
    if (ev.type == YAML_STREAM_END_EVENT) { /* empty text or only comments */
        yaml_event_delete(&ev);
        return VFM_OK;
    }
    yaml_event_delete(&ev); /* document start */
    VFM_TRY(next_event(r, &ev));
    char where[1100];
    snprintf(where, sizeof where, "%s:%d", r->source, event_line(&ev));
    vfm_status s = VFM_OK;
    if (ev.type == YAML_MAPPING_START_EVENT) {
        s = read_mapping(r, "");
    } else if (!(ev.type == YAML_SCALAR_EVENT && ev.data.scalar.plain_implicit &&
                 is_null_text((const char *)ev.data.scalar.value))) {
        s = vfm_fail_at(VFM_ERR_USAGE, where, NULL, NULL, "the top level must be a mapping (key: value lines)");
    }
    yaml_event_delete(&ev);
    if (s != VFM_OK) return s;
    VFM_TRY(next_event(r, &ev)); /* document end */
    yaml_event_delete(&ev);
    VFM_TRY(next_event(r, &ev));
    snprintf(where, sizeof where, "%s:%d", r->source, event_line(&ev));
    int more = ev.type != YAML_STREAM_END_EVENT;
    yaml_event_delete(&ev);
    if (more) return vfm_fail_at(VFM_ERR_USAGE, where, NULL, NULL, "more than one YAML document; vfm reads one");
    return VFM_OK;
}

vfm_status cfg_yaml_parse(const char *text, size_t len, const char *source_name, PEntries *out) {
    YamlReader r = {.source = source_name, .out = out};
    memset(out, 0, sizeof *out);
    if (!yaml_parser_initialize(&r.parser)) return vfm_fail(VFM_ERR_NOMEM, "out of memory reading YAML");
    yaml_parser_set_input_string(&r.parser, (const unsigned char *)text, len);
    vfm_status s = read_document(&r);
    yaml_parser_delete(&r.parser);
    if (s != VFM_OK) pentries_free(out);
    return s;
}

typedef struct {
    yaml_parser_t parser;
    const char *where, *key, *text;
} ValueReader;

static vfm_status value_next(void *ctx, yaml_event_t *ev) {
    ValueReader *v = ctx;
    if (!yaml_parser_parse(&v->parser, ev)) return syntax_error(&v->parser, v->where, v->key, v->text);
    return VFM_OK;
}

/* Parses `text` as one YAML flow node: [list], {mapping} or a quoted scalar. */
static vfm_status parse_yaml_value(ValueReader *v, PValue *out) {
    yaml_event_t ev;
    for (int i = 0; i < 2; i++) { /* stream start, document start */
        VFM_TRY(value_next(v, &ev));
        yaml_event_delete(&ev);
    }
    VFM_TRY(value_next(v, &ev));
    vfm_status s = VFM_OK;
    if (ev.type == YAML_SCALAR_EVENT) {
        out->kind = PV_SCALAR;
        s = scalar_from_event(&ev, v->where, v->key, &out->scalar);
    } else if (ev.type == YAML_SEQUENCE_START_EVENT) {
        s = read_list(v->where, v->key, out, value_next, v);
    } else if (ev.type == YAML_MAPPING_START_EVENT) {
        out->kind = PV_MAP;
        for (int depth = 1; depth > 0 && s == VFM_OK;) {
            yaml_event_t inner;
            s = value_next(v, &inner);
            if (s != VFM_OK) break;
            if (inner.type == YAML_SEQUENCE_START_EVENT || inner.type == YAML_MAPPING_START_EVENT) depth++;
            if (inner.type == YAML_SEQUENCE_END_EVENT || inner.type == YAML_MAPPING_END_EVENT) depth--;
            yaml_event_delete(&inner);
        }
    } else {
        s = vfm_fail_at(VFM_ERR_USAGE, v->where, v->key, v->text, "YAML aliases (*name) are not supported");
    }
    yaml_event_delete(&ev);
    if (s != VFM_OK) return s;
    VFM_TRY(value_next(v, &ev)); /* document end: anything after the node fails here */
    yaml_event_delete(&ev);
    VFM_TRY(value_next(v, &ev));
    int more = ev.type != YAML_STREAM_END_EVENT;
    yaml_event_delete(&ev);
    if (more) return vfm_fail_at(VFM_ERR_USAGE, v->where, v->key, v->text, "unexpected text after the value");
    return VFM_OK;
}

vfm_status cfg_parse_value_text(const char *text, const char *where, const char *key, PValue *out) {
    memset(out, 0, sizeof *out);
    while (*text == ' ' || *text == '\t') text++;
    size_t len = strlen(text);
    while (len > 0 && (text[len - 1] == ' ' || text[len - 1] == '\t')) len--;
    if (len == 0 || !strchr("[{\"'", text[0])) {
        out->kind = PV_SCALAR;
        out->scalar.text = dup_text(text, len);
        if (!out->scalar.text) return vfm_fail(VFM_ERR_NOMEM, "out of memory");
        out->scalar.is_null = is_null_text(out->scalar.text);
        return VFM_OK;
    }
    char *trimmed = dup_text(text, len);
    if (!trimmed) return vfm_fail(VFM_ERR_NOMEM, "out of memory");
    ValueReader v = {.where = where, .key = key, .text = trimmed};
    vfm_status s = VFM_ERR_NOMEM;
    if (yaml_parser_initialize(&v.parser)) {
        yaml_parser_set_input_string(&v.parser, (const unsigned char *)trimmed, len);
        s = parse_yaml_value(&v, out);
        yaml_parser_delete(&v.parser);
    } else {
        vfm_fail(VFM_ERR_NOMEM, "out of memory reading YAML");
    }
    free(trimmed);
    if (s != VFM_OK) pvalue_free(out);
    return s;
}
