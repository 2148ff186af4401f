/* Configuration: one registry of every key (config_keys.c), values merged as
 * defaults → preset → YAML file → `a.b.c=value` overrides, typed accessors, and YAML output that
 * reads back to the same values. Rules and messages: docs/config.md. */
#ifndef VFM_CONFIG_H
#define VFM_CONFIG_H

#include <stdint.h>
#include <stdio.h>

#include "error.h"

typedef enum {
    CFG_INT,         /* int64 */
    CFG_FLOAT,       /* double; an integer literal is accepted */
    CFG_BOOL,
    CFG_STRING,      /* YAML null reads as "" */
    CFG_INT_LIST,
    CFG_FLOAT_LIST,
    CFG_STRING_LIST,
    CFG_IGNORED,     /* any value, mappings included; only for keys vfm does not use */
} CfgType;

typedef struct Config Config;

/* Merges defaults → preset (model.preset as the file or the overrides finally set it) → the YAML
 * file (NULL: none) → overrides[0..n) ("a.b.c=value", applied in order). Errors are VFM_ERR_USAGE
 * naming the file and line (or "command line"), the key and the value; an unreadable file is
 * also VFM_ERR_USAGE (exit 2: a bad command line). Keys flagged "not used by vfm" warn once per key (log_warn). */
vfm_status config_load(Config **out, const char *yaml_path, const char *const *overrides, int n);
/* As config_load with the YAML text in memory (checkpoint meta); source_name appears in messages. */
vfm_status config_from_yaml_string(Config **out, const char *yaml_text, const char *source_name);
/* Sets one key from value text, validated like an override (message without a file prefix).
 * Changing model.preset here does not re-apply the preset. */
vfm_status config_set(Config *cfg, const char *key, const char *value_text);
vfm_status config_copy(Config **out, const Config *cfg);
void config_free(Config *cfg);
/* 1 when both hold the same value for every key (cfg_is_set is not compared). When they differ
 * and first_diff is not NULL, the first differing key's name is copied there. */
int config_equal(const Config *a, const Config *b, char *first_diff, size_t first_diff_size);

/* Accessors. A key missing from the registry or asked with the wrong type is a programming
 * error: log_error naming the key, then abort(). */
int64_t cfg_int(const Config *cfg, const char *key);
double cfg_float(const Config *cfg, const char *key);
int cfg_bool(const Config *cfg, const char *key);
const char *cfg_str(const Config *cfg, const char *key);
int cfg_list_len(const Config *cfg, const char *key); /* any list type */
int64_t cfg_list_int(const Config *cfg, const char *key, int index);
double cfg_list_float(const Config *cfg, const char *key, int index);
const char *cfg_list_str(const Config *cfg, const char *key, int index);
/* 1 when a preset, the file, an override or config_set gave the key a value (even the default's). */
int cfg_is_set(const Config *cfg, const char *key);
/* The value as it is written in YAML (`256`, `9e-05`, `true`, `"a: b"`, `[1, 2]`); returns the
 * length it needs (snprintf-like). Unknown key: log_error + abort. */
int cfg_value_text(const Config *cfg, const char *key, char *buf, size_t size);

/* Every registry key in registry order, grouped as nested mappings. Keys not used by vfm that were
 * not set are written as comments, so reading the output back warns only for keys the user set. */
vfm_status config_write_yaml(const Config *cfg, FILE *f);
/* The same text in a malloc'd string (*out; caller frees). */
vfm_status config_to_yaml_string(const Config *cfg, char **out);

/* Registry queries, for help text and docs. */
typedef struct {
    const char *name;     /* "model.hidden_size" */
    CfgType type;
    const char *type_name; /* "int", "float", "bool", "string", "int list", ... */
    const char *default_text; /* as written in YAML */
    char allowed[256];    /* "integer in [8, 65536]", "one of cosine, constant, linear", ... */
    const char *help;
    int unused;           /* 1: accepted but not used by vfm (warns when set) */
} CfgKeyInfo;

int config_registry_count(void);
/* Fills *info for key i (0 <= i < config_registry_count()). */
void config_registry_key(int i, CfgKeyInfo *info);
/* Registry index of a key, or -1. */
int config_registry_find(const char *key);
/* Names of the presets model.preset accepts (NULL-terminated, "" excluded). */
const char *const *config_preset_names(void);

#endif
