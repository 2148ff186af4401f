/* CPU backend: non-causal softmax attention over packed variable-length sequences (THD layout),
 * forward and backward, with grouped-query heads.
 *
 * The work is a list of tiles: up to ATTN_TILE_ROWS consecutive query rows of one sample and one
 * head (forward, dq), or key rows of one sample and one kv head (dk, dv). One thread computes a
 * whole tile and owns the output rows it writes, so there are no races and no sum depends on the
 * thread count. Scratch per thread is O(head_dim · longest sequence), never quadratic. A head's
 * key (or query) rows are transposed into scratch so that every inner loop runs over contiguous
 * memory and vectorises without reordering any sum (each score still adds its head_dim products
 * in order d = 0, 1, ...).
 *
 * A sample with no keys gives o = 0, lse = -inf (the log of an empty sum, so a log-sum-exp merge
 * gives it weight 0) and dq = 0. Padding rows are never read and are written as 0. */
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "real.h"

#define ATTN_TILE_ROWS 32

typedef struct {
    int sample, head;
    int row0, rows; /* rows [row0, row0 + rows) of the sample's real rows */
} AttnTile;

static int attn_max_threads(void) {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

static int attn_thread_id(void) {
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

static int longest(const int32_t *cu, int n) {
    int best = 0;
    for (int i = 0; i < n; i++)
        if (cu[i + 1] - cu[i] > best) best = cu[i + 1] - cu[i];
    return best;
}

/* Tiles of every (sample, head) over the samples' real rows (lengths from cu[n+1]); NULL when out
 * of memory. */
static AttnTile *make_tiles(const int32_t *cu, int n, int heads, int64_t *count) {
    int64_t total = 0;
    for (int i = 0; i < n; i++) total += (int64_t)heads * ((cu[i + 1] - cu[i] + ATTN_TILE_ROWS - 1) / ATTN_TILE_ROWS);
    AttnTile *tiles = malloc((size_t)(total + 1) * sizeof *tiles);
    if (!tiles) return NULL;
    int64_t t = 0;
    for (int i = 0; i < n; i++)
        for (int h = 0; h < heads; h++)
            for (int r = 0; r < cu[i + 1] - cu[i]; r += ATTN_TILE_ROWS) {
                int left = cu[i + 1] - cu[i] - r;
                tiles[t++] = (AttnTile){i, h, r, left < ATTN_TILE_ROWS ? left : ATTN_TILE_ROWS};
            }
    *count = total;
    return tiles;
}

/* x[rows, row_elems]: writes 0 to every row outside the samples' real spans
 * [cu_padded[i], cu_padded[i] + len_i) (the dispatcher checked the spans are ordered). */
static void zero_padding_rows(real *x, int64_t rows, int64_t row_elems, const int32_t *cu, const int32_t *cu_padded,
                              int n) {
    int64_t next = 0;
    for (int i = 0; i <= n; i++) {
        int64_t start = i < n ? cu_padded[i] : rows;
        if (start > next) memset(x + next * row_elems, 0, (size_t)((start - next) * row_elems) * sizeof(real));
        if (i < n) next = start + (cu[i + 1] - cu[i]);
    }
}

/* dst[hd, n] = the n rows src + j·row_stride (hd contiguous values each), transposed. */
static void transpose_rows(real *dst, const real *src, int n, int64_t row_stride, int hd) {
    for (int j = 0; j < n; j++)
        for (int d = 0; d < hd; d++) dst[(int64_t)d * n + j] = src[j * row_stride + d];
}

/* s[j] = scale · Σ_d x[d]·t[d, j] for j < n, with t[hd, n]; d summed in order. */
static void row_times_transposed(real *s, const real *x, const real *t, int n, int hd, real scale) {
    for (int j = 0; j < n; j++) s[j] = 0;
    for (int d = 0; d < hd; d++) {
        real xd = x[d];
        const real *td = t + (int64_t)d * n;
#pragma omp simd
        for (int j = 0; j < n; j++) s[j] += xd * td[j];
    }
    for (int j = 0; j < n; j++) s[j] *= scale;
}

/* y[hd] += a · x[hd] */
static void axpy_row(real *y, real a, const real *x, int hd) {
#pragma omp simd
    for (int d = 0; d < hd; d++) y[d] += a * x[d];
}

static real dot_row(const real *a, const real *b, int hd) {
    real s = 0;
    for (int d = 0; d < hd; d++) s += a[d] * b[d];
    return s;
}

/* Shapes of one call, read from q[Sq,H,hd] and k[Skv,Hkv,hd]. */
typedef struct {
    int64_t Sq, Skv;
    int H, Hkv, hd, group; /* group = H / Hkv query heads per kv head */
    real scale;
    int n;
    const int32_t *cu_q, *cu_q_padded, *cu_kv, *cu_kv_padded;
} AttnDims;

static AttnDims attn_dims(const Tensor *q, const Tensor *k, const VarlenLayout *layout) {
    AttnDims a;
    a.Sq = q->shape[0];
    a.H = (int)q->shape[1];
    a.hd = (int)q->shape[2];
    a.Skv = k->shape[0];
    a.Hkv = (int)k->shape[1];
    a.group = a.H / a.Hkv;
    a.scale = (real)(1.0 / sqrt((double)a.hd));
    a.n = layout->n_samples;
    a.cu_q = I32DATA(&layout->cu_q);
    a.cu_q_padded = I32DATA(&layout->cu_q_padded);
    a.cu_kv = I32DATA(&layout->cu_kv);
    a.cu_kv_padded = I32DATA(&layout->cu_kv_padded);
    return a;
}

/* One forward tile: o and lse of `rows` query rows of one sample and head. scratch: hd·n_kv + n_kv. */
static void forward_tile(const AttnDims *a, const AttnTile *t, real *O, real *LSE, const real *Q, const real *K,
                         const real *V, real *scratch) {
    int i = t->sample, h = t->head, g = h / a->group, hd = a->hd;
    int n_kv = a->cu_kv[i + 1] - a->cu_kv[i];
    int64_t kv0 = a->cu_kv_padded[i], q0 = a->cu_q_padded[i] + t->row0;
    real *kt = scratch, *s = scratch + (int64_t)hd * n_kv;
    transpose_rows(kt, K + (kv0 * a->Hkv + g) * hd, n_kv, (int64_t)a->Hkv * hd, hd);
    for (int64_t r = q0; r < q0 + t->rows; r++) {
        real *orow = O + (r * a->H + h) * hd;
        memset(orow, 0, (size_t)hd * sizeof(real));
        if (n_kv == 0) {
            LSE[r * a->H + h] = -INFINITY;
            continue;
        }
        row_times_transposed(s, Q + (r * a->H + h) * hd, kt, n_kv, hd, a->scale);
        real m = s[0];
        for (int j = 1; j < n_kv; j++)
            if (s[j] > m) m = s[j];
        real sum = 0;
        for (int j = 0; j < n_kv; j++) {
            s[j] = exp(s[j] - m);
            sum += s[j];
        }
        real inv = 1 / sum;
        for (int j = 0; j < n_kv; j++) axpy_row(orow, s[j] * inv, V + ((kv0 + j) * a->Hkv + g) * hd, hd);
        LSE[r * a->H + h] = m + log(sum);
    }
}

vfm_status CPU_FN(attention_forward)(Tensor *o, Tensor *lse, const Tensor *q, const Tensor *k, const Tensor *v,
                                     const VarlenLayout *layout) {
    AttnDims a = attn_dims(q, k, layout);
    real *O = RDATA(o), *LSE = RDATA(lse);
    const real *Q = CRDATA(q), *K = CRDATA(k), *V = CRDATA(v);
    int64_t per_thread = ((int64_t)a.hd + 1) * longest(a.cu_kv, a.n) + 1;
    int64_t n_tiles = 0;
    AttnTile *tiles = make_tiles(a.cu_q, a.n, a.H, &n_tiles);
    real *scratch = malloc((size_t)(per_thread * attn_max_threads()) * sizeof(real));
    if (!tiles || !scratch) {
        free(tiles);
        free(scratch);
        return vfm_fail(VFM_ERR_NOMEM, "attention_forward: out of memory for scratch");
    }
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t t = 0; t < n_tiles; t++)
        forward_tile(&a, &tiles[t], O, LSE, Q, K, V, scratch + attn_thread_id() * per_thread);
    zero_padding_rows(O, a.Sq, (int64_t)a.H * a.hd, a.cu_q, a.cu_q_padded, a.n);
    zero_padding_rows(LSE, a.Sq, a.H, a.cu_q, a.cu_q_padded, a.n);
    free(tiles);
    free(scratch);
    return VFM_OK;
}

/* D[r,h] = Σ_d dO[r,h,d]·O[r,h,d] over the tile's rows (the softmax backward's row term). */
static void delta_tile(const AttnDims *a, const AttnTile *t, real *Dlt, const real *dO, const real *O) {
    int64_t q0 = a->cu_q_padded[t->sample] + t->row0;
    for (int64_t r = q0; r < q0 + t->rows; r++) {
        int64_t at = r * a->H + t->head;
        Dlt[at] = dot_row(dO + at * a->hd, O + at * a->hd, a->hd);
    }
}

/* dq of one query tile: dq_r = scale · Σ_j dS_rj k_j, dS = P ⊙ (dO·Vᵀ − D), P = exp(s − lse).
 * scratch: 2·hd·n_kv + 2·n_kv. */
static void dq_tile(const AttnDims *a, const AttnTile *t, real *dQ, const real *dO, const real *Q, const real *K,
                    const real *V, const real *LSE, const real *Dlt, real *scratch) {
    int i = t->sample, h = t->head, g = h / a->group, hd = a->hd;
    int n_kv = a->cu_kv[i + 1] - a->cu_kv[i];
    int64_t kv0 = a->cu_kv_padded[i], q0 = a->cu_q_padded[i] + t->row0, kv_stride = (int64_t)a->Hkv * hd;
    real *kt = scratch, *vt = kt + (int64_t)hd * n_kv, *s = vt + (int64_t)hd * n_kv, *dp = s + n_kv;
    const real *k_head = K + (kv0 * a->Hkv + g) * hd;
    transpose_rows(kt, k_head, n_kv, kv_stride, hd);
    transpose_rows(vt, V + (kv0 * a->Hkv + g) * hd, n_kv, kv_stride, hd);
    for (int64_t r = q0; r < q0 + t->rows; r++) {
        int64_t at = r * a->H + h;
        real *dqrow = dQ + at * hd;
        memset(dqrow, 0, (size_t)hd * sizeof(real));
        if (n_kv == 0) continue;
        row_times_transposed(s, Q + at * hd, kt, n_kv, hd, a->scale);
        row_times_transposed(dp, dO + at * hd, vt, n_kv, hd, 1);
        for (int j = 0; j < n_kv; j++) {
            real p = exp(s[j] - LSE[at]);
            axpy_row(dqrow, p * (dp[j] - Dlt[at]), k_head + j * kv_stride, hd);
        }
        for (int d = 0; d < hd; d++) dqrow[d] *= a->scale;
    }
}

/* dk, dv of one key tile (one kv head): summed over the group's query heads in order, then over
 * the sample's query rows in order. dv_j = Σ P_rj dO_r, dk_j = scale · Σ dS_rj q_r.
 * scratch: 2·hd·n_q + 2·n_q. */
static void dkdv_tile(const AttnDims *a, const AttnTile *t, real *dK, real *dV, const real *dO, const real *Q,
                      const real *K, const real *V, const real *LSE, const real *Dlt, real *scratch) {
    int i = t->sample, g = t->head, hd = a->hd;
    int n_q = a->cu_q[i + 1] - a->cu_q[i];
    int64_t q0 = a->cu_q_padded[i], kv0 = a->cu_kv_padded[i] + t->row0, q_stride = (int64_t)a->H * hd;
    real *q_t = scratch, *do_t = q_t + (int64_t)hd * n_q, *s = do_t + (int64_t)hd * n_q, *dp = s + n_q;
    for (int64_t j = kv0; j < kv0 + t->rows; j++) {
        memset(dK + (j * a->Hkv + g) * hd, 0, (size_t)hd * sizeof(real));
        memset(dV + (j * a->Hkv + g) * hd, 0, (size_t)hd * sizeof(real));
    }
    if (n_q == 0) return;
    for (int h = g * a->group; h < (g + 1) * a->group; h++) {
        const real *q_head = Q + (q0 * a->H + h) * hd, *do_head = dO + (q0 * a->H + h) * hd;
        const real *lse_head = LSE + q0 * a->H + h, *d_head = Dlt + q0 * a->H + h;
        transpose_rows(q_t, q_head, n_q, q_stride, hd);
        transpose_rows(do_t, do_head, n_q, q_stride, hd);
        for (int64_t j = kv0; j < kv0 + t->rows; j++) {
            int64_t at = j * a->Hkv + g;
            real *dkrow = dK + at * hd, *dvrow = dV + at * hd;
            row_times_transposed(s, K + at * hd, q_t, n_q, hd, a->scale);
            row_times_transposed(dp, V + at * hd, do_t, n_q, hd, 1);
            for (int r = 0; r < n_q; r++) {
                real p = exp(s[r] - lse_head[r * a->H]);
                axpy_row(dvrow, p, do_head + r * q_stride, hd);
                axpy_row(dkrow, p * (dp[r] - d_head[r * a->H]), q_head + r * q_stride, hd);
            }
        }
    }
    for (int64_t j = kv0; j < kv0 + t->rows; j++) {
        real *dkrow = dK + (j * a->Hkv + g) * hd;
        for (int d = 0; d < hd; d++) dkrow[d] *= a->scale;
    }
}

vfm_status CPU_FN(attention_backward)(Tensor *dq, Tensor *dk, Tensor *dv, const Tensor *dout, const Tensor *q,
                                      const Tensor *k, const Tensor *v, const Tensor *o, const Tensor *lse,
                                      const VarlenLayout *layout) {
    AttnDims a = attn_dims(q, k, layout);
    real *dQ = RDATA(dq), *dK = RDATA(dk), *dV = RDATA(dv);
    const real *dO = CRDATA(dout), *Q = CRDATA(q), *K = CRDATA(k), *V = CRDATA(v), *O = CRDATA(o),
               *LSE = CRDATA(lse);
    int max_q = longest(a.cu_q, a.n), max_kv = longest(a.cu_kv, a.n);
    int64_t per_thread = 2 * ((int64_t)a.hd + 1) * (max_q > max_kv ? max_q : max_kv) + 1;
    int64_t n_qtiles = 0, n_kvtiles = 0;
    AttnTile *qtiles = make_tiles(a.cu_q, a.n, a.H, &n_qtiles);
    AttnTile *kvtiles = make_tiles(a.cu_kv, a.n, a.Hkv, &n_kvtiles);
    real *scratch = malloc((size_t)(per_thread * attn_max_threads()) * sizeof(real));
    real *Dlt = malloc((size_t)(a.Sq * a.H + 1) * sizeof(real)); /* D[Sq,H], real rows only */
    if (!qtiles || !kvtiles || !scratch || !Dlt) {
        free(qtiles);
        free(kvtiles);
        free(scratch);
        free(Dlt);
        return vfm_fail(VFM_ERR_NOMEM, "attention_backward: out of memory for scratch");
    }
#pragma omp parallel
    {
        real *mine = scratch + attn_thread_id() * per_thread;
#pragma omp for schedule(static)
        for (int64_t t = 0; t < n_qtiles; t++) delta_tile(&a, &qtiles[t], Dlt, dO, O);
#pragma omp for schedule(dynamic, 1) nowait
        for (int64_t t = 0; t < n_qtiles; t++) dq_tile(&a, &qtiles[t], dQ, dO, Q, K, V, LSE, Dlt, mine);
#pragma omp for schedule(dynamic, 1)
        for (int64_t t = 0; t < n_kvtiles; t++) dkdv_tile(&a, &kvtiles[t], dK, dV, dO, Q, K, V, LSE, Dlt, mine);
    }
    zero_padding_rows(dQ, a.Sq, (int64_t)a.H * a.hd, a.cu_q, a.cu_q_padded, a.n);
    zero_padding_rows(dK, a.Skv, (int64_t)a.Hkv * a.hd, a.cu_kv, a.cu_kv_padded, a.n);
    zero_padding_rows(dV, a.Skv, (int64_t)a.Hkv * a.hd, a.cu_kv, a.cu_kv_padded, a.n);
    free(qtiles);
    free(kvtiles);
    free(scratch);
    free(Dlt);
    return VFM_OK;
}
