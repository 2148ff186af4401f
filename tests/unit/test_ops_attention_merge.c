/* op_attention_merge: the closed form (attention over a key set = the merge of attentions over
 * any split of it, f64 and f32, with empty halves), hand-computed values, -inf on both sides,
 * NaN padding never read and written 0, and argument checks. The op has no backward (ring
 * attention differentiates each block with the merged o and lse; tests/mpi/test_cp_attention.c
 * checks those gradients against the single-rank op). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops.h"
#include "test.h"

/* Three samples: query lengths 4, 3, 2 in slots 5, 3, 4 (Sq = 12); keys split at `cut[i]` of each
 * sample's key rows [cu_kv_padded[i], +len): part A gets the first cut, part B the rest. Sample 2
 * has no keys at all (both parts empty); sample 1's part A is empty. */
#define N 3
static const int32_t CU_Q[N + 1] = {0, 4, 7, 9}, CU_Q_PAD[N + 1] = {0, 5, 8, 12};
static const int32_t LEN_KV[N] = {6, 5, 0}, CUT[N] = {2, 0, 0}, KV_PAD[N + 1] = {0, 7, 13, 14};
enum { H = 2, HKV = 1, HD = 4, SQ = 12, SKV = 14 };

typedef struct {
    int32_t cu_kv[N + 1], cu_kv_padded[N + 1];
    VarlenLayout l;
} Layout;

/* part 0: all keys; 1: the first CUT rows; 2: the rest. */
static void make_layout(Layout *L, int part, int32_t *cu_q, int32_t *cu_q_pad) {
    L->cu_kv[0] = 0;
    int max_kv = 0;
    for (int i = 0; i < N; i++) {
        int len = part == 0 ? LEN_KV[i] : part == 1 ? CUT[i] : LEN_KV[i] - CUT[i];
        L->cu_kv[i + 1] = L->cu_kv[i] + len;
        L->cu_kv_padded[i] = KV_PAD[i] + (part == 2 ? CUT[i] : 0);
        if (len > max_kv) max_kv = len;
    }
    L->cu_kv_padded[N] = KV_PAD[N];
    L->l.n_samples = N;
    L->l.cu_q = TI32(cu_q, N + 1);
    L->l.cu_q_padded = TI32(cu_q_pad, N + 1);
    L->l.cu_kv = TI32(L->cu_kv, N + 1);
    L->l.cu_kv_padded = TI32(L->cu_kv_padded, N + 1);
    L->l.max_q = 4;
    L->l.max_kv = max_kv;
}

static Tensor alloc3(DType dt, int64_t a, int64_t b, int64_t c) {
    Tensor t;
    tensor_alloc(&t, dt, DEV_CPU, 3, (int64_t[]){a, b, c});
    return t;
}

static Tensor alloc2(DType dt, int64_t a, int64_t b) {
    Tensor t;
    tensor_alloc(&t, dt, DEV_CPU, 2, (int64_t[]){a, b});
    return t;
}

static double at(const Tensor *t, int64_t i) {
    return t->dtype == DT_F64 ? ((const double *)t->data)[i] : ((const float *)t->data)[i];
}

static void fill(Tensor *t, uint64_t seed) {
    if (t->dtype == DT_F64) test_fill_uniform_f64(t->data, tensor_numel(t), seed, -1, 1);
    else test_fill_uniform_f32(t->data, tensor_numel(t), seed, -1, 1);
}

static int is_real_q_row(int64_t r) {
    for (int i = 0; i < N; i++)
        if (r >= CU_Q_PAD[i] && r < CU_Q_PAD[i] + CU_Q[i + 1] - CU_Q[i]) return 1;
    return 0;
}

/* Sets the padding query rows of t ([SQ, ...]) to NaN. */
static void nan_padding(Tensor *t) {
    int64_t per = tensor_numel(t) / SQ;
    for (int64_t r = 0; r < SQ; r++)
        if (!is_real_q_row(r))
            for (int64_t e = 0; e < per; e++) {
                if (t->dtype == DT_F64) ((double *)t->data)[r * per + e] = NAN;
                else ((float *)t->data)[r * per + e] = NAN;
            }
}

/* Attention over all keys vs the merge of the two parts' attentions. */
static void closed_form(DType dt, double tol) {
    int32_t cu_q[N + 1], cu_q_pad[N + 1];
    memcpy(cu_q, CU_Q, sizeof cu_q);
    memcpy(cu_q_pad, CU_Q_PAD, sizeof cu_q_pad);
    Layout all, a, b;
    make_layout(&all, 0, cu_q, cu_q_pad);
    make_layout(&a, 1, cu_q, cu_q_pad);
    make_layout(&b, 2, cu_q, cu_q_pad);
    Tensor q = alloc3(dt, SQ, H, HD), k = alloc3(dt, SKV, HKV, HD), v = alloc3(dt, SKV, HKV, HD);
    Tensor o = alloc3(dt, SQ, H, HD), oa = alloc3(dt, SQ, H, HD), ob = alloc3(dt, SQ, H, HD);
    Tensor lse = alloc2(dt, SQ, H), la = alloc2(dt, SQ, H), lb = alloc2(dt, SQ, H);
    fill(&q, 1);
    fill(&k, 2);
    fill(&v, 3);
    REQUIRE_OK(op_attention_forward(&o, &lse, &q, &k, &v, &all.l));
    REQUIRE_OK(op_attention_forward(&oa, &la, &q, &k, &v, &a.l));
    REQUIRE_OK(op_attention_forward(&ob, &lb, &q, &k, &v, &b.l));
    /* the parts' padding rows hold NaN: the merge must never read them */
    nan_padding(&oa), nan_padding(&la), nan_padding(&ob), nan_padding(&lb);
    REQUIRE_OK(op_attention_merge(&oa, &la, &ob, &lb, &a.l));
    double max_ref = 0, worst = 0;
    for (int64_t i = 0; i < SQ * H * HD; i++) {
        if (fabs(at(&o, i)) > max_ref) max_ref = fabs(at(&o, i));
        if (fabs(at(&oa, i) - at(&o, i)) > worst || isnan(at(&oa, i))) worst = isnan(at(&oa, i)) ? INFINITY : fabs(at(&oa, i) - at(&o, i));
    }
    CHECK_MSG(worst <= tol * max_ref, "%s: merged o differs from the full attention by %g (max |o| %g)",
              dtype_name(dt), worst, max_ref);
    for (int64_t r = 0; r < SQ; r++)
        for (int h = 0; h < H; h++) {
            double got = at(&la, r * H + h), want = at(&lse, r * H + h);
            int sample2 = r >= CU_Q_PAD[2] && r < CU_Q_PAD[2] + 2;
            if (sample2) CHECK_MSG(isinf(got) && got < 0, "row %lld: no keys, lse %g", (long long)r, got);
            else if (!is_real_q_row(r)) CHECK_MSG(got == 0, "padding row %lld: lse %g", (long long)r, got);
            else CHECK_MSG(fabs(got - want) <= tol * (1 + fabs(want)), "row %lld head %d: lse %.17g, want %.17g",
                           (long long)r, h, got, want);
        }
    for (int64_t r = 0; r < SQ; r++)
        if (!is_real_q_row(r))
            for (int64_t e = 0; e < H * HD; e++) CHECK(at(&oa, r * H * HD + e) == 0);
    Tensor *all_t[] = {&q, &k, &v, &o, &oa, &ob, &lse, &la, &lb};
    for (int i = 0; i < 9; i++) tensor_free(all_t[i]);
}

TEST(attention_merge_closed_form_f64) { closed_form(DT_F64, 1e-13); }
TEST(attention_merge_closed_form_f32) { closed_form(DT_F32, 1e-6); }

/* One row, one head, hd 2: (o = [1, 2], lse = 0) with (o_p = [3, 4], lse_p = ln 3) gives weights
 * 1/4 and 3/4: o = [2.5, 3.5], lse = ln 4. Then merging with an empty part (-inf) changes nothing,
 * and two empty sides give o = 0, lse = -inf. */
TEST(attention_merge_hand_values) {
    int32_t cu[2] = {0, 1};
    VarlenLayout l = {1, TI32(cu, 2), TI32(cu, 2), TI32(cu, 2), TI32(cu, 2), 1, 1};
    double o[2] = {1, 2}, lse[1] = {0}, op[2] = {3, 4}, lp[1] = {log(3.0)};
    Tensor O = TF64(o, 1, 1, 2), L = TF64(lse, 1, 1), OP = TF64(op, 1, 1, 2), LP = TF64(lp, 1, 1);
    REQUIRE_OK(op_attention_merge(&O, &L, &OP, &LP, &l));
    CHECK_MSG(fabs(o[0] - 2.5) < 1e-15 && fabs(o[1] - 3.5) < 1e-15, "o = [%.17g, %.17g]", o[0], o[1]);
    CHECK_MSG(fabs(lse[0] - log(4.0)) < 1e-15, "lse = %.17g", lse[0]);
    op[0] = op[1] = 0, lp[0] = -INFINITY;
    REQUIRE_OK(op_attention_merge(&O, &L, &OP, &LP, &l));
    CHECK(o[0] == 2.5 && o[1] == 3.5 && lse[0] == log(4.0));
    o[0] = o[1] = 0, lse[0] = -INFINITY;
    REQUIRE_OK(op_attention_merge(&O, &L, &OP, &LP, &l));
    CHECK(o[0] == 0 && o[1] == 0 && isinf(lse[0]) && lse[0] < 0);
    /* f32: the same numbers are exact there too */
    float of[2] = {1, 2}, lf[1] = {0}, opf[2] = {3, 4}, lpf[1] = {logf(3.0f)};
    Tensor Of = TF32(of, 1, 1, 2), Lf = TF32(lf, 1, 1), OPf = TF32(opf, 1, 1, 2), LPf = TF32(lpf, 1, 1);
    REQUIRE_OK(op_attention_merge(&Of, &Lf, &OPf, &LPf, &l));
    CHECK_MSG(fabsf(of[0] - 2.5f) <= 1e-6f && fabsf(of[1] - 3.5f) <= 1e-6f, "f32 o = [%.9g, %.9g]", of[0], of[1]);
}

TEST(attention_merge_rejects_bad_arguments) {
    int32_t cu[2] = {0, 3}, cu_pad[2] = {0, 3};
    VarlenLayout l = {1, TI32(cu, 2), TI32(cu_pad, 2), TI32(cu, 2), TI32(cu_pad, 2), 3, 3};
    float o[3 * 2 * 4] = {0}, lse[3 * 2] = {0}, o2[4 * 2 * 4] = {0}, l2[3 * 2] = {0};
    Tensor O = TF32(o, 3, 2, 4), L = TF32(lse, 3, 2), OP = TF32(o2, 4, 2, 4), LP = TF32(l2, 3, 2);
    vfm_status s = op_attention_merge(&O, &L, &OP, &LP, &l); /* o_part has 4 rows */
    CHECK_MSG(s == VFM_ERR_SHAPE && strstr(vfm_last_error(), "o_part"), "%s", vfm_last_error());
    OP = TF32(o2, 3, 2, 4);
    cu[1] = 4; /* 4 real rows in 3 */
    s = op_attention_merge(&O, &L, &OP, &LP, &l);
    CHECK_MSG(s == VFM_ERR_SHAPE, "%s", vfm_last_error());
    cu[1] = 3;
    l.max_q = 3;
    double d[3 * 2] = {0};
    Tensor LD = TF64(d, 3, 2);
    s = op_attention_merge(&O, &LD, &OP, &LP, &l);
    CHECK_MSG(s == VFM_ERR_SHAPE && strstr(vfm_last_error(), "lse"), "%s", vfm_last_error());
    CHECK_OK(op_attention_merge(&O, &L, &OP, &LP, &l));
}
