/* PNG and GIF writers: checksum known answers; PNG files parsed back (signature, chunk CRCs,
 * stored deflate blocks, Adler-32, pixel bytes); GIF files parsed back and their LZW decoded by
 * an independent decoder written here, including streams long enough to reset the code table;
 * palette mapping against brute force; grid and upscale. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/media/image_io.h"
#include "test.h"

static uint8_t *read_whole(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = malloc((size_t)len + 1);
    *n = fread(p, 1, (size_t)len, f);
    fclose(f);
    return p;
}

static uint32_t be32(const uint8_t *p) { return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]; }
static unsigned le16(const uint8_t *p) { return p[0] | (unsigned)p[1] << 8; }

static void fill_random_image(RgbImage *img, uint64_t seed) {
    float *u = malloc((size_t)img->width * img->height * 3 * sizeof *u);
    test_fill_uniform_f32(u, (int64_t)img->width * img->height * 3, seed, 0.0f, 256.0f);
    for (int64_t i = 0; i < (int64_t)img->width * img->height * 3; i++) img->pixels[i] = (uint8_t)u[i];
    free(u);
}

TEST(image_io_checksums_known_answers) {
    /* CRC-32/ISO-HDLC check value and the zlib/Wikipedia Adler-32 example */
    CHECK(png_crc32(0, (const uint8_t *)"123456789", 9) == 0xCBF43926u);
    CHECK(png_crc32(png_crc32(0, (const uint8_t *)"1234", 4), (const uint8_t *)"56789", 5) == 0xCBF43926u);
    CHECK(zlib_adler32(1, (const uint8_t *)"Wikipedia", 9) == 0x11E60398u);
    CHECK(zlib_adler32(1, NULL, 0) == 1u);
}

/* Parses a PNG written by png_write_rgb back into pixels; fails the test on any violation. */
static void check_png_roundtrip(const RgbImage *img, const char *path) {
    REQUIRE_OK(png_write_rgb(path, img));
    char tmp[1300];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    CHECK_MSG(access(tmp, F_OK) != 0, "temporary file %s left behind", tmp);
    size_t n;
    uint8_t *file = read_whole(path, &n);
    REQUIRE(file != NULL);
    static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    REQUIRE(n > 8 && memcmp(file, sig, 8) == 0);
    uint8_t *zdata = malloc(n);
    size_t zlen = 0, pos = 8;
    int n_chunks = 0, saw_iend = 0;
    while (pos + 12 <= n) {
        uint32_t len = be32(file + pos);
        REQUIRE(pos + 12 + len <= n);
        const uint8_t *type = file + pos + 4, *data = file + pos + 8;
        uint32_t crc = be32(data + len);
        CHECK_MSG(png_crc32(0, type, 4 + len) == crc, "chunk %.4s: bad CRC", (const char *)type);
        if (n_chunks == 0) {
            REQUIRE(memcmp(type, "IHDR", 4) == 0 && len == 13);
            CHECK(be32(data) == (uint32_t)img->width);
            CHECK(be32(data + 4) == (uint32_t)img->height);
            CHECK(data[8] == 8 && data[9] == 2 && data[10] == 0 && data[11] == 0 && data[12] == 0);
        } else if (memcmp(type, "IDAT", 4) == 0) {
            memcpy(zdata + zlen, data, len);
            zlen += len;
        } else if (memcmp(type, "IEND", 4) == 0) {
            CHECK(len == 0);
            saw_iend = 1;
            CHECK(pos + 12 == n); /* IEND is last */
        }
        n_chunks++;
        pos += 12 + len;
    }
    CHECK(saw_iend);
    /* zlib: CMF/FLG, stored deflate blocks, Adler-32 */
    REQUIRE(zlen >= 6);
    CHECK((zdata[0] & 0x0f) == 8);
    CHECK(((unsigned)zdata[0] << 8 | zdata[1]) % 31 == 0);
    CHECK((zdata[1] & 0x20) == 0);
    size_t row = (size_t)img->width * 3 + 1, raw_len = row * img->height;
    uint8_t *raw = malloc(raw_len + 65536);
    size_t got = 0, zp = 2;
    int final = 0;
    while (!final) {
        REQUIRE(zp + 5 <= zlen);
        uint8_t hdr = zdata[zp];
        final = hdr & 1;
        CHECK_MSG((hdr >> 1) == 0, "block type %d, want stored (0)", hdr >> 1);
        unsigned len = le16(zdata + zp + 1), nlen = le16(zdata + zp + 3);
        CHECK(len == (~nlen & 0xffff));
        REQUIRE(zp + 5 + len <= zlen && got + len <= raw_len);
        memcpy(raw + got, zdata + zp + 5, len);
        got += len;
        zp += 5 + len;
    }
    CHECK(got == raw_len);
    REQUIRE(zp + 4 == zlen);
    CHECK(be32(zdata + zp) == zlib_adler32(1, raw, raw_len));
    int64_t bad = 0;
    for (int y = 0; y < img->height; y++) {
        if (raw[y * row] != 0) bad++;
        if (memcmp(raw + y * row + 1, img->pixels + (size_t)y * img->width * 3, row - 1) != 0) bad++;
    }
    CHECK_MSG(bad == 0, "%lld rows differ", (long long)bad);
    free(raw);
    free(zdata);
    free(file);
}

TEST(image_io_png_roundtrip_small_and_multiblock) {
    char path[1300];
    RgbImage small;
    REQUIRE_OK(rgb_image_alloc(&small, 37, 5));
    fill_random_image(&small, 11);
    snprintf(path, sizeof path, "%s/small.png", test_tmpdir());
    check_png_roundtrip(&small, path);
    rgb_image_free(&small);
    /* 200 x 120 -> 72120 raw bytes: two stored blocks */
    RgbImage big;
    REQUIRE_OK(rgb_image_alloc(&big, 200, 120));
    fill_random_image(&big, 12);
    snprintf(path, sizeof path, "%s/big.png", test_tmpdir());
    check_png_roundtrip(&big, path);
    /* overwriting an existing file works too */
    fill_random_image(&big, 13);
    check_png_roundtrip(&big, path);
    rgb_image_free(&big);
}

TEST(image_io_png_unwritable_path_is_io_error) {
    RgbImage img;
    REQUIRE_OK(rgb_image_alloc(&img, 2, 2));
    char path[1300];
    snprintf(path, sizeof path, "%s/no/such/dir/x.png", test_tmpdir());
    CHECK(png_write_rgb(path, &img) == VFM_ERR_IO);
    rgb_image_free(&img);
}

/* ---- an independent GIF LZW decoder ---- */

typedef struct {
    const uint8_t *data;
    size_t n, bitpos;
} BitReader;

static int read_code(BitReader *br, int size) {
    if (br->bitpos + (size_t)size > br->n * 8) return -1;
    int code = 0;
    for (int i = 0; i < size; i++, br->bitpos++) code |= ((br->data[br->bitpos >> 3] >> (br->bitpos & 7)) & 1) << i;
    return code;
}

/* Returns the number of indices written, or -1 on a malformed stream; counts clear codes. */
static long lzw_decode(const uint8_t *in, size_t n, int min_code_size, uint8_t *out, size_t cap, int *n_clears) {
    static uint16_t prefix[4096];
    static uint8_t suffix[4096], first[4096];
    static uint16_t length[4096];
    const int clear = 1 << min_code_size, end = clear + 1;
    for (int i = 0; i < clear; i++) {
        suffix[i] = first[i] = (uint8_t)i;
        length[i] = 1;
    }
    BitReader br = {in, n, 0};
    int size = min_code_size + 1, next = clear + 2, prev = -1;
    size_t written = 0;
    *n_clears = 0;
    for (;;) {
        int code = read_code(&br, size);
        if (code < 0) return -1; /* ran out before the end code */
        if (code == clear) {
            size = min_code_size + 1;
            next = clear + 2;
            prev = -1;
            (*n_clears)++;
            continue;
        }
        if (code == end) {
            if ((br.bitpos + 7) / 8 != n) return -1; /* bytes after the end code */
            break;
        }
        if (prev < 0) {
            if (code >= clear) return -1;
            if (written >= cap) return -1;
            out[written++] = (uint8_t)code;
            prev = code;
            continue;
        }
        int add_first;
        if (code < next && code != clear && code != end) add_first = first[code];
        else if (code == next) add_first = first[prev];
        else return -1;
        if (next < 4096) {
            prefix[next] = (uint16_t)prev;
            suffix[next] = (uint8_t)add_first;
            first[next] = first[prev];
            length[next] = (uint16_t)(length[prev] + 1);
            next++;
            if (next == (1 << size) && size < 12) size++;
        }
        size_t len = length[code];
        if (written + len > cap) return -1;
        int c = code;
        for (size_t k = len; k-- > 0;) {
            out[written + k] = suffix[c];
            c = prefix[c];
        }
        written += len;
        prev = code;
    }
    return (long)written;
}

static void check_lzw_roundtrip(const uint8_t *indices, size_t n, int mcs, int min_clears) {
    uint8_t *codes;
    size_t n_codes;
    REQUIRE_OK(gif_lzw_encode(indices, n, mcs, &codes, &n_codes));
    uint8_t *back = malloc(n + 1);
    int clears;
    long got = lzw_decode(codes, n_codes, mcs, back, n + 1, &clears);
    CHECK_MSG(got == (long)n, "decoded %ld of %zu indices (mcs %d)", got, n, mcs);
    if (got == (long)n) CHECK_MSG(memcmp(back, indices, n) == 0, "decoded indices differ (n %zu, mcs %d)", n, mcs);
    CHECK_MSG(clears >= min_clears, "%d clear codes, want >= %d (n %zu)", clears, min_clears, n);
    free(back);
    free(codes);
}

TEST(image_io_lzw_roundtrip_small_alphabets_and_lengths) {
    uint8_t buf[3000];
    float u[3000];
    for (int mcs = 2; mcs <= 8; mcs++) {
        test_fill_uniform_f32(u, 3000, (uint64_t)mcs, 0.0f, (float)(1 << mcs));
        for (int i = 0; i < 3000; i++) buf[i] = (uint8_t)u[i];
        static const size_t lens[] = {0, 1, 2, 3, 5, 17, 255, 256, 1000, 3000};
        for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) check_lzw_roundtrip(buf, lens[k], mcs, 1);
    }
    /* every length up to 1500: some end exactly where the decoder widens its codes, so an end
     * code written at the old width is caught */
    test_fill_uniform_f32(u, 3000, 21, 0.0f, 4.0f);
    for (int i = 0; i < 3000; i++) buf[i] = (uint8_t)u[i];
    for (size_t len = 1; len <= 1500; len++) check_lzw_roundtrip(buf, len, 2, 1);
    /* one long run (the "KwKwK" case: a code used the moment it is defined) */
    memset(buf, 3, sizeof buf);
    check_lzw_roundtrip(buf, sizeof buf, 2, 1);
    /* low-entropy pattern that fills the table slowly */
    for (int i = 0; i < 3000; i++) buf[i] = (uint8_t)((i / 7 + i % 5) & 3);
    check_lzw_roundtrip(buf, sizeof buf, 2, 1);
}

TEST(image_io_lzw_table_reset_on_long_random_stream) {
    /* random bytes add about one table entry per byte, so 100000 indices fill the 4096-entry
     * table ~25 times; each fill must emit a clear code the decoder follows. */
    const size_t n = 100000;
    uint8_t *idx = malloc(n);
    float *u = malloc(n * sizeof *u);
    test_fill_uniform_f32(u, (int64_t)n, 77, 0.0f, 256.0f);
    for (size_t i = 0; i < n; i++) idx[i] = (uint8_t)u[i];
    check_lzw_roundtrip(idx, n, 8, 20);
    /* 4-symbol random stream: entries grow slower, still several resets */
    for (size_t i = 0; i < n; i++) idx[i] = (uint8_t)((int)u[i] & 3);
    check_lzw_roundtrip(idx, n, 2, 3);
    free(u);
    free(idx);
}

TEST(image_io_gif_palette_nearest_is_exact) {
    uint8_t pal[256][3];
    gif_palette(pal);
    CHECK(pal[0][0] == 0 && pal[0][1] == 0 && pal[0][2] == 0);
    CHECK(pal[215][0] == 255 && pal[215][1] == 255 && pal[215][2] == 255);
    CHECK(pal[36 * 5][0] == 255 && pal[36 * 5][1] == 0 && pal[36 * 5][2] == 0); /* pure red */
    for (int i = 0; i < 256; i++) CHECK_MSG(gif_palette_index(pal[i][0], pal[i][1], pal[i][2]) == i, "entry %d", i);
    float u[3 * 20000];
    test_fill_uniform_f32(u, 3 * 20000, 5, 0.0f, 256.0f);
    int wrong = 0;
    for (int k = 0; k < 20000; k++) {
        int r = (int)u[3 * k], g = (int)u[3 * k + 1], b = (int)u[3 * k + 2];
        if (k < 256) r = g = b = k; /* all greys too */
        int best_d = 1 << 30;
        for (int i = 0; i < 256; i++) {
            int d = (r - pal[i][0]) * (r - pal[i][0]) + (g - pal[i][1]) * (g - pal[i][1]) + (b - pal[i][2]) * (b - pal[i][2]);
            if (d < best_d) best_d = d;
        }
        int j = gif_palette_index((uint8_t)r, (uint8_t)g, (uint8_t)b);
        int dj = (r - pal[j][0]) * (r - pal[j][0]) + (g - pal[j][1]) * (g - pal[j][1]) + (b - pal[j][2]) * (b - pal[j][2]);
        if (dj != best_d) wrong++;
    }
    CHECK_MSG(wrong == 0, "%d colours not mapped to a nearest entry", wrong);
}

/* Parses a GIF written by gif_write_rgb; checks its structure and decodes every frame. */
TEST(image_io_gif_file_parses_and_decodes) {
    const int w = 160, h = 120, n_frames = 3; /* frame 2 is random: its LZW stream resets */
    RgbImage frames[3];
    uint8_t pal[256][3];
    gif_palette(pal);
    for (int f = 0; f < n_frames; f++) {
        REQUIRE_OK(rgb_image_alloc(&frames[f], w, h));
        if (f == 2) {
            fill_random_image(&frames[f], 99);
            continue;
        }
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++) {
                uint8_t *p = frames[f].pixels + ((size_t)y * w + x) * 3;
                int inside = (x - 40 - 20 * f) * (x - 40 - 20 * f) + (y - 60) * (y - 60) < 400;
                p[0] = inside ? 255 : 0;
                p[1] = inside ? (uint8_t)(100 * f) : 0;
                p[2] = (uint8_t)(x & 0xf0);
            }
    }
    char path[1300];
    snprintf(path, sizeof path, "%s/anim.gif", test_tmpdir());
    REQUIRE_OK(gif_write_rgb(path, frames, n_frames, 12, 0));
    size_t n;
    uint8_t *file = read_whole(path, &n);
    REQUIRE(file && n > 13 + 768);
    REQUIRE(memcmp(file, "GIF89a", 6) == 0);
    CHECK(le16(file + 6) == (unsigned)w && le16(file + 8) == (unsigned)h);
    CHECK(file[10] == 0xF7);
    CHECK(memcmp(file + 13, pal, 768) == 0);
    size_t pos = 13 + 768;
    REQUIRE(memcmp(file + pos, "\x21\xFF\x0BNETSCAPE2.0\x03\x01", 16) == 0);
    CHECK(le16(file + pos + 16) == 0); /* loop forever */
    CHECK(file[pos + 18] == 0);
    pos += 19;
    uint8_t *idx = malloc((size_t)w * h + 1), *codes = malloc(n);
    int frame = 0, total_clears = 0;
    while (pos < n && file[pos] != 0x3B) {
        REQUIRE(frame < n_frames);
        REQUIRE(memcmp(file + pos, "\x21\xF9\x04", 3) == 0);
        CHECK(le16(file + pos + 4) == 12);
        pos += 8;
        REQUIRE(file[pos] == 0x2C);
        CHECK(le16(file + pos + 1) == 0 && le16(file + pos + 3) == 0);
        CHECK(le16(file + pos + 5) == (unsigned)w && le16(file + pos + 7) == (unsigned)h);
        CHECK(file[pos + 9] == 0);
        int mcs = file[pos + 10];
        CHECK(mcs == 8);
        pos += 11;
        size_t n_codes = 0;
        while (pos < n && file[pos] != 0) {
            size_t len = file[pos];
            REQUIRE(pos + 1 + len <= n);
            memcpy(codes + n_codes, file + pos + 1, len);
            n_codes += len;
            pos += 1 + len;
        }
        pos++;
        int clears;
        long got = lzw_decode(codes, n_codes, mcs, idx, (size_t)w * h + 1, &clears);
        total_clears += clears;
        CHECK_MSG(got == (long)w * h, "frame %d: decoded %ld indices", frame, got);
        int wrong = 0;
        for (int64_t p = 0; p < (int64_t)w * h && got == (long)w * h; p++) {
            const uint8_t *px = frames[frame].pixels + 3 * p;
            if (idx[p] != gif_palette_index(px[0], px[1], px[2])) wrong++;
        }
        CHECK_MSG(wrong == 0, "frame %d: %d indices differ", frame, wrong);
        if (frame == 2) CHECK_MSG(clears >= 3, "random frame: %d clear codes", clears);
        frame++;
    }
    CHECK(frame == n_frames);
    CHECK(pos + 1 == n && file[pos] == 0x3B);
    CHECK(total_clears >= n_frames + 3);
    free(idx);
    free(codes);
    free(file);
    for (int f = 0; f < n_frames; f++) rgb_image_free(&frames[f]);
}

TEST(image_io_gif_rejects_mismatched_frames) {
    RgbImage frames[2];
    REQUIRE_OK(rgb_image_alloc(&frames[0], 4, 4));
    REQUIRE_OK(rgb_image_alloc(&frames[1], 4, 5));
    char path[1300];
    snprintf(path, sizeof path, "%s/bad.gif", test_tmpdir());
    CHECK(gif_write_rgb(path, frames, 2, 10, 0) == VFM_ERR_SHAPE);
    CHECK(access(path, F_OK) != 0);
    rgb_image_free(&frames[0]);
    rgb_image_free(&frames[1]);
}

TEST(image_io_grid_and_upscale) {
    RgbImage a, b, c;
    REQUIRE_OK(rgb_image_alloc(&a, 2, 3));
    REQUIRE_OK(rgb_image_alloc(&b, 3, 2));
    REQUIRE_OK(rgb_image_alloc(&c, 1, 1));
    memset(a.pixels, 10, 18);
    memset(b.pixels, 20, 18);
    memset(c.pixels, 30, 3);
    RgbImage tiles[3] = {a, b, c}, grid;
    const uint8_t gap_rgb[3] = {1, 2, 3};
    REQUIRE_OK(rgb_image_grid(tiles, 3, 2, 1, gap_rgb, &grid));
    /* cells 3 wide, 3 tall; 2 columns, 2 rows; gap 1 around and between */
    CHECK(grid.width == 2 * 3 + 3 && grid.height == 2 * 3 + 3);
#define AT(img, x, y, ch) ((img).pixels[((size_t)(y) * (img).width + (x)) * 3 + (ch)])
    CHECK(AT(grid, 0, 0, 0) == 1 && AT(grid, 0, 0, 1) == 2 && AT(grid, 0, 0, 2) == 3);
    CHECK(AT(grid, 1, 1, 0) == 10 && AT(grid, 2, 3, 0) == 10); /* a: x 1..2, y 1..3 */
    CHECK(AT(grid, 3, 1, 0) == 1);                             /* rest of a's cell: gap colour */
    CHECK(AT(grid, 5, 1, 0) == 20 && AT(grid, 7, 2, 0) == 20); /* b: x 5..7, y 1..2 */
    CHECK(AT(grid, 5, 3, 0) == 1);
    CHECK(AT(grid, 1, 5, 0) == 30 && AT(grid, 2, 5, 0) == 1); /* c at (1, 5) */
    CHECK(AT(grid, 5, 5, 0) == 1);                            /* empty fourth cell */
    RgbImage up;
    a.pixels[0] = 200; /* pixel (0,0) red channel */
    REQUIRE_OK(rgb_image_upscale(&a, 3, &up));
    CHECK(up.width == 6 && up.height == 9);
    CHECK(AT(up, 0, 0, 0) == 200 && AT(up, 2, 2, 0) == 200 && AT(up, 3, 0, 0) == 10 && AT(up, 0, 3, 0) == 10);
    CHECK(AT(up, 2, 2, 1) == 10);
#undef AT
    CHECK(rgb_image_upscale(&a, 0, &c) == VFM_ERR_USAGE);
    rgb_image_free(&up);
    rgb_image_free(&grid);
    rgb_image_free(&a);
    rgb_image_free(&b);
    rgb_image_free(&c);
}

TEST(image_io_from_planar_clamps_and_rounds) {
    /* [3, T=2, H=1, W=2], frame 1 */
    const float planar[12] = {0, 0, -0.5f, 2.0f, 0, 0, 0.5f, 1.0f, 0, 0, 1.0f / 255 * 0.49f, NAN};
    RgbImage img;
    REQUIRE_OK(rgb_image_alloc(&img, 2, 1));
    rgb_image_from_planar(&img, planar, 2, 1);
    CHECK(img.pixels[0] == 0 && img.pixels[3] == 255);  /* red: clamped */
    CHECK(img.pixels[1] == 128 && img.pixels[4] == 255); /* green: 0.5*255 = 127.5 -> 128 */
    CHECK(img.pixels[2] == 0 && img.pixels[5] == 0);     /* blue: rounds down; NaN -> 0 */
    rgb_image_free(&img);
}
