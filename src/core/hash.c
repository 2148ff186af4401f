/* FNV-1a + splitmix64 hashing; table-driven CRC-32. */
#include "hash.h"

#include <pthread.h>
#include <string.h>

#include "philox.h"

uint64_t hash_bytes64(const void *data, size_t n, uint64_t seed) {
    const unsigned char *p = data;
    uint64_t h = 0xcbf29ce484222325ull ^ seed;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return vfm_mix64(h);
}

uint64_t hash_string64(const char *s) { return hash_bytes64(s, strlen(s), 0); }

uint64_t hash_combine64(uint64_t a, uint64_t b) { return vfm_mix64(a ^ (b + 0x9e3779b97f4a7c15ull + (a << 6) + (a >> 2))); }

static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_table_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int b = 0; b < 8; b++) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
        crc_table[i] = c;
    }
}

uint32_t crc32_update(uint32_t crc, const void *data, size_t n) {
    pthread_once(&crc_once, crc_table_init);
    const uint32_t *table = crc_table;
    const unsigned char *p = data;
    crc = ~crc;
    for (size_t i = 0; i < n; i++) crc = table[(crc ^ p[i]) & 0xffu] ^ (crc >> 8);
    return ~crc;
}
