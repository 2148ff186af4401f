/* The mixture-of-experts ops (ops.h "mixture of experts") on the CPU: the selections against hand
 * values and a brute-force recount (ties by score desc, index asc; never across samples; padding
 * never taken; every expert exactly C_b tokens under expert choice), the permute and combine
 * against direct sums, and the router's backward (gates, load-balancing and z losses) and the
 * grouped GEMM against central differences in f64. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops.h"
#include "test.h"

TEST(moe_topk_mask_breaks_ties_by_expert_index) {
    /* row 0: experts 1 and 2 tie for the top; row 1 padding; row 2 all equal */
    float s[3 * 4] = {0.1f, 0.5f, 0.5f, 0.2f, 9, 9, 9, 9, 0.3f, 0.3f, 0.3f, 0.3f}, m[12];
    int32_t t2s[3] = {0, -1, 1};
    Tensor S = TF32(s, 3, 4), M = TF32(m, 3, 4), T2S = TI32(t2s, 3);
    REQUIRE_OK(op_moe_topk_mask(&M, &S, &T2S, 1));
    float ni = -INFINITY;
    float want1[12] = {ni, 0.5f, ni, ni, ni, ni, ni, ni, 0.3f, ni, ni, ni};
    CHECK(memcmp(m, want1, sizeof m) == 0);
    REQUIRE_OK(op_moe_topk_mask(&M, &S, &T2S, 2));
    float want2[12] = {ni, 0.5f, 0.5f, ni, ni, ni, ni, ni, 0.3f, 0.3f, ni, ni};
    CHECK(memcmp(m, want2, sizeof m) == 0);
    CHECK(op_moe_topk_mask(&M, &S, &T2S, 5) == VFM_ERR_SHAPE);
}

enum { PS = 11, PE = 3, PB = 2 };
/* A pack of two samples in padded slots [0, 6) and [6, 11): rows [0, 5) and [6, 10) real, 5 and 10
 * padding (-inf in every score the router hands on). */
static const int32_t kT2S[PS] = {0, 0, 0, 0, 0, -1, 1, 1, 1, 1, -1};

/* The brute-force answer: slot c of (b, e) holds the row with exactly c better rows of the sample. */
static void brute_topc(int32_t *st, const float *x, const int32_t *cu, const int32_t *cc, int C) {
    for (int i = 0; i < PE * C; i++) st[i] = -1;
    for (int b = 0; b < PB; b++)
        for (int e = 0; e < PE; e++)
            for (int t = cu[b]; t < cu[b + 1]; t++) {
                float v = x[t * PE + e];
                if (v == -INFINITY) continue;
                int rank = 0;
                for (int j = cu[b]; j < cu[b + 1]; j++)
                    rank += x[j * PE + e] > v || (x[j * PE + e] == v && j < t);
                if (rank < cc[b + 1] - cc[b]) st[e * C + cc[b] + rank] = t;
            }
}

TEST(moe_topc_selects_per_sample_with_fixed_ties) {
    float x[PS * PE];
    test_fill_uniform_f32(x, PS * PE, 3, 0, 1);
    x[1 * PE + 0] = x[3 * PE + 0] = 0.99f; /* a tie for expert 0: row 1 before row 3 */
    for (int e = 0; e < PE; e++) x[5 * PE + e] = x[10 * PE + e] = -INFINITY; /* padding, as the router masks it */
    int32_t cu[PB + 1] = {0, 6, 11}, cc[PB + 1] = {0, 2, 5}; /* C_0 = 2, C_1 = 3 */
    enum { C = 5 };
    int32_t st[PE * C], ts[PS * PE], want[PE * C];
    float w[PE * C];
    Tensor X = TF32(x, PS, PE), ST = TI32(st, PE, C), W = TF32(w, PE, C), TS = TI32(ts, PS, PE);
    Tensor CU = TI32(cu, PB + 1), CC = TI32(cc, PB + 1);
    REQUIRE_OK(op_moe_topc(&ST, &W, &TS, &X, &CU, &CC));
    brute_topc(want, x, cu, cc, C);
    CHECK(memcmp(st, want, sizeof st) == 0);
    CHECK(st[0] == 1 && st[1] == 3);                    /* the tie */
    for (int e = 0; e < PE; e++) {                      /* exactly C_b tokens per expert and sample */
        for (int c = 0; c < C; c++) {
            int t = st[e * C + c], b = c < 2 ? 0 : 1;
            CHECK(t >= cu[b] && t < cu[b + 1] && kT2S[t] == b);
            CHECK(w[e * C + c] == x[t * PE + e] && ts[t * PE + e] == e * C + c);
        }
    }
    int mapped = 0;
    for (int i = 0; i < PS * PE; i++) mapped += ts[i] >= 0;
    CHECK(mapped == PE * C);
    /* token choice: candidates masked to -inf leave slots empty */
    float m[PS * PE];
    Tensor M = TF32(m, PS, PE), T2S = TI32((int32_t *)kT2S, PS);
    REQUIRE_OK(op_moe_topk_mask(&M, &X, &T2S, 1));
    int32_t cc2[PB + 1] = {0, 3, 5};
    Tensor CC2 = TI32(cc2, PB + 1);
    REQUIRE_OK(op_moe_topc(&ST, &W, &TS, &M, &CU, &CC2));
    brute_topc(want, m, cu, cc2, C);
    CHECK(memcmp(st, want, sizeof st) == 0);
    for (int i = 0; i < PE * C; i++) CHECK(st[i] >= 0 || w[i] == 0);
    for (int t = 0; t < PS; t++) { /* top-1: a token sits in at most one slot */
        int n = 0;
        for (int e = 0; e < PE; e++) n += ts[t * PE + e] >= 0;
        CHECK(n <= 1);
    }
    int32_t bad[PB + 1] = {0, 3, 6};
    Tensor BAD = TI32(bad, PB + 1);
    CHECK(op_moe_topc(&ST, &W, &TS, &M, &CU, &BAD) == VFM_ERR_SHAPE);
}

TEST(moe_permute_and_combine_are_direct_sums) {
    enum { S = 4, E = 2, C = 3, D = 5, N = E * C };
    int32_t st[N] = {2, 0, -1, 0, 3, 1}, ts[S * E] = {1, 3, -1, 5, 0, -1, -1, 4};
    float x[S * D], xe[N * D], ye[N * D], w[N] = {0.5f, -1, 0, 2, 0.25f, 3}, y[S * D];
    test_fill_uniform_f32(x, S * D, 5, -1, 1);
    test_fill_uniform_f32(ye, N * D, 6, -1, 1);
    Tensor X = TF32(x, S, D), XE = TF32(xe, N, D), YE = TF32(ye, N, D), W = TF32(w, N), Y = TF32(y, S, D);
    Tensor ST = TI32(st, E, C), TS = TI32(ts, S, E);
    REQUIRE_OK(op_moe_permute(&XE, &X, &ST));
    for (int s = 0; s < N; s++)
        for (int d = 0; d < D; d++) CHECK(xe[s * D + d] == (st[s] >= 0 ? x[st[s] * D + d] : 0.f));
    REQUIRE_OK(op_moe_combine(&Y, &YE, &W, &TS));
    for (int t = 0; t < S; t++)
        for (int d = 0; d < D; d++) {
            float want = 0;
            for (int e = 0; e < E; e++)
                if (ts[t * E + e] >= 0) want += w[ts[t * E + e]] * ye[ts[t * E + e] * D + d];
            CHECK(y[t * D + d] == want);
        }
    REQUIRE_OK(op_moe_combine(&Y, &YE, NULL, &TS)); /* the permute's backward */
    CHECK(y[2 * D] == ye[0] && y[0] == ye[1 * D] + ye[3 * D]);
    float dy[S * D], dye[N * D], dw[N];
    test_fill_uniform_f32(dy, S * D, 7, -1, 1);
    Tensor DY = TF32(dy, S, D), DYE = TF32(dye, N, D), DW = TF32(dw, N);
    REQUIRE_OK(op_moe_combine_backward(&DYE, &DW, &DY, &YE, &W, &ST));
    for (int s = 0; s < N; s++) {
        double dot = 0;
        for (int d = 0; d < D; d++) {
            CHECK(dye[s * D + d] == (st[s] >= 0 ? w[s] * dy[st[s] * D + d] : 0.f));
            if (st[s] >= 0) dot += (double)dy[st[s] * D + d] * ye[s * D + d];
        }
        CHECK(dw[s] == (float)dot);
    }
    int32_t bad[N] = {2, 0, -1, 0, 4, 1};
    Tensor BAD = TI32(bad, E, C);
    CHECK(op_moe_permute(&XE, &X, &BAD) == VFM_ERR_SHAPE);
}

/* f64: L(logits) = Σ_s dw_s·probs[slot] + aux·L_aux + z·L_z with the routing held fixed. */
typedef struct {
    double logits[PS * PE], probs[PS * PE], lse[PS], masked[PS * PE], dwv[PE * 5], out[2];
    int32_t st[PE * 5], ts[PS * PE];
    int k;
    double aux, z;
} RouterCase;

static double router_loss(RouterCase *c) {
    Tensor LG = TF64(c->logits, PS, PE), P = TF64(c->probs, PS, PE), L = TF64(c->lse, PS), T2S = TI32((int32_t *)kT2S, PS);
    Tensor M = TF64(c->masked, PS, PE), O = TF64(c->out, 2);
    CHECK_OK(op_moe_softmax(&P, &L, &LG, &T2S));
    CHECK_OK(op_moe_router_losses(&O, &P, &L, &M, &T2S, c->k));
    double s = 0;
    for (int i = 0; i < PE * 5; i++)
        if (c->st[i] >= 0) s += c->dwv[i] * c->probs[c->st[i] * PE + i / 5];
    return s + c->aux * c->out[0] + c->z * c->out[1];
}

TEST(moe_router_backward_matches_central_differences) {
    for (int k = 1; k <= 2; k++) {
        RouterCase c;
        memset(&c, 0, sizeof c);
        c.k = k, c.aux = 0.3, c.z = 0.7;
        test_fill_uniform_f64(c.logits, PS * PE, 20 + k, -2, 2);
        test_fill_uniform_f64(c.dwv, PE * 5, 30 + k, -1, 1);
        Tensor LG = TF64(c.logits, PS, PE), P = TF64(c.probs, PS, PE), L = TF64(c.lse, PS);
        Tensor T2S = TI32((int32_t *)kT2S, PS), M = TF64(c.masked, PS, PE);
        REQUIRE_OK(op_moe_softmax(&P, &L, &LG, &T2S));
        REQUIRE_OK(op_moe_topk_mask(&M, &P, &T2S, k));
        int32_t cu[PB + 1] = {0, 6, 11}, cc[PB + 1] = {0, 2, 5};
        double w[PE * 5];
        Tensor ST = TI32(c.st, PE, 5), W = TF64(w, PE, 5), TS = TI32(c.ts, PS, PE), CU = TI32(cu, PB + 1),
               CC = TI32(cc, PB + 1), DWV = TF64(c.dwv, PE * 5);
        REQUIRE_OK(op_moe_topc(&ST, &W, &TS, &M, &CU, &CC));
        double dl[PS * PE];
        Tensor DL = TF64(dl, PS, PE);
        REQUIRE_OK(op_moe_router_backward(&DL, &DWV, &TS, &P, &L, &M, &T2S, k, (float)c.aux, (float)c.z));
        double worst = 0, big = 0;
        for (int i = 0; i < PS * PE; i++) {
            double keep = c.logits[i], h = 1e-5;
            c.logits[i] = keep + h;
            double lp = router_loss(&c);
            c.logits[i] = keep - h;
            double lm = router_loss(&c);
            c.logits[i] = keep;
            worst = fmax(worst, fabs((lp - lm) / (2 * h) - dl[i]));
            big = fmax(big, fabs(dl[i]));
        }
        CHECK_MSG(big > 0.01 && worst < 1e-8, "k %d: |numeric - analytic| %.3g (largest %.3g)", k, worst, big);
        CHECK(dl[5 * PE] == 0 && dl[10 * PE + 1] == 0); /* padding rows */
    }
}

TEST(moe_grouped_linear_is_one_gemm_per_group) {
    enum { G = 3, C = 4, IN = 5, OUT = 6 };
    double x[G * C * IN], w[G * OUT * IN], y[G * C * OUT], pre[G * C * OUT], y1[C * OUT];
    test_fill_uniform_f64(x, G * C * IN, 40, -1, 1);
    test_fill_uniform_f64(w, G * OUT * IN, 41, -1, 1);
    Tensor X = TF64(x, G * C, IN), W = TF64(w, G * OUT, IN), Y = TF64(y, G * C, OUT), PRE = TF64(pre, G * C, OUT);
    REQUIRE_OK(op_grouped_linear_forward(&Y, &PRE, &X, &W, G, ACT_GELU_TANH));
    for (int g = 0; g < G; g++) {
        Tensor Xg = TF64(x + g * C * IN, C, IN), Wg = TF64(w + g * OUT * IN, OUT, IN), Y1 = TF64(y1, C, OUT);
        double p1[C * OUT];
        Tensor P1 = TF64(p1, C, OUT);
        REQUIRE_OK(op_linear_forward(&Y1, &P1, &Xg, &Wg, NULL, ACT_GELU_TANH));
        CHECK(memcmp(y1, y + g * C * OUT, sizeof y1) == 0);
    }
    /* backward against central differences of Σ y·r */
    double r[G * C * OUT], dy[G * C * OUT], dx[G * C * IN], dw[G * OUT * IN];
    test_fill_uniform_f64(r, G * C * OUT, 42, -1, 1);
    memcpy(dy, r, sizeof dy), memset(dw, 0, sizeof dw);
    Tensor DY = TF64(dy, G * C, OUT), DX = TF64(dx, G * C, IN), DW = TF64(dw, G * OUT, IN);
    REQUIRE_OK(op_grouped_linear_backward(&DX, &DW, &DY, &X, &W, &PRE, G, ACT_GELU_TANH, 0));
    double worst = 0;
    for (int pass = 0; pass < 2; pass++) {
        double *v = pass ? w : x, *gr = pass ? dw : dx;
        int n = pass ? G * OUT * IN : G * C * IN;
        for (int i = 0; i < n; i += 7) {
            double keep = v[i], h = 1e-6, l[2];
            for (int sgn = 0; sgn < 2; sgn++) {
                v[i] = keep + (sgn ? -h : h);
                REQUIRE_OK(op_grouped_linear_forward(&Y, &PRE, &X, &W, G, ACT_GELU_TANH));
                l[sgn] = 0;
                for (int j = 0; j < G * C * OUT; j++) l[sgn] += y[j] * r[j];
            }
            v[i] = keep;
            worst = fmax(worst, fabs((l[0] - l[1]) / (2 * h) - gr[i]));
        }
    }
    CHECK_MSG(worst < 1e-7, "grouped linear: |numeric - analytic| %.3g", worst);
    Tensor W2 = TF64(w, G * OUT - 1, IN);
    CHECK(op_grouped_linear_forward(&Y, &PRE, &X, &W2, G, ACT_NONE) == VFM_ERR_SHAPE);
}
