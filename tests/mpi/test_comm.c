/* Collectives of the MPI backend over all ranks of the job, with exact expected values: every
 * value is an integer small enough to be exact in f32, so SUM, MAX and the ordered sum must all
 * hit it. The ordered sum is then checked bit for bit on data where the order matters. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mpi_test.h"
#include "parallel/comm_internal.h"

static const DType k_types[] = {DT_F32, DT_F64, DT_I32, DT_I64};

static void put(void *buf, DType dt, int64_t i, double v) {
    switch (dt) {
    case DT_F32: ((float *)buf)[i] = (float)v; break;
    case DT_F64: ((double *)buf)[i] = v; break;
    case DT_I32: ((int32_t *)buf)[i] = (int32_t)v; break;
    default: ((int64_t *)buf)[i] = (int64_t)v; break;
    }
}

static double get(const void *buf, DType dt, int64_t i) {
    switch (dt) {
    case DT_F32: return ((const float *)buf)[i];
    case DT_F64: return ((const double *)buf)[i];
    case DT_I32: return ((const int32_t *)buf)[i];
    default: return (double)((const int64_t *)buf)[i];
    }
}

static int expect(const char *what, DType dt, const void *buf, int64_t n, double (*want)(int64_t, void *), void *ctx) {
    for (int64_t i = 0; i < n; i++)
        if (get(buf, dt, i) != want(i, ctx)) {
            test_fail(__FILE__, __LINE__, "%s (%s): element %lld is %.17g, expected %.17g", what, dtype_name(dt),
                      (long long)i, get(buf, dt, i), want(i, ctx));
            return 0;
        }
    return 1;
}

typedef struct {
    int n, me;
    CommOp op;
} Ctx;

/* all_reduce: rank r holds (r+1)(i+1) */
static double want_all_reduce(int64_t i, void *p) {
    Ctx *c = p;
    return c->op == COMM_MAX ? (double)c->n * (i + 1) : (double)(i + 1) * c->n * (c->n + 1) / 2;
}

TEST(comm_all_reduce_values) {
    Comm *w = mt_world_comm();
    int n = mt_world(), r = mt_rank();
    const int64_t counts[] = {1, 37, 3001}; /* 3001 > the all-gather limit: the all-to-all path */
    void *buf = malloc(3001 * 8);
    for (size_t t = 0; t < 4; t++)
        for (int op = 0; op < 3; op++)
            for (int k = 0; k < 3; k++) {
                for (int64_t i = 0; i < counts[k]; i++) put(buf, k_types[t], i, (double)(r + 1) * (i + 1));
                CHECK_OK(comm_all_reduce(w, buf, counts[k], k_types[t], (CommOp)op));
                Ctx c = {n, r, (CommOp)op};
                char what[64];
                snprintf(what, sizeof what, "all_reduce op %d count %lld", op, (long long)counts[k]);
                expect(what, k_types[t], buf, counts[k], want_all_reduce, &c);
            }
    free(buf);
}

/* reduce_scatter: rank r's block j element i is r + 10j + 100i; rank me receives block me */
static double want_reduce_scatter(int64_t i, void *p) {
    Ctx *c = p;
    if (c->op == COMM_MAX) return (c->n - 1) + 10.0 * c->me + 100.0 * i;
    return c->n * (c->n - 1) / 2.0 + c->n * (10.0 * c->me + 100.0 * i);
}

TEST(comm_reduce_scatter_values) {
    Comm *w = mt_world_comm();
    int n = mt_world(), r = mt_rank();
    const int64_t count = 29;
    void *send = malloc((size_t)n * count * 8), *recv = malloc(count * 8);
    for (size_t t = 0; t < 4; t++)
        for (int op = 0; op < 3; op++) {
            for (int j = 0; j < n; j++)
                for (int64_t i = 0; i < count; i++) put(send, k_types[t], j * count + i, r + 10.0 * j + 100.0 * i);
            CHECK_OK(comm_reduce_scatter(w, send, recv, count, k_types[t], (CommOp)op));
            Ctx c = {n, r, (CommOp)op};
            expect("reduce_scatter", k_types[t], recv, count, want_reduce_scatter, &c);
            /* in place: the result lands inside the send buffer */
            CHECK_OK(comm_reduce_scatter(w, send, (char *)send + (size_t)r * count * dtype_size(k_types[t]), count,
                                         k_types[t], (CommOp)op));
            expect("reduce_scatter in place", k_types[t], (char *)send + (size_t)r * count * dtype_size(k_types[t]),
                   count, want_reduce_scatter, &c);
        }
    free(send);
    free(recv);
}

/* reduce_scatter_v: piece j has (3j) % 4 elements (some empty); element i of piece j is r + j + i */
TEST(comm_reduce_scatter_v_values) {
    Comm *w = mt_world_comm();
    int n = mt_world(), r = mt_rank();
    int64_t *counts = malloc((size_t)n * sizeof *counts), total = 0;
    for (int j = 0; j < n; j++) total += counts[j] = (3 * j) % 4;
    float *send = malloc((size_t)(total + 1) * sizeof *send), recv[4];
    for (int op = 0; op < 3; op++) {
        for (int j = 0, at = 0; j < n; j++)
            for (int64_t i = 0; i < counts[j]; i++) send[at++] = (float)(r + j + i);
        CHECK_OK(comm_reduce_scatter_v(w, send, recv, counts, DT_F32, (CommOp)op));
        for (int64_t i = 0; i < counts[r]; i++) {
            double want = op == COMM_MAX ? (n - 1) + r + i : n * (n - 1) / 2.0 + n * (double)(r + i);
            CHECK_MSG(recv[i] == want, "op %d element %lld: %g, expected %g", op, (long long)i, recv[i], want);
        }
    }
    free(counts);
    free(send);
}

TEST(comm_all_gather_values) {
    Comm *w = mt_world_comm();
    int n = mt_world(), r = mt_rank();
    for (size_t t = 0; t < 4; t++) {
        DType dt = k_types[t];
        size_t es = dtype_size(dt);
        char *send = malloc(5 * es), *recv = malloc((size_t)n * 5 * es);
        for (int i = 0; i < 5; i++) put(send, dt, i, r * 100.0 + i);
        CHECK_OK(comm_all_gather(w, send, recv, 5, dt));
        for (int j = 0; j < n; j++)
            for (int i = 0; i < 5; i++) CHECK(get(recv, dt, j * 5 + i) == j * 100.0 + i);
        memset(recv, 0, (size_t)n * 5 * es);
        for (int i = 0; i < 5; i++) put(recv, dt, r * 5 + i, r * 100.0 + i);
        CHECK_OK(comm_all_gather(w, recv + (size_t)r * 5 * es, recv, 5, dt)); /* in place */
        for (int j = 0; j < n; j++)
            for (int i = 0; i < 5; i++) CHECK(get(recv, dt, j * 5 + i) == j * 100.0 + i);
        free(send);
        free(recv);
    }
    /* unequal pieces: rank j contributes j+1 elements (j, j, ...) */
    int64_t *counts = malloc((size_t)n * sizeof *counts), total = 0, at = 0;
    for (int j = 0; j < n; j++) total += counts[j] = j + 1;
    double *all = calloc((size_t)total, sizeof *all), mine[64];
    for (int j = 0; j < r; j++) at += counts[j];
    for (int i = 0; i <= r; i++) mine[i] = all[at + i] = r;
    CHECK_OK(comm_all_gather_v(w, mine, all, counts, DT_F64));
    for (int j = 0, k = 0; j < n; j++)
        for (int i = 0; i <= j; i++, k++) CHECK(all[k] == j);
    memset(all, 0, (size_t)total * sizeof *all);
    for (int i = 0; i <= r; i++) all[at + i] = r;
    CHECK_OK(comm_all_gather_v(w, all + at, all, counts, DT_F64)); /* in place */
    for (int j = 0, k = 0; j < n; j++)
        for (int i = 0; i <= j; i++, k++) CHECK(all[k] == j);
    free(counts);
    free(all);
}

TEST(comm_broadcast_values) {
    Comm *w = mt_world_comm();
    int n = mt_world(), r = mt_rank(), root = n - 1;
    double x[7];
    uint16_t h[9];
    for (int i = 0; i < 7; i++) x[i] = r == root ? 0.5 + i : -1;
    for (int i = 0; i < 9; i++) h[i] = (uint16_t)(r == root ? 1000 + i : 0);
    CHECK_OK(comm_broadcast(w, x, 7, DT_F64, root));
    CHECK_OK(comm_broadcast(w, h, 9, DT_BF16, root));
    for (int i = 0; i < 7; i++) CHECK(x[i] == 0.5 + i);
    for (int i = 0; i < 9; i++) CHECK(h[i] == 1000 + i);
}

TEST(comm_send_recv_ring) {
    REQUIRE_WORLD(2, 3, 4, 5, 6, 7, 8);
    Comm *w = mt_world_comm();
    int n = mt_world(), r = mt_rank(), next = (r + 1) % n, prev = (r + n - 1) % n;
    int64_t out[3] = {r, 10 * r, 100 * r}, in[3] = {-1, -1, -1};
    if (r % 2 == 0) {
        CHECK_OK(comm_send(w, out, 3, DT_I64, next));
        CHECK_OK(comm_recv(w, in, 3, DT_I64, prev));
    } else {
        CHECK_OK(comm_recv(w, in, 3, DT_I64, prev));
        CHECK_OK(comm_send(w, out, 3, DT_I64, next));
    }
    CHECK(in[0] == prev && in[1] == 10 * prev && in[2] == 100 * prev);
}

TEST(comm_all_to_all_values) {
    Comm *w = mt_world_comm();
    int n = mt_world(), r = mt_rank();
    const int count = 4;
    int32_t *send = malloc((size_t)n * count * 4), *recv = malloc((size_t)n * count * 4);
    for (int j = 0; j < n; j++)
        for (int i = 0; i < count; i++) send[j * count + i] = 1000 * r + 10 * j + i;
    CHECK_OK(comm_all_to_all(w, send, recv, count, DT_I32));
    for (int j = 0; j < n; j++)
        for (int i = 0; i < count; i++) CHECK(recv[j * count + i] == 1000 * j + 10 * r + i);
    /* v form: rank s sends (s + d) % 3 elements to rank d */
    int64_t sc[64], sd[64], rc[64], rd[64], at = 0, rat = 0;
    for (int j = 0; j < n; j++) {
        sc[j] = (r + j) % 3, sd[j] = at, at += sc[j];
        rc[j] = (j + r) % 3, rd[j] = rat, rat += rc[j];
    }
    for (int j = 0; j < n; j++)
        for (int i = 0; i < sc[j]; i++) send[sd[j] + i] = 1000 * r + 10 * j + i;
    CHECK_OK(comm_all_to_all_v(w, send, sc, sd, recv, rc, rd, DT_I32));
    for (int j = 0; j < n; j++)
        for (int i = 0; i < rc[j]; i++) CHECK(recv[rd[j] + i] == 1000 * j + 10 * r + i);
    free(send);
    free(recv);
}

/* Rank r arrives r·40 ms late and leaves a marker; after the barrier every marker exists. */
TEST(comm_barrier_waits_for_everyone) {
    Comm *w = mt_world_comm();
    int n = mt_world(), r = mt_rank();
    char path[1200];
    usleep((useconds_t)r * 40000);
    snprintf(path, sizeof path, "%s/marker.%d", test_tmpdir(), r);
    FILE *f = fopen(path, "w");
    REQUIRE(f);
    fclose(f);
    CHECK_OK(comm_barrier(w));
    for (int j = 0; j < n; j++) {
        struct stat st;
        snprintf(path, sizeof path, "%s/marker.%d", test_tmpdir(), j);
        CHECK_MSG(stat(path, &st) == 0, "marker of rank %d missing after the barrier", j);
    }
    CHECK_OK(comm_barrier(w)); /* nobody leaves the test (and its directory) early */
}

/* Values spanning 16 binades with mixed signs: float addition order changes the result. */
static void order_sensitive(float *x, int64_t n, int rank) {
    test_fill_uniform_f32(x, n, 500 + (uint64_t)rank, -1.0f, 1.0f);
    for (int64_t i = 0; i < n; i++) x[i] *= (float)(1 << ((i + 5 * rank) % 16));
}

TEST(comm_ordered_sum_is_rank_order_bitwise) {
    Comm *w = mt_world_comm();
    int n = mt_world(), r = mt_rank();
    const int64_t sizes[] = {300, 5000}; /* the all-gather path and the all-to-all path */
    for (int k = 0; k < 2; k++) {
        int64_t count = sizes[k];
        float *all = malloc((size_t)n * count * sizeof *all), *want = malloc(count * sizeof *want);
        float *reverse = malloc(count * sizeof *reverse), *got = malloc(count * sizeof *got);
        double *got64 = malloc(count * sizeof *got64), *want64 = malloc(count * sizeof *want64);
        for (int j = 0; j < n; j++) order_sensitive(all + (size_t)j * count, count, j);
        for (int64_t i = 0; i < count; i++) {
            float acc = all[i], rev = all[(size_t)(n - 1) * count + i];
            double acc64 = all[i];
            for (int j = 1; j < n; j++) {
                acc += all[(size_t)j * count + i];
                rev += all[(size_t)(n - 1 - j) * count + i];
                acc64 += (double)all[(size_t)j * count + i] * (1.0 + 1e-9 * j);
            }
            want[i] = acc;
            reverse[i] = rev;
            want64[i] = acc64;
        }
        memcpy(got, all + (size_t)r * count, count * sizeof *got);
        for (int64_t i = 0; i < count; i++) got64[i] = (double)got[i] * (1.0 + 1e-9 * r);
        CHECK_OK(comm_all_reduce(w, got, count, DT_F32, COMM_SUM_ORDERED));
        CHECK_OK(comm_all_reduce(w, got64, count, DT_F64, COMM_SUM_ORDERED));
        CHECK_SAME_BITS("ordered f32 sum", got, want, count);
        CHECK_SAME_BITS("ordered f64 sum", got64, want64, count);
        if (n >= 3) /* with two ranks a + b = b + a: the order cannot show */
            CHECK_MSG(memcmp(want, reverse, count * sizeof *want) != 0, "the test data does not depend on the order");
        /* the same bits on every rank: rank 0's result broadcast and compared */
        memcpy(reverse, got, count * sizeof *got);
        CHECK_OK(comm_broadcast(w, reverse, count, DT_F32, 0));
        CHECK_SAME_BITS("rank 0's result", got, reverse, count);
        free(all), free(want), free(reverse), free(got), free(got64), free(want64);
    }
}

/* ZeRO-1 relies on this: the ordered reduce-scatter is the ordered all-reduce restricted. */
TEST(comm_ordered_reduce_scatter_is_all_reduce_restricted) {
    Comm *w = mt_world_comm();
    int n = mt_world(), r = mt_rank();
    const int64_t count = 1111;
    float *x = malloc((size_t)n * count * sizeof *x), *sum = malloc((size_t)n * count * sizeof *x), part[1111];
    order_sensitive(x, n * count, r);
    memcpy(sum, x, (size_t)n * count * sizeof *x);
    CHECK_OK(comm_all_reduce(w, sum, n * count, DT_F32, COMM_SUM_ORDERED));
    CHECK_OK(comm_reduce_scatter(w, x, part, count, DT_F32, COMM_SUM_ORDERED));
    CHECK_SAME_BITS("reduce_scatter vs all_reduce", part, sum + (size_t)r * count, count);
    /* unequal pieces */
    int64_t counts[64], at = 0;
    for (int j = 0; j < n; j++) counts[j] = (j * 389) % count;
    for (int j = 0; j < r; j++) at += counts[j];
    CHECK_OK(comm_reduce_scatter_v(w, x, part, counts, DT_F32, COMM_SUM_ORDERED));
    CHECK_SAME_BITS("reduce_scatter_v vs all_reduce", part, sum + at, counts[r]);
    free(x);
    free(sum);
}

/* bf16 (TP's partial sums of bf16 activations): COMM_SUM_ORDERED adds the ranks' values in rank
 * order, each addition rounded to bf16 (comm_sum_rows_ordered), over MPI as over NCCL; the
 * reduce-scatter is the all-reduce restricted. MPI's own bf16 reductions do not exist: refused. */
TEST(comm_ordered_sum_bf16) {
    Comm *w = mt_world_comm();
    int n = mt_world(), r = mt_rank();
    const int64_t count = 2000; /* past ORDERED_GATHER_MAX: the all-to-all path */
    float *f = malloc((size_t)n * count * sizeof *f);
    uint16_t *all = malloc((size_t)n * count * sizeof *all), *want = malloc(count * sizeof *want);
    uint16_t *got = malloc((size_t)n * count * sizeof *got), *part = malloc(count * sizeof *part);
    REQUIRE(f && all && want && got && part);
    for (int j = 0; j < n; j++) order_sensitive(f + (size_t)j * count, count, j);
    for (int64_t i = 0; i < n * count; i++) all[i] = bf16_from_f32(f[i]);
    REQUIRE_OK(comm_sum_rows_ordered(want, all, n, count, DT_BF16));
    memcpy(got, all + (size_t)r * count, count * sizeof *got);
    CHECK_OK(comm_all_reduce(w, got, count, DT_BF16, COMM_SUM_ORDERED));
    CHECK_SAME_BITS("ordered bf16 sum", got, want, count);
    for (int64_t i = 0; i < 4 && n >= 2 && n <= 3; i++) { /* (a + b) rounded, then + c rounded: by hand */
        uint16_t a = all[i], b = all[count + i];
        uint16_t ab = bf16_from_f32(f32_from_bf16(a) + f32_from_bf16(b));
        uint16_t e = n >= 3 ? bf16_from_f32(f32_from_bf16(ab) + f32_from_bf16(all[2 * count + i])) : ab;
        CHECK_MSG(want[i] == e, "element %lld: 0x%04x, by hand 0x%04x", (long long)i, want[i], e);
    }
    /* the reduce-scatter: this rank's piece of a buffer of n pieces */
    uint16_t *x = malloc((size_t)n * count * sizeof *x), *sum = malloc((size_t)n * count * sizeof *sum);
    REQUIRE(x && sum);
    for (int64_t i = 0; i < n * count; i++) x[i] = all[(i + (int64_t)r * 7) % (n * count)];
    memcpy(sum, x, (size_t)n * count * sizeof *x);
    CHECK_OK(comm_all_reduce(w, sum, n * count, DT_BF16, COMM_SUM_ORDERED));
    CHECK_OK(comm_reduce_scatter(w, x, part, count / n, DT_BF16, COMM_SUM_ORDERED));
    CHECK_SAME_BITS("bf16 reduce_scatter vs all_reduce", part, sum + (size_t)r * (count / n), count / n);
    CHECK(comm_reduce_scatter(w, x, part, count / n, DT_BF16, COMM_SUM) == VFM_ERR_UNSUPPORTED);
    vfm_clear_error();
    free(f), free(all), free(want), free(got), free(part), free(x), free(sum);
}

TEST(comm_errors_name_op_and_group) {
    Comm *w = mt_world_comm();
    int n = mt_world();
    uint16_t h[4] = {0};
    float x[4] = {0};
    CHECK(comm_broadcast(w, x, 4, DT_F32, n) == VFM_ERR_INTERNAL);
    CHECK_MSG(strstr(vfm_last_error(), "broadcast over world") && strstr(vfm_last_error(), "root"), "%s", vfm_last_error());
    CHECK(comm_all_reduce(w, h, 4, DT_BF16, COMM_SUM) == VFM_ERR_UNSUPPORTED);
    CHECK_MSG(strstr(vfm_last_error(), "all_reduce over world") && strstr(vfm_last_error(), "bf16"), "%s", vfm_last_error());
    CHECK(comm_send(w, x, 4, DT_F32, mt_rank()) == VFM_ERR_INTERNAL);
    CHECK_MSG(strstr(vfm_last_error(), "send over world"), "%s", vfm_last_error());
}

/* A group of one process: reductions keep the data, gathers copy, and no MPI is needed (this
 * test also runs in a plain process). */
TEST(comm_one_rank_group_is_a_no_op) {
    Comm c;
    int me = mt_rank();
    REQUIRE_OK(comm_create(&c, "solo", COMM_BACKEND_MPI, &me, 1));
    CHECK(c.size == 1 && c.rank == 0);
    float x[3] = {1.5f, -2, 3}, y[3] = {0};
    CHECK_OK(comm_all_reduce(&c, x, 3, DT_F32, COMM_SUM_ORDERED));
    CHECK(x[0] == 1.5f && x[1] == -2 && x[2] == 3);
    CHECK_OK(comm_all_gather(&c, x, y, 3, DT_F32));
    CHECK(memcmp(x, y, sizeof x) == 0);
    memset(y, 0, sizeof y);
    CHECK_OK(comm_reduce_scatter(&c, x, y, 3, DT_F32, COMM_SUM));
    CHECK(memcmp(x, y, sizeof x) == 0);
    memset(y, 0, sizeof y);
    CHECK_OK(comm_all_to_all(&c, x, y, 3, DT_F32));
    CHECK(memcmp(x, y, sizeof x) == 0);
    CHECK_OK(comm_broadcast(&c, x, 3, DT_F32, 0));
    CHECK_OK(comm_barrier(&c));
    CHECK(comm_send(&c, x, 3, DT_F32, 0) != VFM_OK);
    comm_free(&c);
}

/* The host definition of the ordered sum, checked directly (left to right in the dtype). */
TEST(comm_sum_rows_ordered_definition) {
    float rows[3][2] = {{1e8f, 1.0f}, {1.0f, 1e8f}, {-1e8f, -1e8f}}, out[2];
    comm_sum_rows_ordered(out, rows, 3, 2, DT_F32);
    CHECK(out[0] == 0.0f);  /* (1e8 + 1) rounds to 1e8, then - 1e8 */
    CHECK(out[1] == 0.0f);
    float rows2[3][1] = {{1e8f}, {-1e8f}, {1.0f}};
    comm_sum_rows_ordered(out, rows2, 3, 1, DT_F32);
    CHECK(out[0] == 1.0f);
    int64_t irows[2][2] = {{5, -7}, {11, 13}}, iout[2];
    comm_sum_rows_ordered(iout, irows, 2, 2, DT_I64);
    CHECK(iout[0] == 16 && iout[1] == 6);
}

/* Non-blocking exchanges, as ring attention uses them: every rank posts "send to next, receive
 * from previous" for two buffers at once (K and V), writes other memory while they are in
 * flight, then waits; P - 1 such steps bring every rank's block around the whole ring. At two
 * ranks the next and the previous rank are the same peer. */
TEST(comm_exchange_ring_shift) {
    Comm *w = mt_world_comm();
    int n = mt_world(), r = mt_rank(), next = (r + 1) % n, prev = (r + n - 1) % n;
    const int64_t count = 2000;
    float *buf[2][2], *busy = malloc(count * sizeof *busy);
    for (int b = 0; b < 2; b++)
        for (int kv = 0; kv < 2; kv++) buf[b][kv] = malloc(count * sizeof(float));
    for (int64_t i = 0; i < count; i++) buf[0][0][i] = (float)(r * 10000 + i), buf[0][1][i] = (float)(-r * 10000 - i);
    int cur = 0;
    for (int step = 0; step < n - 1; step++) {
        CommP2P ops[4] = {{1, buf[cur][0], count, DT_F32, next}, {1, buf[cur][1], count, DT_F32, next},
                          {0, buf[1 - cur][0], count, DT_F32, prev}, {0, buf[1 - cur][1], count, DT_F32, prev}};
        CommRequest req;
        CHECK_OK(comm_exchange_start(w, ops, 4, &req));
        for (int64_t i = 0; i < count; i++) busy[i] = buf[cur][0][i] * 2; /* "compute" on the block held */
        CHECK_OK(comm_wait(&req));
        CHECK(req.pending == NULL);
        cur = 1 - cur;
        int from = (r - step - 1 + 2 * n) % n; /* whose block arrived */
        int ok = 1;
        for (int64_t i = 0; i < count && ok; i++)
            ok = buf[cur][0][i] == (float)(from * 10000 + i) && buf[cur][1][i] == (float)(-from * 10000 - i);
        CHECK_MSG(ok, "step %d: rank %d does not hold rank %d's block", step, r, from);
    }
    CHECK_OK(comm_wait(&(CommRequest){w, NULL})); /* nothing pending: no-op */
    for (int b = 0; b < 2; b++)
        for (int kv = 0; kv < 2; kv++) free(buf[b][kv]);
    free(busy);
}

/* comm_isend / comm_irecv / comm_sendrecv, and the errors: a peer that is this rank, a receive
 * whose count does not match the message. */
TEST(comm_isend_irecv_sendrecv) {
    Comm *w = mt_world_comm();
    int n = mt_world(), r = mt_rank();
    int64_t out[3] = {r, 2 * r, 3 * r}, in[3] = {-1, -1, -1};
    CommRequest sreq, rreq;
    CHECK(comm_isend(w, out, 3, DT_I64, r, &sreq) == VFM_ERR_INTERNAL); /* to itself */
    if (n == 1) return;
    int next = (r + 1) % n, prev = (r + n - 1) % n;
    /* ring of isend + irecv: MPI allows two exchanges here (NCCL would need one) */
    CHECK_OK(comm_irecv(w, in, 3, DT_I64, prev, &rreq));
    CHECK_OK(comm_isend(w, out, 3, DT_I64, next, &sreq));
    CHECK_OK(comm_wait(&sreq));
    CHECK_OK(comm_wait(&rreq));
    CHECK(in[0] == prev && in[1] == 2 * prev && in[2] == 3 * prev);
    /* sendrecv the other way round */
    CHECK_OK(comm_sendrecv(w, out, 3, prev, in, 3, next, DT_I64));
    CHECK(in[0] == next && in[2] == 3 * next);
    /* rank 0 only sends, rank 1 only receives */
    if (r < 2) {
        CHECK_OK(comm_sendrecv(w, out, 2, r == 0 ? 1 : -1, in, 2, r == 1 ? 0 : -1, DT_I64));
        if (r == 1) CHECK(in[0] == 0 && in[1] == 0);
    }
    /* a short message where a longer one is expected is reported */
    if (r < 2) {
        vfm_status s = comm_sendrecv(w, out, 1, r == 0 ? 1 : -1, in, 3, r == 1 ? 0 : -1, DT_I64);
        if (r == 1) CHECK_MSG(s == VFM_ERR_INTERNAL && strstr(vfm_last_error(), "expected 3 elements"), "got %s: %s",
                              vfm_status_name(s), vfm_last_error());
        else CHECK_OK(s);
    }
}

/* The non-blocking all-gather and reduce-scatter: on the MPI backend they complete at once (nothing
 * pending) with the blocking calls' bits. */
TEST(comm_nonblocking_collectives_mpi) {
    Comm *w = mt_world_comm();
    int n = mt_world(), r = mt_rank();
    const int64_t k = 1500 / n + 3;
    float *in = malloc((size_t)(n * k) * sizeof *in), *a = malloc((size_t)(n * k) * sizeof *a),
          *b = malloc((size_t)(n * k) * sizeof *b);
    test_fill_uniform_f32(in, n * k, 40 + (uint64_t)r, -1.0f, 1.0f);
    CommRequest req;
    CHECK_OK(comm_all_gather_start(w, in, a, k, DT_F32, &req));
    CHECK(req.pending == NULL);
    CHECK_OK(comm_wait(&req));
    CHECK_OK(comm_all_gather(w, in, b, k, DT_F32));
    CHECK_SAME_BITS("all_gather_start", a, b, n * k);
    CHECK_OK(comm_reduce_scatter_start(w, in, a, k, DT_F32, COMM_SUM_ORDERED, &req));
    CHECK(req.pending == NULL);
    CHECK_OK(comm_wait(&req));
    CHECK_OK(comm_reduce_scatter(w, in, b, k, DT_F32, COMM_SUM_ORDERED));
    CHECK_SAME_BITS("reduce_scatter_start", a, b, k);
    free(in), free(a), free(b);
}
