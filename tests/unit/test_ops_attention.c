/* Varlen (THD) attention ops: finite-difference gradients (f64 build), goldens from PyTorch (f32 and
 * f64 builds), padding never read and written as 0, no attention across samples, identical bits
 * for any thread count, empty key sequences, and layout validation. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "golden.h"
#include "gradcheck.h"
#include "ops/ops.h"
#include "test.h"

#define MAX_SAMPLES 16

/* A pack: heads, head_dim, tensor rows and the four offset arrays (n+1 entries). */
typedef struct {
    int n, H, Hkv, hd;
    int64_t Sq, Skv;
    int32_t cu_q[MAX_SAMPLES + 1], cu_q_padded[MAX_SAMPLES + 1], cu_kv[MAX_SAMPLES + 1],
        cu_kv_padded[MAX_SAMPLES + 1];
} AttnCase;

/* The cases of reference/golden_ops_attention.py (there the data are PyTorch's). */
/* three self-attention samples of lengths 5, 9, 3 in slots of 7, 11, 6 rows */
static const AttnCase CASE_SELF = {3, 2, 2, 16, 24, 24, {0, 5, 14, 17}, {0, 7, 18, 24}, {0, 5, 14, 17}, {0, 7, 18, 24}};
/* grouped-query: 4 query heads over 2 kv heads, lengths 6, 4 in slots of 8, 4 */
static const AttnCase CASE_GQA = {2, 4, 2, 8, 12, 12, {0, 6, 10}, {0, 8, 12}, {0, 6, 10}, {0, 8, 12}};
/* cross-attention: q lengths 4, 6, 5 (slots 6), text kv lengths 1, 3, 7 (slots 2, 4, 8, 2 rows after) */
static const AttnCase CASE_CROSS = {3, 2, 2, 16, 18, 16, {0, 4, 10, 15}, {0, 6, 12, 18}, {0, 1, 4, 11}, {0, 2, 6, 14}};

/* The layout tensors point into `c`, so an AttnLayout is filled in place and never copied. */
typedef struct {
    AttnCase c;
    VarlenLayout layout;
} AttnLayout;

static int case_longest(const int32_t *cu, int n) {
    int best = 0;
    for (int i = 0; i < n; i++)
        if (cu[i + 1] - cu[i] > best) best = cu[i + 1] - cu[i];
    return best;
}

static void layout_init(AttnLayout *al, const AttnCase *c) {
    al->c = *c;
    VarlenLayout *l = &al->layout;
    l->n_samples = c->n;
    l->cu_q = TI32(al->c.cu_q, c->n + 1);
    l->cu_q_padded = TI32(al->c.cu_q_padded, c->n + 1);
    l->cu_kv = TI32(al->c.cu_kv, c->n + 1);
    l->cu_kv_padded = TI32(al->c.cu_kv_padded, c->n + 1);
    l->max_q = case_longest(c->cu_q, c->n);
    l->max_kv = case_longest(c->cu_kv, c->n);
}

/* Inputs, outputs and gradients of one run, in f32 or f64. */
typedef struct {
    DType dt;
    int64_t nq, nkv, nlse; /* elements of q-like, kv-like and lse tensors */
    Tensor q, k, v, dout, o, lse, dq, dk, dv;
} AttnBufs;

static Tensor bufs_tensor(DType dt, int ndim, int64_t d0, int64_t d1, int64_t d2) {
    Tensor t;
    int64_t shape[3] = {d0, d1, d2};
    tensor_alloc(&t, dt, DEV_CPU, ndim, shape);
    return t;
}

static void bufs_alloc(AttnBufs *b, const AttnCase *c, DType dt) {
    b->dt = dt;
    b->nq = c->Sq * c->H * c->hd;
    b->nkv = c->Skv * c->Hkv * c->hd;
    b->nlse = c->Sq * c->H;
    b->q = bufs_tensor(dt, 3, c->Sq, c->H, c->hd);
    b->dout = bufs_tensor(dt, 3, c->Sq, c->H, c->hd);
    b->o = bufs_tensor(dt, 3, c->Sq, c->H, c->hd);
    b->dq = bufs_tensor(dt, 3, c->Sq, c->H, c->hd);
    b->lse = bufs_tensor(dt, 2, c->Sq, c->H, 0);
    b->k = bufs_tensor(dt, 3, c->Skv, c->Hkv, c->hd);
    b->v = bufs_tensor(dt, 3, c->Skv, c->Hkv, c->hd);
    b->dk = bufs_tensor(dt, 3, c->Skv, c->Hkv, c->hd);
    b->dv = bufs_tensor(dt, 3, c->Skv, c->Hkv, c->hd);
}

static void bufs_free(AttnBufs *b) {
    Tensor *all[] = {&b->q, &b->k, &b->v, &b->dout, &b->o, &b->lse, &b->dq, &b->dk, &b->dv};
    for (int i = 0; i < 9; i++) tensor_free(all[i]);
}

static void fill_uniform(Tensor *t, uint64_t seed) {
    if (t->dtype == DT_F64) test_fill_uniform_f64(t->data, tensor_numel(t), seed, -1, 1);
    else test_fill_uniform_f32(t->data, tensor_numel(t), seed, -1, 1);
}

static void set_elem(Tensor *t, int64_t i, double value) {
    if (t->dtype == DT_F64) ((double *)t->data)[i] = value;
    else ((float *)t->data)[i] = (float)value;
}

/* Sets every element of the padding rows of t (rows outside [cu_padded[i], +len_i)) to value. */
static void set_padding(Tensor *t, const int32_t *cu, const int32_t *cu_padded, int n, double value) {
    int64_t rows = t->shape[0], row_elems = tensor_numel(t) / rows;
    for (int64_t r = 0; r < rows; r++) {
        int real = 0;
        for (int i = 0; i < n; i++)
            if (r >= cu_padded[i] && r < cu_padded[i] + cu[i + 1] - cu[i]) real = 1;
        if (!real)
            for (int64_t e = 0; e < row_elems; e++) set_elem(t, r * row_elems + e, value);
    }
}

/* Random inputs in [-1, 1) with padding rows set to pad_value. */
static void bufs_random(AttnBufs *b, const AttnCase *c, uint64_t seed, double pad_value) {
    fill_uniform(&b->q, seed);
    fill_uniform(&b->k, seed + 1);
    fill_uniform(&b->v, seed + 2);
    fill_uniform(&b->dout, seed + 3);
    set_padding(&b->q, c->cu_q, c->cu_q_padded, c->n, pad_value);
    set_padding(&b->dout, c->cu_q, c->cu_q_padded, c->n, pad_value);
    set_padding(&b->k, c->cu_kv, c->cu_kv_padded, c->n, pad_value);
    set_padding(&b->v, c->cu_kv, c->cu_kv_padded, c->n, pad_value);
}

static vfm_status bufs_forward(AttnBufs *b, const VarlenLayout *l) {
    return op_attention_forward(&b->o, &b->lse, &b->q, &b->k, &b->v, l);
}

static vfm_status bufs_backward(AttnBufs *b, const VarlenLayout *l) {
    return op_attention_backward(&b->dq, &b->dk, &b->dv, &b->dout, &b->q, &b->k, &b->v, &b->o, &b->lse, l);
}

/* Outputs pre-filled with a value the op must overwrite everywhere (padding rows with 0). */
static void bufs_poison_outputs(AttnBufs *b) {
    Tensor *outs[] = {&b->o, &b->lse, &b->dq, &b->dk, &b->dv};
    for (int i = 0; i < 5; i++)
        for (int64_t e = 0; e < tensor_numel(outs[i]); e++) set_elem(outs[i], e, 7.0);
}

static int same_bits(const Tensor *a, const Tensor *b) { return memcmp(a->data, b->data, tensor_bytes(a)) == 0; }

/* ---- 1. finite-difference gradients (f64) ------------------------------------------------ */

typedef struct {
    AttnBufs *b;
    const VarlenLayout *layout;
} GradCtx;

/* L = Σ dout ⊙ o: its gradients are the backward with that dout. */
static double attention_objective(void *p) {
    GradCtx *ctx = p;
    if (bufs_forward(ctx->b, ctx->layout) != VFM_OK) return NAN;
    return dot_f64(ctx->b->dout.data, ctx->b->o.data, ctx->b->nq);
}

static void gradcheck_case(const AttnCase *c, uint64_t seed) {
    AttnLayout al;
    layout_init(&al, c);
    AttnBufs b;
    bufs_alloc(&b, c, DT_F64);
    bufs_random(&b, c, seed, 0);
    REQUIRE_OK(bufs_forward(&b, &al.layout));
    REQUIRE_OK(bufs_backward(&b, &al.layout));
    GradCtx ctx = {&b, &al.layout};
    /* every element, padding included (there both gradients are 0: padding is never read) */
    const double h = 1e-5, atol = 1e-8, rtol = 1e-6;
    double *dq = malloc((size_t)b.nq * sizeof *dq), *dk = malloc((size_t)b.nkv * sizeof *dk),
           *dv = malloc((size_t)b.nkv * sizeof *dv);
    memcpy(dq, b.dq.data, (size_t)b.nq * sizeof *dq);
    memcpy(dk, b.dk.data, (size_t)b.nkv * sizeof *dk);
    memcpy(dv, b.dv.data, (size_t)b.nkv * sizeof *dv);
    CHECK_NONZERO("dq", dq, b.nq);
    CHECK_NONZERO("dk", dk, b.nkv);
    CHECK_NONZERO("dv", dv, b.nkv);
    GRADCHECK("dq", b.q.data, dq, b.nq, attention_objective, &ctx, h, atol, rtol, 0);
    GRADCHECK("dk", b.k.data, dk, b.nkv, attention_objective, &ctx, h, atol, rtol, 0);
    GRADCHECK("dv", b.v.data, dv, b.nkv, attention_objective, &ctx, h, atol, rtol, 0);
    free(dq);
    free(dk);
    free(dv);
    bufs_free(&b);
}

TEST(attention_gradcheck_self_pack_f64) { gradcheck_case(&CASE_SELF, 11); }

TEST(attention_gradcheck_gqa_f64) {
    gradcheck_case(&CASE_GQA, 21);
    AttnCase one_kv_head = CASE_GQA;
    one_kv_head.Hkv = 1;
    gradcheck_case(&one_kv_head, 22);
}

TEST(attention_gradcheck_cross_short_text_f64) { gradcheck_case(&CASE_CROSS, 31); }

/* ---- 2. goldens from PyTorch ------------------------------------------------------------- */

static Tensor golden_layout_tensor(const Golden *g, const char *name) {
    const Tensor *t = golden_need(g, name);
    return t ? *t : (Tensor){0};
}

/* Runs the golden's case in dtype dt (the f32 inputs widened for f64) and compares o, lse, dq,
 * dk, dv by max|a-b| <= atol + rtol·max|ref|. */
static void golden_case(const char *file, DType dt, double atol, double rtol) {
    Golden *g = golden_load(file);
    REQUIRE(g);
    VarlenLayout l;
    l.cu_q = golden_layout_tensor(g, "cu_q");
    l.cu_q_padded = golden_layout_tensor(g, "cu_q_padded");
    l.cu_kv = golden_layout_tensor(g, "cu_kv");
    l.cu_kv_padded = golden_layout_tensor(g, "cu_kv_padded");
    l.n_samples = (int)tensor_numel(&l.cu_q) - 1;
    l.max_q = (int)golden_scalar(g, "max_q");
    l.max_kv = (int)golden_scalar(g, "max_kv");
    const Tensor *q = golden_need(g, "q"), *k = golden_need(g, "k");
    if (!q || !k || !l.cu_q.data || !l.cu_q_padded.data || !l.cu_kv.data || !l.cu_kv_padded.data) {
        golden_free(g);
        return;
    }
    AttnCase c = {.n = l.n_samples, .H = (int)q->shape[1], .Hkv = (int)k->shape[1], .hd = (int)q->shape[2],
                  .Sq = q->shape[0], .Skv = k->shape[0]};
    AttnBufs b;
    bufs_alloc(&b, &c, dt);
    const char *inputs[] = {"q", "k", "v", "dout"};
    Tensor *in_t[] = {&b.q, &b.k, &b.v, &b.dout};
    for (int i = 0; i < 4; i++) CHECK_OK(op_convert(in_t[i], golden_need(g, inputs[i])));
    REQUIRE_OK(bufs_forward(&b, &l));
    REQUIRE_OK(bufs_backward(&b, &l));
    const char *outputs[] = {"o", "lse", "dq", "dk", "dv"};
    Tensor *out_t[] = {&b.o, &b.lse, &b.dq, &b.dk, &b.dv};
    for (int i = 0; i < 5; i++) {
        const Tensor *ref = golden_need(g, outputs[i]);
        int64_t n = tensor_numel(out_t[i]);
        if (!ref || tensor_numel(ref) != n) {
            CHECK_MSG(0, "%s: golden %s has the wrong size", file, outputs[i]);
            continue;
        }
        if (dt == DT_F32) {
            CHECK_CLOSE_F32(outputs[i], out_t[i]->data, ref->data, n, atol, rtol);
        } else {
            double *ref64 = malloc((size_t)n * sizeof *ref64);
            for (int64_t e = 0; e < n; e++) ref64[e] = ((const float *)ref->data)[e];
            CHECK_CLOSE_F64(outputs[i], out_t[i]->data, ref64, n, atol, rtol);
            free(ref64);
        }
        if (i >= 2 && dt == DT_F64) CHECK_NONZERO(outputs[i], out_t[i]->data, n);
    }
    bufs_free(&b);
    golden_free(g);
}

/* f32: sums of <= 75 O(1) terms in float (observed max error 1e-6, 5e-7 of max|ref|): 20x margin.
 * f64: only the golden's rounding to f32 remains, at most 2^-24·max|ref| (observed 2.4e-7 at 4.3). */
static void golden_both(const char *file) {
    golden_case(file, DT_F32, 1e-6, 2e-5);
    golden_case(file, DT_F64, 1e-12, 1.2e-7);
}

TEST(attention_golden_self_pack) { golden_both("ops_attention_self.bin"); }
TEST(attention_golden_gqa) { golden_both("ops_attention_gqa.bin"); }
TEST(attention_golden_cross_short_text) { golden_both("ops_attention_cross.bin"); }
TEST(attention_golden_long_sequences_gqa) { golden_both("ops_attention_long.bin"); }

/* ---- 3. padding is never read, and written as 0 ------------------------------------------- */

/* Counts the elements of t's padding rows that are not exactly 0. */
static int64_t nonzero_padding(const Tensor *t, const int32_t *cu, const int32_t *cu_padded, int n) {
    int64_t rows = t->shape[0], row_elems = tensor_numel(t) / rows, count = 0;
    for (int64_t r = 0; r < rows; r++) {
        int real = 0;
        for (int i = 0; i < n; i++)
            if (r >= cu_padded[i] && r < cu_padded[i] + cu[i + 1] - cu[i]) real = 1;
        for (int64_t e = 0; !real && e < row_elems; e++) count += ((const float *)t->data)[r * row_elems + e] != 0.0f;
    }
    return count;
}

static void padding_case(const AttnCase *c) {
    AttnLayout al;
    layout_init(&al, c);
    AttnBufs zero, nan;
    bufs_alloc(&zero, c, DT_F32);
    bufs_alloc(&nan, c, DT_F32);
    bufs_random(&zero, c, 41, 0);
    bufs_random(&nan, c, 41, NAN);
    bufs_poison_outputs(&zero);
    bufs_poison_outputs(&nan);
    REQUIRE_OK(bufs_forward(&zero, &al.layout));
    REQUIRE_OK(bufs_forward(&nan, &al.layout));
    CHECK_MSG(same_bits(&zero.o, &nan.o), "o differs with NaN padding");
    CHECK_MSG(same_bits(&zero.lse, &nan.lse), "lse differs with NaN padding");
    /* the backward must not read the padding rows of o and lse either */
    set_padding(&nan.o, c->cu_q, c->cu_q_padded, c->n, NAN);
    set_padding(&nan.lse, c->cu_q, c->cu_q_padded, c->n, NAN);
    REQUIRE_OK(bufs_backward(&zero, &al.layout));
    REQUIRE_OK(bufs_backward(&nan, &al.layout));
    CHECK_MSG(same_bits(&zero.dq, &nan.dq), "dq differs with NaN padding");
    CHECK_MSG(same_bits(&zero.dk, &nan.dk), "dk differs with NaN padding");
    CHECK_MSG(same_bits(&zero.dv, &nan.dv), "dv differs with NaN padding");
    /* padding rows of every output are exactly 0 (all outputs were pre-filled with 7) */
    const char *names[] = {"o", "lse", "dq", "dk", "dv"};
    Tensor *outs[] = {&zero.o, &zero.lse, &nan.dq, &nan.dk, &nan.dv};
    for (int i = 0; i < 5; i++) {
        int on_q = i < 3;
        int64_t bad =
            nonzero_padding(outs[i], on_q ? c->cu_q : c->cu_kv, on_q ? c->cu_q_padded : c->cu_kv_padded, c->n);
        CHECK_MSG(bad == 0, "%s: %lld padding elements are not 0", names[i], (long long)bad);
    }
    bufs_free(&zero);
    bufs_free(&nan);
}

TEST(attention_nan_padding_changes_nothing) {
    padding_case(&CASE_SELF);
    padding_case(&CASE_GQA);
    padding_case(&CASE_CROSS);
}

/* ---- 4. attention never crosses samples ---------------------------------------------------- */

/* True when rows [row0, row0+rows) of a and b hold the same bits. */
static int same_rows(const Tensor *a, const Tensor *b, int64_t row0, int64_t rows) {
    size_t row_bytes = tensor_bytes(a) / (size_t)a->shape[0];
    return memcmp((char *)a->data + row0 * row_bytes, (char *)b->data + row0 * row_bytes, rows * row_bytes) == 0;
}

static void isolation_case(const AttnCase *c) {
    AttnLayout al;
    layout_init(&al, c);
    AttnBufs base, changed;
    bufs_alloc(&base, c, DT_F32);
    bufs_alloc(&changed, c, DT_F32);
    bufs_random(&base, c, 51, 0);
    bufs_random(&changed, c, 51, 0);
    /* new k, v for sample 2 (index 1) only */
    int64_t kv_row_elems = (int64_t)c->Hkv * c->hd;
    for (int64_t r = c->cu_kv_padded[1]; r < c->cu_kv_padded[1] + c->cu_kv[2] - c->cu_kv[1]; r++)
        for (int64_t e = 0; e < kv_row_elems; e++) {
            ((float *)changed.k.data)[r * kv_row_elems + e] *= -1.5f;
            ((float *)changed.v.data)[r * kv_row_elems + e] += 0.25f;
        }
    REQUIRE_OK(bufs_forward(&base, &al.layout));
    REQUIRE_OK(bufs_forward(&changed, &al.layout));
    REQUIRE_OK(bufs_backward(&base, &al.layout));
    REQUIRE_OK(bufs_backward(&changed, &al.layout));
    for (int s = 0; s < c->n; s++) {
        int64_t q0 = c->cu_q_padded[s], nq = c->cu_q[s + 1] - c->cu_q[s];
        int64_t kv0 = c->cu_kv_padded[s], nkv = c->cu_kv[s + 1] - c->cu_kv[s];
        int same = same_rows(&base.o, &changed.o, q0, nq) && same_rows(&base.lse, &changed.lse, q0, nq) &&
                   same_rows(&base.dq, &changed.dq, q0, nq) && same_rows(&base.dk, &changed.dk, kv0, nkv) &&
                   same_rows(&base.dv, &changed.dv, kv0, nkv);
        if (s == 1) CHECK_MSG(!same, "changing sample 1's k, v changed none of its outputs");
        else CHECK_MSG(same, "changing sample 1's k, v changed sample %d's outputs", s);
    }
    bufs_free(&base);
    bufs_free(&changed);
}

TEST(attention_never_crosses_samples) {
    isolation_case(&CASE_SELF);
    isolation_case(&CASE_CROSS);
}

/* ---- 5. thread-count determinism ----------------------------------------------------------- */

TEST(attention_same_bits_for_any_thread_count) {
    /* lengths past the CPU blocks (256 queries, 512 keys) and within one; GQA; padding */
    AttnCase c = {3, 4, 2, 32, 860, 860, {0, 70, 800, 845}, {0, 72, 808, 860}, {0, 70, 800, 845}, {0, 72, 808, 860}};
    AttnLayout al;
    layout_init(&al, &c);
    AttnBufs runs[3];
    int threads[3] = {1, 2, 3};
    int saved = ops_get_threads();
    for (int i = 0; i < 3; i++) {
        bufs_alloc(&runs[i], &c, DT_F32);
        bufs_random(&runs[i], &c, 61, 0);
        ops_set_threads(threads[i]);
        CHECK_OK(bufs_forward(&runs[i], &al.layout));
        CHECK_OK(bufs_backward(&runs[i], &al.layout));
    }
    ops_set_threads(saved);
    for (int i = 1; i < 3; i++) {
        CHECK_MSG(same_bits(&runs[0].o, &runs[i].o), "o differs at %d threads", threads[i]);
        CHECK_MSG(same_bits(&runs[0].lse, &runs[i].lse), "lse differs at %d threads", threads[i]);
        CHECK_MSG(same_bits(&runs[0].dq, &runs[i].dq), "dq differs at %d threads", threads[i]);
        CHECK_MSG(same_bits(&runs[0].dk, &runs[i].dk), "dk differs at %d threads", threads[i]);
        CHECK_MSG(same_bits(&runs[0].dv, &runs[i].dv), "dv differs at %d threads", threads[i]);
    }
    for (int i = 0; i < 3; i++) bufs_free(&runs[i]);
}

/* ---- several blocks: the online softmax against a direct computation (f64) ---------------- */

/* o, lse, dq, dk, dv of sample i and head h by the textbook formulas: scores, softmax, P·V; the
 * backward through dP = dO·Vᵀ, dS = P ⊙ (dP − rowsum(dO ⊙ O)). Accumulates into the outputs. */
static void direct_attention(const AttnCase *c, int i, int h, const double *q, const double *k, const double *v,
                             const double *dout, double *o, double *lse, double *dq, double *dk, double *dv) {
    int g = h / (c->H / c->Hkv), hd = c->hd;
    int nq = c->cu_q[i + 1] - c->cu_q[i], nk = c->cu_kv[i + 1] - c->cu_kv[i];
    double scale = 1 / sqrt((double)hd), *p = malloc((size_t)nk * sizeof *p), *dp = malloc((size_t)nk * sizeof *dp);
#define QAT(r) ((((int64_t)c->cu_q_padded[i] + (r)) * c->H + h) * hd)
#define KAT(j) ((((int64_t)c->cu_kv_padded[i] + (j)) * c->Hkv + g) * hd)
    for (int r = 0; r < nq; r++) {
        double m = -INFINITY, sum = 0, delta = 0;
        for (int j = 0; j < nk; j++) {
            p[j] = 0;
            for (int d = 0; d < hd; d++) p[j] += q[QAT(r) + d] * k[KAT(j) + d] * scale;
            if (p[j] > m) m = p[j];
        }
        for (int j = 0; j < nk; j++) sum += (p[j] = exp(p[j] - m));
        for (int j = 0; j < nk; j++) {
            p[j] /= sum;
            for (int d = 0; d < hd; d++) o[QAT(r) + d] += p[j] * v[KAT(j) + d];
        }
        lse[((int64_t)c->cu_q_padded[i] + r) * c->H + h] = m + log(sum);
        for (int d = 0; d < hd; d++) delta += dout[QAT(r) + d] * o[QAT(r) + d];
        for (int j = 0; j < nk; j++) {
            dp[j] = 0;
            for (int d = 0; d < hd; d++) dp[j] += dout[QAT(r) + d] * v[KAT(j) + d];
            double ds = p[j] * (dp[j] - delta) * scale;
            for (int d = 0; d < hd; d++) {
                dq[QAT(r) + d] += ds * k[KAT(j) + d];
                dk[KAT(j) + d] += ds * q[QAT(r) + d];
                dv[KAT(j) + d] += p[j] * dout[QAT(r) + d];
            }
        }
    }
#undef QAT
#undef KAT
    free(p);
    free(dp);
}

TEST(attention_blocks_match_direct_f64) {
    /* cross-attention: 600 queries over 1100 keys (3 x 3 blocks), 300 over 40, and 0 keys; GQA */
    AttnCase c = {3, 4, 2, 8, 910, 1150, {0, 600, 900, 910}, {0, 600, 900, 910}, {0, 1100, 1140, 1140},
                  {0, 1100, 1140, 1150}};
    AttnLayout al;
    layout_init(&al, &c);
    AttnBufs b;
    bufs_alloc(&b, &c, DT_F64);
    bufs_random(&b, &c, 91, 0);
    REQUIRE_OK(bufs_forward(&b, &al.layout));
    REQUIRE_OK(bufs_backward(&b, &al.layout));
    double *ref = calloc((size_t)(3 * b.nq + b.nlse + 2 * b.nkv), sizeof *ref);
    double *o = ref, *dq = o + b.nq, *lse = dq + b.nq, *dk = lse + b.nlse, *dv = dk + b.nkv;
    for (int i = 0; i < c.n; i++)
        for (int h = 0; h < c.H; h++) {
            if (c.cu_kv[i + 1] == c.cu_kv[i]) /* no keys: lse -inf, the rest 0 */
                for (int r = 0; r < c.cu_q[i + 1] - c.cu_q[i]; r++) lse[(c.cu_q_padded[i] + r) * c.H + h] = -INFINITY;
            else
                direct_attention(&c, i, h, b.q.data, b.k.data, b.v.data, b.dout.data, o, lse, dq, dk, dv);
        }
    const double atol = 1e-13, rtol = 1e-11;
    CHECK_CLOSE_F64("o", b.o.data, o, b.nq, atol, rtol);
    CHECK_CLOSE_F64("dq", b.dq.data, dq, b.nq, atol, rtol);
    CHECK_CLOSE_F64("dk", b.dk.data, dk, b.nkv, atol, rtol);
    CHECK_CLOSE_F64("dv", b.dv.data, dv, b.nkv, atol, rtol);
    const double *got_lse = b.lse.data;
    for (int64_t e = 0; e < b.nlse; e++)
        CHECK_MSG(got_lse[e] == lse[e] || fabs(got_lse[e] - lse[e]) <= atol + rtol * fabs(lse[e]), "lse[%lld]: %g vs %g",
                  (long long)e, got_lse[e], lse[e]);
    free(ref);
    bufs_free(&b);
}

/* The f32 kernels (block products of 16-wide vectors: key blocks of 512, the wide dKᵀ/dVᵀ path
 * for whole-vector key blocks, the narrow one for a sample's odd last block, the row maxima from
 * the score product's epilogue) against the direct f64 computation on the same f32 inputs, on a
 * pack of many short samples and two long ones at the tiny model's head_dim 32. */
TEST(attention_f32_blocks_match_direct) {
    enum { N = 16 };
    static const int lens[N] = {64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 48, 37, 16, 1, 1040, 531};
    AttnCase c = {N, 4, 2, 32, 0, 0, {0}, {0}, {0}, {0}};
    for (int i = 0; i < N; i++) {
        c.cu_q[i + 1] = c.cu_kv[i + 1] = c.cu_q[i] + lens[i];
        c.cu_q_padded[i + 1] = c.cu_kv_padded[i + 1] = c.cu_q_padded[i] + lens[i] + (i % 3); /* some padding */
    }
    c.Sq = c.Skv = c.cu_q_padded[N];
    AttnLayout al;
    layout_init(&al, &c);
    AttnBufs b;
    bufs_alloc(&b, &c, DT_F32);
    bufs_random(&b, &c, 97, 0);
    /* inputs in f64: q, k (both doubled: scores of a few units), v, dout */
    float *f32[4] = {b.q.data, b.k.data, b.v.data, b.dout.data};
    int64_t count[4] = {b.nq, b.nkv, b.nkv, b.nq};
    double *in[4];
    for (int t = 0; t < 4; t++) {
        in[t] = malloc((size_t)count[t] * sizeof *in[t]);
        for (int64_t e = 0; e < count[t]; e++) {
            if (t < 2) f32[t][e] *= 2;
            in[t][e] = f32[t][e];
        }
    }
    REQUIRE_OK(bufs_forward(&b, &al.layout));
    REQUIRE_OK(bufs_backward(&b, &al.layout));
    double *ref = calloc((size_t)(2 * b.nq + 2 * b.nkv + b.nlse), sizeof *ref);
    double *o = ref, *dq = o + b.nq, *dk = dq + b.nq, *dv = dk + b.nkv, *lse = dv + b.nkv;
    for (int i = 0; i < c.n; i++)
        for (int h = 0; h < c.H; h++) direct_attention(&c, i, h, in[0], in[1], in[2], in[3], o, lse, dq, dk, dv);
    const float *got[5] = {b.o.data, b.dq.data, b.dk.data, b.dv.data, b.lse.data};
    const double *want[5] = {o, dq, dk, dv, lse};
    const char *names[5] = {"o", "dq", "dk", "dv", "lse"};
    for (int t = 0; t < 5; t++) {
        int64_t n = t == 4 ? b.nlse : t == 2 || t == 3 ? b.nkv : b.nq, bad = 0, worst = 0;
        double worst_err = 0;
        for (int64_t e = 0; e < n; e++) {
            double err = fabs(got[t][e] - want[t][e]), tol = 2e-5 + 1e-4 * fabs(want[t][e]);
            if (!(err <= tol)) bad++;
            if (!(err <= worst_err)) worst_err = err, worst = e;
        }
        CHECK_MSG(bad == 0, "%s: %lld of %lld elements off (worst [%lld]: %g vs %g)", names[t], (long long)bad,
                  (long long)n, (long long)worst, (double)got[t][worst], want[t][worst]);
    }
    for (int t = 0; t < 4; t++) free(in[t]);
    free(ref);
    bufs_free(&b);
}

/* ---- a sample with no keys ---------------------------------------------------------------- */

TEST(attention_sample_without_keys) {
    /* sample 0 has 3 queries and 0 keys, sample 1 has 2 queries and 3 keys */
    AttnCase c = {2, 2, 1, 8, 6, 4, {0, 3, 5}, {0, 3, 6}, {0, 0, 3}, {0, 1, 4}};
    AttnLayout al;
    layout_init(&al, &c);
    AttnBufs b;
    bufs_alloc(&b, &c, DT_F64);
    bufs_random(&b, &c, 71, 0);
    REQUIRE_OK(bufs_forward(&b, &al.layout));
    REQUIRE_OK(bufs_backward(&b, &al.layout));
    const double *o = b.o.data, *lse = b.lse.data, *dq = b.dq.data;
    int64_t row_elems = (int64_t)c.H * c.hd;
    for (int64_t e = 0; e < 3 * row_elems; e++) CHECK(o[e] == 0 && dq[e] == 0);
    for (int64_t e = 0; e < 3 * c.H; e++) CHECK(isinf(lse[e]) && lse[e] < 0);
    for (int64_t e = 3 * c.H; e < 5 * c.H; e++) CHECK(isfinite(lse[e]));
    CHECK_NONZERO("o of sample 1", o + 3 * row_elems, 2 * row_elems);
    CHECK_NONZERO("dq of sample 1", dq + 3 * row_elems, 2 * row_elems);
    int64_t nonfinite = 0;
    CHECK_OK(op_count_nonfinite(&nonfinite, &b.dk));
    CHECK(nonfinite == 0);
    CHECK_OK(op_count_nonfinite(&nonfinite, &b.dv));
    CHECK(nonfinite == 0);
    bufs_free(&b);
}

/* ---- 6. layout and shape validation ------------------------------------------------------- */

static void expect_shape_error(const char *what, vfm_status s, const char *needle) {
    CHECK_MSG(s == VFM_ERR_SHAPE, "%s: got %s, expected VFM_ERR_SHAPE", what, vfm_status_name(s));
    CHECK_MSG(strstr(vfm_last_error(), needle) != NULL, "%s: message \"%s\" does not name %s", what,
              vfm_last_error(), needle);
}

/* Forward and backward on case c (tensors of base's shapes) must fail naming `needle`. */
static void expect_layout_rejected(const char *what, const AttnCase *c, AttnBufs *base, const char *needle) {
    AttnLayout al;
    layout_init(&al, c);
    expect_shape_error(what, bufs_forward(base, &al.layout), needle);
    expect_shape_error(what, bufs_backward(base, &al.layout), needle);
}

TEST(attention_rejects_bad_layouts_and_shapes) {
    const AttnCase *c = &CASE_CROSS;
    AttnBufs b;
    bufs_alloc(&b, c, DT_F32);
    bufs_random(&b, c, 81, 0);
    {
        AttnLayout ok;
        layout_init(&ok, c);
        REQUIRE_OK(bufs_forward(&b, &ok.layout));
        REQUIRE_OK(bufs_backward(&b, &ok.layout));
    }
    AttnCase bad = *c;
    bad.cu_q_padded[3] = 19; /* past Sq = 18 */
    expect_layout_rejected("cu_q_padded past Sq", &bad, &b, "cu_q_padded[3]");
    bad = *c;
    bad.cu_kv_padded[3] = 17; /* past Skv = 16 */
    expect_layout_rejected("cu_kv_padded past Skv", &bad, &b, "cu_kv_padded[3]");
    bad = *c;
    bad.cu_kv[2] = 0; /* 1 > 0: not monotone */
    expect_layout_rejected("cu_kv not monotone", &bad, &b, "monotone");
    bad = *c;
    bad.cu_q[1] = 7; /* sample 0 has 7 rows in a 6-row slot */
    expect_layout_rejected("q longer than its slot", &bad, &b, "slot");
    bad = *c;
    bad.cu_kv_padded[0] = -1;
    expect_layout_rejected("negative offset", &bad, &b, ">= 0");
    {
        AttnLayout al;
        layout_init(&al, c);
        al.layout.max_kv = 6; /* sample 2 has 7 keys */
        expect_shape_error("max_kv too small", bufs_forward(&b, &al.layout), "max_kv");
        layout_init(&al, c);
        al.layout.n_samples = 4; /* arrays hold 3 + 1 entries */
        expect_shape_error("n_samples vs cu arrays", bufs_forward(&b, &al.layout), "cu_q");
        expect_shape_error("n_samples vs cu arrays", bufs_backward(&b, &al.layout), "cu_q");
        layout_init(&al, c);
        float cu_f32[4] = {0, 4, 10, 15};
        al.layout.cu_q = TF32(cu_f32, 4);
        expect_shape_error("f32 cu_q", bufs_forward(&b, &al.layout), "cu_q");
        expect_shape_error("missing layout", op_attention_forward(&b.o, &b.lse, &b.q, &b.k, &b.v, NULL), "layout");
    }
    AttnLayout al;
    layout_init(&al, c);
    /* kv heads not dividing query heads: 2 query heads, 3 kv heads */
    AttnBufs heads3;
    AttnCase c3 = *c;
    c3.Hkv = 3;
    bufs_alloc(&heads3, &c3, DT_F32);
    expect_shape_error("Hkv does not divide H",
                       op_attention_forward(&b.o, &b.lse, &b.q, &heads3.k, &heads3.v, &al.layout), "divide");
    expect_shape_error("Hkv does not divide H",
                       op_attention_backward(&b.dq, &heads3.dk, &heads3.dv, &b.dout, &b.q, &heads3.k, &heads3.v, &b.o,
                                             &b.lse, &al.layout),
                       "divide");
    /* v not shaped like k, lse and dk of the wrong shape, mixed dtypes */
    expect_shape_error("v vs k", op_attention_forward(&b.o, &b.lse, &b.q, &b.k, &heads3.v, &al.layout), "v is");
    expect_shape_error("lse shape", op_attention_forward(&b.o, &b.q, &b.q, &b.k, &b.v, &al.layout), "lse");
    expect_shape_error("dk shape",
                       op_attention_backward(&b.dq, &b.dq, &b.dv, &b.dout, &b.q, &b.k, &b.v, &b.o, &b.lse, &al.layout),
                       "dk");
    AttnBufs f64;
    bufs_alloc(&f64, c, DT_F64);
    expect_shape_error("mixed dtypes", op_attention_forward(&b.o, &b.lse, &b.q, &f64.k, &b.v, &al.layout), "k is");
    bufs_free(&f64);
    bufs_free(&heads3);
    bufs_free(&b);
}
