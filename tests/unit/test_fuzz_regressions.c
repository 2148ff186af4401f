/* Inputs that once crashed a reader under the fuzz targets (tests/fuzz, docs/fuzzing.md), kept
 * as files in tests/fixtures/fuzz/<target>_<what> (also seeds of that target's corpus, so every
 * `make test` replays them under ASan/UBSan), plus hand-made inputs of the same bug class. Each test
 * asserts the reader's error, not just the absence of a crash. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/formats/npy.h"
#include "data/formats/safetensors.h"
#include "data/formats/yaml_json.h"
#include "test.h"

static uint8_t *read_fixture(const char *name, size_t *len) {
    char rel[256];
    snprintf(rel, sizeof rel, "fuzz/%s", name);
    uint8_t *bytes = NULL;
    if (npy_read_file(test_fixture(rel), &bytes, len) != VFM_OK) return NULL;
    return bytes;
}

/* A safetensors file with this JSON header (padded to 8 bytes) and data_bytes zero bytes of data. */
static uint8_t *make_safetensors(const char *header, size_t data_bytes, size_t *len) {
    size_t h = strlen(header), padded = (h + 7) & ~(size_t)7;
    *len = 8 + padded + data_bytes;
    uint8_t *b = calloc(1, *len);
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    memcpy(b + 8, header, h);
    memset(b + 8 + h, ' ', padded - h);
    return b;
}

static void expect_safetensors_error(const uint8_t *bytes, size_t len, const char *needle) {
    SafetensorsFile *f = NULL;
    vfm_status s = safetensors_open_memory(&f, bytes, len, "fuzz.safetensors");
    CHECK_MSG(s == VFM_ERR_FORMAT, "expected VFM_ERR_FORMAT, got %s", vfm_status_name(s));
    CHECK_MSG(strstr(vfm_last_error(), needle) != NULL, "error '%s' lacks '%s'", vfm_last_error(), needle);
    safetensors_close(f);
}

/* Found by the safetensors target in its first seconds: an entry whose offsets did not fit built its
 * error message from the tensor's name after the JSON header holding it was freed. */
TEST(fuzz_safetensors_error_names_the_tensor_after_the_header_is_freed) {
    size_t len;
    uint8_t *b = read_fixture("safetensors_error_names_freed_key.safetensors", &len);
    REQUIRE(b);
    expect_safetensors_error(b, len, "tensor 'w': data offsets do not fit the file");
    free(b);
}

/* Same class, by reading: negative or non-integer shapes and offsets, offsets that wrap around, and
 * shapes whose element count overflows were accepted or computed with signed overflow. */
TEST(fuzz_safetensors_shapes_and_offsets_are_checked_without_overflow) {
    static const struct {
        const char *header, *needle;
    } cases[] = {
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[-2,-3],\"data_offsets\":[0,24]}}", "shape entry 0 is not a non-negative"},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,8]}}", "shape entry 0 is not a non-negative"},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-8,-4]}}", "data offsets are not non-negative"},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,\"4\"]}}", "data offsets are not non-negative"},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,0]}}", "shape overflows"},
        {"{\"t\":{\"dtype\":\"F64\",\"shape\":[2305843009213693952],\"data_offsets\":[0,0]}}", "data offsets do not fit"},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[9223372036854775800,9223372036854775804]}}",
         "data offsets do not fit"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t len;
        uint8_t *b = make_safetensors(cases[i].header, 24, &len);
        expect_safetensors_error(b, len, cases[i].needle);
        free(b);
    }
    /* the good twin of the cases above still reads */
    size_t len;
    uint8_t *b = make_safetensors("{\"t\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}}", 24, &len);
    SafetensorsFile *f;
    REQUIRE_OK(safetensors_open_memory(&f, b, len, "good"));
    float out[6] = {1};
    CHECK_OK(safetensors_read_f32(f, 0, out, 6));
    CHECK(out[0] == 0.0f && out[5] == 0.0f);
    safetensors_close(f);
    free(b);
}

/* Writes s with yaml_format_string as a value at the top level and as a nested list item, and
 * checks both read back as s. */
static void check_yaml_string_round_trip(const char *s) {
    char *v = yaml_format_string(s);
    REQUIRE(v);
    char doc[2][1024];
    snprintf(doc[0], sizeof doc[0], "k: %s\n", v);
    snprintf(doc[1], sizeof doc[1], "split_parts:\n  train:\n  - %s\n", v);
    for (int i = 0; i < 2; i++) {
        json_t *j;
        vfm_status st = yaml_to_json(doc[i], strlen(doc[i]), "written.yaml", &j);
        CHECK_MSG(st == VFM_OK, "[%s] written as [%s] does not read back: %s", s, v, vfm_last_error());
        if (st != VFM_OK) continue;
        const json_t *k = i == 0 ? json_object_get(j, "k")
                                 : json_array_get(json_object_get(json_object_get(j, "split_parts"), "train"), 0);
        CHECK_MSG(json_is_string(k) && strcmp(json_string_value(k), s) == 0, "[%s] written as [%s] reads back as [%s]",
                  s, v, json_is_string(k) ? json_string_value(k) : "(not a string)");
        json_decref(j);
    }
    free(v);
}

/* Round-trips every key and string value of a tree; returns how many hold a line break. */
static int check_yaml_tree(const json_t *j) {
    int multi_line = 0;
    if (json_is_string(j)) {
        check_yaml_string_round_trip(json_string_value(j));
        multi_line += strchr(json_string_value(j), '\n') != NULL;
    } else if (json_is_array(j)) {
        for (size_t i = 0; i < json_array_size(j); i++) multi_line += check_yaml_tree(json_array_get(j, i));
    } else if (json_is_object(j)) {
        const char *key;
        json_t *value;
        json_object_foreach((json_t *)j, key, value) {
            check_yaml_string_round_trip(key);
            multi_line += strchr(key, '\n') != NULL;
            multi_line += check_yaml_tree(value);
        }
    }
    return multi_line;
}

/* Found by the yaml target (5-minute run): yaml_format_string single-quoted a string with a line
 * break, which YAML folds into a space on reading ('a<newline>b' reads as "a b"). The crashing input
 * is a config whose comment line, cut by the fuzzer, became a multi-line key. */
TEST(fuzz_yaml_strings_with_line_breaks_read_back_unchanged) {
    size_t len;
    uint8_t *b = read_fixture("yaml_line_break_in_single_quotes.yaml", &len);
    REQUIRE(b);
    json_t *j;
    REQUIRE_OK(yaml_to_json((const char *)b, strnlen((const char *)b, len), "fixture", &j));
    int multi_line = check_yaml_tree(j);
    CHECK_MSG(multi_line >= 1, "%d multi-line strings in the fixture", multi_line);
    json_decref(j);
    free(b);
    static const char *const cases[] = {"a\nb", "a\n", "\nb", "x\n\ny", " a\nb", "a \nb", "it's\nhere", "a: b\n- c"};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_yaml_string_round_trip(cases[i]);
    char *v = yaml_format_string("a\nb");
    CHECK(v && strcmp(v, "\"a\\nb\"") == 0);
    free(v);
}
