/* Activation recomputation in the DiT (dit_set_recompute; docs/parallel.md "Activation
 * recomputation"): every plan gives bit for bit the output and the parameter gradients of the model
 * without recomputation — two packs accumulated, dfm (cross-attention, QK-norm, adaLN-LoRA, GQA)
 * and adaln-zero (fused qkv, biases, class labels, learned sigma, conv patch) — with the probes
 * seeing each sub-layer once, and the measured high-water mark of the activation arena is lower.
 * The tensor/sequence/context-parallel side: tests/mpi/test_dit_recompute.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dit_pack.h"
#include "test.h"

static DiTConfig model_config(DiTVariant v) {
    DiTConfig c;
    memset(&c, 0, sizeof c);
    c.variant = v;
    c.hidden = 32, c.layers = 4, c.heads = 4, c.kv_heads = v == DIT_VARIANT_DFM ? 2 : 4;
    c.in_channels = 4, c.out_channels = 4, c.patch_spatial = 2, c.patch_temporal = 1;
    c.d_text = 8, c.adaln_lora = 8, c.fps_dim = 8, c.qk_norm = 1, c.ln_eps = 1e-5f, c.init_std = 0.02f;
    if (v == DIT_VARIANT_ADALN_ZERO) c.num_classes = 3, c.class_dropout_prob = 0.1f, c.learn_sigma = 1;
    dit_config_resolve(&c);
    return c;
}

typedef struct Run {
    float *out, *grads; /* the second pack's output; the gradients of both */
    size_t peak;        /* the arena's high-water mark */
    int probes;         /* probe calls */
} Run;

static void count_probe(void *ctx, const char *site, int layer, const Tensor *rows) {
    (void)site, (void)layer, (void)rows;
    ++*(int *)ctx;
}

/* Forward and backward of both packs from the weights w, with plan rc (NULL: none). */
static int run(Run *r, const DiTConfig *cfg, const float *w, DitPack *packs, const RecomputeConfig *rc) {
    memset(r, 0, sizeof *r);
    DiT m;
    if (dit_create(&m, cfg, DEV_CPU) != VFM_OK) return 0;
    int64_t n = m.table.total, S = packs[0].S > packs[1].S ? packs[0].S : packs[1].S;
    memcpy(m.params, w, (size_t)n * sizeof(float));
    m.probe = count_probe, m.probe_ctx = &r->probes;
    int ok = dit_set_recompute(&m, rc, 0, NULL) == VFM_OK && dit_reserve(&m, S, 16, DIT_PACK_SAMPLES) == VFM_OK;
    for (int k = 0; k < 2 && ok; k++) {
        free(r->out);
        r->out = malloc((size_t)(packs[k].S * dit_out_dim(cfg)) * sizeof(float));
        Tensor out = TF32(r->out, packs[k].S, dit_out_dim(cfg));
        ok = dit_forward(&m, &packs[k].in, &out) == VFM_OK && dit_backward(&m, &packs[k].in, &packs[k].tdout) == VFM_OK;
    }
    if (!ok) test_fail(__FILE__, __LINE__, "forward/backward: %s", vfm_last_error());
    r->grads = malloc((size_t)n * sizeof(float));
    memcpy(r->grads, m.grads, (size_t)n * sizeof(float));
    r->peak = m.arena.peak;
    dit_destroy(&m);
    return ok;
}

static void run_free(Run *r) { free(r->out), free(r->grads); }

TEST(model_recompute_bitwise_and_less_memory) {
    const RecomputeConfig plans[] = {
        {RECOMPUTE_FULL, RECOMPUTE_UNIFORM, 1}, {RECOMPUTE_FULL, RECOMPUTE_UNIFORM, 2},
        {RECOMPUTE_FULL, RECOMPUTE_UNIFORM, 3}, {RECOMPUTE_FULL, RECOMPUTE_UNIFORM, 4},
        {RECOMPUTE_FULL, RECOMPUTE_BLOCK, 1},   {RECOMPUTE_FULL, RECOMPUTE_BLOCK, 3},
        {RECOMPUTE_FULL, RECOMPUTE_BLOCK, 4},   {RECOMPUTE_SELECTIVE, RECOMPUTE_METHOD_NONE, 0}};
    const char *names[] = {"full uniform 1", "full uniform 2", "full uniform 3", "full uniform 4",
                           "full block 1",   "full block 3",   "full block 4",   "selective"};
    DiTVariant variants[] = {DIT_VARIANT_DFM, DIT_VARIANT_ADALN_ZERO};
    for (int v = 0; v < 2; v++) {
        DiTConfig cfg = model_config(variants[v]);
        DiT d;
        dit_describe(&d, &cfg);
        int64_t n = d.table.total;
        dit_destroy(&d);
        float *w = malloc((size_t)n * sizeof(float));
        test_fill_uniform_f32(w, n, 41 + v, -0.2f, 0.2f); /* random: zero gates would hide a broken backward */
        DitPack packs[2];
        dit_pack_make(&packs[0], &cfg, 16, 100);
        dit_pack_make(&packs[1], &cfg, 1, 200);
        Run ref;
        REQUIRE(run(&ref, &cfg, w, packs, NULL));
        CHECK(ref.probes == 2 * cfg.layers * (cfg.f.cross_attn ? 6 : 4));
        printf("      %s: no recomputation: activations %.1f KiB\n", dit_variant_name(cfg.variant), ref.peak / 1024.0);
        size_t peak[8];
        for (int p = 0; p < 8; p++) {
            Run r;
            REQUIRE(run(&r, &cfg, w, packs, &plans[p]));
            char what[96];
            snprintf(what, sizeof what, "%s, %s", dit_variant_name(cfg.variant), names[p]);
            CHECK_MSG(memcmp(r.out, ref.out, (size_t)(packs[1].S * dit_out_dim(&cfg)) * sizeof(float)) == 0,
                      "%s: the output differs", what);
            int64_t bad = -1;
            for (int64_t i = 0; i < n && bad < 0; i++)
                if (memcmp(&r.grads[i], &ref.grads[i], sizeof(float)) != 0) bad = i;
            CHECK_MSG(bad < 0, "%s: gradient element %lld differs (%.9g vs %.9g)", what, (long long)bad,
                      bad >= 0 ? r.grads[bad] : 0.0, bad >= 0 ? ref.grads[bad] : 0.0);
            CHECK_MSG(r.probes == ref.probes, "%s: %d probe calls, %d without recomputation", what, r.probes, ref.probes);
            peak[p] = r.peak;
            printf("      %s: activations %.1f KiB (%.0f%%)\n", what, r.peak / 1024.0, 100.0 * r.peak / ref.peak);
            run_free(&r);
        }
        /* lower with every plan but a group of all blocks (it holds them all at once in backward) */
        for (int p = 0; p < 8; p++)
            if (p != 3) CHECK_MSG(peak[p] < ref.peak, "%s: %zu bytes, not below %zu", names[p], peak[p], ref.peak);
        CHECK(peak[0] < peak[1] && peak[1] < peak[2]);  /* uniform: the larger the groups, the more */
        /* block: the more blocks recomputed, the less; from 3 of 4 on the scratch fits where the last
         * block's activations are (dit_acts.c), so 3 and 4 of 4 are uniform 1's */
        CHECK(peak[4] > peak[5] && peak[5] == peak[6] && peak[6] == peak[0]);
        CHECK(peak[0] < peak[7]); /* full keeps far less than selective */
        run_free(&ref);
        dit_pack_free(&packs[0]), dit_pack_free(&packs[1]);
        free(w);
    }
}

/* The plan over pipeline chunks: groups never cross a chunk; block counts per chunk. */
TEST(model_recompute_plan_per_chunk) {
    DiTConfig cfg = model_config(DIT_VARIANT_DFM);
    cfg.layers = 7;
    DiT m;
    dit_describe(&m, &cfg);
    RecomputeConfig rc = {RECOMPUTE_FULL, RECOMPUTE_UNIFORM, 2};
    const int chunks[] = {3, 4};
    REQUIRE_OK(dit_set_recompute(&m, &rc, 2, chunks));
    const int first[] = {0, 0, 2, 3, 3, 5, 5}, end[] = {2, 2, 3, 5, 5, 7, 7};
    for (int l = 0; l < 7; l++)
        CHECK_MSG(m.recompute[l].mode == RECOMPUTE_FULL && m.recompute[l].group_first == first[l] &&
                      m.recompute[l].group_end == end[l], "block %d: [%d, %d)", l, m.recompute[l].group_first,
                  m.recompute[l].group_end);
    rc = (RecomputeConfig){RECOMPUTE_FULL, RECOMPUTE_BLOCK, 1};
    REQUIRE_OK(dit_set_recompute(&m, &rc, 2, chunks));
    for (int l = 0; l < 7; l++)
        CHECK_MSG((m.recompute[l].mode == RECOMPUTE_FULL) == (l == 0 || l == 3), "block %d: mode %d", l, m.recompute[l].mode);
    const int wrong[] = {3, 3};
    CHECK(dit_set_recompute(&m, &rc, 2, wrong) == VFM_ERR_INTERNAL);
    REQUIRE_OK(dit_set_recompute(&m, NULL, 0, NULL));
    CHECK(m.recompute == NULL);
    dit_destroy(&m);
}
