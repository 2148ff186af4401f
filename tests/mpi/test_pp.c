/* Pipeline parallelism at PP = the world size (1-4) on a toy model built from op_linear: a patch
 * embedder (first stage), L blocks h ← gelu(h·Wᵀ + b + e) where e = E·c is a conditioning
 * embedding every stage computes itself (E flagged REDUCE_PP), and a final linear with a squared
 * loss (last stage). The stages run 1F1B and interleaved 1F1B (V = 2) with M ∈ {1, P, 2P+1}
 * micro-batches and uneven block splits through pp_run; hidden states and their gradients travel
 * with the p2p exchange. Against the same model on one rank (every rank computes it): the loss of
 * every micro-batch, every block, patch and final-layer gradient bit for bit (each block sees the
 * same inputs and adds its micro-batches in the same order); E's gradient after
 * pp_reduce_replicated_grads within 1e-5·max|ref| (each stage adds its own blocks' part) and
 * bitwise the same on every stage; without the PP sum (the broken variant) it is off. Then the
 * PP sum before the data-parallel mean at PP2 × DP2 with stage tables that differ (bitwise against
 * a reference; dp.c's own PP step the same), and the check that stages hold the same replicated
 * entries. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/hash.h"
#include "mpi_test.h"
#include "ops/ops.h"
#include "parallel/dp.h"
#include "parallel/pp_exec.h"
#include "parallel/pp_stage.h"

enum { N = 5, DIN = 3, D = 6, DC = 2, DOUT = 3, MAX_L = 16, MAX_M = 16 };

static void toy_table(ParamTable *t, int L, int *block_first, int *head) {
    param_table_init(t);
    param_table_add(t, INIT_NORMAL, 0.1f, 2, (int64_t[]){D, DIN}, 0, -1, "patch.weight");
    param_table_add(t, INIT_NORMAL, 0.1f, 2, (int64_t[]){D, DC}, REDUCE_PP, -1, "cond.weight");
    for (int l = 0; l < L; l++) {
        block_first[l] = param_table_add(t, INIT_NORMAL, 0.1f, 2, (int64_t[]){D, D}, 0, -1, "blocks.%d.weight", l);
        param_table_add(t, INIT_ZERO, 0, 1, (int64_t[]){D}, 0, -1, "blocks.%d.bias", l);
    }
    *head = param_table_add(t, INIT_NORMAL, 0.1f, 2, (int64_t[]){DOUT, D}, 0, -1, "final.weight");
}

/* One stage of the toy model (one rank's copy; P = 1 is the single-rank model). */
typedef struct {
    const ParamTable *t;
    float *params, *grads;
    int P, V, stage, L;
    float *saved[MAX_M * 4];
    double loss[MAX_M];
} Toy;

static Tensor view(Toy *m, const char *name, int grad) {
    int i = param_table_find(m->t, name);
    return param_view(m->t, i, grad ? m->grads : m->params, DT_F32, DEV_CPU);
}

static Tensor viewf(Toy *m, int grad, const char *fmt, int l) {
    char name[64];
    snprintf(name, sizeof name, fmt, l);
    return view(m, name, grad);
}

static void micro_batch_data(int mb, float *x, float *c, float *target) {
    test_fill_uniform_f32(x, N * DIN, 100 + (uint64_t)mb, -1.0f, 1.0f);
    test_fill_uniform_f32(c, DC, 200 + (uint64_t)mb, -1.0f, 1.0f);
    test_fill_uniform_f32(target, N * DOUT, 300 + (uint64_t)mb, -1.0f, 1.0f);
}

static vfm_status toy_forward(void *ctx, int mb, int chunk, const void *x, void *y) {
    Toy *m = ctx;
    int first, count, g = chunk * m->P + m->stage, C = m->P * m->V;
    pp_chunk_blocks(m->L, m->P, m->V, m->stage, chunk, &first, &count);
    float xin[N * DIN], c[DC], target[N * DOUT], beff[D];
    micro_batch_data(mb, xin, c, target);
    /* saved: h[0..count] [N, D], pre[count] [N, D], e [D], dloss [N, DOUT] */
    float *s = calloc((size_t)((2 * count + 1) * N * D + D + N * DOUT), sizeof(float));
    m->saved[mb * m->V + chunk] = s;
    float *pre = s + (count + 1) * N * D, *e = pre + count * N * D, *dl = e + D;
    Tensor E = TF32(e, 1, D), Cm = TF32(c, 1, DC), condw = view(m, "cond.weight", 0);
    VFM_TRY(op_linear_forward(&E, NULL, &Cm, &condw, NULL, ACT_NONE)); /* every stage: the conditioning */
    Tensor H0 = TF32(s, N, D);
    if (g == 0) {
        Tensor X = TF32(xin, N, DIN), pw = view(m, "patch.weight", 0);
        VFM_TRY(op_linear_forward(&H0, NULL, &X, &pw, NULL, ACT_NONE));
    } else {
        memcpy(s, x, N * D * sizeof(float));
    }
    for (int k = 0; k < count; k++) {
        Tensor Hin = TF32(s + k * N * D, N, D), Hout = TF32(s + (k + 1) * N * D, N, D), P = TF32(pre + k * N * D, N, D);
        Tensor w = viewf(m, 0, "blocks.%d.weight", first + k), b = viewf(m, 0, "blocks.%d.bias", first + k);
        Tensor B = TF32(beff, D), Ev = TF32(e, D);
        VFM_TRY(op_add(&B, &b, &Ev));
        VFM_TRY(op_linear_forward(&Hout, &P, &Hin, &w, &B, ACT_GELU_TANH));
    }
    float *h = s + count * N * D;
    if (g == C - 1) { /* the final layer and the loss ½Σ(out − target)², its gradient out − target */
        float out[N * DOUT];
        Tensor O = TF32(out, N, DOUT), Hl = TF32(h, N, D), fw = view(m, "final.weight", 0);
        VFM_TRY(op_linear_forward(&O, NULL, &Hl, &fw, NULL, ACT_NONE));
        Tensor DL = TF32(dl, N, DOUT), T = TF32(target, N, DOUT);
        VFM_TRY(op_copy(&DL, &O));
        VFM_TRY(op_axpy(&DL, -1.0, &T));
        double sum = 0;
        VFM_TRY(op_sum_squares(&sum, &DL));
        m->loss[mb] = 0.5 * sum;
    } else {
        memcpy(y, h, N * D * sizeof(float));
    }
    return VFM_OK;
}

static vfm_status toy_backward(void *ctx, int mb, int chunk, const void *dy, void *dx) {
    Toy *m = ctx;
    int first, count, g = chunk * m->P + m->stage, C = m->P * m->V;
    pp_chunk_blocks(m->L, m->P, m->V, m->stage, chunk, &first, &count);
    float xin[N * DIN], c[DC], target[N * DOUT], dh[N * D], dhin[N * D], de[D] = {0}, db[D];
    micro_batch_data(mb, xin, c, target);
    float *s = m->saved[mb * m->V + chunk];
    float *pre = s + (count + 1) * N * D, *e = pre + count * N * D, *dl = e + D;
    (void)e;
    Tensor DH = TF32(dh, N, D), DHIN = TF32(dhin, N, D), DE = TF32(de, D), DB = TF32(db, D);
    if (g == C - 1) {
        Tensor DL = TF32(dl, N, DOUT), Hl = TF32(s + count * N * D, N, D), fw = view(m, "final.weight", 0),
               gfw = view(m, "final.weight", 1);
        VFM_TRY(op_linear_backward(&DH, &gfw, NULL, &DL, &Hl, &fw, NULL, ACT_NONE, 0));
    } else {
        memcpy(dh, dy, sizeof dh);
    }
    for (int k = count - 1; k >= 0; k--) {
        Tensor Hin = TF32(s + k * N * D, N, D), P = TF32(pre + k * N * D, N, D);
        Tensor w = viewf(m, 0, "blocks.%d.weight", first + k), gw = viewf(m, 1, "blocks.%d.weight", first + k),
               gb = viewf(m, 1, "blocks.%d.bias", first + k);
        memset(db, 0, sizeof db);
        VFM_TRY(op_linear_backward(&DHIN, &gw, &DB, &DH, &Hin, &w, &P, ACT_GELU_TANH, 0));
        VFM_TRY(op_add(&gb, &gb, &DB));
        VFM_TRY(op_add(&DE, &DE, &DB));
        memcpy(dh, dhin, sizeof dh);
    }
    if (g == 0) {
        Tensor X = TF32(xin, N, DIN), pw = view(m, "patch.weight", 0), gpw = view(m, "patch.weight", 1);
        VFM_TRY(op_linear_backward(NULL, &gpw, NULL, &DH, &X, &pw, NULL, ACT_NONE, 0));
    } else {
        memcpy(dx, dh, sizeof dh);
    }
    Tensor DE2 = TF32(de, 1, D), Cm = TF32(c, 1, DC), cw = view(m, "cond.weight", 0), gcw = view(m, "cond.weight", 1);
    VFM_TRY(op_linear_backward(NULL, &gcw, NULL, &DE2, &Cm, &cw, NULL, ACT_NONE, 0));
    free(s);
    m->saved[mb * m->V + chunk] = NULL;
    return VFM_OK;
}

/* Runs M micro-batches of the toy on one stage of P (chunks V); params from the full values. */
static vfm_status toy_run(Toy *m, const ParamTable *full, const PpStageMap *map, const float *full_params, int P, int V,
                          int stage, int L, int M, Comm *pp) {
    memset(m, 0, sizeof *m);
    m->t = &map->local;
    m->P = P, m->V = V, m->stage = stage, m->L = L;
    m->params = malloc((size_t)map->local.total * sizeof(float));
    m->grads = calloc((size_t)map->local.total, sizeof(float));
    for (int i = 0; i < map->local.count; i++)
        memcpy(m->params + map->local.entries[i].offset, full_params + full->entries[map->full_entry[i]].offset,
               (size_t)map->local.entries[i].numel * sizeof(float));
    PpSchedule s;
    VFM_TRY(pp_schedule_build(&s, P, M, V, stage));
    PpStage st = {m, toy_forward, toy_backward};
    PpRunStats stats;
    vfm_status r = pp_run(&s, pp, &st, N * D, DT_F32, DEV_CPU, &stats);
    pp_schedule_free(&s);
    return r;
}

static void toy_free(Toy *m) {
    free(m->params);
    free(m->grads);
}

static double max_abs(const float *x, int64_t n) {
    double a = 0;
    for (int64_t i = 0; i < n; i++) a = fabs(x[i]) > a ? fabs(x[i]) : a;
    return a;
}

static double max_diff(const float *x, const float *y, int64_t n) {
    double a = 0;
    for (int64_t i = 0; i < n; i++) a = fabs((double)x[i] - y[i]) > a ? fabs((double)x[i] - y[i]) : a;
    return a;
}

/* One layout against the single-rank model. */
static void check_layout(int V, int M, int L) {
    int P = mt_world(), stage = mt_rank(), block_first[MAX_L], head;
    ParamTable full;
    toy_table(&full, L, block_first, &head);
    float *values = malloc((size_t)full.total * sizeof(float));
    test_fill_uniform_f32(values, full.total, 7, -0.5f, 0.5f);
    PpBlocks blocks = {block_first, L, head};
    /* the single-rank model */
    PpStageMap one;
    Toy ref;
    REQUIRE_OK(pp_stage_map_init(&one, &full, &blocks, 1, 1, 0));
    REQUIRE_OK(toy_run(&ref, &full, &one, values, 1, 1, 0, L, M, NULL));
    /* this stage */
    PpStageMap map;
    Toy got;
    REQUIRE_OK(pp_stage_map_init(&map, &full, &blocks, P, V, stage));
    REQUIRE_OK(toy_run(&got, &full, &map, values, P, V, stage, L, M, mt_world_comm()));
    float *broken = malloc((size_t)map.local.total * sizeof(float));
    memcpy(broken, got.grads, (size_t)map.local.total * sizeof(float));
    REQUIRE_OK(pp_check_replicated(mt_world_comm(), &map.local));
    REQUIRE_OK(pp_reduce_replicated_grads(mt_world_comm(), &map.local, got.grads, 0, 0, map.local.count, DEV_CPU));
    char what[128];
    if (stage == P - 1)
        for (int mb = 0; mb < M; mb++)
            CHECK_MSG(got.loss[mb] == ref.loss[mb], "V=%d M=%d L=%d: loss of micro-batch %d %.17g, one rank %.17g", V, M, L,
                      mb, got.loss[mb], ref.loss[mb]);
    for (int i = 0; i < map.local.count; i++) {
        const ParamEntry *e = &map.local.entries[i];
        const float *want = ref.grads + full.entries[map.full_entry[i]].offset, *have = got.grads + e->offset;
        snprintf(what, sizeof what, "P=%d V=%d M=%d L=%d stage %d: %s gradient", P, V, M, L, stage, e->name);
        CHECK_MSG(max_abs(want, e->numel) > 0, "%s is zero on one rank", what);
        if (e->reduce_groups & REDUCE_PP) {
            CHECK_CLOSE_F32(what, have, want, e->numel, 0, 1e-5);
            if (P > 1) { /* the broken variant (no PP sum) is far off */
                double off = max_diff(broken + e->offset, want, e->numel);
                CHECK_MSG(off > 1e-3 * max_abs(want, e->numel), "%s without the PP sum is off by only %g", what, off);
            }
            /* identical bits on every stage */
            float *all = malloc((size_t)(e->numel * P) * sizeof(float));
            CHECK_OK(comm_all_gather(mt_world_comm(), have, all, e->numel, DT_F32));
            for (int p = 1; p < P; p++) CHECK_SAME_BITS(what, all + p * e->numel, all, e->numel);
            free(all);
        } else {
            CHECK_SAME_BITS(what, have, want, e->numel);
        }
    }
    free(broken);
    toy_free(&got), toy_free(&ref);
    pp_stage_map_free(&map), pp_stage_map_free(&one);
    free(values);
    param_table_free(&full);
}

TEST(pp_toy_1f1b_matches_one_rank) {
    int P = mt_world();
    const int Ms[3] = {1, P, 2 * P + 1};
    for (int k = 0; k < 3; k++) {
        check_layout(1, Ms[k], P + 1);   /* uneven: the last stage holds two blocks */
        check_layout(1, Ms[k], 2 * P);   /* even */
    }
}

TEST(pp_toy_interleaved_matches_one_rank) {
    REQUIRE_WORLD(2, 3, 4);
    int P = mt_world();
    check_layout(2, P, 2 * P);
    check_layout(2, 2 * P + 1, 2 * P + 1); /* uneven chunks, G = P + 1 */
    check_layout(2, 2 * P, 4 * P - 1);
}

/* Forward only (validation): every micro-batch's loss bit for bit against one rank, with 1F1B's
 * and the interleaved forward order; the runner frees every buffer. */
TEST(pp_toy_forward_only_matches_one_rank) {
    int P = mt_world(), stage = mt_rank(), block_first[MAX_L], head;
    for (int V = 1; V <= (P > 1 ? 2 : 1); V++) {
        int M = 2 * P + 1, L = 2 * P + 1;
        ParamTable full;
        toy_table(&full, L, block_first, &head);
        float *values = malloc((size_t)full.total * sizeof(float));
        test_fill_uniform_f32(values, full.total, 9, -0.5f, 0.5f);
        PpBlocks blocks = {block_first, L, head};
        PpStageMap one, map;
        Toy ref, got;
        REQUIRE_OK(pp_stage_map_init(&one, &full, &blocks, 1, 1, 0));
        REQUIRE_OK(toy_run(&ref, &full, &one, values, 1, 1, 0, L, M, NULL));
        REQUIRE_OK(pp_stage_map_init(&map, &full, &blocks, P, V, stage));
        memset(&got, 0, sizeof got);
        got.t = &map.local, got.P = P, got.V = V, got.stage = stage, got.L = L;
        got.params = malloc((size_t)map.local.total * sizeof(float));
        got.grads = calloc((size_t)map.local.total, sizeof(float));
        for (int i = 0; i < map.local.count; i++)
            memcpy(got.params + map.local.entries[i].offset, values + full.entries[map.full_entry[i]].offset,
                   (size_t)map.local.entries[i].numel * sizeof(float));
        PpSchedule s;
        REQUIRE_OK(pp_schedule_forward_only(&s, P, M, V, stage));
        PpStage st = {&got, toy_forward, NULL};
        PpRunStats stats;
        CHECK_OK(pp_run(&s, mt_world_comm(), &st, N * D, DT_F32, DEV_CPU, &stats));
        /* an input and the output being sent; interleaved, stage 0 also holds the inputs the last stage
         * sent ahead for its next chunk (Megatron's receive buffer of G − P + 1) */
        int bound = V > 1 ? s.group - P + 3 : 2;
        CHECK_MSG(stats.max_live_buffers <= bound, "stage %d: %d buffers alive at once, bound %d", stage,
                  stats.max_live_buffers, bound);
        if (stage == P - 1)
            for (int mb = 0; mb < M; mb++) CHECK_SAME_BITS("forward-only loss", &got.loss[mb], &ref.loss[mb], 1);
        for (int k = 0; k < MAX_M * 4; k++) free(got.saved[k]);
        pp_schedule_free(&s);
        toy_free(&got), toy_free(&ref);
        pp_stage_map_free(&map), pp_stage_map_free(&one);
        free(values);
        param_table_free(&full);
    }
}

/* PP2 × DP2 with stage tables that differ around the replicated entries (stage 0: a first-stage
 * entry between them, so they are packed; stage 1: contiguous): the REDUCE_PP entries summed over
 * PP, then every entry averaged over DP (dp.c, ZeRO-1), bit for bit against the reference; a run
 * that skips the PP sum differs. */
TEST(pp_replicated_grads_before_dp) {
    REQUIRE_WORLD(4);
    ParallelLayout l;
    REQUIRE_OK(layout_init(&l, 4, mt_rank(), 1, 2, 1));
    Comm pp, dpc;
    REQUIRE_OK(comm_create_group(&pp, &l, GROUP_PP, COMM_BACKEND_MPI));
    REQUIRE_OK(comm_create_group(&dpc, &l, GROUP_DP_CP, COMM_BACKEND_MPI));
    ParamTable t;
    param_table_init(&t);
    if (l.pp_rank == 0) param_table_add(&t, INIT_ZERO, 0, 2, (int64_t[]){3, 5}, 0, -1, "patch.weight");
    param_table_add(&t, INIT_ZERO, 0, 2, (int64_t[]){7, 3}, REDUCE_PP, -1, "t_embedder.weight");
    if (l.pp_rank == 0) param_table_add(&t, INIT_ZERO, 0, 1, (int64_t[]){4}, 0, -1, "patch.bias");
    param_table_add(&t, INIT_ZERO, 0, 1, (int64_t[]){1030}, REDUCE_PP, -1, "cond_norm.weight"); /* > 1024: the all-to-all path */
    param_table_add(&t, INIT_ZERO, 0, 2, (int64_t[]){5, 5}, 0, -1, "blocks.%d.weight", l.pp_rank);
    if (l.pp_rank == 1) param_table_add(&t, INIT_ZERO, 0, 1, (int64_t[]){9}, 0, -1, "final.weight");
    REQUIRE_OK(pp_check_replicated(&pp, &t));
    /* every rank's gradient: uniform from its (dp, pp) and the entry's name */
    float *g = malloc((size_t)t.total * sizeof(float)), *want = malloc((size_t)t.total * sizeof(float));
    for (int i = 0; i < t.count; i++) {
        const ParamEntry *e = &t.entries[i];
        float *part = malloc((size_t)e->numel * sizeof(float)), *stage_sum = malloc((size_t)e->numel * sizeof(float));
        for (int d = 0; d < 2; d++) {
            int stages = e->reduce_groups & REDUCE_PP ? 2 : 1;
            for (int p = 0; p < stages; p++) {
                int pp_rank = stages == 2 ? p : l.pp_rank;
                test_fill_uniform_f32(part, e->numel, 1000 * (uint64_t)d + 100 * (uint64_t)pp_rank + (hash_string64(e->name) & 0xffff) * 10000,
                                      -1.0f, 1.0f);
                if (d == l.dp_rank && pp_rank == l.pp_rank) memcpy(g + e->offset, part, (size_t)e->numel * sizeof(float));
                for (int64_t k = 0; k < e->numel; k++) stage_sum[k] = p == 0 ? part[k] : stage_sum[k] + part[k];
            }
            for (int64_t k = 0; k < e->numel; k++) want[e->offset + k] = d == 0 ? stage_sum[k] : want[e->offset + k] + stage_sum[k];
        }
        for (int64_t k = 0; k < e->numel; k++) want[e->offset + k] *= (float)(1.0 / 2);
        free(part), free(stage_sum);
    }
    float *skipped = malloc((size_t)t.total * sizeof(float));
    memcpy(skipped, g, (size_t)t.total * sizeof(float));
    DataParallel dp;
    DpConfig cfg = {1e-4, 1, 0, l.pp_rank, 1};
    REQUIRE_OK(dp_init(&dp, &t, &cfg, &dpc, NULL, NULL));
    CHECK_OK(pp_reduce_replicated_grads(&pp, &t, g, 0, 0, t.count, DEV_CPU));
    CHECK_OK(dp_grad_sync_finish(&dp, g));
    CHECK_OK(dp_grad_sync_finish(&dp, skipped));
    int64_t n = dp.own_end - dp.own_begin;
    CHECK_SAME_BITS("PP sum then DP mean (ZeRO-1 shard)", g + dp.own_begin, want + dp.own_begin, n);
    int same = memcmp(skipped + dp.own_begin, want + dp.own_begin, (size_t)n * sizeof(float)) == 0;
    int64_t pp_in_shard = 0;
    for (int i = 0; i < t.count; i++)
        if (t.entries[i].reduce_groups & REDUCE_PP) {
            int64_t lo = t.entries[i].offset > dp.own_begin ? t.entries[i].offset : dp.own_begin;
            int64_t hi = t.entries[i].offset + t.entries[i].numel < dp.own_end ? t.entries[i].offset + t.entries[i].numel : dp.own_end;
            pp_in_shard += hi > lo ? hi - lo : 0;
        }
    CHECK_MSG(!same || pp_in_shard == 0, "skipping the PP sum changed nothing in this shard");
    dp_free(&dp);
    /* dp.c with the PP comm does the same sum itself, once, at the first bucket holding a REDUCE_PP
     * entry (the buckets here are small, so they differ between the stages) */
    float *g2 = malloc((size_t)t.total * sizeof(float));
    for (int i = 0; i < t.count; i++) { /* the unreduced gradients again */
        const ParamEntry *e = &t.entries[i];
        test_fill_uniform_f32(g2 + e->offset, e->numel,
                              100 * (uint64_t)l.pp_rank + 1000 * (uint64_t)l.dp_rank + (hash_string64(e->name) & 0xffff) * 10000,
                              -1.0f, 1.0f);
    }
    REQUIRE_OK(dp_init(&dp, &t, &cfg, &dpc, NULL, &pp));
    CHECK(dp.n_buckets >= 2);
    for (int b = dp.n_buckets - 1; b >= 0; b--) CHECK_OK(dp_grad_bucket_ready(&dp, g2, b));
    CHECK_OK(dp_grad_sync_finish(&dp, g2));
    CHECK_SAME_BITS("dp.c's own PP sum then DP mean", g2 + dp.own_begin, want + dp.own_begin, n);
    dp_free(&dp);
    free(g2);
    /* stages with other replicated entries are refused */
    if (l.pp_rank == 1) param_table_add(&t, INIT_ZERO, 0, 1, (int64_t[]){2}, REDUCE_PP, -1, "fps_embedder.weight");
    CHECK(pp_check_replicated(&pp, &t) == VFM_ERR_INTERNAL);
    free(g), free(want), free(skipped);
    param_table_free(&t);
    comm_free(&pp), comm_free(&dpc);
}

/* The runner's buffers: at most what the schedule keeps in flight, all freed at the end; a stage
 * without a PP comm of the right size is refused. */
TEST(pp_run_buffers) {
    int P = mt_world(), stage = mt_rank(), block_first[MAX_L], head, L = 2 * P;
    ParamTable full;
    toy_table(&full, L, block_first, &head);
    float *values = calloc((size_t)full.total, sizeof(float));
    test_fill_uniform_f32(values, full.total, 3, -0.5f, 0.5f);
    PpBlocks blocks = {block_first, L, head};
    PpStageMap map;
    REQUIRE_OK(pp_stage_map_init(&map, &full, &blocks, P, 1, stage));
    Toy m;
    memset(&m, 0, sizeof m);
    m.t = &map.local, m.P = P, m.V = 1, m.stage = stage, m.L = L;
    m.params = calloc((size_t)map.local.total, sizeof(float));
    m.grads = calloc((size_t)map.local.total, sizeof(float));
    PpSchedule s;
    REQUIRE_OK(pp_schedule_build(&s, P, 2 * P + 1, 1, stage));
    PpStage st = {&m, toy_forward, toy_backward};
    PpRunStats stats;
    CHECK_OK(pp_run(&s, mt_world_comm(), &st, N * D, DT_F32, DEV_CPU, &stats));
    /* in flight on stage p: the inputs of min(P − p, M) micro-batches (none on stage 0), plus during a
     * steady exchange the output being sent and the gradient being received */
    int bound = (stage == 0 ? 0 : P - stage) + 2;
    CHECK_MSG(stats.max_live_buffers <= bound, "stage %d: %d buffers alive at once, bound %d", stage, stats.max_live_buffers,
              bound);
    if (P > 1) CHECK(stats.exchanges > 0);
    pp_schedule_free(&s);
    free(m.params), free(m.grads), free(values);
    pp_stage_map_free(&map);
    param_table_free(&full);
}

/* A stage's table for the norm test: its own entries (a TP-split and a TP-replicated one, sizes by
 * stage) and two REDUCE_PP entries every stage holds (one TP-split, one replicated). */
static void norm_table(ParamTable *t, int stage) {
    param_table_init(t);
    param_table_add(t, INIT_ZERO, 0, 2, (int64_t[]){4 + stage, 3}, 0, 0, "stage%d.split", stage);
    param_table_add(t, INIT_ZERO, 0, 2, (int64_t[]){2, 6}, REDUCE_PP, 0, "cond.split");
    param_table_add(t, INIT_ZERO, 0, 1, (int64_t[]){7 + 3 * stage}, 0, -1, "stage%d.norm", stage);
    param_table_add(t, INIT_ZERO, 0, 1, (int64_t[]){5}, REDUCE_PP, -1, "cond.norm");
}

/* Reduced gradients of (stage, tp rank): TP-split entries differ by TP rank, replicated ones do
 * not; REDUCE_PP entries do not depend on the stage; nothing depends on the DP rank. */
static void norm_grads(const ParamTable *t, int stage, int tp_rank, float *g) {
    for (int i = 0; i < t->count; i++) {
        const ParamEntry *e = &t->entries[i];
        uint64_t seed = (hash_string64(e->name) & 0xffff) * 100 + (e->tp_split_dim >= 0 ? (uint64_t)tp_rank : 50);
        (void)stage;
        test_fill_uniform_f32(g + e->offset, e->numel, seed, -1.0f, 1.0f);
    }
}

/* The global gradient norm under PP (and TP, DP): every stage's own entries once, the entries
 * every stage holds once, TP-split entries over every TP rank — against the double sum over the
 * distinct parameters (within 1e-12), the same bits on every rank, ZeRO-1 = plain DP bitwise. */
TEST(pp_grad_norm_over_stages) {
    REQUIRE_WORLD(4);
    const int layouts[3][2] = {{1, 2}, {2, 2}, {1, 4}}; /* (tp, pp); dp = the rest */
    for (int li = 0; li < 3; li++) {
        int tpn = layouts[li][0], ppn = layouts[li][1];
        ParallelLayout l;
        REQUIRE_OK(layout_init(&l, 4, mt_rank(), tpn, ppn, 1));
        Comm pp, dpc, tp;
        REQUIRE_OK(comm_create_group(&pp, &l, GROUP_PP, COMM_BACKEND_MPI));
        REQUIRE_OK(comm_create_group(&dpc, &l, GROUP_DP_CP, COMM_BACKEND_MPI));
        REQUIRE_OK(comm_create_group(&tp, &l, GROUP_TP, COMM_BACKEND_MPI));
        /* the reference: the distinct parameters of the whole model */
        double want = 0;
        for (int st = 0; st < ppn; st++) {
            ParamTable t;
            norm_table(&t, st);
            float *g = malloc((size_t)t.total * sizeof(float));
            for (int r = 0; r < tpn; r++) {
                norm_grads(&t, st, r, g);
                for (int i = 0; i < t.count; i++) {
                    const ParamEntry *e = &t.entries[i];
                    if ((e->reduce_groups & REDUCE_PP) && st > 0) continue; /* every stage holds it: once */
                    if (e->tp_split_dim < 0 && r > 0) continue;                /* every TP rank holds it: once */
                    for (int64_t k = 0; k < e->numel; k++) want += (double)g[e->offset + k] * g[e->offset + k];
                }
            }
            free(g);
            param_table_free(&t);
        }
        want = sqrt(want);
        ParamTable t;
        norm_table(&t, l.pp_rank);
        float *g = malloc((size_t)t.total * sizeof(float));
        norm_grads(&t, l.pp_rank, l.tp_rank, g);
        double norms[2];
        for (int zero1 = 0; zero1 < 2; zero1++) {
            DataParallel dp;
            DpConfig cfg = {1, zero1, l.tp_rank, l.pp_rank, 1};
            REQUIRE_OK(dp_init(&dp, &t, &cfg, &dpc, &tp, &pp));
            CHECK_OK(dp_grad_norm(&dp, g, &norms[zero1]));
            if (zero1) { /* FSDP's entry point: the shard alone */
                double from_shard;
                CHECK_OK(dp_grad_norm_shard(&dp, g + dp.own_begin, &from_shard));
                CHECK_SAME_BITS("norm from the shard alone", &from_shard, &norms[1], 1);
            }
            dp_free(&dp);
        }
        char what[96];
        snprintf(what, sizeof what, "TP%d × PP%d norm: ZeRO-1 vs plain", tpn, ppn);
        CHECK_SAME_BITS(what, &norms[1], &norms[0], 1);
        CHECK_MSG(fabs(norms[0] - want) <= 1e-12 * want, "TP%d × PP%d: norm %.17g, the distinct parameters give %.17g", tpn,
                  ppn, norms[0], want);
        double all[4];
        CHECK_OK(comm_all_gather(mt_world_comm(), &norms[0], all, 1, DT_F64));
        for (int r = 1; r < 4; r++) CHECK_SAME_BITS("the same norm on every rank", &all[r], &all[0], 1);
        free(g);
        param_table_free(&t);
        comm_free(&pp), comm_free(&dpc), comm_free(&tp);
    }
}
