/* ST-DiT's row moves between the frame layout and the temporal layout (st_layout.h): a row
 * gather by an index tensor (op_embedding_forward looks rows up in any [N, w] tensor), and for the
 * hybrid the all-to-all between them, posted as one exchange before this rank's own rows move. */
#include "st_layout.h"

#include <stdlib.h>

/* t viewed as [rows, w] (w = its elements per row). */
static Tensor rows_view(const Tensor *t, int64_t rows) {
    int64_t w = rows > 0 ? tensor_numel(t) / rows : 0;
    return tensor_make(t->data, t->dtype, t->device, 2, (int64_t[]){rows, w});
}

/* Rows [r0, r0 + n) of a [*, w] tensor. */
static Tensor row_block(const Tensor *t, int64_t r0, int64_t n) {
    int64_t w = t->shape[1];
    return tensor_make((char *)t->data + (size_t)(r0 * w) * dtype_size(t->dtype), t->dtype, t->device, 2,
                       (int64_t[]){n, w});
}

/* out[k] = in[idx[k]] for k < n. */
static vfm_status gather(Tensor *out, const Tensor *in, const Tensor *idx, int64_t n) {
    if (n == 0) return VFM_OK;
    Tensor o = row_block(out, 0, n), ix = tensor_make(idx->data, DT_I32, idx->device, 1, (int64_t[]){n});
    return op_embedding_forward(&o, in, &ix);
}

/* recv = the all-to-all of send (rows grouped by peer as the counts say): every other peer's block
 * posted as one exchange, this rank's own block copied while it moves. skip: nothing exchanged. */
static vfm_status exchange(Comm *comm, const StLayout *s, const Tensor *send, const int64_t *sc, const int64_t *sd,
                           Tensor *recv, const int64_t *rc, const int64_t *rd, int skip) {
    int64_t w = send->shape[1];
    CommP2P *ops = malloc(2 * (size_t)s->P * sizeof *ops);
    int n = 0;
    if (!ops) return vfm_fail(VFM_ERR_NOMEM, "st_layout: %d exchanges", 2 * s->P);
    for (int peer = 0; peer < s->P && !skip; peer++) {
        if (peer == s->rank) continue;
        if (sc[peer] > 0)
            ops[n++] = (CommP2P){1, (char *)send->data + (size_t)(sd[peer] * w) * dtype_size(send->dtype), sc[peer] * w,
                                 send->dtype, peer};
        if (rc[peer] > 0)
            ops[n++] = (CommP2P){0, (char *)recv->data + (size_t)(rd[peer] * w) * dtype_size(recv->dtype), rc[peer] * w,
                                 recv->dtype, peer};
    }
    CommRequest req = {0};
    vfm_status st = n > 0 ? comm_exchange_start(comm, ops, n, &req) : VFM_OK;
    int64_t mine = sc[s->rank];
    if (st == VFM_OK && mine > 0) {
        Tensor to = row_block(recv, rd[s->rank], mine), from = row_block(send, sd[s->rank], mine);
        st = op_copy(&to, &from);
    }
    vfm_status w8 = comm_wait(&req);
    free(ops);
    return st == VFM_OK ? w8 : st;
}

/* A scratch [rows (at least 1), w] of ref's dtype and device. */
static vfm_status scratch(Tensor *t, const Tensor *ref, int64_t rows, int64_t w) {
    return tensor_alloc(t, ref->dtype, ref->device, 2, (int64_t[]){rows > 0 ? rows : 1, w});
}

vfm_status st_to_positions(const StLayout *s, Comm *comm, Tensor *y, const Tensor *x, int skip) {
    Tensor xv = rows_view(x, s->rows), yv = rows_view(y, s->rows_t);
    if (!s->all_to_all) return gather(&yv, &xv, &s->perm, s->rows);
    int64_t w = xv.shape[1];
    Tensor send = {0}, recv = {0};
    vfm_status st = scratch(&send, x, s->n_send, w);
    if (st == VFM_OK) st = scratch(&recv, x, s->n_recv, w);
    if (st == VFM_OK && skip) st = op_fill(&recv, 0.0);
    if (st == VFM_OK) st = gather(&send, &xv, &s->send_idx, s->n_send);
    if (st == VFM_OK)
        st = exchange(comm, s, &send, s->send_counts, s->send_displs, &recv, s->recv_counts, s->recv_displs, skip);
    if (st == VFM_OK) st = gather(&yv, &recv, &s->recv_to_y, s->rows_t);
    tensor_free(&send), tensor_free(&recv);
    return st;
}

vfm_status st_to_frames(const StLayout *s, Comm *comm, Tensor *x, const Tensor *y) {
    Tensor xv = rows_view(x, s->rows), yv = rows_view(y, s->rows_t);
    if (!s->all_to_all) return gather(&xv, &yv, &s->inv, s->rows);
    int64_t w = xv.shape[1];
    Tensor send = {0}, recv = {0};
    vfm_status st = scratch(&send, y, s->n_recv, w);
    if (st == VFM_OK) st = scratch(&recv, y, s->n_send + 1, w); /* + the zero row padding rows read */
    if (st == VFM_OK) {
        Tensor zero = row_block(&recv, s->n_send, 1);
        st = op_fill(&zero, 0.0);
    }
    if (st == VFM_OK) st = gather(&send, &yv, &s->y_to_recv, s->n_recv);
    if (st == VFM_OK)
        st = exchange(comm, s, &send, s->recv_counts, s->recv_displs, &recv, s->send_counts, s->send_displs, 0);
    if (st == VFM_OK) st = gather(&xv, &recv, &s->x_from, s->rows);
    tensor_free(&send), tensor_free(&recv);
    return st;
}
