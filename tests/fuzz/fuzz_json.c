/* Fuzz target: the sample-metadata JSON readers: json_parse_part and the typed lookups
 * (src/data/formats/json_util.c) on every key of the object, then encode_read_json (src/data/loader/encode.c),
 * which reads caption, fps, class and pixel_space the way the loader does. */
#include <string.h>

#include "data/loader/encode.h"
#include "data/formats/json_util.h"
#include "fuzz.h"

FUZZ_QUIET_INITIALIZE

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    json_t *obj;
    if (json_parse_part(data, size, "fuzz.json", &obj) == VFM_OK) {
        FUZZ_CHECK(json_is_object(obj), "json_parse_part returned a non-object");
        const char *key;
        json_t *value;
        json_object_foreach(obj, key, value) {
            double d;
            int64_t i;
            const char *s;
            int b;
            json_get_number(obj, key, 0.5, "fuzz.json", &d);
            json_get_int(obj, key, -1, "fuzz.json", &i);
            if (json_get_string(obj, key, "", "fuzz.json", &s) == VFM_OK) fuzz_touch(s, strlen(s));
            json_get_bool(obj, key, 0, "fuzz.json", &b);
        }
        json_decref(obj);
    }
    SampleMeta meta;
    char reason[256];
    EncodeSkip skip = encode_read_json(data, size, 24.0f, &meta, reason, sizeof reason);
    if (skip == ENC_OK) {
        FUZZ_CHECK(memchr(meta.caption, 0, sizeof meta.caption) != NULL, "caption not terminated");
        FUZZ_CHECK(meta.fps > 0 && meta.fps < 1e6f, "fps %g", meta.fps);
        FUZZ_CHECK(meta.class_label >= -1, "class %d", meta.class_label);
        if (meta.pixel_space) fuzz_touch(meta.pixel_space, strlen(meta.pixel_space));
        free(meta.pixel_space);
    } else {
        FUZZ_CHECK(skip == ENC_SKIP_JSON, "skip %d", (int)skip);
        FUZZ_CHECK(memchr(reason, 0, sizeof reason) != NULL && reason[0], "no reason");
    }
    return 0;
}
