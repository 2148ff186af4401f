/* No host round trip inside a training step (issue "The GPU path's defects …" §2): the host waits
 * for the device (core/host_reads.h counts the places, on the CPU too) only when it reads the
 * step's counters, once per log interval, and for checkpoints and validation. Two runs that differ
 * only by 10 more steps differ by exactly the reads of those steps' log intervals, whatever the
 * setup and the final checkpoint cost; a wait added to the step (a reduction read back, a loss
 * fetched per micro-batch, a synchronisation) adds 10 or 20 and fails this test. */
#include <stdio.h>

#include "core/host_reads.h"
#include "test.h"
#include "train_fixture.h"

/* The host reads of a tiny-mock run of `iters` steps (two micro-batches each), log_interval `log`. */
static uint64_t reads_of_run(const char *name, int iters, int log, char *report, size_t n) {
    char run[1300], it[64], li[64];
    snprintf(run, sizeof run, "%s/%s", test_tmpdir(), name);
    snprintf(it, sizeof it, "train.train_iters=%d", iters);
    snprintf(li, sizeof li, "logger.log_interval=%d", log);
    const char *extra[] = {it, li, "checkpoint.save_interval=0", "model.num_layers=1"};
    vfm_host_reads_reset();
    uint64_t before = vfm_host_reads();
    vfm_status s = train_tiny_mock(run, extra, 4);
    uint64_t after = vfm_host_reads();
    vfm_host_reads_report(report, n);
    CHECK_MSG(s == VFM_OK, "run %s: %s", name, vfm_last_error());
    return after - before;
}

TEST(train_step_waits_for_the_device_once_per_log_interval) {
    char r10[1024], r20[1024];
    for (int log = 5; log <= 10; log += 5) {
        uint64_t a = reads_of_run(log == 5 ? "a5" : "a10", 10, log, r10, sizeof r10);
        uint64_t b = reads_of_run(log == 5 ? "b5" : "b10", 20, log, r20, sizeof r20);
        int64_t extra = (int64_t)b - (int64_t)a, want = 10 / log;
        CHECK_MSG(extra == want,
                  "log_interval %d: 10 more steps waited for the device %lld times (want %lld: one read of the "
                  "counters per log interval); 20 steps: %s; 10 steps: %s",
                  log, (long long)extra, (long long)want, r20, r10);
    }
}
