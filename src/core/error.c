/* Thread-local error message storage behind vfm_status. */
#include "error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char g_message[2048];

vfm_status vfm_fail(vfm_status code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_message, sizeof g_message, fmt, ap);
    va_end(ap);
    return code;
}

vfm_status vfm_fail_at(vfm_status code, const char *file, const char *key, const char *value,
                       const char *fmt, ...) {
    size_t n = 0;
    g_message[0] = 0;
    if (file) n += (size_t)snprintf(g_message + n, sizeof g_message - n, "%s: ", file);
    if (key && n < sizeof g_message) n += (size_t)snprintf(g_message + n, sizeof g_message - n, "key '%s': ", key);
    if (value && n < sizeof g_message) n += (size_t)snprintf(g_message + n, sizeof g_message - n, "value '%s': ", value);
    if (n < sizeof g_message) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(g_message + n, sizeof g_message - n, fmt, ap);
        va_end(ap);
    }
    return code;
}

vfm_status vfm_fail_context(vfm_status code, const char *fmt, ...) {
    char prefix[512], old[sizeof g_message];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, g_message, sizeof old);
    snprintf(g_message, sizeof g_message, "%s: %s", prefix, old);
    return code;
}

const char *vfm_last_error(void) { return g_message; }
void vfm_clear_error(void) { g_message[0] = 0; }

const char *vfm_status_name(vfm_status s) {
    switch (s) {
    case VFM_OK: return "ok";
    case VFM_ERR_USAGE: return "usage error";
    case VFM_ERR_IO: return "I/O error";
    case VFM_ERR_FORMAT: return "format error";
    case VFM_ERR_SHAPE: return "shape error";
    case VFM_ERR_NOMEM: return "out of memory";
    case VFM_ERR_UNSUPPORTED: return "unsupported";
    case VFM_ERR_NUMERIC: return "numeric error";
    case VFM_ERR_INTERNAL: return "internal error";
    case VFM_ERR_REFUSED: return "refused";
    }
    return "error";
}

int vfm_exit_code(vfm_status s) { return s == VFM_OK ? 0 : s == VFM_ERR_USAGE ? 2 : 1; }
