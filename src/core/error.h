/* Error values: every fallible function returns a vfm_status and leaves one message
 * (naming the file, key and value where there is one) for main to print once. */
#ifndef VFM_ERROR_H
#define VFM_ERROR_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    VFM_OK = 0,
    VFM_ERR_USAGE,       /* bad command line or config: the CLI exits 2 */
    VFM_ERR_IO,          /* a file could not be read or written */
    VFM_ERR_FORMAT,      /* malformed input data (shard, tensor file, json) */
    VFM_ERR_SHAPE,       /* tensors handed to an op do not fit together */
    VFM_ERR_NOMEM,       /* an allocation failed */
    VFM_ERR_UNSUPPORTED, /* valid request this build or device cannot do */
    VFM_ERR_NUMERIC,     /* NaN/Inf where a finite value is required */
    VFM_ERR_INTERNAL,    /* a bug: an invariant did not hold */
    VFM_ERR_REFUSED,     /* input asked for what vfm never does (a pickle naming a global off the
                          * unpickler's allow-list): refused, nothing run; a security event */
} vfm_status;

/* Sets the thread's message and returns code. */
vfm_status vfm_fail(vfm_status code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* As vfm_fail, prefixed "FILE: key 'KEY': value 'VALUE': " (any of the three may be NULL). */
vfm_status vfm_fail_at(vfm_status code, const char *file, const char *key, const char *value,
                       const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* Prepends "what: " to the current message (adds context on the way up). */
vfm_status vfm_fail_context(vfm_status code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
const char *vfm_last_error(void);
const char *vfm_status_name(vfm_status s);
void vfm_clear_error(void);
/* Process exit code for a status: 0 ok, 2 usage/config, 1 otherwise. */
int vfm_exit_code(vfm_status s);

#define VFM_TRY(expr)                       \
    do {                                    \
        vfm_status vfm_try_s_ = (expr);     \
        if (vfm_try_s_ != VFM_OK) return vfm_try_s_; \
    } while (0)

#ifdef __cplusplus
}
#endif
#endif
