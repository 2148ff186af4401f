/* A growable byte buffer for the encoders (protobuf events, PNG, the length-index cache, YAML and
 * JSON text): appends never report errors one by one — the first failed allocation sets `failed`
 * and later appends do nothing, so an encoder checks once at the end. A NUL byte is kept after
 * the last byte, so a buffer of text reads as a C string. */
#ifndef VFM_BYTEBUF_H
#define VFM_BYTEBUF_H

#include <stddef.h>
#include <stdint.h>

typedef struct ByteBuf {
    uint8_t *data;
    size_t len, cap;
    int failed;
} ByteBuf;

void bytebuf_put(ByteBuf *b, const void *src, size_t n);
void bytebuf_puts(ByteBuf *b, const char *s);
void bytebuf_printf(ByteBuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* data as text ("" when empty) */
const char *bytebuf_str(const ByteBuf *b);
void bytebuf_free(ByteBuf *b);

#endif
