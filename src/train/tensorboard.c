/* TensorBoard event-file writer: TFRecord framing and hand-encoded Event/Summary protobufs (see tensorboard.h). */
#include "tensorboard.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "core/bytebuf.h"
#include "core/fileutil.h"

uint32_t crc32c(uint32_t crc, const void *data, size_t n) {
    static uint32_t table[256];
    static int ready;
    if (!ready) {
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
            table[i] = c;
        }
        ready = 1;
    }
    const uint8_t *p = data;
    crc = ~crc;
    for (size_t i = 0; i < n; i++) crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
}

uint32_t tfrecord_masked_crc(const void *data, size_t n) {
    uint32_t crc = crc32c(0, data, n);
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

double tb_wall_time(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + 1e-6 * (double)tv.tv_usec;
}

/* ---- protobuf encoding into a growable buffer ---- */

static void put_varint(ByteBuf *b, uint64_t v) {
    uint8_t q[10];
    int n = 0;
    do {
        q[n] = (uint8_t)(v & 0x7f);
        v >>= 7;
        if (v) q[n] |= 0x80;
        n++;
    } while (v);
    bytebuf_put(b, q, (size_t)n);
}

static void put_tag(ByteBuf *b, int field, int wire) { put_varint(b, (uint64_t)(field << 3 | wire)); }

static void put_bytes_field(ByteBuf *b, int field, const void *data, size_t n) {
    put_tag(b, field, 2);
    put_varint(b, n);
    bytebuf_put(b, data, n);
}

static void put_le(ByteBuf *b, uint64_t v, int bytes) {
    uint8_t q[8];
    for (int i = 0; i < bytes; i++) q[i] = (uint8_t)(v >> (8 * i));
    bytebuf_put(b, q, (size_t)bytes);
}

/* Event{wall_time, step (omitted when 0), then `rest` (file_version or summary) as given} */
static void encode_event(ByteBuf *ev, double wall_time, int64_t step, const ByteBuf *rest) {
    uint64_t bits;
    memcpy(&bits, &wall_time, 8);
    if (wall_time != 0) {
        put_tag(ev, 1, 1);
        put_le(ev, bits, 8);
    }
    if (step != 0) {
        put_tag(ev, 2, 0);
        put_varint(ev, (uint64_t)step);
    }
    bytebuf_put(ev, rest->data, rest->len);
    if (rest->failed) ev->failed = 1;
}

static vfm_status write_record(TbWriter *w, const ByteBuf *data) {
    if (data->failed) return vfm_fail(VFM_ERR_NOMEM, "tensorboard: encoding an event");
    uint8_t head[12];
    uint64_t len = data->len;
    for (int i = 0; i < 8; i++) head[i] = (uint8_t)(len >> (8 * i));
    uint32_t c = tfrecord_masked_crc(head, 8);
    for (int i = 0; i < 4; i++) head[8 + i] = (uint8_t)(c >> (8 * i));
    uint32_t dc = tfrecord_masked_crc(data->data, data->len);
    uint8_t tail[4] = {(uint8_t)dc, (uint8_t)(dc >> 8), (uint8_t)(dc >> 16), (uint8_t)(dc >> 24)};
    if (fwrite(head, 1, 12, w->f) != 12 || fwrite(data->data, 1, data->len, w->f) != data->len ||
        fwrite(tail, 1, 4, w->f) != 4)
        return vfm_fail_at(VFM_ERR_IO, w->path, NULL, NULL, "cannot write: %s", strerror(errno));
    return VFM_OK;
}

/* An event around one Summary.Value (value holds its encoded fields). */
static vfm_status write_summary(TbWriter *w, int64_t step, double wall_time, const ByteBuf *value) {
    ByteBuf summary = {0}, event = {0};
    put_bytes_field(&summary, 1, value->data, value->len); /* Summary.value */
    ByteBuf rest = {0};
    put_bytes_field(&rest, 5, summary.data, summary.len);  /* Event.summary */
    if (summary.failed || value->failed) rest.failed = 1;
    encode_event(&event, wall_time, step, &rest);
    vfm_status s = write_record(w, &event);
    free(summary.data);
    free(rest.data);
    free(event.data);
    return s;
}

vfm_status tb_open_path(TbWriter *w, const char *path, double wall_time) {
    memset(w, 0, sizeof *w);
    snprintf(w->path, sizeof w->path, "%s", path);
    w->f = fopen(path, "wb");
    if (!w->f) return vfm_fail_at(VFM_ERR_IO, path, NULL, NULL, "cannot create: %s", strerror(errno));
    ByteBuf rest = {0}, event = {0};
    const char *version = "brain.Event:2";
    put_bytes_field(&rest, 3, version, strlen(version));
    encode_event(&event, wall_time, 0, &rest);
    vfm_status s = write_record(w, &event);
    free(rest.data);
    free(event.data);
    if (s == VFM_OK) s = tb_flush(w);
    return s;
}

vfm_status tb_open(TbWriter *w, const char *dir, double wall_time) {
    VFM_TRY(mkdir_p(dir));
    char host[256] = "localhost", name[512], path[1200];
    if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = 0;
    snprintf(name, sizeof name, "events.out.tfevents.%lld.%s.%d", (long long)wall_time, host, (int)getpid());
    path_join(path, sizeof path, dir, name);
    return tb_open_path(w, path, wall_time);
}

vfm_status tb_add_scalar(TbWriter *w, int64_t step, double wall_time, const char *tag, float value) {
    ByteBuf v = {0};
    put_bytes_field(&v, 1, tag, strlen(tag));
    uint32_t bits;
    memcpy(&bits, &value, 4);
    put_tag(&v, 2, 5); /* simple_value: a oneof member, written even when 0 */
    put_le(&v, bits, 4);
    vfm_status s = write_summary(w, step, wall_time, &v);
    free(v.data);
    return s;
}

vfm_status tb_add_image(TbWriter *w, int64_t step, double wall_time, const char *tag, const uint8_t *png, size_t len,
                        int height, int width) {
    ByteBuf img = {0}, v = {0};
    put_tag(&img, 1, 0);
    put_varint(&img, (uint64_t)height);
    put_tag(&img, 2, 0);
    put_varint(&img, (uint64_t)width);
    put_tag(&img, 3, 0);
    put_varint(&img, 3); /* colorspace: RGB */
    put_bytes_field(&img, 4, png, len);
    put_bytes_field(&v, 1, tag, strlen(tag));
    put_bytes_field(&v, 4, img.data, img.len);
    if (img.failed) v.failed = 1;
    vfm_status s = write_summary(w, step, wall_time, &v);
    free(img.data);
    free(v.data);
    return s;
}

vfm_status tb_flush(TbWriter *w) {
    if (w->f && fflush(w->f) != 0) return vfm_fail_at(VFM_ERR_IO, w->path, NULL, NULL, "cannot write: %s", strerror(errno));
    return VFM_OK;
}

void tb_close(TbWriter *w) {
    if (w->f) fclose(w->f);
    w->f = NULL;
}

vfm_status tfrecord_next(const uint8_t *buf, size_t size, size_t *pos, const uint8_t **data, size_t *len) {
    size_t p = *pos;
    if (size - p < 12) return vfm_fail(VFM_ERR_FORMAT, "tfrecord: truncated header at byte %zu", p);
    uint64_t n = 0;
    for (int i = 0; i < 8; i++) n |= (uint64_t)buf[p + i] << (8 * i);
    uint32_t lc = 0, dc = 0;
    for (int i = 0; i < 4; i++) lc |= (uint32_t)buf[p + 8 + i] << (8 * i);
    if (lc != tfrecord_masked_crc(buf + p, 8)) return vfm_fail(VFM_ERR_FORMAT, "tfrecord: bad length CRC at byte %zu", p);
    if (n > size - p - 12 || size - p - 12 - n < 4) return vfm_fail(VFM_ERR_FORMAT, "tfrecord: truncated record at byte %zu", p);
    for (int i = 0; i < 4; i++) dc |= (uint32_t)buf[p + 12 + n + i] << (8 * i);
    if (dc != tfrecord_masked_crc(buf + p + 12, n)) return vfm_fail(VFM_ERR_FORMAT, "tfrecord: bad data CRC at byte %zu", p);
    *data = buf + p + 12;
    *len = n;
    *pos = p + 12 + n + 4;
    return VFM_OK;
}
