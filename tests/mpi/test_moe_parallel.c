/* The MoE layer under tensor, sequence and context parallelism, alone and with expert
 * parallelism, against the single-rank model (moe.h, docs/parallel.md "Expert parallelism"). The
 * groups are the trainer's (train_parallel_init); EP2 is formed within DP×CP: EP groups are
 * consecutive pairs of the DP×CP group (ascending ranks), the expert-data-parallel group the
 * members with the same place in their pair. Every rank builds the same weights and one pack per
 * DP replica (mixed sample lengths, a 1-token sample), runs the single-rank model over every
 * replica's pack (the reference: the gradients' mean over the replicas), then its rank of the
 * layout on its replica's pack:
 *   - the whole output against the reference's;
 *   - every gradient after the reductions (REDUCE_TP_HEADS over TP, REDUCE_TP_SP over TP under SP,
 *     expert entries over the expert-data-parallel group, the rest over DP×CP; divided by DP),
 *     each against the reference's shard;
 *   - expert choice: over the world, each expert's slots hold exactly Σ_replicas C real tokens
 *     (C = Σ_b C_b of the replica's pack; TP ranks hold copies, counted once);
 * for dfm with GELU experts (expert choice, capacity factor 2, so samples drop tokens; token choice
 * top-2 with the load-balancing and z losses) and moviegen with SwiGLU experts (expert choice).
 * Tolerance (design §3): max|a-b| <= 1e-6 + 1e-5·max|ref| per tensor. Broken variants must fail:
 * under CP the router's logits not gathered (each CP rank selects among its own chunk's tokens),
 * under EP two rows of a dispatch all-to-all swapped. Layouts: world 2 TP2, TP2+SP, CP2 p2p, CP2 a2a,
 * CP2 × EP2 (EP over the CP pair); world 4 EP2 × TP2+SP (DP2), EP2 × CP2 p2p (DP2; EP over CP). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../unit/dit_pack.h"
#include "model/dit_internal.h"
#include "mpi_test.h"
#include "parallel/groups.h"
#include "train/train_parallel.h"

enum { MAX_DP = 4, MAX_WORLD = 8 };

typedef struct Case {
    const char *name;
    DiTVariant v;
    int token_choice;
} Case;

static const Case CASES[] = {{"dfm, expert choice (GELU experts)", DIT_VARIANT_DFM, 0},
                             {"dfm, token choice top-2 (GELU experts)", DIT_VARIANT_DFM, 1},
                             {"moviegen, expert choice (SwiGLU experts)", DIT_VARIANT_MOVIEGEN, 0}};

typedef struct Layout {
    const char *name;
    int tp, sp, cp;
    CpCommType type;
    int ep;
} Layout;

/* The EP groups within DP×CP (see the file's comment). */
typedef struct EpGroups {
    Comm ep, edp;
    int ep_rank;
} EpGroups;

static void ep_groups(EpGroups *g, const ParallelLayout *pl, int ep) {
    int dpcp[MAX_WORLD], n = group_members(pl, GROUP_DP_CP, pl->rank, dpcp), size = group_size(pl, GROUP_DP_CP);
    int ep_m[MAX_WORLD], edp_m[MAX_WORLD], k = 0;
    for (int j = 0; j < ep; j++) ep_m[j] = dpcp[n / ep * ep + j];
    for (int j = n % ep; j < size; j += ep) edp_m[k++] = dpcp[j];
    g->ep_rank = n % ep;
    REQUIRE_OK(comm_create(&g->ep, "ep", COMM_BACKEND_MPI, ep_m, ep));
    REQUIRE_OK(comm_create(&g->edp, "edp", COMM_BACKEND_MPI, edp_m, k));
}

/* Real (non-zero) rows per global expert in every MoE layer's dispatched slots of this rank
 * (layer-major, [layers][E]); TP ranks other than 0 count nothing (they hold copies). */
static void count_slots(const DiT *m, int ep, int ep_rank, int64_t *count) {
    const Acts *a = &m->saved->a;
    int at = 0;
    for (int l = 0; l < m->n_blocks; l++) {
        const DiTBlock *blk = dit_block(m, l);
        for (int k = 0; k < blk->n_sub; k++) {
            if (blk->sub[k].kind != MIXER_MLP || blk->sub[k].mlp.moe.s.experts == 0) continue;
            const MoeActs *b = &a->blocks[l].sub[k].mlp.moe;
            int64_t E = blk->sub[k].mlp.moe.s.experts, El = E / ep, C = b->C_used, D = m->cfg.hidden;
            for (int64_t e = 0; e < E; e++) count[at * E + e] = 0;
            const float *xe = b->xe.data;
            for (int sender = 0; sender < ep && m->par.tp_rank == 0; sender++)
                for (int64_t e = 0; e < El; e++)
                    for (int64_t c = 0; c < C; c++) {
                        const float *row = xe + ((sender * El + e) * C + c) * D;
                        int nz = 0;
                        for (int64_t d = 0; d < D; d++) nz |= row[d] != 0.f;
                        count[at * E + ep_rank * El + e] += nz;
                    }
            at++;
        }
    }
}

typedef struct Found {
    int ran;
    double out, grad;
    char worst[96];
    int exact_c;
} Found;

enum { BREAK_NONE, BREAK_LOGITS, BREAK_A2A };

static void run_layout(const Layout *L, const DiTConfig *cfg, const float *full, DitPack *packs, int dp,
                       const float *ref_out, const float *ref_grads, int brk, Found *f) {
    memset(f, 0, sizeof *f);
    TrainLayout keys = {L->tp, 1, L->cp, L->sp, L->type, L->type == CP_COMM_A2A ? L->cp : 0, 1, 0, 1};
    TrainParallel p;
    REQUIRE_OK(train_parallel_init(&p, &keys, mt_world(), mt_rank()));
    EpGroups g = {0};
    DiTParallel par = p.model;
    if (L->ep > 1) {
        ep_groups(&g, &p.layout, L->ep);
        par.ep = L->ep, par.ep_rank = g.ep_rank, par.ep_comm = &g.ep;
    }
    par.test_moe_local_logits = brk == BREAK_LOGITS;
    par.test_permute_ep_a2a = brk == BREAK_A2A;
    DiT m;
    REQUIRE_OK(dit_create_parallel(&m, cfg, DEV_CPU, &par));
    tp_shard_extract(m.shards, m.params, full);
    memset(m.grads, 0, (size_t)m.table.total * sizeof(float));
    int64_t S = 0, L_text = 0, od = dit_out_dim(cfg), n = m.table.total;
    for (int i = 0; i < dp; i++) S = packs[i].S > S ? packs[i].S : S, L_text = packs[i].L > L_text ? packs[i].L : L_text;
    DitPack *pk = &packs[p.layout.dp_rank];
    float *out = calloc((size_t)(pk->S * od), sizeof(float));
    Tensor tout = TF32(out, pk->S, od);
    REQUIRE_OK(dit_reserve(&m, S, L_text, DIT_PACK_SAMPLES));
    REQUIRE_OK(dit_forward(&m, &pk->in, &tout));
    f->exact_c = 1;
    if (cfg->moe.routing == MOE_EXPERT_CHOICE) { /* Σ over the world per expert = Σ_replicas C */
        int64_t E = cfg->moe.experts, count[8 * 8];
        REQUIRE(cfg->layers * E <= 64);
        count_slots(&m, L->ep > 1 ? L->ep : 1, L->ep > 1 ? g.ep_rank : 0, count);
        REQUIRE_OK(comm_all_reduce(mt_world_comm(), count, cfg->layers * E, DT_I64, COMM_SUM));
        int64_t want = 0;
        for (int j = 0; j < dp; j++)
            for (int i = 0; i < DIT_PACK_SAMPLES; i++) want += moe_capacity(&cfg->moe, packs[j].cu[i + 1] - packs[j].cu[i]);
        for (int64_t i = 0; i < cfg->layers * E; i++) f->exact_c &= count[i] == want;
    }
    REQUIRE_OK(dit_backward(&m, &pk->in, &pk->tdout));
    f->out = dit_pack_rel_err(pk, out, ref_out, od);
    float *want = malloc((size_t)n * sizeof(float));
    tp_shard_extract(m.shards, want, ref_grads);
    for (int i = 0; i < m.table.count; i++) {
        const ParamEntry *e = &m.table.entries[i];
        float *gr = m.grads + e->offset;
        unsigned rg = e->reduce_groups;
        if (L->tp > 1 && ((rg & REDUCE_TP_HEADS) || (L->sp && (rg & REDUCE_TP_SP))))
            REQUIRE_OK(comm_all_reduce(&p.tp, gr, e->numel, DT_F32, COMM_SUM_ORDERED));
        Comm *c = (rg & REDUCE_EXPERT) && L->ep > 1 ? &g.edp : &p.grad;
        if (c->size > 1) REQUIRE_OK(comm_all_reduce(c, gr, e->numel, DT_F32, COMM_SUM_ORDERED));
        for (int64_t k = 0; k < e->numel; k++) gr[k] /= (float)dp;
        double mref = dit_max_abs(want + e->offset, e->numel), err = 0;
        for (int64_t k = 0; k < e->numel; k++) {
            double d = fabs((double)gr[k] - want[e->offset + k]);
            err = d != d ? INFINITY : d > err ? d : err;
        }
        double rel = err / (1e-6 / 1e-5 + mref); /* <= 1e-5 ⇔ err <= 1e-6 + 1e-5·max|ref| */
        if (rel > f->grad) f->grad = rel, snprintf(f->worst, sizeof f->worst, "%s", e->name);
    }
    f->ran = 1;
    free(want), free(out);
    dit_destroy(&m);
    if (L->ep > 1) comm_free(&g.ep), comm_free(&g.edp);
    train_parallel_free(&p);
}

static int anywhere(int v) {
    int x = v != 0;
    comm_all_reduce(mt_world_comm(), &x, 1, DT_I32, COMM_MAX);
    return x;
}

static void check_layout(const Layout *L) {
    ParallelLayout pl;
    REQUIRE_OK(layout_init(&pl, mt_world(), mt_rank(), L->tp, 1, L->cp));
    int dp = pl.dp;
    REQUIRE(dp <= MAX_DP);
    for (size_t c = 0; c < sizeof CASES / sizeof CASES[0]; c++) {
        DiTConfig cfg;
        dit_test_moe_config(&cfg, CASES[c].v, CASES[c].token_choice);
        int64_t total;
        float *full = dit_test_weights(&cfg, 77 + c, &total);
        DitPack packs[MAX_DP];
        for (int i = 0; i < dp; i++) dit_pack_make_replica(&packs[i], &cfg, i);
        int64_t S = 0, Lt = 0, od = dit_out_dim(&cfg);
        for (int i = 0; i < dp; i++) S = packs[i].S > S ? packs[i].S : S, Lt = packs[i].L > Lt ? packs[i].L : Lt;
        DiT ref;
        REQUIRE_OK(dit_create(&ref, &cfg, DEV_CPU));
        REQUIRE(ref.table.total == total);
        memcpy(ref.params, full, (size_t)total * sizeof(float));
        memset(ref.grads, 0, (size_t)total * sizeof(float));
        REQUIRE_OK(dit_reserve(&ref, S, Lt, DIT_PACK_SAMPLES));
        float *ref_out = calloc((size_t)(packs[pl.dp_rank].S * od), sizeof(float));
        for (int i = 0; i < dp; i++) {
            float *o = calloc((size_t)(packs[i].S * od), sizeof(float));
            Tensor to = TF32(o, packs[i].S, od);
            REQUIRE_OK(dit_forward(&ref, &packs[i].in, &to));
            REQUIRE_OK(dit_backward(&ref, &packs[i].in, &packs[i].tdout));
            if (i == pl.dp_rank) memcpy(ref_out, o, (size_t)(packs[i].S * od) * sizeof(float));
            free(o);
        }
        float *ref_grads = malloc((size_t)total * sizeof(float));
        for (int64_t k = 0; k < total; k++) ref_grads[k] = ref.grads[k] / (float)dp;
        dit_destroy(&ref);

        Found f;
        run_layout(L, &cfg, full, packs, dp, ref_out, ref_grads, BREAK_NONE, &f);
        int bad = anywhere(!(f.out <= 1e-5 && f.grad <= 1e-5 && f.exact_c));
        CHECK_MSG(!bad, "%s, %s: output %.3g, gradient %s %.3g of max|ref|, exactly C per expert: %s (rank %d)", L->name,
                  CASES[c].name, f.out, f.worst, f.grad, f.exact_c ? "yes" : "no", mt_rank());
        if (mt_rank() == 0)
            printf("      %s, %s: out %.2g, grads %.2g (worst %s) of max|ref|%s\n", L->name, CASES[c].name, f.out, f.grad,
                   f.worst, cfg.moe.routing == MOE_EXPERT_CHOICE ? ", exactly C tokens per expert" : "");
        if (c == 0 && (L->cp > 1 || L->ep > 1)) { /* the broken variants must fail */
            int brk = L->cp > 1 ? BREAK_LOGITS : BREAK_A2A;
            Found b;
            run_layout(L, &cfg, full, packs, dp, ref_out, ref_grads, brk, &b);
            int caught = anywhere(b.out > 1e-5 || b.grad > 1e-5 || !b.exact_c);
            CHECK_MSG(caught, "%s with %s was not caught", L->name,
                      brk == BREAK_LOGITS ? "the router's logits not gathered over CP" : "a dispatch's rows permuted");
            if (mt_rank() == 0)
                printf("      %s, %s: out %.2g, grads %.2g of max|ref| (caught)\n", L->name,
                       brk == BREAK_LOGITS ? "logits not gathered over CP" : "dispatch rows permuted", b.out, b.grad);
            if (L->cp > 1 && L->ep > 1) {
                run_layout(L, &cfg, full, packs, dp, ref_out, ref_grads, BREAK_A2A, &b);
                CHECK_MSG(anywhere(b.out > 1e-5 || b.grad > 1e-5), "%s with a dispatch's rows permuted was not caught",
                          L->name);
            }
        }
        for (int i = 0; i < dp; i++) dit_pack_free(&packs[i]);
        free(full), free(ref_out), free(ref_grads);
    }
}

TEST(moe_parallel_world2) {
    REQUIRE_WORLD(2);
    const Layout ls[] = {{"TP2", 2, 0, 1, CP_COMM_P2P, 1},
                         {"TP2+SP", 2, 1, 1, CP_COMM_P2P, 1},
                         {"CP2 p2p", 1, 0, 2, CP_COMM_P2P, 1},
                         {"CP2 a2a", 1, 0, 2, CP_COMM_A2A, 1},
                         {"CP2 x EP2 (EP over CP)", 1, 0, 2, CP_COMM_P2P, 2}};
    for (size_t i = 0; i < sizeof ls / sizeof ls[0]; i++) check_layout(&ls[i]);
}

TEST(moe_parallel_world4) {
    REQUIRE_WORLD(4);
    const Layout ls[] = {{"EP2 x TP2+SP (DP2)", 2, 1, 1, CP_COMM_P2P, 2},
                         {"EP2 x CP2 p2p (DP2)", 1, 0, 2, CP_COMM_P2P, 2}};
    for (size_t i = 0; i < sizeof ls / sizeof ls[0]; i++) check_layout(&ls[i]);
}
