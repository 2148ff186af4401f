/* Expert parallelism (moe.h, docs/parallel.md "Expert parallelism") against the single-rank model.
 * EP2 within DP: at world 2 one EP group (DP2 × EP2), at world 4 two of them (expert-data-parallel
 * groups {0,2} and {1,3}). Every rank builds the same weights and one pack per rank (mixed sample
 * lengths, a different pack on each rank), runs the single-rank model over every pack (the DP
 * reference: the gradients' mean over the packs), then its own EP rank on its own pack:
 *   - its output against the reference's on that pack;
 *   - every gradient after the reductions: dense entries averaged over DP, expert entries summed
 *     over the expert-data-parallel group only and divided by DP (each EP rank's expert gradients
 *     already hold the tokens of its whole EP group), each against the reference's shard;
 *   - expert choice: each of this rank's experts received exactly C_r = Σ_b C_b real tokens from
 *     every EP rank r (the non-empty rows of each sender's block of the dispatched slots);
 * with dfm's MLP as an expert-choice MoE (4 experts, capacity factor 2: samples drop tokens) and
 * as a token-choice top-2 MoE with the load-balancing and z losses. Tolerance (design §3):
 * max|a-b| <= 1e-6 + 1e-5·max|ref| per tensor. The broken variant (two rows of block 0's first
 * dispatch all-to-all swapped, DiTParallel.test_permute_ep_a2a) must fail. Bad EP sizes are refused. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../unit/dit_pack.h"
#include "model/dit_internal.h"
#include "mpi_test.h"

enum { EP = 2, MAX_RANKS = 4 };

typedef struct EpGroups {
    Comm ep, edp; /* {2k, 2k+1} and the ranks with this one's EP rank */
} EpGroups;

static void groups_make(EpGroups *g) {
    int W = mt_world(), r = mt_rank(), ep_m[EP], edp_m[MAX_RANKS], n = 0;
    for (int j = 0; j < EP; j++) ep_m[j] = r / EP * EP + j;
    for (int k = r % EP; k < W; k += EP) edp_m[n++] = k;
    REQUIRE_OK(comm_create(&g->ep, "ep", COMM_BACKEND_MPI, ep_m, EP));
    REQUIRE_OK(comm_create(&g->edp, "edp", COMM_BACKEND_MPI, edp_m, n));
}

/* What a run found: worst output and gradient errors, the entry of the worst gradient, and
 * whether every expert received exactly its C tokens from every sender. */
typedef struct Found {
    double out, grad;
    char worst[96];
    int exact_c;
} Found;

/* Received non-empty rows of each (sender, local expert) block of every MoE layer's dispatch
 * against C of the sender's pack. */
static int exact_capacity(const DiT *m, const DitPack *packs) {
    const Acts *a = &m->saved->a;
    int ok = 1, W = mt_world(), r = mt_rank();
    (void)W;
    for (int l = 0; l < m->n_blocks; l++) {
        const DiTBlock *blk = dit_block(m, l);
        for (int k = 0; k < blk->n_sub; k++) {
            if (blk->sub[k].kind != MIXER_MLP || blk->sub[k].mlp.moe.s.experts == 0) continue;
            const MoeSpec *s = &blk->sub[k].mlp.moe.s;
            const MoeActs *b = &a->blocks[l].sub[k].mlp.moe;
            int64_t El = s->experts / EP, C = b->C_used, D = m->cfg.hidden;
            const float *xe = b->xe.data;
            for (int sender = 0; sender < EP; sender++) {
                const DitPack *p = &packs[r / EP * EP + sender];
                int64_t want = 0;
                for (int i = 0; i < DIT_PACK_SAMPLES; i++) want += moe_capacity(s, p->cu[i + 1] - p->cu[i]);
                for (int64_t e = 0; e < El; e++) {
                    int64_t got = 0;
                    for (int64_t c = 0; c < C; c++) {
                        const float *row = xe + ((sender * El + e) * C + c) * D;
                        int nz = 0;
                        for (int64_t d = 0; d < D; d++) nz |= row[d] != 0.f;
                        got += nz;
                    }
                    if (got != want) ok = 0;
                }
            }
        }
    }
    return ok;
}

static void run_ep(const DiTConfig *cfg, const float *full, DitPack *packs, const float *ref_out,
                  const float *ref_grads_full, int brk, Found *f) {
    int W = mt_world(), r = mt_rank();
    EpGroups g;
    groups_make(&g);
    DiTParallel par = {.tp = 1, .cp = 1, .ep = EP, .ep_rank = r % EP, .ep_comm = &g.ep, .test_permute_ep_a2a = brk};
    DiT m;
    REQUIRE_OK(dit_create_parallel(&m, cfg, DEV_CPU, &par));
    tp_shard_extract(m.shards, m.params, full);
    int64_t S = 0, L = 0, od = dit_out_dim(cfg), n = m.table.total;
    for (int i = 0; i < W; i++) S = packs[i].S > S ? packs[i].S : S, L = packs[i].L > L ? packs[i].L : L;
    DitPack *p = &packs[r];
    float *out = calloc((size_t)(p->S * od), sizeof(float));
    Tensor tout = TF32(out, p->S, od);
    REQUIRE_OK(dit_reserve(&m, S, L, DIT_PACK_SAMPLES));
    REQUIRE_OK(dit_forward(&m, &p->in, &tout));
    f->exact_c = cfg->moe.routing == MOE_EXPERT_CHOICE ? exact_capacity(&m, packs) : 1;
    REQUIRE_OK(dit_backward(&m, &p->in, &p->tdout));
    f->out = dit_pack_rel_err(p, out, ref_out, od);
    /* the reductions: dense entries over DP, experts over the expert-data-parallel group */
    float *want = malloc((size_t)n * sizeof(float));
    tp_shard_extract(m.shards, want, ref_grads_full);
    f->grad = 0, f->worst[0] = 0;
    for (int i = 0; i < m.table.count; i++) {
        const ParamEntry *e = &m.table.entries[i];
        float *gr = m.grads + e->offset;
        Comm *c = (e->reduce_groups & REDUCE_EXPERT) ? &g.edp : mt_world_comm();
        REQUIRE_OK(comm_all_reduce(c, gr, e->numel, DT_F32, COMM_SUM_ORDERED));
        for (int64_t k = 0; k < e->numel; k++) gr[k] /= (float)W;
        double mref = dit_max_abs(want + e->offset, e->numel), err = 0;
        for (int64_t k = 0; k < e->numel; k++) {
            double d = fabs((double)gr[k] - want[e->offset + k]);
            err = d != d ? INFINITY : d > err ? d : err;
        }
        double rel = err / (1e-6 / 1e-5 + mref); /* <= 1e-5 ⇔ err <= 1e-6 + 1e-5·max|ref| */
        if (rel > f->grad) f->grad = rel, snprintf(f->worst, sizeof f->worst, "%s", e->name);
    }
    free(want), free(out);
    dit_destroy(&m);
    comm_free(&g.ep), comm_free(&g.edp);
}

static void check_routing(int token_choice) {
    int W = mt_world(), r = mt_rank();
    DiTConfig cfg;
    dit_test_moe_config(&cfg, DIT_VARIANT_DFM, token_choice);
    int64_t total;
    float *full = dit_test_weights(&cfg, 77 + token_choice, &total);
    DitPack packs[MAX_RANKS];
    for (int i = 0; i < W; i++) dit_pack_make_replica(&packs[i], &cfg, i);
    int64_t S = 0, L = 0, od = dit_out_dim(&cfg);
    for (int i = 0; i < W; i++) S = packs[i].S > S ? packs[i].S : S, L = packs[i].L > L ? packs[i].L : L;
    /* the reference: one rank over every pack, gradients summed then divided by DP */
    DiT ref;
    REQUIRE_OK(dit_create(&ref, &cfg, DEV_CPU));
    REQUIRE(ref.table.total == total);
    memcpy(ref.params, full, (size_t)total * sizeof(float));
    REQUIRE_OK(dit_reserve(&ref, S, L, DIT_PACK_SAMPLES));
    float *ref_out = calloc((size_t)(packs[r].S * od), sizeof(float));
    for (int i = 0; i < W; i++) {
        float *o = calloc((size_t)(packs[i].S * od), sizeof(float));
        Tensor to = TF32(o, packs[i].S, od);
        REQUIRE_OK(dit_forward(&ref, &packs[i].in, &to));
        REQUIRE_OK(dit_backward(&ref, &packs[i].in, &packs[i].tdout));
        if (i == r) memcpy(ref_out, o, (size_t)(packs[i].S * od) * sizeof(float));
        free(o);
    }
    float *ref_grads = malloc((size_t)total * sizeof(float));
    for (int64_t k = 0; k < total; k++) ref_grads[k] = ref.grads[k] / (float)W;
    dit_destroy(&ref);

    const char *name = token_choice ? "token choice top-2" : "expert choice";
    Found f;
    run_ep(&cfg, full, packs, ref_out, ref_grads, 0, &f);
    CHECK_MSG(f.out <= 1e-5, "EP2 %s: output off by %.3g of max|ref|", name, f.out);
    CHECK_MSG(f.grad <= 1e-5, "EP2 %s: gradient %s off by %.3g", name, f.worst, f.grad);
    CHECK_MSG(f.exact_c, "EP2 %s: an expert did not receive exactly C tokens from every EP rank", name);
    if (!token_choice) { /* the broken variant: two dispatched rows swapped */
        Found b;
        run_ep(&cfg, full, packs, ref_out, ref_grads, 1, &b);
        int caught = b.out > 1e-5 || b.grad > 1e-5, any = caught;
        REQUIRE_OK(comm_all_reduce(mt_world_comm(), &any, 1, DT_I32, COMM_MAX));
        CHECK_MSG(any, "EP2 with an all-to-all's rows permuted was not caught (out %.3g, grad %.3g)", b.out, b.grad);
    }
    printf("      EP2 × DP%d %s: out %.2g, grads %.2g (worst %s) of max|ref|\n", W, name, f.out, f.grad, f.worst);
    for (int i = 0; i < W; i++) dit_pack_free(&packs[i]);
    free(full), free(ref_out), free(ref_grads);
}

TEST(moe_ep2_expert_choice_equals_one_rank) {
    REQUIRE_WORLD(2, 4);
    check_routing(0);
}

TEST(moe_ep2_token_choice_equals_one_rank) {
    REQUIRE_WORLD(2, 4);
    check_routing(1);
}

TEST(moe_ep_bad_sizes_refused) {
    REQUIRE_WORLD(2);
    EpGroups g;
    groups_make(&g);
    DiTConfig cfg;
    dit_test_moe_config(&cfg, DIT_VARIANT_DFM, 0);
    cfg.moe.experts = 3;
    DiTParallel par = {.tp = 1, .cp = 1, .ep = EP, .ep_rank = mt_rank() % EP, .ep_comm = &g.ep};
    DiT m;
    CHECK(dit_create_parallel(&m, &cfg, DEV_CPU, &par) == VFM_ERR_USAGE);
    CHECK(strstr(vfm_last_error(), "model.expert_model_parallel_size") != NULL);
    dit_test_moe_config(&cfg, DIT_VARIANT_DFM, 0);
    cfg.moe.experts = 0;
    REQUIRE_OK(dit_config_resolve(&cfg));
    CHECK(dit_create_parallel(&m, &cfg, DEV_CPU, &par) == VFM_ERR_USAGE);
    comm_free(&g.ep), comm_free(&g.edp);
}
