/* GPU: varlen (THD) attention — the reference CUDA kernel (f32 and bf16) and cuDNN's fused SDPA
 * (bf16) against the CPU oracle, and cuDNN against the reference kernel, forward (o, lse) and
 * backward (dq, dk, dv): self and cross attention, grouped and multi-query heads, head dims 64, 72
 * and 128, lengths 1, primes and non-multiples of 64, NaN (reference kernel) or finite garbage and
 * zeros (cuDNN) in every padding row (never read; written 0), a sample without keys (o = 0, lse = -inf, dq = 0) and one without queries (dk = dv = 0).
 * Each backward runs twice and must give the same bits. Also the log-sum-exp merge of partial
 * attentions, and the log line naming which implementation serves each shape bucket. Skipped
 * without a CUDA device (the harness suite runs them on the CPU). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capture.h"
#include "core/log.h"
#include "gpu_pair.h"
#include "ops/ops.h"
#include "test.h"
#ifdef VFM_CUDA
#include "ops/cuda/ops_cuda.h"
#endif

#define MAXS 5

/* Lengths of each sample and the padding rows after it; q and kv sides. */
typedef struct {
    const char *name;
    int n, H, Hkv, hd, self;
    int lq[MAXS], pad_q[MAXS], lkv[MAXS], pad_kv[MAXS];
} ACase;

static const ACase CASES[] = {
    {"self hd64 (lengths 1, 13, 70, 64)", 4, 4, 4, 64, 1, {1, 13, 70, 64}, {3, 0, 5, 2}, {0}, {0}},
    {"self GQA 6/2 hd72 (lengths 37, 129, 5)", 3, 6, 2, 72, 1, {37, 129, 5}, {0, 7, 3}, {0}, {0}},
    {"cross MQA 4/1 hd128 (q 67, 31; kv 1, 23)", 2, 4, 1, 128, 0, {67, 31}, {1, 4}, {1, 23}, {2, 0}},
    {"cross hd64, empty kv and empty q samples", 4, 2, 2, 64, 0, {9, 5, 0, 11}, {2, 1, 3, 0}, {4, 0, 6, 3}, {1, 2, 0, 5}},
};

typedef struct {
    ACase c;
    int64_t Sq, Skv;
    int32_t cu_q[MAXS + 1], cu_q_padded[MAXS + 1], cu_kv[MAXS + 1], cu_kv_padded[MAXS + 1];
    IPair g_cu_q, g_cu_q_padded, g_cu_kv, g_cu_kv_padded;
    VarlenLayout cpu, gpu;
} Layout;

/* Rows after the last sample's slot: ops.h asks CUDA attention buffers for ATTN_SPARE_ROWS of them
 * (cuDNN may read up to a tile past a sample's real rows); they are padding like any other. */
#define TAIL_ROWS ATTN_SPARE_ROWS

static void cumulate(const int *len, const int *pad, int n, int32_t *cu, int32_t *cu_padded, int64_t *rows) {
    cu[0] = cu_padded[0] = 0;
    for (int i = 0; i < n; i++) {
        cu[i + 1] = cu[i] + len[i];
        cu_padded[i + 1] = cu_padded[i] + len[i] + pad[i];
    }
    *rows = cu_padded[n] + TAIL_ROWS;
}

static int longest(const int *len, int n) {
    int m = 0;
    for (int i = 0; i < n; i++)
        if (len[i] > m) m = len[i];
    return m;
}

static void layout_make(Layout *l, const ACase *c) {
    memset(l, 0, sizeof *l);
    l->c = *c;
    const int *lkv = c->self ? c->lq : c->lkv, *pkv = c->self ? c->pad_q : c->pad_kv;
    cumulate(c->lq, c->pad_q, c->n, l->cu_q, l->cu_q_padded, &l->Sq);
    cumulate(lkv, pkv, c->n, l->cu_kv, l->cu_kv_padded, &l->Skv);
    l->g_cu_q = IPAIR(l->cu_q, c->n + 1);
    l->g_cu_q_padded = IPAIR(l->cu_q_padded, c->n + 1);
    l->g_cu_kv = IPAIR(l->cu_kv, c->n + 1);
    l->g_cu_kv_padded = IPAIR(l->cu_kv_padded, c->n + 1);
    int mq = longest(c->lq, c->n), mkv = longest(lkv, c->n);
    l->cpu = (VarlenLayout){c->n, l->g_cu_q.cpu, l->g_cu_q_padded.cpu, l->g_cu_kv.cpu, l->g_cu_kv_padded.cpu, mq, mkv};
    l->gpu = (VarlenLayout){c->n, l->g_cu_q.gpu, l->g_cu_q_padded.gpu, l->g_cu_kv.gpu, l->g_cu_kv_padded.gpu, mq, mkv};
}

static void layout_free(Layout *l) {
    ipair_free(&l->g_cu_q), ipair_free(&l->g_cu_q_padded), ipair_free(&l->g_cu_kv), ipair_free(&l->g_cu_kv_padded);
}

/* `value` (NaN, or finite garbage) in every row of p[rows, row_elems] outside the samples' real rows. */
static void fill_outside(Pair *p, float value, int64_t row_elems, const int32_t *cu, const int32_t *cu_padded, int n,
                         int64_t rows) {
    int64_t next = 0;
    for (int i = 0; i <= n; i++) {
        int64_t start = i < n ? cu_padded[i] : rows;
        for (int64_t r = next; r < start; r++)
            for (int64_t e = 0; e < row_elems; e++) p->h[r * row_elems + e] = value;
        if (i < n) next = start + (cu[i + 1] - cu[i]);
    }
    pair_upload(p);
}

/* lse: -inf must match exactly (samples without keys); the rest by the tolerance. */
static void check_lse(const char *what, const Pair *lse, double atol, double rtol) {
    float *got = malloc((size_t)lse->n * sizeof(float) + 4), *ref = malloc((size_t)lse->n * sizeof(float) + 4);
    pair_download(lse, got);
    memcpy(ref, lse->h, (size_t)lse->n * sizeof(float));
    int64_t bad = 0;
    for (int64_t i = 0; i < lse->n; i++)
        if (isinf(ref[i]) || isinf(got[i])) {
            bad += got[i] != ref[i];
            got[i] = ref[i] = 0;
        }
    CHECK_MSG(bad == 0, "%s: %lld entries differ in being -inf", what, (long long)bad);
    check_close_f32(what, got, ref, lse->n, atol, rtol, __FILE__, __LINE__);
    free(got), free(ref);
}

typedef struct {
    double o, lse, grad; /* atol = rtol for each */
} ATol;

static void set_impl(int impl) {
#ifdef VFM_CUDA
    cuda_attention_set_impl((CudaAttnImpl)impl);
#else
    (void)impl;
#endif
}

static void nan_outside(Pair *p, int64_t row_elems, const int32_t *cu, const int32_t *cu_padded, int n, int64_t rows) {
    fill_outside(p, NAN, row_elems, cu, cu_padded, n, rows);
}

/* One case with one implementation: GPU vs CPU, backward twice bitwise; when ref is given (the
 * reference kernel's bf16 results) also GPU vs those. Returns the GPU results in out[5] (o, lse,
 * dq, dk, dv as f32 arrays, caller frees) when out is not NULL. The padding rows of q, k, v and
 * dout hold pad_value. */
static void attention_case(const ACase *c, DType dt, int impl, ATol tol, float pad_value, float **out,
                           float *const *ref) {
    char what[160];
    Layout l;
    layout_make(&l, c);
    int64_t Sq = l.Sq, Skv = l.Skv;
    Pair q = PAIR_RAND(dt, 101, -1, 1, Sq, c->H, c->hd), k = PAIR_RAND(dt, 102, -1, 1, Skv, c->Hkv, c->hd);
    Pair v = PAIR_RAND(dt, 103, -1, 1, Skv, c->Hkv, c->hd), dout = PAIR_RAND(dt, 104, -1, 1, Sq, c->H, c->hd);
    fill_outside(&q, pad_value, (int64_t)c->H * c->hd, l.cu_q, l.cu_q_padded, c->n, Sq);
    fill_outside(&dout, pad_value, (int64_t)c->H * c->hd, l.cu_q, l.cu_q_padded, c->n, Sq);
    fill_outside(&k, pad_value, (int64_t)c->Hkv * c->hd, l.cu_kv, l.cu_kv_padded, c->n, Skv);
    fill_outside(&v, pad_value, (int64_t)c->Hkv * c->hd, l.cu_kv, l.cu_kv_padded, c->n, Skv);
    Pair o = PAIR_RAND(dt, 105, -9, 9, Sq, c->H, c->hd), lse = PAIR_RAND(DT_F32, 106, -9, 9, Sq, c->H);
    Pair dq = PAIR_RAND(dt, 107, -9, 9, Sq, c->H, c->hd), dk = PAIR_RAND(dt, 108, -9, 9, Skv, c->Hkv, c->hd);
    Pair dv = PAIR_RAND(dt, 109, -9, 9, Skv, c->Hkv, c->hd); /* garbage: the ops must write every row */
    set_impl(impl);
    REQUIRE_OK(op_attention_forward(&o.cpu, &lse.cpu, &q.cpu, &k.cpu, &v.cpu, &l.cpu));
    REQUIRE_OK(op_attention_forward(&o.gpu, &lse.gpu, &q.gpu, &k.gpu, &v.gpu, &l.gpu));
    const char *iname = impl == 1 ? "reference" : "cuDNN";
    snprintf(what, sizeof what, "%s %s %s: o", iname, dtype_name(dt), c->name);
    PAIR_CLOSE(what, &o, tol.o, tol.o);
    snprintf(what, sizeof what, "%s %s %s: lse", iname, dtype_name(dt), c->name);
    check_lse(what, &lse, tol.lse, tol.lse);
    REQUIRE_OK(op_attention_backward(&dq.cpu, &dk.cpu, &dv.cpu, &dout.cpu, &q.cpu, &k.cpu, &v.cpu, &o.cpu, &lse.cpu, &l.cpu));
    REQUIRE_OK(op_attention_backward(&dq.gpu, &dk.gpu, &dv.gpu, &dout.gpu, &q.gpu, &k.gpu, &v.gpu, &o.gpu, &lse.gpu, &l.gpu));
    Pair *grads[3] = {&dq, &dk, &dv};
    const char *gname[3] = {"dq", "dk", "dv"};
    for (int i = 0; i < 3; i++) {
        snprintf(what, sizeof what, "%s %s %s: %s", iname, dtype_name(dt), c->name, gname[i]);
        PAIR_CLOSE(what, grads[i], tol.grad, tol.grad);
    }
    void *snap[3];
    for (int i = 0; i < 3; i++) snap[i] = pair_snapshot(grads[i]);
    REQUIRE_OK(op_attention_backward(&dq.gpu, &dk.gpu, &dv.gpu, &dout.gpu, &q.gpu, &k.gpu, &v.gpu, &o.gpu, &lse.gpu, &l.gpu));
    for (int i = 0; i < 3; i++) {
        snprintf(what, sizeof what, "%s %s %s: %s", iname, dtype_name(dt), c->name, gname[i]);
        PAIR_SAME_BITS(what, grads[i], snap[i]);
        free(snap[i]);
    }
    Pair *res[5] = {&o, &lse, &dq, &dk, &dv};
    const char *rname[5] = {"o", "lse", "dq", "dk", "dv"};
    for (int i = 0; i < 5; i++) {
        float *got = malloc((size_t)res[i]->n * sizeof(float) + 4);
        pair_download(res[i], got);
        if (ref) { /* against the reference kernel's GPU results */
            snprintf(what, sizeof what, "%s vs reference %s: %s", iname, c->name, rname[i]);
            float *a = malloc((size_t)res[i]->n * sizeof(float) + 4), *b = malloc((size_t)res[i]->n * sizeof(float) + 4);
            memcpy(a, got, (size_t)res[i]->n * sizeof(float));
            memcpy(b, ref[i], (size_t)res[i]->n * sizeof(float));
            for (int64_t e = 0; e < res[i]->n; e++)
                if (isinf(a[e]) && a[e] == b[e]) a[e] = b[e] = 0;
            double t = i == 0 ? tol.o : i == 1 ? tol.lse : tol.grad;
            check_close_f32(what, a, b, res[i]->n, t, t, __FILE__, __LINE__);
            free(a), free(b);
        }
        if (out) out[i] = got;
        else free(got);
    }
    set_impl(0);
    pair_free(&q), pair_free(&k), pair_free(&v), pair_free(&dout), pair_free(&o), pair_free(&lse);
    pair_free(&dq), pair_free(&dk), pair_free(&dv);
    layout_free(&l);
}

#define NCASES ((int)(sizeof CASES / sizeof CASES[0]))

TEST(cuda_attention_reference_kernel_matches_cpu) {
    NEED_GPU();
    for (int i = 0; i < NCASES; i++) {
        attention_case(&CASES[i], DT_F32, 1, (ATol){2e-5, 2e-5, 1e-4}, NAN, NULL, NULL);
        attention_case(&CASES[i], DT_BF16, 1, (ATol){8e-3, 1e-4, 1.5e-2}, NAN, NULL, NULL);
    }
}

/* cuDNN (VFM_ATTENTION=cudnn: an error, not a fallback, when it cannot run) against the CPU and
 * against the reference kernel on the same bf16 inputs, with large finite garbage in the padding
 * rows (any use of them shows). Tolerances as cudnn-frontend's own tests (2e-2; bf16
 * probabilities in the P·V product), here relative to max|ref|. */
#define CUDNN_TOL ((ATol){2e-2, 2e-2, 3e-2})
#define REF_BF16_TOL ((ATol){8e-3, 1e-4, 1.5e-2})
TEST(cuda_attention_cudnn_matches_cpu_and_reference) {
    NEED_GPU();
    for (int i = 0; i < NCASES; i++) {
        float *ref[5] = {NULL}; /* stays NULL where a failing case returns early */
        attention_case(&CASES[i], DT_BF16, 1, REF_BF16_TOL, 300.f, ref, NULL);
        attention_case(&CASES[i], DT_BF16, 2, CUDNN_TOL, 300.f, NULL, ref);
        for (int j = 0; j < 5; j++) free(ref[j]);
    }
}

/* The padding rule kept (docs/design-amendments.md, §3): padding rows hold finite values (the
 * packer zero-fills them, per-token ops write 0 there); NaN in them is not promised to stay out on
 * the cuDNN path (cuDNN may load a tile past a sample's last key and multiply it by probability 0).
 * Zero padding, as the model has it, with the keyless sample of the last case between two others:
 * its rows' lse (-inf) must not reach a neighbour's dK/dV through the backward's statistics. */
TEST(cuda_attention_cudnn_zero_padding_and_keyless_neighbours) {
    NEED_GPU();
    for (int i = 0; i < NCASES; i++) attention_case(&CASES[i], DT_BF16, 2, CUDNN_TOL, 0.f, NULL, NULL);
}

/* The log-sum-exp merge (ring attention's combine step): GPU vs CPU on random partial results with
 * sides that have no keys (lse = -inf on one side, on both) and NaN in the padding rows. */
TEST(cuda_attention_merge_matches_cpu) {
    NEED_GPU();
    const ACase *c = &CASES[3];
    for (int di = 0; di < 2; di++) {
        DType dt = di ? DT_BF16 : DT_F32;
        Layout l;
        layout_make(&l, c);
        int64_t S = l.Sq, row = (int64_t)c->H * c->hd;
        Pair o = PAIR_RAND(dt, 111, -1, 1, S, c->H, c->hd), op = PAIR_RAND(dt, 112, -1, 1, S, c->H, c->hd);
        Pair lse = PAIR_RAND(DT_F32, 113, -3, 5, S, c->H), lp = PAIR_RAND(DT_F32, 114, -3, 5, S, c->H);
        /* row 0 head 0: only the part has keys; row 1 head 1: neither side has keys */
        lse.h[0] = -INFINITY;
        lse.h[1 * c->H + 1] = lp.h[1 * c->H + 1] = -INFINITY;
        pair_upload(&lse), pair_upload(&lp);
        nan_outside(&o, row, l.cu_q, l.cu_q_padded, c->n, S);
        nan_outside(&op, row, l.cu_q, l.cu_q_padded, c->n, S);
        nan_outside(&lse, c->H, l.cu_q, l.cu_q_padded, c->n, S);
        nan_outside(&lp, c->H, l.cu_q, l.cu_q_padded, c->n, S);
        REQUIRE_OK(op_attention_merge(&o.cpu, &lse.cpu, &op.cpu, &lp.cpu, &l.cpu));
        REQUIRE_OK(op_attention_merge(&o.gpu, &lse.gpu, &op.gpu, &lp.gpu, &l.gpu));
        PAIR_CLOSE("attention_merge o", &o, 1e-6, TOL(dt, 1e-6, 8e-3));
        check_lse("attention_merge lse", &lse, 1e-6, 1e-6);
        pair_free(&o), pair_free(&op), pair_free(&lse), pair_free(&lp);
        layout_free(&l);
    }
}

/* How many lines of text contain every one of the n strings in want. */
static int lines_with(const char *text, const char *const *want, int n) {
    int count = 0;
    for (const char *line = text; *line;) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        char buf[512];
        snprintf(buf, sizeof buf, "%.*s", (int)len, line);
        int all = 1;
        for (int i = 0; i < n; i++) all &= strstr(buf, want[i]) != NULL;
        count += all;
        line += len + (end != NULL);
    }
    return count;
}

/* Which implementation serves a shape bucket is logged once per bucket and direction, also where
 * the pre-checks (dtype, head dim) send it to the reference kernel (issue 19: they fell back
 * silently). Each bucket runs twice, the second time with other lengths inside the same bucket:
 * f32 (reference kernel: cuDNN runs bf16 only), bf16 with head dim 20 (reference kernel: head dim
 * not a multiple of 8), and bf16 with head dim 16 (cuDNN: the harness's stand-in). */
typedef struct {
    ACase first, second; /* the same bucket: B<=2, H=2, Sq<=64 and Skv<=64 */
    DType dt;
    const char *bucket, *impl, *why; /* why: the reason a reference bucket gives, NULL for cuDNN */
} LogCase;

TEST(cuda_attention_logs_once_which_implementation_serves_each_bucket) {
    NEED_GPU();
    static const LogCase cases[] = {
        {{"f32 hd16 a", 2, 2, 2, 16, 1, {5, 9}, {1, 0}, {0}, {0}},
         {"f32 hd16 b", 2, 2, 2, 16, 1, {30, 2}, {0, 3}, {0}, {0}},
         DT_F32, "attention %s f32 B<=2 H=2 Hkv=2 hd=16 Sq<=64 Skv<=64:", "the reference attention kernel",
         "cuDNN attention runs bf16 only (f32)"},
        {{"bf16 hd20 a", 2, 2, 2, 20, 1, {5, 9}, {1, 0}, {0}, {0}},
         {"bf16 hd20 b", 2, 2, 2, 20, 1, {30, 2}, {0, 3}, {0}, {0}},
         DT_BF16, "attention %s bf16 B<=2 H=2 Hkv=2 hd=20 Sq<=64 Skv<=64:", "the reference attention kernel",
         "cuDNN attention needs head_dim % 8 == 0 (head_dim 20)"},
        {{"bf16 hd16 a", 2, 2, 2, 16, 1, {5, 9}, {1, 0}, {0}, {0}},
         {"bf16 hd16 b", 2, 2, 2, 16, 1, {30, 2}, {0, 3}, {0}, {0}},
         DT_BF16, "attention %s bf16 B<=2 H=2 Hkv=2 hd=16 Sq<=64 Skv<=64:", "cuDNN", NULL},
    };
    int ncases = (int)(sizeof cases / sizeof cases[0]);
    set_impl(0); /* auto: cuDNN where it can run, else the reference kernel */
    LogLevel level = log_get_level();
    log_set_level(LOG_INFO); /* cuDNN's line is info (stdout), the reference kernel's a warning (stderr) */
    Capture cout, cerr;
    capture_begin(&cout, 1);
    capture_begin(&cerr, 2);
    int ok = 1;
    for (int i = 0; i < ncases && ok; i++)
        for (int rep = 0; rep < 2 && ok; rep++) {
            const ACase *c = rep ? &cases[i].second : &cases[i].first;
            Layout l;
            layout_make(&l, c);
            DType dt = cases[i].dt;
            Pair q = PAIR_RAND(dt, 121, -1, 1, l.Sq, c->H, c->hd), k = PAIR_RAND(dt, 122, -1, 1, l.Skv, c->Hkv, c->hd);
            Pair v = PAIR_RAND(dt, 123, -1, 1, l.Skv, c->Hkv, c->hd), dout = PAIR_RAND(dt, 124, -1, 1, l.Sq, c->H, c->hd);
            Pair o = PAIR_ZEROS(dt, l.Sq, c->H, c->hd), lse = PAIR_ZEROS(DT_F32, l.Sq, c->H);
            Pair dq = PAIR_ZEROS(dt, l.Sq, c->H, c->hd), dk = PAIR_ZEROS(dt, l.Skv, c->Hkv, c->hd);
            Pair dv = PAIR_ZEROS(dt, l.Skv, c->Hkv, c->hd);
            ok = op_attention_forward(&o.gpu, &lse.gpu, &q.gpu, &k.gpu, &v.gpu, &l.gpu) == VFM_OK &&
                 op_attention_backward(&dq.gpu, &dk.gpu, &dv.gpu, &dout.gpu, &q.gpu, &k.gpu, &v.gpu, &o.gpu, &lse.gpu,
                                       &l.gpu) == VFM_OK;
            pair_free(&q), pair_free(&k), pair_free(&v), pair_free(&dout), pair_free(&o), pair_free(&lse);
            pair_free(&dq), pair_free(&dk), pair_free(&dv);
            layout_free(&l);
        }
    char *err = capture_end(&cerr), *out = capture_end(&cout);
    log_set_level(level);
    CHECK_MSG(ok, "attention failed: %s", vfm_last_error());
    for (int i = 0; i < ncases && ok; i++)
        for (int backward = 0; backward < 2; backward++) {
            char bucket[128];
            snprintf(bucket, sizeof bucket, cases[i].bucket, backward ? "backward" : "forward");
            const char *named[3] = {bucket, cases[i].impl, cases[i].why};
            int nnamed = cases[i].why ? 3 : 2;
            /* the reference kernel: one warning on stderr; cuDNN: one info line on stdout */
            const char *mine = cases[i].why ? err : out, *other = cases[i].why ? out : err;
            CHECK_MSG(lines_with(mine, named, nnamed) == 1, "%s: expected one line naming '%s'%s%s, got %d in:\n%s",
                      bucket, cases[i].impl, cases[i].why ? " and why: " : "", cases[i].why ? cases[i].why : "",
                      lines_with(mine, named, nnamed), mine);
            CHECK_MSG(lines_with(mine, named, 1) == 1 && lines_with(other, named, 1) == 0,
                      "%s: more than one line for the bucket:\nstdout:\n%s\nstderr:\n%s", bucket, out, err);
        }
    const char *any[1] = {"attention "};
    CHECK_MSG(lines_with(out, any, 1) + lines_with(err, any, 1) == 2 * ncases,
              "expected %d attention lines (one per bucket and direction):\nstdout:\n%s\nstderr:\n%s", 2 * ncases, out,
              err);
    free(out), free(err);
}
