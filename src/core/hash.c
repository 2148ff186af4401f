/* FNV-1a + splitmix64 hashing. */
#include "hash.h"

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
