/* Metadataset blends in the pack plan (src/data/energon/metadataset.c, plan.c, loader.c): a 3:1 blend
 * gives the first dataset 0.75 ± 0.03 of 4,000 samples, drawn at random from the seed (not a
 * fixed interleave) while each dataset runs through its own epochs; a blend resumes to the same
 * pack sequence at 1, 2 and 3 replicas; blend_epochized gives each dataset exactly its
 * repetitions per epoch; nested metadatasets multiply weights, merge subflavors and subsets as
 * Energon does; what vfm cannot read is refused naming the file. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fileutil.h"
#include "data/loader/loader.h"
#include "data/energon/metadataset.h"
#include "data/loader/source.h"
#include "data_fixture.h"
#include "test.h"

/* A dataset dir/<name> of n_shards shards of per_shard tiny images ([4, 2, 2]: one token, 64
 * padded), keys "<prefix>%04d". */
static void tiny_dataset(const char *dir, const char *prefix, int n_shards, int per_shard) {
    FixtureSample *s = calloc((size_t)per_shard, sizeof *s);
    for (int k = 0; k < n_shards; k++) {
        for (int i = 0; i < per_shard; i++) {
            FixtureSample *f = &s[i];
            memset(f, 0, sizeof *f);
            snprintf(f->key, sizeof f->key, "%s%04d", prefix, k * per_shard + i);
            f->latent_ndim = 3;
            f->latent_shape[0] = 4, f->latent_shape[1] = 2, f->latent_shape[2] = 2;
            f->latent_format = FIX_NPY;
            f->seed = (uint64_t)(k * per_shard + i) * 7919u + (uint64_t)prefix[0];
        }
        char path[1400];
        snprintf(path, sizeof path, "%s/%s-%02d.tar", dir, prefix, k);
        if (fixture_write_shard(path, s, per_shard) != VFM_OK) test_fail(__FILE__, __LINE__, "%s", vfm_last_error());
    }
    free(s);
}

static const char *write_yaml(const char *name, const char *text) {
    static char path[4][1300];
    static int k;
    k = (k + 1) % 4;
    snprintf(path[k], sizeof path[k], "%s/%s", test_tmpdir(), name);
    if (write_file_atomic(path[k], text, strlen(text)) != VFM_OK) test_fail(__FILE__, __LINE__, "%s", vfm_last_error());
    return path[k];
}

/* Datasets a (30 samples) and b (20 samples) under the test directory, once. */
static void two_datasets(void) {
    char a[1300], b[1300];
    snprintf(a, sizeof a, "%s/a", test_tmpdir());
    snprintf(b, sizeof b, "%s/b", test_tmpdir());
    if (!dir_exists(a)) tiny_dataset(a, "a", 3, 10);
    if (!dir_exists(b)) tiny_dataset(b, "b", 2, 10);
}

static const char *k_blend_3_1 = "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n"
                                 "    blend:\n      - weight: 3\n        path: a\n      - weight: 1\n        path: b\n";

static PackSource *source_of(const char *path, int rank, int world, const char *seed) {
    char s[64];
    snprintf(s, sizeof s, "rng.seed=%s", seed ? seed : "1234");
    Config *cfg = fixture_config(path, 4, 8, 512, (const char *[]){s, "dataset.packing_buffer_size=16", NULL});
    PackSource *src = NULL;
    if (cfg && pack_source_create(&src, cfg, rank, world) != VFM_OK)
        test_fail(__FILE__, __LINE__, "pack_source_create %s: %s", path, vfm_last_error());
    config_free(cfg);
    return src;
}

/* The sample keys of packs, in order, until at least n (all of the last pack). */
static char (*take_keys(PackSource *src, int n, int *got))[16] {
    char(*keys)[16] = malloc((size_t)(n + 64) * sizeof *keys);
    Pack p;
    memset(&p, 0, sizeof p);
    *got = 0;
    while (src && *got < n) {
        if (src->next(src, &p) != VFM_OK) {
            test_fail(__FILE__, __LINE__, "next: %s", vfm_last_error());
            break;
        }
        for (int i = 0; i < p.n_samples && *got < n + 64; i++)
            snprintf(keys[(*got)++], 16, "%s", strchr(p.samples[i].source, ':') + 1);
    }
    pack_free(&p);
    return keys;
}

TEST(blend_weights_3_to_1_give_three_quarters_drawn_from_the_seed) {
    two_datasets();
    const char *yaml = write_yaml("blend31.yaml", k_blend_3_1);
    PackSource *src = source_of(yaml, 0, 1, NULL);
    REQUIRE(src);
    int n;
    char(*keys)[16] = take_keys(src, 4000, &n);
    int from_a = 0, per_key_a[30] = {0}, per_key_b[20] = {0}, distinct_windows[41] = {0};
    for (int i = 0; i < 4000; i++) {
        int id = atoi(keys[i] + 1);
        if (keys[i][0] == 'a') from_a++, per_key_a[id]++;
        else per_key_b[id]++;
    }
    double share = from_a / 4000.0;
    CHECK_MSG(share >= 0.72 && share <= 0.78, "share of the first dataset %.4f, want 0.75 +- 0.03", share);
    /* not a fixed interleave: windows of 40 samples hold varying counts from a */
    for (int w = 0; w < 100; w++) {
        int c = 0;
        for (int i = 40 * w; i < 40 * (w + 1); i++) c += keys[i][0] == 'a';
        distinct_windows[c] = 1;
    }
    int kinds = 0;
    for (int c = 0; c <= 40; c++) kinds += distinct_windows[c];
    CHECK_MSG(kinds >= 5, "only %d different counts per window of 40: a fixed interleave?", kinds);
    /* each dataset runs through its own epochs: every key used about equally often */
    int lo = 1 << 30, hi = 0;
    for (int k = 0; k < 30; k++) lo = per_key_a[k] < lo ? per_key_a[k] : lo, hi = per_key_a[k] > hi ? per_key_a[k] : hi;
    CHECK_MSG(hi - lo <= 2, "dataset a: keys used between %d and %d times", lo, hi);
    lo = 1 << 30, hi = 0;
    for (int k = 0; k < 20; k++) lo = per_key_b[k] < lo ? per_key_b[k] : lo, hi = per_key_b[k] > hi ? per_key_b[k] : hi;
    CHECK_MSG(hi - lo <= 2, "dataset b: keys used between %d and %d times", lo, hi);
    pack_source_destroy(src);
    /* the same seed draws the same sequence; another seed another one, with the same share */
    src = source_of(yaml, 0, 1, NULL);
    int n2;
    char(*again)[16] = take_keys(src, 400, &n2);
    int same = 1;
    for (int i = 0; i < 400; i++) same &= !strcmp(again[i], keys[i]);
    CHECK(same);
    pack_source_destroy(src);
    src = source_of(yaml, 0, 1, "99");
    char(*other)[16] = take_keys(src, 4000, &n2);
    int other_a = 0, differ = 0;
    for (int i = 0; i < 4000; i++) other_a += other[i][0] == 'a', differ += other[i][0] != keys[i][0];
    CHECK(differ > 100);
    CHECK_MSG(other_a >= 2880 && other_a <= 3120, "seed 99: share %.4f", other_a / 4000.0);
    LoaderInfo info;
    CHECK(loader_info(src, &info) && info.n_datasets == 2 && info.n_usable == 50 && info.n_samples == 50);
    pack_source_destroy(src);
    free(keys);
    free(again);
    free(other);
}

/* Pack identity for comparisons: its samples' uids and its tokens. */
static int same_pack(const Pack *a, const Pack *b) {
    if (a->n_samples != b->n_samples || a->n_tokens != b->n_tokens) return 0;
    for (int i = 0; i < a->n_samples; i++)
        if (a->samples[i].uid != b->samples[i].uid) return 0;
    return memcmp(a->tokens, b->tokens, (size_t)(a->n_tokens * a->token_dim) * sizeof(float)) == 0;
}

TEST(blend_resumes_the_same_pack_sequence_at_any_replica_count) {
    two_datasets();
    const char *yaml = write_yaml("blend_resume.yaml", k_blend_3_1);
    enum { TOTAL = 40, CUT = 13 };
    PackSource *ref = source_of(yaml, 0, 1, NULL);
    REQUIRE(ref);
    Pack packs[TOTAL];
    memset(packs, 0, sizeof packs);
    for (int i = 0; i < TOTAL; i++) REQUIRE_OK(ref->next(ref, &packs[i]));
    LoaderInfo info;
    REQUIRE(loader_info(ref, &info));
    CHECK_MSG(info.epoch >= 3, "the reference runs through several blend epochs (%lld)", (long long)info.epoch);
    pack_source_destroy(ref);
    /* killed mid-epoch at world 1 after CUT packs; resumed at 1, 2 and 3 replicas */
    PackSource *first = source_of(yaml, 0, 1, NULL);
    Pack p;
    memset(&p, 0, sizeof p);
    for (int i = 0; i < CUT; i++) REQUIRE_OK(first->next(first, &p));
    char *state;
    REQUIRE_OK(first->get_state(first, &state));
    pack_source_destroy(first);
    for (int R = 1; R <= 3; R++) {
        PackSource *rep[3];
        for (int r = 0; r < R; r++) {
            REQUIRE((rep[r] = source_of(yaml, r, R, NULL)) != NULL);
            REQUIRE_OK(rep[r]->set_state(rep[r], state));
        }
        for (int k = 0; CUT + k * R + R <= TOTAL; k++)
            for (int r = 0; r < R; r++) {
                REQUIRE_OK(rep[r]->next(rep[r], &p));
                int g = CUT + k * R + r;
                CHECK_MSG(same_pack(&p, &packs[g]), "R=%d replica %d step %d: not global pack %d", R, r, k, g);
            }
        for (int r = 0; r < R; r++) pack_source_destroy(rep[r]);
    }
    free(state);
    pack_free(&p);
    for (int i = 0; i < TOTAL; i++) pack_free(&packs[i]);
}

TEST(blend_epochized_gives_each_dataset_its_repetitions) {
    two_datasets();
    const char *yaml = write_yaml("epochized.yaml",
                                  "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n"
                                  "    blend_epochized:\n      - repetitions: 2\n        path: a\n"
                                  "      - repetitions: 0.5\n        path: b\n");
    PackSource *src = source_of(yaml, 0, 1, NULL);
    REQUIRE(src);
    /* an epoch: a twice (60), half of b (10); each key of a with two different uids */
    int64_t packs = src->epoch_packs;
    Pack p;
    memset(&p, 0, sizeof p);
    int count_a[30] = {0}, count_b[20] = {0}, total = 0;
    uint64_t uid_a[30][2] = {{0}};
    for (int64_t k = 0; k < packs; k++) {
        REQUIRE_OK(src->next(src, &p));
        for (int i = 0; i < p.n_samples; i++, total++) {
            const char *key = strchr(p.samples[i].source, ':') + 1;
            int id = atoi(key + 1);
            if (key[0] == 'a') {
                if (count_a[id] < 2) uid_a[id][count_a[id]] = p.samples[i].uid;
                count_a[id]++;
            } else {
                count_b[id]++;
            }
        }
    }
    CHECK_MSG(total == 70, "an epochized epoch holds %d samples, want 60 + 10", total);
    int twice = 0, once_b = 0, fresh_uids = 0;
    for (int k = 0; k < 30; k++) twice += count_a[k] == 2, fresh_uids += uid_a[k][0] != uid_a[k][1];
    for (int k = 0; k < 20; k++) once_b += count_b[k] == 1;
    CHECK_MSG(twice == 30 && fresh_uids == 30, "a: %d keys twice, %d with two uids", twice, fresh_uids);
    CHECK_MSG(once_b == 10, "b: %d keys once", once_b);
    pack_free(&p);
    pack_source_destroy(src);
}

TEST(metadataset_flattens_as_energon) {
    two_datasets();
    char c[1300];
    snprintf(c, sizeof c, "%s/c", test_tmpdir());
    REQUIRE_OK(mkdir_p(c));
    write_yaml("inner.yaml", "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n"
                             "  train:\n    subset: {range: [10%, 50%]}\n    blend:\n"
                             "      - {weight: 1, path: a, subflavors: {k: inner, a: 1}}\n"
                             "      - {weight: 3, path: b, split_part: val}\n"
                             "  val: {path: a}\n");
    const char *outer = write_yaml("outer.yaml",
                                   "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n    blend:\n"
                                   "      - {weight: 1, path: inner.yaml, subflavors: {k: outer}, subset: {range: [50%, 100%]}}\n"
                                   "      - {weight: 1, path: c, subset: {range: [2, end]}}\n");
    DatasetSpec *spec;
    REQUIRE_OK(dataset_spec_resolve(&spec, outer, "train"));
    CHECK(spec->is_metadataset && spec->mode == BLEND_WEIGHT && spec->n_leaves == 3);
    if (spec->n_leaves == 3) {
        const DatasetLeaf *a = &spec->leaves[0], *b = &spec->leaves[1], *cc = &spec->leaves[2];
        CHECK(strstr(a->path, "/a") && strstr(b->path, "/b") && strstr(cc->path, "/c"));
        CHECK(a->weight == 0.125 && b->weight == 0.375 && cc->weight == 0.5); /* (1/4)(1/2), (3/4)(1/2), 1/2 */
        CHECK(!strcmp(a->split, "train") && !strcmp(b->split, "val") && !strcmp(cc->split, "train"));
        /* outer subflavors override the inner ones */
        CHECK(!strcmp(json_string_value(json_object_get(a->subflavors, "k")), "outer"));
        CHECK(json_integer_value(json_object_get(a->subflavors, "a")) == 1);
        /* [50%, 100%] of the inner [10%, 50%]: [30%, 50%] */
        CHECK(a->subset.has_rel && fabs(a->subset.rel_start - 0.3) < 1e-15 && fabs(a->subset.rel_end - 0.5) < 1e-15 &&
              !a->subset.has_abs);
        CHECK(cc->subset.has_abs && cc->subset.abs_start == 2 && cc->subset.abs_end == -1);
        int64_t lo, hi;
        REQUIRE_OK(dataset_subset_apply(&a->subset, 30, "a", &lo, &hi));
        CHECK(lo == 9 && hi == 15);
        REQUIRE_OK(dataset_subset_apply(&cc->subset, 7, "c", &lo, &hi));
        CHECK(lo == 2 && hi == 7);
        CHECK(dataset_subset_apply(&cc->subset, 1, "c", &lo, &hi) == VFM_ERR_USAGE);
    }
    dataset_spec_free(spec);
    /* the older Metadataset format */
    const char *v1 = write_yaml("v1.yaml", "splits:\n  train:\n    datasets:\n      - {weight: 2, path: a}\n"
                                           "      - {weight: 6, path: b, subflavor: legacy}\n");
    REQUIRE_OK(dataset_spec_resolve(&spec, v1, "train"));
    CHECK(spec->mode == BLEND_WEIGHT && spec->n_leaves == 2 && spec->leaves[1].weight == 0.75);
    CHECK(!strcmp(json_string_value(json_object_get(spec->leaves[1].subflavors, "__subflavor__")), "legacy"));
    dataset_spec_free(spec);
}

TEST(metadataset_errors_name_the_file_and_the_problem) {
    two_datasets();
    static const char *const cases[][2] = {
        {"__class__: MetadatasetV2\nsplits:\n  train:\n    join: [{path: a}, {path: b}]\n    joiner: x\n",
         "join, which vfm does not support"},
        {"__class__: MetadatasetV2\nsplits:\n  train: {path: a, wieght: 2}\n", "unknown key 'wieght'"},
        {"__class__: MetadatasetV2\nsplits:\n  val: {path: a}\n", "has no split 'train' (it has: val)"},
        {"__class__: MetadatasetV2\nsplits:\n  train: {path: missing_dir}\n", "does not exist"},
        {"__class__: MetadatasetV2\nsplits:\n  train:\n    blend: [{weight: 0, path: a}]\n", "must be a positive number"},
        {"__class__: MetadatasetV2\nsplits:\n  train:\n    blend: [{path: a, subset: {range: [10%, 5]}}]\n",
         "subset range must be"},
        {"__class__: Dataset\nsplits: {}\n", "is not a metadataset vfm reads"},
        {"__class__: MetadatasetV2\nsplits:\n  train: {path: err_abs.yaml, subset: {range: [0, 5]}}\n",
         "only allowed on a reference to a dataset directory"},
        {"__class__: MetadatasetV2\nsplits:\n  train:\n    blend: [{path: err_epochized.yaml}]\n",
         "cannot mix blend with blend_epochized"},
    };
    write_yaml("err_abs.yaml", "__class__: MetadatasetV2\nsplits:\n  train: {path: a}\n");
    write_yaml("err_epochized.yaml", "__class__: MetadatasetV2\nsplits:\n  train:\n    blend_epochized: [{path: a}]\n");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *yaml = write_yaml("err.yaml", cases[i][0]);
        DatasetSpec *spec = NULL;
        CHECK_MSG(dataset_spec_resolve(&spec, yaml, "train") == VFM_ERR_USAGE, "case %zu accepted", i);
        CHECK_MSG(strstr(vfm_last_error(), cases[i][1]) && strstr(vfm_last_error(), "err"), "case %zu: %s", i,
                  vfm_last_error());
        dataset_spec_free(spec);
    }
    DatasetSpec *spec = NULL;
    char file[1300];
    snprintf(file, sizeof file, "%s/a/a-00.tar", test_tmpdir());
    CHECK(dataset_spec_resolve(&spec, file, "train") == VFM_ERR_USAGE &&
          strstr(vfm_last_error(), "neither a dataset directory nor a metadataset"));
}
