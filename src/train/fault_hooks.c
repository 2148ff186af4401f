/* Test-only fault injection, compiled in only for the test build (see fault_hooks.h). */
#include "train/fault_hooks.h"

#include <stdlib.h>

const char *fault_hook_env(const char *name) {
#ifdef VFM_FAULT_HOOKS
    return getenv(name);
#else
    (void)name;
    return NULL;
#endif
}
