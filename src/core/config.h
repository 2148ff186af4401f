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

/* What `vfm train --resume` (or checkpoint.load) does when the run's value of a key differs from the
 * value saved with the checkpoint (docs/checkpoints.md "Resuming with another config"). */
typedef enum {
    CFG_RESUME_NONE = 0, /* not given: a registry bug (a test fails) */
    CFG_RESUME_REFUSE,   /* another model or objective: exit 2 naming the key and both values */
    CFG_RESUME_NOTE,     /* allowed, one info line (schedule, intervals, layout, data stream) */
    CFG_RESUME_FREE,     /* allowed silently (paths, logging, threads, keys vfm does not use) */
} CfgResumeClass;

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
/* 1 when the user gave the key its value: the command line, config_set, or a config file of their
 * own. A file vfm wrote (a run's config.yaml, checkpoint meta, `vfm config show`; it starts with
 * the writer's header line) sets every key: of its values only those that differ from the default
 * (or preset) count. Warnings that a key does not apply ask this, not cfg_is_set. */
int cfg_user_set(const Config *cfg, const char *key);

/* ---- keys a run does not use (docs/config.md "Keys a run does not use") ----
 * Every accessor above except cfg_is_set, cfg_user_set and cfg_value_text marks its key as read.
 * A run's set-up reads exactly the keys that apply to it (a key of another model variant,
 * objective or data source is not read); config_check_unread then names every key the user set
 * that the set-up never read. */
int cfg_was_read(const Config *cfg, const char *key);
/* Marks a key as dealt with without reading it (config_load does so for model.preset). */
void cfg_mark_read(const Config *cfg, const char *key);
/* When the user set key: log_warn("config: <message>") and mark the key dealt with (so the
 * generic warning does not repeat it); returns 1 when it warned. For keys that do not apply in this
 * mode and deserve a more precise word than the generic one. */
int cfg_warn_unused(const Config *cfg, const char *key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* After a run's set-up: for every key the user set that nothing read, one warning (when `warn`;
 * rank 0 speaks for a job) — or, for keys that give the model its shape, VFM_ERR_USAGE naming each
 * such key (ignoring one would build another model than the user asked for). */
vfm_status config_check_unread(const Config *cfg, int warn);
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
    CfgResumeClass resume;
    int shape;            /* 1: refused when set but not read by a run's set-up */
} CfgKeyInfo;

int config_registry_count(void);
/* Fills *info for key i (0 <= i < config_registry_count()). */
void config_registry_key(int i, CfgKeyInfo *info);
/* Registry index of a key, or -1. */
int config_registry_find(const char *key);
const char *config_resume_class_name(CfgResumeClass c); /* "refuse", "note", "free", "none" */
/* Names of the presets model.preset accepts (NULL-terminated, "" excluded). */
const char *const *config_preset_names(void);

#endif
