/* DFM's own shards (tests/fixtures/torch, written by reference/make_torch_fixtures.py the way
 * prepare_energon_dataset_butterfly.py writes them) through the data layer: the length index reads
 * their pth / pickle parts, training on them gives bitwise the losses and weights of the same
 * tensors stored as .npy, and a dataset with five broken samples (NaN latent, bad json, a 2-D
 * latent, a pickle naming os.system, a shard cut inside a member) trains to the end, skipping and
 * naming exactly those five once each, with nothing run. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "capture.h"
#include "core/config.h"
#include "core/fileutil.h"
#include "data/formats/tar.h"
#include "data/loader/encode.h"
#include "data/loader/length_index.h"
#include "data/loader/loader.h"
#include "data/loader/source.h"
#include "test.h"
#include "train/trainer.h"

/* Copies the fixture directory torch/<name> (files and subdirectories) to dst. */
static int copy_fixture(const char *name, const char *dst) {
    char rel[300];
    snprintf(rel, sizeof rel, "torch/%s", name);
    const char *src = test_fixture(rel);
    if (mkdir_p(dst) != VFM_OK) return 0;
    DIR *d = opendir(src);
    if (!d) {
        test_fail(__FILE__, __LINE__, "%s: cannot open", src);
        return 0;
    }
    int ok = 1;
    struct dirent *e;
    while (ok && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char from[1600], to[1600], sub[600];
        snprintf(from, sizeof from, "%s/%s", src, e->d_name);
        snprintf(to, sizeof to, "%s/%s", dst, e->d_name);
        struct stat st;
        if (stat(from, &st) != 0) ok = 0;
        else if (S_ISDIR(st.st_mode)) {
            snprintf(sub, sizeof sub, "%s/%s", name, e->d_name);
            ok = copy_fixture(sub, to);
        } else {
            char *bytes;
            size_t len;
            ok = read_file_all(from, &bytes, &len) == VFM_OK && write_file_atomic(to, bytes, len) == VFM_OK;
            if (ok) free(bytes);
        }
    }
    closedir(d);
    if (!ok) test_fail(__FILE__, __LINE__, "copying %s: %s", src, vfm_last_error());
    return ok;
}

/* DFM's latents are [1,16,T,H,W] and its T5 embeddings 32 wide here: the tiny model with 16 channels. */
#define DFM_OVERRIDES "model.preset=tiny", "model.in_channels=16", "model.out_channels=16", \
                      "model.crossattn_emb_size=32", "dataset.task_encoder_seq_length=256"

TEST(torch_dfm_shards_index_with_their_shapes) {
    char dir[1300];
    static const struct {
        const char *name;
        int n, seed;
        const char *part;
    } sets[] = {{"dfm", 8, 0, "pth"}, {"dfm_torch1", 3, 200, ".pth"}};
    static const int shapes[4][3] = {{1, 8, 8}, {1, 4, 8}, {2, 4, 4}, {1, 8, 4}}; /* T, H, W as the script writes */
    for (int k = 0; k < 2; k++) {
        snprintf(dir, sizeof dir, "%s/%s", test_tmpdir(), sets[k].name);
        REQUIRE(copy_fixture(sets[k].name, dir));
        LengthIndex *li;
        REQUIRE_OK(length_index_open(&li, dir, 0, 2));
        CHECK_MSG(li->n_samples == sets[k].n, "%s: %lld samples", sets[k].name, (long long)li->n_samples);
        for (int64_t i = 0; i < li->n_samples; i++) {
            const LengthEntry *e = &li->samples[i];
            int j = (int)(i % 4), seed = sets[k].seed + (int)i;
            CHECK_MSG(e->status == ENC_OK, "%s sample %lld: %s", sets[k].name, (long long)i, e->reason ? e->reason : "");
            CHECK_MSG(e->shape[0] == 16 && e->shape[1] == shapes[j][0] && e->shape[2] == shapes[j][1] &&
                          e->shape[3] == shapes[j][2],
                      "%s sample %lld: shape [%d,%d,%d,%d]", sets[k].name, (long long)i, e->shape[0], e->shape[1],
                      e->shape[2], e->shape[3]);
            /* the T5-shaped embedding: 16 rows of 32, zero past 3 + seed % 9 rows */
            CHECK_MSG(e->text_len == 16 && e->text_width == 32 && e->text_real == 3 + seed % 9,
                      "%s sample %lld: text %d x %d, %d real", sets[k].name, (long long)i, e->text_len, e->text_width,
                      e->text_real);
        }
        length_index_free(li);
    }
}

/* Losses, grad norms and lrs of metrics.jsonl as text (printed with %.17g: equal text, equal bits). */
static char *metrics_numbers(const char *run, int *lines) {
    char path[1400], line[4096];
    path_join(path, sizeof path, run, "metrics.jsonl");
    FILE *f = fopen(path, "r");
    *lines = 0;
    if (!f) return NULL;
    size_t cap = 1 << 16, len = 0;
    char *out = calloc(cap, 1);
    while (fgets(line, sizeof line, f)) {
        const char *l = strstr(line, "\"loss\": ");
        if (!l) continue;
        const char *end = strstr(l, ", \"skipped\"");
        int n = end ? (int)(end - l) : (int)strlen(l);
        if (len + (size_t)n + 2 < cap) len += (size_t)snprintf(out + len, cap - len, "%.*s\n", n, l);
        (*lines)++;
    }
    fclose(f);
    return out;
}

static vfm_status train_dfm(const char *data, const char *run, int iters, const char *const *extra, int n_extra) {
    char path[1400], save[1400], it[64];
    snprintf(path, sizeof path, "dataset.path=%s", data);
    snprintf(save, sizeof save, "checkpoint.save=%s", run);
    snprintf(it, sizeof it, "train.train_iters=%d", iters);
    const char *ov[32] = {DFM_OVERRIDES, path, save, it, "train.global_batch_size=1", "checkpoint.save_interval=0",
                          "train.threads=1", "dataset.num_workers=1", "logger.level=warn", "train.device=cpu"};
    int n = 0;
    while (n < 32 && ov[n]) n++;
    for (int i = 0; i < n_extra && n < 32; i++) ov[n++] = extra[i];
    TrainOptions opt = {NULL, ov, n, NULL, NULL, NULL};
    return train_run(&opt);
}

TEST(torch_dfm_training_matches_npy_bitwise) {
    /* the same dataset name and shard names: the same sample uids, so the same noise and sigmas */
    char pth[1300], npy[1300], run_pth[1300], run_npy[1300];
    snprintf(pth, sizeof pth, "%s/pth/dfm", test_tmpdir());
    snprintf(npy, sizeof npy, "%s/npy/dfm", test_tmpdir());
    snprintf(run_pth, sizeof run_pth, "%s/run_pth", test_tmpdir());
    snprintf(run_npy, sizeof run_npy, "%s/run_npy", test_tmpdir());
    REQUIRE(copy_fixture("dfm", pth) && copy_fixture("dfm_npy", npy));
    enum { ITERS = 6 }; /* 4 samples a pack: three epochs of 8 samples */
    const char *lr[] = {"optimizer.lr=2e-3", "scheduler.lr_warmup_iters=1"}; /* weights that move */
    REQUIRE_OK(train_dfm(pth, run_pth, ITERS, lr, 2));
    REQUIRE_OK(train_dfm(npy, run_npy, ITERS, lr, 2));
    int la, lb;
    char *a = metrics_numbers(run_pth, &la), *b = metrics_numbers(run_npy, &lb);
    REQUIRE(a && b);
    CHECK_MSG(la == ITERS && lb == ITERS, "%d and %d metric lines", la, lb);
    CHECK_MSG(strcmp(a, b) == 0, "losses differ:\npth:\n%s\nnpy:\n%s", a, b);
    /* and the weights at the end, byte for byte */
    char wa[1400], wb[1400];
    snprintf(wa, sizeof wa, "%s/iter_%07d/model.safetensors", run_pth, ITERS);
    snprintf(wb, sizeof wb, "%s/iter_%07d/model.safetensors", run_npy, ITERS);
    char *ba, *bb;
    size_t na, nb;
    REQUIRE_OK(read_file_all(wa, &ba, &na));
    REQUIRE_OK(read_file_all(wb, &bb, &nb));
    CHECK_MSG(na == nb && memcmp(ba, bb, na) == 0, "the final weights differ");
    /* the losses are real numbers that moved */
    CHECK(strstr(a, "\"loss\": ") && strstr(a, "nan") == NULL);
    free(ba), free(bb), free(a), free(b);
}

/* ---- five broken samples ---- */

static const char *const broken_names[5][2] = {
    {"rank0-000000.tar:000001", "latent has NaN/Inf values"},
    {"rank0-000000.tar:000002", "bad json"},
    {"rank0-000000.tar:000004", "latent shape [16,16] is not"},
    {"rank1-000000.tar:000007", "pickle: pickle: byte 28: global 'posix.system' is not allowed"},
    {"rank1-000000.tar:000009", "the shard ends inside member '000009.pth'"},
};
#define MARKER "/tmp/vfm-pickle-marker-os_system" /* what the pickle of 000007 would create if it ran */

TEST(torch_dfm_broken_samples_train_to_the_end_named_once) {
    char dir[1300], run[1300], path[1400];
    snprintf(dir, sizeof dir, "%s/dfm_broken", test_tmpdir());
    snprintf(run, sizeof run, "%s/run", test_tmpdir());
    REQUIRE(copy_fixture("dfm_broken", dir));
    unlink(MARKER);
    Capture cap;
    capture_begin(&cap, 2);
    vfm_status st = train_dfm(dir, run, 12, NULL, 0); /* 5 usable samples: over two epochs */
    char *err = capture_end(&cap);
    CHECK_MSG(st == VFM_OK, "training failed: %s", vfm_last_error());
    snprintf(path, sizeof path, "%s/iter_0000012/DONE", run);
    CHECK_MSG(path_exists(path), "training did not reach the end");
    for (int i = 0; i < 5; i++) {
        char line[512];
        snprintf(line, sizeof line, "skipping %s: ", broken_names[i][0]);
        const char *at = strstr(err, line);
        CHECK_MSG(at && strstr(at, broken_names[i][1]) && (!strchr(at, '\n') || strstr(at, broken_names[i][1]) < strchr(at, '\n')),
                  "not named: '%s' ... '%s' in:\n%s", line, broken_names[i][1], err);
        CHECK_MSG(!at || !strstr(at + 1, line), "named twice: %s", line);
    }
    int lines = 0;
    for (const char *p = err; (p = strstr(p, "skipping ")); p++) lines++;
    CHECK_MSG(lines == 5, "%d skip lines (each broken sample is named once):\n%s", lines, err);
    CHECK_MSG(!path_exists(MARKER), "%s exists: the pickle ran", MARKER);
    free(err);
}

TEST(torch_dfm_broken_loader_delivers_exactly_the_good_samples) {
    char dir[1300], path[1300];
    snprintf(dir, sizeof dir, "%s/dfm_broken", test_tmpdir());
    REQUIRE(copy_fixture("dfm_broken", dir));
    snprintf(path, sizeof path, "dataset.path=%s", dir);
    const char *ov[] = {DFM_OVERRIDES, path, "dataset.num_workers=2", "logger.level=error"};
    Config *cfg = NULL;
    REQUIRE_OK(config_load(&cfg, NULL, ov, (int)(sizeof ov / sizeof ov[0])));
    PackSource *src;
    REQUIRE_OK(pack_source_create(&src, cfg, 0, 1));
    int seen[10] = {0};
    for (int guard = 0; guard < 40; guard++) {
        Pack p;
        memset(&p, 0, sizeof p);
        REQUIRE_OK(src->next(src, &p));
        LoaderInfo info;
        loader_info(src, &info);
        if (info.epoch == 2) {
            pack_free(&p);
            break;
        }
        for (int j = 0; j < p.n_samples; j++) {
            int key;
            const char *colon = strchr(p.samples[j].source, ':');
            REQUIRE(colon && sscanf(colon + 1, "%d", &key) == 1 && key >= 0 && key < 10);
            seen[key]++;
        }
        pack_free(&p);
    }
    for (int k = 0; k < 10; k++) {
        int broken = k == 1 || k == 2 || k == 4 || k == 7 || k == 9;
        CHECK_MSG(seen[k] == (broken ? 0 : 2), "sample %06d delivered %d times in two epochs", k, seen[k]);
    }
    LoaderSkip *sk;
    int n = loader_skipped(src, &sk);
    CHECK_MSG(n == 5, "%d skipped", n);
    for (int i = 0; i < n; i++) {
        int found = 0;
        for (int k = 0; k < 5; k++)
            found |= strcmp(sk[i].source, broken_names[k][0]) == 0 && strstr(sk[i].reason, broken_names[k][1]) != NULL;
        CHECK_MSG(found, "unexpected skip %s: %s", sk[i].source, sk[i].reason);
    }
    free(sk);
    pack_source_destroy(src);
    config_free(cfg);
    CHECK(!path_exists(MARKER));
}

/* A refused pickle is a security event: in a sample that is wrong in other ways too (bad json, a
 * NaN latent), the length index, vfm data inspect and the training log name the refusal — the
 * sample, the part, the global — first, not the other problems. */
TEST(torch_refused_pickle_is_named_first) {
    char dir[1300], path[1400], good[1400];
    snprintf(dir, sizeof dir, "%s/refused", test_tmpdir());
    REQUIRE_OK(mkdir_p(dir));
    /* sample 000000 of the DFM fixture for its latent; the text: a pickle calling builtins.eval */
    snprintf(good, sizeof good, "%s", test_fixture("torch/dfm/rank0-000000.tar"));
    TarShard *sh;
    REQUIRE_OK(tar_shard_open(&sh, good));
    TarSample smp;
    REQUIRE_OK(tar_shard_read_sample(sh, 0, &smp));
    const TarPart *pth = tar_sample_part(&smp, "pth");
    REQUIRE(pth);
    char *evil;
    size_t evil_len;
    REQUIRE_OK(read_file_all(test_fixture("torch/malicious/eval.pickle"), &evil, &evil_len));
    TarWriter *w;
    snprintf(path, sizeof path, "%s/shard-000.tar", dir);
    REQUIRE_OK(tar_writer_open(&w, path));
    const char bad_json[] = "{\"caption\": \"unterminated";
    REQUIRE_OK(tar_writer_add(w, "s0.json", bad_json, sizeof bad_json - 1));
    REQUIRE_OK(tar_writer_add(w, "s0.pth", pth->data, pth->size));
    REQUIRE_OK(tar_writer_add(w, "s0.pickle", evil, evil_len));
    REQUIRE_OK(tar_writer_add(w, "s1.pth", pth->data, pth->size)); /* a usable sample beside it */
    REQUIRE_OK(tar_writer_close(w));
    free(evil);
    tar_sample_free(&smp);
    tar_shard_close(sh);
    /* inspect: the problem line of s0 is the refusal */
    const char *args[] = {"data", "inspect", dir};
    char *out, *err;
    run_vfm(args, 3, &out, &err);
    const char *line = strstr(out, "shard-000.tar:s0: ");
    CHECK_MSG(line && !strncmp(line + strlen("shard-000.tar:s0: "), "refused: part 'pickle'", 22) &&
                  strstr(line, "builtins.eval") && strstr(line, "security event"),
              "%s", out);
    CHECK_MSG(strstr(out, "1 refused"), "the part table counts the refusal: %s", out);
    free(out);
    free(err);
    /* the training source's log line */
    snprintf(path, sizeof path, "dataset.path=%s", dir);
    const char *ov[] = {DFM_OVERRIDES, path, "dataset.num_workers=0"};
    Config *cfg = NULL;
    REQUIRE_OK(config_load(&cfg, NULL, ov, (int)(sizeof ov / sizeof ov[0])));
    Capture cap;
    capture_begin(&cap, 2);
    PackSource *src = NULL;
    vfm_status s = pack_source_create(&src, cfg, 0, 1);
    err = capture_end(&cap);
    CHECK_OK(s);
    CHECK_MSG(strstr(err, "skipping shard-000.tar:s0: part 'pickle' names a global off the unpickler's allow-list") &&
                  strstr(err, "builtins.eval"), "%s", err);
    free(err);
    /* the read-time encoder, on its own (the length index above skipped s0 before it was read): the
     * refusal comes before the sample's bad json there too */
    EncodeConfig ec;
    REQUIRE_OK(encode_config_from(&ec, cfg));
    snprintf(path, sizeof path, "%s/shard-000.tar", dir);
    REQUIRE_OK(tar_shard_open(&sh, path));
    REQUIRE_OK(tar_shard_read_sample(sh, 0, &smp));
    EncodedSample es;
    EncodeSkip skip;
    char reason[1024];
    CHECK_OK(encode_sample(&ec, &smp, "shard-000.tar", 0, &es, NULL, &skip, reason, sizeof reason));
    CHECK_MSG(skip == ENC_SKIP_REFUSED && strstr(reason, "builtins.eval"), "skip %d: %s", (int)skip, reason);
    if (skip == ENC_OK) encoded_sample_free(&es);
    tar_sample_free(&smp);
    tar_shard_close(sh);
    if (src) pack_source_destroy(src);
    config_free(cfg);
}
