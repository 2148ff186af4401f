/* Sample-metadata JSON helpers: parsing a part's bytes, typed lookups, defaults and type errors. */
#include <string.h>

#include "data/formats/json_util.h"
#include "test.h"

TEST(json_part_lookups_and_defaults) {
    /* a part's bytes are not NUL-terminated: parse a slice followed by garbage */
    const char text[] = "{\"image_height\": 1, \"image_width\": 64, \"fps\": 24.0, \"caption\": \"a cat\","
                        " \"class\": 3, \"ratio\": 0.75, \"flag\": true, \"none\": null}GARBAGE";
    json_t *obj;
    REQUIRE_OK(json_parse_part(text, strlen(text) - 7, "s.tar: key 000001: json", &obj));
    int64_t i;
    double d;
    const char *str;
    int b;
    CHECK_OK(json_get_int(obj, "image_width", -1, "ctx", &i));
    CHECK(i == 64);
    CHECK_OK(json_get_int(obj, "fps", -1, "ctx", &i)); /* a real with an integral value */
    CHECK(i == 24);
    CHECK_OK(json_get_int(obj, "missing", 30, "ctx", &i));
    CHECK(i == 30);
    CHECK_OK(json_get_int(obj, "none", 30, "ctx", &i)); /* null reads as missing */
    CHECK(i == 30);
    CHECK_OK(json_get_number(obj, "ratio", 0, "ctx", &d));
    CHECK(d == 0.75);
    CHECK_OK(json_get_number(obj, "class", 0, "ctx", &d));
    CHECK(d == 3.0);
    CHECK_OK(json_get_number(obj, "missing", 30.5, "ctx", &d));
    CHECK(d == 30.5);
    CHECK_OK(json_get_string(obj, "caption", NULL, "ctx", &str));
    CHECK(str && !strcmp(str, "a cat"));
    CHECK_OK(json_get_string(obj, "missing", "dflt", "ctx", &str));
    CHECK(!strcmp(str, "dflt"));
    CHECK_OK(json_get_bool(obj, "flag", 0, "ctx", &b));
    CHECK(b == 1);
    CHECK_OK(json_get_bool(obj, "missing", 0, "ctx", &b));
    CHECK(b == 0);
    json_decref(obj);
}

TEST(json_part_type_errors_name_key_and_value) {
    const char text[] = "{\"fps\": \"thirty\", \"ratio\": 0.5, \"caption\": [1, 2]}";
    json_t *obj;
    REQUIRE_OK(json_parse_part(text, strlen(text), "ctx", &obj));
    double d;
    int64_t i;
    const char *str;
    int b;
    CHECK(json_get_number(obj, "fps", 30, "s.tar: key 000007: json", &d) == VFM_ERR_FORMAT);
    CHECK_MSG(strstr(vfm_last_error(), "s.tar: key 000007: json") && strstr(vfm_last_error(), "'fps'") &&
                  strstr(vfm_last_error(), "thirty") && strstr(vfm_last_error(), "a number"),
              "message: %s", vfm_last_error());
    CHECK(json_get_int(obj, "ratio", 0, "ctx", &i) == VFM_ERR_FORMAT && strstr(vfm_last_error(), "an integer"));
    CHECK(json_get_string(obj, "caption", "", "ctx", &str) == VFM_ERR_FORMAT && strstr(vfm_last_error(), "[1,2]"));
    CHECK(json_get_bool(obj, "ratio", 0, "ctx", &b) == VFM_ERR_FORMAT);
    json_decref(obj);
}

TEST(json_part_parse_errors) {
    json_t *obj = (json_t *)1;
    const char broken[] = "{\"a\": 1,\n \"b\": }";
    CHECK(json_parse_part(broken, strlen(broken), "s.tar: key 000002: json", &obj) == VFM_ERR_FORMAT);
    CHECK(obj == NULL);
    CHECK_MSG(strstr(vfm_last_error(), "s.tar: key 000002: json") && strstr(vfm_last_error(), "line 2"), "message: %s",
              vfm_last_error());
    CHECK(json_parse_part("[1, 2]", 6, "ctx", &obj) == VFM_ERR_FORMAT && strstr(vfm_last_error(), "an array"));
    CHECK(json_parse_part("", 0, "ctx", &obj) == VFM_ERR_FORMAT);
}
