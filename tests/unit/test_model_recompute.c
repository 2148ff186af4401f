/* Activation recomputation in the DiT (dit_set_recompute; docs/parallel.md "Activation
 * recomputation"): every plan gives bit for bit the output and the parameter gradients of the model
 * without recomputation — two packs accumulated, dfm (cross-attention, QK-norm, adaLN-LoRA, GQA)
 * and adaln-zero (fused qkv, biases, class labels, learned sigma, conv patch) — with the probes
 * seeing each sub-layer once, and the measured high-water mark of the activation arena is lower.
 * The same over chained chunks (the pipeline's unit) with two packs in flight sharing the scratch.
 * The tensor/sequence/context-parallel side: tests/mpi/test_dit_recompute.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dit_pack.h"
#include "test.h"

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
    int ok = dit_set_recompute(&m, rc) == VFM_OK && dit_reserve(&m, S, 16, DIT_PACK_SAMPLES) == VFM_OK;
    for (int k = 0; k < 2 && ok; k++) {
        free(r->out);
        r->out = malloc((size_t)(packs[k].S * dit_out_dim(cfg)) * sizeof(float));
        Tensor out = TF32(r->out, packs[k].S, dit_out_dim(cfg));
        ok = dit_forward(&m, &packs[k].in, &out) == VFM_OK && dit_backward(&m, &packs[k].in, &packs[k].tdout) == VFM_OK;
    }
    if (!ok) test_fail(__FILE__, __LINE__, "forward/backward: %s", vfm_last_error());
    r->grads = malloc((size_t)n * sizeof(float));
    memcpy(r->grads, m.grads, (size_t)n * sizeof(float));
    r->peak = dit_activation_peak(&m);
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
    DiTVariant variants[] = {DIT_VARIANT_DFM, DIT_VARIANT_ADALN_ZERO, DIT_VARIANT_MOVIEGEN};
    for (int v = 0; v < 3; v++) {
        DiTConfig cfg = dit_test_config(variants[v], 4);
        int64_t n;
        float *w = dit_test_weights(&cfg, 41 + v, &n);
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
        /* Lower with every plan but one group of all blocks and "block 1": the arena holds the kept
         * blocks' activations through the whole backward, so a group's replay adds its scratch to
         * them all (one block's, plus the replayed output) — recomputing one block alone saves nothing */
        for (int p = 0; p < 8; p++)
            if (p != 3 && p != 4) CHECK_MSG(peak[p] < ref.peak, "%s: %zu bytes, not below %zu", names[p], peak[p], ref.peak);
        CHECK(peak[0] < peak[1] && peak[1] < peak[2] && peak[2] < peak[3]); /* uniform: the larger the groups, the more */
        CHECK(peak[4] > peak[5] && peak[5] > peak[6]); /* block: the more blocks recomputed, the less */
        CHECK(peak[6] == peak[0]);                     /* block 4 of 4 blocks is uniform 1 */
        CHECK(peak[3] == peak[4]);                     /* both keep everything but one h0, plus the sink */
        CHECK(peak[0] < peak[7]); /* full keeps far less than selective */
        run_free(&ref);
        dit_pack_free(&packs[0]), dit_pack_free(&packs[1]);
        free(w);
    }
}

/* Chunks (the pipeline's unit: plans per chunk, groups never cross one) with both packs in flight
 * (F F B B, each (pack, chunk) in its own slot, one scratch for all): bitwise the same chunks
 * without recomputation. */
static int run_chunks(const DiTConfig *cfg, const float *w, DitPack *packs, const RecomputeConfig *rc, float **out,
                      float **grads) {
    enum { NC = 2 };
    const int bounds[NC + 1] = {0, 1, 4};
    DiT m;
    if (dit_create(&m, cfg, DEV_CPU) != VFM_OK) return 0;
    int64_t n = m.table.total, D = cfg->hidden, od = dit_out_dim(cfg);
    memcpy(m.params, w, (size_t)n * sizeof(float));
    int ok = dit_set_recompute(&m, rc) == VFM_OK && dit_reserve(&m, packs[0].S, 16, DIT_PACK_SAMPLES) == VFM_OK;
    DiTSaved *slot[2][NC] = {{NULL}};
    float *h[2][NC + 1] = {{NULL}}, *g[2][NC + 1] = {{NULL}};
    for (int b = 0; b < 2; b++)
        for (int k = 0; k < NC && ok; k++) ok = dit_saved_create(&m, &slot[b][k]) == VFM_OK;
    for (int b = 0; b < 2; b++)
        for (int k = 0; k <= NC; k++) {
            h[b][k] = calloc((size_t)(packs[b].S * D), sizeof(float));
            g[b][k] = calloc((size_t)(packs[b].S * D), sizeof(float));
        }
    *out = calloc((size_t)(packs[0].S * od + packs[1].S * od), sizeof(float));
    for (int b = 0; b < 2 && ok; b++) {
        int64_t rows = 0;
        ok = dit_hidden_rows(&m, &packs[b].in, &rows) == VFM_OK;
        for (int k = 0; k < NC && ok; k++) {
            Tensor x = TF32(h[b][k], rows, D), y = TF32(h[b][k + 1], rows, D);
            Tensor o = TF32(*out + (b ? packs[0].S * od : 0), packs[b].S, od);
            ok = dit_chunk_forward(&m, slot[b][k], &packs[b].in, bounds[k], bounds[k + 1], k ? &x : NULL,
                                   k + 1 < NC ? &y : NULL, k + 1 < NC ? NULL : &o) == VFM_OK;
        }
    }
    for (int b = 0; b < 2 && ok; b++) {
        int64_t rows = 0;
        ok = dit_hidden_rows(&m, &packs[b].in, &rows) == VFM_OK;
        for (int k = NC - 1; k >= 0 && ok; k--) {
            Tensor dy = TF32(g[b][k + 1], rows, D), dx = TF32(g[b][k], rows, D);
            ok = dit_chunk_backward(&m, slot[b][k], &packs[b].in, bounds[k], bounds[k + 1], k + 1 < NC ? &dy : NULL,
                                    k ? &dx : NULL, k + 1 < NC ? NULL : &packs[b].tdout) == VFM_OK;
        }
    }
    if (!ok) test_fail(__FILE__, __LINE__, "chunks: %s", vfm_last_error());
    *grads = malloc((size_t)n * sizeof(float));
    memcpy(*grads, m.grads, (size_t)n * sizeof(float));
    for (int b = 0; b < 2; b++) {
        for (int k = 0; k < NC; k++) dit_saved_destroy(&m, slot[b][k]);
        for (int k = 0; k <= NC; k++) free(h[b][k]), free(g[b][k]);
    }
    dit_destroy(&m);
    return ok;
}

TEST(model_recompute_chunks_bitwise) {
    DiTConfig cfg = dit_test_config(DIT_VARIANT_DFM, 4);
    int64_t n, od = dit_out_dim(&cfg);
    float *w = dit_test_weights(&cfg, 43, &n);
    DitPack packs[2];
    dit_pack_make(&packs[0], &cfg, 16, 300);
    dit_pack_make(&packs[1], &cfg, 1, 400);
    float *ref_out, *ref_grads;
    REQUIRE(run_chunks(&cfg, w, packs, NULL, &ref_out, &ref_grads));
    const RecomputeConfig plans[] = {{RECOMPUTE_FULL, RECOMPUTE_UNIFORM, 2}, {RECOMPUTE_FULL, RECOMPUTE_BLOCK, 1},
                                     {RECOMPUTE_SELECTIVE, RECOMPUTE_METHOD_NONE, 0}};
    for (int p = 0; p < 3; p++) {
        float *out, *grads;
        REQUIRE(run_chunks(&cfg, w, packs, &plans[p], &out, &grads));
        CHECK_MSG(memcmp(out, ref_out, (size_t)((packs[0].S + packs[1].S) * od) * sizeof(float)) == 0,
                  "plan %d: the outputs differ", p);
        CHECK_MSG(memcmp(grads, ref_grads, (size_t)n * sizeof(float)) == 0, "plan %d: the gradients differ", p);
        free(out), free(grads);
    }
    free(ref_out), free(ref_grads), free(w);
    dit_pack_free(&packs[0]), dit_pack_free(&packs[1]);
}
