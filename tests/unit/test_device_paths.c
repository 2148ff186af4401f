/* The device-independent pieces of training on either device, checked on the CPU: AdamW over runs
 * of entries gives the bits of one update per entry; the optimizer's and the model's host copies
 * round-trip; the CPU refuses bf16 activations; train.device picks the CPU without a GPU. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "model/dit.h"
#include "optim/optimizer.h"
#include "test.h"
#include "train/run_device.h"

static DiTConfig tiny(void) {
    DiTConfig c = {.variant = DIT_VARIANT_DFM, .hidden = 32, .layers = 2, .heads = 2, .in_channels = 4,
                   .out_channels = 4, .patch_spatial = 2, .patch_temporal = 1, .d_text = 16, .adaln_lora = 8,
                   .fps_dim = 16, .qk_norm = 1, .ln_eps = 1e-5f, .init_std = 0.02f};
    return c;
}

TEST(adamw_over_runs_of_entries_equals_one_update_per_entry) {
    DiTConfig c = tiny();
    REQUIRE_OK(dit_config_resolve(&c));
    DiT m;
    REQUIRE_OK(dit_create(&m, &c, DEV_CPU));
    const ParamTable *t = &m.table;
    int64_t n = t->total;
    float *p0 = malloc((size_t)n * sizeof(float)), *g = malloc((size_t)n * sizeof(float));
    float *p1 = malloc((size_t)n * sizeof(float)), *m1 = calloc((size_t)n, sizeof(float)), *v1 = calloc((size_t)n, sizeof(float));
    REQUIRE(p0 && g && p1 && m1 && v1);
    test_fill_uniform_f32(p0, n, 1, -1, 1);
    test_fill_uniform_f32(g, n, 2, -0.1f, 0.1f);
    memcpy(p1, p0, (size_t)n * sizeof(float));
    OptimConfig oc = {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
    Optimizer o;
    REQUIRE_OK(optimizer_init(&o, &oc, t));
    int with_decay = 0, without = 0;
    for (int step = 0; step < 3; step++) {
        REQUIRE_OK(optimizer_step(&o, p0, g, oc.lr, 0.7));
        AdamWHyper h = {(float)oc.lr, (float)oc.beta1, (float)oc.beta2, (float)oc.eps, 0, step + 1, 0.7f, NULL};
        for (int i = 0; i < t->count; i++) { /* the reference: one update per entry */
            const ParamEntry *e = &t->entries[i];
            Tensor P = TF32(p1 + e->offset, e->numel), G = TF32(g + e->offset, e->numel);
            Tensor M = TF32(m1 + e->offset, e->numel), V = TF32(v1 + e->offset, e->numel);
            h.weight_decay = e->weight_decay ? (float)oc.weight_decay : 0.0f;
            with_decay += e->weight_decay, without += !e->weight_decay;
            REQUIRE_OK(op_adamw_step(&P, &M, &V, &G, &h));
        }
    }
    CHECK(with_decay > 0 && without > 0); /* both kinds of runs exist */
    CHECK_MSG(memcmp(p0, p1, (size_t)n * sizeof(float)) == 0, "parameters differ from per-entry AdamW");
    CHECK_MSG(memcmp(o.m, m1, (size_t)n * sizeof(float)) == 0 && memcmp(o.v, v1, (size_t)n * sizeof(float)) == 0,
              "moments differ from per-entry AdamW");
    /* the host copy (what checkpoints write) and back */
    Optimizer h, back;
    REQUIRE_OK(optimizer_host_copy(&o, &h));
    CHECK(h.step == 3 && h.device == DEV_CPU && memcmp(h.m, o.m, (size_t)n * sizeof(float)) == 0);
    REQUIRE_OK(optimizer_init(&back, &oc, t));
    REQUIRE_OK(optimizer_copy_from_host(&back, &h));
    CHECK(back.step == 3 && memcmp(back.v, o.v, (size_t)n * sizeof(float)) == 0);
    Optimizer shard;
    REQUIRE_OK(optimizer_init_range(&shard, &oc, t, 0, n / 2));
    CHECK(optimizer_copy_from_host(&shard, &h) == VFM_ERR_INTERNAL); /* another range */
    optimizer_free(&shard), optimizer_free(&back), optimizer_free(&h), optimizer_free(&o);
    free(p0), free(g), free(p1), free(m1), free(v1);
    dit_destroy(&m);
}

TEST(model_weights_host_round_trip_and_cpu_precision) {
    DiTConfig c = tiny();
    REQUIRE_OK(dit_config_resolve(&c));
    DiT m;
    REQUIRE_OK(dit_create(&m, &c, DEV_CPU));
    CHECK(m.act_dtype == DT_F32 && m.wcopy == NULL);
    CHECK(dit_set_act_dtype(&m, DT_BF16) == VFM_ERR_UNSUPPORTED);
    REQUIRE_OK(dit_init_weights(&m, 3));
    int64_t n = m.table.total;
    float *a = malloc((size_t)n * sizeof(float));
    REQUIRE(a);
    REQUIRE_OK(dit_params_to_host(&m, a));
    CHECK(memcmp(a, m.params, (size_t)n * sizeof(float)) == 0);
    for (int64_t i = 0; i < n; i++) a[i] = (float)i;
    REQUIRE_OK(dit_params_from_host(&m, a));
    CHECK(m.params[n - 1] == (float)(n - 1));
    REQUIRE_OK(dit_refresh_weights(&m)); /* no copy on the CPU: nothing to do */
    free(a);
    dit_destroy(&m);
}

TEST(train_device_selection_without_a_gpu) {
    if (device_cuda_count() > 0) SKIP("a GPU is present (this checks the CPU-only answers)");
    Config *cfg;
    Device d;
    const char *why;
    REQUIRE_OK(config_load(&cfg, NULL, NULL, 0));
    REQUIRE_OK(run_select_device(cfg, &d, &why));
    CHECK(d == DEV_CPU && strstr(why, "auto") != NULL);
    REQUIRE_OK(config_set(cfg, "train.device", "cuda"));
    CHECK(run_select_device(cfg, &d, &why) == VFM_ERR_USAGE);
    CHECK_MSG(strstr(vfm_last_error(), "train.device") != NULL, "%s", vfm_last_error());
    REQUIRE_OK(config_set(cfg, "train.device", "cpu"));
    REQUIRE_OK(run_select_device(cfg, &d, &why));
    CHECK(d == DEV_CPU);
    config_free(cfg);
}
