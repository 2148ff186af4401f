/* PNG and GIF writers, grid tiling and upscaling (see image_io.h). Our own small encoders:
 * PNG's zlib stream uses stored (uncompressed) deflate blocks, so no compression library is
 * needed; GIF uses real LZW since its format has no uncompressed mode. */
#include "data/media/image_io.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/bytebuf.h"
#include "core/fileutil.h"
#include "core/hash.h"

vfm_status rgb_image_alloc(RgbImage *img, int width, int height) {
    img->width = img->height = 0;
    img->pixels = NULL;
    if (width <= 0 || height <= 0 || (int64_t)width * height > (1 << 28))
        return vfm_fail(VFM_ERR_SHAPE, "image size %dx%d out of range", width, height);
    img->pixels = calloc((size_t)width * height * 3, 1);
    if (!img->pixels) return vfm_fail(VFM_ERR_NOMEM, "image %dx%d: out of memory", width, height);
    img->width = width;
    img->height = height;
    return VFM_OK;
}

void rgb_image_free(RgbImage *img) {
    free(img->pixels);
    img->pixels = NULL;
    img->width = img->height = 0;
}

static uint8_t unit_to_byte(float v) {
    if (!(v > 0.0f)) return 0; /* also NaN */
    if (v >= 1.0f) return 255;
    return (uint8_t)lrintf(v * 255.0f);
}

void rgb_image_from_planar(RgbImage *img, const float *planar, int frames, int t) {
    int64_t hw = (int64_t)img->height * img->width;
    int64_t channel_stride = (int64_t)frames * hw;
    const float *frame = planar + (int64_t)t * hw;
    for (int64_t p = 0; p < hw; p++)
        for (int c = 0; c < 3; c++) img->pixels[p * 3 + c] = unit_to_byte(frame[c * channel_stride + p]);
}

vfm_status rgb_image_grid(const RgbImage *tiles, int n, int cols, int gap, const uint8_t gap_rgb[3],
                          RgbImage *out) {
    if (n <= 0 || cols <= 0 || gap < 0) return vfm_fail(VFM_ERR_USAGE, "grid: bad layout n=%d cols=%d gap=%d", n, cols, gap);
    int cell_w = 0, cell_h = 0;
    for (int i = 0; i < n; i++) {
        if (tiles[i].width > cell_w) cell_w = tiles[i].width;
        if (tiles[i].height > cell_h) cell_h = tiles[i].height;
    }
    if (cols > n) cols = n;
    int rows = (n + cols - 1) / cols;
    VFM_TRY(rgb_image_alloc(out, cols * cell_w + (cols + 1) * gap, rows * cell_h + (rows + 1) * gap));
    int64_t total = (int64_t)out->width * out->height;
    for (int64_t p = 0; p < total; p++) memcpy(out->pixels + p * 3, gap_rgb, 3);
    for (int i = 0; i < n; i++) {
        int x0 = gap + (i % cols) * (cell_w + gap), y0 = gap + (i / cols) * (cell_h + gap);
        for (int y = 0; y < tiles[i].height; y++)
            memcpy(out->pixels + ((int64_t)(y0 + y) * out->width + x0) * 3,
                   tiles[i].pixels + (int64_t)y * tiles[i].width * 3, (size_t)tiles[i].width * 3);
    }
    return VFM_OK;
}

vfm_status rgb_image_upscale(const RgbImage *img, int factor, RgbImage *out) {
    if (factor < 1) return vfm_fail(VFM_ERR_USAGE, "upscale factor %d must be >= 1", factor);
    VFM_TRY(rgb_image_alloc(out, img->width * factor, img->height * factor));
    for (int y = 0; y < out->height; y++)
        for (int x = 0; x < out->width; x++)
            memcpy(out->pixels + ((int64_t)y * out->width + x) * 3,
                   img->pixels + ((int64_t)(y / factor) * img->width + x / factor) * 3, 3);
    return VFM_OK;
}

/* ---- checksums ---- */

uint32_t png_crc32(uint32_t crc, const uint8_t *data, size_t n) { return crc32_update(crc, data, n); }

uint32_t zlib_adler32(uint32_t adler, const uint8_t *data, size_t n) {
    uint32_t a = adler & 0xffff, b = adler >> 16;
    for (size_t i = 0; i < n; i++) {
        a = (a + data[i]) % 65521u;
        b = (b + a) % 65521u;
    }
    return (b << 16) | a;
}

/* ---- byte helpers ---- */

static void buf_byte(ByteBuf *b, uint8_t v) { bytebuf_put(b, &v, 1); }

static void buf_be32(ByteBuf *b, uint32_t v) {
    uint8_t q[4] = {(uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8), (uint8_t)v};
    bytebuf_put(b, q, 4);
}

static void buf_le16(ByteBuf *b, unsigned v) {
    uint8_t q[2] = {(uint8_t)v, (uint8_t)(v >> 8)};
    bytebuf_put(b, q, 2);
}

/* Writes the encoded file (crash-safe: a temporary name, fsync, rename). */
static vfm_status write_encoded(const char *path, const ByteBuf *b) {
    if (b->failed) return vfm_fail_at(VFM_ERR_NOMEM, path, NULL, NULL, "out of memory while encoding");
    return write_file_atomic(path, b->data, b->len);
}

/* ---- PNG ---- */

static void png_chunk(ByteBuf *b, const char type[4], const uint8_t *data, size_t n) {
    buf_be32(b, (uint32_t)n);
    bytebuf_put(b, type, 4);
    if (n) bytebuf_put(b, data, n);
    uint32_t crc = png_crc32(0, (const uint8_t *)type, 4);
    buf_be32(b, png_crc32(crc, data, n));
}

/* The PNG file of img in b (b->failed when out of memory). */
static vfm_status png_encode(ByteBuf *b, const RgbImage *img, const char *path) {
    if (!img->pixels || img->width <= 0 || img->height <= 0)
        return vfm_fail_at(VFM_ERR_SHAPE, path, NULL, NULL, "empty image");
    size_t row = (size_t)img->width * 3 + 1; /* filter byte 0 (None) + RGB */
    size_t raw_len = row * (size_t)img->height;
    size_t n_blocks = (raw_len + 65534) / 65535;
    if (raw_len + 5 * n_blocks + 6 > 0x7fffffffu) return vfm_fail_at(VFM_ERR_SHAPE, path, NULL, NULL, "image too large for one IDAT");

    uint8_t *raw = malloc(raw_len);
    if (!raw) return vfm_fail(VFM_ERR_NOMEM, "png: out of memory");
    for (int y = 0; y < img->height; y++) {
        raw[y * row] = 0;
        memcpy(raw + y * row + 1, img->pixels + (size_t)y * img->width * 3, row - 1);
    }
    /* zlib stream: CMF 0x78 (deflate, 32K window), FLG 0x01 (check bits: 0x7801 % 31 == 0, no dict),
     * stored blocks of <= 65535 bytes (header byte BFINAL|BTYPE=00, LEN, ~LEN little-endian), Adler-32. */
    ByteBuf z = {0};
    buf_byte(&z, 0x78);
    buf_byte(&z, 0x01);
    for (size_t off = 0, k = 0; k < n_blocks; k++) {
        size_t len = raw_len - off < 65535 ? raw_len - off : 65535;
        buf_byte(&z, k + 1 == n_blocks ? 1 : 0);
        buf_le16(&z, (unsigned)len);
        buf_le16(&z, (unsigned)(~len & 0xffff));
        bytebuf_put(&z, raw + off, len);
        off += len;
    }
    buf_be32(&z, zlib_adler32(1, raw, raw_len));
    free(raw);

    static const uint8_t signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    bytebuf_put(b, signature, 8);
    uint8_t ihdr[13] = {0};
    for (int i = 0; i < 4; i++) {
        ihdr[i] = (uint8_t)((uint32_t)img->width >> (24 - 8 * i));
        ihdr[4 + i] = (uint8_t)((uint32_t)img->height >> (24 - 8 * i));
    }
    ihdr[8] = 8;  /* bit depth */
    ihdr[9] = 2;  /* colour type: truecolour RGB */
    /* compression 0, filter method 0, no interlace */
    png_chunk(b, "IHDR", ihdr, 13);
    if (z.failed) b->failed = 1;
    else png_chunk(b, "IDAT", z.data, z.len);
    png_chunk(b, "IEND", NULL, 0);
    free(z.data);
    return b->failed ? vfm_fail_at(VFM_ERR_NOMEM, path, NULL, NULL, "out of memory while encoding") : VFM_OK;
}

vfm_status png_write_rgb(const char *path, const RgbImage *img) {
    ByteBuf b = {0};
    vfm_status s = png_encode(&b, img, path);
    if (s == VFM_OK) s = write_encoded(path, &b);
    free(b.data);
    return s;
}

vfm_status png_encode_rgb(const RgbImage *img, uint8_t **out, size_t *len) {
    ByteBuf b = {0};
    vfm_status s = png_encode(&b, img, NULL);
    if (s != VFM_OK) {
        free(b.data);
        return s;
    }
    *out = b.data;
    *len = b.len;
    return VFM_OK;
}

/* ---- GIF ---- */

static uint8_t grey_ramp_level(int j) { /* j in [0, 40): 8 levels inside each of the cube's 5 grey gaps */
    return (uint8_t)(51 * (j / 8) + (51 * (j % 8 + 1) + 4) / 9);
}

void gif_palette(uint8_t palette[256][3]) {
    for (int i = 0; i < 216; i++) {
        palette[i][0] = (uint8_t)(51 * (i / 36));
        palette[i][1] = (uint8_t)(51 * (i / 6 % 6));
        palette[i][2] = (uint8_t)(51 * (i % 6));
    }
    for (int j = 0; j < 40; j++) palette[216 + j][0] = palette[216 + j][1] = palette[216 + j][2] = grey_ramp_level(j);
}

int gif_palette_index(uint8_t r, uint8_t g, uint8_t b) {
    /* The cube is separable, so its nearest entry is per-channel rounding; the grey ramp is scanned. */
    int lr = (r + 25) / 51, lg = (g + 25) / 51, lb = (b + 25) / 51;
    int dr = r - 51 * lr, dg = g - 51 * lg, db = b - 51 * lb;
    int best = 36 * lr + 6 * lg + lb, best_d = dr * dr + dg * dg + db * db;
    for (int j = 0; j < 40; j++) {
        int v = grey_ramp_level(j);
        int d = (r - v) * (r - v) + (g - v) * (g - v) + (b - v) * (b - v);
        if (d < best_d) {
            best_d = d;
            best = 216 + j;
        }
    }
    return best;
}

#define LZW_MAX_CODES 4096
#define LZW_HASH_SIZE 8192 /* power of two, twice the table */

typedef struct {
    ByteBuf out;
    uint32_t bits;
    int n_bits;
    int32_t keys[LZW_HASH_SIZE]; /* (prefix << 8 | symbol), -1 empty */
    uint16_t codes[LZW_HASH_SIZE];
} LzwEncoder;

static void lzw_emit(LzwEncoder *e, unsigned code, int size) {
    e->bits |= (uint32_t)code << e->n_bits;
    e->n_bits += size;
    while (e->n_bits >= 8) {
        buf_byte(&e->out, (uint8_t)e->bits);
        e->bits >>= 8;
        e->n_bits -= 8;
    }
}

static uint32_t lzw_slot(int32_t key) { return ((uint32_t)key * 2654435761u) >> 19; /* top 13 bits */ }

vfm_status gif_lzw_encode(const uint8_t *indices, size_t n, int min_code_size, uint8_t **out, size_t *out_len) {
    *out = NULL;
    *out_len = 0;
    if (min_code_size < 2 || min_code_size > 8) return vfm_fail(VFM_ERR_USAGE, "LZW minimum code size %d not in [2, 8]", min_code_size);
    LzwEncoder *e = calloc(1, sizeof *e);
    if (!e) return vfm_fail(VFM_ERR_NOMEM, "lzw: out of memory");
    const unsigned clear = 1u << min_code_size, end = clear + 1;
    int size = min_code_size + 1;
    unsigned next = clear + 2;
    memset(e->keys, 0xff, sizeof e->keys);
    lzw_emit(e, clear, size);
    if (n > 0) {
        unsigned prefix = indices[0];
        for (size_t i = 1; i < n; i++) {
            unsigned k = indices[i];
            int32_t key = (int32_t)(prefix << 8 | k);
            uint32_t s = lzw_slot(key);
            while (e->keys[s] != -1 && e->keys[s] != key) s = (s + 1) & (LZW_HASH_SIZE - 1);
            if (e->keys[s] == key) {
                prefix = e->codes[s];
                continue;
            }
            lzw_emit(e, prefix, size);
            e->keys[s] = key;
            e->codes[s] = (uint16_t)next++;
            /* The decoder adds its entries one code later, so it widens when `next` passes 2^size. */
            if (next > (1u << size) && size < 12) size++;
            if (next == LZW_MAX_CODES) {
                lzw_emit(e, clear, size);
                memset(e->keys, 0xff, sizeof e->keys);
                size = min_code_size + 1;
                next = clear + 2;
            }
            prefix = k;
        }
        lzw_emit(e, prefix, size);
        /* The decoder adds one more entry on reading that last code: widen as it will. */
        if (next + 1 > (1u << size) && size < 12) size++;
    }
    lzw_emit(e, end, size);
    if (e->n_bits > 0) buf_byte(&e->out, (uint8_t)e->bits);
    vfm_status st = VFM_OK;
    if (e->out.failed) {
        free(e->out.data);
        st = vfm_fail(VFM_ERR_NOMEM, "lzw: out of memory");
    } else {
        *out = e->out.data;
        *out_len = e->out.len;
    }
    free(e);
    return st;
}

vfm_status gif_write_rgb(const char *path, const RgbImage *frames, int n_frames, int delay_cs, int loop_count) {
    if (n_frames <= 0) return vfm_fail_at(VFM_ERR_SHAPE, path, NULL, NULL, "GIF needs at least one frame");
    int w = frames[0].width, h = frames[0].height;
    if (w <= 0 || h <= 0 || w > 65535 || h > 65535) return vfm_fail_at(VFM_ERR_SHAPE, path, NULL, NULL, "GIF size %dx%d out of range", w, h);
    for (int f = 1; f < n_frames; f++)
        if (frames[f].width != w || frames[f].height != h)
            return vfm_fail_at(VFM_ERR_SHAPE, path, NULL, NULL, "frame %d is %dx%d, frame 0 is %dx%d", f, frames[f].width,
                               frames[f].height, w, h);
    if (delay_cs < 0) delay_cs = 0;
    if (delay_cs > 65535) delay_cs = 65535;
    if (loop_count < 0) loop_count = 0;
    if (loop_count > 65535) loop_count = 65535;

    ByteBuf b = {0};
    bytebuf_put(&b, "GIF89a", 6);
    buf_le16(&b, (unsigned)w);
    buf_le16(&b, (unsigned)h);
    buf_byte(&b, 0xF7); /* global colour table, 8-bit colour resolution, 256 entries */
    buf_byte(&b, 0);    /* background colour index (black) */
    buf_byte(&b, 0);    /* no aspect ratio */
    uint8_t palette[256][3];
    gif_palette(palette);
    bytebuf_put(&b, palette, sizeof palette);
    /* NETSCAPE2.0 application extension: loop count */
    bytebuf_put(&b, "\x21\xFF\x0BNETSCAPE2.0\x03\x01", 16);
    buf_le16(&b, (unsigned)loop_count);
    buf_byte(&b, 0);

    uint8_t *indices = malloc((size_t)w * h);
    if (!indices) {
        free(b.data);
        return vfm_fail(VFM_ERR_NOMEM, "gif: out of memory");
    }
    vfm_status st = VFM_OK;
    for (int f = 0; f < n_frames && st == VFM_OK; f++) {
        /* graphic control extension: disposal 1 (leave in place), no transparency, delay */
        bytebuf_put(&b, "\x21\xF9\x04\x04", 4);
        buf_le16(&b, (unsigned)delay_cs);
        buf_byte(&b, 0);
        buf_byte(&b, 0);
        /* image descriptor: full canvas, no local colour table, not interlaced */
        buf_byte(&b, 0x2C);
        buf_le16(&b, 0);
        buf_le16(&b, 0);
        buf_le16(&b, (unsigned)w);
        buf_le16(&b, (unsigned)h);
        buf_byte(&b, 0);
        const uint8_t *px = frames[f].pixels;
        for (int64_t p = 0; p < (int64_t)w * h; p++) indices[p] = (uint8_t)gif_palette_index(px[3 * p], px[3 * p + 1], px[3 * p + 2]);
        uint8_t *codes;
        size_t n_codes;
        st = gif_lzw_encode(indices, (size_t)w * h, 8, &codes, &n_codes);
        if (st != VFM_OK) break;
        buf_byte(&b, 8);
        for (size_t off = 0; off < n_codes; off += 255) {
            size_t len = n_codes - off < 255 ? n_codes - off : 255;
            buf_byte(&b, (uint8_t)len);
            bytebuf_put(&b, codes + off, len);
        }
        buf_byte(&b, 0);
        free(codes);
    }
    free(indices);
    buf_byte(&b, 0x3B);
    if (st == VFM_OK) st = write_encoded(path, &b);
    free(b.data);
    return st;
}
