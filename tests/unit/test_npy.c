/* .npy: every dtype, byte order, layout and header version numpy (and ml_dtypes) wrote
 * (reference/make_data_fixtures.py) read to the values numpy's astype(float32) gives; damaged files
 * give named errors; the writer reproduces np.save byte for byte. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "data/formats/npy.h"
#include "test.h"

static uint8_t *slurp_fixture(const char *name, size_t *len) {
    char rel[256];
    snprintf(rel, sizeof rel, "data/npy/%s", name);
    uint8_t *bytes;
    if (npy_read_file(test_fixture(rel), &bytes, len) != VFM_OK) return NULL;
    return bytes;
}

TEST(npy_fixtures_match_numpy_values) {
    json_error_t err;
    json_t *expected = json_load_file(test_fixture("data/npy/expected.json"), 0, &err);
    REQUIRE(expected);
    CHECK(json_object_size(expected) == 28);
    const char *name;
    json_t *entry;
    json_object_foreach(expected, name, entry) {
        char rel[256];
        snprintf(rel, sizeof rel, "data/npy/%s", name);
        Tensor t;
        vfm_status s = npy_load_f32_file(test_fixture(rel), &t);
        CHECK_MSG(s == VFM_OK, "%s: %s", name, vfm_last_error());
        if (s != VFM_OK) continue;
        json_t *shape = json_object_get(entry, "shape"), *values = json_object_get(entry, "values");
        int same_shape = t.ndim == (int)json_array_size(shape);
        for (int d = 0; same_shape && d < t.ndim; d++) same_shape = t.shape[d] == json_integer_value(json_array_get(shape, (size_t)d));
        CHECK_MSG(same_shape, "%s: shape differs (ndim %d)", name, t.ndim);
        int64_t n = tensor_numel(&t);
        CHECK_MSG(n == (int64_t)json_array_size(values), "%s: %lld values", name, (long long)n);
        if (n != (int64_t)json_array_size(values)) {
            tensor_free(&t);
            continue;
        }
        float *ref = malloc((size_t)(n ? n : 1) * sizeof *ref);
        for (int64_t k = 0; k < n; k++) ref[k] = (float)json_number_value(json_array_get(values, (size_t)k));
        /* exact: both sides round each element once to the nearest float32 */
        CHECK_CLOSE_F32(name, t.data, ref, n, 0.0, 0.0);
        free(ref);
        tensor_free(&t);
    }
    json_decref(expected);
}

TEST(npy_header_fields) {
    static const struct {
        const char *file;
        NpyDType dtype;
        int big_endian, fortran, version, ndim;
    } cases[] = {
        {"f4.npy", NPY_F4, 0, 0, 1, 2},          {"f4_be.npy", NPY_F4, 1, 0, 1, 2},
        {"f8_be.npy", NPY_F8, 1, 0, 1, 2},       {"f2_be.npy", NPY_F2, 1, 0, 1, 2},
        {"bf16.npy", NPY_BF16, 0, 0, 1, 1},      {"b1.npy", NPY_B1, 0, 0, 1, 1},
        {"f4_fortran.npy", NPY_F4, 0, 1, 1, 2},  {"i2_fortran_3d.npy", NPY_I2, 0, 1, 1, 3},
        {"f4_v2.npy", NPY_F4, 0, 0, 2, 1},       {"f4_v3.npy", NPY_F4, 0, 0, 3, 1},
        {"f8_scalar.npy", NPY_F8, 0, 0, 1, 0},   {"u8_be.npy", NPY_U8, 1, 0, 1, 1},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        size_t len;
        uint8_t *bytes = slurp_fixture(cases[k].file, &len);
        REQUIRE(bytes);
        NpyArray a;
        CHECK_OK(npy_parse(bytes, len, cases[k].file, &a));
        CHECK_MSG(a.dtype == cases[k].dtype && a.big_endian == cases[k].big_endian && a.fortran_order == cases[k].fortran &&
                      a.version_major == cases[k].version && a.ndim == cases[k].ndim,
                  "%s: dtype %s be %d fortran %d version %d ndim %d", cases[k].file, npy_dtype_name(a.dtype), a.big_endian,
                  a.fortran_order, a.version_major, a.ndim);
        CHECK(((uintptr_t)(a.data - bytes)) % 64 == 0); /* numpy aligns the data to 64 bytes */
        free(bytes);
    }
}

/* A hand-made .npy: version 1.0, the given header text, then data. */
static size_t make_npy(uint8_t *out, const char *header, const void *data, size_t n) {
    size_t h = strlen(header);
    memcpy(out, "\x93NUMPY\x01\x00", 8);
    out[8] = (uint8_t)(h & 0xff);
    out[9] = (uint8_t)(h >> 8);
    memcpy(out + 10, header, h);
    memcpy(out + 10 + h, data, n);
    return 10 + h + n;
}

TEST(npy_half_and_bfloat16_special_values) {
    static const uint16_t half[8] = {0x7c00, 0xfc00, 0x7e00, 0x0001, 0x03ff, 0x8000, 0x3c00, 0x7bff};
    uint8_t buf[256];
    size_t n = make_npy(buf, "{'descr': '<f2', 'fortran_order': False, 'shape': (8,), }\n", half, sizeof half);
    Tensor t;
    REQUIRE_OK(npy_load_f32(buf, n, "half", &t));
    float *x = t.data;
    CHECK(isinf(x[0]) && x[0] > 0 && isinf(x[1]) && x[1] < 0 && isnan(x[2]));
    CHECK(x[3] == ldexpf(1.0f, -24) && x[4] == ldexpf(1023.0f, -24));
    CHECK(x[5] == 0.0f && signbit(x[5]) && x[6] == 1.0f && x[7] == 65504.0f);
    tensor_free(&t);

    static const uint16_t bf[4] = {0x3f80, 0xc020, 0x7f80, 0x0001};
    n = make_npy(buf, "{'descr': 'bfloat16', 'fortran_order': False, 'shape': (2, 2), }\n", bf, sizeof bf);
    REQUIRE_OK(npy_load_f32(buf, n, "bf16", &t));
    x = t.data;
    CHECK(t.ndim == 2 && x[0] == 1.0f && x[1] == -2.5f && isinf(x[2]) && x[3] == ldexpf(1.0f, -133));
    tensor_free(&t);
}

TEST(npy_hand_written_headers_parse) {
    /* Python 2 longs, double quotes, keys in another order, no trailing comma, '=' byte order */
    uint8_t buf[256];
    const int32_t v[6] = {1, -2, 3, -4, 5, -6};
    size_t n = make_npy(buf, "{\"shape\": (2L, 3L), \"fortran_order\": False, \"descr\": \"=i4\"}  \n", v, sizeof v);
    Tensor t;
    REQUIRE_OK(npy_load_f32(buf, n, "hand", &t));
    CHECK(t.ndim == 2 && t.shape[0] == 2 && t.shape[1] == 3);
    const float ref[6] = {1, -2, 3, -4, 5, -6};
    CHECK_CLOSE_F32("i4", t.data, ref, 6, 0.0, 0.0);
    tensor_free(&t);
}

static void expect_error(const void *bytes, size_t len, vfm_status code, const char *needle) {
    NpyArray a;
    vfm_status s = npy_parse(bytes, len, "thing.npy", &a);
    CHECK_MSG(s == code, "expected %s for '%s', got %s: %s", vfm_status_name(code), needle, vfm_status_name(s),
              vfm_last_error());
    CHECK_MSG(strstr(vfm_last_error(), needle) && strstr(vfm_last_error(), "thing.npy"), "message: %s",
              vfm_last_error());
}

/* Overwrites the first occurrence of `from` with `to` (same length). */
static void replace_once(uint8_t *bytes, size_t len, const char *from, const char *to) {
    uint8_t *at = memmem(bytes, len, from, strlen(from));
    if (at) memcpy(at, to, strlen(to));
    else test_fail(__FILE__, __LINE__, "'%s' not found", from);
}

TEST(npy_damaged_files_give_named_errors) {
    size_t len;
    uint8_t *good = slurp_fixture("f4.npy", &len);
    REQUIRE(good && len == 152);
    uint8_t *bad = malloc(len);
    memcpy(bad, good, len);
    bad[1] = 'X';
    expect_error(bad, len, VFM_ERR_FORMAT, "bad magic");
    expect_error(good, len - 1, VFM_ERR_FORMAT, "truncated .npy data");
    expect_error(good, 100, VFM_ERR_FORMAT, "truncated .npy: header");
    expect_error(good, 5, VFM_ERR_FORMAT, "bad magic");
    memcpy(bad, good, len);
    bad[6] = 4;
    expect_error(bad, len, VFM_ERR_UNSUPPORTED, "version 4.0");
    memcpy(bad, good, len);
    bad[10] = '[';
    expect_error(bad, len, VFM_ERR_FORMAT, "not a dict");
    memcpy(bad, good, len);
    replace_once(bad, len, "'<f4'", "'|V2'");
    expect_error(bad, len, VFM_ERR_UNSUPPORTED, "'|V2'");
    memcpy(bad, good, len);
    replace_once(bad, len, "False", "Maybe");
    expect_error(bad, len, VFM_ERR_FORMAT, "fortran_order");
    memcpy(bad, good, len);
    replace_once(bad, len, "'shape'", "'shapf'");
    expect_error(bad, len, VFM_ERR_FORMAT, "unexpected key 'shapf'");

    uint8_t buf[256];
    const uint8_t data[8] = {0};
    len = make_npy(buf, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }\n", data, 8);
    expect_error(buf, len, VFM_ERR_UNSUPPORTED, "structured");
    len = make_npy(buf, "{'descr': '<f4', 'fortran_order': False}\n", data, 8);
    expect_error(buf, len, VFM_ERR_FORMAT, "lacks 'shape'");
    len = make_npy(buf, "{'descr': '|O', 'fortran_order': False, 'shape': (1,), }\n", data, 8);
    expect_error(buf, len, VFM_ERR_UNSUPPORTED, "'|O'");
    len = make_npy(buf, "{'descr': '|f4', 'fortran_order': False, 'shape': (1,), }\n", data, 8);
    expect_error(buf, len, VFM_ERR_UNSUPPORTED, "'|f4'");
    len = make_npy(buf, "{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, 4), }\n", data, 8);
    expect_error(buf, len, VFM_ERR_FORMAT, "overflows");

    size_t c8_len;
    uint8_t *c8 = slurp_fixture("c8.npy", &c8_len);
    REQUIRE(c8);
    expect_error(c8, c8_len, VFM_ERR_UNSUPPORTED, "'<c8'");

    /* every prefix of a good file is refused without reading past it */
    for (size_t cut = 0; cut < 152; cut++) {
        uint8_t *prefix = malloc(cut ? cut : 1);
        memcpy(prefix, good, cut);
        NpyArray a;
        CHECK_MSG(npy_parse(prefix, cut, "prefix", &a) != VFM_OK, "prefix of %zu bytes accepted", cut);
        free(prefix);
    }
    free(c8);
    free(bad);
    free(good);
}

TEST(npy_writer_matches_np_save) {
    static const char *files[] = {"f4_write.npy", "f4_write_1d.npy", "f4_write_0d.npy", "i4_write.npy", "f4_empty.npy"};
    for (size_t k = 0; k < sizeof files / sizeof files[0]; k++) {
        size_t len;
        uint8_t *ref = slurp_fixture(files[k], &len);
        REQUIRE(ref);
        NpyArray a;
        REQUIRE_OK(npy_parse(ref, len, files[k], &a));
        uint8_t *ours;
        size_t n;
        REQUIRE_OK(npy_encode(a.dtype, a.data, a.ndim, a.shape, &ours, &n));
        CHECK_MSG(n == len && !memcmp(ours, ref, len), "%s: %zu bytes vs numpy's %zu", files[k], n, len);
        free(ours);
        free(ref);
    }
    uint8_t *ours;
    size_t n;
    const int64_t shape[1] = {2};
    const double d[2] = {1, 2};
    CHECK(npy_encode(NPY_F8, d, 1, shape, &ours, &n) == VFM_ERR_UNSUPPORTED);
}

TEST(npy_write_file_round_trip) {
    float x[2 * 3 * 5];
    test_fill_uniform_f32(x, 30, 77, -3.0f, 3.0f);
    Tensor t = TF32(x, 2, 3, 5);
    char path[1100];
    snprintf(path, sizeof path, "%s/x.npy", test_tmpdir());
    REQUIRE_OK(npy_write_file(path, &t));
    Tensor back;
    REQUIRE_OK(npy_load_f32_file(path, &back));
    CHECK(back.ndim == 3 && back.shape[0] == 2 && back.shape[1] == 3 && back.shape[2] == 5);
    CHECK_CLOSE_F32("round trip", back.data, x, 30, 0.0, 0.0);
    tensor_free(&back);

    int32_t iv[4] = {-7, 0, 7, 1 << 24};
    Tensor ti = TI32(iv, 4);
    REQUIRE_OK(npy_write_file(path, &ti));
    size_t len;
    uint8_t *bytes;
    REQUIRE_OK(npy_read_file(path, &bytes, &len));
    NpyArray a;
    REQUIRE_OK(npy_parse(bytes, len, path, &a));
    CHECK(a.dtype == NPY_I4 && a.ndim == 1 && a.shape[0] == 4 && !memcmp(a.data, iv, sizeof iv));
    free(bytes);
    Tensor t64 = TF64(NULL, 2);
    CHECK(npy_write_file(path, &t64) == VFM_ERR_UNSUPPORTED);
    snprintf(path, sizeof path, "%s/none/x.npy", test_tmpdir());
    CHECK(npy_write_file(path, &t) == VFM_ERR_IO);
    CHECK(npy_load_f32_file(path, &back) == VFM_ERR_IO && strstr(vfm_last_error(), "none/x.npy"));
}
