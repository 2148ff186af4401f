/* CPU backend: non-causal softmax attention over packed variable-length sequences (THD layout),
 * forward and backward, with grouped-query heads, in blocks (FlashAttention's scheme on the CPU)
 * whose products run on block_gemm.h's register-blocked kernel.
 *
 * Forward: per sample, head and block of ATTN_BQ query rows, an online softmax over blocks of
 * ATTN_BK keys: S = scale·Q·Kᵀ (the block's row maxima from the same product), the running row
 * max m and sum l, P = exp(S − m), O += P·V, rescaled when m grows; o = O / l and
 * lse = m + log l at the end. A work item takes ATTN_QGROUP query blocks through each key block
 * in turn, so that the key and value block is read from memory once for all of them.
 * Backward: per sample and kv head, over key blocks and, inside, the group's query heads and
 * query blocks: P = exp(scale·Q·Kᵀ − lse) recomputed from the saved log-sum-exp, dV += Pᵀ·dO,
 * dP = dO·Vᵀ, dS = P ⊙ (dP − D) with D = rowsum(dO ⊙ O), dK += scale·dSᵀ·Q, dQ += scale·dS·K
 * (five products a block; dK and dV of a key block are summed transposed, [hd, keys], so that
 * those two products read P and dS along their rows). One work item owns every output row it
 * writes (a kv head's dK, dV and its query heads' dQ), so nothing races. K (and V for the
 * backward) are first transposed per sample and kv head (HeadsT), so that the products with Kᵀ
 * and Vᵀ run along the keys.
 *
 * Determinism: the work items and their blocks depend on the shapes only; each item runs on one
 * thread, its products sum in a fixed order (block_gemm, or OpenBLAS single-threaded inside the
 * parallel region for widths block_gemm does not take, never splitting the inner dimension), and
 * every other sum runs in a fixed order. So the bits are the same every run and at any thread
 * count. Scratch is O(ATTN_BQ · ATTN_BK) per thread plus the transposed K and V: no O(L²) buffer.
 *
 * A sample with no keys gives o = 0, lse = -inf (the log of an empty sum, so a log-sum-exp merge
 * gives it weight 0) and dq = 0. Padding rows are never read and are written as 0. */
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "real.h"
#include "block_gemm.h"
#include "softmax_rows.h"

#ifndef ATTN_BQ
#define ATTN_BQ 64 /* query rows per block (tuned on AVX-512 at head_dim 32: docs/bench.md) */
#endif
#ifndef ATTN_BK
#define ATTN_BK 512 /* key rows per block */
#endif
#ifndef ATTN_QGROUP
#define ATTN_QGROUP 4 /* the forward's query blocks per work item, sharing each key block */
#endif
/* Row stride of a block's scores / probabilities: ATTN_BK plus one cache line, so that a column
 * strip of the block (read by the products with Pᵀ and dSᵀ, and by P·V) spreads over the L1's
 * sets; at a stride of 2 KiB its rows all fall into the same two sets and evict each other. */
#define ATTN_LD (ATTN_BK + 64 / (int)sizeof(real))

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

static inline int imin(int a, int b) { return a < b ? a : b; }

/* n reals on a 64-byte boundary (a block product's vector loads then never straddle two cache
 * lines); free with free(). n is rounded up to whole cache lines. */
static real *alloc_lines(int64_t n) {
    size_t bytes = ((size_t)n * sizeof(real) + 63) / 64 * 64 + 64;
    return aligned_alloc(64, bytes);
}

/* Per-thread scratch of n reals, rounded up so that every thread's part starts on a cache line. */
static int64_t whole_lines(int64_t n) { return (n * (int64_t)sizeof(real) + 63) / 64 * 64 / (int64_t)sizeof(real); }

/* Tiles of every (sample, head) over the samples' real rows (lengths from cu[n+1]), block_rows
 * rows each; NULL when out of memory. */
static AttnTile *make_tiles(const int32_t *cu, int n, int heads, int block_rows, int64_t *count) {
    int64_t total = 0;
    for (int i = 0; i < n; i++) total += (int64_t)heads * ((cu[i + 1] - cu[i] + block_rows - 1) / block_rows);
    AttnTile *tiles = malloc((size_t)(total + 1) * sizeof *tiles);
    if (!tiles) return NULL;
    int64_t t = 0;
    for (int i = 0; i < n; i++)
        for (int h = 0; h < heads; h++)
            for (int r = 0; r < cu[i + 1] - cu[i]; r += block_rows)
                tiles[t++] = (AttnTile){i, h, r, imin(cu[i + 1] - cu[i] - r, block_rows)};
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

/* `rows` rows of hd values, row_stride apart, set to 0. */
static void zero_rows(real *x, int rows, int64_t row_stride, int hd) {
    for (int r = 0; r < rows; r++) memset(x + r * row_stride, 0, (size_t)hd * sizeof(real));
}

/* Shapes of one call, read from q[Sq,H,hd] and k[Skv,Hkv,hd]. */
typedef struct {
    int64_t Sq, Skv;
    int H, Hkv, hd, group; /* group = H / Hkv query heads per kv head */
    int64_t ldq, ldk;      /* row strides of q-like and kv-like tensors: H·hd, Hkv·hd */
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
    a.ldq = (int64_t)a.H * a.hd;
    a.ldk = (int64_t)a.Hkv * a.hd;
    a.scale = (real)(1.0 / sqrt((double)a.hd));
    a.n = layout->n_samples;
    a.cu_q = I32DATA(&layout->cu_q);
    a.cu_q_padded = I32DATA(&layout->cu_q_padded);
    a.cu_kv = I32DATA(&layout->cu_kv);
    a.cu_kv_padded = I32DATA(&layout->cu_kv_padded);
    return a;
}

/* Keys (or values) [Skv, Hkv, hd] transposed per sample and kv head, so that a block product
 * with them runs along the keys: sample i's kv head g is a [hd, ld[i]] block at
 * off[i] + g·hd·ld[i]. ld[i] is the sample's key count rounded up to 16 plus 16: a row stride that
 * is not a multiple of 4 KiB spreads the hd rows over the cache's sets. */
typedef struct {
    real *data;
    int64_t *off, *ld;
} HeadsT;

static void heads_t_free(HeadsT *t) {
    free(t->data);
    free(t->off);
}

/* Allocates t (NULL data when out of memory; free with heads_t_free). */
static void heads_t_alloc(HeadsT *t, const AttnDims *a) {
    t->data = NULL;
    t->off = malloc((size_t)(2 * a->n + 1) * sizeof(int64_t));
    if (!t->off) return;
    t->ld = t->off + a->n + 1;
    int64_t total = 0;
    for (int i = 0; i < a->n; i++) {
        t->ld[i] = (a->cu_kv[i + 1] - a->cu_kv[i] + 15) / 16 * 16 + 16; /* whole lines in f32 and f64 */
        t->off[i] = total;
        total += t->ld[i] * a->Hkv * a->hd;
    }
    t->data = alloc_lines(total);
}

static const real *heads_t_at(const HeadsT *t, const AttnDims *a, int i, int g) {
    return t->data + t->off[i] + (int64_t)g * a->hd * t->ld[i];
}

/* Fills sample i's kv head g of t from X [Skv, Hkv, hd]. */
static void heads_t_fill(HeadsT *t, const AttnDims *a, const real *X, int i, int g) {
    int n_kv = a->cu_kv[i + 1] - a->cu_kv[i], hd = a->hd;
    int64_t ld = t->ld[i];
    real *dst = t->data + t->off[i] + (int64_t)g * hd * ld;
    const real *src = X + ((int64_t)a->cu_kv_padded[i] * a->Hkv + g) * hd;
    for (int j = 0; j < n_kv; j++)
        for (int d = 0; d < hd; d++) dst[d * ld + j] = src[j * a->ldk + d];
}

/* C[m,n] = what `out` says of alpha·A·B (block_gemm.h), A[i,p] at A[i·a_row + p·a_col]:
 * block_gemm, or OpenBLAS and then the row kernels for a width block_gemm does not take (a
 * head_dim or a key block that is not a multiple of the vector width). Either way the bits depend
 * on the shapes only. */
static void attn_gemm(int m, int n, int k, real alpha, const real *A, int64_t a_row, int64_t a_col, const real *B,
                      int64_t ldb, const GemmOut *out, real *C, int64_t ldc) {
    if (block_gemm_fits(n)) {
        block_gemm(m, n, k, alpha, A, a_row, a_col, B, ldb, out, C, ldc);
        return;
    }
    int no_trans = a_col == 1 && a_row >= k; /* else A is read as the transpose of a row-major [k, m] */
    CBLAS_GEMM(CblasRowMajor, no_trans ? CblasNoTrans : CblasTrans, CblasNoTrans, m, n, k, alpha, A,
               (int)(no_trans ? a_row : a_col), B, (int)ldb, out->kind == GEMM_ADD ? (real)1 : (real)0, C, (int)ldc);
    for (int r = 0; r < m && out->kind == GEMM_STORE_MAX; r++) {
        real mx = row_max(C + r * ldc, n), *lanes = out->lane_max + (int64_t)r * GEMM_VL;
        lanes[0] = mx > lanes[0] ? mx : lanes[0];
    }
    for (int r = 0; r < m && out->kind == GEMM_EXP; r++) row_exp_shift(C + r * ldc, n, out->row[r]);
    for (int r = 0; r < m && out->kind == GEMM_SOFTMAX_GRAD; r++)
        row_softmax_grad(C + r * ldc, out->p + r * ldc, n, out->row[r]);
}

static const GemmOut GEMM_STORE_C = {GEMM_STORE, NULL, NULL, NULL}, GEMM_ADD_C = {GEMM_ADD, NULL, NULL, NULL};

/* Forward scratch per thread: S/P [ATTN_BQ, ATTN_LD] (one query block's at a time), the O
 * accumulators [ATTN_QGROUP·ATTN_BQ, hd], a block's lane maxima [ATTN_BQ, GEMM_VL], m and l. */
static int64_t forward_scratch(int hd) {
    int64_t rows = (int64_t)ATTN_QGROUP * ATTN_BQ;
    return whole_lines((int64_t)ATTN_BQ * ATTN_LD + rows * hd + (int64_t)ATTN_BQ * GEMM_VL + 2 * rows);
}

/* One key block of one query block (rows [0, bq) of q, its acc, m and l): S = scale·Q·Kᵀ with the
 * rows' maxima, then in row strips of one micro-tile's height P = exp(S − m) with the running max
 * and sum, and O += P·V while the strip's probabilities are still in L1 (each element sums the
 * same products in the same order as one call over all rows; widths block_gemm does not take go
 * to OpenBLAS in one call). */
static void forward_block(const AttnDims *a, int bq, int kb, int bk, const real *q, const real *kt, int64_t ldt,
                          const real *v, real *s, real *lanes, real *acc, real *m, real *l) {
    int hd = a->hd;
    GemmOut to_s = {GEMM_STORE_MAX, NULL, NULL, lanes}; /* the block's row maxima come with S */
    for (int64_t x = 0; x < (int64_t)bq * GEMM_VL; x++) lanes[x] = -INFINITY;
    attn_gemm(bq, bk, hd, a->scale, q, a->ldq, 1, kt + kb, ldt, &to_s, s, ATTN_LD);
    int strip = block_gemm_fits(hd) ? GEMM_MR : bq;
    for (int r0 = 0; r0 < bq; r0 += strip) {
        int r1 = imin(r0 + strip, bq);
        for (int r = r0; r < r1; r++) {
            real *sr = s + (int64_t)r * ATTN_LD, mb = row_max(lanes + (int64_t)r * GEMM_VL, GEMM_VL);
            if (kb == 0) {
                m[r] = mb;
                l[r] = row_exp_sum(sr, sr, bk, mb);
            } else if (mb <= m[r]) { /* the max stays: the rescale would be by e^0 = 1 */
                l[r] = l[r] + row_exp_sum(sr, sr, bk, m[r]);
            } else {
                real corr = exp(m[r] - mb);
                l[r] = l[r] * corr + row_exp_sum(sr, sr, bk, mb);
                row_scale(acc + (int64_t)r * hd, hd, corr);
                m[r] = mb;
            }
        }
        attn_gemm(r1 - r0, hd, bk, 1, s + (int64_t)r0 * ATTN_LD, ATTN_LD, 1, v, a->ldk,
                  kb != 0 ? &GEMM_ADD_C : &GEMM_STORE_C, acc + (int64_t)r0 * hd, hd);
    }
}

/* o and lse of up to ATTN_QGROUP blocks of query rows of one sample and head: the key blocks in
 * the outer loop, so that each key and value block serves the group's query blocks while it is in
 * cache (at 8,192 keys a head's K and V no longer fit in L2, and a single query block per pass
 * would stream them from L3 once per 64 rows). Each query block's own sequence of operations is
 * the same as alone. */
static void forward_tile(const AttnDims *a, const AttnTile *t, real *O, real *LSE, const real *Q, const HeadsT *Kt,
                         const real *V, real *scratch) {
    int i = t->sample, h = t->head, g = h / a->group, hd = a->hd, rows = t->rows;
    int n_kv = a->cu_kv[i + 1] - a->cu_kv[i];
    int64_t kv0 = a->cu_kv_padded[i], q0 = a->cu_q_padded[i] + t->row0;
    real *orows = O + (q0 * a->H + h) * hd, *lse = LSE + q0 * a->H + h;
    if (n_kv == 0) {
        zero_rows(orows, rows, a->ldq, hd);
        for (int r = 0; r < rows; r++) lse[(int64_t)r * a->H] = -INFINITY;
        return;
    }
    int64_t group_rows = (int64_t)ATTN_QGROUP * ATTN_BQ;
    real *s = scratch, *acc = s + (int64_t)ATTN_BQ * ATTN_LD, *lanes = acc + group_rows * hd,
         *m = lanes + (int64_t)ATTN_BQ * GEMM_VL, *l = m + group_rows;
    const real *q = Q + (q0 * a->H + h) * hd, *kt = heads_t_at(Kt, a, i, g);
    for (int kb = 0; kb < n_kv; kb += ATTN_BK) {
        int bk = imin(ATTN_BK, n_kv - kb);
        const real *v = V + ((kv0 + kb) * a->Hkv + g) * hd;
        for (int qb = 0; qb < rows; qb += ATTN_BQ)
            forward_block(a, imin(ATTN_BQ, rows - qb), kb, bk, q + (int64_t)qb * a->ldq, kt, Kt->ld[i], v, s, lanes,
                          acc + (int64_t)qb * hd, m + qb, l + qb);
    }
    for (int r = 0; r < rows; r++) {
        real *orow = orows + r * a->ldq, inv = 1 / l[r];
        for (int d = 0; d < hd; d++) orow[d] = acc[(int64_t)r * hd + d] * inv;
        lse[(int64_t)r * a->H] = m[r] + log(l[r]);
    }
}

vfm_status CPU_FN(attention_forward)(Tensor *o, Tensor *lse, const Tensor *q, const Tensor *k, const Tensor *v,
                                     const VarlenLayout *layout) {
    AttnDims a = attn_dims(q, k, layout);
    real *O = RDATA(o), *LSE = RDATA(lse);
    const real *Q = CRDATA(q), *K = CRDATA(k), *V = CRDATA(v);
    int64_t per_thread = forward_scratch(a.hd), n_tiles = 0, n_heads = (int64_t)a.n * a.Hkv;
    AttnTile *tiles = make_tiles(a.cu_q, a.n, a.H, ATTN_QGROUP * ATTN_BQ, &n_tiles);
    real *scratch = alloc_lines(per_thread * attn_max_threads());
    HeadsT Kt;
    heads_t_alloc(&Kt, &a);
    if (!tiles || !scratch || !Kt.data) {
        free(tiles);
        free(scratch);
        heads_t_free(&Kt);
        return vfm_fail(VFM_ERR_NOMEM, "attention_forward: out of memory for scratch");
    }
#pragma omp parallel
    {
#pragma omp for schedule(static)
        for (int64_t t = 0; t < n_heads; t++) heads_t_fill(&Kt, &a, K, (int)(t / a.Hkv), (int)(t % a.Hkv));
#pragma omp for schedule(dynamic, 1)
        for (int64_t t = 0; t < n_tiles; t++)
            forward_tile(&a, &tiles[t], O, LSE, Q, &Kt, V, scratch + attn_thread_id() * per_thread);
    }
    zero_padding_rows(O, a.Sq, a.ldq, a.cu_q, a.cu_q_padded, a.n);
    zero_padding_rows(LSE, a.Sq, a.H, a.cu_q, a.cu_q_padded, a.n);
    free(tiles);
    free(scratch);
    heads_t_free(&Kt);
    return VFM_OK;
}

/* D[r,h] = Σ_d dO[r,h,d]·O[r,h,d] over the tile's rows (the softmax backward's row term). */
static void delta_tile(const AttnDims *a, const AttnTile *t, real *Dlt, const real *dO, const real *O) {
    int64_t q0 = a->cu_q_padded[t->sample] + t->row0;
    for (int64_t r = q0; r < q0 + t->rows; r++) {
        int64_t at = r * a->H + t->head;
        const real *x = dO + at * a->hd, *y = O + at * a->hd;
        real s = 0;
        for (int d = 0; d < a->hd; d++) s += x[d] * y[d];
        Dlt[at] = s;
    }
}

/* Backward scratch per thread: P and dP/dS [ATTN_BQ, ATTN_LD], a key block's dKᵀ and dVᵀ
 * [hd, ATTN_LD], a query block's lse and D. */
static int64_t backward_scratch(int hd) {
    return whole_lines(2 * (int64_t)ATTN_BQ * ATTN_LD + 2 * (int64_t)hd * ATTN_LD + 2 * ATTN_BQ);
}

/* rows [bk, hd] (row stride ld) = t[hd, bk]ᵀ (row stride ATTN_LD) */
static void untranspose_block(real *rows, int64_t ld, const real *t, int bk, int hd) {
    for (int j = 0; j < bk; j++)
        for (int d = 0; d < hd; d++) rows[j * ld + d] = t[(int64_t)d * ATTN_LD + j];
}

/* dK, dV of one sample's kv head and dQ of its group's query heads: over key blocks, then the
 * group's query heads in order, then query blocks in order (each sum in that fixed order). */
static void backward_item(const AttnDims *a, int i, int g, real *dQ, real *dK, real *dV, const real *dO,
                          const real *Q, const real *K, const HeadsT *Kt, const HeadsT *Vt, const real *LSE,
                          const real *Dlt, real *scratch) {
    int hd = a->hd;
    int n_q = a->cu_q[i + 1] - a->cu_q[i], n_kv = a->cu_kv[i + 1] - a->cu_kv[i];
    int64_t q0 = a->cu_q_padded[i], kv0 = a->cu_kv_padded[i];
    int64_t kv_at = kv0 * a->Hkv + g; /* this kv head's first row, in units of hd */
    zero_rows(dK + kv_at * hd, n_kv, a->ldk, hd);
    zero_rows(dV + kv_at * hd, n_kv, a->ldk, hd);
    for (int h = g * a->group; h < (g + 1) * a->group; h++) zero_rows(dQ + (q0 * a->H + h) * hd, n_q, a->ldq, hd);
    real *p = scratch, *ds = p + (int64_t)ATTN_BQ * ATTN_LD, *dkt = ds + (int64_t)ATTN_BQ * ATTN_LD,
         *dvt = dkt + (int64_t)hd * ATTN_LD, *lse = dvt + (int64_t)hd * ATTN_LD, *dlt = lse + ATTN_BQ;
    const real *kt = heads_t_at(Kt, a, i, g), *vt = heads_t_at(Vt, a, i, g);
    int64_t ldt = Kt->ld[i];
    for (int kb = 0; kb < n_kv; kb += ATTN_BK) {
        int bk = imin(ATTN_BK, n_kv - kb);
        int64_t kat = (kv_at + kb * (int64_t)a->Hkv) * hd;
        const real *k = K + kat;
        real *dk = dK + kat, *dv = dV + kat;
        /* A key block block_gemm takes whole accumulates dKᵀ and dVᵀ [hd, bk] (Qᵀ·dS and dOᵀ·P:
         * B is a row of P or dS, read along the keys, and the products are wide), transposed into
         * dK and dV after its last query block; another (a sample's last, narrow block) dK and
         * dV [bk, hd] directly (dSᵀ·Q, Pᵀ·dO). Each element sums the same products in the same
         * order either way. */
        int wide = block_gemm_fits(bk);
        if (wide) zero_rows(dkt, 2 * hd, ATTN_LD, bk);
        for (int h = g * a->group; h < (g + 1) * a->group; h++)
            for (int qb = 0; qb < n_q; qb += ATTN_BQ) {
                int bq = imin(ATTN_BQ, n_q - qb);
                int64_t qrow = (q0 + qb) * a->H + h, qat = qrow * hd;
                for (int r = 0; r < bq; r++) {
                    lse[r] = LSE[qrow + (int64_t)r * a->H];
                    dlt[r] = Dlt[qrow + (int64_t)r * a->H];
                }
                GemmOut to_p = {GEMM_EXP, lse, NULL, NULL}, to_ds = {GEMM_SOFTMAX_GRAD, dlt, p, NULL};
                attn_gemm(bq, bk, hd, a->scale, Q + qat, a->ldq, 1, kt + kb, ldt, &to_p, p, ATTN_LD);
                if (wide) /* dVᵀ += dOᵀ·P */
                    attn_gemm(hd, bk, bq, 1, dO + qat, 1, a->ldq, p, ATTN_LD, &GEMM_ADD_C, dvt, ATTN_LD);
                else /* dV += Pᵀ·dO */
                    attn_gemm(bk, hd, bq, 1, p, 1, ATTN_LD, dO + qat, a->ldq, &GEMM_ADD_C, dv, a->ldk);
                attn_gemm(bq, bk, hd, 1, dO + qat, a->ldq, 1, vt + kb, ldt, &to_ds, ds, ATTN_LD);
                if (wide) /* dKᵀ += scale·Qᵀ·dS */
                    attn_gemm(hd, bk, bq, a->scale, Q + qat, 1, a->ldq, ds, ATTN_LD, &GEMM_ADD_C, dkt, ATTN_LD);
                else /* dK += scale·dSᵀ·Q */
                    attn_gemm(bk, hd, bq, a->scale, ds, 1, ATTN_LD, Q + qat, a->ldq, &GEMM_ADD_C, dk, a->ldk);
                attn_gemm(bq, hd, bk, a->scale, ds, ATTN_LD, 1, k, a->ldk, &GEMM_ADD_C, dQ + qat, a->ldq);
            }
        if (wide) {
            untranspose_block(dk, a->ldk, dkt, bk, hd);
            untranspose_block(dv, a->ldk, dvt, bk, hd);
        }
    }
}

vfm_status CPU_FN(attention_backward)(Tensor *dq, Tensor *dk, Tensor *dv, const Tensor *dout, const Tensor *q,
                                      const Tensor *k, const Tensor *v, const Tensor *o, const Tensor *lse,
                                      const VarlenLayout *layout) {
    AttnDims a = attn_dims(q, k, layout);
    real *dQ = RDATA(dq), *dK = RDATA(dk), *dV = RDATA(dv);
    const real *dO = CRDATA(dout), *Q = CRDATA(q), *K = CRDATA(k), *V = CRDATA(v), *O = CRDATA(o),
               *LSE = CRDATA(lse);
    int64_t per_thread = backward_scratch(a.hd), n_qtiles = 0, n_items = (int64_t)a.n * a.Hkv;
    AttnTile *qtiles = make_tiles(a.cu_q, a.n, a.H, ATTN_BQ, &n_qtiles);
    real *scratch = alloc_lines(per_thread * attn_max_threads());
    real *Dlt = malloc((size_t)(a.Sq * a.H + 1) * sizeof(real)); /* D[Sq,H], real rows only */
    HeadsT Kt, Vt;
    heads_t_alloc(&Kt, &a);
    heads_t_alloc(&Vt, &a);
    if (!qtiles || !scratch || !Dlt || !Kt.data || !Vt.data) {
        free(qtiles);
        free(scratch);
        free(Dlt);
        heads_t_free(&Kt);
        heads_t_free(&Vt);
        return vfm_fail(VFM_ERR_NOMEM, "attention_backward: out of memory for scratch");
    }
#pragma omp parallel
    {
        real *mine = scratch + attn_thread_id() * per_thread;
#pragma omp for schedule(static)
        for (int64_t t = 0; t < n_qtiles; t++) delta_tile(&a, &qtiles[t], Dlt, dO, O);
#pragma omp for schedule(static)
        for (int64_t t = 0; t < 2 * n_items; t++)
            heads_t_fill(t < n_items ? &Kt : &Vt, &a, t < n_items ? K : V, (int)(t % n_items / a.Hkv),
                         (int)(t % n_items % a.Hkv));
#pragma omp for schedule(dynamic, 1)
        for (int64_t t = 0; t < n_items; t++)
            backward_item(&a, (int)(t / a.Hkv), (int)(t % a.Hkv), dQ, dK, dV, dO, Q, K, &Kt, &Vt, LSE, Dlt, mine);
    }
    zero_padding_rows(dQ, a.Sq, a.ldq, a.cu_q, a.cu_q_padded, a.n);
    zero_padding_rows(dK, a.Skv, a.ldk, a.cu_kv, a.cu_kv_padded, a.n);
    zero_padding_rows(dV, a.Skv, a.ldk, a.cu_kv, a.cu_kv_padded, a.n);
    free(qtiles);
    free(scratch);
    free(Dlt);
    heads_t_free(&Kt);
    heads_t_free(&Vt);
    return VFM_OK;
}
