/* Test runner: runs every registered test (or those whose name contains an argument) in a
 * forked child, prints one line per test and ends with "N passed, N failed, N skipped".
 * Each child has a time limit (VFM_UNIT_TIMEOUT seconds, default 300): a test that hangs fails
 * naming itself and the limit. --no-fork runs in-process (for a debugger; no limit); --list prints
 * the names. */
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ops/ops.h"
#include "test.h"

typedef struct {
    const char *name, *file;
    void (*fn)(void);
} TestEntry;

static TestEntry g_tests[2048];
static int g_ntests;
static int g_failed, g_skipped;
static char g_skip_reason[512];
static char g_root[1024] = ".";
static char g_tmpdir[1200];

void test_register(const char *name, void (*fn)(void), const char *file) {
    if (g_ntests < (int)(sizeof g_tests / sizeof g_tests[0])) g_tests[g_ntests++] = (TestEntry){name, file, fn};
}

void test_fail(const char *file, int line, const char *fmt, ...) {
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (g_failed < 20) fprintf(stdout, "    %s:%d: %s\n", file, line, msg);
    g_failed++;
}

void test_skip(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_skip_reason, sizeof g_skip_reason, fmt, ap);
    va_end(ap);
    g_skipped = 1;
}

int test_failed(void) { return g_failed; }

const char *test_fixture(const char *relpath) {
    static _Thread_local char buf[4][1400];
    static _Thread_local int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/tests/fixtures/%s", g_root, relpath);
    return buf[k];
}

const char *test_tmpdir(void) {
    if (!g_tmpdir[0]) {
        snprintf(g_tmpdir, sizeof g_tmpdir, "/tmp/vfm_test_XXXXXX");
        if (!mkdtemp(g_tmpdir)) g_tmpdir[0] = 0;
    }
    return g_tmpdir;
}

static void remove_tree(const char *dir) {
    if (!dir[0]) return;
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

/* Runs one test; returns 0 pass, 1 fail, 2 skip. */
static int run_one(const TestEntry *t) {
    g_failed = 0;
    g_skipped = 0;
    g_skip_reason[0] = 0;
    g_tmpdir[0] = 0;
    ops_set_threads(1);
    t->fn();
    remove_tree(g_tmpdir);
    if (g_failed) return 1;
    return g_skipped ? 2 : 0;
}

int main(int argc, char **argv) {
    int fork_tests = 1, list = 0;
    const char *filters[64];
    int nfilters = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--no-fork") == 0) fork_tests = 0;
        else if (strcmp(argv[i], "--list") == 0) list = 1;
        else if (nfilters < 64) filters[nfilters++] = argv[i];
    }
    test_find_root(g_root, sizeof g_root);
    const char *limit_env = getenv("VFM_UNIT_TIMEOUT");
    int limit = limit_env && atoi(limit_env) > 0 ? atoi(limit_env) : 300;
    int passed = 0, failed = 0, skipped = 0;
    /* Children report their skip reason through this shared page. */
    char *shared = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    for (int i = 0; i < g_ntests; i++) {
        const TestEntry *t = &g_tests[i];
        int selected = nfilters == 0;
        for (int f = 0; f < nfilters; f++)
            if (strstr(t->name, filters[f]) || strstr(t->file, filters[f])) selected = 1;
        if (!selected) continue;
        if (list) { printf("%s  (%s)\n", t->name, t->file); continue; }
        int result;
        fflush(stdout);
        if (fork_tests) {
            shared[0] = 0;
            pid_t pid = fork();
            if (pid == 0) {
                alarm((unsigned)limit); /* SIGALRM ends a test that hangs */
                int r = run_one(t);
                if (r == 2) snprintf(shared, 4096, "%s", g_skip_reason);
                fflush(stdout);
                _exit(r);
            }
            int status = 0;
            waitpid(pid, &status, 0);
            if (WIFEXITED(status) && WEXITSTATUS(status) <= 2) result = WEXITSTATUS(status);
            else if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM) {
                printf("    %s: timed out after %d s (the limit per test; VFM_UNIT_TIMEOUT)\n", t->name, limit);
                result = 1;
            } else {
                printf("    crashed (%s %d)\n", WIFSIGNALED(status) ? "signal" : "exit",
                       WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
                result = 1;
            }
            if (result == 2) snprintf(g_skip_reason, sizeof g_skip_reason, "%s", shared);
        } else {
            result = run_one(t);
        }
        if (result == 0) { printf("ok    %s\n", t->name); passed++; }
        else if (result == 1) { printf("FAIL  %s  (%s)\n", t->name, t->file); failed++; }
        else { printf("skip  %s: %s\n", t->name, g_skip_reason); skipped++; }
    }
    if (!list) printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    return failed ? 1 : 0;
}
