/* Allocation failure on request (see alloc_fail.h): the switch and its counters. The allocator that
 * obeys it is tests/alloc_wrap.c, linked into build/vfm_tests only (not into the sanitizer builds
 * that take the unit test objects: AddressSanitizer must keep its own malloc). */
#include "alloc_fail.h"

#include <stdatomic.h>

static atomic_size_t g_bytes;
static atomic_int g_left, g_refused;

void alloc_fail_when(size_t bytes, int count) {
    atomic_store(&g_refused, 0);
    atomic_store(&g_bytes, bytes);
    atomic_store(&g_left, count);
}

void alloc_fail_off(void) { atomic_store(&g_left, 0); }

int alloc_fail_refused(void) { return atomic_load(&g_refused); }

int alloc_fail_take(size_t bytes) {
    if (atomic_load_explicit(&g_left, memory_order_relaxed) <= 0 || bytes != atomic_load(&g_bytes)) return 0;
    if (atomic_fetch_sub(&g_left, 1) <= 0) return 0;
    atomic_fetch_add(&g_refused, 1);
    return 1;
}
