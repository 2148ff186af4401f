/* Runner of the multi-rank tests (see mpi_test.h). Without a launcher it runs as one process and
 * never touches MPI. Rank 0 prints one line per test and ends with "N passed, N failed, N
 * skipped"; other ranks print only their failure lines, prefixed "[rank R]".
 *   vfm_mpi_tests [NAME-SUBSTRING ...]   run tests
 *   vfm_mpi_tests --list
 *   vfm_mpi_tests --fault exit|kill|abort   rank 1 dies while the others wait in collectives
 *                                            (tests/mpi/run.sh checks that the job ends) */
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ops/ops.h"
#include "mpi_test.h"

typedef struct {
    const char *name, *file;
    void (*fn)(void);
} TestEntry;

static TestEntry g_tests[512];
static int g_ntests, g_failed, g_skipped;
static char g_skip_reason[512], g_root[1024] = ".", g_base[256], g_tmpdir[1024];
static const char *g_current = "";
static LaunchInfo g_launch;
static Comm g_world;

const LaunchInfo *mt_launch(void) { return &g_launch; }
int mt_world(void) { return g_launch.world_size; }
int mt_rank(void) { return g_launch.rank; }
Comm *mt_world_comm(void) { return &g_world; }

int mt_world_in(const int *sizes) {
    for (; *sizes; sizes++)
        if (*sizes == g_launch.world_size) return 1;
    return 0;
}

void test_register(const char *name, void (*fn)(void), const char *file) {
    if (g_ntests < (int)(sizeof g_tests / sizeof g_tests[0])) g_tests[g_ntests++] = (TestEntry){name, file, fn};
}

void test_fail(const char *file, int line, const char *fmt, ...) {
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (g_failed < 20) printf("    [rank %d] %s:%d: %s\n", g_launch.rank, file, line, msg);
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
    static char buf[4][1400];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/tests/fixtures/%s", g_root, relpath);
    return buf[k];
}

/* The same directory on every rank: <base made by rank 0>/<test name>. */
const char *test_tmpdir(void) {
    if (!g_tmpdir[0]) {
        snprintf(g_tmpdir, sizeof g_tmpdir, "%s/%s", g_base, g_current);
        mkdir(g_tmpdir, 0755);
    }
    return g_tmpdir;
}

int mt_same_bits(const char *what, const void *got, const void *want, int64_t n, size_t elem, const char *file, int line) {
    const unsigned char *a = got, *b = want;
    for (int64_t i = 0; i < n; i++)
        if (memcmp(a + (size_t)i * elem, b + (size_t)i * elem, elem) != 0) {
            double ga = 0, wb = 0;
            if (elem == 4) ga = ((const float *)got)[i], wb = ((const float *)want)[i];
            if (elem == 8) ga = ((const double *)got)[i], wb = ((const double *)want)[i];
            test_fail(file, line, "%s: element %lld differs in its bits (got %.*g, want %.*g; %lld elements)", what,
                      (long long)i, elem == 8 ? 17 : 9, ga, elem == 8 ? 17 : 9, wb, (long long)n);
            return 0;
        }
    return 1;
}

static void on_alarm(int sig) {
    (void)sig;
    launch_abort(1, "multi-rank test %s did not finish within 120 s on this rank", g_current);
}

static void die(const char *what, vfm_status s) {
    fprintf(stderr, "vfm_mpi_tests: %s: %s: %s\n", what, vfm_status_name(s), vfm_last_error());
    if (launch_mpi_active()) launch_abort(1, "%s failed", what);
    exit(1);
}

/* --fault MODE: rank 1 dies; every other rank waits in collectives that would never complete. */
static int run_fault(const char *mode) {
    if (g_launch.world_size < 2) {
        fprintf(stderr, "--fault needs at least 2 ranks\n");
        return 2;
    }
    if (g_launch.rank == 1) {
        usleep(200 * 1000);
        if (strcmp(mode, "exit") == 0) {
            fprintf(stderr, "rank 1: exiting with status 3 in the middle of the run\n");
            exit(3);
        }
        if (strcmp(mode, "kill") == 0) raise(SIGKILL);
        launch_abort(3, "simulated failure: %s", "a collective returned an error on this rank");
    }
    float x[1024] = {0};
    for (int round = 0; round < 1000; round++) {
        vfm_status s = comm_all_reduce(&g_world, x, 1024, DT_F32, COMM_SUM_ORDERED);
        if (s != VFM_OK) launch_abort(4, "%s", vfm_last_error());
    }
    fprintf(stderr, "rank %d: the collectives completed although rank 1 is gone\n", g_launch.rank);
    return 0;
}

int main(int argc, char **argv) {
    int list = 0;
    const char *fault = NULL, *filters[64];
    int nfilters = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--list") == 0) list = 1;
        else if (strcmp(argv[i], "--fault") == 0 && i + 1 < argc) fault = argv[++i];
        else if (nfilters < 64) filters[nfilters++] = argv[i];
    }
    if (list) {
        for (int i = 0; i < g_ntests; i++) printf("%s  (%s)\n", g_tests[i].name, g_tests[i].file);
        return 0;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    vfm_status s = launch_init(&g_launch);
    if (s != VFM_OK) die("launch_init", s);
    ops_set_threads(1);
    test_find_root(g_root, sizeof g_root);
    int *everyone = malloc((size_t)g_launch.world_size * sizeof *everyone);
    for (int r = 0; r < g_launch.world_size; r++) everyone[r] = r;
    s = comm_create(&g_world, "world", COMM_BACKEND_MPI, everyone, g_launch.world_size);
    free(everyone);
    if (s != VFM_OK) die("world comm", s);
    if (fault) return run_fault(fault);

    /* one scratch directory for the job, named by rank 0 */
    char base[128] = {0};
    if (g_launch.rank == 0) {
        snprintf(base, sizeof base, "/tmp/vfm_mpi_XXXXXX");
        if (!mkdtemp(base)) base[0] = 0;
    }
    s = comm_broadcast(&g_world, base, sizeof base / 2, DT_BF16, 0);
    if (s != VFM_OK) die("broadcast", s);
    snprintf(g_base, sizeof g_base, "%s", base);
    signal(SIGALRM, on_alarm);

    int passed = 0, failed = 0, skipped = 0;
    for (int i = 0; i < g_ntests; i++) {
        const TestEntry *t = &g_tests[i];
        int selected = nfilters == 0;
        for (int f = 0; f < nfilters; f++)
            if (strstr(t->name, filters[f]) || strstr(t->file, filters[f])) selected = 1;
        if (!selected) continue;
        g_current = t->name;
        g_failed = g_skipped = 0;
        g_skip_reason[0] = g_tmpdir[0] = 0;
        alarm(120);
        t->fn();
        alarm(0);
        fflush(stdout);
        int verdict[2] = {g_failed > 0, g_skipped};
        s = comm_all_reduce(&g_world, verdict, 2, DT_I32, COMM_MAX);
        if (s != VFM_OK) die("verdict", s);
        if (g_launch.rank != 0) continue;
        if (verdict[0]) {
            printf("FAIL  %s  (%s)\n", t->name, t->file);
            failed++;
        } else if (verdict[1]) {
            printf("skip  %s: %s\n", t->name, g_skip_reason[0] ? g_skip_reason : "skipped on another rank");
            skipped++;
        } else {
            printf("ok    %s\n", t->name);
            passed++;
        }
    }
    comm_barrier(&g_world);
    if (g_launch.rank == 0) {
        if (g_base[0]) {
            char cmd[400];
            snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_base);
            if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_base);
        }
        printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    }
    comm_free(&g_world);
    launch_finalize();
    return failed ? 1 : 0;
}
