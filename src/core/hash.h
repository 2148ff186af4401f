/* 64-bit hashes for identities: sample uids (dataset, shard, key, epoch), parameter names. */
#ifndef VFM_HASH_H
#define VFM_HASH_H

#include <stddef.h>
#include <stdint.h>

/* FNV-1a over bytes, then a splitmix64 finaliser. */
uint64_t hash_bytes64(const void *data, size_t n, uint64_t seed);
uint64_t hash_string64(const char *s);
/* Combines two hashes (order matters). */
uint64_t hash_combine64(uint64_t a, uint64_t b);

#endif
