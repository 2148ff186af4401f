/* Collectives over GPU buffers: each collective over the world on device memory gives the MPI
 * backend's result on host memory (integer-valued data for SUM/MAX, whose order cannot matter;
 * order-sensitive data for the ordered sum, compared bit for bit). Through NCCL when every local
 * rank has a GPU of its own (with one GPU and one rank: a real one-rank NCCL communicator); when
 * ranks share a GPU, which NCCL refuses, through the MPI backend's staged device buffers instead of
 * being skipped (the output says which). Skipped without a GPU on every rank. (The GPU ordered
 * sum's own test, which needs no NCCL: tests/unit/test_cuda_comm.c.) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cuda_runtime_shim.h"
#include "mpi_test.h"
#include "ops/ops.h"
#include "parallel/comm_internal.h"

/* The same answer on every rank: 1 when every rank has a GPU (one_each: a GPU of its own, as
 * NCCL requires; VFM_TEST_NCCL_SHARED_GPU=1 tries anyway) and the NCCL backend. */
static int gpus_ready(char *why, size_t n, int one_each) {
    int bad = 0;
#ifndef VFM_NCCL
    (void)one_each;
    snprintf(why, n, "this build has no NCCL backend");
    bad = 1;
#else
    int devices = vfm_cuda_device_count();
    if (devices == 0) snprintf(why, n, "no CUDA device"), bad = 1;
    else if (one_each && devices < mt_launch()->local_size && !getenv("VFM_TEST_NCCL_SHARED_GPU"))
        snprintf(why, n, "%d ranks on this node but %d GPU(s)", mt_launch()->local_size, devices), bad = 1;
    else if (!comm_nccl_available()) snprintf(why, n, "%s", vfm_last_error()), bad = 1;
#endif
    int any = bad;
    if (comm_all_reduce(mt_world_comm(), &any, 1, DT_I32, COMM_MAX) != VFM_OK) return 0;
    if (any && !bad) snprintf(why, n, "another rank cannot run NCCL");
    return !any;
}

/* 1 on every rank when every rank has a CUDA device (shared or not). */
static int gpu_everywhere(void) {
    int none = vfm_cuda_device_count() == 0, any = none;
    if (comm_all_reduce(mt_world_comm(), &any, 1, DT_I32, COMM_MAX) != VFM_OK) return 0;
    return !any;
}

/* Binds this rank's GPU and opens the world over GPU buffers: NCCL when every rank has a GPU of its
 * own and NCCL loads, else the MPI backend with its staged device buffers. 0 (why filled) when some
 * rank has no GPU. */
static int open_gpu_world(Comm *g, char *why, size_t n) {
    if (!gpu_everywhere()) {
        snprintf(why, n, "no CUDA device (on this rank or another)");
        return 0;
    }
    CommBackend backend = gpus_ready(why, n, 1) ? COMM_BACKEND_NCCL : COMM_BACKEND_MPI;
    int device = -1;
    if (comm_bind_gpu(mt_launch()->local_rank, &device) != VFM_OK) {
        snprintf(why, n, "%s", vfm_last_error());
        return 0;
    }
    CHECK(device == launch_gpu_for_local_rank(mt_launch()->local_rank, vfm_cuda_device_count()));
    if (mt_rank() == 0)
        printf("      over %s\n", backend == COMM_BACKEND_NCCL ? "NCCL" : "MPI's staged device buffers (ranks share a GPU, or no NCCL)");
    int *everyone = malloc((size_t)mt_world() * sizeof *everyone);
    for (int j = 0; j < mt_world(); j++) everyone[j] = j;
    vfm_status s = comm_create(g, "world-gpu", backend, everyone, mt_world());
    free(everyone);
    if (s != VFM_OK) {
        snprintf(why, n, "%s", vfm_last_error());
        return 0;
    }
    return 1;
}

static void *to_gpu(const void *host, size_t bytes) {
    void *d = NULL;
    if (vfm_cuda_malloc(bytes ? bytes : 1, &d) != VFM_OK) return NULL;
    if (bytes && vfm_cuda_memcpy(d, 1, host, 0, bytes) != VFM_OK) return NULL;
    return d;
}

static void from_gpu(void *host, const void *dev, size_t bytes) {
    if (bytes) CHECK_OK(vfm_cuda_memcpy(host, 0, dev, 1, bytes));
}

/* Runs one collective on the GPU (NCCL) and on the host (MPI) over the same data; compares. */
typedef enum { K_ALL_REDUCE, K_REDUCE_SCATTER_V, K_ALL_GATHER_V, K_BROADCAST, K_ALL_TO_ALL_V } Kind;

static void compare_once(Comm *gpu_comm, Kind kind, CommOp op, int integer_data, int64_t base, const char *what) {
    Comm *w = mt_world_comm();
    int n = mt_world(), r = mt_rank();
    int64_t counts[64], total = 0, sc[64], sd[64];
    for (int j = 0; j < n; j++) total += counts[j] = base + 37 * ((j + 1) % 3);
    int64_t in_n = kind == K_ALL_GATHER_V ? counts[r] : total, out_n = kind == K_REDUCE_SCATTER_V ? counts[r] : total;
    size_t cap = (size_t)(total + (base + 100) * n) * sizeof(float); /* room for every output */
    float *in = malloc((size_t)in_n * sizeof *in), *host = malloc(cap), *got = malloc(cap);
    test_fill_order_sensitive_f32(in, in_n, 300 + (uint64_t)r);
    if (integer_data)
        for (int64_t i = 0; i < in_n; i++) in[i] = (float)(int)(in[i] * 8);
    memcpy(host, in, (size_t)in_n * sizeof *in);
    void *din = to_gpu(in, (size_t)in_n * sizeof *in), *dout = NULL;
    REQUIRE(din);
    REQUIRE_OK(vfm_cuda_malloc(cap, &dout));
    for (int j = 0, a = 0; j < n; j++) sc[j] = counts[j], sd[j] = a, a += (int)counts[j];
    switch (kind) {
    case K_ALL_REDUCE:
        CHECK_OK(comm_all_reduce(gpu_comm, din, total, DT_F32, op));
        CHECK_OK(comm_all_reduce(w, host, total, DT_F32, op));
        from_gpu(got, din, (size_t)total * sizeof *got);
        break;
    case K_REDUCE_SCATTER_V:
        CHECK_OK(comm_reduce_scatter_v(gpu_comm, din, dout, counts, DT_F32, op));
        CHECK_OK(comm_reduce_scatter_v(w, in, host, counts, DT_F32, op));
        from_gpu(got, dout, (size_t)out_n * sizeof *got);
        break;
    case K_ALL_GATHER_V:
        CHECK_OK(comm_all_gather_v(gpu_comm, din, dout, counts, DT_F32));
        CHECK_OK(comm_all_gather_v(w, in, host, counts, DT_F32));
        from_gpu(got, dout, (size_t)total * sizeof *got);
        break;
    case K_BROADCAST:
        CHECK_OK(comm_broadcast(gpu_comm, din, total, DT_F32, n - 1));
        CHECK_OK(comm_broadcast(w, host, total, DT_F32, n - 1));
        from_gpu(got, din, (size_t)total * sizeof *got);
        break;
    case K_ALL_TO_ALL_V: {
        /* rank s sends counts[d] elements to each d; receives counts[r] from each */
        int64_t rc[64], sdisp[64], rdisp[64];
        for (int j = 0; j < n; j++) rc[j] = counts[r], sdisp[j] = sd[j], rdisp[j] = (int64_t)j * counts[r];
        out_n = n * counts[r];
        CHECK_OK(comm_all_to_all_v(gpu_comm, din, sc, sdisp, dout, rc, rdisp, DT_F32));
        CHECK_OK(comm_all_to_all_v(w, in, sc, sdisp, host, rc, rdisp, DT_F32));
        from_gpu(got, dout, (size_t)out_n * sizeof *got);
        break;
    }
    }
    CHECK_SAME_BITS(what, got, host, out_n);
    vfm_cuda_free(din);
    vfm_cuda_free(dout);
    free(in), free(host), free(got);
}

TEST(gpu_comm_collectives_match_host) {
    char why[256];
    Comm g;
    if (!open_gpu_world(&g, why, sizeof why)) SKIP("%s", why);
    compare_once(&g, K_ALL_REDUCE, COMM_SUM, 1, 100, "all_reduce sum");
    compare_once(&g, K_ALL_REDUCE, COMM_MAX, 0, 100, "all_reduce max");
    compare_once(&g, K_ALL_REDUCE, COMM_SUM_ORDERED, 0, 100, "all_reduce ordered (gather path)");
    compare_once(&g, K_ALL_REDUCE, COMM_SUM_ORDERED, 0, 1500, "all_reduce ordered (scatter path)");
    compare_once(&g, K_REDUCE_SCATTER_V, COMM_SUM, 1, 100, "reduce_scatter sum");
    compare_once(&g, K_REDUCE_SCATTER_V, COMM_SUM_ORDERED, 0, 100, "reduce_scatter ordered");
    compare_once(&g, K_ALL_GATHER_V, COMM_SUM, 0, 100, "all_gather");
    compare_once(&g, K_BROADCAST, COMM_SUM, 0, 100, "broadcast");
    compare_once(&g, K_ALL_TO_ALL_V, COMM_SUM, 0, 100, "all_to_all");
    CHECK_OK(comm_barrier(&g));
    comm_free(&g);
}

/* The non-blocking collectives FSDP prefetches with: two posted back to back on the comm's stream
 * (an all-gather and an ordered reduce-scatter), waited for in reverse order, give the MPI
 * backend's bits. */
TEST(gpu_comm_nonblocking_collectives_match_host) {
    char why[256];
    Comm g;
    if (!open_gpu_world(&g, why, sizeof why)) SKIP("%s", why);
    int n = mt_world(), r = mt_rank();
    const int64_t k = 1201;
    float *in = malloc((size_t)(n * k) * sizeof *in), *host_g = malloc((size_t)(n * k) * sizeof *in),
          *host_r = malloc((size_t)k * sizeof *in), *got = malloc((size_t)(n * k) * sizeof *in);
    test_fill_order_sensitive_f32(in, n * k, 500 + (uint64_t)r);
    void *din = to_gpu(in, (size_t)(n * k) * sizeof *in), *dg = NULL, *dr = NULL;
    REQUIRE(din);
    REQUIRE_OK(vfm_cuda_malloc((size_t)(n * k) * sizeof *in, &dg));
    REQUIRE_OK(vfm_cuda_malloc((size_t)k * sizeof *in, &dr));
    CommRequest rg, rr;
    CHECK_OK(comm_all_gather_start(&g, din, dg, k, DT_F32, &rg));
    CHECK_OK(comm_reduce_scatter_start(&g, din, dr, k, DT_F32, COMM_SUM_ORDERED, &rr));
    if (g.backend == COMM_BACKEND_NCCL) /* posted on the comm's stream; MPI's staging completes at once */
        CHECK(rg.pending != NULL && rr.pending != NULL);
    CHECK_OK(comm_wait(&rr));
    CHECK_OK(comm_wait(&rg));
    CHECK_OK(comm_all_gather(mt_world_comm(), in, host_g, k, DT_F32));
    CHECK_OK(comm_reduce_scatter(mt_world_comm(), in, host_r, k, DT_F32, COMM_SUM_ORDERED));
    from_gpu(got, dg, (size_t)(n * k) * sizeof *got);
    CHECK_SAME_BITS("all_gather_start on the GPU", got, host_g, n * k);
    from_gpu(got, dr, (size_t)k * sizeof *got);
    CHECK_SAME_BITS("reduce_scatter_start on the GPU", got, host_r, k);
    vfm_cuda_free(din), vfm_cuda_free(dg), vfm_cuda_free(dr);
    free(in), free(host_g), free(host_r), free(got);
    comm_free(&g);
}

/* The data-parallel buckets' posting (dp.c): each buffer is written by a kernel on the ops' stream
 * (op_scale ×2) just before comm_all_reduce_start (ordered sum, gather and scatter paths) or
 * comm_reduce_scatter_v_start (unequal pieces) is posted, with no host wait between: the comm's
 * non-blocking stream must still see the kernel's values (its event ordering), and the results
 * must be the MPI backend's bits for the doubled data. */
TEST(gpu_comm_posted_bucket_reductions_follow_the_ops_stream) {
    char why[256];
    Comm g;
    if (!open_gpu_world(&g, why, sizeof why)) SKIP("%s", why);
    int n = mt_world(), r = mt_rank();
    const int64_t sizes[2] = {100, 1500};
    for (int k = 0; k < 2; k++) {
        int64_t m = sizes[k];
        float *in = malloc((size_t)m * sizeof *in), *want = malloc((size_t)m * sizeof *in), *got = malloc((size_t)m * sizeof *in);
        test_fill_order_sensitive_f32(in, m, 700 + (uint64_t)(r + 10 * k));
        void *d = to_gpu(in, (size_t)m * sizeof *in);
        REQUIRE(d);
        Tensor t = TENSOR(d, DT_F32, DEV_CUDA, m);
        CHECK_OK(op_scale(&t, 2.0));
        CommRequest req;
        CHECK_OK(comm_all_reduce_start(&g, d, m, DT_F32, COMM_SUM_ORDERED, &req));
        CHECK_OK(comm_wait(&req));
        for (int64_t i = 0; i < m; i++) want[i] = 2.0f * in[i];
        CHECK_OK(comm_all_reduce(mt_world_comm(), want, m, DT_F32, COMM_SUM_ORDERED));
        from_gpu(got, d, (size_t)m * sizeof *got);
        CHECK_SAME_BITS(k ? "all_reduce_start (scatter path)" : "all_reduce_start (gather path)", got, want, m);

        /* unequal pieces, recv inside send (ZeRO-1's bucket) */
        int64_t *counts = malloc((size_t)n * sizeof *counts), at = 0;
        for (int j = 0; j < n; j++) counts[j] = m * (j + 1) * (j + 1) / (n * n) - m * j * j / (n * n);
        for (int j = 0; j < r; j++) at += counts[j];
        CHECK_OK(device_memcpy(d, DEV_CUDA, in, DEV_CPU, (size_t)m * sizeof *in));
        CHECK_OK(op_scale(&t, 2.0));
        CHECK_OK(comm_reduce_scatter_v_start(&g, d, (float *)d + at, counts, DT_F32, COMM_SUM_ORDERED, &req));
        CHECK_OK(comm_wait(&req));
        for (int64_t i = 0; i < m; i++) want[i] = 2.0f * in[i];
        CHECK_OK(comm_reduce_scatter_v(mt_world_comm(), want, got, counts, DT_F32, COMM_SUM_ORDERED));
        float *mine = malloc((size_t)(counts[r] > 0 ? counts[r] : 1) * sizeof *mine);
        from_gpu(mine, (float *)d + at, (size_t)counts[r] * sizeof *mine);
        CHECK_SAME_BITS("reduce_scatter_v_start", mine, got, counts[r]);
        free(mine), free(counts);
        vfm_cuda_free(d);
        free(in), free(want), free(got);
    }
    comm_free(&g);
}
