/* Context-parallel attention against the single-rank op: every rank builds the same whole pack
 * (NaN in every padding row), runs op_attention_forward/backward on it as the reference, takes its
 * chunk and runs cp_attention_forward/backward with CP = the world size. o, lse, dq, dk, dv of
 * its rows must match the reference rows within max|a-b| <= 1e-6·max|ref| + 1e-5·max|ref| (f32;
 * context-parallel.md §7). The pack stresses the split: lengths that are not multiples of CP, a
 * sample that fills at most one chunk (no queries on the other ranks), a one-token sample; GQA
 * and MQA. Modes: p2p at 2, 3 (odd ring) and 4 ranks; a2a at 2, 3 (6 heads) and 4 (kv heads
 * replicated when fewer than CP); a2a+p2p 2×2; all_gather; and the broken variant (one ring step
 * dropped) must fail. Cross-attention keeps the text whole: the local layout gives the reference
 * rows bit for bit. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi_test.h"
#include "ops/ops.h"
#include "parallel/cp_attention.h"

#define MAXN 8

typedef struct {
    int n;
    int32_t cu[MAXN + 1], cu_pad[MAXN + 1];
    int64_t S;
} Pack;

/* Lengths 21, 5, 3, 12, 1 in slots rounded up to a multiple of 4·P (P=4: 32,16,16,16,16 -> chunk
 * lengths 8,4,4,4,4; sample 1 (5 tokens) reaches two ranks, sample 2 (3) and 4 (1) only rank 0). */
static Pack make_pack(int P) {
    static const int lens[] = {21, 5, 3, 12, 1};
    Pack p = {5, {0}, {0}, 0};
    int pad = 4 * P;
    for (int i = 0; i < p.n; i++) {
        p.cu[i + 1] = p.cu[i] + lens[i];
        p.cu_pad[i + 1] = p.cu_pad[i] + (lens[i] + pad - 1) / pad * pad;
    }
    p.S = p.cu_pad[p.n];
    return p;
}

static int real_row(const int32_t *cu, const int32_t *cu_pad, int n, int64_t r) {
    for (int i = 0; i < n; i++)
        if (r >= cu_pad[i] && r < cu_pad[i] + cu[i + 1] - cu[i]) return 1;
    return 0;
}

static float *alloc_rand(int64_t n, uint64_t seed) {
    float *x = malloc((size_t)(n > 0 ? n : 1) * sizeof *x);
    test_fill_uniform_f32(x, n, seed, -1.0f, 1.0f);
    return x;
}

static void nan_padding(float *x, const Pack *p, int64_t row) {
    for (int64_t r = 0; r < p->S; r++)
        if (!real_row(p->cu, p->cu_pad, p->n, r))
            for (int64_t e = 0; e < row; e++) x[r * row + e] = NAN;
}

/* out = chunk `chunk` of whole (the test's own row arithmetic, independent of cp_take_chunk). */
static void extract(float *out, const float *whole, const Pack *p, int P, int chunk, int64_t row) {
    int64_t at = 0;
    for (int i = 0; i < p->n; i++) {
        int64_t c = (p->cu_pad[i + 1] - p->cu_pad[i]) / P;
        memcpy(out + at * row, whole + (p->cu_pad[i] + chunk * c) * row, (size_t)(c * row) * sizeof(float));
        at += c;
    }
}

static double max_abs(const float *x, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++)
        if (fabs(x[i]) > m) m = fabs(x[i]);
    return m;
}

/* 1 when max|got - want| <= (1e-6 + 1e-5)·scale (NaN fails); *err gets the error over scale. */
static int close_to(const float *got, const float *want, int64_t n, double scale, double *err) {
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - (double)want[i]);
        if (e != e) e = INFINITY;
        if (e > worst) worst = e;
    }
    *err = scale > 0 ? worst / scale : worst;
    return worst <= (1e-6 + 1e-5) * scale;
}

typedef struct {
    CpCommType type;
    int H, Hkv, hd, a2a_size, drop;
} Run;

/* Runs one configuration at CP = world size; returns 1 when all five outputs match on this rank
 * (mismatches are reported when `expect_match`). */
static int run_case(const Run *run, int expect_match) {
    int P = mt_world(), r = mt_rank(), H = run->H, Hkv = run->Hkv, hd = run->hd;
    Pack p = make_pack(P);
    int64_t S = p.S, Sl = S / P, qrow = (int64_t)H * hd, krow = (int64_t)Hkv * hd;
    float *q = alloc_rand(S * qrow, 11), *k = alloc_rand(S * krow, 12), *v = alloc_rand(S * krow, 13);
    float *dout = alloc_rand(S * qrow, 14);
    nan_padding(q, &p, qrow), nan_padding(k, &p, krow), nan_padding(v, &p, krow), nan_padding(dout, &p, qrow);
    /* the reference: the whole pack on one rank */
    float *o = malloc((size_t)(S * qrow) * sizeof(float)), *lse = malloc((size_t)(S * H) * sizeof(float));
    float *dq = malloc((size_t)(S * qrow) * sizeof(float)), *dk = malloc((size_t)(S * krow) * sizeof(float));
    float *dv = malloc((size_t)(S * krow) * sizeof(float));
    CpChunks ch;
    int ok = 1;
    if (cp_chunks_init(&ch, p.n, p.cu, p.cu_pad, P, DEV_CPU) != VFM_OK) {
        test_fail(__FILE__, __LINE__, "cp_chunks_init: %s", vfm_last_error());
        return 0;
    }
    VarlenLayout whole = cp_whole_layout(&ch);
    Tensor Q = TF32(q, S, H, hd), K = TF32(k, S, Hkv, hd), V = TF32(v, S, Hkv, hd), DO = TF32(dout, S, H, hd);
    Tensor O = TF32(o, S, H, hd), L = TF32(lse, S, H), DQ = TF32(dq, S, H, hd), DK = TF32(dk, S, Hkv, hd),
           DV = TF32(dv, S, Hkv, hd);
    CHECK_OK(op_attention_forward(&O, &L, &Q, &K, &V, &whole));
    CHECK_OK(op_attention_backward(&DQ, &DK, &DV, &DO, &Q, &K, &V, &O, &L, &whole));
    /* this rank's chunk */
    float *lq = malloc((size_t)(Sl * qrow) * sizeof(float)), *lk = malloc((size_t)(Sl * krow) * sizeof(float));
    float *lv = malloc((size_t)(Sl * krow) * sizeof(float)), *ldo = malloc((size_t)(Sl * qrow) * sizeof(float));
    extract(lq, q, &p, P, r, qrow), extract(lk, k, &p, P, r, krow), extract(lv, v, &p, P, r, krow);
    extract(ldo, dout, &p, P, r, qrow);
    float *want[5], *got[5];
    int64_t rows[5] = {qrow, H, qrow, krow, krow};
    float *ref[5] = {o, lse, dq, dk, dv};
    for (int t = 0; t < 5; t++) {
        want[t] = malloc((size_t)(Sl * rows[t]) * sizeof(float));
        got[t] = malloc((size_t)(Sl * rows[t]) * sizeof(float));
        extract(want[t], ref[t], &p, P, r, rows[t]);
        for (int64_t e = 0; e < Sl * rows[t]; e++) got[t][e] = 7.0f; /* must be overwritten */
    }
    /* the comms of this mode */
    Comm *world = mt_world_comm(), a2a, ring;
    int subgroups = run->type == CP_COMM_A2A_P2P;
    if (subgroups) {
        ParallelLayout lay;
        int members[16];
        CHECK_OK(layout_init(&lay, P, r, 1, 1, P));
        cp_subgroup_members(&lay, run->a2a_size, 0, r, members);
        CHECK_OK(comm_create(&a2a, "cp-a2a", COMM_BACKEND_MPI, members, run->a2a_size));
        cp_subgroup_members(&lay, run->a2a_size, 1, r, members);
        CHECK_OK(comm_create(&ring, "cp-ring", COMM_BACKEND_MPI, members, P / run->a2a_size));
    }
    CpAttention att;
    CHECK_OK(cp_attention_init(&att, run->type, world, subgroups ? &a2a : NULL, subgroups ? &ring : NULL));
    att.test_drop_ring_step = run->drop;
    Tensor lQ = TF32(lq, Sl, H, hd), lK = TF32(lk, Sl, Hkv, hd), lV = TF32(lv, Sl, Hkv, hd), lDO = TF32(ldo, Sl, H, hd);
    Tensor gO = TF32(got[0], Sl, H, hd), gL = TF32(got[1], Sl, H), gDQ = TF32(got[2], Sl, H, hd),
           gDK = TF32(got[3], Sl, Hkv, hd), gDV = TF32(got[4], Sl, Hkv, hd);
    CHECK_OK(cp_attention_forward(&att, &ch, &gO, &gL, &lQ, &lK, &lV));
    CHECK_OK(cp_attention_backward(&att, &ch, &gDQ, &gDK, &gDV, &lDO, &lQ, &lK, &lV, &gO, &gL));
    static const char *names[5] = {"o", "lse", "dq", "dk", "dv"};
    for (int t = 0; t < 5; t++) {
        double err;
        int same = close_to(got[t], want[t], Sl * rows[t], max_abs(ref[t], S * rows[t]), &err);
        if (!same && expect_match)
            test_fail(__FILE__, __LINE__, "%s H%d Hkv%d: rank %d's %s is off by %.3g·max|ref|",
                      cp_comm_type_name(run->type), H, Hkv, r, names[t], err);
        ok &= same;
    }
    if (subgroups) comm_free(&a2a), comm_free(&ring);
    for (int t = 0; t < 5; t++) free(want[t]), free(got[t]);
    free(q), free(k), free(v), free(dout), free(o), free(lse), free(dq), free(dk), free(dv);
    free(lq), free(lk), free(lv), free(ldo);
    cp_chunks_free(&ch);
    return ok;
}

TEST(cp_p2p_ring_matches_single_rank) {
    /* MHA, GQA (2 kv heads), MQA (1): at 2, 3 (odd ring) and 4 ranks, and 1 (no communication) */
    const int kv[3] = {4, 2, 1};
    for (int i = 0; i < 3; i++) run_case(&(Run){CP_COMM_P2P, 4, kv[i], 8, 1, 0}, 1);
}

TEST(cp_a2a_ulysses_matches_single_rank) {
    int P = mt_world();
    if (P == 3) { /* 6 heads over 3 ranks; 3 kv heads (one each) and 1 (replicated to all three) */
        run_case(&(Run){CP_COMM_A2A, 6, 3, 8, 1, 0}, 1);
        run_case(&(Run){CP_COMM_A2A, 6, 1, 8, 1, 0}, 1);
        return;
    }
    /* 4 heads; kv heads 4, 2 (replicated at CP4), 1 (replicated) */
    const int kv[3] = {4, 2, 1};
    for (int i = 0; i < 3; i++) run_case(&(Run){CP_COMM_A2A, 4, kv[i], 8, 1, 0}, 1);
}

TEST(cp_a2a_p2p_hierarchical_2x2_matches_single_rank) {
    REQUIRE_WORLD(4);
    run_case(&(Run){CP_COMM_A2A_P2P, 4, 4, 8, 2, 0}, 1);
    run_case(&(Run){CP_COMM_A2A_P2P, 4, 2, 8, 2, 0}, 1);
    run_case(&(Run){CP_COMM_A2A_P2P, 4, 1, 8, 2, 0}, 1); /* one kv head replicated inside each pair */
}

TEST(cp_all_gather_matches_single_rank) {
    run_case(&(Run){CP_COMM_ALL_GATHER, 4, 2, 8, 1, 0}, 1);
    run_case(&(Run){CP_COMM_ALL_GATHER, 4, 4, 8, 1, 0}, 1);
}

/* One ring step dropped (forward merge and backward contributions): the comparison must fail on
 * some rank. At 4 ranks also through the hierarchical ring (2 groups of 2). */
TEST(cp_broken_ring_is_caught) {
    REQUIRE_WORLD(2, 3, 4);
    int P = mt_world(), flags[2];
    flags[0] = !run_case(&(Run){CP_COMM_P2P, 4, 2, 8, 1, 1}, 0);
    flags[1] = P == 4 ? !run_case(&(Run){CP_COMM_A2A_P2P, 4, 2, 8, 2, 1}, 0) : 1;
    CHECK_OK(comm_all_reduce(mt_world_comm(), flags, 2, DT_I32, COMM_MAX));
    CHECK_MSG(flags[0], "p2p with ring step 1 dropped still matched the single-rank attention");
    CHECK_MSG(flags[1], "a2a+p2p with ring step 1 dropped still matched the single-rank attention");
}

/* Two runs give the same bits (fixed order everywhere). */
TEST(cp_p2p_is_deterministic) {
    REQUIRE_WORLD(2, 3, 4);
    int P = mt_world(), r = mt_rank();
    Pack p = make_pack(P);
    int64_t Sl = p.S / P, row = 2 * 8;
    CpChunks ch;
    REQUIRE_OK(cp_chunks_init(&ch, p.n, p.cu, p.cu_pad, P, DEV_CPU));
    float *q = alloc_rand(Sl * row, 40 + (uint64_t)r), *k = alloc_rand(Sl * row, 50 + (uint64_t)r);
    float *v = alloc_rand(Sl * row, 60 + (uint64_t)r), o[2][64 * 16], l[2][64 * 2];
    REQUIRE(Sl * row <= 64 * 16);
    CpAttention a;
    REQUIRE_OK(cp_attention_init(&a, CP_COMM_P2P, mt_world_comm(), NULL, NULL));
    Tensor Q = TF32(q, Sl, 2, 8), K = TF32(k, Sl, 2, 8), V = TF32(v, Sl, 2, 8);
    for (int t = 0; t < 2; t++) {
        Tensor O = TF32(o[t], Sl, 2, 8), L = TF32(l[t], Sl, 2);
        CHECK_OK(cp_attention_forward(&a, &ch, &O, &L, &Q, &K, &V));
    }
    CHECK_SAME_BITS("o of two runs", o[1], o[0], Sl * row);
    CHECK_SAME_BITS("lse of two runs", l[1], l[0], Sl * 2);
    free(q), free(k), free(v);
    cp_chunks_free(&ch);
}

TEST(cp_config_errors_name_the_key) {
    CHECK(cp_check_config(CP_COMM_A2A, 3, 1, 4, 4) == VFM_ERR_USAGE);
    CHECK_MSG(strstr(vfm_last_error(), "model.cp_comm_type a2a") && strstr(vfm_last_error(), "4 attention heads"), "%s",
              vfm_last_error());
    CHECK(cp_check_config(CP_COMM_A2A, 4, 1, 8, 3) == VFM_ERR_USAGE);
    CHECK_MSG(strstr(vfm_last_error(), "model.num_query_groups"), "%s", vfm_last_error());
    CHECK(cp_check_config(CP_COMM_A2A_P2P, 4, 3, 12, 12) == VFM_ERR_USAGE);
    CHECK_MSG(strstr(vfm_last_error(), "model.hierarchical_context_parallel_sizes"), "%s", vfm_last_error());
    CHECK_OK(cp_check_config(CP_COMM_A2A, 4, 1, 4, 2));
    CHECK_OK(cp_check_config(CP_COMM_A2A_P2P, 4, 2, 2, 1));
    CHECK_OK(cp_check_config(CP_COMM_P2P, 3, 1, 4, 1));
    CpCommType t;
    CHECK(cp_comm_type_parse("a2a+p2p", &t) == VFM_OK && t == CP_COMM_A2A_P2P);
    CHECK(cp_comm_type_parse("ring", &t) == VFM_ERR_USAGE && strstr(vfm_last_error(), "model.cp_comm_type is 'ring'"));
    /* a2a at 3 ranks with 4 heads refuses before any communication */
    if (mt_world() == 3) {
        Pack p = make_pack(3);
        CpChunks ch;
        REQUIRE_OK(cp_chunks_init(&ch, p.n, p.cu, p.cu_pad, 3, DEV_CPU));
        CpAttention a;
        REQUIRE_OK(cp_attention_init(&a, CP_COMM_A2A, mt_world_comm(), NULL, NULL));
        int64_t Sl = ch.rows;
        float *x = calloc((size_t)(Sl * 4 * 8), sizeof(float)), *l = calloc((size_t)(Sl * 4), sizeof(float));
        Tensor X = TF32(x, Sl, 4, 8), L = TF32(l, Sl, 4);
        CHECK(cp_attention_forward(&a, &ch, &X, &L, &X, &X, &X) == VFM_ERR_USAGE);
        free(x), free(l);
        cp_chunks_free(&ch);
    }
}

/* Cross-attention: the text stays whole; the local layout of the chunk's queries reproduces the
 * reference rows of o, lse and dq bit for bit, and the ranks' dk, dv add up to the whole ones. */
TEST(cp_cross_attention_local_layout) {
    int P = mt_world(), r = mt_rank(), H = 4, hd = 8;
    Pack p = make_pack(P);
    int32_t cu_t[MAXN + 1] = {0, 3, 4, 11, 12, 13}, cu_tp[MAXN + 1] = {0, 4, 8, 16, 20, 24}; /* text 3, 1, 7, 1, 1 */
    int64_t S = p.S, Sl = S / P, T = 24, row = (int64_t)H * hd;
    float *q = alloc_rand(S * row, 21), *k = alloc_rand(T * row, 22), *v = alloc_rand(T * row, 23);
    float *dout = alloc_rand(S * row, 24);
    nan_padding(q, &p, row), nan_padding(dout, &p, row);
    float *o = malloc((size_t)(S * row) * 4), *lse = malloc((size_t)(S * H) * 4), *dq = malloc((size_t)(S * row) * 4);
    float *dk = malloc((size_t)(T * row) * 4), *dv = malloc((size_t)(T * row) * 4);
    VarlenLayout cross = {p.n, TI32(p.cu, p.n + 1), TI32(p.cu_pad, p.n + 1), TI32(cu_t, p.n + 1), TI32(cu_tp, p.n + 1), 21, 7};
    Tensor Q = TF32(q, S, H, hd), K = TF32(k, T, H, hd), V = TF32(v, T, H, hd), DO = TF32(dout, S, H, hd);
    Tensor O = TF32(o, S, H, hd), L = TF32(lse, S, H), DQ = TF32(dq, S, H, hd), DK = TF32(dk, T, H, hd), DV = TF32(dv, T, H, hd);
    REQUIRE_OK(op_attention_forward(&O, &L, &Q, &K, &V, &cross));
    REQUIRE_OK(op_attention_backward(&DQ, &DK, &DV, &DO, &Q, &K, &V, &O, &L, &cross));
    CpChunks ch;
    REQUIRE_OK(cp_chunks_init(&ch, p.n, p.cu, p.cu_pad, P, DEV_CPU));
    VarlenLayout local = cp_cross_layout(&ch, r, &cross);
    float *lq = malloc((size_t)(Sl * row) * 4), *ldo = malloc((size_t)(Sl * row) * 4), *lo = malloc((size_t)(Sl * row) * 4);
    float *ll = malloc((size_t)(Sl * H) * 4), *ldq = malloc((size_t)(Sl * row) * 4);
    float *ldk = malloc((size_t)(T * row) * 4), *ldv = malloc((size_t)(T * row) * 4), *want = malloc((size_t)(Sl * row) * 4);
    extract(lq, q, &p, P, r, row), extract(ldo, dout, &p, P, r, row);
    Tensor lQ = TF32(lq, Sl, H, hd), lDO = TF32(ldo, Sl, H, hd), lO = TF32(lo, Sl, H, hd), lL = TF32(ll, Sl, H),
           lDQ = TF32(ldq, Sl, H, hd), lDK = TF32(ldk, T, H, hd), lDV = TF32(ldv, T, H, hd);
    REQUIRE_OK(op_attention_forward(&lO, &lL, &lQ, &K, &V, &local));
    REQUIRE_OK(op_attention_backward(&lDQ, &lDK, &lDV, &lDO, &lQ, &K, &V, &lO, &lL, &local));
    extract(want, o, &p, P, r, row);
    CHECK_SAME_BITS("cross o rows", lo, want, Sl * row);
    extract(want, dq, &p, P, r, row);
    CHECK_SAME_BITS("cross dq rows", ldq, want, Sl * row);
    extract(want, lse, &p, P, r, H);
    CHECK_SAME_BITS("cross lse rows", ll, want, Sl * H);
    CHECK_OK(comm_all_reduce(mt_world_comm(), ldk, T * row, DT_F32, COMM_SUM_ORDERED));
    CHECK_OK(comm_all_reduce(mt_world_comm(), ldv, T * row, DT_F32, COMM_SUM_ORDERED));
    CHECK_CLOSE_F32("text dk summed over CP", ldk, dk, T * row, 1e-6 * max_abs(dk, T * row), 1e-5);
    CHECK_CLOSE_F32("text dv summed over CP", ldv, dv, T * row, 1e-6 * max_abs(dv, T * row), 1e-5);
    free(q), free(k), free(v), free(dout), free(o), free(lse), free(dq), free(dk), free(dv);
    free(lq), free(ldo), free(lo), free(ll), free(ldq), free(ldk), free(ldv), free(want);
    cp_chunks_free(&ch);
}
