/* Learning-rate schedules against their closed forms: Megatron's WSD (warmup, stable at the peak,
 * then exponential / linear / cosine / minus-sqrt annealing over the last lr_wsd_decay_iters of
 * the decay) read from the scheduler.* keys. */
#include <math.h>
#include <string.h>

#include "core/config.h"
#include "test.h"
#include "train/train_config.h"

static vfm_status wsd_config(OptimConfig *oc, const char *style) {
    char s[96];
    snprintf(s, sizeof s, "scheduler.lr_wsd_decay_style=%s", style);
    const char *ov[] = {"optimizer.lr=1.0", "optimizer.min_lr=0.1", "scheduler.lr_warmup_iters=10",
                        "scheduler.lr_warmup_init=0", "scheduler.lr_decay_iters=100", "scheduler.lr_decay_style=WSD",
                        "scheduler.lr_wsd_decay_iters=20", s, "train.train_iters=200"};
    Config *cfg;
    VFM_TRY(config_load(&cfg, NULL, ov, 9));
    vfm_status st = optim_config_from(oc, cfg);
    config_free(cfg);
    return st;
}

TEST(lr_schedule_wsd_matches_the_closed_form) {
    /* annealing from step 80 to 100; at step 90 (ratio 1/2) the coefficient is
     * exponential 2·0.5^½ − 1, linear ½, cosine ½, minus-sqrt 1 − √½; lr = 0.1 + 0.9·coeff */
    const char *styles[4] = {"exponential", "linear", "cosine", "minus_sqrt"};
    const double mid[4] = {2 * sqrt(0.5) - 1, 0.5, 0.5, 1 - sqrt(0.5)};
    const double quarter[4] = {2 * pow(0.5, 0.25) - 1, 0.75, 0.5 * (cos(M_PI / 4) + 1), 0.5};
    for (int k = 0; k < 4; k++) {
        OptimConfig oc;
        REQUIRE_OK(wsd_config(&oc, styles[k]));
        CHECK(oc.decay_style == LR_DECAY_WSD && oc.wsd_decay_iters == 20);
        const int64_t steps[] = {0, 5, 10, 50, 80, 85, 90, 100, 101, 150};
        const double want[] = {0.0, 0.5, 1.0, 1.0, 1.0, 0.1 + 0.9 * quarter[k], 0.1 + 0.9 * mid[k], 0.1, 0.1, 0.1};
        for (int i = 0; i < 10; i++) {
            double got = lr_at_step(&oc, steps[i]);
            CHECK_MSG(fabs(got - want[i]) < 1e-12, "%s step %lld: lr %.15g, expected %.15g", styles[k],
                      (long long)steps[i], got, want[i]);
        }
    }
}

TEST(lr_schedule_wsd_needs_its_decay_length) {
    const char *ov[] = {"scheduler.lr_decay_style=WSD"};
    Config *cfg;
    REQUIRE_OK(config_load(&cfg, NULL, ov, 1));
    OptimConfig oc;
    CHECK(optim_config_from(&oc, cfg) == VFM_ERR_USAGE);
    CHECK_MSG(strstr(vfm_last_error(), "scheduler.lr_wsd_decay_iters") != NULL, "%s", vfm_last_error());
    config_free(cfg);
}
