/* The trainer with every objective and its training-time feedback: flow matching and DDPM (with a
 * learned variance) learn the mock set; validation at the right steps (metrics, files, TensorBoard)
 * leaves the weights bit for bit as without it; checkpoint.save null writes nothing; keys this
 * version cannot honour are refused with a usage error naming them. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/fileutil.h"
#include "core/log.h"
#include "capture.h"
#include "data_fixture.h"
#include "test.h"
#include "train/tensorboard.h"
#include "train/trainer.h"
#include "train_fixture.h"

/* Mean loss of metrics lines [from, to) (training lines only). */
static double mean_loss(const char *run, int from, int to, int *val_lines, int *val_steps) {
    char path[1300], line[2048];
    path_join(path, sizeof path, run, "metrics.jsonl");
    FILE *f = fopen(path, "r");
    if (!f) return NAN;
    double sum = 0;
    int n = 0, k = 0;
    if (val_lines) *val_lines = 0;
    while (fgets(line, sizeof line, f)) {
        const char *l = strstr(line, "\"loss\": "), *v = strstr(line, "\"val_loss\": ");
        if (v && val_lines) val_steps[(*val_lines)++] = atoi(strstr(line, "\"step\": ") + 8);
        if (!l) continue;
        if (k >= from && k < to) sum += strtod(l + 8, NULL), n++;
        k++;
    }
    fclose(f);
    return n ? sum / n : NAN;
}

TEST(trainer_flow_matching_learns_the_mock_set) {
    char run[1200];
    path_join(run, sizeof run, test_tmpdir(), "flow");
    const char *extra[] = {"diffusion.objective=flow", "train.train_iters=150", "checkpoint.save_interval=0"};
    REQUIRE_OK(train_tiny_mock(run, extra, 3));
    double first = mean_loss(run, 0, 20, NULL, NULL), last = mean_loss(run, 130, 150, NULL, NULL);
    /* the velocity target ε − x0 of unmemorised N(0,1) mock latents has variance 2: the loss falls
     * more slowly than EDM's (0.82 of the start after 150 steps) */
    CHECK_MSG(last < 0.87 * first, "flow: mean loss of the last 20 steps %.4f, of the first 20 %.4f", last, first);
}

TEST(trainer_ddpm_with_learned_sigma_learns_the_mock_set) {
    char run[1200];
    path_join(run, sizeof run, test_tmpdir(), "ddpm");
    const char *extra[] = {"diffusion.objective=ddpm", "model.out_channels=8", "train.train_iters=150",
                           "checkpoint.save_interval=0"};
    REQUIRE_OK(train_tiny_mock(run, extra, 4));
    double first = mean_loss(run, 0, 20, NULL, NULL), last = mean_loss(run, 130, 150, NULL, NULL);
    CHECK_MSG(last < 0.7 * first, "ddpm: mean loss of the last 20 steps %.4f, of the first 20 %.4f", last, first);
}

/* The bytes of the TensorBoard event file under dir (0), or -1 when there is none. */
static int tb_read_events(const char *dir, char **buf, size_t *size) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    struct dirent *e;
    char path[1400] = "";
    while ((e = readdir(d)))
        if (strstr(e->d_name, "tfevents")) path_join(path, sizeof path, dir, e->d_name);
    closedir(d);
    return path[0] && read_file_all(path, buf, size) == VFM_OK ? 0 : -1;
}

/* Tags of every summary value in a TensorBoard event file, and the count of image values. */
static int tb_tags(const char *dir, char tags[][64], int max, int *images) {
    char *buf;
    size_t size, pos = 0;
    if (tb_read_events(dir, &buf, &size)) return -1;
    int n = 0;
    *images = 0;
    const uint8_t *data;
    size_t len;
    while (pos < size && tfrecord_next((const uint8_t *)buf, size, &pos, &data, &len) == VFM_OK) {
        /* Event.summary (field 5) -> Summary.value (1) -> Value.tag (1), image (4) */
        for (size_t i = 0; i + 4 < len; i++) {
            if (data[i] != 0x2a) continue;
            const uint8_t *v = data + i + 2 + (data[i + 1] & 0x80 ? 1 : 0);
            if (v[0] != 0x0a) continue;
            const uint8_t *val = v + 2 + (v[1] & 0x80 ? 1 : 0);
            if (val[0] != 0x0a || n >= max) continue;
            snprintf(tags[n], 64, "%.*s", val[1], (const char *)val + 2);
            if (val[2 + val[1]] == 0x22) (*images)++;
            n++;
            break;
        }
    }
    free(buf);
    return n;
}

TEST(trainer_validation_writes_losses_files_and_tensorboard_and_changes_no_weight) {
    char with[1200], without[1200];
    path_join(with, sizeof with, test_tmpdir(), "with");
    path_join(without, sizeof without, test_tmpdir(), "without");
    /* the run ends on a validation step (6): its line must not come again at the run's end */
    const char *a[] = {"train.train_iters=6", "checkpoint.save_interval=0", "train.eval_interval=3", "train.eval_iters=2",
                       "model.val_generation_num_steps=3", "logger.level=info", "logger.log_interval=5"};
    const char *b[] = {"train.train_iters=6", "checkpoint.save_interval=0", "train.eval_interval=0"};
    Capture c;
    capture_begin(&c, 1);
    vfm_status s = train_tiny_mock(with, a, 7);
    char *log = capture_end(&c);
    REQUIRE_OK(s);
    /* each validation said once (the last one, at the run's last step, too) */
    int said[8] = {0};
    for (const char *p = strstr(log, "validation after step "); p; p = strstr(p + 1, "validation after step "))
        said[atoi(p + 22) & 7]++;
    CHECK_MSG(said[3] == 1 && said[6] == 1 && said[0] + said[1] + said[2] + said[4] + said[5] + said[7] == 0, "%s", log);
    free(log);
    REQUIRE_OK(train_tiny_mock(without, b, 3));
    char pa[1400], pb[1400];
    path_join(pa, sizeof pa, with, "iter_0000006/model.safetensors");
    path_join(pb, sizeof pb, without, "iter_0000006/model.safetensors");
    char *da, *db;
    size_t na, nb;
    REQUIRE_OK(read_file_all(pa, &da, &na));
    REQUIRE_OK(read_file_all(pb, &db, &nb));
    CHECK_MSG(na == nb && memcmp(da, db, na) == 0, "validation changed the trained weights");
    free(da), free(db);
    /* validation after steps 3 and 6 (metrics lines carry the index of the step they follow) */
    int n_val = 0, val_steps[8];
    mean_loss(with, 0, 1, &n_val, val_steps);
    CHECK_MSG(n_val == 2 && val_steps[0] == 2 && val_steps[1] == 5, "%d validation lines", n_val);
    for (int k = 3; k <= 6; k += 3) {
        char f[1400];
        snprintf(f, sizeof f, "%s/validation_generation/step=%d_rank=0.npy", with, k);
        CHECK_MSG(path_exists(f), "missing %s", f);
    }
    /* the same loss both times: the same data and draws (the model changed in between, so not equal) */
    char tb[1400], tags[64][64];
    path_join(tb, sizeof tb, with, "tb_logs");
    int images = 0, n = tb_tags(tb, tags, 64, &images);
    int loss = 0, val = 0, lr = 0, grad = 0;
    for (int i = 0; i < n; i++) {
        loss += strcmp(tags[i], "train/loss") == 0;
        val += strcmp(tags[i], "val/loss") == 0;
        lr += strcmp(tags[i], "train/lr") == 0;
        grad += strcmp(tags[i], "train/grad_norm") == 0;
    }
    CHECK_MSG(loss == 6 && lr == 6 && grad == 6 && val == 2, "tensorboard: %d loss, %d lr, %d grad norm, %d val values",
              loss, lr, grad, val);
    CHECK(images == 0); /* mock latents are no pictures */
}

/* Every value of one scalar tag in the TensorBoard event file under dir, in order: Summary.value
 * holds the tag (field 1) and then simple_value (field 2, a float: tag byte 0x15). */
static int tb_scalars(const char *dir, const char *tag, float *out, int max) {
    char *buf;
    size_t size, pos = 0, tl = strlen(tag);
    if (tb_read_events(dir, &buf, &size)) return -1;
    int n = 0;
    const uint8_t *data;
    size_t len;
    while (pos < size && tfrecord_next((const uint8_t *)buf, size, &pos, &data, &len) == VFM_OK)
        for (size_t i = 0; i + tl + 7 <= len && n < max; i++)
            if (data[i] == 0x0a && data[i + 1] == tl && !memcmp(data + i + 2, tag, tl) && data[i + 2 + tl] == 0x15) {
                memcpy(&out[n++], data + i + 3 + tl, 4);
                break;
            }
    free(buf);
    return n;
}

/* The text of the field of a log line that ends just before `unit` (" samples/s"). */
static int rate_field(const char *line, const char *unit, char *out, size_t n) {
    const char *u = strstr(line, unit), *b = u;
    if (!u) return 0;
    while (b > line && b[-1] != ' ') b--;
    snprintf(out, n, "%.*s", (int)(u - b), b);
    return 1;
}

/* The log line itself prints its rates through log_rate_text (log_rates_keep_their_digits): each
 * rate's text is log_rate_text of the value TensorBoard got for that step (a float: within its
 * rounding). A line printing "%.1f samples/s" or "%.3f TFLOP/s" fails whatever the machine's speed,
 * unless every rate of every step falls where both formats agree (samples/s in [10, 100), TFLOP/s in
 * [0.1, 1)). */
TEST(trainer_log_line_rates_keep_their_digits) {
    char run[1200];
    path_join(run, sizeof run, test_tmpdir(), "rates");
    const char *extra[] = {"train.train_iters=6", "checkpoint.save_interval=0", "logger.level=info", "logger.log_interval=1"};
    Capture c;
    capture_begin(&c, 1);
    vfm_status s = train_tiny_mock(run, extra, 4);
    char *log = capture_end(&c);
    REQUIRE_OK(s);
    char tb[1400];
    path_join(tb, sizeof tb, run, "tb_logs");
    static const char *const tags[3] = {"train/samples_per_second", "train/tokens_per_second", "train/tflops"};
    static const char *const units[3] = {" samples/s", " tokens/s", " TFLOP/s"};
    float v[3][8];
    for (int k = 0; k < 3; k++) CHECK_MSG(tb_scalars(tb, tags[k], v[k], 8) == 6, "%s: not 6 values", tags[k]);
    int lines = 0;
    for (const char *p = strstr(log, "step "); p && lines < 6; p = strstr(p + 1, "step ")) {
        if (atoi(p + 5) != lines + 1 || !strstr(p, " samples/s")) continue;
        char line[600];
        snprintf(line, sizeof line, "%.*s", (int)strcspn(p, "\n"), p);
        for (int k = 0; k < 3; k++) {
            char text[64] = "", want[3][32];
            rate_field(line, units[k], text, sizeof text);
            log_rate_text((double)v[k][lines] * (1 - 1e-6), want[0], sizeof want[0]);
            log_rate_text((double)v[k][lines], want[1], sizeof want[1]);
            log_rate_text((double)v[k][lines] * (1 + 1e-6), want[2], sizeof want[2]);
            CHECK_MSG(!strcmp(text, want[0]) || !strcmp(text, want[1]) || !strcmp(text, want[2]),
                      "step %d:%s printed '%s', log_rate_text of TensorBoard's %.9g gives '%s'", lines + 1, units[k], text,
                      (double)v[k][lines], want[1]);
        }
        lines++;
    }
    CHECK_MSG(lines == 6, "%d step lines: %s", lines, log);
    free(log);
}

TEST(trainer_checkpoint_save_null_writes_nothing) {
    char dir[1200];
    path_join(dir, sizeof dir, test_tmpdir(), "nosave");
    REQUIRE_OK(mkdir_p(dir));
    char config[4096];
    REQUIRE(realpath(test_fixture("../../configs/tiny-mock.yaml"), config));
    REQUIRE(chdir(dir) == 0); /* a forked test: the old default runs/default would appear here */
    const char *ov[] = {"checkpoint.save=null", "logger.level=error", "train.threads=1", "train.train_iters=3",
                        "train.eval_interval=2", "train.eval_iters=1", "model.val_generation_num_steps=2", "train.device=cpu"};
    TrainOptions opt = {config, ov, 8, NULL, NULL, NULL};
    REQUIRE_OK(train_run(&opt));
    DIR *d = opendir(".");
    REQUIRE(d);
    int entries = 0;
    for (struct dirent *e; (e = readdir(d));) entries += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    CHECK_MSG(entries == 0, "%d files or directories written with checkpoint.save null", entries);
    TrainOptions resume = {config, ov, 8, "auto", NULL, NULL};
    CHECK(train_run(&resume) == VFM_ERR_USAGE);
    CHECK_MSG(strstr(vfm_last_error(), "checkpoint.save") != NULL, "%s", vfm_last_error());
}

TEST(trainer_refuses_keys_it_cannot_honour) {
    char run[1200];
    path_join(run, sizeof run, test_tmpdir(), "refuse");
    const char *cases[][2] = {
        {"train.fixed_pack_length=16", "train.fixed_pack_length"}, /* shorter than the packs */
        {"model.virtual_pipeline_model_parallel_size=2", "model.virtual_pipeline_model_parallel_size"}, /* at PP1 */
        {"model.pipeline_model_parallel_size=2", "not divisible by TP·PP·CP = 2"}, /* one rank */
        {"scheduler.lr_decay_style=WSD", "scheduler.lr_wsd_decay_iters"},
        {"diffusion.sigma_min=0.1", "diffusion.sigma_min"}, /* with ddpm below */
    };
    for (int i = 0; i < 5; i++) {
        const char *extra[] = {cases[i][0], "train.train_iters=2", i == 4 ? "diffusion.objective=ddpm" : "train.eval_interval=0"};
        vfm_status s = train_tiny_mock(run, extra, 3);
        CHECK_MSG(s == VFM_ERR_USAGE, "%s: status %s", cases[i][0], vfm_status_name(s));
        CHECK_MSG(strstr(vfm_last_error(), cases[i][1]) != NULL, "%s: message '%s'", cases[i][0], vfm_last_error());
    }
}

TEST(trainer_webdataset_validation_reads_the_val_split) {
    char dir[1200], path[1300], run[1200];
    snprintf(dir, sizeof dir, "%s/data", test_tmpdir());
    FixtureSample s[9];
    for (int i = 0; i < 9; i++) s[i] = fixture_mixed_sample(i, 4, 16);
    for (int k = 0; k < 3; k++) {
        snprintf(path, sizeof path, "%s/shard-%02d.tar", dir, k);
        REQUIRE_OK(fixture_write_shard(path, s + 3 * k, 3));
    }
    char data[1300], save[1300];
    snprintf(data, sizeof data, "dataset.path=%s", dir);
    const char *ov[] = {"model.preset=tiny", "model.crossattn_emb_size=16", data, save, "dataset.task_encoder_seq_length=512",
                        "dataset.num_workers=1", "train.train_iters=4", "train.global_batch_size=1", "train.threads=1",
                        "logger.level=error", "train.eval_interval=2", "train.eval_iters=1",
                        "train.device=cpu", "model.val_generation_num_steps=2", NULL};
    TrainOptions opt = {NULL, ov, 14, NULL, NULL, NULL};
    /* no split.yaml: every shard is train, the val split is empty — a usage error naming the ways out */
    path_join(run, sizeof run, test_tmpdir(), "nosplit");
    snprintf(save, sizeof save, "checkpoint.save=%s", run);
    CHECK(train_run(&opt) == VFM_ERR_USAGE);
    CHECK_MSG(strstr(vfm_last_error(), "dataset.use_train_split_for_val") != NULL, "%s", vfm_last_error());
    /* validating on the train split, as DFM */
    path_join(run, sizeof run, test_tmpdir(), "trainsplit");
    snprintf(save, sizeof save, "checkpoint.save=%s", run);
    ov[14] = "dataset.use_train_split_for_val=true";
    opt.n_overrides = 15;
    REQUIRE_OK(train_run(&opt));
    char f[1400];
    snprintf(f, sizeof f, "%s/validation_generation/step=4_rank=0.npy", run);
    CHECK_MSG(path_exists(f), "missing %s", f);
    /* a 1,1,1 split.yaml: the val split is its own shard */
    const char *index[] = {"data", "index", dir, "--split", "1,1,1"};
    char *out = NULL, *err = NULL;
    CHECK(run_vfm(index, 5, &out, &err) == 0);
    free(out), free(err);
    path_join(run, sizeof run, test_tmpdir(), "valsplit");
    snprintf(save, sizeof save, "checkpoint.save=%s", run);
    opt.n_overrides = 14;
    REQUIRE_OK(train_run(&opt));
    snprintf(f, sizeof f, "%s/validation_generation/step=2_rank=0.npy", run);
    CHECK_MSG(path_exists(f), "missing %s", f);
}
