/* build/vfm_tests's malloc, calloc and realloc: glibc's, unless tests/unit/alloc_fail.h armed a
 * failure for this size. Defining them here interposes them for the whole process. Linked into
 * build/vfm_tests only (the Makefile), never into a sanitizer build. */
#include <stddef.h>

#include "unit/alloc_fail.h"

extern void *__libc_malloc(size_t size);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *p, size_t size);

void *malloc(size_t size) { return alloc_fail_take(size) ? NULL : __libc_malloc(size); }
void *calloc(size_t n, size_t size) { return alloc_fail_take(n * size) ? NULL : __libc_calloc(n, size); }
void *realloc(void *p, size_t size) { return alloc_fail_take(size) ? NULL : __libc_realloc(p, size); }
