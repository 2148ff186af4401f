/* Activation recomputation under tensor, sequence and context parallelism (docs/parallel.md
 * "Activation recomputation"): at TP2+SP, CP2 (p2p ring and a2a) and TP2+SP × CP2, every plan —
 * full uniform 1 and 2, full block 2, selective — gives each rank bit for bit its output and its
 * local parameter gradients without recomputation (the replay reruns the TP regions' collectives
 * and the CP attention's ring or all-to-all, the same on every rank), for dfm (cross-attention,
 * QK-norm, GQA) and adaln-zero (fused qkv, biases, class labels, learned sigma). The one-rank side:
 * tests/unit/test_model_recompute.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../unit/dit_pack.h"
#include "model/dit.h"
#include "mpi_test.h"
#include "train/train_parallel.h"

typedef struct Layout {
    const char *name;
    int tp, sp, cp;
    CpCommType type;
    int a2a;
} Layout;

/* This rank's output and local gradients of one forward and backward with plan rc (NULL: none);
 * the weights are the single-rank table `full` cut to this rank's shards. */
static int run(const Layout *L, const DiTConfig *cfg, const float *full, DitPack *pk, const RecomputeConfig *rc,
               float **out, float **grads, int64_t *n_grads, size_t *peak) {
    TrainLayout keys = {L->tp, 1, L->cp, L->sp, L->type, L->a2a, 1, 0, 1};
    TrainParallel p;
    if (train_parallel_init(&p, &keys, mt_world(), mt_rank()) != VFM_OK) return 0;
    DiT m;
    int ok = dit_create_parallel(&m, cfg, DEV_CPU, &p.model) == VFM_OK;
    if (ok) {
        int64_t n = m.table.total, od = dit_out_dim(cfg);
        tp_shard_extract(m.shards, m.params, full);
        *out = calloc((size_t)(pk->S * od), sizeof(float));
        Tensor tout = TF32(*out, pk->S, od);
        ok = dit_set_recompute(&m, rc) == VFM_OK && dit_reserve(&m, pk->S, pk->L, DIT_PACK_SAMPLES) == VFM_OK &&
             dit_forward(&m, &pk->in, &tout) == VFM_OK && dit_backward(&m, &pk->in, &pk->tdout) == VFM_OK;
        if (!ok) printf("      %s: %s\n", L->name, vfm_last_error());
        *grads = malloc((size_t)n * sizeof(float));
        memcpy(*grads, m.grads, (size_t)n * sizeof(float));
        *n_grads = n;
        *peak = dit_activation_peak(&m);
        dit_destroy(&m);
    }
    train_parallel_free(&p);
    return ok;
}

static void check_layout(const Layout *L) {
    const RecomputeConfig plans[] = {{RECOMPUTE_FULL, RECOMPUTE_UNIFORM, 1}, {RECOMPUTE_FULL, RECOMPUTE_UNIFORM, 2},
                                     {RECOMPUTE_FULL, RECOMPUTE_BLOCK, 2}, {RECOMPUTE_SELECTIVE, RECOMPUTE_METHOD_NONE, 0}};
    const char *names[] = {"full uniform 1", "full uniform 2", "full block 2", "selective"};
    DiTVariant variants[] = {DIT_VARIANT_DFM, DIT_VARIANT_ADALN_ZERO, DIT_VARIANT_MOVIEGEN};
    for (int v = 0; v < 3; v++) {
        DiTConfig cfg = dit_test_config(variants[v], 3);
        int64_t total;
        float *full = dit_test_weights(&cfg, 51 + v, &total);
        DitPack pk;
        dit_pack_make(&pk, &cfg, 1, 500); /* unpadded: the model re-pads for CP internally */
        float *ref_out = NULL, *ref_grads = NULL;
        int64_t n = 0;
        size_t ref_peak = 0;
        REQUIRE(run(L, &cfg, full, &pk, NULL, &ref_out, &ref_grads, &n, &ref_peak));
        for (int p = 0; p < 4; p++) {
            float *out = NULL, *grads = NULL;
            int64_t n2 = 0;
            size_t peak = 0;
            char what[128];
            snprintf(what, sizeof what, "%s, %s, %s", L->name, dit_variant_name(cfg.variant), names[p]);
            CHECK_MSG(run(L, &cfg, full, &pk, &plans[p], &out, &grads, &n2, &peak), "%s: failed", what);
            if (out && grads && n2 == n) {
                char w2[160];
                snprintf(w2, sizeof w2, "%s: output", what);
                CHECK_SAME_BITS(w2, out, ref_out, pk.S * dit_out_dim(&cfg));
                snprintf(w2, sizeof w2, "%s: local gradients", what);
                CHECK_SAME_BITS(w2, grads, ref_grads, n);
            }
            CHECK_MSG(peak < ref_peak, "%s: activations %zu bytes, not below %zu", what, peak, ref_peak);
            if (mt_rank() == 0 && v == 0)
                printf("      %s: bitwise; activations on rank 0 %.1f of %.1f KiB\n", what, peak / 1024.0,
                       ref_peak / 1024.0);
            free(out), free(grads);
        }
        free(ref_out), free(ref_grads), free(full);
        dit_pack_free(&pk);
    }
}

TEST(dit_recompute_world2_tp_sp_cp) {
    REQUIRE_WORLD(2);
    const Layout ls[] = {{"TP2+SP", 2, 1, 1, CP_COMM_P2P, 0},
                         {"CP2 p2p", 1, 0, 2, CP_COMM_P2P, 0},
                         {"CP2 a2a", 1, 0, 2, CP_COMM_A2A, 2}};
    for (size_t i = 0; i < sizeof ls / sizeof ls[0]; i++) check_layout(&ls[i]);
}

TEST(dit_recompute_world4_tp_sp_x_cp) {
    REQUIRE_WORLD(4);
    const Layout l = {"TP2+SP x CP2", 2, 1, 2, CP_COMM_P2P, 0};
    check_layout(&l);
}
