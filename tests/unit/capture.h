/* Test helpers for command-line tests: capture what a piece of code writes to stdout/stderr, and
 * run `vfm ARGS...` in-process with both captured. */
#ifndef VFM_TEST_CAPTURE_H
#define VFM_TEST_CAPTURE_H

typedef struct {
    int fd, saved;
    char path[1400];
} Capture;

/* Redirects fd (1 or 2) into a temporary file until capture_end. */
void capture_begin(Capture *c, int fd);
/* Restores the fd and returns what was written (malloc'd, NUL-terminated). */
char *capture_end(Capture *c);
/* vfm_main("vfm", args...) with stdout in *out and stderr in *err (both malloc'd); its exit code. */
int run_vfm(const char *const *args, int n, char **out, char **err);

#endif
