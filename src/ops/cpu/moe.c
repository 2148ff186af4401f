/* CPU backend: the mixture-of-experts ops (ops.h "mixture of experts"): the router's softmax,
 * top-k mask and per-sample top-C selection, the slot permutation, the combine (a segmented sum
 * in expert order) and the router's backward with its auxiliary losses. Sums over tokens run in
 * row order in double: the same bits at any thread count. */
#include <stdlib.h>
#include <string.h>

#include "real.h"

static inline int better(real a, int64_t ia, real b, int64_t ib) { return a > b || (a == b && ia < ib); }

vfm_status CPU_FN(moe_softmax)(Tensor *probs, Tensor *lse, const Tensor *logits, const Tensor *tok2sample) {
    int64_t S = tensor_dim(logits, 0), E = tensor_dim(logits, 1);
    const real *X = CRDATA(logits);
    const int32_t *t2s = I32DATA(tok2sample);
    real *P = RDATA(probs), *L = RDATA(lse);
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < S; t++) {
        real *p = P + t * E;
        if (t2s[t] < 0) {
            memset(p, 0, (size_t)E * sizeof(real));
            L[t] = 0;
            continue;
        }
        const real *x = X + t * E;
        real mx = x[0];
        for (int64_t e = 1; e < E; e++) mx = x[e] > mx ? x[e] : mx;
        double sum = 0;
        for (int64_t e = 0; e < E; e++) sum += (double)(p[e] = exp(x[e] - mx));
        for (int64_t e = 0; e < E; e++) p[e] = (real)(p[e] / sum);
        L[t] = (real)(mx + log(sum));
    }
    return VFM_OK;
}

vfm_status CPU_FN(moe_topk_mask)(Tensor *masked, const Tensor *scores, const Tensor *tok2sample, int k) {
    int64_t S = tensor_dim(scores, 0), E = tensor_dim(scores, 1);
    const real *X = CRDATA(scores);
    const int32_t *t2s = I32DATA(tok2sample);
    real *M = RDATA(masked);
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < S; t++) {
        const real *x = X + t * E;
        for (int64_t e = 0; e < E; e++) {
            int64_t rank = 0; /* entries of the row before e in (score desc, expert asc) */
            for (int64_t j = 0; j < E && rank < k; j++) rank += better(x[j], j, x[e], e);
            M[t * E + e] = t2s[t] >= 0 && rank < k ? x[e] : (real)-INFINITY;
        }
    }
    return VFM_OK;
}

typedef struct {
    const real *x;
    int64_t E;
} ColumnOrder;

static int by_score(const void *a, const void *b, void *ctx) {
    const ColumnOrder *c = ctx;
    int64_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    real si = c->x[i * c->E], sj = c->x[j * c->E];
    return better(si, i, sj, j) ? -1 : better(sj, j, si, i) ? 1 : 0;
}

vfm_status CPU_FN(moe_topc)(Tensor *slot_tok, Tensor *slot_w, Tensor *tok_slot, const Tensor *scores,
                            const Tensor *cu_tok, const Tensor *cu_cap) {
    int64_t S = tensor_dim(scores, 0), E = tensor_dim(scores, 1), C = tensor_dim(slot_tok, 1);
    int64_t B = tensor_dim(cu_tok, 0) - 1;
    const real *X = CRDATA(scores);
    const int32_t *cu = I32DATA(cu_tok), *cc = I32DATA(cu_cap);
    int32_t *st = (int32_t *)slot_tok->data, *ts = (int32_t *)tok_slot->data;
    real *W = RDATA(slot_w);
    for (int64_t i = 0; i < S * E; i++) ts[i] = -1;
    int64_t T_max = 0;
    for (int64_t b = 0; b < B; b++) T_max = cu[b + 1] - cu[b] > T_max ? cu[b + 1] - cu[b] : T_max;
    int32_t *order_all = malloc((size_t)(T_max > 0 ? T_max : 1) * (size_t)(B * E) * sizeof(int32_t));
    if (!order_all) return vfm_fail(VFM_ERR_NOMEM, "moe_topc: %lld indices", (long long)(T_max * B * E));
#pragma omp parallel for schedule(dynamic)
    for (int64_t be = 0; be < B * E; be++) {
        int64_t b = be / E, e = be % E, t0 = cu[b], T = cu[b + 1] - cu[b], c0 = cc[b], Cb = cc[b + 1] - cc[b];
        int32_t *order = order_all + be * T_max;
        for (int64_t i = 0; i < T; i++) order[i] = (int32_t)(t0 + i);
        ColumnOrder ctx = {X + e, E};
        qsort_r(order, (size_t)T, sizeof *order, by_score, &ctx);
        for (int64_t c = 0; c < Cb; c++) {
            int64_t s = e * C + c0 + c;
            int ok = c < T && X[(int64_t)order[c] * E + e] > (real)-INFINITY;
            st[s] = ok ? order[c] : -1;
            W[s] = ok ? X[(int64_t)order[c] * E + e] : 0;
            if (ok) ts[(int64_t)order[c] * E + e] = (int32_t)s;
        }
    }
    free(order_all);
    return VFM_OK;
}

vfm_status CPU_FN(moe_permute)(Tensor *xe, const Tensor *x, const Tensor *slot_tok) {
    int64_t N = tensor_dim(xe, 0), D = tensor_dim(xe, 1);
    const int32_t *st = I32DATA(slot_tok);
    const real *X = CRDATA(x);
    real *Y = RDATA(xe);
#pragma omp parallel for schedule(static)
    for (int64_t s = 0; s < N; s++) {
        if (st[s] >= 0) memcpy(Y + s * D, X + (int64_t)st[s] * D, (size_t)D * sizeof(real));
        else memset(Y + s * D, 0, (size_t)D * sizeof(real));
    }
    return VFM_OK;
}

vfm_status CPU_FN(moe_combine)(Tensor *y, const Tensor *ye, const Tensor *w, const Tensor *tok_slot) {
    int64_t S = tensor_dim(y, 0), D = tensor_dim(y, 1), E = tensor_dim(tok_slot, 1);
    const int32_t *ts = I32DATA(tok_slot);
    const real *Ye = CRDATA(ye), *W = w ? CRDATA(w) : NULL;
    real *Y = RDATA(y);
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < S; t++) {
        real *out = Y + t * D;
        memset(out, 0, (size_t)D * sizeof(real));
        for (int64_t e = 0; e < E; e++) {
            int32_t s = ts[t * E + e];
            if (s < 0) continue;
            real g = W ? W[s] : (real)1;
            const real *in = Ye + (int64_t)s * D;
            for (int64_t d = 0; d < D; d++) out[d] += g * in[d];
        }
    }
    return VFM_OK;
}

vfm_status CPU_FN(moe_combine_backward)(Tensor *dye, Tensor *dw, const Tensor *dy, const Tensor *ye, const Tensor *w,
                                        const Tensor *slot_tok) {
    int64_t N = tensor_dim(dye, 0), D = tensor_dim(dye, 1);
    const int32_t *st = I32DATA(slot_tok);
    const real *dY = CRDATA(dy), *Ye = CRDATA(ye), *W = CRDATA(w);
    real *dYe = RDATA(dye), *dW = RDATA(dw);
#pragma omp parallel for schedule(static)
    for (int64_t s = 0; s < N; s++) {
        real *out = dYe + s * D;
        if (st[s] < 0) {
            memset(out, 0, (size_t)D * sizeof(real));
            dW[s] = 0;
            continue;
        }
        const real *g = dY + (int64_t)st[s] * D, *v = Ye + s * D;
        double dot = 0;
        for (int64_t d = 0; d < D; d++) out[d] = W[s] * g[d], dot += (double)g[d] * (double)v[d];
        dW[s] = (real)dot;
    }
    return VFM_OK;
}

/* T real rows and f_e·T·k (the rows whose masked entry is kept) into cnt[E]. */
static int64_t route_counts(double *cnt, const real *M, const int32_t *t2s, int64_t S, int64_t E) {
    int64_t T = 0;
    for (int64_t e = 0; e < E; e++) cnt[e] = 0;
    for (int64_t t = 0; t < S; t++) {
        if (t2s[t] < 0) continue;
        T++;
        if (M)
            for (int64_t e = 0; e < E; e++) cnt[e] += M[t * E + e] > (real)-INFINITY;
    }
    return T;
}

vfm_status CPU_FN(moe_router_losses)(Tensor *out, const Tensor *probs, const Tensor *lse, const Tensor *masked,
                                     const Tensor *tok2sample, int k) {
    int64_t S = tensor_dim(probs, 0), E = tensor_dim(probs, 1);
    const real *P = CRDATA(probs), *L = CRDATA(lse);
    const int32_t *t2s = I32DATA(tok2sample);
    double *cnt = calloc((size_t)E, sizeof *cnt), *psum = calloc((size_t)E, sizeof *psum), z = 0;
    if (!cnt || !psum) return free(cnt), free(psum), vfm_fail(VFM_ERR_NOMEM, "moe_router_losses");
    int64_t T = route_counts(cnt, CRDATA(masked), t2s, S, E);
    for (int64_t t = 0; t < S; t++) {
        if (t2s[t] < 0) continue;
        z += (double)L[t] * (double)L[t];
        for (int64_t e = 0; e < E; e++) psum[e] += P[t * E + e];
    }
    double aux = 0;
    for (int64_t e = 0; e < E; e++) aux += (cnt[e] / ((double)T * k)) * (psum[e] / (double)T);
    real *O = RDATA(out);
    O[0] = T > 0 ? (real)(E * aux) : 0;
    O[1] = T > 0 ? (real)(z / (double)T) : 0;
    free(cnt), free(psum);
    return VFM_OK;
}

vfm_status CPU_FN(moe_router_backward)(Tensor *dlogits, const Tensor *dw, const Tensor *tok_slot, const Tensor *probs,
                                       const Tensor *lse, const Tensor *masked, const Tensor *tok2sample, int k,
                                       float aux, float z) {
    int64_t S = tensor_dim(probs, 0), E = tensor_dim(probs, 1);
    const real *P = CRDATA(probs), *L = CRDATA(lse), *dW = CRDATA(dw);
    const int32_t *t2s = I32DATA(tok2sample), *ts = I32DATA(tok_slot);
    real *dX = RDATA(dlogits);
    double *cnt = calloc((size_t)E, sizeof *cnt);
    if (!cnt) return vfm_fail(VFM_ERR_NOMEM, "moe_router_backward");
    int64_t T = route_counts(cnt, aux != 0 ? CRDATA(masked) : NULL, t2s, S, E);
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < S; t++) {
        real *dx = dX + t * E;
        const real *p = P + t * E;
        if (t2s[t] < 0) {
            memset(dx, 0, (size_t)E * sizeof(real));
            continue;
        }
        double dot = 0;
        for (int64_t e = 0; e < E; e++) {
            int32_t s = ts[t * E + e];
            double g = s >= 0 ? (double)dW[s] : 0;
            if (aux != 0) g += (double)aux * (double)E * (cnt[e] / ((double)T * k)) / (double)T;
            dx[e] = (real)g;
            dot += (double)p[e] * g;
        }
        double zt = z != 0 ? 2.0 * (double)z * (double)L[t] / (double)T : 0;
        for (int64_t e = 0; e < E; e++) dx[e] = (real)((double)p[e] * ((double)dx[e] - dot + zt));
    }
    free(cnt);
    return VFM_OK;
}
