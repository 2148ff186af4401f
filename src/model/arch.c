/* The architectures by variant and by name (arch.h). */
#include "model/arch.h"

#include <stdio.h>
#include <string.h>

/* In DiTVariant's order. */
static const DiTArch *const ARCHS[] = {&dit_arch_dfm, &dit_arch_nemo_adaln, &dit_arch_adaln_zero,
                                       &dit_arch_moviegen, &dit_arch_stdit, &dit_arch_wan};
enum { N_ARCHS = sizeof ARCHS / sizeof ARCHS[0] };

const DiTArch *dit_arch(DiTVariant v) { return (unsigned)v < N_ARCHS ? ARCHS[v] : NULL; }

const DiTArch *dit_arch_named(const char *name, char *names, size_t size) {
    const DiTArch *found = NULL;
    size_t at = 0;
    for (int i = 0; i < N_ARCHS; i++) {
        if (strcmp(ARCHS[i]->name, name) == 0) found = ARCHS[i];
        const char *sep = i == 0 ? "" : i + 1 < N_ARCHS ? ", " : " or ";
        if (names && at < size) at += (size_t)snprintf(names + at, size - at, "%s%s", sep, ARCHS[i]->name);
    }
    return found;
}
