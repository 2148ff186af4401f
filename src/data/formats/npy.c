/* `.npy` parsing (the header's Python dict literal, dtype, shape, order), conversion of every supported
 * dtype to float32, and a writer that lays files out byte for byte as numpy's np.save does. */
#include "data/formats/npy.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const struct {
    const char *code; /* descr without the byte-order character */
    NpyDType dtype;
    int item_size;
} npy_types[] = {
    {"f4", NPY_F4, 4}, {"f8", NPY_F8, 8}, {"f2", NPY_F2, 2}, {"V2", NPY_BF16, 2},
    {"i1", NPY_I1, 1}, {"u1", NPY_U1, 1}, {"i2", NPY_I2, 2}, {"u2", NPY_U2, 2},
    {"i4", NPY_I4, 4}, {"u4", NPY_U4, 4}, {"i8", NPY_I8, 8}, {"u8", NPY_U8, 8},
    {"b1", NPY_B1, 1},
};

const char *npy_dtype_name(NpyDType t) {
    static const char *names[] = {"float32", "float64", "float16", "bfloat16", "int8", "uint8", "int16",
                                  "uint16", "int32", "uint32", "int64", "uint64", "bool"};
    return (unsigned)t < sizeof names / sizeof names[0] ? names[t] : "?";
}

/* ---------------------------------------------------------------- header dict */

typedef struct {
    const char *p, *end;
} Cursor;

static void skip_space(Cursor *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r')) c->p++;
}

static int take(Cursor *c, char ch) {
    skip_space(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return 1;
    }
    return 0;
}

/* A quoted Python string without escapes; returns its length or -1. */
static int read_string(Cursor *c, char *out, size_t cap) {
    skip_space(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"')) return -1;
    char quote = *c->p++;
    size_t n = 0;
    while (c->p < c->end && *c->p != quote) {
        if (*c->p == '\\' || n + 1 >= cap) return -1;
        out[n++] = *c->p++;
    }
    if (c->p >= c->end) return -1;
    c->p++;
    out[n] = 0;
    return (int)n;
}

static int starts_with_word(Cursor *c, const char *word) {
    skip_space(c);
    size_t n = strlen(word);
    if ((size_t)(c->end - c->p) >= n && memcmp(c->p, word, n) == 0) {
        c->p += n;
        return 1;
    }
    return 0;
}

static vfm_status parse_descr(const char *descr, const char *what, NpyArray *a) {
    if (strcmp(descr, "bfloat16") == 0) {
        a->dtype = NPY_BF16;
        a->item_size = 2;
        a->big_endian = 0;
        return VFM_OK;
    }
    char order = descr[0];
    if (order && strchr("<>|=", order)) {
        for (size_t k = 0; k < sizeof npy_types / sizeof npy_types[0]; k++) {
            if (strcmp(descr + 1, npy_types[k].code) != 0) continue;
            int size = npy_types[k].item_size;
            /* a two-byte void is bfloat16 only as ml_dtypes writes it: '<V2' */
            if (npy_types[k].dtype == NPY_BF16 && order != '<') break;
            if (size > 1 && order == '|') break;
            a->dtype = npy_types[k].dtype;
            a->item_size = size;
            a->big_endian = size > 1 && order == '>';
            return VFM_OK;
        }
    }
    return vfm_fail(VFM_ERR_UNSUPPORTED,
                    "%s: unsupported .npy dtype '%s' (supported: <f4 <f8 <f2 bfloat16 (<V2) |i1 |u1 <i2 <u2 <i4 <u4 <i8 "
                    "<u8 |b1, either byte order)",
                    what, descr);
}

static vfm_status parse_header(const char *text, size_t len, const char *what, NpyArray *a) {
    Cursor c = {text, text + len};
    int have_descr = 0, have_order = 0, have_shape = 0;
    if (!take(&c, '{'))
        return vfm_fail(VFM_ERR_FORMAT, "%s: .npy header is not a dict: '%.60s'", what, text);
    for (;;) {
        if (take(&c, '}')) break;
        char key[64], value[64];
        if (read_string(&c, key, sizeof key) < 0 || !take(&c, ':'))
            return vfm_fail(VFM_ERR_FORMAT, "%s: .npy header dict is malformed: '%.80s'", what, text);
        if (strcmp(key, "descr") == 0) {
            skip_space(&c);
            if (c.p < c.end && *c.p == '[')
                return vfm_fail(VFM_ERR_UNSUPPORTED, "%s: structured .npy dtypes are not supported", what);
            if (read_string(&c, value, sizeof value) < 0)
                return vfm_fail(VFM_ERR_FORMAT, "%s: .npy header: 'descr' is not a string", what);
            VFM_TRY(parse_descr(value, what, a));
            have_descr = 1;
        } else if (strcmp(key, "fortran_order") == 0) {
            if (starts_with_word(&c, "True")) a->fortran_order = 1;
            else if (starts_with_word(&c, "False")) a->fortran_order = 0;
            else return vfm_fail(VFM_ERR_FORMAT, "%s: .npy header: 'fortran_order' is not True or False", what);
            have_order = 1;
        } else if (strcmp(key, "shape") == 0) {
            if (!take(&c, '(')) return vfm_fail(VFM_ERR_FORMAT, "%s: .npy header: 'shape' is not a tuple", what);
            a->ndim = 0;
            while (!take(&c, ')')) {
                skip_space(&c);
                int64_t v = 0;
                const char *start = c.p;
                while (c.p < c.end && *c.p >= '0' && *c.p <= '9') {
                    if (v > (INT64_MAX - 9) / 10)
                        return vfm_fail(VFM_ERR_FORMAT, "%s: .npy header: dimension too large", what);
                    v = v * 10 + (*c.p++ - '0');
                }
                if (c.p == start) return vfm_fail(VFM_ERR_FORMAT, "%s: .npy header: bad 'shape' entry", what);
                if (c.p < c.end && *c.p == 'L') c.p++; /* Python 2 long literal */
                if (a->ndim == NPY_MAX_DIMS)
                    return vfm_fail(VFM_ERR_UNSUPPORTED, "%s: .npy array has more than %d dimensions", what, NPY_MAX_DIMS);
                a->shape[a->ndim++] = v;
                if (!take(&c, ',')) {
                    if (!take(&c, ')')) return vfm_fail(VFM_ERR_FORMAT, "%s: .npy header: bad 'shape' tuple", what);
                    break;
                }
            }
            have_shape = 1;
        } else {
            return vfm_fail(VFM_ERR_FORMAT, "%s: .npy header has an unexpected key '%s'", what, key);
        }
        if (!take(&c, ',')) {
            if (!take(&c, '}')) return vfm_fail(VFM_ERR_FORMAT, "%s: .npy header dict is malformed: '%.80s'", what, text);
            break;
        }
    }
    skip_space(&c);
    if (c.p != c.end) return vfm_fail(VFM_ERR_FORMAT, "%s: .npy header has text after the dict", what);
    if (!have_descr || !have_order || !have_shape)
        return vfm_fail(VFM_ERR_FORMAT, "%s: .npy header lacks '%s'", what,
                        !have_descr ? "descr" : !have_order ? "fortran_order" : "shape");
    return VFM_OK;
}

vfm_status npy_parse_header(const void *bytes, size_t len, const char *what, NpyArray *out, size_t *data_offset) {
    const uint8_t *b = bytes;
    memset(out, 0, sizeof *out);
    if (len < 10 || memcmp(b, "\x93NUMPY", 6) != 0)
        return vfm_fail(VFM_ERR_FORMAT, "%s: not a .npy file (bad magic)", what);
    int major = b[6], minor = b[7];
    if ((major != 1 && major != 2 && major != 3) || minor != 0)
        return vfm_fail(VFM_ERR_UNSUPPORTED, "%s: unsupported .npy format version %d.%d", what, major, minor);
    size_t header_len, header_at = major == 1 ? 10 : 12;
    if (len < header_at) return vfm_fail(VFM_ERR_FORMAT, "%s: truncated .npy (%zu bytes)", what, len);
    header_len = major == 1 ? (size_t)b[8] | (size_t)b[9] << 8
                            : (size_t)b[8] | (size_t)b[9] << 8 | (size_t)b[10] << 16 | (size_t)b[11] << 24;
    if (len - header_at < header_len)
        return vfm_fail(VFM_ERR_FORMAT, "%s: truncated .npy: header needs %zu bytes, have %zu", what,
                        header_at + header_len, len);
    char *text = malloc(header_len + 1);
    if (!text) return vfm_fail(VFM_ERR_NOMEM, "%s: out of memory", what);
    memcpy(text, b + header_at, header_len);
    text[header_len] = 0;
    vfm_status s = parse_header(text, strnlen(text, header_len), what, out);
    free(text);
    VFM_TRY(s);
    out->version_major = major;
    int64_t numel = 1;
    for (int d = 0; d < out->ndim; d++)
        if (__builtin_mul_overflow(numel, out->shape[d], &numel))
            return vfm_fail(VFM_ERR_FORMAT, "%s: .npy shape overflows", what);
    out->numel = numel;
    *data_offset = header_at + header_len;
    return VFM_OK;
}

vfm_status npy_parse(const void *bytes, size_t len, const char *what, NpyArray *out) {
    const uint8_t *b = bytes;
    size_t data_at;
    VFM_TRY(npy_parse_header(bytes, len, what, out, &data_at));
    int64_t numel = out->numel;
    uint64_t need;
    if (__builtin_mul_overflow((uint64_t)numel, (uint64_t)out->item_size, &need) || need > len - data_at)
        return vfm_fail(VFM_ERR_FORMAT, "%s: truncated .npy data: %" PRId64 " %s elements need %" PRIu64 " bytes, have %zu",
                        what, numel, npy_dtype_name(out->dtype), need, len - data_at);
    out->data = b + data_at;
    return VFM_OK;
}

/* ---------------------------------------------------------------- conversion */

static float f32_from_f16(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff, u;
    if (exponent == 0x1f) {
        u = sign | 0x7f800000u | (mantissa << 13);
    } else if (exponent != 0) {
        u = sign | ((exponent + 112) << 23) | (mantissa << 13);
    } else if (mantissa == 0) {
        u = sign;
    } else { /* subnormal: normalise */
        int shift = 0;
        while (!(mantissa & 0x400)) {
            mantissa <<= 1;
            shift++;
        }
        u = sign | ((uint32_t)(113 - shift) << 23) | ((mantissa & 0x3ff) << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint64_t load_uint(const uint8_t *p, int size, int big_endian) {
    uint64_t v = 0;
    for (int i = 0; i < size; i++) v |= (uint64_t)p[big_endian ? size - 1 - i : i] << (8 * i);
    return v;
}

static float element_f32(const NpyArray *a, const uint8_t *p) {
    uint64_t v = load_uint(p, a->item_size, a->big_endian);
    switch (a->dtype) {
    case NPY_F4: {
        uint32_t u = (uint32_t)v;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    case NPY_F8: {
        double d;
        memcpy(&d, &v, 8);
        return (float)d;
    }
    case NPY_F2: return f32_from_f16((uint16_t)v);
    case NPY_BF16: return f32_from_bf16((uint16_t)v);
    case NPY_I1: return (float)(int8_t)v;
    case NPY_U1: return (float)(uint8_t)v;
    case NPY_I2: return (float)(int16_t)v;
    case NPY_U2: return (float)(uint16_t)v;
    case NPY_I4: return (float)(int32_t)v;
    case NPY_U4: return (float)(uint32_t)v;
    case NPY_I8: return (float)(int64_t)v;
    case NPY_U8: return (float)v;
    case NPY_B1: return v ? 1.0f : 0.0f;
    }
    return 0.0f;
}

void npy_to_f32(const NpyArray *a, float *dst) {
    const uint8_t *src = a->data;
    int size = a->item_size;
    if (!a->fortran_order || a->ndim < 2) {
        for (int64_t k = 0; k < a->numel; k++) dst[k] = element_f32(a, src + k * size);
        return;
    }
    if (a->numel == 0) return;
    /* walk the C-order index like an odometer, tracking the Fortran-order offset */
    int64_t stride[NPY_MAX_DIMS], idx[NPY_MAX_DIMS] = {0}, at = 0;
    int n = a->ndim;
    stride[0] = 1;
    for (int d = 1; d < n; d++) stride[d] = stride[d - 1] * a->shape[d - 1];
    for (int64_t k = 0; k < a->numel; k++) {
        dst[k] = element_f32(a, src + at * size);
        for (int d = n - 1; d >= 0; d--) {
            at += stride[d];
            if (++idx[d] < a->shape[d]) break;
            at -= stride[d] * a->shape[d];
            idx[d] = 0;
        }
    }
}

vfm_status npy_load_f32(const void *bytes, size_t len, const char *what, Tensor *out) {
    memset(out, 0, sizeof *out);
    NpyArray a;
    VFM_TRY(npy_parse(bytes, len, what, &a));
    if (a.ndim > VFM_MAX_DIMS)
        return vfm_fail(VFM_ERR_UNSUPPORTED, "%s: .npy array has %d dimensions, at most %d are supported", what, a.ndim,
                        VFM_MAX_DIMS);
    VFM_TRY(tensor_alloc(out, DT_F32, DEV_CPU, a.ndim, a.shape));
    npy_to_f32(&a, out->data);
    return VFM_OK;
}

vfm_status npy_read_file(const char *path, uint8_t **bytes, size_t *len) {
    *bytes = NULL;
    *len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return vfm_fail(VFM_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return vfm_fail(VFM_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
    }
    size_t n = (size_t)st.st_size, done = 0;
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf) {
        close(fd);
        return vfm_fail(VFM_ERR_NOMEM, "%s: out of memory for %zu bytes", path, n);
    }
    while (done < n) {
        ssize_t got = read(fd, buf + done, n - done);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) {
            vfm_status s = vfm_fail(VFM_ERR_IO, "%s: read failed: %s", path, got < 0 ? strerror(errno) : "file shrank");
            free(buf);
            close(fd);
            return s;
        }
        done += (size_t)got;
    }
    close(fd);
    *bytes = buf;
    *len = n;
    return VFM_OK;
}

vfm_status npy_load_f32_file(const char *path, Tensor *out) {
    uint8_t *bytes;
    size_t len;
    memset(out, 0, sizeof *out);
    VFM_TRY(npy_read_file(path, &bytes, &len));
    vfm_status s = npy_load_f32(bytes, len, path, out);
    free(bytes);
    return s;
}

/* ---------------------------------------------------------------- writing */

vfm_status npy_encode(NpyDType dtype, const void *data, int ndim, const int64_t *shape, uint8_t **bytes, size_t *len) {
    *bytes = NULL;
    *len = 0;
    if (dtype != NPY_F4 && dtype != NPY_I4)
        return vfm_fail(VFM_ERR_UNSUPPORTED, "npy_encode: writes float32 and int32 only, not %s", npy_dtype_name(dtype));
    if (ndim < 0 || ndim > NPY_MAX_DIMS) return vfm_fail(VFM_ERR_USAGE, "npy_encode: %d dimensions", ndim);
    /* numpy's _write_array_header: sorted keys, repr() values, spare spaces for the first axis to grow */
    char header[1024];
    int n = snprintf(header, sizeof header, "{'descr': '%s', 'fortran_order': False, 'shape': (",
                     dtype == NPY_F4 ? "<f4" : "<i4");
    int64_t numel = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0) return vfm_fail(VFM_ERR_USAGE, "npy_encode: negative dimension %" PRId64, shape[d]);
        numel *= shape[d];
        n += snprintf(header + n, sizeof header - (size_t)n, d ? ", %" PRId64 : "%" PRId64, shape[d]);
    }
    n += snprintf(header + n, sizeof header - (size_t)n, "%s), }", ndim == 1 ? "," : "");
    if (ndim > 0) {
        int digits = snprintf(NULL, 0, "%" PRId64, shape[0]);
        for (int k = digits; k < 21; k++) header[n++] = ' ';
    }
    size_t hlen = (size_t)n + 1, pad = 64 - (10 + hlen) % 64;
    size_t total_header = 10 + hlen + pad, data_bytes = (size_t)numel * 4;
    uint8_t *buf = malloc(total_header + data_bytes);
    if (!buf) return vfm_fail(VFM_ERR_NOMEM, "npy_encode: out of memory");
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    buf[8] = (uint8_t)((hlen + pad) & 0xff);
    buf[9] = (uint8_t)((hlen + pad) >> 8);
    memcpy(buf + 10, header, (size_t)n);
    memset(buf + 10 + n, ' ', pad);
    buf[total_header - 1] = '\n';
    /* little-endian hosts only (x86-64, aarch64): the element bytes are written as they are */
    if (data_bytes) memcpy(buf + total_header, data, data_bytes);
    *bytes = buf;
    *len = total_header + data_bytes;
    return VFM_OK;
}

vfm_status npy_write_file(const char *path, const Tensor *t) {
    if (t->device != DEV_CPU || (t->dtype != DT_F32 && t->dtype != DT_I32))
        return vfm_fail(VFM_ERR_UNSUPPORTED, "%s: npy_write_file takes f32 or i32 CPU tensors, not %s@%s", path,
                        dtype_name(t->dtype), device_name(t->device));
    uint8_t *bytes;
    size_t len;
    VFM_TRY(npy_encode(t->dtype == DT_F32 ? NPY_F4 : NPY_I4, t->data, t->ndim, t->shape, &bytes, &len));
    size_t n = strlen(path) + 16;
    char *tmp = malloc(n);
    if (!tmp) {
        free(bytes);
        return vfm_fail(VFM_ERR_NOMEM, "%s: out of memory", path);
    }
    snprintf(tmp, n, "%s.tmp.XXXXXX", path);
    int fd = mkstemp(tmp);
    vfm_status s = VFM_OK;
    if (fd < 0) {
        s = vfm_fail(VFM_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
    } else {
        size_t done = 0;
        while (s == VFM_OK && done < len) {
            ssize_t w = write(fd, bytes + done, len - done);
            if (w < 0 && errno == EINTR) continue;
            if (w < 0) s = vfm_fail(VFM_ERR_IO, "%s: write failed: %s", tmp, strerror(errno));
            else done += (size_t)w;
        }
        if (s == VFM_OK && (fchmod(fd, 0644) != 0 || fsync(fd) != 0))
            s = vfm_fail(VFM_ERR_IO, "%s: %s", tmp, strerror(errno));
        if (close(fd) != 0 && s == VFM_OK) s = vfm_fail(VFM_ERR_IO, "%s: close failed: %s", tmp, strerror(errno));
        if (s == VFM_OK && rename(tmp, path) != 0)
            s = vfm_fail(VFM_ERR_IO, "%s: cannot rename to %s: %s", tmp, path, strerror(errno));
        if (s != VFM_OK) unlink(tmp);
    }
    free(tmp);
    free(bytes);
    return s;
}
