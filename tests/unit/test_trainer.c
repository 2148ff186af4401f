/* The trainer end to end on the mock dataset: memorisation of a fixed set, packing invariance of
 * the loss and gradients, NaN/Inf step skipping and stopping, fine-tuning from a checkpoint. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc_fail.h"
#include "capture.h"
#include "core/fileutil.h"
#include "data/formats/safetensors.h"
#include "diffusion/edm.h"
#include "model/dit.h"
#include "test.h"
#include "train/checkpoint.h"
#include "train/trainer.h"
#include "train_fixture.h"

/* Losses and skip flags of metrics.jsonl, in order. */
static int read_metrics(const char *run, double *loss, int *skipped, int max) {
    char path[1200], line[2048];
    path_join(path, sizeof path, run, "metrics.jsonl");
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    int n = 0;
    while (n < max && fgets(line, sizeof line, f)) {
        const char *l = strstr(line, "\"loss\": "), *s = strstr(line, "\"skipped\": ");
        if (!l || !s) continue;
        loss[n] = strtod(l + 8, NULL);
        skipped[n] = strncmp(s + 11, "true", 4) == 0;
        n++;
    }
    fclose(f);
    return n;
}

TEST(trainer_tiny_mock_memorises_fixed_set) {
    char run[1200];
    path_join(run, sizeof run, test_tmpdir(), "mem");
    const char *extra[] = {"checkpoint.save_interval=0"};
    REQUIRE_OK(train_tiny_mock(run, extra, 1));
    double loss[400];
    int skipped[400];
    int n = read_metrics(run, loss, skipped, 400);
    REQUIRE(n == 300);
    double first = 0, last = 0;
    for (int i = 0; i < 20; i++) first += loss[i] / 20, last += loss[n - 20 + i] / 20;
    CHECK_MSG(last < 0.7 * first, "mean loss of the last 20 steps %.4f, of the first 20 %.4f (ratio %.3f)", last, first,
              last / first);
    char done[1400];
    path_join(done, sizeof done, run, "iter_0000300/DONE");
    CHECK(path_exists(done));
}

TEST(trainer_skips_nonfinite_steps_then_stops_with_a_checkpoint) {
    char run[1200];
    path_join(run, sizeof run, test_tmpdir(), "nan");
    /* one poisoned step is skipped and training goes on */
    setenv("VFM_TEST_INJECT_NAN", "3", 1);
    const char *extra[] = {"train.train_iters=8", "checkpoint.save_interval=0", "train.max_nonfinite_steps=3"};
    REQUIRE_OK(train_tiny_mock(run, extra, 3));
    double loss[16];
    int skipped[16];
    int n = read_metrics(run, loss, skipped, 16);
    REQUIRE(n == 8);
    for (int i = 0; i < 8; i++) CHECK_MSG(skipped[i] == (i == 3), "step %d skipped=%d", i, skipped[i]);
    /* the skipped step left AdamW's count (the step state's, on the device) */
    CheckpointState st;
    char last[1400];
    path_join(last, sizeof last, run, "iter_0000008");
    REQUIRE_OK(checkpoint_read_meta(last, &st));
    CHECK_MSG(st.optimizer_step == 7, "optimizer_step %lld after 8 steps, one skipped", (long long)st.optimizer_step);
    checkpoint_state_free(&st);
    /* three in a row stop the run with the last good weights saved, when the host reads the step's
     * counters: at once with a log line every step, else at the next read (after step 8 here) */
    setenv("VFM_TEST_INJECT_NAN", "4,5,6", 1);
    const char *every_step[] = {"train.train_iters=8", "checkpoint.save_interval=0", "train.max_nonfinite_steps=3",
                                "logger.log_interval=1"};
    for (int k = 0; k < 2; k++) {
        char run2[1200], done[1400];
        path_join(run2, sizeof run2, test_tmpdir(), k ? "nan_log10" : "nan_log1");
        vfm_status s = train_tiny_mock(run2, k ? extra : every_step, k ? 3 : 4);
        CHECK(s == VFM_ERR_NUMERIC);
        CHECK_MSG(strstr(vfm_last_error(), "3 steps in a row") != NULL, "message: %s", vfm_last_error());
        path_join(done, sizeof done, run2, k ? "iter_0000008/DONE" : "iter_0000007/DONE");
        CHECK_MSG(path_exists(done), "no checkpoint at the stop (%s): %s", done, vfm_last_error());
    }
    unsetenv("VFM_TEST_INJECT_NAN");
}

TEST(trainer_finetune_starts_a_new_run_from_the_weights) {
    char run[1200], run2[1200], load[1300];
    path_join(run, sizeof run, test_tmpdir(), "a");
    path_join(run2, sizeof run2, test_tmpdir(), "b");
    const char *extra[] = {"train.train_iters=5", "checkpoint.save_interval=0"};
    REQUIRE_OK(train_tiny_mock(run, extra, 2));
    snprintf(load, sizeof load, "checkpoint.load=%s", run);
    const char *extra2[] = {"train.train_iters=3", "checkpoint.save_interval=0", load, "checkpoint.finetune=true"};
    REQUIRE_OK(train_tiny_mock(run2, extra2, 4));
    double loss[8];
    int skipped[8];
    CHECK(read_metrics(run2, loss, skipped, 8) == 3); /* steps 0, 1, 2: a new run */
    CheckpointState st;
    char dir[1400];
    path_join(dir, sizeof dir, run2, "iter_0000003");
    REQUIRE_OK(checkpoint_read_meta(dir, &st));
    CHECK(st.step == 3 && st.optimizer_step == 3);
    checkpoint_state_free(&st);
    /* resuming (not fine-tuning) continues the step count */
    char run3[1200];
    path_join(run3, sizeof run3, test_tmpdir(), "c");
    const char *extra3[] = {"train.train_iters=7", "checkpoint.save_interval=0", load};
    REQUIRE_OK(train_tiny_mock(run3, extra3, 3));
    CHECK(read_metrics(run3, loss, skipped, 8) == 2); /* steps 5 and 6 */
}

/* The "field": value numbers of metrics.jsonl, in order. */
static int read_metric(const char *run, const char *field, double *v, int max) {
    char path[1200], line[2048], pat[64];
    path_join(path, sizeof path, run, "metrics.jsonl");
    snprintf(pat, sizeof pat, "\"%s\": ", field);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    int n = 0;
    while (n < max && fgets(line, sizeof line, f)) {
        const char *p = strstr(line, pat);
        if (p) v[n++] = strtod(p + strlen(pat), NULL);
    }
    fclose(f);
    return n;
}

/* checkpoint.load_optim=false (docs/checkpoints.md, its help text): the same run goes on — step,
 * learning-rate schedule position, samples seen and data position restored — with fresh Adam
 * moments only. */
TEST(trainer_load_optim_false_keeps_the_schedule_and_drops_the_moments) {
    char run[1200], with[1200], without[1200], load[1300];
    path_join(run, sizeof run, test_tmpdir(), "a");
    path_join(with, sizeof with, test_tmpdir(), "with");
    path_join(without, sizeof without, test_tmpdir(), "without");
    const char *first[] = {"train.train_iters=3", "checkpoint.save_interval=0"};
    REQUIRE_OK(train_tiny_mock(run, first, 2));
    snprintf(load, sizeof load, "checkpoint.load=%s", run);
    const char *on[] = {"train.train_iters=5", "checkpoint.save_interval=0", load};
    const char *off[] = {"train.train_iters=5", "checkpoint.save_interval=0", load, "checkpoint.load_optim=false"};
    REQUIRE_OK(train_tiny_mock(with, on, 3));
    REQUIRE_OK(train_tiny_mock(without, off, 4));
    double step_a[4], step_b[4], lr_a[4], lr_b[4], loss_a[4], loss_b[4], samples_a[4], samples_b[4];
    REQUIRE(read_metric(with, "step", step_a, 4) == 2 && read_metric(without, "step", step_b, 4) == 2);
    CHECK_MSG(step_b[0] == 3 && step_b[1] == 4, "steps %g %g: the step is restored", step_b[0], step_b[1]);
    read_metric(with, "lr", lr_a, 4), read_metric(without, "lr", lr_b, 4);
    read_metric(with, "loss", loss_a, 4), read_metric(without, "loss", loss_b, 4);
    read_metric(with, "samples", samples_a, 4), read_metric(without, "samples", samples_b, 4);
    for (int i = 0; i < 2; i++)
        CHECK_MSG(lr_b[i] == lr_a[i] && lr_b[i] > 0 && samples_b[i] == samples_a[i],
                  "step %d: lr %g (with the moments %g), samples %g (%g)", 3 + i, lr_b[i], lr_a[i], samples_b[i],
                  samples_a[i]);
    /* the same weights on the same data position: the same first loss; then the moments differ */
    CHECK_MSG(loss_b[0] == loss_a[0] && loss_b[1] != loss_a[1], "losses %.9g %.9g against %.9g %.9g", loss_b[0],
              loss_b[1], loss_a[0], loss_a[1]);
    CheckpointState st;
    char dir[1400];
    path_join(dir, sizeof dir, without, "iter_0000005");
    REQUIRE_OK(checkpoint_read_meta(dir, &st));
    CHECK_MSG(st.step == 5 && st.optimizer_step == 2, "step %lld, Adam's count %lld", (long long)st.step,
              (long long)st.optimizer_step);
    checkpoint_state_free(&st);
}

/* Resuming with another config (docs/checkpoints.md): another model or objective is refused
 * naming each key with both values; the schedule may change; fine-tuning a model of another size
 * names the first tensor that does not fit with both shapes. */
TEST(trainer_resume_refuses_another_model_and_names_the_keys) {
    char run[1200], load[1300], other[1200];
    path_join(run, sizeof run, test_tmpdir(), "a");
    path_join(other, sizeof other, test_tmpdir(), "b");
    const char *first[] = {"train.train_iters=2", "checkpoint.save_interval=0"};
    REQUIRE_OK(train_tiny_mock(run, first, 2));
    snprintf(load, sizeof load, "checkpoint.load=%s", run);
    const char *wider[] = {"train.train_iters=3", load, "model.hidden_size=128", "diffusion.objective=flow"};
    CHECK(train_tiny_mock(other, wider, 4) == VFM_ERR_USAGE);
    const char *e = vfm_last_error();
    CHECK_MSG(strstr(e, "model.hidden_size (checkpoint 64, this run 128)") &&
                  strstr(e, "diffusion.objective (checkpoint edm, this run flow)") && strstr(e, "checkpoint.finetune=true"),
              "%s", e);
    const char *schedule[] = {"train.train_iters=3", load, "optimizer.lr=1e-3", "checkpoint.save_interval=0"};
    CHECK_OK(train_tiny_mock(other, schedule, 4)); /* a note, not a refusal */
    char run3[1200];
    path_join(run3, sizeof run3, test_tmpdir(), "c");
    const char *finetune[] = {"train.train_iters=1", load, "checkpoint.finetune=true", "model.hidden_size=128"};
    CHECK(train_tiny_mock(run3, finetune, 4) == VFM_ERR_SHAPE);
    e = vfm_last_error();
    CHECK_MSG(strstr(e, "in the checkpoint, [") && strstr(e, "in this model: the config differs from the checkpoint's") &&
                  strstr(e, "[64,"), "%s", e);
}

/* ---- packing invariance --------------------------------------------------------------------- */

static DiTConfig tiny_cfg(void) {
    DiTConfig c = {.hidden = 32, .layers = 2, .heads = 4, .kv_heads = 4, .head_dim = 8, .ffn = 64, .in_channels = 4,
                   .out_channels = 4, .patch_spatial = 2, .patch_temporal = 1, .d_text = 16, .adaln_lora = 8,
                   .fps_dim = 16, .qk_norm = 1, .ln_eps = 1e-5f, .init_std = 0.02f};
    return c;
}

/* The reader outside the trainer (vfm sample, export, model forward: load_named_tensors) says the
 * same as the trainer's sliced one: a checkpoint of another size names the first tensor that does
 * not fit with both shapes. */
TEST(checkpoint_of_another_size_names_the_first_tensor_with_both_shapes) {
    char run[1200], path[1400];
    path_join(run, sizeof run, test_tmpdir(), "a");
    const char *first[] = {"train.train_iters=1", "checkpoint.save_interval=0"};
    REQUIRE_OK(train_tiny_mock(run, first, 2));
    path_join(path, sizeof path, run, "iter_0000001/model.safetensors");
    DiTConfig c = tiny_cfg(); /* width 32: the checkpoint's is 64 */
    DiT m;
    dit_describe(&m, &c);
    float *buf = malloc((size_t)m.table.total * sizeof(float));
    REQUIRE(buf);
    CHECK(load_named_tensors(path, &m.table, "", buf) == VFM_ERR_SHAPE);
    CHECK_MSG(strstr(vfm_last_error(), "tensor 'x_embedder.weight' is [64,16] in the checkpoint, [32,16] in this model: "
                                       "the config differs from the checkpoint's"), "%s", vfm_last_error());
    free(buf);
    dit_destroy(&m);
}

typedef struct SampleData {
    int32_t shape[4];
    int text_len;
    float *tokens, *text, *noise;
    float sigma;
    int drop;
} SampleData;

static void make_sample(SampleData *s, int c, int t, int h, int w, int text_len, float sigma, int drop, uint64_t seed) {
    s->shape[0] = c, s->shape[1] = t, s->shape[2] = h, s->shape[3] = w;
    int64_t n = (int64_t)c * t * h * w;
    s->text_len = text_len;
    s->tokens = malloc((size_t)n * sizeof(float));
    s->noise = malloc((size_t)n * sizeof(float));
    s->text = malloc((size_t)text_len * 16 * sizeof(float));
    test_fill_uniform_f32(s->tokens, n, seed, -1, 1);
    test_fill_uniform_f32(s->noise, n, seed + 1, -2, 2);
    test_fill_uniform_f32(s->text, (int64_t)text_len * 16, seed + 2, -1, 1);
    s->sigma = sigma;
    s->drop = drop;
}

/* Loss and gradient of a pack made of the listed samples. */
/* The EDM loss (and gradient when grad_scale > 0) with given draws. */
static vfm_status edm_loss_and_grad_given(DiT *model, float sigma_data, const Pack *p, const EdmDraws *draws,
                                          double grad_scale, EdmStepResult *res) {
    Objective o;
    memset(&o, 0, sizeof o);
    o.kind = OBJECTIVE_EDM;
    o.sigma_data = sigma_data;
    return objective_loss_given(model, &o, p, draws, grad_scale, res);
}

static double pack_loss(DiT *m, SampleData **ss, int n, float *grads_out) {
    Pack p;
    pack_init(&p, 16, 16, 8, 4);
    for (int i = 0; i < n; i++) {
        EncodedSample e;
        memset(&e, 0, sizeof e);
        memcpy(e.info.latent_shape, ss[i]->shape, sizeof ss[i]->shape);
        e.info.grid[0] = ss[i]->shape[1], e.info.grid[1] = ss[i]->shape[2] / 2, e.info.grid[2] = ss[i]->shape[3] / 2;
        e.info.tokens = e.info.grid[0] * e.info.grid[1] * e.info.grid[2];
        e.info.text_tokens = ss[i]->text_len;
        e.info.fps = 30;
        e.tokens = ss[i]->tokens; /* already "token layout": values are arbitrary */
        e.text = ss[i]->text;
        pack_append(&p, &e);
    }
    EdmDraws d;
    memset(&d, 0, sizeof d);
    d.sigma = calloc((size_t)n, sizeof(float));
    d.drop = calloc((size_t)n, sizeof(int));
    d.noise = calloc((size_t)(p.n_tokens * 16), sizeof(float));
    for (int i = 0; i < n; i++) {
        d.sigma[i] = ss[i]->sigma;
        d.drop[i] = ss[i]->drop;
        memcpy(d.noise + (int64_t)p.cu_seqlens_padded[i] * 16, ss[i]->noise,
               (size_t)(p.samples[i].tokens * 16) * sizeof(float));
    }
    dit_reserve(m, p.n_tokens, p.n_text, p.n_samples);
    memset(m->grads, 0, (size_t)m->table.total * sizeof(float));
    EdmStepResult r = {0};
    vfm_status s = edm_loss_and_grad_given(m, 0.5f, &p, &d, 1.0, &r);
    if (s != VFM_OK) test_fail(__FILE__, __LINE__, "%s", vfm_last_error());
    memcpy(grads_out, m->grads, (size_t)m->table.total * sizeof(float));
    free(d.sigma);
    free(d.drop);
    free(d.noise);
    pack_free(&p);
    return r.loss;
}

TEST(trainer_packing_invariance_loss_and_gradients) {
    DiTConfig c = tiny_cfg();
    DiT m;
    REQUIRE_OK(dit_create(&m, &c, DEV_CPU));
    REQUIRE_OK(dit_init_weights(&m, 7));
    /* the zero-initialised adaLN output would make most gradients vanish: perturb every weight */
    float *noise = malloc((size_t)m.table.total * sizeof(float));
    test_fill_uniform_f32(noise, m.table.total, 99, -0.05f, 0.05f);
    for (int64_t i = 0; i < m.table.total; i++) m.params[i] += noise[i];
    SampleData a, b, cc;
    make_sample(&a, 4, 1, 8, 8, 3, 0.4f, 0, 1);   /* 16 tokens */
    make_sample(&b, 4, 2, 4, 6, 5, 2.0f, 0, 11);  /* 12 tokens */
    make_sample(&cc, 4, 3, 4, 4, 2, 7.0f, 1, 21); /* 12 tokens, dropped prompt */
    SampleData *all[3] = {&a, &b, &cc};
    int64_t P = m.table.total;
    float *g_pack = malloc((size_t)P * sizeof(float)), *g_one = malloc((size_t)P * sizeof(float));
    double *g_sum = calloc((size_t)P, sizeof(double));
    double l_pack = pack_loss(&m, all, 3, g_pack);
    double l_sum = 0, tokens[3] = {16, 12, 12}, total = 40;
    for (int i = 0; i < 3; i++) {
        double l = pack_loss(&m, &all[i], 1, g_one);
        l_sum += tokens[i] / total * l;
        for (int64_t k = 0; k < P; k++) g_sum[k] += tokens[i] / total * g_one[k];
    }
    CHECK_MSG(fabs(l_pack - l_sum) <= 1e-6 * fabs(l_sum), "pack loss %.9g vs token-weighted %.9g", l_pack, l_sum);
    float *g_ref = malloc((size_t)P * sizeof(float));
    for (int64_t k = 0; k < P; k++) g_ref[k] = (float)g_sum[k];
    /* f32 sums in another order: 1e-5 of the largest gradient */
    CHECK_CLOSE_F32("gradients", g_pack, g_ref, P, 1e-7, 1e-5);
    int nonzero = 0;
    for (int64_t k = 0; k < P; k++) nonzero += g_pack[k] != 0;
    CHECK_MSG(nonzero > P * 9 / 10, "only %d of %lld gradient entries are non-zero", nonzero, (long long)P);
    free(g_pack), free(g_one), free(g_sum), free(g_ref), free(noise);
    for (int i = 0; i < 3; i++) free(all[i]->tokens), free(all[i]->noise), free(all[i]->text);
    dit_destroy(&m);
}

/* ---- broken data ---------------------------------------------------------------------------- */

#include "capture.h"
#include "data_fixture.h"

TEST(trainer_trains_through_broken_samples_and_names_them) {
    char dir[1200], path[1300], run[1200];
    snprintf(dir, sizeof dir, "%s/broken", test_tmpdir());
    path_join(run, sizeof run, test_tmpdir(), "run");
    FixtureSample s[2][10];
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < 10; i++) s[k][i] = fixture_mixed_sample(k * 10 + i, 4, 16);
    s[0][3].poison = 0.0f / 0.0f;                 /* NaN latent */
    s[1][2].json = "{\"caption\": \"unterminated"; /* bad json */
    s[1][7].latent_ndim = 3;                      /* 24x24 tokens = 576 > the 512-token budget */
    s[1][7].latent_shape[0] = 4, s[1][7].latent_shape[1] = 48, s[1][7].latent_shape[2] = 48;
    snprintf(path, sizeof path, "%s/shard-00.tar", dir);
    REQUIRE_OK(fixture_write_shard(path, s[0], 10));
    snprintf(path, sizeof path, "%s/sub/shard-01.tar", dir);
    REQUIRE_OK(fixture_write_shard(path, s[1], 10));
    char data[1300], save[1300];
    snprintf(data, sizeof data, "dataset.path=%s", dir);
    snprintf(save, sizeof save, "checkpoint.save=%s", run);
    const char *ov[] = {"model.preset=tiny", "model.crossattn_emb_size=16", data, save,
                        "dataset.task_encoder_seq_length=512", "dataset.num_workers=1", "train.train_iters=14",
                        "train.global_batch_size=1", "checkpoint.save_interval=0", "train.threads=1",
                        "logger.level=warn"};
    TrainOptions opt = {NULL, ov, (int)(sizeof ov / sizeof ov[0]), NULL, NULL, NULL};
    Capture cap;
    capture_begin(&cap, 2);
    vfm_status st = train_run(&opt);
    char *err = capture_end(&cap);
    CHECK_MSG(st == VFM_OK, "training failed: %s", vfm_last_error());
    path_join(path, sizeof path, run, "iter_0000014/DONE");
    CHECK_MSG(path_exists(path), "training did not reach the end");
    const char *names[3] = {"skipping shard-00.tar:s00003: latent has NaN/Inf values",
                            "skipping sub/shard-01.tar:s00012: bad json",
                            "skipping sub/shard-01.tar:s00017: 576 tokens"};
    for (int i = 0; i < 3; i++) CHECK_MSG(strstr(err, names[i]) != NULL, "not named: '%s'", names[i]);
    int lines = 0;
    for (const char *p = err; (p = strstr(p, "skipping ")); p++) lines++;
    CHECK_MSG(lines == 3, "%d skip lines (each broken sample is named once):\n%s", lines, err);
    free(err);
}

/* ---- vfm checkpoint diff ------------------------------------------------------------------ */

/* Replaces the first `from` in the safetensors header of path by `to` (same length). */
static int edit_header(const char *path, const char *from, const char *to) {
    char *data;
    size_t size;
    if (read_file_all(path, &data, &size) != VFM_OK) return 0;
    uint64_t hlen = 0;
    memcpy(&hlen, data, 8);
    char *hit = NULL;
    for (size_t i = 8; i + strlen(from) <= 8 + hlen && !hit; i++)
        if (!memcmp(data + i, from, strlen(from))) hit = data + i;
    if (hit) memcpy(hit, to, strlen(to));
    int ok = hit && write_file_atomic(path, data, size) == VFM_OK;
    free(data);
    return ok;
}

static int diff_says(const char *a, const char *b, const char *more, int want_rc, const char *want) {
    const char *args[] = {"checkpoint", "diff", a, b, "--quiet", more};
    char *out, *err;
    int rc = run_vfm(args, more ? 6 : 5, &out, &err);
    int ok = rc == want_rc && (strstr(out, want) || strstr(err, want));
    if (!ok) test_fail(__FILE__, __LINE__, "diff %s %s %s: exit %d, %s%s", a, b, more ? more : "", rc, out, err);
    free(out);
    free(err);
    return ok;
}

TEST(checkpoint_diff_fails_on_what_it_cannot_compare) {
    char run[1200], a[1400], b[1400], c[1400], cmd[3000], file[1500];
    path_join(run, sizeof run, test_tmpdir(), "run");
    const char *extra[] = {"train.train_iters=4", "checkpoint.save_interval=2"};
    REQUIRE_OK(train_tiny_mock(run, extra, 2));
    path_join(a, sizeof a, run, "iter_0000002");
    path_join(b, sizeof b, run, "iter_0000004");
    path_join(c, sizeof c, test_tmpdir(), "copy");
    diff_says(a, b, NULL, 1, "is at step 2");           /* other steps: not compared */
    diff_says(a, b, "--any-step", 1, "max|a-b| = ");     /* unless asked: they differ */
    snprintf(cmd, sizeof cmd, "cp -r '%s' '%s'", b, c);
    REQUIRE(system(cmd) == 0);
    diff_says(b, c, NULL, 0, "max|a-b| = 0\n");
    path_join(file, sizeof file, c, "model.safetensors");
    REQUIRE(edit_header(file, "\"F32\"", "\"F16\"")); /* a tensor it cannot read: named */
    diff_says(b, c, NULL, 1, "tensor 'x_embedder.weight': unsupported dtype");
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s'", c, b, c);
    REQUIRE(system(cmd) == 0);
    /* a tensor that opens but cannot be read (an I/O error, no memory for it: here the buffer of the
     * largest tensor, a size nothing else asks for, is refused): named and counted, not taken as equal */
    SafetensorsFile *f;
    REQUIRE_OK(safetensors_open(&f, file));
    int64_t numel = 0;
    char want[400] = "";
    for (int i = 0; i < safetensors_count(f); i++) {
        DType dt;
        int nd;
        int64_t shape[VFM_MAX_DIMS], n = 1;
        REQUIRE_OK(safetensors_info(f, i, &dt, &nd, shape));
        for (int d = 0; d < nd; d++) n *= shape[d];
        if (n > numel) { /* the first of the largest: the first read of that size */
            numel = n;
            snprintf(want, sizeof want, "%-48s cannot be read", safetensors_name(f, i));
        }
    }
    safetensors_close(f);
    alloc_fail_when((size_t)numel * sizeof(float), 1);
    diff_says(b, c, NULL, 1, want);
    alloc_fail_off();
    CHECK(alloc_fail_refused() == 1);
    alloc_fail_when((size_t)numel * sizeof(float), 1);
    diff_says(b, c, NULL, 1, "; not comparable: 1 unreadable, 0 in one checkpoint only, 0 of another shape");
    alloc_fail_off();
    REQUIRE(edit_header(file, "final_linear", "final_lineaX")); /* the tensor sets differ */
    diff_says(b, c, NULL, 1, "0 unreadable, 2 in one checkpoint only");
}

/* vfm export writes a PyTorch state dict: "format": "pt" in the safetensors metadata, as Hugging
 * Face-style loaders require (a checkpoint's own files say "vfm"). */
TEST(export_writes_a_pytorch_state_dict) {
    char run[1200], to[1300];
    path_join(run, sizeof run, test_tmpdir(), "run");
    path_join(to, sizeof to, test_tmpdir(), "export.safetensors");
    const char *extra[] = {"train.train_iters=1", "checkpoint.save_interval=0"};
    REQUIRE_OK(train_tiny_mock(run, extra, 2));
    const char *args[] = {"export", "--checkpoint", run, "--to", to};
    char *out, *err;
    CHECK_MSG(run_vfm(args, 5, &out, &err) == 0, "%s", err);
    free(out), free(err);
    SafetensorsFile *f;
    REQUIRE_OK(safetensors_open(&f, to));
    const char *format = safetensors_metadata(f, "format");
    CHECK_MSG(format && strcmp(format, "pt") == 0, "format %s", format ? format : "(none)");
    CHECK(safetensors_find(f, "final_linear.weight") >= 0);
    safetensors_close(f);
}
