/* The TensorBoard writer: CRC32C and the TFRecord mask against known answers, and an event file
 * written by vfm equal record by record to one written by TensorBoard's own EventFileWriter
 * (reference/tensorboard_fixture.py → tests/fixtures/tensorboard/python.tfevents), ignoring the
 * wall time and TensorBoard's source-metadata field (the writer's name). */
#include <stdlib.h>
#include <string.h>

#include "core/fileutil.h"
#include "data/media/image_io.h"
#include "test.h"
#include "train/tensorboard.h"

TEST(tensorboard_crc32c_known_answers) {
    CHECK(crc32c(0, "123456789", 9) == 0xE3069283u);
    uint8_t zeros[32] = {0};
    CHECK(crc32c(0, zeros, 32) == 0x8A9136AAu); /* RFC 3720 B.4 */
    CHECK(crc32c(crc32c(0, "1234", 4), "56789", 5) == 0xE3069283u);
    /* TFRecord's header of an 8-byte... length 0: masked CRC of eight zero bytes */
    uint32_t c = crc32c(0, zeros, 8);
    CHECK(tfrecord_masked_crc(zeros, 8) == ((c >> 15 | c << 17) + 0xa282ead8u));
}

/* The record's protobuf fields without field 1 (wall_time) and 10 (source_metadata). */
static size_t strip_fields(const uint8_t *d, size_t n, uint8_t *out) {
    size_t i = 0, k = 0;
    while (i < n) {
        size_t start = i;
        uint64_t tag = 0;
        for (int s = 0; i < n; s += 7) {
            tag |= (uint64_t)(d[i] & 0x7f) << s;
            if (!(d[i++] & 0x80)) break;
        }
        uint64_t len = 0;
        switch (tag & 7) {
        case 0:
            while (i < n && (d[i++] & 0x80)) {}
            break;
        case 1: i += 8; break;
        case 5: i += 4; break;
        case 2:
            for (int s = 0; i < n; s += 7) {
                len |= (uint64_t)(d[i] & 0x7f) << s;
                if (!(d[i++] & 0x80)) break;
            }
            i += len;
            break;
        default: return (size_t)-1;
        }
        if (i > n) return (size_t)-1;
        int field = (int)(tag >> 3);
        if (field != 1 && field != 10) {
            memcpy(out + k, d + start, i - start);
            k += i - start;
        }
    }
    return k;
}

TEST(tensorboard_event_file_matches_tensorboards_writer) {
    uint8_t px[18] = {255, 0, 0, 0, 255, 0, 0, 0, 255, 10, 20, 30, 200, 100, 50, 0, 0, 0};
    RgbImage img = {3, 2, px};
    uint8_t *png;
    size_t png_len;
    REQUIRE_OK(png_encode_rgb(&img, &png, &png_len));
    char *fixture_png;
    size_t fixture_png_len;
    REQUIRE_OK(read_file_all(test_fixture("tensorboard/pattern.png"), &fixture_png, &fixture_png_len));
    CHECK(png_len == fixture_png_len && memcmp(png, fixture_png, png_len) == 0);

    char path[1300];
    path_join(path, sizeof path, test_tmpdir(), "events.out.tfevents.test");
    TbWriter w;
    REQUIRE_OK(tb_open_path(&w, path, 1234.5));
    REQUIRE_OK(tb_add_scalar(&w, 0, 1234.6, "train/loss", 1.5f));
    REQUIRE_OK(tb_add_scalar(&w, 7, 1234.7, "train/lr", 0.0f));
    REQUIRE_OK(tb_add_scalar(&w, 300, 1234.8, "val/loss", -2.25e-3f));
    REQUIRE_OK(tb_add_image(&w, 300, 1234.9, "val/generation", png, png_len, 2, 3));
    tb_close(&w);

    char *ours, *theirs;
    size_t n_ours, n_theirs, p_ours = 0, p_theirs = 0;
    REQUIRE_OK(read_file_all(path, &ours, &n_ours));
    REQUIRE_OK(read_file_all(test_fixture("tensorboard/python.tfevents"), &theirs, &n_theirs));
    int records = 0;
    while (p_ours < n_ours || p_theirs < n_theirs) {
        const uint8_t *a, *b;
        size_t la, lb;
        REQUIRE_OK(tfrecord_next((const uint8_t *)ours, n_ours, &p_ours, &a, &la));
        REQUIRE_OK(tfrecord_next((const uint8_t *)theirs, n_theirs, &p_theirs, &b, &lb));
        uint8_t sa[512], sb[512];
        REQUIRE(la < sizeof sa && lb < sizeof sb);
        size_t ka = strip_fields(a, la, sa), kb = strip_fields(b, lb, sb);
        CHECK_MSG(ka == kb && ka != (size_t)-1 && memcmp(sa, sb, ka) == 0, "record %d differs (%zu vs %zu bytes)", records,
                  ka, kb);
        CHECK_MSG(la > 9 && a[0] == 0x09, "record %d does not start with the wall time", records);
        records++;
    }
    CHECK(records == 5);
    /* a flipped byte is caught by the data CRC */
    ours[20] ^= 1;
    size_t p = 0;
    const uint8_t *d;
    size_t l;
    CHECK(tfrecord_next((const uint8_t *)ours, n_ours, &p, &d, &l) == VFM_ERR_FORMAT);
    free(ours), free(theirs), free(png), free(fixture_png);
}
