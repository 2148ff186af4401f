/* The length index (src/data/loader/length_index.c): what it records per sample, the shard order, its
 * cache (written, reused, partially re-read when one shard changes, rebuilt when corrupt, kept in
 * memory when it cannot be written), and broken samples recorded with their reasons. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/fileutil.h"
#include "data/loader/encode.h"
#include "data/loader/length_index.h"
#include "data_fixture.h"
#include "test.h"

static void dataset_dir(char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s", test_tmpdir(), name); }

/* Expected C,T,H,W of a fixture sample. */
static void fixture_shape(const FixtureSample *s, int32_t out[4]) {
    const int64_t *sh = s->latent_shape;
    if (s->latent_ndim == 3) out[0] = (int32_t)sh[0], out[1] = 1, out[2] = (int32_t)sh[1], out[3] = (int32_t)sh[2];
    else if (s->latent_ndim == 4) for (int d = 0; d < 4; d++) out[d] = (int32_t)sh[d];
    else for (int d = 0; d < 4; d++) out[d] = (int32_t)sh[d + 1];
}

TEST(length_index_records_every_sample) {
    char dir[1200];
    dataset_dir(dir, sizeof dir, "mixed");
    REQUIRE_OK(fixture_mixed_dataset(dir, 3, 9, 4, 8));
    LengthIndex *li;
    REQUIRE_OK(length_index_open(&li, dir, 0, 2));
    CHECK(li->origin == LENGTH_INDEX_WRITTEN && li->shards_read == 3);
    REQUIRE(li->n_shards == 3 && li->n_samples == 27);
    /* sorted relative paths: "shard-00.tar" < "shard-01.tar" < "sub/shard-02.tar" */
    CHECK(strcmp(li->shards[0].rel, "shard-00.tar") == 0);
    CHECK(strcmp(li->shards[1].rel, "shard-01.tar") == 0);
    CHECK(strcmp(li->shards[2].rel, "sub/shard-02.tar") == 0);
    for (int64_t i = 0; i < 27; i++) {
        const LengthEntry *e = &li->samples[i];
        FixtureSample f = fixture_mixed_sample(i, 4, 8);
        int32_t shape[4];
        fixture_shape(&f, shape);
        CHECK_MSG(e->status == ENC_OK, "sample %lld: %s", (long long)i, e->reason ? e->reason : "");
        CHECK(strcmp(e->key, f.key) == 0);
        CHECK(e->shard == i / 9 && e->index == i % 9);
        CHECK_MSG(memcmp(e->shape, shape, sizeof shape) == 0, "sample %lld: shape %d,%d,%d,%d", (long long)i,
                  e->shape[0], e->shape[1], e->shape[2], e->shape[3]);
        CHECK(e->text_len == f.text_rows);
        CHECK(e->text_width == (f.text_rows ? 8 : 0));
        CHECK_MSG(e->text_real == (f.text_rows ? f.text_rows - f.text_zero_tail : 0), "sample %lld: real %d", (long long)i,
                  e->text_real);
        CHECK(li->shards[e->shard].first <= i && i < li->shards[e->shard].first + li->shards[e->shard].count);
    }
    const char *ps = length_index_pixel_space(li);
    CHECK(ps && strcmp(ps, "{\"factor\":2,\"offset\":0.5,\"scale\":1}") == 0);
    char cache[1300];
    snprintf(cache, sizeof cache, "%s/.vfm/length_index.bin", dir);
    CHECK(strcmp(li->cache_path, cache) == 0 && path_exists(cache));
    /* the shards' Energon index files were written on the way */
    char idx[1300];
    snprintf(idx, sizeof idx, "%s/sub/shard-02.tar.idx", dir);
    CHECK(path_exists(idx));
    length_index_free(li);
}

/* Sets a file's mtime to `sec` seconds since the epoch. */
static void set_mtime(const char *path, time_t sec) {
    struct timespec ts[2] = {{sec, 0}, {sec, 0}};
    utimensat(AT_FDCWD, path, ts, 0);
}

TEST(length_index_cache_is_reused_and_validated) {
    char dir[1200], shard1[1300], cache[1300];
    dataset_dir(dir, sizeof dir, "cached");
    REQUIRE_OK(fixture_mixed_dataset(dir, 3, 5, 4, 8));
    snprintf(shard1, sizeof shard1, "%s/shard-01.tar", dir);
    snprintf(cache, sizeof cache, "%s/.vfm/length_index.bin", dir);
    LengthIndex *a, *b;
    REQUIRE_OK(length_index_open(&a, dir, 0, 1));
    CHECK(a->origin == LENGTH_INDEX_WRITTEN);
    /* a second open reads no shard and gives the same entries */
    REQUIRE_OK(length_index_open(&b, dir, 0, 1));
    CHECK(b->origin == LENGTH_INDEX_LOADED && b->shards_read == 0);
    REQUIRE(b->n_samples == a->n_samples);
    for (int64_t i = 0; i < a->n_samples; i++) {
        const LengthEntry *x = &a->samples[i], *y = &b->samples[i];
        CHECK(strcmp(x->key, y->key) == 0 && memcmp(x->shape, y->shape, sizeof x->shape) == 0 &&
              x->text_len == y->text_len && x->text_real == y->text_real && x->status == y->status &&
              x->shard == y->shard && x->index == y->index);
    }
    CHECK(strcmp(length_index_pixel_space(b), length_index_pixel_space(a)) == 0);
    length_index_free(b);

    /* one shard rewritten with other samples: only it is read again */
    FixtureSample s[2] = {fixture_mixed_sample(100, 4, 8), fixture_mixed_sample(101, 4, 8)};
    REQUIRE_OK(fixture_write_shard(shard1, s, 2));
    REQUIRE_OK(length_index_open(&b, dir, 0, 1));
    CHECK(b->origin == LENGTH_INDEX_WRITTEN && b->shards_read == 1);
    CHECK(b->n_samples == 12 && b->shards[1].count == 2 && strcmp(b->samples[5].key, "s00100") == 0);
    length_index_free(b);
    /* only the mtime changes: read again too */
    set_mtime(shard1, 1000000);
    REQUIRE_OK(length_index_open(&b, dir, 0, 1));
    CHECK(b->shards_read == 1);
    length_index_free(b);
    /* a removed shard disappears; force_rebuild reads everything */
    REQUIRE(unlink(shard1) == 0);
    REQUIRE_OK(length_index_open(&b, dir, 0, 1));
    CHECK(b->n_shards == 2 && b->n_samples == 10 && b->shards_read == 0 && b->origin == LENGTH_INDEX_WRITTEN);
    length_index_free(b);
    REQUIRE_OK(length_index_open(&b, dir, 1, 1));
    CHECK(b->shards_read == 2 && b->origin == LENGTH_INDEX_WRITTEN);
    length_index_free(b);

    /* a corrupt cache (one flipped byte) is ignored and rebuilt */
    char *data;
    size_t size;
    REQUIRE_OK(read_file_all(cache, &data, &size));
    data[size / 2] ^= 0x5a;
    REQUIRE_OK(write_file_atomic(cache, data, size));
    free(data);
    REQUIRE_OK(length_index_open(&b, dir, 0, 1));
    CHECK(b->shards_read == 2 && b->n_samples == 10 && b->origin == LENGTH_INDEX_WRITTEN);
    length_index_free(b);
    /* a truncated one too */
    REQUIRE_OK(write_file_atomic(cache, "VFMLIDX1", 8));
    REQUIRE_OK(length_index_open(&b, dir, 0, 1));
    CHECK(b->shards_read == 2 && b->n_samples == 10);
    length_index_free(b);
    length_index_free(a);
}

TEST(length_index_stays_in_memory_when_it_cannot_be_written) {
    char dir[1200], blocker[1300];
    dataset_dir(dir, sizeof dir, "readonly");
    REQUIRE_OK(fixture_mixed_dataset(dir, 1, 4, 4, 8));
    /* a file where the .vfm directory would go: works for root too, who ignores permissions */
    snprintf(blocker, sizeof blocker, "%s/.vfm", dir);
    REQUIRE_OK(write_file_atomic(blocker, "x", 1));
    LengthIndex *li;
    REQUIRE_OK(length_index_open(&li, dir, 0, 1));
    CHECK(li->origin == LENGTH_INDEX_MEMORY && li->n_samples == 4);
    length_index_free(li);
    REQUIRE_OK(length_index_open(&li, dir, 0, 1));
    CHECK(li->origin == LENGTH_INDEX_MEMORY && li->shards_read == 1);
    length_index_free(li);
}

TEST(length_index_records_broken_samples) {
    char dir[1200], path[1300];
    dataset_dir(dir, sizeof dir, "broken");
    FixtureSample s[7];
    for (int i = 0; i < 7; i++) s[i] = fixture_mixed_sample(i, 4, 8);
    s[1].json = "{\"caption\": ";           /* bad json */
    s[2].latent_format = FIX_BAD_PTH;       /* a pth part that is not a torch.save file */
    s[3].latent_format = FIX_NONE;          /* no latent */
    s[4].poison = 0.0f / 0.0f;              /* NaN: found only when the latent is read */
    s[5].latent_format = FIX_SAFETENSORS;   /* fine */
    s[6].latent_ndim = 2, s[6].latent_shape[0] = 4, s[6].latent_shape[1] = 64; /* wrong rank */
    snprintf(path, sizeof path, "%s/a.tar", dir);
    REQUIRE_OK(fixture_write_shard(path, s, 7));
    /* a file that is not a tar: a shard-level error, not fatal */
    snprintf(path, sizeof path, "%s/b.tar", dir);
    REQUIRE_OK(write_file_atomic(path, "this is not a tar file at all, just some text that is long enough", 66));
    LengthIndex *li;
    REQUIRE_OK(length_index_open(&li, dir, 0, 1));
    REQUIRE(li->n_shards == 2 && li->n_samples == 7);
    static const EncodeSkip want[7] = {ENC_OK, ENC_SKIP_JSON, ENC_SKIP_FORMAT, ENC_SKIP_MISSING,
                                       ENC_OK, ENC_OK, ENC_SKIP_FORMAT};
    static const char *const says[7] = {NULL, "bad json", "pth: not a zip archive", "no latent part", NULL, NULL,
                                        "is not [C,T,H,W]"};
    for (int i = 0; i < 7; i++) {
        const LengthEntry *e = &li->samples[i];
        CHECK_MSG(e->status == (int)want[i], "sample %d: %s (%s)", i, encode_skip_name((EncodeSkip)e->status),
                  e->reason ? e->reason : "");
        if (says[i]) CHECK_MSG(e->reason && strstr(e->reason, says[i]), "sample %d: '%s'", i, e->reason ? e->reason : "");
        else CHECK(e->reason == NULL);
    }
    CHECK(li->samples[5].shape[0] == 4 && li->samples[5].shape[2] == 16);
    CHECK(li->shards[0].error == NULL);
    CHECK(li->shards[1].error != NULL && li->shards[1].count == 0);
    length_index_free(li);
    /* the reasons survive the cache */
    REQUIRE_OK(length_index_open(&li, dir, 0, 1));
    CHECK(li->origin == LENGTH_INDEX_LOADED);
    CHECK(li->samples[2].reason && strstr(li->samples[2].reason, "pth: not a zip archive"));
    CHECK(li->shards[1].error != NULL);
    length_index_free(li);
}

TEST(length_index_rejects_a_path_without_shards) {
    char dir[1200];
    dataset_dir(dir, sizeof dir, "empty");
    REQUIRE_OK(mkdir_p(dir));
    LengthIndex *li;
    CHECK(length_index_open(&li, dir, 0, 1) == VFM_ERR_USAGE);
    CHECK(strstr(vfm_last_error(), "holds no .tar shards") != NULL);
    char missing[1300];
    snprintf(missing, sizeof missing, "%s/nope", dir);
    CHECK(length_index_open(&li, missing, 0, 1) == VFM_ERR_USAGE);
    CHECK(strstr(vfm_last_error(), "is not a directory") != NULL);
}
