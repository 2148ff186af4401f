/* The test binary's allocator with failure on request (see alloc_fail.h). Defining malloc, calloc
 * and realloc here interposes them for the whole process; each passes to glibc's own. */
#include "alloc_fail.h"

#include <stdatomic.h>

extern void *__libc_malloc(size_t size);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *p, size_t size);

static atomic_size_t g_bytes;
static atomic_int g_left, g_refused;

void alloc_fail_when(size_t bytes, int count) {
    atomic_store(&g_refused, 0);
    atomic_store(&g_bytes, bytes);
    atomic_store(&g_left, count);
}

void alloc_fail_off(void) { atomic_store(&g_left, 0); }

int alloc_fail_refused(void) { return atomic_load(&g_refused); }

/* 1 when this request is to fail (takes one of the armed failures). */
static int refuse(size_t bytes) {
    if (atomic_load_explicit(&g_left, memory_order_relaxed) <= 0 || bytes != atomic_load(&g_bytes)) return 0;
    if (atomic_fetch_sub(&g_left, 1) <= 0) return 0;
    atomic_fetch_add(&g_refused, 1);
    return 1;
}

void *malloc(size_t size) { return refuse(size) ? NULL : __libc_malloc(size); }
void *calloc(size_t n, size_t size) { return refuse(n * size) ? NULL : __libc_calloc(n, size); }
void *realloc(void *p, size_t size) { return refuse(size) ? NULL : __libc_realloc(p, size); }
