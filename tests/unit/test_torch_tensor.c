/* torch.save / pickle.dumps bytes (reference/make_torch_fixtures.py: torch 2.x and Debian's torch 1.13,
 * every dtype, views, protocols 2-5, legacy streams, Zip64, state dicts, DFM shard parts) decoded to
 * exactly the bytes and float32 values Python read back; malicious pickles refused with the global
 * named and nothing run; truncated and corrupted bytes fail cleanly; the zip reader and the
 * unpickler's machine on hand-made input. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "core/fileutil.h"
#include "data/formats/pickle.h"
#include "data/formats/tar.h"
#include "data/formats/torch_tensor.h"
#include "data/formats/zip.h"
#include "test.h"

/* The entries of expected.json of one kind ("tensor", "state_dict", "part", "malicious"): a new array. */
static json_t *expected(const char *kind) {
    json_error_t err;
    json_t *doc = json_load_file(test_fixture("torch/expected.json"), 0, &err), *out = json_array(), *e;
    if (!doc) test_fail(__FILE__, __LINE__, "expected.json: %s (line %d)", err.text, err.line);
    size_t i;
    json_array_foreach(json_object_get(doc, "entries"), i, e)
        if (strcmp(json_string_value(json_object_get(e, "kind")), kind) == 0) json_array_append(out, e);
    json_decref(doc);
    return out;
}

static uint8_t *slurp(const char *rel, size_t *len) {
    char *data = NULL;
    char path[1400];
    snprintf(path, sizeof path, "torch/%s", rel);
    if (read_file_all(test_fixture(path), &data, len) != VFM_OK) {
        test_fail(__FILE__, __LINE__, "%s: %s", rel, vfm_last_error());
        return NULL;
    }
    return (uint8_t *)data;
}

static int hex_value(char c) { return c <= '9' ? c - '0' : c - 'a' + 10; }

/* 1 when t is what Python read back (e: dtype, shape, hex bytes, float32 values when listed). */
static int tensor_matches(const char *what, const TorchTensor *t, const json_t *e) {
    int ok = 1;
    const char *dtype = json_string_value(json_object_get(e, "dtype"));
    if (!dtype || strcmp(dtype, torch_dtype_name(t->dtype)) != 0) {
        test_fail(__FILE__, __LINE__, "%s: dtype %s, Python read %s", what, torch_dtype_name(t->dtype), dtype ? dtype : "?");
        return 0;
    }
    const json_t *shape = json_object_get(e, "shape");
    ok = t->ndim == (int)json_array_size(shape);
    for (int d = 0; ok && d < t->ndim; d++) ok = t->shape[d] == json_integer_value(json_array_get(shape, (size_t)d));
    if (!ok) {
        test_fail(__FILE__, __LINE__, "%s: shape differs (ndim %d, Python %zu)", what, t->ndim, json_array_size(shape));
        return 0;
    }
    const char *hex = json_string_value(json_object_get(e, "hex"));
    size_t nbytes = (size_t)t->numel * (size_t)torch_dtype_size(t->dtype);
    if (!hex || strlen(hex) != 2 * nbytes) {
        test_fail(__FILE__, __LINE__, "%s: %zu bytes, Python %zu", what, nbytes, hex ? strlen(hex) / 2 : 0);
        return 0;
    }
    const uint8_t *b = t->data;
    for (size_t i = 0; i < nbytes && ok; i++) {
        ok = b[i] == (uint8_t)(hex_value(hex[2 * i]) << 4 | hex_value(hex[2 * i + 1]));
        if (!ok) test_fail(__FILE__, __LINE__, "%s: byte %zu differs from Python's", what, i);
    }
    const json_t *values = json_object_get(e, "values");
    if (ok && values) {
        float *f = malloc((size_t)(t->numel + 1) * sizeof *f);
        torch_tensor_to_f32(t, f);
        ok = (int64_t)json_array_size(values) == t->numel;
        for (int64_t k = 0; ok && k < t->numel; k++) {
            float want = (float)json_number_value(json_array_get(values, (size_t)k));
            ok = memcmp(&want, &f[k], sizeof want) == 0;
            if (!ok) test_fail(__FILE__, __LINE__, "%s: float32 value %lld is %.9g, Python %.9g", what, (long long)k, f[k], want);
        }
        free(f);
    }
    return ok;
}

TEST(torch_tensor_files_match_python) {
    json_t *doc = expected("tensor"), *e;
    size_t i;
    int n = 0, t1 = 0, pickles = 0, views = 0;
    json_array_foreach(doc, i, e) {
        const char *file = json_string_value(json_object_get(e, "file"));
        size_t len;
        uint8_t *bytes = slurp(file, &len);
        if (!bytes) continue;
        TorchTensor t;
        vfm_status s = torch_tensor_decode(bytes, len, file, &t);
        CHECK_MSG(s == VFM_OK, "%s: %s", file, vfm_last_error());
        if (s == VFM_OK && tensor_matches(file, &t, e)) {
            n++;
            t1 += strstr(file, "/t1_") != NULL;
            pickles += strstr(file, ".pickle") != NULL;
            views += strstr(file, "view_") != NULL;
        }
        torch_tensor_free(&t);
        free(bytes);
    }
    /* every file of the fixture set matched: both torch versions, pickles and views among them */
    CHECK_MSG(n == 67 && t1 >= 15 && pickles >= 14 && views >= 20, "%d tensors matched (%d torch 1.13, %d pickles, %d views)",
              n, t1, pickles, views);
    json_decref(doc);
}

TEST(torch_state_dicts_match_python) {
    json_t *doc = expected("state_dict"), *e;
    size_t i;
    int files = 0;
    json_array_foreach(doc, i, e) {
        const char *file = json_string_value(json_object_get(e, "file"));
        char rel[600];
        snprintf(rel, sizeof rel, "torch/%s", file);
        TorchStateDict sd;
        vfm_status s = torch_load_state_dict(test_fixture(rel), &sd);
        CHECK_MSG(s == VFM_OK, "%s: %s", file, vfm_last_error());
        if (s != VFM_OK) continue;
        const json_t *want = json_object_get(e, "tensors");
        CHECK_MSG(sd.n == (int64_t)json_array_size(want), "%s: %lld tensors, Python %zu", file, (long long)sd.n,
                  json_array_size(want));
        CHECK_MSG(sd.n_skipped == json_integer_value(json_object_get(e, "skipped")), "%s: %lld skipped", file,
                  (long long)sd.n_skipped);
        int all = sd.n == (int64_t)json_array_size(want);
        for (int64_t k = 0; all && k < sd.n; k++) {
            const json_t *w = json_array_get(want, (size_t)k);
            char what[700];
            snprintf(what, sizeof what, "%s: %s", file, sd.names[k]);
            const char *name = json_string_value(json_object_get(w, "name"));
            all = strcmp(sd.names[k], name) == 0; /* same names in the same order */
            CHECK_MSG(all, "%s: tensor %lld is '%s', Python '%s'", file, (long long)k, sd.names[k], name);
            all = all && tensor_matches(what, &sd.tensors[k], w);
            CHECK(torch_state_dict_find(&sd, name) == k);
        }
        files += all;
        torch_state_dict_free(&sd);
    }
    CHECK_MSG(files == 6, "%d state dicts matched", files);
    json_decref(doc);
}

TEST(torch_dfm_shard_parts_match_python) {
    json_t *doc = expected("part"), *e;
    size_t i;
    int n = 0;
    json_array_foreach(doc, i, e) {
        const char *shard = json_string_value(json_object_get(e, "shard")), *key = json_string_value(json_object_get(e, "key")),
                   *part = json_string_value(json_object_get(e, "part"));
        /* a copy: opening a shard may write its .tar.idx */
        char rel[600], path[1400];
        snprintf(rel, sizeof rel, "torch/%s", shard);
        snprintf(path, sizeof path, "%s/%s", test_tmpdir(), strchr(shard, '/') + 1);
        char *bytes;
        size_t len;
        REQUIRE_OK(read_file_all(test_fixture(rel), &bytes, &len));
        REQUIRE_OK(write_file_atomic(path, bytes, len));
        free(bytes);
        TarShard *sh;
        REQUIRE_OK(tar_shard_open(&sh, path));
        const TarPart *p = NULL;
        TarSample ts = {0};
        for (int64_t k = 0; !p && k < tar_shard_num_samples(sh); k++) {
            REQUIRE_OK(tar_shard_read_sample(sh, k, &ts));
            if (strcmp(ts.key, key) == 0) p = tar_sample_part(&ts, part);
            if (!p) tar_sample_free(&ts);
        }
        CHECK_MSG(p != NULL, "%s: no sample %s with part %s", shard, key, part);
        TorchTensor t;
        char what[700];
        snprintf(what, sizeof what, "%s:%s.%s", shard, key, part);
        if (p && torch_tensor_decode(p->data, p->size, what, &t) == VFM_OK) {
            n += tensor_matches(what, &t, e);
            torch_tensor_free(&t);
        } else if (p) {
            test_fail(__FILE__, __LINE__, "%s: %s", what, vfm_last_error());
        }
        if (p) tar_sample_free(&ts);
        tar_shard_close(sh);
    }
    CHECK_MSG(n == 22, "%d DFM parts matched (8 samples of torch 2, 3 of torch 1.13, latent and text each)", n);
    json_decref(doc);
}

TEST(torch_malicious_pickles_are_refused_and_nothing_runs) {
    json_t *doc = expected("malicious"), *e;
    size_t i;
    int n = 0;
    json_array_foreach(doc, i, e) {
        const char *file = json_string_value(json_object_get(e, "file")), *global = json_string_value(json_object_get(e, "global")),
                   *marker = json_string_value(json_object_get(e, "marker"));
        unlink(marker);
        size_t len;
        uint8_t *bytes = slurp(file, &len);
        REQUIRE(bytes);
        char want[256];
        snprintf(want, sizeof want, "global '%s' is not allowed", global);
        TorchTensor t;
        vfm_status s = torch_tensor_decode(bytes, len, file, &t);
        CHECK_MSG(s == VFM_ERR_REFUSED && strstr(vfm_last_error(), want) && strstr(vfm_last_error(), file), "%s: %s", file,
                  vfm_last_error());
        TorchStateDict sd;
        s = torch_load_state_dict_memory(bytes, len, file, &sd);
        CHECK_MSG(s == VFM_ERR_REFUSED && strstr(vfm_last_error(), want), "%s as a state dict: %s", file, vfm_last_error());
        usleep(100 * 1000); /* a process it could have started would have had time to run */
        CHECK_MSG(!path_exists(marker), "%s: %s appeared: the pickle ran", file, marker);
        free(bytes);
        n++;
    }
    CHECK_MSG(n == 6, "%d malicious files", n);
    json_decref(doc);
}

/* Every prefix and every one-byte corruption of a file decodes or fails with a format error. */
static void damage_file(const char *rel, int *failed_prefixes, int *flips_ok) {
    size_t len;
    uint8_t *bytes = slurp(rel, &len);
    if (!bytes) return;
    uint8_t *copy = malloc(len + 1);
    for (size_t cut = 0; cut < len; cut++) {
        memcpy(copy, bytes, cut);
        TorchTensor t;
        vfm_status s = torch_tensor_decode(copy, cut, rel, &t);
        if (s == VFM_OK) torch_tensor_free(&t);
        else (*failed_prefixes)++;
        CHECK_MSG(s == VFM_OK || s == VFM_ERR_FORMAT || s == VFM_ERR_UNSUPPORTED || s == VFM_ERR_REFUSED, "%s cut at %zu: %s", rel, cut, vfm_last_error());
    }
    for (size_t at = 0; at < len; at++) {
        memcpy(copy, bytes, len);
        copy[at] ^= (uint8_t)(0x5a + at);
        TorchTensor t;
        vfm_status s = torch_tensor_decode(copy, len, rel, &t);
        if (s == VFM_OK) {
            (*flips_ok)++;
            torch_tensor_free(&t);
        }
        CHECK_MSG(s == VFM_OK || s == VFM_ERR_FORMAT || s == VFM_ERR_UNSUPPORTED || s == VFM_ERR_REFUSED, "%s flip at %zu: %s", rel, at, vfm_last_error());
    }
    free(copy);
    free(bytes);
}

TEST(torch_truncated_and_corrupted_bytes_fail_cleanly) {
    static const char *const files[] = {"tensors/view_step_bfloat16.pth", "tensors/legacy_bfloat16.pth",
                                        "tensors/pickle_p2_bfloat16.pickle", "tensors/pickle_p4_bfloat16.pickle",
                                        "tensors/zip64_extra.pth", "tensors/t1_view_transpose_bfloat16.pth"};
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        size_t len;
        uint8_t *b = slurp(files[f], &len);
        REQUIRE(b);
        free(b);
        int failed = 0, flips_ok = 0;
        damage_file(files[f], &failed, &flips_ok);
        /* every strict prefix is missing something the file needs */
        CHECK_MSG(failed == (int)len, "%s: %d of %zu prefixes decoded", files[f], (int)len - failed, len);
        /* most single-byte corruptions are caught (the CRC, the structure); some land in padding */
        CHECK_MSG(flips_ok < (int)len, "%s: every corruption decoded", files[f]);
    }
}

/* ---- the zip reader ---- */

TEST(zip_reads_torch_archives_and_refuses_damage) {
    size_t len;
    uint8_t *b = slurp("tensors/zip64_extra.pth", &len);
    REQUIRE(b);
    ZipArchive *z;
    REQUIRE_OK(zip_open_memory(&z, b, len, "zip64_extra.pth"));
    CHECK(zip_count(z) >= 5);
    int pkl = zip_find(z, "archive/data.pkl"); /* torch.save to a BytesIO names the prefix "archive" */
    REQUIRE(pkl >= 0);
    for (int i = 0; i < zip_count(z); i++) {
        const ZipEntry *e = zip_entry(z, i);
        CHECK_MSG((e->data - b) % 64 == 0, "%s: payload at %lld is not 64-byte aligned", e->name, (long long)(e->data - b));
        const uint8_t *d;
        uint64_t n;
        CHECK_OK(zip_read(z, i, &d, &n));
    }
    const ZipEntry *e = zip_entry(z, pkl);
    CHECK(e->size > 20 && e->data[0] == 0x80 && e->data[e->size - 1] == '.');
    CHECK(zip_find(z, "no/such") == -1 && zip_entry(z, zip_count(z)) == NULL);
    /* a flipped payload byte: the CRC names the record */
    size_t at = (size_t)(e->data - b) + 5;
    zip_close(z);
    b[at] ^= 1;
    REQUIRE_OK(zip_open_memory(&z, b, len, "flipped.pth"));
    const uint8_t *d;
    uint64_t n;
    CHECK(zip_read(z, pkl, &d, &n) == VFM_ERR_FORMAT && strstr(vfm_last_error(), "data.pkl' is corrupt"));
    zip_close(z);
    b[at] ^= 1;
    /* not zips; a compressed record is refused as unsupported */
    CHECK(zip_open_memory(&z, "PK", 2, "tiny") == VFM_ERR_FORMAT && strstr(vfm_last_error(), "tiny: not a zip"));
    CHECK(zip_open_memory(&z, b, 100, "head") == VFM_ERR_FORMAT);
    CHECK(!zip_is_zip("PK\x03", 3) && zip_is_zip(b, len));
    free(b);
    b = slurp("tensors/float32.pth", &len);
    REQUIRE(b);
    /* set method 8 (deflate) in every central directory entry */
    int patched = 0;
    for (size_t k = 0; k + 46 <= len; k++)
        if (b[k] == 'P' && b[k + 1] == 'K' && b[k + 2] == 1 && b[k + 3] == 2) b[k + 10] = 8, patched++;
    CHECK(patched >= 3);
    CHECK(zip_open_memory(&z, b, len, "deflated.pth") == VFM_ERR_UNSUPPORTED && strstr(vfm_last_error(), "compressed"));
    TorchTensor t;
    CHECK(torch_tensor_decode(b, len, "deflated.pth", &t) == VFM_ERR_UNSUPPORTED);
    free(b);
}

/* ---- the unpickler on hand-made programs ---- */

static vfm_status run(const char *prog, size_t len, PickleValue **out, Pickle **p) {
    VFM_TRY(pickle_session(p, "test", NULL, NULL));
    vfm_status s = pickle_run(*p, prog, len, NULL, out);
    return s;
}

#define PROG(s) (s), sizeof(s) - 1

TEST(pickle_machine_values_and_errors) {
    Pickle *p;
    PickleValue *v;
    /* [1, -1, 2.5, 'ab', (None, True), {'k': 300}] with memo put/get and LONG1 */
    REQUIRE_OK(run(PROG("\x80\x02]q\x00(K\x01\x8a\x01\xff" "G\x40\x04\x00\x00\x00\x00\x00\x00X\x02\x00\x00\x00" "abq\x01"
                        "N\x88\x86}q\x02h\x01" "M\x2c\x01sh\x00" "0e."),
                   &v, &p));
    REQUIRE(v->kind == PK_LIST && v->u.seq.n == 6);
    PickleValue **it = v->u.seq.items;
    CHECK(it[0]->kind == PK_INT && it[0]->u.i == 1);
    CHECK(it[1]->kind == PK_INT && it[1]->u.i == -1);
    CHECK(it[2]->kind == PK_FLOAT && it[2]->u.f == 2.5);
    CHECK(pickle_str(it[3]) && strcmp(pickle_str(it[3]), "ab") == 0);
    CHECK(it[4]->kind == PK_TUPLE && it[4]->u.seq.n == 2 && it[4]->u.seq.items[1]->kind == PK_BOOL);
    CHECK(it[5]->kind == PK_DICT && it[5]->u.dict.n == 1 && it[5]->u.dict.keys[0] == it[3] && it[5]->u.dict.values[0]->u.i == 300);
    pickle_free(p);

    static const struct {
        const char *prog;
        size_t len;
        const char *says;
    } bad[] = {
        {PROG("\x80\x02."), "stack underflow"},
        {PROG("\x80\x06N."), "pickle protocol 6"},
        {PROG("\x80\x02h\x05."), "memo index 5 was never set"},
        {PROG("\x80\x02K\x01K\x02" "a."), "APPEND to a int"},
        {PROG("\x80\x02(K\x01" "a."), "stack underflow"},        /* a mark hides the stack below it */
        {PROG("\x80\x02t."), "no MARK"},
        {PROG("\x80\x02X\xff\x00\x00\x00" "ab."), "truncated"},
        {PROG("\x80\x02K\x01)R."), "REDUCE calls a int"},
        {PROG("\x80\x02" "cbuiltins\neval\n."), "global 'builtins.eval' is not allowed"},
        {PROG("\x80\x02" "cos\nsystem\n."), "global 'os.system' is not allowed"},
        {PROG("\x80\x04\x8c\x0asubprocess\x8c\x05Popen\x93."), "global 'subprocess.Popen' is not allowed"},
        {PROG("\x80\x02" "ctorch\nFloatStorage\n)R."), "never called"},
        {PROG("\x80\x02" "ctorch\nComplexFloatStorage\n."), "storage type 'torch.ComplexFloatStorage' is not read"},
        {PROG("\x80\x02" "ctorch.storage\n_load_from_bytes\nC\x01x\x85R."), "_load_from_bytes is not allowed here"},
        {PROG("\x80\x02(X\x07\x00\x00\x00storageK\x01tQ."), "persistent id is not"},
        {PROG("\x80\x02" "ccollections\nOrderedDict\n)\x81K\x01K\x02\x86" "b."), "BUILD"},
        {PROG("\x80\x02}K\x01K\x02\x86" "b."), "BUILD sets state on a dict: only"},
        {PROG("\x80\x02N\x82\x01."), "extension-registry"},
        {PROG("\x80\x05\x97."), "out-of-band"},
        {PROG("\x80\x02I01\n."), "opcode 0x49"},
        {PROG("\x80\x02" "c_codecs\nencode\nX\x02\x00\x00\x00" "abX\x05\x00\x00\x00utf-8\x86R."), "latin1"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        vfm_status s = run(bad[k].prog, bad[k].len, &v, &p);
        /* a global off the allow-list is refused (a security event), every other fault a format error */
        vfm_status want_s = strstr(bad[k].says, "global '") ? VFM_ERR_REFUSED : VFM_ERR_FORMAT;
        CHECK_MSG(s == want_s && strstr(vfm_last_error(), bad[k].says) && strstr(vfm_last_error(), "test: pickle: byte"),
                  "case %zu: %s (want '%s')", k, s == VFM_OK ? "accepted" : vfm_last_error(), bad[k].says);
        pickle_free(p);
    }
    /* the BUILD of a state dict's _metadata on an OrderedDict is accepted and dropped */
    REQUIRE_OK(run(PROG("\x80\x02" "ccollections\nOrderedDict\n)R}b."), &v, &p));
    CHECK(v->kind == PK_DICT && v->u.dict.n == 0);
    pickle_free(p);
    CHECK(pickle_global_allowed("torch._utils", "_rebuild_tensor_v2") && pickle_global_allowed("torch", "BFloat16Storage"));
    CHECK(!pickle_global_allowed("posix", "system") && !pickle_global_allowed("torch", "load") &&
          !pickle_global_allowed("torch._utils", "_rebuild_qtensor"));
}

TEST(pickle_work_is_bounded_by_its_size) {
    /* OrderedDict(L) called 100 times on one memoized list of 100k pairs: 10 M copies from 200 KB */
    enum { PAIRS = 100000, CALLS = 100 };
    static const char head[] = {(char)0x80, 2, ']', 'q', 0, '(', 'K', 1, 'K', 2, (char)0x86, 'q', 1, '0'};
    static const char od[] = "ccollections\nOrderedDict\nq\x02" "0";
    static const char call[] = {'h', 2, 'h', 0, (char)0x85, 'R', '0'};
    size_t n = 0;
    char *b = malloc(sizeof head + 2 * PAIRS + sizeof od + sizeof call * CALLS + 8);
    memcpy(b, head, sizeof head), n += sizeof head;            /* L = [] (memo 0), mark, pair (1, 2) (memo 1) */
    for (int i = 0; i < PAIRS; i++) b[n++] = 'h', b[n++] = 1;   /* BINGET 1, PAIRS times */
    b[n++] = 'e';                                               /* APPENDS into L */
    memcpy(b + n, od, sizeof od - 1), n += sizeof od - 1;       /* OrderedDict (memo 2) */
    size_t calls_at = n;
    for (int i = 0; i < CALLS; i++) memcpy(b + n, call, sizeof call), n += sizeof call; /* OrderedDict(L) */
    b[n++] = 'N', b[n++] = '.';
    Pickle *p;
    PickleValue *v;
    vfm_status s = run(b, n, &v, &p);
    CHECK_MSG(s == VFM_ERR_FORMAT && strstr(vfm_last_error(), "repeats work"), "%s", s == VFM_OK ? "accepted" : vfm_last_error());
    pickle_free(p);
    /* converting the list once is fine */
    n = calls_at + sizeof call;
    b[n++] = 'N', b[n++] = '.';
    s = run(b, n, &v, &p);
    CHECK_MSG(s == VFM_OK && v->kind == PK_NONE, "%s", vfm_last_error());
    pickle_free(p);
    free(b);
}
