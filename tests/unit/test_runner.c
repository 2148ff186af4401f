/* The runner's own time limit (test_main.c): this binary, run on a test that hangs, fails it
 * naming the test and the limit, and goes on. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"

TEST(runner_fails_a_test_that_hangs) {
    if (getenv("VFM_UNIT_SELFTEST_HANG")) /* the inner run: hang */
        for (;;) pause();
    char exe[1024], cmd[1400];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    REQUIRE(n > 0);
    exe[n] = 0;
    /* the inner run's own bound: a runner that lost its limit fails this test instead of hanging it */
    snprintf(cmd, sizeof cmd, "VFM_UNIT_SELFTEST_HANG=1 VFM_UNIT_TIMEOUT=1 timeout 20 %s "
             "runner_fails_a_test_that_hangs 2>&1", exe);
    FILE *p = popen(cmd, "r");
    REQUIRE(p);
    char out[4096];
    size_t got = fread(out, 1, sizeof out - 1, p);
    out[got] = 0;
    int rc = pclose(p);
    CHECK_MSG(strstr(out, "runner_fails_a_test_that_hangs: timed out after 1 s (the limit per test") &&
                  strstr(out, "FAIL  runner_fails_a_test_that_hangs") && strstr(out, "0 passed, 1 failed, 0 skipped"),
              "%s", out);
    CHECK(rc != 0);
}
