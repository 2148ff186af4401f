/* Hashes: 64-bit identities (sample uids from dataset, shard, key, epoch; parameter names) and the
 * CRC-32 checksum of zip and PNG. */
#ifndef VFM_HASH_H
#define VFM_HASH_H

#include <stddef.h>
#include <stdint.h>

/* FNV-1a over bytes, then a splitmix64 finaliser. */
uint64_t hash_bytes64(const void *data, size_t n, uint64_t seed);
uint64_t hash_string64(const char *s);
/* Combines two hashes (order matters). */
uint64_t hash_combine64(uint64_t a, uint64_t b);

/* CRC-32 (IEEE 802.3, reflected, as zip and PNG use it); start with crc = 0, chain by passing the
 * previous result. */
uint32_t crc32_update(uint32_t crc, const void *data, size_t n);

#endif
