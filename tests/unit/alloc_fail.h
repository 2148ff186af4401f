/* Out of memory on request, for the tests of vfm's out-of-memory paths: the test binary's malloc,
 * calloc and realloc are glibc's (alloc_fail.c), except that once armed, the next `count` calls
 * asking for exactly `bytes` bytes (calloc: n·size) return NULL. No production code is involved:
 * only this binary has the wrappers. Arm it around one call, on one thread. */
#ifndef VFM_TEST_ALLOC_FAIL_H
#define VFM_TEST_ALLOC_FAIL_H

#include <stddef.h>

void alloc_fail_when(size_t bytes, int count);
void alloc_fail_off(void);
/* Allocations refused since armed. */
int alloc_fail_refused(void);

#endif
