/* Fuzz target: the YAML config reader (src/core/config_yaml.c over libyaml, then the merge and the
 * registry checks of src/core/config.c). Input: YAML text, optionally followed by NUL-separated
 * "key=value" overrides set with config_set. A config that loads must write YAML that reads back to
 * the same values (config.h's contract): a difference aborts. */
#include <string.h>

#include "core/config.h"
#include "fuzz.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    fuzz_quiet();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    FUZZ_CHECK(text != NULL, "out of memory");
    memcpy(text, data, size);
    text[size] = 0;
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
