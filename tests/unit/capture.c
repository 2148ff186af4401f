/* stdout/stderr capture for command-line tests (see capture.h). */
#include "capture.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "cli/commands.h"
#include "core/fileutil.h"
#include "test.h"

void capture_begin(Capture *c, int fd) {
    static int counter;
    fflush(stdout);
    fflush(stderr);
    c->fd = fd;
    snprintf(c->path, sizeof c->path, "%s/capture%d.txt", test_tmpdir(), counter++);
    c->saved = dup(fd);
    int f = open(c->path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(f, fd);
    close(f);
}

char *capture_end(Capture *c) {
    fflush(stdout);
    fflush(stderr);
    dup2(c->saved, c->fd);
    close(c->saved);
    char *text;
    if (read_file_all(c->path, &text, NULL) != VFM_OK) text = calloc(1, 1);
    unlink(c->path);
    return text;
}

int run_vfm(const char *const *args, int n, char **out, char **err) {
    char *argv[64];
    argv[0] = "vfm";
    for (int i = 0; i < n && i < 62; i++) argv[i + 1] = (char *)args[i];
    argv[n + 1] = NULL;
    Capture co, ce;
    capture_begin(&co, 1);
    capture_begin(&ce, 2);
    int rc = vfm_main(n + 1, argv);
    *err = capture_end(&ce);
    *out = capture_end(&co);
    return rc;
}
