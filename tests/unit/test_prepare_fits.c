/* What vfm prepare writes fits a model out of the box: it prints (and writes in vfm_dataset.json)
 * the keys vfm train needs, and vfm data inspect judges a set by them when given no config (not by
 * the default model's 16 channels); inspect takes a metadataset YAML as train and bench do; a
 * split ratio that leaves a part without shards is said. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capture.h"
#include "core/fileutil.h"
#include "test.h"

TEST(prepare_prints_the_keys_that_fit_and_inspect_judges_by_them) {
    char out_dir[1300], meta[1400];
    snprintf(out_dir, sizeof out_dir, "%s/syn", test_tmpdir());
    const char *prep[] = {"prepare", "synthetic", "--out", out_dir, "--images", "12", "--videos", "2"};
    char *out, *err;
    REQUIRE(run_vfm(prep, 8, &out, &err) == 0);
    CHECK_MSG(strstr(out, "train on it with: vfm train --config configs/demo.yaml dataset.path=") &&
                  strstr(out, " model.in_channels=3 model.out_channels=3 model.crossattn_emb_size=64 model.patch_spatial=2") &&
                  strstr(out, " dataset.task_encoder_seq_length="), "%s", out);
    free(out), free(err);
    /* no config: judged by its own description, every sample usable (exit 0) */
    const char *insp[] = {"data", "inspect", out_dir};
    int rc = run_vfm(insp, 3, &out, &err);
    CHECK_MSG(rc == 0 && strstr(out, "judged by the dataset's own description") && strstr(out, "14 usable under this config"),
              "exit %d: %s", rc, out);
    free(out), free(err);
    /* a config still wins: the default model's 16 channels refuse every sample */
    char cfg_path[1400];
    snprintf(cfg_path, sizeof cfg_path, "%s/model.yaml", test_tmpdir());
    const char *model_yaml = "model:\n  hidden_size: 64\n";
    REQUIRE_OK(write_file_atomic(cfg_path, model_yaml, strlen(model_yaml)));
    const char *insp_cfg[] = {"data", "inspect", out_dir, "--config", cfg_path};
    rc = run_vfm(insp_cfg, 5, &out, &err);
    CHECK_MSG(rc == 1 && strstr(out, "0 usable under this config") && strstr(out, "judged by "), "exit %d: %s", rc, out);
    free(out), free(err);
    /* a metadataset YAML naming it */
    snprintf(meta, sizeof meta, "%s/meta.yaml", test_tmpdir());
    char yaml[2000];
    int len = snprintf(yaml, sizeof yaml, "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n"
                       "    blend:\n      - weight: 1\n        path: %s\n", out_dir);
    REQUIRE_OK(write_file_atomic(meta, yaml, (size_t)len));
    const char *insp_meta[] = {"data", "inspect", meta};
    rc = run_vfm(insp_meta, 3, &out, &err);
    CHECK_MSG(rc == 0 && strstr(out, "metadataset ") && strstr(out, "1 dataset") && strstr(out, "14 usable"), "exit %d: %s%s",
              rc, out, err);
    free(out), free(err);
    /* one shard cut 8,1,1 by shard: the empty parts are said */
    const char *index[] = {"data", "index", out_dir, "--split", "8,1,1"};
    rc = run_vfm(index, 5, &out, &err);
    CHECK_MSG(rc == 0 && strstr(err, "warning: --split 8,1,1: the train part is empty") && strstr(out, "wrote split.yaml"),
              "exit %d: %s%s", rc, out, err);
    free(out), free(err);
}
