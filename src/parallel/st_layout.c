/* ST-DiT's factorised-attention layouts of a pack on one rank: the spatial and temporal chunk
 * sets and the index tensors of the row moves between them (st_layout.h). Host arrays are made
 * once per pack and copied to the device. */
#include "st_layout.h"

#include <stdlib.h>
#include <string.h>

/* ---- growable host arrays -------------------------------------------------------------------- */

typedef struct {
    int32_t *v;
    int64_t n, cap;
} I32s;

static vfm_status push(I32s *a, int64_t x) {
    if (a->n == a->cap) {
        int64_t cap = a->cap ? 2 * a->cap : 64;
        int32_t *v = realloc(a->v, (size_t)cap * sizeof *v);
        if (!v) return vfm_fail(VFM_ERR_NOMEM, "st_layout: %lld indices", (long long)cap);
        a->v = v, a->cap = cap;
    }
    a->v[a->n++] = (int32_t)x;
    return VFM_OK;
}

static vfm_status upload(Tensor *t, const int32_t *host, int64_t n, Device dev) {
    int64_t m = n > 0 ? n : 1;
    VFM_TRY(tensor_alloc(t, DT_I32, dev, 1, (int64_t[]){m}));
    if (n == 0) return device_memset0(dev, t->data, sizeof(int32_t));
    return device_memcpy(t->data, dev, host, DEV_CPU, (size_t)n * sizeof(int32_t));
}

/* ---- per-sample arithmetic ------------------------------------------------------------------- */

/* Real frames of sample s held by rank r. */
static int real_frames(const StSample *s, int r) {
    int v = s->t - r * s->frames;
    return v < 0 ? 0 : v > s->frames ? s->frames : v;
}
/* The positions rank r holds after the all-to-all: [pos_first(r), pos_first(r + 1)). */
static int pos_first(const StSample *s, int P, int r) { return (int)((int64_t)r * s->n / P); }

/* ---- chunk sets ------------------------------------------------------------------------------ */

/* A sequence list for cp_chunks_init: cumulative real and padded lengths. */
typedef struct {
    I32s cu, pad;
} Seqs;

static vfm_status seq_add(Seqs *q, int64_t real, int64_t padded) {
    if (q->cu.n == 0) {
        VFM_TRY(push(&q->cu, 0));
        VFM_TRY(push(&q->pad, 0));
    }
    VFM_TRY(push(&q->cu, q->cu.v[q->cu.n - 1] + real));
    return push(&q->pad, q->pad.v[q->pad.n - 1] + padded);
}

static vfm_status seqs_chunks(Seqs *q, int parts, Device dev, CpChunks *out) {
    if (q->cu.n == 0) VFM_TRY(seq_add(q, 0, 0));
    vfm_status s = cp_chunks_init(out, (int)q->cu.n - 1, q->cu.v, q->pad.v, parts, dev);
    free(q->cu.v), free(q->pad.v);
    memset(q, 0, sizeof *q);
    return s;
}

/* Spatial: one sequence per frame slot. One part: this rank's frames (real when the frame is), the
 * rows between samples' chunks as empty sequences. P parts (the ring): frame slot φ of every rank
 * as one sequence of P·n rows whose real rows are the ranks holding a real frame there (a prefix). */
static vfm_status spatial_chunks(StLayout *L, const StSample *smp, int n) {
    Seqs q = {0};
    int parts = L->spatial_ring ? L->P : 1;
    int64_t at = 0;
    for (int i = 0; i < n; i++) {
        const StSample *s = &smp[i];
        if (s->off > at) VFM_TRY(seq_add(&q, 0, (s->off - at) * parts));
        for (int f = 0; f < s->frames; f++) {
            int real = 0;
            if (parts == 1) real = L->rank * s->frames + f < s->t ? s->n : 0;
            else
                for (int j = 0; j < parts; j++) real += j * s->frames + f < s->t ? s->n : 0;
            VFM_TRY(seq_add(&q, real, (int64_t)parts * s->n));
        }
        at = s->off + (int64_t)s->frames * s->n;
    }
    if (L->rows > at) VFM_TRY(seq_add(&q, 0, (L->rows - at) * parts));
    VFM_TRY(seqs_chunks(&q, parts, L->device, &L->spatial));
    return parts > 1 ? cp_chunks_diagonal(&L->spatial) : VFM_OK;
}

/* Temporal: one sequence per position. All-to-all: runs of t real rows of this rank's positions.
 * Otherwise runs of this rank's frame slots (P parts: the ring, frames of rank j in chunk j), then
 * the rows no run holds (between the samples' chunks) as one empty sequence. */
static vfm_status temporal_chunks(StLayout *L, const StSample *smp, int n) {
    Seqs q = {0};
    int parts = L->temporal_ring ? L->P : 1;
    int64_t at = 0;
    for (int i = 0; i < n; i++) {
        const StSample *s = &smp[i];
        int p0 = L->all_to_all ? pos_first(s, L->P, L->rank) : 0, p1 = L->all_to_all ? pos_first(s, L->P, L->rank + 1) : s->n;
        int64_t slot = L->all_to_all ? s->t : (int64_t)parts * s->frames;
        for (int p = p0; p < p1; p++) VFM_TRY(seq_add(&q, s->t, slot));
        at += (int64_t)(p1 - p0) * slot / parts;
    }
    if (!L->all_to_all && L->rows > at) VFM_TRY(seq_add(&q, 0, (L->rows - at) * parts));
    L->rows_t = L->all_to_all ? at : L->rows;
    return seqs_chunks(&q, parts, L->device, &L->temporal);
}

/* ---- row moves ------------------------------------------------------------------------------- */

/* The local permutation: position-major runs of every frame slot, then the rows between chunks. */
static vfm_status permutation(StLayout *L, const StSample *smp, int n) {
    int32_t *perm = malloc((size_t)(L->rows > 0 ? L->rows : 1) * sizeof *perm);
    int32_t *inv = malloc((size_t)(L->rows > 0 ? L->rows : 1) * sizeof *inv);
    if (!perm || !inv) {
        free(perm), free(inv);
        return vfm_fail(VFM_ERR_NOMEM, "st_layout: %lld rows", (long long)L->rows);
    }
    for (int64_t r = 0; r < L->rows; r++) inv[r] = -1;
    int64_t y = 0;
    for (int i = 0; i < n; i++)
        for (int p = 0; p < smp[i].n; p++)
            for (int f = 0; f < smp[i].frames; f++) {
                int64_t x = smp[i].off + (int64_t)f * smp[i].n + p;
                perm[y] = (int32_t)x, inv[x] = (int32_t)y++;
            }
    for (int64_t x = 0; x < L->rows; x++)
        if (inv[x] < 0) perm[y] = (int32_t)x, inv[x] = (int32_t)y++;
    vfm_status s = upload(&L->perm, perm, L->rows, L->device);
    if (s == VFM_OK) s = upload(&L->inv, inv, L->rows, L->device);
    free(perm), free(inv);
    return s;
}

/* The all-to-all's orders. Sent: by destination ρ, sample, position of ρ's, real frame of this
 * rank. Received: by source, sample, position of this rank's, real frame of the source; each
 * row's place in the temporal layout is its run's start + its global frame. */
static vfm_status all_to_all_plan(StLayout *L, const StSample *smp, int n) {
    int P = L->P, me = L->rank;
    I32s send = {0}, to_y = {0}, from_recv = {0};
    int64_t *run = calloc((size_t)n + 1, sizeof *run); /* run start of each sample's first position */
    if (!run) return vfm_fail(VFM_ERR_NOMEM, "st_layout: %d samples", n);
    for (int i = 0; i < n; i++)
        run[i + 1] = run[i] + (int64_t)(pos_first(&smp[i], P, me + 1) - pos_first(&smp[i], P, me)) * smp[i].t;
    vfm_status st = VFM_OK;
    for (int d = 0; d < P && st == VFM_OK; d++) {
        L->send_displs[d] = send.n;
        for (int i = 0; i < n; i++)
            for (int p = pos_first(&smp[i], P, d); p < pos_first(&smp[i], P, d + 1) && st == VFM_OK; p++)
                for (int f = 0; f < real_frames(&smp[i], me) && st == VFM_OK; f++)
                    st = push(&send, smp[i].off + (int64_t)f * smp[i].n + p);
        L->send_counts[d] = send.n - L->send_displs[d];
    }
    for (int src = 0; src < P && st == VFM_OK; src++) {
        L->recv_displs[src] = from_recv.n;
        for (int i = 0; i < n; i++) {
            int p0 = pos_first(&smp[i], P, me), p1 = pos_first(&smp[i], P, me + 1);
            for (int p = p0; p < p1 && st == VFM_OK; p++)
                for (int f = 0; f < real_frames(&smp[i], src) && st == VFM_OK; f++)
                    st = push(&from_recv, run[i] + (int64_t)(p - p0) * smp[i].t + (int64_t)src * smp[i].frames + f);
        }
        L->recv_counts[src] = from_recv.n - L->recv_displs[src];
    }
    free(run);
    L->n_send = send.n, L->n_recv = from_recv.n;
    /* recv_to_y inverts y_to_recv (= from_recv); x_from inverts send_idx, padding rows reading row n_send */
    int32_t *x_from = malloc((size_t)(L->rows > 0 ? L->rows : 1) * sizeof *x_from);
    to_y.v = malloc((size_t)(L->n_recv > 0 ? L->n_recv : 1) * sizeof *to_y.v);
    if (st == VFM_OK && (!x_from || !to_y.v)) st = vfm_fail(VFM_ERR_NOMEM, "st_layout: %lld rows", (long long)L->rows);
    if (st == VFM_OK && L->n_recv != L->rows_t)
        st = vfm_fail(VFM_ERR_INTERNAL, "st_layout: %lld rows received for a temporal layout of %lld",
                      (long long)L->n_recv, (long long)L->rows_t);
    if (st == VFM_OK) {
        for (int64_t k = 0; k < L->n_recv; k++) to_y.v[from_recv.v[k]] = (int32_t)k;
        for (int64_t r = 0; r < L->rows; r++) x_from[r] = (int32_t)L->n_send;
        for (int64_t k = 0; k < L->n_send; k++) x_from[send.v[k]] = (int32_t)k;
        st = upload(&L->send_idx, send.v, L->n_send, L->device);
    }
    if (st == VFM_OK) st = upload(&L->recv_to_y, to_y.v, L->n_recv, L->device);
    if (st == VFM_OK) st = upload(&L->y_to_recv, from_recv.v, L->n_recv, L->device);
    if (st == VFM_OK) st = upload(&L->x_from, x_from, L->rows, L->device);
    free(send.v), free(to_y.v), free(from_recv.v), free(x_from);
    return st;
}

vfm_status st_layout_init(StLayout *s, const StSample *smp, int n, int64_t rows, int P, int rank, int ring,
                          Device device) {
    memset(s, 0, sizeof *s);
    s->P = P, s->rank = rank, s->rows = rows, s->device = device;
    s->all_to_all = P > 1 && !ring;
    s->spatial_ring = s->temporal_ring = P > 1 && ring;
    for (int i = 0; i < n; i++)
        if (smp[i].frames < 0 || smp[i].n < 0 || smp[i].t > P * smp[i].frames || smp[i].off < 0 ||
            smp[i].off + (int64_t)smp[i].frames * smp[i].n > rows)
            return vfm_fail(VFM_ERR_INTERNAL, "st_layout: sample %d (%d of %d frame slots of %d tokens at row %lld) "
                            "does not fit %lld rows", i, smp[i].t, smp[i].frames, smp[i].n, (long long)smp[i].off,
                            (long long)rows);
    vfm_status st = spatial_chunks(s, smp, n);
    if (st == VFM_OK) st = temporal_chunks(s, smp, n);
    if (st == VFM_OK && !s->all_to_all) st = permutation(s, smp, n);
    if (st == VFM_OK && s->all_to_all) {
        s->send_counts = calloc((size_t)P * 4, sizeof(int64_t));
        if (!s->send_counts) st = vfm_fail(VFM_ERR_NOMEM, "st_layout: counts");
        else {
            s->send_displs = s->send_counts + P, s->recv_counts = s->send_counts + 2 * P;
            s->recv_displs = s->send_counts + 3 * P;
            st = all_to_all_plan(s, smp, n);
        }
    }
    if (st != VFM_OK) st_layout_free(s);
    return st;
}

void st_layout_free(StLayout *s) {
    cp_chunks_free(&s->spatial), cp_chunks_free(&s->temporal);
    Tensor *t[] = {&s->perm, &s->inv, &s->send_idx, &s->recv_to_y, &s->y_to_recv, &s->x_from};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) tensor_free(t[i]);
    free(s->send_counts);
    memset(s, 0, sizeof *s);
}

double st_regroup_bytes(const StLayout *s, double row_bytes, int back) {
    if (!s->all_to_all) return 0;
    int64_t total = back ? s->n_recv : s->n_send, self = back ? s->recv_counts[s->rank] : s->send_counts[s->rank];
    return (double)(total - self) * row_bytes;
}
