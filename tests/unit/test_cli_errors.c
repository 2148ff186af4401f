/* Command-line mistakes a user makes, each named as the user wrote it: a bad number names its flag
 * (not an internal key, and not silently replaced), --resume names --resume, and a misspelt key is
 * answered with the key meant, also when spelt the Megatron or NeMo way. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capture.h"
#include "test.h"

static void expect(const char *const *args, int n, int want_rc, const char *want) {
    char *out, *err;
    int rc = run_vfm(args, n, &out, &err);
    CHECK_MSG(rc == want_rc && strstr(err, want), "vfm %s %s: exit %d, %s", args[0], args[1], rc, err);
    free(out);
    free(err);
}

TEST(cli_numbers_name_their_flag) {
    const char *num[] = {"sample", "--checkpoint", "/nonexistent", "--out", "/tmp/x", "--num", "-3"};
    expect(num, 7, 2, "vfm sample: --num -3: expected an integer in [1, 100000]");
    const char *steps[] = {"sample", "--checkpoint", "/nonexistent", "--out", "/tmp/x", "--steps", "abc"};
    expect(steps, 7, 2, "vfm sample: --steps abc: expected an integer");
    const char *guidance[] = {"sample", "--checkpoint", "/nonexistent", "--out", "/tmp/x", "--guidance", "7x"};
    expect(guidance, 7, 2, "--guidance 7x: expected a number");
    const char *seq[] = {"bench", "--preset", "tiny", "--seq", "abc"};
    expect(seq, 5, 2, "vfm bench: --seq abc: expected an integer");
}

TEST(cli_resume_names_resume) {
    char save[1300];
    snprintf(save, sizeof save, "checkpoint.save=%s/run", test_tmpdir());
    const char *args[] = {"train", "--config", test_fixture("../../configs/tiny-mock.yaml"), "--resume",
                          "/nonexistent/run", save, "train.device=cpu", "train.threads=1", "logger.level=error"};
    char *out, *err;
    int rc = run_vfm(args, 9, &out, &err);
    CHECK_MSG(rc == 2 && strstr(err, "--resume /nonexistent/run: no such directory") && !strstr(err, "checkpoint.load"),
              "exit %d: %s", rc, err);
    free(out);
    free(err);
}

TEST(cli_misspelt_keys_get_the_key_meant) {
    static const char *const cases[][2] = {
        {"optimizer.learning_rate=1e-4", "did you mean 'optimizer.lr'?"},
        {"trainer.max_steps=10", "did you mean 'train.train_iters'?"},
        {"model.micro_batch_size=1", "did you mean 'train.micro_batch_size'?"},
        {"optim.sched.warmup_steps=5", "did you mean 'scheduler.lr_warmup_iters'?"},
        {"modle.hidden_size=64", "did you mean 'model.hidden_size'?"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *args[] = {"config", "show", cases[i][0]};
        expect(args, 3, 2, cases[i][1]);
    }
}
