/* Out of memory on request, for the tests of vfm's out-of-memory paths: build/vfm_tests's malloc,
 * calloc and realloc are glibc's (tests/alloc_wrap.c), except that once armed, the next `count`
 * calls asking for exactly `bytes` bytes (calloc: n·size) return NULL. No production code is
 * involved: only that binary has the wrappers. Arm it around one call, on one thread. */
#ifndef VFM_TEST_ALLOC_FAIL_H
#define VFM_TEST_ALLOC_FAIL_H

#include <stddef.h>

void alloc_fail_when(size_t bytes, int count);
void alloc_fail_off(void);
/* Allocations refused since armed. */
int alloc_fail_refused(void);
/* The wrappers ask: 1 when this request of `bytes` is to fail (it takes one armed failure). */
int alloc_fail_take(size_t bytes);

#endif
