/* Fuzz target: the YAML readers. Input: YAML text, optionally followed by NUL-separated
 * "key=value" overrides.
 *   - the config reader (src/core/config_yaml.c over libyaml, then the merge and the registry checks
 *     of src/core/config.c), the overrides set with config_set; a config that loads must write YAML
 *     that reads back to the same values (config.h's contract);
 *   - the dataset YAML reader (src/data/formats/yaml_json.c: split.yaml, dataset.yaml, metadatasets); every
 *     string it yields, written back with yaml_format_string, must read back to the same string. */
#include <string.h>

#include "core/config.h"
#include "data/formats/yaml_json.h"
#include "fuzz.h"

FUZZ_QUIET_INITIALIZE

/* Writes s as a block-style value and reads it back. */
static void check_string_round_trip(const char *s) {
    char *v = yaml_format_string(s);
    FUZZ_CHECK(v != NULL, "out of memory");
    size_t n = strlen(v) + 8;
    char *doc = malloc(n);
    FUZZ_CHECK(doc != NULL, "out of memory");
    snprintf(doc, n, "k: %s\n", v);
    json_t *back;
    vfm_status st = yaml_to_json(doc, strlen(doc), "written.yaml", &back);
    FUZZ_CHECK(st == VFM_OK, "yaml_format_string wrote [%s], which does not read back: %s", v, vfm_last_error());
    const json_t *k = json_object_get(back, "k");
    FUZZ_CHECK(json_is_string(k) && strcmp(json_string_value(k), s) == 0,
               "string [%s] written as [%s] reads back as another value", s, v);
    json_decref(back);
    free(doc);
    free(v);
}

static void walk(const json_t *j, int depth, int *budget) {
    if (depth > 100 || --*budget < 0) return;
    if (json_is_string(j)) {
        if (strlen(json_string_value(j)) == json_string_length(j)) check_string_round_trip(json_string_value(j));
    } else if (json_is_array(j)) {
        for (size_t i = 0; i < json_array_size(j); i++) walk(json_array_get(j, i), depth + 1, budget);
    } else if (json_is_object(j)) {
        const char *key;
        json_t *value;
        json_object_foreach((json_t *)j, key, value) {
            check_string_round_trip(key);
            walk(value, depth + 1, budget);
        }
    }
}

static void dataset_yaml(const char *text) {
    json_t *j;
    if (yaml_to_json(text, strlen(text), "fuzz.yaml", &j) != VFM_OK) return;
    int budget = 256;
    walk(j, 0, &budget);
    json_decref(j);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    FUZZ_CHECK(text != NULL, "out of memory");
    memcpy(text, data, size);
    text[size] = 0;
    dataset_yaml(text);
    Config *cfg;
    if (config_from_yaml_string(&cfg, text, "fuzz.yaml") != VFM_OK) {
        free(text);
        return 0;
    }
    for (size_t at = strlen(text) + 1; at < size; at += strlen(text + at) + 1) {
        char *eq = strchr(text + at, '=');
        if (!eq) continue;
        *eq = 0;
        config_set(cfg, text + at, eq + 1);
        *eq = '=';
    }
    char *yaml;
    FUZZ_CHECK(config_to_yaml_string(cfg, &yaml) == VFM_OK, "config_to_yaml_string: %s", vfm_last_error());
    Config *back;
    vfm_status s = config_from_yaml_string(&back, yaml, "written.yaml");
    FUZZ_CHECK(s == VFM_OK, "the written YAML does not read back: %s\n%s", vfm_last_error(), yaml);
    char diff[256] = "";
    FUZZ_CHECK(config_equal(cfg, back, diff, sizeof diff), "key '%s' differs after writing and reading back", diff);
    config_free(back);
    free(yaml);
    config_free(cfg);
    free(text);
    return 0;
}
