/* The growable byte buffer: appends, the NUL kept after the data, long printf output. */
#include <string.h>

#include "core/bytebuf.h"
#include "test.h"

TEST(bytebuf_appends_keep_a_terminated_string) {
    ByteBuf b = {0};
    CHECK(strcmp(bytebuf_str(&b), "") == 0);
    bytebuf_puts(&b, "abc");
    bytebuf_put(&b, "\0x", 2); /* binary data: the length counts every byte */
    bytebuf_printf(&b, "%d-%s", 42, "z");
    REQUIRE(!b.failed);
    CHECK(b.len == 9);
    CHECK(memcmp(b.data, "abc\0x42-z", 9) == 0);
    CHECK(b.data[b.len] == 0);
    bytebuf_free(&b);
    CHECK(b.data == NULL && b.len == 0);
}

TEST(bytebuf_printf_longer_than_its_stack_buffer) {
    ByteBuf b = {0};
    char word[1001];
    memset(word, 'w', 1000);
    word[1000] = 0;
    for (int i = 0; i < 5; i++) bytebuf_printf(&b, "[%s]", word);
    REQUIRE(!b.failed);
    CHECK(b.len == 5 * 1002);
    CHECK(strlen(bytebuf_str(&b)) == b.len);
    CHECK(b.data[0] == '[' && b.data[1001] == ']' && b.data[1002] == '[');
    bytebuf_free(&b);
}
