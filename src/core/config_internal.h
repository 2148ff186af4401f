/* Shared between the config sources: the registry table, the value storage, and the parsed-but-not-
 * yet-typed values that the YAML reader and the override reader hand to the merge step. */
#ifndef VFM_CONFIG_INTERNAL_H
#define VFM_CONFIG_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"

typedef struct {
    const char *name;
    CfgType type;
    const char *def;            /* default, written as an override value ("384", "1e-5", "\"\"", "[]") */
    const char *range;          /* numeric keys: "[8, 65536]", "(0, 1]", "[0, inf)"; NULL: any */
    const char *const *choices; /* string keys: NULL-terminated; NULL: any string */
    int unused;                 /* accepted, warned about when set, otherwise ignored */
    const char *help;
    CfgResumeClass resume;      /* what a resume does when the checkpoint's value differs (0: none given, a bug) */
    int shape;                  /* set but never read by a run's set-up: refused (exit 2), not only warned */
} CfgKeyDef;

extern const CfgKeyDef cfg_key_defs[];
extern const int cfg_key_count;

/* The presets: "key=value" settings applied before the file. NULL when the name is unknown. */
const char *const *cfg_preset_settings(const char *name);

typedef struct {
    int64_t i;
    double f;
    int b;
    char *s;       /* CFG_STRING, CFG_IGNORED (text of a scalar value, "" otherwise) */
    int n;         /* list length */
    int64_t *ints;
    double *floats;
    char **strs;
} CfgValue;

/* Where a key's value came from. CFG_SRC_SAVED: a config file vfm wrote (a run's config.yaml,
 * checkpoint meta, `vfm config show`) that gives the value defaults and preset gave anyway; such a
 * file sets every key, and only its differing values count as the user's (cfg_user_set). */
enum { CFG_SRC_DEFAULT = 0, CFG_SRC_PRESET, CFG_SRC_SAVED, CFG_SRC_FILE, CFG_SRC_OVERRIDE };

/* The first line config_write_yaml writes: a file that starts with it was written by vfm. */
#define CFG_SAVED_HEADER "# vfm configuration: every key"

struct Config {
    CfgValue *values;       /* [cfg_key_count], registry order */
    unsigned char *source;  /* CFG_SRC_* per key */
    unsigned char *warned;  /* the "not used by vfm" warning was printed for this key */
    unsigned char *read;    /* an accessor read the key (or a warning said it does not apply): written
                             * through const Config * too, since reading is what it records */
};

/* A value as written, before the key's type reads it. */
typedef enum { PV_SCALAR, PV_LIST, PV_MAP } PValueKind;
typedef struct {
    char *text;
    int is_null; /* plain ~, null, Null, NULL or nothing */
    int quoted;  /* single- or double-quoted (or tagged !!str): never null */
} PScalar;
typedef struct {
    PValueKind kind;
    PScalar scalar; /* PV_SCALAR */
    PScalar *items; /* PV_LIST */
    int n;
} PValue;

typedef struct {
    char *key;  /* full dotted name */
    PValue value;
    int line;   /* 1-based line in the YAML text */
} PEntry;
typedef struct {
    PEntry *items;
    int n, cap;
} PEntries;

void pvalue_free(PValue *v);
void pentries_free(PEntries *e);

/* Reads YAML text (a mapping, nested mappings become dotted keys) into entries in document order.
 * Syntax errors and duplicate keys are errors naming source_name and the line. */
vfm_status cfg_yaml_parse(const char *text, size_t len, const char *source_name, PEntries *out);
/* Reads an override value: YAML when it starts with [ { " or ', else the trimmed text literally.
 * `where` and `key` name the value in messages. */
vfm_status cfg_parse_value_text(const char *text, const char *where, const char *key, PValue *out);

/* Registry helpers. */
int cfg_find_key(const char *name);
/* Index of the "not used" CFG_IGNORED key that name equals or lies under (comm_overlap.x), or -1. */
int cfg_find_ignored_parent(const char *name);
/* 1 when name is a group: some key starts with "name.". */
int cfg_is_group(const char *name);
/* Phrase for what a key accepts: "an integer in [8, 65536]", "one of cosine, constant, linear". */
void cfg_allowed_text(const CfgKeyDef *def, char *buf, size_t size);
const char *cfg_type_name(CfgType type);
/* The registry key nearest to an unknown name (see docs/config.md). */
const char *cfg_suggest_key(const char *name);

/* Reads value text (override syntax) with def's type; the test suite also uses it for the list
 * types that no registry key has yet. */
vfm_status cfg_value_from_text(const CfgKeyDef *def, const char *text, const char *where, CfgValue *out);
/* The value as YAML text (malloc'd; NULL when out of memory). */
char *cfg_value_format(const CfgKeyDef *def, const CfgValue *value);
void cfg_value_clear(CfgValue *value);

/* Sets key from a parsed value: `where` prefixes messages ("f.yaml:3", "command line", NULL).
 * source CFG_SRC_SAVED becomes CFG_SRC_FILE when the value differs from the one the key held. */
vfm_status cfg_apply_value(Config *cfg, const char *key, const PValue *value, const char *where, int source);
/* Sets key from "key=value" text (override syntax). */
vfm_status cfg_apply_assignment(Config *cfg, const char *assignment, const char *where, int source);

#endif
