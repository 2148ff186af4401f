/* Test runner: runs every registered test (or those whose name contains an argument) in a
 * forked child, prints one line per test and ends with "N passed, N failed, N skipped".
 * --no-fork runs in-process (for a debugger); --list prints the names. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/philox.h"
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

static int close_report(const char *what, double maxerr, double maxref, int64_t worst, double gotv, double refv,
                        double atol, double rtol, const char *file, int line) {
    double bound = atol + rtol * maxref;
    if (maxerr <= bound) return 1;
    test_fail(file, line, "%s: max|got-ref| = %.3g > %.3g (atol %.1e + rtol %.1e * max|ref| %.3g) at [%lld]: got %.9g ref %.9g",
              what, maxerr, bound, atol, rtol, maxref, (long long)worst, gotv, refv);
    return 0;
}

int check_close_f32(const char *what, const float *got, const float *ref, int64_t n, double atol, double rtol,
                    const char *file, int line) {
    double maxerr = 0, maxref = 0;
    int64_t worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - (double)ref[i]);
        if (e != e) e = INFINITY; /* NaN counts as infinitely wrong */
        if (e > maxerr) { maxerr = e; worst = i; }
        if (fabs((double)ref[i]) > maxref) maxref = fabs((double)ref[i]);
    }
    return close_report(what, maxerr, maxref, worst, n ? got[worst] : 0, n ? ref[worst] : 0, atol, rtol, file, line);
}

int check_close_f64(const char *what, const double *got, const double *ref, int64_t n, double atol, double rtol,
                    const char *file, int line) {
    double maxerr = 0, maxref = 0;
    int64_t worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs(got[i] - ref[i]);
        if (e != e) e = INFINITY;
        if (e > maxerr) { maxerr = e; worst = i; }
        if (fabs(ref[i]) > maxref) maxref = fabs(ref[i]);
    }
    return close_report(what, maxerr, maxref, worst, n ? got[worst] : 0, n ? ref[worst] : 0, atol, rtol, file, line);
}

void test_fill_uniform_f32(float *x, int64_t n, uint64_t seed, float lo, float hi) {
    for (int64_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * philox_uniform_at(seed, 99, 0, 0, (uint64_t)i);
}

void test_fill_uniform_f64(double *x, int64_t n, uint64_t seed, double lo, double hi) {
    for (int64_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * (double)philox_uniform_at(seed, 99, 0, 0, (uint64_t)i);
}

static void find_root(void) {
    const char *env = getenv("VFM_ROOT");
    if (env) { snprintf(g_root, sizeof g_root, "%s", env); return; }
    char path[1024] = ".";
    for (int up = 0; up < 6; up++) {
        char probe[1100];
        snprintf(probe, sizeof probe, "%s/tests/fixtures", path);
        struct stat st;
        if (stat(probe, &st) == 0) { snprintf(g_root, sizeof g_root, "%s", path); return; }
        strncat(path, "/..", sizeof path - strlen(path) - 1);
    }
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
    find_root();
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
                int r = run_one(t);
                if (r == 2) snprintf(shared, 4096, "%s", g_skip_reason);
                fflush(stdout);
                _exit(r);
            }
            int status = 0;
            waitpid(pid, &status, 0);
            if (WIFEXITED(status) && WEXITSTATUS(status) <= 2) result = WEXITSTATUS(status);
            else {
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
