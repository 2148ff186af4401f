/* Test fixtures: small WebDataset shards written in the test's temporary directory. */
#include "data_fixture.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/fileutil.h"
#include "core/hash.h"
#include "data/formats/npy.h"
#include "data/formats/safetensors.h"
#include "data/formats/tar.h"
#include "test.h"

float *fixture_latent(const FixtureSample *s, int64_t *numel) {
    int64_t n = 1;
    for (int d = 0; d < s->latent_ndim; d++) n *= s->latent_shape[d];
    float *x = malloc((size_t)n * sizeof *x);
    test_fill_uniform_f32(x, n, s->seed, -1.0f, 1.0f);
    if (s->poison != 0.0f || s->poison != s->poison) x[0] = s->poison;
    *numel = n;
    return x;
}

static vfm_status add_part(TarWriter *w, const char *key, const char *part, const void *data, size_t size) {
    char name[160];
    snprintf(name, sizeof name, "%s.%s", key, part);
    return tar_writer_add(w, name, data, size);
}

static vfm_status add_latent(TarWriter *w, const FixtureSample *s) {
    int64_t numel;
    float *x = fixture_latent(s, &numel);
    uint8_t *bytes = NULL;
    size_t len = 0;
    vfm_status st = VFM_OK;
    if (s->latent_format == FIX_NPY) {
        st = npy_encode(NPY_F4, x, s->latent_ndim, s->latent_shape, &bytes, &len);
        if (st == VFM_OK) st = add_part(w, s->key, "latent.npy", bytes, len);
    } else if (s->latent_format == FIX_SAFETENSORS) {
        char tmp[1200];
        snprintf(tmp, sizeof tmp, "%s/fixture_latent.safetensors", test_tmpdir());
        SafetensorsEntry e = {"latent", DT_F32, s->latent_ndim, {0}, x};
        memcpy(e.shape, s->latent_shape, sizeof e.shape);
        st = safetensors_write(tmp, &e, 1, NULL);
        if (st == VFM_OK) st = read_file_all(tmp, (char **)&bytes, &len);
        if (st == VFM_OK) st = add_part(w, s->key, "latent.safetensors", bytes, len);
        unlink(tmp);
    } else if (s->latent_format == FIX_BAD_PTH) {
        static const char fake[] = "PK\x03\x04 not a real torch file";
        st = add_part(w, s->key, "pth", fake, sizeof fake);
    }
    free(bytes);
    free(x);
    return st;
}

static vfm_status add_text(TarWriter *w, const FixtureSample *s) {
    int64_t shape[2] = {s->text_rows, s->text_width};
    float *t = calloc((size_t)(s->text_rows * s->text_width) + 1, sizeof *t);
    int real = s->text_rows - s->text_zero_tail;
    test_fill_uniform_f32(t, (int64_t)real * s->text_width, s->seed ^ 0x7e47u, -1.0f, 1.0f);
    uint8_t *bytes = NULL;
    size_t len = 0;
    vfm_status st = npy_encode(NPY_F4, t, 2, shape, &bytes, &len);
    if (st == VFM_OK) st = add_part(w, s->key, "text.npy", bytes, len);
    free(bytes);
    free(t);
    return st;
}

vfm_status fixture_write_shard(const char *path, const FixtureSample *samples, int n) {
    char dir[1200];
    path_dirname(dir, sizeof dir, path);
    VFM_TRY(mkdir_p(dir));
    TarWriter *w;
    VFM_TRY(tar_writer_open(&w, path));
    vfm_status st = VFM_OK;
    for (int i = 0; st == VFM_OK && i < n; i++) {
        const FixtureSample *s = &samples[i];
        /* parts in sorted name order, as webdataset writes them */
        const char *json = s->json ? s->json : s->json_text[0] ? s->json_text : NULL;
        if (json) st = add_part(w, s->key, "json", json, strlen(json));
        if (st == VFM_OK) st = add_latent(w, s);
        if (st == VFM_OK && s->text_rows > 0) st = add_text(w, s);
    }
    if (st != VFM_OK) {
        tar_writer_discard(w);
        return st;
    }
    return tar_writer_close(w);
}

FixtureSample fixture_mixed_sample(int64_t i, int channels, int text_width) {
    /* latent rank and T, H, W: images [C,H,W], videos [C,T,H,W], one [1,C,T,H,W] */
    static const int kinds[8][4] = {{3, 1, 8, 8},   {3, 1, 16, 16}, {4, 3, 8, 8},  {3, 1, 24, 16},
                                    {5, 2, 16, 16}, {4, 4, 16, 24}, {3, 1, 8, 24}, {4, 5, 16, 16}};
    FixtureSample s;
    memset(&s, 0, sizeof s);
    snprintf(s.key, sizeof s.key, "s%05lld", (long long)i);
    const int *k = kinds[i % 8];
    s.latent_ndim = k[0];
    int64_t *sh = s.latent_shape;
    if (k[0] == 3) sh[0] = channels, sh[1] = k[2], sh[2] = k[3];
    else if (k[0] == 4) sh[0] = channels, sh[1] = k[1], sh[2] = k[2], sh[3] = k[3];
    else sh[0] = 1, sh[1] = channels, sh[2] = k[1], sh[3] = k[2], sh[4] = k[3];
    s.latent_format = FIX_NPY;
    s.text_width = text_width;
    s.text_rows = i % 7 == 6 ? 0 : 2 + (int)(i % 6);
    s.text_zero_tail = s.text_rows ? (int)(i % 3) % s.text_rows : 0;
    if (i % 5 != 4)
        snprintf(s.json_text, sizeof s.json_text, "{\"caption\": \"sample %lld\", \"fps\": 24, \"class\": %d%s}",
                 (long long)i, (int)(i % 10), i == 1 ? ", \"pixel_space\": {\"factor\": 2, \"offset\": 0.5, \"scale\": 1}" : "");
    s.seed = hash_combine64(0xf1c7u, (uint64_t)i);
    return s;
}

vfm_status fixture_mixed_dataset(const char *dir, int n_shards, int per_shard, int channels, int text_width) {
    FixtureSample *s = calloc((size_t)per_shard, sizeof *s);
    vfm_status st = VFM_OK;
    for (int k = 0; st == VFM_OK && k < n_shards; k++) {
        for (int i = 0; i < per_shard; i++) s[i] = fixture_mixed_sample((int64_t)k * per_shard + i, channels, text_width);
        char path[1400];
        snprintf(path, sizeof path, "%s/%sshard-%02d.tar", dir, k == n_shards - 1 && n_shards > 1 ? "sub/" : "", k);
        st = fixture_write_shard(path, s, per_shard);
    }
    free(s);
    return st;
}

Config *fixture_config(const char *dataset_dir, int channels, int text_width, int budget, const char *const *extra) {
    char o[16][1200];
    const char *ov[48];
    int n = 0;
    snprintf(o[0], sizeof o[0], "dataset.path=%s", dataset_dir);
    snprintf(o[1], sizeof o[1], "model.in_channels=%d", channels);
    snprintf(o[2], sizeof o[2], "model.crossattn_emb_size=%d", text_width);
    snprintf(o[3], sizeof o[3], "dataset.task_encoder_seq_length=%d", budget);
    for (int i = 0; i < 4; i++) ov[n++] = o[i];
    ov[n++] = "model.patch_spatial=2";
    ov[n++] = "model.patch_temporal=1";
    ov[n++] = "dataset.pad_multiple=64";
    ov[n++] = "dataset.packing_buffer_size=8";
    ov[n++] = "dataset.num_workers=2";
    for (int i = 0; extra && extra[i] && n < 48; i++) ov[n++] = extra[i];
    Config *cfg = NULL;
    if (config_load(&cfg, NULL, ov, n) != VFM_OK) {
        test_fail(__FILE__, __LINE__, "fixture config: %s", vfm_last_error());
        return NULL;
    }
    return cfg;
}

/* Sorted names of the regular files in dir. */
static int list_files(const char *dir, char names[][64], int cap) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.' && n < cap) snprintf(names[n++], 64, "%s", e->d_name);
    closedir(d);
    for (int i = 1; i < n; i++)
        for (int k = i; k > 0 && strcmp(names[k - 1], names[k]) > 0; k--) {
            char t[64];
            memcpy(t, names[k], 64);
            memcpy(names[k], names[k - 1], 64);
            memcpy(names[k - 1], t, 64);
        }
    return n;
}

int fixture_same_files(const char *a, const char *b, int *n_files) {
    static char na[32][64], nb[32][64];
    int n = list_files(a, na, 32), m = list_files(b, nb, 32);
    *n_files = n;
    if (n < 0 || n != m) return 0;
    for (int i = 0; i < n; i++) {
        if (strcmp(na[i], nb[i]) != 0) return 0;
        char pa[1500], pb[1500];
        path_join(pa, sizeof pa, a, na[i]);
        path_join(pb, sizeof pb, b, nb[i]);
        char *da, *db;
        size_t la, lb;
        if (read_file_all(pa, &da, &la) != VFM_OK) return 0;
        if (read_file_all(pb, &db, &lb) != VFM_OK) {
            free(da);
            return 0;
        }
        int same = la == lb && memcmp(da, db, la) == 0;
        free(da);
        free(db);
        if (!same) return 0;
    }
    return 1;
}

