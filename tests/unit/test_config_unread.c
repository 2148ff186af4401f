/* Keys a run does not use (docs/config.md): the set-up names every key the user set and never
 * read — a warning, or exit 2 for a key that gives the model its shape — and a config vfm wrote
 * (a run's config.yaml, checkpoint meta) does not count as the user setting every key: reading one
 * back warns about nothing the user did not set. */
#include <stdlib.h>
#include <string.h>

#include "capture.h"
#include "core/config.h"
#include "core/log.h"
#include "diffusion/sample_settings.h"
#include "test.h"
#include "train/resume_config.h"
#include "train/train_setup.h"

/* The set-up's stderr for a config (*err, malloc'd); its status. */
static vfm_status setup_text(Config *cfg, char **err) {
    TrainSetup su;
    Capture c;
    capture_begin(&c, 2);
    vfm_status s = train_setup_from_config(&su, cfg, 1);
    *err = capture_end(&c);
    return s;
}

TEST(config_unread_keys_the_user_set_are_named) {
    const char *ov[] = {"model.preset=tiny", "dataset.mock=true", "dataset.shuffle=false", "dataset.num_workers=2",
                        "sampler.rho=5", "diffusion.objective=flow"};
    Config *cfg;
    REQUIRE_OK(config_load(&cfg, NULL, ov, 6));
    char *err;
    REQUIRE_OK(setup_text(cfg, &err));
    /* real-data keys under the mock set: the generic line; an EDM sampler key under flow: its own */
    CHECK_MSG(strstr(err, "dataset.shuffle=false is set but this run does not use it") != NULL, "%s", err);
    CHECK_MSG(strstr(err, "dataset.num_workers=2 is set but this run does not use it") != NULL, "%s", err);
    CHECK_MSG(strstr(err, "sampler.rho applies to diffusion.objective=edm (ignored with flow)") != NULL, "%s", err);
    CHECK_MSG(strstr(err, "sampler.rho=5 is set") == NULL, "said twice: %s", err);
    CHECK(cfg_was_read(cfg, "dataset.shuffle")); /* said once: a second check is quiet */
    free(err);
    config_free(cfg);
}

TEST(config_unread_shape_keys_are_refused) {
    const char *ov[] = {"model.preset=tiny", "dataset.mock=true", "model.variant=nemo-adaln", "model.adaln_lora_dim=64"};
    Config *cfg;
    REQUIRE_OK(config_load(&cfg, NULL, ov, 4));
    char *err;
    CHECK(setup_text(cfg, &err) == VFM_ERR_USAGE);
    CHECK_MSG(strstr(vfm_last_error(), "model.adaln_lora_dim=64") && strstr(vfm_last_error(), "unset it"), "%s",
              vfm_last_error());
    free(err);
    config_free(cfg);
    /* the preset's value is not the user's: nemo-adaln on the tiny preset (adaln_lora_dim 32) runs */
    REQUIRE_OK(config_load(&cfg, NULL, ov, 3));
    CHECK_OK(setup_text(cfg, &err));
    free(err);
    config_free(cfg);
}

TEST(config_written_by_vfm_sets_nothing_of_the_users) {
    /* a flow run on the mock set with one key of the user's, written out as a run writes config.yaml */
    const char *ov[] = {"model.preset=tiny", "dataset.mock=true", "diffusion.objective=flow", "optimizer.lr=3e-4"};
    Config *cfg, *back;
    REQUIRE_OK(config_load(&cfg, NULL, ov, 4));
    char *yaml;
    REQUIRE_OK(config_to_yaml_string(cfg, &yaml));
    REQUIRE_OK(config_from_yaml_string(&back, yaml, "runs/x/config.yaml"));
    CHECK(cfg_is_set(back, "sampler.rho")); /* the file sets it ... */
    CHECK(!cfg_user_set(back, "sampler.rho")); /* ... to the value it had anyway */
    CHECK(cfg_user_set(back, "optimizer.lr") && cfg_user_set(back, "diffusion.objective"));
    char *err;
    REQUIRE_OK(setup_text(back, &err));
    CHECK_MSG(strstr(err, "warning") == NULL, "a saved config warned: %s", err);
    free(err);
    /* what vfm sample reads of it: quiet too */
    SampleSettings ss;
    Capture c;
    capture_begin(&c, 2);
    vfm_status s = sample_settings_from_config(&ss, back, OBJECTIVE_FLOW, 0);
    err = capture_end(&c);
    CHECK_OK(s);
    CHECK_MSG(strstr(err, "warning") == NULL, "vfm sample's settings warned: %s", err);
    free(err);
    /* the same value in a file of the user's: theirs, and it warns */
    Config *own;
    REQUIRE_OK(config_from_yaml_string(&own, "model:\n  preset: tiny\ndataset:\n  mock: true\ndiffusion:\n  objective: flow\n"
                                             "sampler:\n  rho: 7.0\n", "mine.yaml"));
    CHECK(cfg_user_set(own, "sampler.rho"));
    REQUIRE_OK(setup_text(own, &err));
    CHECK_MSG(strstr(err, "sampler.rho applies to diffusion.objective=edm") != NULL, "%s", err);
    free(err);
    free(yaml);
    config_free(own);
    config_free(back);
    config_free(cfg);
}

/* Resuming with another config (docs/checkpoints.md "Resuming with another config"): against the
 * checkpoint's config, a note key that differs gets one info line, a free key none, and a refused key
 * exits 2 naming both values. */
TEST(resume_config_notes_frees_and_refuses_by_class) {
    const char *was_ov[] = {"model.preset=tiny", "dataset.mock=true", "optimizer.lr=1e-3", "logger.log_interval=5"};
    Config *was, *now;
    REQUIRE_OK(config_load(&was, NULL, was_ov, 4));
    char *saved = NULL;
    REQUIRE_OK(config_to_yaml_string(was, &saved));
    const char *now_ov[] = {"model.preset=tiny", "dataset.mock=true", "optimizer.lr=2e-3", "logger.log_interval=7",
                            "train.train_iters=50"};
    REQUIRE_OK(config_load(&now, NULL, now_ov, 5));
    char *err;
    REQUIRE_OK(setup_text(now, &err));
    free(err);
    LogLevel level = log_get_level();
    log_set_level(LOG_INFO);
    Capture c;
    capture_begin(&c, 1); /* info lines go to stdout */
    vfm_status s = resume_config_check(now, saved, "ck", 1);
    err = capture_end(&c);
    log_set_level(level);
    CHECK_OK(s);
    CHECK_MSG(strstr(err, "resume: optimizer.lr is 0.002 in this run, 0.001 in the checkpoint") &&
                  strstr(err, "resume: train.train_iters is 50 in this run, 10000 in the checkpoint"),
              "%s", err);
    CHECK_MSG(strstr(err, "logger.log_interval") == NULL, "a free key is not said: %s", err);
    free(err);
    config_free(now);
    /* another width and objective: refused, both keys with both values */
    const char *other_ov[] = {"model.preset=tiny", "dataset.mock=true", "optimizer.lr=1e-3", "model.hidden_size=128",
                              "diffusion.objective=flow"};
    REQUIRE_OK(config_load(&now, NULL, other_ov, 5));
    REQUIRE_OK(setup_text(now, &err));
    free(err);
    CHECK(resume_config_check(now, saved, "ck", 0) == VFM_ERR_USAGE);
    CHECK_MSG(strstr(vfm_last_error(), "model.hidden_size (checkpoint 64, this run 128)") &&
                  strstr(vfm_last_error(), "diffusion.objective (checkpoint edm, this run flow)"),
              "%s", vfm_last_error());
    config_free(now);
    free(saved);
    config_free(was);
}
