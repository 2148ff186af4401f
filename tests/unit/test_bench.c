/* The pieces of `vfm bench` and of GPU memory reporting: the peak table, the out-of-memory advice
 * (every key it names exists), the op profiler (counts, pause, other threads; CUDA events on the
 * GPU), device memory figures and the out-of-memory message on the GPU (cuda_*: skipped without a
 * device), and the refusal of figures the reference attention kernel measured. The command itself
 * runs in tests/e2e/bench.sh. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "capture.h"
#include "cli/commands.h"
#include "core/config.h"
#include "ops/ops.h"
#include "ops/ops_profile.h"
#include "test.h"
#include "train/bench.h"
#include "train/run_device.h"

TEST(bench_peak_table_by_device_name) {
    const char *src;
    CHECK(bench_peak_tflops("NVIDIA H100 80GB HBM3", &src) == 989.4);
    CHECK(strstr(src, "H100") != NULL);
    CHECK(bench_peak_tflops("NVIDIA H100 PCIe", &src) == 756.0);
    CHECK(bench_peak_tflops("NVIDIA H200", &src) == 989.4);
    CHECK(bench_peak_tflops("NVIDIA A100-SXM4-80GB", &src) == 312.0);
    CHECK(bench_peak_tflops("NVIDIA L40S", &src) == 362.05);
    CHECK(bench_peak_tflops("NVIDIA L4", &src) == 121.0);
    CHECK(bench_peak_tflops("cpu, 2 threads", &src) == 989.4);
    CHECK_MSG(strstr(src, "not in the table") != NULL, "fallback source: %s", src);
}

/* cli_report(s) (what `vfm bench` returns on s) with its stderr; exit code into *code. */
static char *cli_verdict(vfm_status s, int *code) {
    Capture c;
    capture_begin(&c, 2);
    *code = cli_report(s);
    return capture_end(&c);
}

/* Figures measured on the reference attention kernel are refused (exit 1, one line saying how to
 * ask for them) unless asked for with --attention reference; cuDNN's figures are always reported. */
TEST(bench_refuses_reference_attention_figures_unless_asked) {
    char served[64];
    const char *not_reference[] = {NULL, "auto", "cudnn"};
    for (int i = 0; i < 3; i++) {
        vfm_status s = bench_attention_verdict(not_reference[i], 7, served, sizeof served);
        int code;
        char *err = cli_verdict(s, &code);
        CHECK_MSG(s == VFM_ERR_UNSUPPORTED && code == 1, "--attention %s, 7 reference calls: %s, exit %d",
                  not_reference[i] ? not_reference[i] : "(none)", vfm_status_name(s), code);
        const char *head = "vfm: bench: 7 attention calls of the timed steps ran on the reference kernel";
        CHECK_MSG(strncmp(err, head, strlen(head)) == 0 &&
                      strstr(err, "unless asked for with --attention reference\n") != NULL && strchr(err, '\n') &&
                      strchr(err, '\n')[1] == '\0',
                  "not the one-line refusal: '%s'", err);
        CHECK_MSG(strcmp(served, "reference kernel") == 0, "served: %s", served);
        free(err);
        vfm_clear_error();
    }
    CHECK(bench_attention_verdict("reference", 7, served, sizeof served) == VFM_OK);
    CHECK_MSG(strcmp(served, "reference kernel (asked)") == 0, "served: %s", served);
    for (int i = 0; i < 3; i++) {
        CHECK(bench_attention_verdict(not_reference[i], 0, served, sizeof served) == VFM_OK);
        CHECK_MSG(strcmp(served, "cuDNN") == 0, "served: %s", served);
    }
}

/* The whole command on the GPU (the harness suite: its cuDNN stand-in): head dim 4 (16 heads of
 * 64) is one cuDNN cannot take, so the reference kernel serves the timed steps' attention and their
 * figures are refused (exit 1, the one-line refusal, no figures) unless asked for with --attention
 * reference (exit 0, "attention: reference kernel (asked)"). */
TEST(cuda_bench_refuses_reference_kernel_figures_unless_asked) {
    NEED_GPU();
    const char *args[] = {"bench", "--preset", "tiny", "--seq", "64", "--text", "8", "--warmup", "0", "--steps", "1",
                          "train.device=cuda", "train.threads=1", "model.num_attention_heads=16",
                          "--attention", "reference"};
    char *out, *err;
    int code = run_vfm(args, 14, &out, &err);
    CHECK_MSG(code == 1 && strstr(err, "vfm: bench: ") && strstr(err, "ran on the reference kernel, not cuDNN") &&
                  strstr(err, "hd=4") && !strstr(out, "bench-json"),
              "without --attention reference: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, err);
    free(out), free(err);
    code = run_vfm(args, 16, &out, &err);
    CHECK_MSG(code == 0 && strstr(out, "attention:     reference kernel (asked)") && strstr(out, "bench-json"),
              "with --attention reference: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, err);
    free(out), free(err);
}

/* The message run_memory_hint leaves after an out-of-memory failure of a run with these overrides
 * on `ranks` ranks (a copy; "" when the config does not load). */
static const char *hint_for(const char **overrides, int n, int ranks) {
    static char msg[4096];
    Config *cfg;
    msg[0] = 0;
    if (config_load(&cfg, NULL, overrides, n) != VFM_OK) return msg;
    vfm_fail(VFM_ERR_NOMEM, "out of memory");
    run_memory_hint(VFM_ERR_NOMEM, cfg, ranks);
    snprintf(msg, sizeof msg, "%s", vfm_last_error());
    config_free(cfg);
    return msg;
}

TEST(memory_hint_names_keys_that_exist) {
    for (int i = 0; RUN_MEMORY_KEYS[i]; i++)
        CHECK_MSG(config_registry_find(RUN_MEMORY_KEYS[i]) >= 0, "%s is not a config key", RUN_MEMORY_KEYS[i]);
    Config *cfg;
    const char *ov[] = {"dataset.task_encoder_seq_length=4096", "ddp.use_distributed_optimizer=false"};
    REQUIRE_OK(config_load(&cfg, NULL, ov, 2));
    vfm_fail(VFM_ERR_NOMEM, "out of GPU memory: test");
    CHECK(run_memory_hint(VFM_ERR_NOMEM, cfg, 4) == VFM_ERR_NOMEM);
    const char *msg = vfm_last_error();
    CHECK_MSG(strncmp(msg, "out of GPU memory: test", 23) == 0, "%s", msg);
    for (int i = 0; RUN_MEMORY_KEYS[i]; i++) CHECK_MSG(strstr(msg, RUN_MEMORY_KEYS[i]) != NULL, "%s lacks %s", msg, RUN_MEMORY_KEYS[i]);
    CHECK_MSG(strstr(msg, "task_encoder_seq_length=4096") != NULL, "the run's value is named: %s", msg);
    vfm_fail(VFM_ERR_IO, "other");
    CHECK(run_memory_hint(VFM_ERR_IO, cfg, 4) == VFM_ERR_IO);
    CHECK(strcmp(vfm_last_error(), "other") == 0);
    config_free(cfg);
    /* only what applies and is not already so: on the mock set, one rank, ZeRO-1 on, full recomputation */
    const char *mock[] = {"dataset.mock=true", "model.recompute_granularity=full", "model.recompute_method=uniform",
                          "model.recompute_num_layers=1"};
    msg = hint_for(mock, 4, 1);
    CHECK_MSG(strstr(msg, "task_encoder_seq_length") && !strstr(msg, "max_frames") && !strstr(msg, "max_text_len") &&
                  !strstr(msg, "recompute") && !strstr(msg, "use_distributed_optimizer"), "%s", msg);
    /* ZeRO-1 is named only with several replicas and only while it is off: one rank with it off, and
     * four ranks with it on, get no word of it */
    const char *zero_off[] = {"dataset.mock=true", "ddp.use_distributed_optimizer=false"};
    msg = hint_for(zero_off, 2, 1);
    CHECK_MSG(strncmp(msg, "out of memory", 13) == 0 && !strstr(msg, "use_distributed_optimizer"), "one rank: %s", msg);
    const char *zero_on[] = {"dataset.mock=true", "ddp.use_distributed_optimizer=true"};
    msg = hint_for(zero_on, 2, 4);
    CHECK_MSG(strncmp(msg, "out of memory", 13) == 0 && !strstr(msg, "use_distributed_optimizer"),
              "four ranks, ZeRO-1 already on: %s", msg);
}

static const OpsProfileEntry *find_entry(const OpsProfileEntry *e, int n, const char *name, Device dev) {
    for (int i = 0; i < n; i++)
        if (strcmp(e[i].name, name) == 0 && e[i].device == dev) return &e[i];
    return NULL;
}

static void *fill_in_thread(void *arg) {
    Tensor *t = arg;
    op_fill(t, 2.0);
    return NULL;
}

TEST(op_profile_counts_calls_of_this_thread) {
    float buf[4096];
    Tensor t = TF32(buf, 4096);
    REQUIRE_OK(op_fill(&t, 1.0)); /* before: not counted */
    ops_profile_enable(1);
    for (int i = 0; i < 3; i++) REQUIRE_OK(op_fill(&t, 1.0));
    REQUIRE_OK(op_scale(&t, 2.0));
    ops_profile_pause(1);
    REQUIRE_OK(op_scale(&t, 2.0)); /* paused: not counted */
    ops_profile_pause(0);
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, fill_in_thread, &t) == 0); /* another thread: not counted */
    pthread_join(th, NULL);
    REQUIRE_OK(ops_profile_collect());
    OpsProfileEntry e[16];
    int n = ops_profile_entries(e, 16);
    ops_profile_enable(0);
    const OpsProfileEntry *fill = find_entry(e, n, "fill", DEV_CPU), *scale = find_entry(e, n, "scale", DEV_CPU);
    REQUIRE(fill && scale);
    CHECK_MSG(fill->calls == 3, "fill counted %lld times", (long long)fill->calls);
    CHECK_MSG(scale->calls == 1, "scale counted %lld times", (long long)scale->calls);
    CHECK(fill->seconds >= 0 && scale->seconds >= 0);
    CHECK(n == 2);
    for (int i = 1; i < n; i++) CHECK(e[i - 1].seconds >= e[i].seconds);
    CHECK(!ops_profile_enabled());
}

TEST(cuda_op_profile_times_gpu_ops_with_events) {
    NEED_GPU();
    if (test_on_cpu_harness()) SKIP("measures GPU time with CUDA events; the CPU harness's events time the host");
    const int64_t n = 1 << 24;
    Tensor g;
    REQUIRE_OK(tensor_alloc(&g, DT_F32, DEV_CUDA, 1, &n));
    ops_profile_enable(1);
    for (int i = 0; i < 4; i++) REQUIRE_OK(op_fill(&g, 1.0 + i));
    REQUIRE_OK(op_scale(&g, 0.5));
    REQUIRE_OK(ops_profile_collect());
    OpsProfileEntry e[16];
    int k = ops_profile_entries(e, 16);
    ops_profile_enable(0);
    const OpsProfileEntry *fill = find_entry(e, k, "fill", DEV_CUDA), *scale = find_entry(e, k, "scale", DEV_CUDA);
    REQUIRE(fill && scale);
    CHECK(fill->calls == 4 && scale->calls == 1);
    /* 64 MiB written per fill: well above the event resolution (0.5 us), well below a second */
    CHECK_MSG(fill->seconds > 1e-6 && fill->seconds < 1.0, "fill: %g s", fill->seconds);
    CHECK_MSG(scale->seconds > 1e-7 && scale->seconds < 1.0, "scale: %g s", scale->seconds);
    tensor_free(&g);
}

TEST(host_memory_figures) {
    DeviceMemory m;
    REQUIRE_OK(device_memory(DEV_CPU, &m));
    CHECK(m.held > 0 && m.peak >= m.held);
    CHECK(m.free == 0 && m.total == 0);
}

TEST(cuda_device_memory_counts_vfm_allocations) {
    NEED_GPU();
    DeviceMemory before, during, after;
    REQUIRE_OK(device_memory(DEV_CUDA, &before));
    CHECK(before.total > 0 && before.free <= before.total);
    void *p;
    const size_t bytes = (size_t)256 << 20;
    REQUIRE_OK(device_malloc(DEV_CUDA, bytes, &p));
    REQUIRE_OK(device_memory(DEV_CUDA, &during));
    CHECK_MSG(during.held == before.held + bytes, "held %zu -> %zu after %zu bytes", before.held, during.held, bytes);
    CHECK(during.peak >= during.held);
    CHECK_MSG(during.free + bytes <= before.free + ((size_t)64 << 20), "free %zu -> %zu", before.free, during.free);
    device_free(DEV_CUDA, p);
    REQUIRE_OK(device_memory(DEV_CUDA, &after));
    CHECK(after.held == before.held);
    CHECK(after.peak >= before.held + bytes);
    device_memory_reset_peak(DEV_CUDA);
    REQUIRE_OK(device_memory(DEV_CUDA, &after));
    CHECK(after.peak == after.held);
}

TEST(cuda_out_of_memory_message_names_the_sizes) {
    NEED_GPU();
    DeviceMemory m;
    REQUIRE_OK(device_memory(DEV_CUDA, &m));
    void *p = NULL;
    vfm_status s = device_malloc(DEV_CUDA, m.total + ((size_t)1 << 30), &p);
    CHECK(s == VFM_ERR_NOMEM);
    CHECK(p == NULL);
    const char *msg = vfm_last_error();
    CHECK_MSG(strstr(msg, "out of GPU memory") && strstr(msg, "vfm holds") && strstr(msg, "free of"), "%s", msg);
    /* the failure is not sticky: the next allocation works */
    REQUIRE_OK(device_malloc(DEV_CUDA, 1 << 20, &p));
    device_free(DEV_CUDA, p);
}
