/* OpenBLAS's kernels for this CPU (ops.h: ops_blas_pick_core).
 *
 * A DYNAMIC_ARCH OpenBLAS picks its kernels from the CPU model when the library loads. OpenBLAS
 * 0.3.21 (Debian 12's) does not know some newer Intel models (Sapphire Rapids, as a virtual
 * machine reports it) and falls back to its Prescott (SSE3) kernels: GEMMs 2-4x slower than the
 * CPU allows, which makes vfm's whole CPU step 2.5-3x slower (docs/bench.md). The kernels are
 * chosen before main() and only from OPENBLAS_CORETYPE, so the fix is to name the core the CPU
 * supports and run the same program again, once, before anything else has happened. */
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "ops.h"

char *openblas_get_corename(void);

void ops_blas_pick_core(char **argv) {
#if defined(__x86_64__)
    if (getenv("OPENBLAS_CORETYPE")) return; /* chosen by the user, or this is the second run */
    const char *core = openblas_get_corename();
    if (!core || strcasecmp(core, "prescott") != 0) return; /* OpenBLAS knew the CPU */
    const char *better = NULL;
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
        better = "SkylakeX";
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        better = "Haswell";
    if (!better || setenv("OPENBLAS_CORETYPE", better, 1) != 0) return;
    execv("/proc/self/exe", argv);
    unsetenv("OPENBLAS_CORETYPE"); /* exec failed: go on with the kernels OpenBLAS has */
#else
    (void)argv;
#endif
}
