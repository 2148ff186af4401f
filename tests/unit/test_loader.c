/* The WebDataset loader (src/data/loader/loader.c) over small datasets written by the test: packs hold
 * the right tokens; replicas 1..4 together train exactly the first packs of the one stream;
 * resume (also across world sizes) continues that stream; broken samples are skipped and named;
 * reader thread counts do not change a bit of the output. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include "alloc_fail.h"
#include "capture.h"
#include "cli/commands.h"
#include "data/loader/loader.h"
#include "data/pack/pack.h"
#include "data/loader/source.h"
#include "data_fixture.h"
#include "ops/ops.h"
#include "test.h"

#define C_LAT 4
#define D_TEXT 8
#define BUDGET 512

static const char *mixed_dataset(const char *name, int shards, int per_shard) {
    static char dir[1200];
    snprintf(dir, sizeof dir, "%s/%s", test_tmpdir(), name);
    if (fixture_mixed_dataset(dir, shards, per_shard, C_LAT, D_TEXT) != VFM_OK)
        test_fail(__FILE__, __LINE__, "fixture: %s", vfm_last_error());
    return dir;
}

static PackSource *open_source(const char *dir, int rank, int world, const char *const *extra) {
    Config *cfg = fixture_config(dir, C_LAT, D_TEXT, BUDGET, extra);
    if (!cfg) return NULL;
    PackSource *src = NULL;
    vfm_status s = pack_source_create(&src, cfg, rank, world);
    if (s != VFM_OK) test_fail(__FILE__, __LINE__, "pack_source_create: %s", vfm_last_error());
    config_free(cfg);
    return src;
}

/* Checks a delivered pack against the source's promises. */
static int pack_ok(const PackSource *src, const Pack *p) {
    int ok = pack_validate(p) == VFM_OK;
    ok = ok && p->n_samples >= 1 && p->n_tokens <= src->max_tokens && p->n_text <= src->max_text &&
         p->n_samples <= src->max_samples && p->pad_multiple == 64 && p->token_dim == src->token_dim &&
         p->text_dim == src->text_dim;
    for (int i = 0; ok && i < p->n_samples; i++) ok = p->samples[i].tokens_padded % 64 == 0;
    return ok;
}

/* Takes n packs into out[0..n) (each pack_init'ed here). */
static int take_packs(PackSource *src, Pack *out, int n) {
    for (int i = 0; i < n; i++) {
        Pack p;
        memset(&p, 0, sizeof p);
        if (src->next(src, &p) != VFM_OK) {
            test_fail(__FILE__, __LINE__, "next: %s", vfm_last_error());
            return 0;
        }
        if (!pack_ok(src, &p)) {
            test_fail(__FILE__, __LINE__, "pack %d breaks an invariant: %s", i, vfm_last_error());
            return 0;
        }
        out[i] = p;
    }
    return 1;
}

static int packs_equal(const Pack *a, const Pack *b) {
    if (a->n_samples != b->n_samples || a->n_tokens != b->n_tokens || a->n_text != b->n_text) return 0;
    size_t n1 = (size_t)(a->n_samples + 1) * sizeof(int32_t);
    return memcmp(a->samples, b->samples, (size_t)a->n_samples * sizeof *a->samples) == 0 &&
           memcmp(a->tokens, b->tokens, (size_t)(a->n_tokens * a->token_dim) * sizeof(float)) == 0 &&
           memcmp(a->text, b->text, (size_t)(a->n_text * a->text_dim) * sizeof(float)) == 0 &&
           memcmp(a->cu_seqlens, b->cu_seqlens, n1) == 0 && memcmp(a->cu_seqlens_padded, b->cu_seqlens_padded, n1) == 0 &&
           memcmp(a->cu_text, b->cu_text, n1) == 0 && memcmp(a->cu_text_padded, b->cu_text_padded, n1) == 0 &&
           memcmp(a->token_sample, b->token_sample, (size_t)a->n_tokens * sizeof(int32_t)) == 0 &&
           memcmp(a->token_pos, b->token_pos, (size_t)a->n_tokens * 3 * sizeof(int32_t)) == 0 &&
           memcmp(a->loss_mask, b->loss_mask, (size_t)a->n_tokens * sizeof(float)) == 0;
}

/* Same samples in the same order (by uid). */
static int same_samples(const Pack *a, const Pack *b) {
    if (a->n_samples != b->n_samples) return 0;
    for (int i = 0; i < a->n_samples; i++)
        if (a->samples[i].uid != b->samples[i].uid) return 0;
    return 1;
}

static void free_packs(Pack *p, int n) {
    for (int i = 0; i < n; i++) pack_free(&p[i]);
}

/* The first n packs of the stream, from one replica (world 1). */
static Pack *reference_stream(const char *dir, int n, const char *const *extra) {
    PackSource *src = open_source(dir, 0, 1, extra);
    if (!src) return NULL;
    Pack *ref = calloc((size_t)n, sizeof *ref);
    if (!take_packs(src, ref, n)) {
        free(ref);
        ref = NULL;
    }
    pack_source_destroy(src);
    return ref;
}

TEST(loader_packs_hold_the_samples_tokens) {
    const char *dir = mixed_dataset("content", 2, 12);
    PackSource *src = open_source(dir, 0, 1, NULL);
    REQUIRE(src);
    CHECK(strcmp(src->kind, "webdataset") == 0);
    CHECK(src->token_dim == C_LAT * 4 && src->text_dim == D_TEXT);
    CHECK(src->max_tokens == BUDGET);
    /* the shortest sample takes 64 padded tokens: at most 8 in a pack; 24 samples in all */
    CHECK(src->max_samples == 8);
    Pack packs[12];
    REQUIRE(take_packs(src, packs, 12));
    int checked = 0;
    for (int k = 0; k < 12; k++) {
        const Pack *p = &packs[k];
        for (int j = 0; j < p->n_samples; j++) {
            const PackSample *ps = &p->samples[j];
            int idx;
            REQUIRE(sscanf(strchr(ps->source, ':') + 1, "s%d", &idx) == 1);
            FixtureSample f = fixture_mixed_sample(idx, C_LAT, D_TEXT);
            int64_t numel;
            float *x = fixture_latent(&f, &numel);
            int64_t T = ps->latent_shape[1], H = ps->latent_shape[2], W = ps->latent_shape[3];
            CHECK(numel == C_LAT * T * H * W);
            float *ref = malloc((size_t)numel * sizeof *ref);
            Tensor lt = TF32(x, C_LAT, T, H, W), tt = TF32(ref, ps->tokens, C_LAT * 4);
            REQUIRE_OK(op_patchify(&tt, &lt, 1, 2, 2));
            CHECK_CLOSE_F32("tokens", p->tokens + (int64_t)p->cu_seqlens_padded[j] * p->token_dim, ref,
                            (int64_t)ps->tokens * p->token_dim, 0.0, 0.0);
            int want_text = f.text_rows ? f.text_rows - f.text_zero_tail : 1;
            CHECK(ps->text_tokens == want_text);
            CHECK(ps->fps == (f.json_text[0] ? 24.0f : 30.0f));
            CHECK(ps->class_label == (f.json_text[0] ? idx % 10 : -1));
            checked++;
            free(ref);
            free(x);
        }
    }
    CHECK(checked >= 24); /* one epoch at least */
    CHECK(src->stats.packs == 12 && src->stats.skipped == 0);
    CHECK(src->stats.tokens_padded <= src->stats.capacity && src->stats.tokens_real < src->stats.tokens_padded);
    const char *ps = loader_pixel_space(src);
    CHECK(ps && strcmp(ps, "{\"factor\":2,\"offset\":0.5,\"scale\":1}") == 0);
    LoaderInfo info;
    CHECK(loader_info(src, &info) == 1);
    CHECK(info.n_shards == 2 && info.n_samples == 24 && info.n_usable == 24 && info.pad_multiple == 64 &&
          info.bytes_read > 0);
    free_packs(packs, 12);
    pack_source_destroy(src);
}

TEST(loader_replicas_train_the_first_packs_of_one_stream) {
    const char *dir = mixed_dataset("replicas", 3, 10);
    enum { N = 3, M = 2, RMAX = 4 };
    Pack *ref = reference_stream(dir, N * M * RMAX, NULL);
    REQUIRE(ref);
    for (int R = 1; R <= RMAX; R++) {
        PackSource *rep[RMAX];
        for (int r = 0; r < R; r++) REQUIRE((rep[r] = open_source(dir, r, R, NULL)) != NULL);
        for (int step = 0; step < N; step++)
            for (int r = 0; r < R; r++)
                for (int m = 0; m < M; m++) {
                    Pack p;
                    REQUIRE(take_packs(rep[r], &p, 1));
                    int64_t g = ((int64_t)step * M + m) * R + r;
                    CHECK_MSG(packs_equal(&p, &ref[g]), "R=%d step %d replica %d micro-batch %d: not global pack %lld",
                              R, step, r, m, (long long)g);
                    pack_free(&p);
                }
        for (int r = 0; r < R; r++) {
            CHECK(rep[r]->stats.packs == N * M); /* every replica ran the same steps */
            pack_source_destroy(rep[r]);
        }
    }
    free_packs(ref, N * M * RMAX);
    free(ref);
}

TEST(loader_resume_continues_the_stream) {
    const char *dir = mixed_dataset("resume", 2, 11);
    enum { TOTAL = 30 };
    Pack *ref = reference_stream(dir, TOTAL, NULL);
    REQUIRE(ref);
    /* mid-epoch: 7 packs, state, destroy, create, restore, 13 more */
    PackSource *a = open_source(dir, 0, 1, NULL);
    Pack got[TOTAL];
    REQUIRE(take_packs(a, got, 7));
    char *state;
    REQUIRE_OK(a->get_state(a, &state));
    CHECK(strstr(state, "\"kind\":\"webdataset\"") && strstr(state, "\"global_pack\":7"));
    pack_source_destroy(a);
    PackSource *b = open_source(dir, 0, 1, NULL);
    REQUIRE_OK(b->set_state(b, state));
    free(state);
    REQUIRE(take_packs(b, got + 7, 13));
    for (int i = 0; i < 20; i++) CHECK_MSG(packs_equal(&got[i], &ref[i]), "pack %d differs after resume", i);
    free_packs(got, 20);
    /* restoring twice on one source restarts the prefetch where asked */
    REQUIRE_OK(b->set_state(b, "{\"kind\":\"webdataset\",\"global_pack\":3}"));
    REQUIRE(take_packs(b, got, 2));
    CHECK(packs_equal(&got[0], &ref[3]) && packs_equal(&got[1], &ref[4]));
    free_packs(got, 2);
    CHECK(b->set_state(b, "{\"kind\":\"mock\",\"global_pack\":3}") == VFM_ERR_FORMAT);
    CHECK(b->set_state(b, "not json") == VFM_ERR_FORMAT);
    pack_source_destroy(b);

    /* a state saved at world 2 (3 steps of one pack per replica) continues at world 1 */
    PackSource *r0 = open_source(dir, 0, 2, NULL), *r1 = open_source(dir, 1, 2, NULL);
    for (int s = 0; s < 3; s++) {
        REQUIRE(take_packs(r0, got, 1) && take_packs(r1, got + 1, 1));
        CHECK(packs_equal(&got[0], &ref[2 * s]) && packs_equal(&got[1], &ref[2 * s + 1]));
        free_packs(got, 2);
    }
    REQUIRE_OK(r0->get_state(r0, &state));
    CHECK(strstr(state, "\"global_pack\":6") != NULL);
    pack_source_destroy(r0);
    pack_source_destroy(r1);
    PackSource *one = open_source(dir, 0, 1, NULL);
    REQUIRE_OK(one->set_state(one, state));
    free(state);
    REQUIRE(take_packs(one, got, 5));
    for (int i = 0; i < 5; i++) CHECK_MSG(packs_equal(&got[i], &ref[6 + i]), "world 2 -> 1: pack %d", 6 + i);
    free_packs(got, 5);
    /* and world 1 at an odd position (9) continues at world 2: replica r takes 9 + r, 11 + r, ... */
    REQUIRE_OK(one->get_state(one, &state));
    CHECK(strstr(state, "\"global_pack\":11") != NULL);
    REQUIRE_OK(one->set_state(one, "{\"kind\":\"webdataset\",\"global_pack\":9}"));
    pack_source_destroy(one);
    r0 = open_source(dir, 0, 2, NULL);
    r1 = open_source(dir, 1, 2, NULL);
    REQUIRE_OK(r0->set_state(r0, "{\"kind\":\"webdataset\",\"global_pack\":9}"));
    REQUIRE_OK(r1->set_state(r1, "{\"kind\":\"webdataset\",\"global_pack\":9}"));
    for (int s = 0; s < 3; s++) {
        REQUIRE(take_packs(r0, got, 1) && take_packs(r1, got + 1, 1));
        CHECK(packs_equal(&got[0], &ref[9 + 2 * s]) && packs_equal(&got[1], &ref[10 + 2 * s]));
        free_packs(got, 2);
    }
    free(state);
    pack_source_destroy(r0);
    pack_source_destroy(r1);
    free_packs(ref, TOTAL);
    free(ref);
}

static int by_first_uid(const void *a, const void *b) {
    uint64_t x = ((const Pack *)a)->samples[0].uid, y = ((const Pack *)b)->samples[0].uid;
    return (x > y) - (x < y);
}

TEST(loader_same_global_batch_at_dp1_and_dp2) {
    /* DP=1 with 4 micro-batches per step and DP=2 with 2 each train the same packs every step */
    const char *dir = mixed_dataset("dp", 2, 12);
    PackSource *one = open_source(dir, 0, 1, NULL);
    PackSource *r0 = open_source(dir, 0, 2, NULL), *r1 = open_source(dir, 1, 2, NULL);
    REQUIRE(one && r0 && r1);
    for (int step = 0; step < 4; step++) {
        Pack a[4], b[4];
        REQUIRE(take_packs(one, a, 4));
        REQUIRE(take_packs(r0, b, 2) && take_packs(r1, b + 2, 2));
        qsort(a, 4, sizeof *a, by_first_uid);
        qsort(b, 4, sizeof *b, by_first_uid);
        for (int i = 0; i < 4; i++) CHECK_MSG(same_samples(&a[i], &b[i]), "step %d: the global batches differ", step);
        free_packs(a, 4);
        free_packs(b, 4);
    }
    pack_source_destroy(one);
    pack_source_destroy(r0);
    pack_source_destroy(r1);
}

TEST(loader_skips_exactly_the_broken_samples) {
    char dir[1200], path[1300];
    snprintf(dir, sizeof dir, "%s/broken", test_tmpdir());
    FixtureSample s[2][10];
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < 10; i++) s[k][i] = fixture_mixed_sample(k * 10 + i, C_LAT, D_TEXT);
    s[0][3].poison = 0.0f / 0.0f;                 /* NaN latent: found when read */
    s[1][2].json = "{\"caption\": \"unterminated"; /* bad json: found by the length index */
    s[1][7].latent_ndim = 3;                      /* 24x24 tokens = 576 > 512: too long for the budget */
    s[1][7].latent_shape[0] = C_LAT, s[1][7].latent_shape[1] = 48, s[1][7].latent_shape[2] = 48;
    snprintf(path, sizeof path, "%s/shard-00.tar", dir);
    REQUIRE_OK(fixture_write_shard(path, s[0], 10));
    snprintf(path, sizeof path, "%s/sub/shard-01.tar", dir);
    REQUIRE_OK(fixture_write_shard(path, s[1], 10));

    for (int workers = 0; workers <= 2; workers += 2) {
        char ov[64];
        snprintf(ov, sizeof ov, "dataset.num_workers=%d", workers);
        const char *extra[] = {ov, NULL};
        PackSource *src = open_source(dir, 0, 1, extra);
        REQUIRE(src);
        /* one epoch: packs until the loader reports epoch 1 */
        int seen[20] = {0}, delivered = 0;
        int64_t skipped_in_epoch0 = -1;
        for (int guard = 0; guard < 40; guard++) {
            Pack p;
            int64_t before = src->stats.skipped;
            REQUIRE(take_packs(src, &p, 1));
            LoaderInfo info;
            loader_info(src, &info);
            if (info.epoch == 1) {
                skipped_in_epoch0 = before;
                pack_free(&p);
                break;
            }
            for (int j = 0; j < p.n_samples; j++) {
                int idx;
                const char *colon = strchr(p.samples[j].source, ':');
                REQUIRE(colon && sscanf(colon + 1, "s%d", &idx) == 1 && idx >= 0 && idx < 20);
                seen[idx]++;
                delivered++;
            }
            pack_free(&p);
        }
        CHECK(delivered == 17);
        for (int i = 0; i < 20; i++) {
            int broken = i == 3 || i == 12 || i == 17;
            CHECK_MSG(seen[i] == (broken ? 0 : 1), "workers %d: sample %d delivered %d times", workers, i, seen[i]);
        }
        LoaderSkip *sk;
        int n = loader_skipped(src, &sk);
        CHECK_MSG(n == 3, "workers %d: %d skipped", workers, n);
        static const char *const want_src[3] = {"sub/shard-01.tar:s00012", "sub/shard-01.tar:s00017",
                                                "shard-00.tar:s00003"};
        static const char *const want_reason[3] = {"bad json", "task_encoder_seq_length", "NaN"};
        for (int k = 0; k < 3 && k < n; k++) {
            CHECK_MSG(strcmp(sk[k].source, want_src[k]) == 0, "skip %d: %s", k, sk[k].source);
            CHECK_MSG(strstr(sk[k].reason, want_reason[k]) != NULL, "skip %d: %s", k, sk[k].reason);
            CHECK(sk[k].at_load == (k == 2));
        }
        free(sk);
        CHECK(skipped_in_epoch0 == 3); /* 2 by the index, 1 when read */
        /* the second epoch drops the NaN sample again, but names it only once */
        int64_t skipped_by_epoch1 = -1;
        for (int guard = 0; guard < 40; guard++) {
            Pack p;
            int64_t before = src->stats.skipped;
            REQUIRE(take_packs(src, &p, 1));
            pack_free(&p);
            LoaderInfo info;
            loader_info(src, &info);
            if (info.epoch == 2) {
                skipped_by_epoch1 = before;
                break;
            }
        }
        CHECK(loader_skipped(src, &sk) == 3);
        free(sk);
        CHECK_MSG(skipped_by_epoch1 == 4, "skipped %lld", (long long)skipped_by_epoch1);
        pack_source_destroy(src);
    }
}

TEST(loader_thread_counts_give_identical_packs) {
    const char *dir = mixed_dataset("threads", 3, 9);
    enum { N = 30 };
    Pack *runs[3];
    static const char *const ov[3] = {"dataset.num_workers=0", "dataset.num_workers=1", "dataset.num_workers=3"};
    for (int k = 0; k < 3; k++) {
        const char *extra[] = {ov[k], NULL};
        runs[k] = reference_stream(dir, N, extra);
        REQUIRE(runs[k]);
    }
    for (int k = 1; k < 3; k++)
        for (int i = 0; i < N; i++) CHECK_MSG(packs_equal(&runs[0][i], &runs[k][i]), "%s: pack %d differs", ov[k], i);
    /* the stream crossed an epoch: uids of a sample differ between epochs */
    for (int k = 0; k < 3; k++) {
        free_packs(runs[k], N);
        free(runs[k]);
    }
}

TEST(loader_without_usable_samples_fails_clearly) {
    char dir[1200], path[1300];
    snprintf(dir, sizeof dir, "%s/bad_pth", test_tmpdir());
    FixtureSample s[2] = {fixture_mixed_sample(0, C_LAT, D_TEXT), fixture_mixed_sample(1, C_LAT, D_TEXT)};
    s[0].latent_format = s[1].latent_format = FIX_BAD_PTH;
    snprintf(path, sizeof path, "%s/dfm.tar", dir);
    REQUIRE_OK(fixture_write_shard(path, s, 2));
    Config *cfg = fixture_config(dir, C_LAT, D_TEXT, BUDGET, NULL);
    REQUIRE(cfg);
    PackSource *src;
    CHECK(pack_source_create(&src, cfg, 0, 1) == VFM_ERR_USAGE);
    CHECK_MSG(strstr(vfm_last_error(), "no usable samples") && strstr(vfm_last_error(), "2 format"), "%s",
              vfm_last_error());
    config_free(cfg);
    /* the channel count of the model does not match the data: every sample skipped, said so */
    const char *dir2 = mixed_dataset("channels", 1, 3);
    cfg = fixture_config(dir2, C_LAT + 1, D_TEXT, BUDGET, NULL);
    REQUIRE(cfg);
    CHECK(pack_source_create(&src, cfg, 0, 1) == VFM_ERR_USAGE);
    CHECK_MSG(strstr(vfm_last_error(), "3 channels"), "%s", vfm_last_error());
    config_free(cfg);
}

TEST(loader_passes_over_a_pack_whose_samples_all_fail) {
    /* one 16x16 image per pack (64 tokens, budget 64), in order: the NaN sample's pack is empty when
     * built, so the replica takes its next pack in its place; the position still counts it */
    char dir[1200], path[1300];
    snprintf(dir, sizeof dir, "%s/allfail", test_tmpdir());
    FixtureSample s[5];
    for (int i = 0; i < 5; i++) {
        s[i] = fixture_mixed_sample(1, C_LAT, D_TEXT); /* kind 1: [C,16,16] */
        snprintf(s[i].key, sizeof s[i].key, "s%05d", i);
        s[i].seed = 100 + (uint64_t)i;
    }
    s[2].poison = 0.0f / 0.0f;
    snprintf(path, sizeof path, "%s/a.tar", dir);
    REQUIRE_OK(fixture_write_shard(path, s, 5));
    const char *extra[] = {"dataset.shuffle=false", "dataset.task_encoder_seq_length=64", NULL};
    for (int workers = 0; workers <= 3; workers += 3) {
        char ov[64];
        snprintf(ov, sizeof ov, "dataset.num_workers=%d", workers);
        const char *ex[] = {extra[0], extra[1], ov, NULL};
        Config *cfg = fixture_config(dir, C_LAT, D_TEXT, 64, ex);
        REQUIRE(cfg);
        PackSource *src;
        REQUIRE_OK(pack_source_create(&src, cfg, 0, 1));
        config_free(cfg);
        static const char *const want[6] = {"a.tar:s00000", "a.tar:s00001", "a.tar:s00003", "a.tar:s00004",
                                            "a.tar:s00000", "a.tar:s00001"};
        for (int i = 0; i < 6; i++) {
            Pack p;
            REQUIRE(take_packs(src, &p, 1));
            CHECK(p.n_samples == 1);
            CHECK_MSG(strcmp(p.samples[0].source, want[i]) == 0, "workers %d pack %d: %s", workers, i,
                      p.samples[0].source);
            pack_free(&p);
            if (i == 2) {
                char *state;
                REQUIRE_OK(src->get_state(src, &state));
                CHECK_MSG(strstr(state, "\"global_pack\":4") != NULL, "%s", state);
                free(state);
            }
        }
        CHECK(src->stats.packs == 6 && src->stats.skipped == 1);
        pack_source_destroy(src);
    }
}

/* A shard of n 16x16 images (64 tokens each: one per pack with a budget of 64), the samples whose
 * bit in `nan` is set with a NaN latent (the length index cannot see it: found when read). */
static void write_images(const char *dir, int n, uint64_t nan) {
    char path[1300];
    FixtureSample *s = calloc((size_t)n, sizeof *s);
    for (int i = 0; i < n; i++) {
        s[i] = fixture_mixed_sample(1, C_LAT, D_TEXT);
        snprintf(s[i].key, sizeof s[i].key, "s%05d", i);
        s[i].seed = 100 + (uint64_t)i;
        if (nan >> i & 1) s[i].poison = 0.0f / 0.0f;
    }
    snprintf(path, sizeof path, "%s/a.tar", dir);
    if (fixture_write_shard(path, s, n) != VFM_OK) test_fail(__FILE__, __LINE__, "fixture: %s", vfm_last_error());
    free(s);
}

static PackSource *open_images(const char *dir, int workers, const char *more) {
    char ov[64];
    snprintf(ov, sizeof ov, "dataset.num_workers=%d", workers);
    const char *ex[] = {"dataset.shuffle=false", "dataset.task_encoder_seq_length=64", ov, more, NULL};
    Config *cfg = fixture_config(dir, C_LAT, D_TEXT, 64, ex);
    PackSource *src = NULL;
    if (cfg && pack_source_create(&src, cfg, 0, 1) != VFM_OK) test_fail(__FILE__, __LINE__, "%s", vfm_last_error());
    config_free(cfg);
    return src;
}

TEST(loader_stops_when_a_whole_pass_gives_no_sample) {
    /* every latent NaN: the length index passes them all, every read fails; the loader used to spin
     * for ever looking for a sample */
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/allnan", test_tmpdir());
    write_images(dir, 5, 0x1f);
    for (int workers = 0; workers <= 3; workers += 3) {
        PackSource *src = open_images(dir, workers, NULL);
        REQUIRE(src);
        Pack p;
        pack_init(&p, src->token_dim, src->text_dim, 64, 1);
        CHECK(src->next(src, &p) == VFM_ERR_USAGE);
        const char *e = vfm_last_error();
        CHECK_MSG(strstr(e, "a whole pass over the data gave no usable sample: 5 samples skipped when read") &&
                      strstr(e, "a.tar:s00000: latent has NaN/Inf values") && strstr(e, "vfm data inspect"),
                  "workers %d: %s", workers, e);
        pack_free(&p);
        pack_source_destroy(src);
    }
    /* vfm train on it: exit 2 and the one line, at any reader count */
    char path_ov[1300], save_ov[1300];
    snprintf(path_ov, sizeof path_ov, "dataset.path=%s", dir);
    snprintf(save_ov, sizeof save_ov, "checkpoint.save=%s/run", test_tmpdir());
    const char *args[] = {"train", path_ov, save_ov, "model.preset=tiny", "model.crossattn_emb_size=8",
                          "dataset.task_encoder_seq_length=64", "train.train_iters=2", "train.device=cpu",
                          "dataset.num_workers=2", "logger.level=error"};
    char *out, *err;
    CHECK(run_vfm(args, 10, &out, &err) == 2);
    CHECK_MSG(strstr(err, "vfm: ") && strstr(err, "a whole pass over the data gave no usable sample"), "%s", err);
    free(out);
    free(err);
}

TEST(loader_stops_past_max_skip_fraction) {
    /* 2 of 10 samples fail when read: 20% > the default 0.1, said once 100 samples were read */
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/someNaN", test_tmpdir());
    write_images(dir, 10, (1u << 3) | (1u << 7));
    PackSource *src = open_images(dir, 2, NULL);
    REQUIRE(src);
    Pack p;
    pack_init(&p, src->token_dim, src->text_dim, 64, 1);
    int got = 0;
    vfm_status s = VFM_OK;
    while (got < 200 && (s = src->next(src, &p)) == VFM_OK) got++;
    CHECK_MSG(s == VFM_ERR_USAGE && got >= 79 && got <= 81, "%d packs, %s", got, vfm_last_error());
    CHECK_MSG(strstr(vfm_last_error(), "dataset.max_skip_fraction = 0.1") && strstr(vfm_last_error(), "(20.0%)"), "%s",
              vfm_last_error());
    pack_source_destroy(src);
    /* allowed up to a half: it goes on */
    src = open_images(dir, 2, "dataset.max_skip_fraction=0.5");
    REQUIRE(src);
    for (got = 0; got < 200 && src->next(src, &p) == VFM_OK;) got++;
    CHECK_MSG(got == 200, "%d packs: %s", got, vfm_last_error());
    pack_free(&p);
    pack_source_destroy(src);
}

TEST(loader_reports_a_skip_list_it_cannot_grow) {
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/oom", test_tmpdir());
    write_images(dir, 5, 1u << 1);
    Capture c;
    capture_begin(&c, 2);
    PackSource *src = open_images(dir, 0, NULL);
    Pack p;
    pack_init(&p, C_LAT * 4, D_TEXT, 64, 1);
    alloc_fail_when(16 * sizeof(LoaderSkip), 1); /* the skip list's first growth: out of memory */
    for (int i = 0; src && i < 3; i++) CHECK_OK(src->next(src, &p));
    alloc_fail_off();
    char *err = capture_end(&c);
    CHECK(alloc_fail_refused() == 1);
    REQUIRE(src);
    CHECK_MSG(strstr(err, "out of memory for the list of skipped samples: a.tar:s00001 and later skips are counted but "
                          "not listed"), "%s", err);
    LoaderInfo info;
    loader_info(src, &info);
    CHECK(info.skips_unlisted == 1 && src->stats.skipped == 1);
    free(err);
    pack_free(&p);
    pack_source_destroy(src);
}

/* pack_init's callers check it: the loader hands its slot's pack to a caller whose pack has no
 * buffers yet and makes the slot a new empty one; when that fails, next() says so (the slot is
 * left with no buffers, which the next read would write through). */
TEST(loader_reports_an_empty_pack_it_cannot_make) {
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/nopack", test_tmpdir());
    write_images(dir, 5, 0);
    PackSource *src = open_images(dir, 0, NULL);
    REQUIRE(src);
    Pack p;
    memset(&p, 0, sizeof p); /* never initialised: the slot's pack is handed over, not copied */
    alloc_fail_when(sizeof(int32_t), 1); /* the new empty pack's first offset array */
    vfm_status s = src->next(src, &p);
    alloc_fail_off();
    CHECK(alloc_fail_refused() == 1);
    CHECK_MSG(s == VFM_ERR_NOMEM && strstr(vfm_last_error(), "out of memory for an empty pack"), "status %d: %s", (int)s,
              vfm_last_error());
    pack_free(&p);
    pack_source_destroy(src);
}

TEST(data_cli_index_inspect_bench) {
    const char *dir = mixed_dataset("cli", 2, 6);
    char cache[1300];
    snprintf(cache, sizeof cache, "%s/.vfm/length_index.bin", dir);
    char d0[1200];
    snprintf(d0, sizeof d0, "%s", dir);
    char *index_args[] = {"index", d0, "--threads", "2"};
    CHECK(cmd_data(4, index_args) == 0);
    CHECK(access(cache, F_OK) == 0);
    char *inspect_args[] = {"inspect", d0, "model.in_channels=4", "model.crossattn_emb_size=8"};
    CHECK(cmd_data(4, inspect_args) == 0);
    char *bench_args[] = {"bench", d0, "--seconds", "0.2", "model.in_channels=4", "model.crossattn_emb_size=8",
                          "dataset.task_encoder_seq_length=512"};
    CHECK(cmd_data(7, bench_args) == 0);
    /* usage problems exit 2 */
    char *no_path[] = {"inspect"};
    CHECK(cmd_data(1, no_path) == 2);
    char *bad_seconds[] = {"bench", d0, "--seconds", "-1"};
    CHECK(cmd_data(4, bad_seconds) == 2);
    char *two_paths[] = {"index", d0, d0};
    CHECK(cmd_data(3, two_paths) == 2);
    char *unknown[] = {"frobnicate"};
    CHECK(cmd_data(1, unknown) == 2);
    char *bad_key[] = {"bench", d0, "dataset.no_such_key=1"};
    CHECK(cmd_data(3, bad_key) == 2);
    char missing[1300];
    snprintf(missing, sizeof missing, "%s/none", dir);
    char *missing_args[] = {"inspect", missing};
    CHECK(cmd_data(2, missing_args) == 2);
    char *help[] = {"bench", "--help"};
    CHECK(cmd_data(2, help) == 0);
}
