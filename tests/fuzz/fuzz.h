/* Shared by the fuzz targets (one per reader, fuzz_NAME.c): quiet logging, a check that aborts
 * (so libFuzzer records the input as a crash) when a reader breaks its own contract, and a touch
 * of every byte a reader hands back (so ASan sees a view that runs past its buffer). */
#ifndef VFM_FUZZ_H
#define VFM_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/log.h"

#define FUZZ_CHECK(cond, ...)                                                  \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "fuzz check failed at %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                      \
            fprintf(stderr, "\n");                                             \
            abort();                                                           \
        }                                                                      \
    } while (0)

/* Reads every byte of [p, p + n); the sum keeps the reads from being optimised away. */
static inline uint64_t fuzz_touch(const void *p, size_t n) {
    const volatile uint8_t *b = p;
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i++) sum += b[i];
    return sum;
}

/* Readers report errors through vfm_fail and log_debug; keep the fuzzer's output to its own lines. */
static inline void fuzz_quiet(void) { log_set_level(LOG_ERROR); }

/* libFuzzer's initializer for a target that needs nothing else. */
#define FUZZ_QUIET_INITIALIZE                                 \
    int LLVMFuzzerInitialize(int *argc, char ***argv) {       \
        (void)argc, (void)argv;                               \
        fuzz_quiet();                                         \
        return 0;                                             \
    }

#endif
