/* Fuzz target: the WebDataset tar reader (src/data/formats/tar.c) through the same calls the loader makes:
 * tar_shard_open (the `.tar.idx` cache check, else a scan of every header), tar_shard_read_sample
 * for every sample, then encode_sample (src/data/loader/encode.c: part lookup, json, npy / safetensors
 * latents and text, shape rules, patchify) under a small fixed config.
 * Input: a tar file; when the first byte is below 16 it is instead a count k, followed by k
 * little-endian 8-byte offsets written as the shard's `.tar.idx`, then the tar. The files live in a
 * private directory under /dev/shm (or $TMPDIR), vfm-fuzz-tar-<pid>, removed at exit; one left by a
 * run that crashed is removed by the next run. */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/loader/encode.h"
#include "data/formats/tar.h"
#include "fuzz.h"

static char g_dir[512], g_tar[600], g_idx[600];

static void remove_files(void) {
    unlink(g_tar);
    unlink(g_idx);
    rmdir(g_dir);
}

/* Removes the directories of runs whose process is gone. */
static void remove_stale(const char *base) {
    DIR *d = opendir(base);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        int pid;
        if (sscanf(e->d_name, "vfm-fuzz-tar-%d", &pid) != 1 || pid <= 0 || kill(pid, 0) == 0 || errno != ESRCH) continue;
        char path[1024];
        static const char *const files[] = {"shard.tar", "shard.tar.idx", ""};
        for (int i = 0; i < 3; i++) {
            snprintf(path, sizeof path, "%s/%s/%s", base, e->d_name, files[i]);
            if (files[i][0]) unlink(path);
            else rmdir(path);
        }
    }
    closedir(d);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    fuzz_quiet();
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    remove_stale(base);
    snprintf(g_dir, sizeof g_dir, "%s/vfm-fuzz-tar-%d", base, (int)getpid());
    FUZZ_CHECK(mkdir(g_dir, 0700) == 0 || errno == EEXIST, "cannot make %s", g_dir);
    snprintf(g_tar, sizeof g_tar, "%s/shard.tar", g_dir);
    tar_index_path(g_tar, g_idx, sizeof g_idx);
    atexit(remove_files);
    return 0;
}

static void write_file(const char *path, const uint8_t *data, size_t size) {
    FILE *f = fopen(path, "wb");
    FUZZ_CHECK(f != NULL, "cannot write %s", path);
    FUZZ_CHECK(fwrite(data, 1, size, f) == size && fclose(f) == 0, "cannot write %s", path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 0 && data[0] < 16) {
        size_t idx_bytes = (size_t)data[0] * 8;
        if (size < 1 + idx_bytes) return 0;
        write_file(g_idx, data + 1, idx_bytes);
        data += 1 + idx_bytes;
        size -= 1 + idx_bytes;
    } else {
        unlink(g_idx);
    }
    write_file(g_tar, data, size);

    TarShard *sh;
    if (tar_shard_open(&sh, g_tar) != VFM_OK) return 0;
    int64_t n = tar_shard_num_samples(sh), count;
    const uint64_t *index = tar_shard_index(sh, &count);
    FUZZ_CHECK(n >= 0 && count == n + 1, "%lld samples, %lld index entries", (long long)n, (long long)count);
    for (int64_t i = 0; i < count; i++)
        FUZZ_CHECK(index[i] <= size && (i == 0 || index[i] > index[i - 1]), "index entry %lld = %llu (file %zu bytes)",
                   (long long)i, (unsigned long long)index[i], size);

    EncodeConfig ec = {.channels = 2, .pt = 2, .ph = 2, .pw = 2, .text_dim = 4, .budget = 256, .pad_multiple = 8,
                       .max_frames = 4, .max_text_len = 8, .keep_text_padding = 0, .default_fps = 24.0f};
    snprintf(ec.dataset, sizeof ec.dataset, "fuzz");
    for (int64_t i = 0; i < n; i++) {
        TarSample ts;
        if (tar_shard_read_sample(sh, i, &ts) != VFM_OK) continue;
        FUZZ_CHECK(ts.num_parts > 0 && ts.key != NULL, "sample %lld: %d parts", (long long)i, ts.num_parts);
        fuzz_touch(ts.key, strlen(ts.key));
        for (int k = 0; k < ts.num_parts; k++) {
            FUZZ_CHECK(ts.parts[k].size <= size, "part %d: %zu bytes in a %zu-byte file", k, ts.parts[k].size, size);
            fuzz_touch(ts.parts[k].name, strlen(ts.parts[k].name));
            fuzz_touch(ts.parts[k].data, ts.parts[k].size);
            FUZZ_CHECK(tar_sample_part(&ts, ts.parts[k].name) == &ts.parts[k], "part '%s' found twice",
                       ts.parts[k].name);
        }
        EncodedSample es;
        char *pixel_space = NULL, reason[512];
        EncodeSkip skip;
        vfm_status s = encode_sample(&ec, &ts, "fuzz.tar", 0, &es, &pixel_space, &skip, reason, sizeof reason);
        FUZZ_CHECK(s == VFM_OK, "encode_sample: %s", vfm_last_error());
        if (skip == ENC_OK) {
            FUZZ_CHECK(es.info.tokens > 0 && es.info.tokens_padded <= ec.budget, "%d tokens", es.info.tokens);
            fuzz_touch(es.tokens, (size_t)es.info.tokens * (size_t)encode_token_dim(&ec) * sizeof(float));
            fuzz_touch(es.text, (size_t)es.info.text_tokens * (size_t)ec.text_dim * sizeof(float));
            encoded_sample_free(&es);
        } else {
            FUZZ_CHECK(reason[0] != 0, "skip %s without a reason", encode_skip_name(skip));
        }
        free(pixel_space);
        tar_sample_free(&ts);
    }
    tar_shard_close(sh);
    return 0;
}
