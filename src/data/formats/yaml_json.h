/* YAML files of datasets (Energon's split.yaml, dataset.yaml, .info.yaml, metadataset YAML) read
 * into a jansson tree the way Python's yaml.safe_load types them (YAML 1.1: `yes`/`on` are true,
 * `0755` is octal, `1e5` without a dot is a string, `~` is null), and strings written back as
 * PyYAML's yaml.dump writes them in block style, so files vfm writes match Energon's byte for byte. */
#ifndef VFM_DATA_YAML_JSON_H
#define VFM_DATA_YAML_JSON_H

#include <jansson.h>
#include <stddef.h>

#include "core/error.h"

/* Parses one YAML document. `source` names the file in errors (with the line). *out: a new
 * reference (json null for an empty document). Mapping keys become their text; aliases are
 * resolved; timestamps stay strings. Errors: VFM_ERR_FORMAT. */
vfm_status yaml_to_json(const char *text, size_t len, const char *source, json_t **out);
/* The same for a file (VFM_ERR_IO when it cannot be read). */
vfm_status yaml_load_file(const char *path, json_t **out);

/* The scalar s as yaml.dump (default flow style off, allow_unicode off) writes a string value in
 * block context: plain when PyYAML would, else single-quoted, else double-quoted with PyYAML's
 * escapes. Long lines are not folded (PyYAML folds quoted strings with spaces past column 80;
 * shard names have none), and a string with a line break is double-quoted ("a\nb"; PyYAML
 * single-quotes it with the break doubled and indented for its context). Either way the text reads
 * back as s. malloc'd; NULL when out of memory. */
char *yaml_format_string(const char *s);

#endif
