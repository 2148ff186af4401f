/* GPU buffers on the MPI backend (comm_stage.c): every collective and exchange gives, on device
 * memory, exactly the bits the same call gives on host memory — in place and out of place, with
 * order-sensitive data for the ordered sums — at every world size (1 rank: device-to-device
 * copies), so two ranks sharing one GPU run the GPU code paths over MPI. Skipped without a GPU. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cuda_runtime_shim.h"
#include "mpi_test.h"

/* The same answer on every rank. */
static int have_gpu(void) {
    int none = vfm_cuda_device_count() == 0, any = none;
    if (comm_all_reduce(mt_world_comm(), &any, 1, DT_I32, COMM_MAX) != VFM_OK) return 0;
    return !any;
}

#define NEED_GPU_ON_EVERY_RANK()                                           \
    do {                                                                   \
        if (!have_gpu()) SKIP("no CUDA device (on this rank or another)"); \
    } while (0)

static void *dev_copy(const void *host, size_t bytes) {
    void *d = NULL;
    if (vfm_cuda_malloc(bytes ? bytes : 1, &d) != VFM_OK) return NULL;
    if (bytes && vfm_cuda_memcpy(d, 1, host, 0, bytes) != VFM_OK) return NULL;
    return d;
}

static void *host_of(const void *dev, size_t bytes) {
    void *h = malloc(bytes ? bytes : 1);
    if (bytes) CHECK_OK(vfm_cuda_memcpy(h, 0, dev, 1, bytes));
    return h;
}

/* Order-sensitive f32 data: a float sum of these depends on the order of its terms. */
static void fill(float *x, int64_t n, uint64_t seed) {
    test_fill_uniform_f32(x, n, seed, -1.0f, 1.0f);
    for (int64_t i = 0; i < n; i++) x[i] *= (float)(1 << (i % 16));
}

/* d (device, n floats) holds the bits of h (host). */
static void same(const char *what, const void *d, const float *h, int64_t n) {
    float *got = host_of(d, (size_t)n * sizeof(float));
    CHECK_SAME_BITS(what, got, h, n);
    free(got);
}

TEST(comm_staged_all_reduce_and_broadcast) {
    NEED_GPU_ON_EVERY_RANK();
    Comm *w = mt_world_comm();
    const int64_t counts[] = {5, 3001}; /* the all-gather and the all-to-all paths of the ordered sum */
    for (int k = 0; k < 2; k++)
        for (int op = 0; op < 3; op++) {
            int64_t n = counts[k];
            float *h = malloc((size_t)n * sizeof *h);
            fill(h, n, 100 + (uint64_t)mt_rank() * 7 + (uint64_t)k);
            void *d = dev_copy(h, (size_t)n * sizeof *h);
            REQUIRE(d);
            CHECK_OK(comm_all_reduce(w, h, n, DT_F32, (CommOp)op));
            CHECK_OK(comm_all_reduce(w, d, n, DT_F32, (CommOp)op));
            char what[64];
            snprintf(what, sizeof what, "all_reduce op %d, %lld floats", op, (long long)n);
            same(what, d, h, n);
            fill(h, n, 900 + (uint64_t)mt_rank());
            CHECK_OK(vfm_cuda_memcpy(d, 1, h, 0, (size_t)n * sizeof *h));
            int root = mt_world() - 1;
            CHECK_OK(comm_broadcast(w, h, n, DT_F32, root));
            CHECK_OK(comm_broadcast(w, d, n, DT_F32, root));
            same("broadcast", d, h, n);
            vfm_cuda_free(d);
            free(h);
        }
}

TEST(comm_staged_reduce_scatter_and_all_gather_in_place_and_not) {
    NEED_GPU_ON_EVERY_RANK();
    Comm *w = mt_world_comm();
    int P = mt_world(), r = mt_rank();
    const int64_t per = 1000;
    int64_t n = per * P;
    float *send = malloc((size_t)n * sizeof *send), *recv = malloc((size_t)per * sizeof *recv);
    fill(send, n, 31 + (uint64_t)r);
    float *dsend = dev_copy(send, (size_t)n * sizeof *send), *drecv = dev_copy(recv, (size_t)per * sizeof *recv);
    REQUIRE(dsend && drecv);
    /* out of place */
    CHECK_OK(comm_reduce_scatter(w, send, recv, per, DT_F32, COMM_SUM_ORDERED));
    CHECK_OK(comm_reduce_scatter(w, dsend, drecv, per, DT_F32, COMM_SUM_ORDERED));
    same("reduce_scatter", drecv, recv, per);
    CHECK_OK(comm_all_gather(w, recv, send, per, DT_F32));
    CHECK_OK(comm_all_gather(w, drecv, dsend, per, DT_F32));
    same("all_gather", dsend, send, n);
    /* in place: this rank's block of the send buffer receives */
    fill(send, n, 77 + (uint64_t)r);
    CHECK_OK(vfm_cuda_memcpy(dsend, 1, send, 0, (size_t)n * sizeof *send));
    CHECK_OK(comm_reduce_scatter(w, send, send + r * per, per, DT_F32, COMM_SUM_ORDERED));
    CHECK_OK(comm_reduce_scatter(w, dsend, dsend + r * per, per, DT_F32, COMM_SUM_ORDERED));
    same("reduce_scatter in place", dsend + r * per, send + r * per, per);
    CHECK_OK(comm_all_gather(w, send + r * per, send, per, DT_F32));
    CHECK_OK(comm_all_gather(w, dsend + r * per, dsend, per, DT_F32));
    same("all_gather in place", dsend, send, n);
    vfm_cuda_free(dsend);
    vfm_cuda_free(drecv);
    free(send);
    free(recv);
}

TEST(comm_staged_all_to_all_and_point_to_point) {
    NEED_GPU_ON_EVERY_RANK();
    Comm *w = mt_world_comm();
    int P = mt_world(), r = mt_rank();
    const int64_t per = 257;
    int64_t n = per * P;
    float *send = malloc((size_t)n * sizeof *send), *recv = calloc((size_t)n, sizeof *recv);
    fill(send, n, 5 + (uint64_t)r);
    float *dsend = dev_copy(send, (size_t)n * sizeof *send), *drecv = dev_copy(recv, (size_t)n * sizeof *recv);
    REQUIRE(dsend && drecv);
    CHECK_OK(comm_all_to_all(w, send, recv, per, DT_F32));
    CHECK_OK(comm_all_to_all(w, dsend, drecv, per, DT_F32));
    same("all_to_all", drecv, recv, n);
    if (P > 1) {
        int next = (r + 1) % P, prev = (r + P - 1) % P;
        /* a ring shift with the exchange: a device send with a device receive, then device with host */
        CHECK_OK(comm_sendrecv(w, send, per, next, recv, per, prev, DT_F32));
        CHECK_OK(comm_sendrecv(w, dsend, per, next, drecv, per, prev, DT_F32));
        same("sendrecv device/device", drecv, recv, per);
        float *hrecv = calloc((size_t)per, sizeof *hrecv);
        CHECK_OK(comm_sendrecv(w, dsend, per, next, hrecv, per, prev, DT_F32));
        CHECK_SAME_BITS("sendrecv device/host", hrecv, recv, per);
        /* blocking send/recv: even ranks send first */
        if (r % 2 == 0) {
            CHECK_OK(comm_send(w, dsend + per, per, DT_F32, next));
            CHECK_OK(comm_recv(w, drecv + per, per, DT_F32, prev));
        } else {
            CHECK_OK(comm_recv(w, drecv + per, per, DT_F32, prev));
            CHECK_OK(comm_send(w, dsend + per, per, DT_F32, next));
        }
        float *prev_send = malloc((size_t)n * sizeof *prev_send);
        fill(prev_send, n, 5 + (uint64_t)prev);
        same("send/recv", drecv + per, prev_send + per, per);
        free(prev_send);
        free(hrecv);
    }
    vfm_cuda_free(dsend);
    vfm_cuda_free(drecv);
    free(send);
    free(recv);
}
