/* Data parallelism: buckets, the gradient mean (= the single-process rank-order mean, bit for
 * bit), TP reduce groups, ZeRO-1 = plain DP bit for bit over several clipped AdamW steps, and
 * optimizer-state shards saved at one DP size and loaded at another. Every expected value is
 * computed on each rank from the data of all ranks (regenerated from seeds). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fileutil.h"
#include "mpi_test.h"
#include "ops/ops.h"
#include "parallel/dp.h"
#include "train/checkpoint.h"

/* 365 elements (odd, not a multiple of 2, 3 or 4), entries of every kind: 2-D with decay, 1-D
 * without, one with REDUCE_TP_HEADS, one with REDUCE_TP_SP, one frozen. */
static void make_table(ParamTable *t) {
    param_table_init(t);
    param_table_add(t, INIT_NORMAL, 0.1f, 2, (int64_t[]){7, 3}, 0, -1, "a.weight");
    param_table_add(t, INIT_ZERO, 0, 1, (int64_t[]){5}, 0, -1, "a.bias");
    param_table_add(t, INIT_ONE, 0, 1, (int64_t[]){13}, REDUCE_TP_HEADS, -1, "norm.weight");
    param_table_add(t, INIT_NORMAL, 0.1f, 2, (int64_t[]){11, 13}, 0, -1, "b.weight");
    int frozen = param_table_add(t, INIT_NORMAL, 0.1f, 2, (int64_t[]){4, 4}, 0, -1, "frozen.weight");
    t->entries[frozen].trainable = 0;
    param_table_add(t, INIT_NORMAL, 0.1f, 3, (int64_t[]){3, 2, 2}, 0, -1, "c.weight");
    param_table_add(t, INIT_ZERO, 0, 1, (int64_t[]){1}, REDUCE_TP_SP, -1, "c.bias");
    param_table_add(t, INIT_NORMAL, 0.1f, 2, (int64_t[]){9, 17}, 0, -1, "d.weight");
    param_table_add(t, INIT_ZERO, 0, 1, (int64_t[]){1}, 0, -1, "e.bias");
}

/* Three elements: with four ranks the last shard is empty. */
static void make_tiny_table(ParamTable *t) {
    param_table_init(t);
    param_table_add(t, INIT_NORMAL, 0.1f, 2, (int64_t[]){1, 2}, 0, -1, "w");
    param_table_add(t, INIT_ZERO, 0, 1, (int64_t[]){1}, 0, -1, "b");
}

static double mb_for(int64_t elements) { return (double)elements * sizeof(float) / 1048576.0; }

/* The reference mean of every rank's gradients: summed in rank order, then × (float)(1/n). */
static void reference_mean(float *out, int64_t total, int n, uint64_t seed, float scale) {
    float *g = malloc((size_t)total * sizeof *g);
    for (int r = 0; r < n; r++) {
        test_fill_uniform_f32(g, total, seed + (uint64_t)r, -scale, scale);
        for (int64_t i = 0; i < total; i++) out[i] = r == 0 ? g[i] : out[i] + g[i];
    }
    if (n > 1)
        for (int64_t i = 0; i < total; i++) out[i] *= (float)(1.0 / n);
    free(g);
}

TEST(dp_shard_ranges) {
    int64_t b, e;
    const int64_t want10[4][2] = {{0, 3}, {3, 6}, {6, 9}, {9, 10}}, want5[4][2] = {{0, 2}, {2, 4}, {4, 5}, {5, 5}};
    for (int j = 0; j < 4; j++) {
        zero_shard_range(10, 4, j, &b, &e);
        CHECK(b == want10[j][0] && e == want10[j][1]);
        zero_shard_range(5, 4, j, &b, &e);
        CHECK(b == want5[j][0] && e == want5[j][1]);
    }
    zero_shard_range(365, 1, 0, &b, &e);
    CHECK(b == 0 && e == 365);
}

TEST(dp_buckets_reverse_table_order) {
    ParamTable t;
    make_table(&t);
    REQUIRE(t.total == 365);
    DataParallel dp;
    DpConfig cfg = {mb_for(150), 0, 0, 0, 1};
    REQUIRE_OK(dp_init(&dp, &t, &cfg, NULL, NULL, NULL));
    /* from the end: e.bias + d.weight = 154 >= 150; c.bias + c.weight + frozen + b.weight = 172;
     * the rest (39) */
    CHECK(dp.n_buckets == 3);
    const int first[3] = {7, 3, 0}, last[3] = {8, 6, 2};
    for (int b = 0; b < dp.n_buckets && b < 3; b++) {
        CHECK_MSG(dp.buckets[b].first_entry == first[b] && dp.buckets[b].last_entry == last[b], "bucket %d: entries %d..%d",
                  b, dp.buckets[b].first_entry, dp.buckets[b].last_entry);
        CHECK(dp.buckets[b].begin == t.entries[first[b]].offset);
        CHECK(dp.buckets[b].end == (b == 0 ? t.total : dp.buckets[b - 1].begin));
    }
    CHECK(dp.buckets[dp.n_buckets - 1].begin == 0);
    for (int i = 0; i < t.count; i++) {
        int b = dp_bucket_of_entry(&dp, i);
        CHECK(b >= 0 && i >= dp.buckets[b].first_entry && i <= dp.buckets[b].last_entry);
    }
    dp_free(&dp);
    /* one element per bucket limit: one bucket per entry, last entry first */
    cfg.bucket_size_mb = 1e-9;
    REQUIRE_OK(dp_init(&dp, &t, &cfg, NULL, NULL, NULL));
    CHECK(dp.n_buckets == t.count);
    for (int b = 0; b < dp.n_buckets; b++) CHECK(dp.buckets[b].first_entry == t.count - 1 - b);
    dp_free(&dp);
    param_table_free(&t);
}

/* Bucketed all-reduce (plain DP) and reduce-scatter (ZeRO-1) against the reference mean, with the
 * buckets marked ready out of order. */
TEST(dp_bucketed_mean_equals_reference_bitwise) {
    ParamTable t;
    make_table(&t);
    int n = mt_world(), r = mt_rank();
    float *want = malloc((size_t)t.total * sizeof *want), *g = malloc((size_t)t.total * sizeof *g);
    float *mine = malloc((size_t)t.total * sizeof *mine);
    reference_mean(want, t.total, n, 40, 1.0f);
    test_fill_uniform_f32(mine, t.total, 40 + (uint64_t)r, -1.0f, 1.0f);
    for (int zero1 = 0; zero1 < 2; zero1++) {
        DataParallel dp;
        DpConfig cfg = {mb_for(20), zero1, 0, 0, 1};
        REQUIRE_OK(dp_init(&dp, &t, &cfg, mt_world_comm(), NULL, NULL));
        REQUIRE(dp.n_buckets >= 4);
        memcpy(g, mine, (size_t)t.total * sizeof *g);
        for (int b = dp.n_buckets - 1; b >= 1; b -= 2) CHECK_OK(dp_grad_bucket_ready(&dp, g, b));
        CHECK(dp.next_bucket == 0); /* bucket 0 is not ready: nothing issued yet */
        CHECK_OK(dp_grad_bucket_ready(&dp, g, 0));
        CHECK_OK(dp_grad_sync_finish(&dp, g));
        if (!zero1) {
            CHECK_SAME_BITS("all-reduced mean", g, want, t.total);
        } else {
            CHECK_SAME_BITS("reduce-scattered shard", g + dp.own_begin, want + dp.own_begin, dp.own_end - dp.own_begin);
            CHECK_SAME_BITS("outside the shard: untouched", g, mine, dp.own_begin);
            CHECK_SAME_BITS("outside the shard: untouched (tail)", g + dp.own_end, mine + dp.own_end, t.total - dp.own_end);
        }
        /* a second step through the same object (ready flags were reset) */
        memcpy(g, mine, (size_t)t.total * sizeof *g);
        CHECK_OK(dp_grad_sync_finish(&dp, g));
        CHECK_SAME_BITS("second step", g + dp.own_begin, want + dp.own_begin, dp.own_end - dp.own_begin);
        dp_free(&dp);
    }
    free(want), free(g), free(mine);
    param_table_free(&t);
}

/* TP = 2: REDUCE_TP_HEADS entries are summed over the TP pair (in TP order) before the DP mean,
 * REDUCE_TP_SP entries too but only under sequence parallelism; other entries are not. */
TEST(dp_reduce_groups_tp) {
    REQUIRE_WORLD(2, 4);
    ParamTable t;
    make_table(&t);
    int world = mt_world(), r = mt_rank();
    ParallelLayout l;
    REQUIRE_OK(layout_init(&l, world, r, 2, 1, 1));
    Comm dpcp, tp;
    REQUIRE_OK(comm_create_group(&dpcp, &l, GROUP_DP_CP, COMM_BACKEND_MPI));
    REQUIRE_OK(comm_create_group(&tp, &l, GROUP_TP, COMM_BACKEND_MPI));
    float *g = malloc((size_t)t.total * sizeof *g), *want = calloc((size_t)t.total, sizeof *want);
    float *x = malloc((size_t)t.total * sizeof *x), *contrib = malloc((size_t)t.total * sizeof *contrib);
    const ParamEntry *heads = &t.entries[param_table_find(&t, "norm.weight")];
    const ParamEntry *tokens = &t.entries[param_table_find(&t, "c.bias")];
    for (int sp = 0; sp < 2; sp++) {
        DataParallel dp;
        DpConfig cfg = {mb_for(100), 0, l.tp_rank, 0, 1};
        REQUIRE_OK(dp_init(&dp, &t, &cfg, &dpcp, &tp, NULL));
        dp_set_sequence_parallel(&dp, sp);
        CHECK(dp_entry_reduces_over_tp(heads, sp) && dp_entry_reduces_over_tp(tokens, sp) == sp);
        test_fill_uniform_f32(g, t.total, 70 + (uint64_t)r, -1.0f, 1.0f);
        for (int d = 0; d < l.dp; d++) {
            for (int tt = 0; tt < 2; tt++) {
                int q = layout_rank_of(&l, d, 0, 0, tt);
                test_fill_uniform_f32(x, t.total, 70 + (uint64_t)q, -1.0f, 1.0f);
                for (int64_t i = 0; i < t.total; i++) {
                    int summed = (i >= heads->offset && i < heads->offset + heads->numel) ||
                                 (sp && i >= tokens->offset && i < tokens->offset + tokens->numel);
                    if (summed) contrib[i] = tt == 0 ? x[i] : contrib[i] + x[i];
                    else if (tt == l.tp_rank) contrib[i] = x[i];
                }
            }
            for (int64_t i = 0; i < t.total; i++) want[i] = d == 0 ? contrib[i] : want[i] + contrib[i];
        }
        if (l.dp > 1)
            for (int64_t i = 0; i < t.total; i++) want[i] *= (float)(1.0 / l.dp);
        CHECK_OK(dp_grad_sync_finish(&dp, g));
        CHECK_SAME_BITS(sp ? "TP sums (heads and SP entries) then DP mean" : "TP sums (heads entries) then DP mean", g,
                        want, t.total);
        dp_free(&dp);
    }
    comm_free(&dpcp);
    comm_free(&tp);
    free(g), free(want), free(x), free(contrib);
    param_table_free(&t);
}

typedef struct {
    DataParallel dp;
    Optimizer opt;
    float *params, *grads;
} Replica;

static vfm_status replica_init(Replica *x, const ParamTable *t, int zero1, const OptimConfig *oc) {
    DpConfig cfg = {mb_for(80), zero1, 0, 0, 1};
    VFM_TRY(dp_init(&x->dp, t, &cfg, mt_world_comm(), NULL, NULL));
    VFM_TRY(dp_optimizer_init(&x->dp, &x->opt, oc));
    x->params = malloc((size_t)t->total * sizeof(float));
    x->grads = malloc((size_t)t->total * sizeof(float));
    test_fill_uniform_f32(x->params, t->total, 3, -0.5f, 0.5f);
    return VFM_OK;
}

static void replica_free(Replica *x) {
    dp_free(&x->dp);
    optimizer_free(&x->opt);
    free(x->params);
    free(x->grads);
}

/* Six AdamW steps, alternating tiny gradients (norm < clip) and large ones (clipped): ZeRO-1 and
 * plain DP give the same norm and parameters, bit for bit, and both equal the one-process
 * Optimizer path fed the reference mean and the shard-ordered norm. */
static void zero1_vs_plain(void (*make)(ParamTable *)) {
    ParamTable t;
    make(&t);
    int n = mt_world(), r = mt_rank();
    OptimConfig oc = {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1, .clip_grad = 1.0,
                    .decay_style = LR_DECAY_CONSTANT};
    Replica plain, zero;
    REQUIRE_OK(replica_init(&plain, &t, 0, &oc));
    REQUIRE_OK(replica_init(&zero, &t, 1, &oc));
    Optimizer ref;
    REQUIRE_OK(optimizer_init(&ref, &oc, &t));
    float *ref_params = malloc((size_t)t.total * sizeof *ref_params), *ref_grads = malloc((size_t)t.total * sizeof *ref_grads);
    float *start = malloc((size_t)t.total * sizeof *start);
    test_fill_uniform_f32(ref_params, t.total, 3, -0.5f, 0.5f);
    memcpy(start, ref_params, (size_t)t.total * sizeof *start);
    int clipped = 0, unclipped = 0;
    for (int step = 0; step < 6; step++) {
        float scale = step % 2 ? 5.0f : 0.002f;
        uint64_t seed = 1000 * (uint64_t)(step + 1);
        test_fill_uniform_f32(plain.grads, t.total, seed + (uint64_t)r, -scale, scale);
        memcpy(zero.grads, plain.grads, (size_t)t.total * sizeof(float));
        CHECK_OK(dp_grad_sync_finish(&plain.dp, plain.grads));
        CHECK_OK(dp_grad_sync_finish(&zero.dp, zero.grads));
        double norm_plain = -1, norm_zero = -2, norm_ref = 0;
        CHECK_OK(dp_grad_norm(&plain.dp, plain.grads, &norm_plain));
        CHECK_OK(dp_grad_norm(&zero.dp, zero.grads, &norm_zero));
        CHECK_SAME_BITS("grad norm, ZeRO-1 vs plain", &norm_zero, &norm_plain, 1);
        /* the reference: mean, then the norm as the shard partials in rank order */
        reference_mean(ref_grads, t.total, n, seed, scale);
        for (int j = 0; j < n; j++) {
            int64_t b, e;
            double part = 0;
            zero_shard_range(t.total, n, j, &b, &e);
            Tensor view = TF32(ref_grads + b, e - b);
            if (e > b) CHECK_OK(op_sum_squares(&part, &view));
            norm_ref += part;
        }
        norm_ref = sqrt(norm_ref);
        CHECK_SAME_BITS("grad norm vs reference", &norm_plain, &norm_ref, 1);
        if (n == 1) {
            double one = 0;
            CHECK_OK(grad_global_norm(ref_grads, t.total, &one));
            CHECK_SAME_BITS("grad norm at DP=1 vs grad_global_norm", &norm_plain, &one, 1);
        }
        double clip = clip_scale(&oc, norm_plain), lr = lr_at_step(&oc, step);
        if (clip < 1.0) clipped++;
        else unclipped++;
        CHECK_OK(dp_optimizer_step(&plain.dp, &plain.opt, plain.params, plain.grads, lr, clip));
        CHECK_OK(dp_optimizer_step(&zero.dp, &zero.opt, zero.params, zero.grads, lr, clip));
        CHECK_OK(optimizer_step(&ref, ref_params, ref_grads, lr, clip));
        char what[64];
        snprintf(what, sizeof what, "params after step %d, ZeRO-1 vs plain", step);
        CHECK_SAME_BITS(what, zero.params, plain.params, t.total);
        snprintf(what, sizeof what, "params after step %d, plain vs Optimizer", step);
        CHECK_SAME_BITS(what, plain.params, ref_params, t.total);
        int64_t len = zero.dp.own_end - zero.dp.own_begin;
        CHECK_SAME_BITS("ZeRO-1 m shard", zero.opt.m, plain.opt.m + zero.dp.own_begin, len);
        CHECK_SAME_BITS("ZeRO-1 v shard", zero.opt.v, plain.opt.v + zero.dp.own_begin, len);
    }
    CHECK(clipped == 3 && unclipped == 3);
    CHECK(zero.opt.step == 6 && plain.opt.step == 6);
    /* the update did something, except to the frozen entry */
    int changed = 0;
    for (int64_t i = 0; i < t.total; i++) changed += plain.params[i] != start[i];
    int fz = param_table_find(&t, "frozen.weight");
    if (fz >= 0) {
        const ParamEntry *e = &t.entries[fz];
        CHECK_SAME_BITS("frozen entry", plain.params + e->offset, start + e->offset, e->numel);
        CHECK_MSG(changed == t.total - e->numel, "%d of %lld changed", changed, (long long)t.total);
    } else {
        CHECK(changed == t.total);
    }
    replica_free(&plain);
    replica_free(&zero);
    optimizer_free(&ref);
    free(ref_params), free(ref_grads), free(start);
    param_table_free(&t);
}

TEST(dp_zero1_equals_plain_dp_bitwise) { zero1_vs_plain(make_table); }
/* three elements: at DP=4 one shard is empty */
TEST(dp_zero1_equals_plain_dp_tiny_table) { zero1_vs_plain(make_tiny_table); }

TEST(dp_mean_of_metrics) {
    int n = mt_world(), r = mt_rank();
    DataParallel dp;
    ParamTable t;
    make_tiny_table(&t);
    DpConfig cfg = {1, 0, 0, 0, 1};
    REQUIRE_OK(dp_init(&dp, &t, &cfg, mt_world_comm(), NULL, NULL));
    double v[2] = {0.1 * (r + 1) + 1e-9 * r, 1000.0 + r}, want[2] = {0, 0};
    for (int j = 0; j < n; j++) {
        want[0] += 0.1 * (j + 1) + 1e-9 * j;
        want[1] += 1000.0 + j;
    }
    want[0] /= n;
    want[1] /= n;
    CHECK_OK(dp_mean_f64(&dp, v, 2));
    CHECK_SAME_BITS("metric means", v, want, 2);
    dp_free(&dp);
    param_table_free(&t);
}

/* ---- optimizer-state shards ------------------------------------------------------------- */

static float m_at(int64_t i) { return 0.001f * (float)(i % 97) - 0.03f; }
static float v_at(int64_t i) { return 1e-4f * (float)(1 + i % 89); }

/* A DP group of the first `size` world ranks (others get nothing and return 0). */
static int sub_comm(Comm *c, int size) {
    if (mt_rank() >= size) return 0;
    int m[64];
    for (int j = 0; j < size; j++) m[j] = j;
    char name[16];
    snprintf(name, sizeof name, "dp%d", size);
    return comm_create(c, name, COMM_BACKEND_MPI, m, size) == VFM_OK ? 1 : -1;
}

static void save_at(const ParamTable *t, const char *dir, int size, int zero1) {
    Comm c;
    int in = sub_comm(&c, size);
    CHECK(in >= 0);
    if (in == 1) {
        DataParallel dp;
        Optimizer o;
        DpConfig cfg = {1, zero1, 0, 0, 1};
        CHECK_OK(dp_init(&dp, t, &cfg, &c, NULL, NULL));
        CHECK_OK(dp_optimizer_init(&dp, &o, &(OptimConfig){.lr = 1}));
        int64_t lo = zero1 ? dp.own_begin : 0, hi = zero1 ? dp.own_end : t->total;
        for (int64_t i = lo; i < hi; i++) o.m[i - lo] = m_at(i), o.v[i - lo] = v_at(i);
        o.step = 17;
        CHECK_OK(dp_optim_save(&dp, &o, dir, mt_rank()));
        optimizer_free(&o);
        dp_free(&dp);
        comm_free(&c);
    }
    CHECK_OK(comm_barrier(mt_world_comm()));
}

static void load_at(const ParamTable *t, const char *dir, int size, int zero1, const char *what) {
    Comm c;
    int in = sub_comm(&c, size);
    CHECK(in >= 0);
    if (in == 1) {
        DataParallel dp;
        Optimizer o;
        DpConfig cfg = {1, zero1, 0, 0, 1};
        CHECK_OK(dp_init(&dp, t, &cfg, &c, NULL, NULL));
        CHECK_OK(dp_optimizer_init(&dp, &o, &(OptimConfig){.lr = 1}));
        CHECK_OK(dp_optim_load(&dp, &o, dir));
        int64_t lo = zero1 ? dp.own_begin : 0, hi = zero1 ? dp.own_end : t->total;
        float *wm = malloc((size_t)(hi - lo + 1) * sizeof *wm), *wv = malloc((size_t)(hi - lo + 1) * sizeof *wv);
        for (int64_t i = lo; i < hi; i++) wm[i - lo] = m_at(i), wv[i - lo] = v_at(i);
        char label[160];
        snprintf(label, sizeof label, "%s: m at DP=%d%s", what, size, zero1 ? " (ZeRO-1)" : "");
        CHECK_SAME_BITS(label, o.m, wm, hi - lo);
        snprintf(label, sizeof label, "%s: v at DP=%d%s", what, size, zero1 ? " (ZeRO-1)" : "");
        CHECK_SAME_BITS(label, o.v, wv, hi - lo);
        free(wm), free(wv);
        optimizer_free(&o);
        dp_free(&dp);
        comm_free(&c);
    }
    CHECK_OK(comm_barrier(mt_world_comm()));
}

TEST(dp_optimizer_state_reshards) {
    ParamTable t;
    make_table(&t);
    int n = mt_world();
    char a[1200], b[1200];
    snprintf(a, sizeof a, "%s/saved_at_%d", test_tmpdir(), n);
    snprintf(b, sizeof b, "%s/saved_plain_at_1", test_tmpdir());
    if (mt_rank() == 0) {
        CHECK_OK(mkdir_p(a));
        CHECK_OK(mkdir_p(b));
    }
    CHECK_OK(comm_barrier(mt_world_comm()));
    save_at(&t, a, n, 1);  /* ZeRO-1 shards of the whole world */
    for (int size = 1; size <= n; size++)
        for (int zero1 = 0; zero1 < 2; zero1++) load_at(&t, a, size, zero1, "saved at world size");
    save_at(&t, b, 1, 0);  /* one plain rank: a single shard */
    for (int zero1 = 0; zero1 < 2; zero1++) load_at(&t, b, n, zero1, "saved at DP=1");
    if (n >= 3) {
        char c[1200];
        snprintf(c, sizeof c, "%s/saved_plain_at_2", test_tmpdir());
        if (mt_rank() == 0) CHECK_OK(mkdir_p(c));
        CHECK_OK(comm_barrier(mt_world_comm()));
        save_at(&t, c, 2, 0); /* plain DP writes the shard cut too */
        load_at(&t, c, n, 1, "saved plain at DP=2");
        load_at(&t, c, 3, 1, "saved plain at DP=2");
    }
    /* a missing shard and another model are named */
    if (n >= 2) {
        if (mt_rank() == 0) {
            char from[1300], to[1300];
            snprintf(from, sizeof from, "%s/optim.1.safetensors", a);
            snprintf(to, sizeof to, "%s/optim.1.safetensors.gone", a);
            CHECK(rename(from, to) == 0);
        }
        CHECK_OK(comm_barrier(mt_world_comm()));
        DataParallel dp;
        Optimizer o;
        DpConfig cfg = {1, 1, 0, 0, 1};
        REQUIRE_OK(dp_init(&dp, &t, &cfg, mt_world_comm(), NULL, NULL));
        REQUIRE_OK(dp_optimizer_init(&dp, &o, &(OptimConfig){.lr = 1}));
        char want[64];
        snprintf(want, sizeof want, "optimizer shard 1 of %d is missing", n);
        CHECK(dp_optim_load(&dp, &o, a) == VFM_ERR_FORMAT);
        CHECK_MSG(strstr(vfm_last_error(), want), "%s", vfm_last_error());
        optimizer_free(&o);
        dp_free(&dp);
    }
    ParamTable other;
    make_table(&other);
    param_table_add(&other, INIT_ZERO, 0, 1, (int64_t[]){2}, 0, -1, "extra.bias");
    DataParallel dp;
    Optimizer o;
    DpConfig cfg = {1, 0, 0, 0, 1};
    REQUIRE_OK(dp_init(&dp, &other, &cfg, NULL, NULL, NULL));
    REQUIRE_OK(dp_optimizer_init(&dp, &o, &(OptimConfig){.lr = 1}));
    CHECK(dp_optim_load(&dp, &o, b) == VFM_ERR_FORMAT);
    CHECK_MSG(strstr(vfm_last_error(), "another model"), "%s", vfm_last_error());
    optimizer_free(&o);
    dp_free(&dp);
    param_table_free(&other);
    param_table_free(&t);
    CHECK_OK(comm_barrier(mt_world_comm()));
}

TEST(dp_without_comms_is_the_optimizer) {
    ParamTable t;
    make_table(&t);
    OptimConfig oc = {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.05, .clip_grad = 0.5,
                      .decay_style = LR_DECAY_CONSTANT};
    DataParallel dp;
    DpConfig cfg = {mb_for(50), 1, 0, 0, 1};
    REQUIRE_OK(dp_init(&dp, &t, &cfg, NULL, NULL, NULL));
    CHECK(dp.own_begin == 0 && dp.own_end == t.total);
    Optimizer a, b;
    REQUIRE_OK(dp_optimizer_init(&dp, &a, &oc));
    REQUIRE_OK(optimizer_init(&b, &oc, &t));
    float *pa = malloc((size_t)t.total * sizeof *pa), *pb = malloc((size_t)t.total * sizeof *pb);
    float *g = malloc((size_t)t.total * sizeof *g), *g0 = malloc((size_t)t.total * sizeof *g0);
    test_fill_uniform_f32(pa, t.total, 5, -1, 1);
    memcpy(pb, pa, (size_t)t.total * sizeof *pa);
    for (int step = 0; step < 3; step++) {
        test_fill_uniform_f32(g, t.total, 60 + (uint64_t)step, -2, 2);
        memcpy(g0, g, (size_t)t.total * sizeof *g);
        CHECK_OK(dp_grad_bucket_ready(&dp, g, 0));
        CHECK_OK(dp_grad_sync_finish(&dp, g));
        CHECK_SAME_BITS("gradients untouched", g, g0, t.total);
        double na = 0, nb = 0;
        CHECK_OK(dp_grad_norm(&dp, g, &na));
        CHECK_OK(grad_global_norm(g0, t.total, &nb));
        CHECK_SAME_BITS("norm", &na, &nb, 1);
        CHECK(clip_scale(&oc, na) < 1.0);
        CHECK_OK(dp_optimizer_step(&dp, &a, pa, g, 1e-2, clip_scale(&oc, na)));
        CHECK_OK(optimizer_step(&b, pb, g0, 1e-2, clip_scale(&oc, nb)));
        CHECK_SAME_BITS("params", pa, pb, t.total);
    }
    free(pa), free(pb), free(g), free(g0);
    optimizer_free(&a);
    optimizer_free(&b);
    dp_free(&dp);
    param_table_free(&t);
}
