/* A quiet one-thread run of the tiny mock config (see train_fixture.h). */
#include "train_fixture.h"

#include <stdio.h>

#include "test.h"
#include "train/trainer.h"

vfm_status train_tiny_mock(const char *run, const char *const *extra, int n_extra) {
    const char *ov[48];
    char save[1300];
    snprintf(save, sizeof save, "checkpoint.save=%s", run);
    int n = 0;
    ov[n++] = save;
    ov[n++] = "logger.level=error";
    ov[n++] = "train.threads=1";
    ov[n++] = "train.device=cpu"; /* the CPU tests of the trainer (tests/e2e/gpu_train.sh runs the GPU) */
    for (int i = 0; i < n_extra && n < 48; i++) ov[n++] = extra[i];
    TrainOptions opt = {test_fixture("../../configs/tiny-mock.yaml"), ov, n, NULL, NULL, NULL};
    return train_run(&opt);
}
