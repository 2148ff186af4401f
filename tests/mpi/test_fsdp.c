/* FSDP (ZeRO-2, ZeRO-3) against ZeRO-1 at DP = the world size (1-4; DP3 included), on a toy
 * parameter table with an embedder unit, four residual MLP blocks of 97 elements each (a prime:
 * no unit divides by 2, 3 or 4) and a final layer, trained three clipped AdamW steps through
 * op_linear with two micro-batches per rank. Per step the loss, the gradient norm and then all
 * parameters must equal ZeRO-1's bit for bit when FSDP accumulates the micro-batches unsharded
 * (ZeRO-1's reduction order) or runs one micro-batch per step; when it reduce-scatters every
 * micro-batch it must equal, bit for bit, ZeRO-1 fed the same per-micro-batch sums. ZeRO-3 keeps
 * at most two blocks gathered (the one computing and the prefetched next) and none after the
 * step. The optimizer files written under ZeRO-3 are ZeRO-1's. At TP2 × DP2 the TP-summed entries
 * (REDUCE_TP_HEADS) reduce as dp.c reduces them. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi_test.h"
#include "ops/ops.h"
#include "parallel/dp.h"
#include "parallel/fsdp.h"

enum { N = 4, DIN = 3, D = 6, H = 7, DOUT = 2, BLOCKS = 4, STEPS = 3 };

static void toy_table(ParamTable *t, int *block_first, int *head) {
    param_table_init(t);
    param_table_add(t, INIT_NORMAL, 0.1f, 2, (int64_t[]){D, DIN}, 0, -1, "embed.weight");
    param_table_add(t, INIT_NORMAL, 0.1f, 1, (int64_t[]){D}, 0, -1, "embed.bias");
    for (int l = 0; l < BLOCKS; l++) { /* 7·6 + 7 + 6·7 + 6 = 97 elements */
        block_first[l] = param_table_add(t, INIT_NORMAL, 0.1f, 2, (int64_t[]){H, D}, 0, -1, "blocks.%d.fc1.weight", l);
        param_table_add(t, INIT_NORMAL, 0.1f, 1, (int64_t[]){H}, 0, -1, "blocks.%d.fc1.bias", l);
        param_table_add(t, INIT_NORMAL, 0.1f, 2, (int64_t[]){D, H}, 0, -1, "blocks.%d.fc2.weight", l);
        param_table_add(t, INIT_NORMAL, 0.1f, 1, (int64_t[]){D}, REDUCE_TP_HEADS, -1, "blocks.%d.fc2.bias", l);
    }
    *head = param_table_add(t, INIT_NORMAL, 0.1f, 2, (int64_t[]){DOUT, D}, 0, -1, "final.weight");
    param_table_add(t, INIT_NORMAL, 0.1f, 1, (int64_t[]){DOUT}, 0, -1, "final.bias");
}

typedef enum { MODE_ZERO1, MODE_ZERO1_PER_MICROBATCH, MODE_FSDP } Mode;

/* One data-parallel replica of the toy, ZeRO-1 or FSDP. */
typedef struct {
    Mode mode;
    const ParamTable *t;
    int block_first[BLOCKS], head;
    /* ZeRO-1 */
    DataParallel dp;
    float *params, *grads, *acc;
    /* FSDP */
    Fsdp f;
    Optimizer opt;
    int prefetch;
    int max_gathered;
} Replica;

static vfm_status param(Replica *r, int e, Tensor *out) {
    if (r->mode == MODE_FSDP) return fsdp_param(&r->f, e, out);
    *out = param_view(r->t, e, r->params, DT_F32, DEV_CPU);
    return VFM_OK;
}

static vfm_status grad(Replica *r, int e, Tensor *out) {
    if (r->mode == MODE_FSDP) return fsdp_grad(&r->f, e, out);
    *out = param_view(r->t, e, r->grads, DT_F32, DEV_CPU);
    return VFM_OK;
}

/* FSDP's hooks around a unit (no-ops for ZeRO-1). */
static vfm_status unit_enter(Replica *r, int unit, int backward, int next) {
    if (r->mode != MODE_FSDP) return VFM_OK;
    VFM_TRY(fsdp_gather(&r->f, unit));
    if (r->prefetch && next >= 0 && next < r->f.lay.n_units) VFM_TRY(fsdp_prefetch(&r->f, next));
    if (r->f.gathered > r->max_gathered) r->max_gathered = r->f.gathered;
    return backward ? fsdp_grad_begin(&r->f, unit) : VFM_OK;
}

static vfm_status unit_leave(Replica *r, int unit, int backward, int last) {
    if (r->mode != MODE_FSDP) return VFM_OK;
    VFM_TRY(fsdp_release(&r->f, unit));
    return backward ? fsdp_reduce_grads(&r->f, unit, last) : VFM_OK;
}

/* One micro-batch: h = embed(x); per block h += fc2(gelu(fc1(h))); out = final(h); loss ½Σ(out −
 * y)²; backward into the gradients (accumulated). Returns the loss. */
static vfm_status micro_batch(Replica *r, uint64_t seed, int last, double *loss) {
    float x[N * DIN], y[N * DOUT], hs[(BLOCKS + 1) * N * D], pre[BLOCKS * N * H], u[BLOCKS * N * H];
    float out[N * DOUT], dout[N * DOUT], dh[N * D], dv[N * D], du[N * H], dhx[N * D];
    test_fill_uniform_f32(x, N * DIN, seed, -1.0f, 1.0f);
    test_fill_uniform_f32(y, N * DOUT, seed + 7, -1.0f, 1.0f);
    Tensor w, b, gw, gb;
    /* forward: unit 0 (embedder), units 1..BLOCKS, unit BLOCKS + 1 (final layer) */
    Tensor X = TF32(x, N, DIN), H0 = TF32(hs, N, D);
    VFM_TRY(unit_enter(r, 0, 0, 1));
    VFM_TRY(param(r, 0, &w));
    VFM_TRY(param(r, 1, &b));
    VFM_TRY(op_linear_forward(&H0, NULL, &X, &w, &b, ACT_NONE));
    VFM_TRY(unit_leave(r, 0, 0, 0));
    for (int l = 0; l < BLOCKS; l++) {
        int e = r->block_first[l];
        Tensor Hin = TF32(hs + l * N * D, N, D), Hout = TF32(hs + (l + 1) * N * D, N, D);
        Tensor P = TF32(pre + l * N * H, N, H), Uu = TF32(u + l * N * H, N, H), V = TF32(dv, N, D);
        VFM_TRY(unit_enter(r, 1 + l, 0, 2 + l));
        VFM_TRY(param(r, e, &w));
        VFM_TRY(param(r, e + 1, &b));
        VFM_TRY(op_linear_forward(&Uu, &P, &Hin, &w, &b, ACT_GELU_TANH));
        VFM_TRY(param(r, e + 2, &w));
        VFM_TRY(param(r, e + 3, &b));
        VFM_TRY(op_linear_forward(&V, NULL, &Uu, &w, &b, ACT_NONE));
        VFM_TRY(op_add(&Hout, &Hin, &V));
        VFM_TRY(unit_leave(r, 1 + l, 0, 0));
    }
    Tensor HL = TF32(hs + BLOCKS * N * D, N, D), O = TF32(out, N, DOUT), DO = TF32(dout, N, DOUT), Y = TF32(y, N, DOUT);
    VFM_TRY(unit_enter(r, BLOCKS + 1, 0, -1));
    VFM_TRY(param(r, r->head, &w));
    VFM_TRY(param(r, r->head + 1, &b));
    VFM_TRY(op_linear_forward(&O, NULL, &HL, &w, &b, ACT_NONE));
    VFM_TRY(op_copy(&DO, &O));
    VFM_TRY(op_axpy(&DO, -1.0, &Y));
    double sq = 0;
    VFM_TRY(op_sum_squares(&sq, &DO));
    *loss = 0.5 * sq;
    VFM_TRY(unit_leave(r, BLOCKS + 1, 0, 0));
    /* backward, last unit first; the next unit to prefetch is the one below */
    Tensor DH = TF32(dh, N, D), DV = TF32(dv, N, D), DU = TF32(du, N, H), DHX = TF32(dhx, N, D);
    VFM_TRY(unit_enter(r, BLOCKS + 1, 1, BLOCKS));
    VFM_TRY(param(r, r->head, &w));
    VFM_TRY(grad(r, r->head, &gw));
    VFM_TRY(grad(r, r->head + 1, &gb));
    VFM_TRY(op_linear_backward(&DH, &gw, &gb, &DO, &HL, &w, NULL, ACT_NONE, 0));
    VFM_TRY(unit_leave(r, BLOCKS + 1, 1, last));
    for (int l = BLOCKS - 1; l >= 0; l--) {
        int e = r->block_first[l];
        Tensor Hin = TF32(hs + l * N * D, N, D), P = TF32(pre + l * N * H, N, H), Uu = TF32(u + l * N * H, N, H);
        VFM_TRY(unit_enter(r, 1 + l, 1, l));
        memcpy(dv, dh, sizeof dv);
        VFM_TRY(param(r, e + 2, &w));
        VFM_TRY(grad(r, e + 2, &gw));
        VFM_TRY(grad(r, e + 3, &gb));
        VFM_TRY(op_linear_backward(&DU, &gw, &gb, &DV, &Uu, &w, NULL, ACT_NONE, 0));
        VFM_TRY(param(r, e, &w));
        VFM_TRY(grad(r, e, &gw));
        VFM_TRY(grad(r, e + 1, &gb));
        VFM_TRY(op_linear_backward(&DHX, &gw, &gb, &DU, &Hin, &w, &P, ACT_GELU_TANH, 0));
        VFM_TRY(op_add(&DH, &DH, &DHX));
        VFM_TRY(unit_leave(r, 1 + l, 1, last));
    }
    VFM_TRY(unit_enter(r, 0, 1, -1));
    VFM_TRY(param(r, 0, &w));
    VFM_TRY(grad(r, 0, &gw));
    VFM_TRY(grad(r, 1, &gb));
    VFM_TRY(op_linear_backward(NULL, &gw, &gb, &DH, &X, &w, NULL, ACT_NONE, 0));
    VFM_TRY(unit_leave(r, 0, 1, last));
    return VFM_OK;
}

typedef struct {
    double loss[STEPS], norm[STEPS];
    float *params; /* [total] after the last step */
} Trace;

static const OptimConfig OPT = {.lr = 3e-2, .min_lr = 0, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1,
                                .clip_grad = 0.05, .decay_style = LR_DECAY_CONSTANT};

/* STEPS steps of M micro-batches per rank; data seeded by (data rank, step, micro-batch). */
static vfm_status train(Replica *r, int M, int data_rank, Comm *comm, Trace *tr) {
    const ParamTable *t = r->t;
    int64_t total = t->total;
    for (int k = 0; k < STEPS; k++) {
        double loss = 0, l;
        if (r->mode != MODE_FSDP) memset(r->grads, 0, (size_t)total * sizeof(float));
        if (r->mode == MODE_ZERO1_PER_MICROBATCH) memset(r->acc, 0, (size_t)total * sizeof(float));
        for (int m = 0; m < M; m++) {
            VFM_TRY(micro_batch(r, 1000 * (uint64_t)data_rank + 10 * (uint64_t)k + (uint64_t)m, m == M - 1, &l));
            loss += l;
            if (r->mode == MODE_ZERO1_PER_MICROBATCH) { /* the order FSDP follows when it reduces every micro-batch */
                VFM_TRY(comm_all_reduce(comm, r->grads, total, DT_F32, COMM_SUM_ORDERED));
                Tensor a = TF32(r->acc, total), g = TF32(r->grads, total);
                if (m == 0) VFM_TRY(op_copy(&a, &g));
                else VFM_TRY(op_add(&a, &a, &g));
                memset(r->grads, 0, (size_t)total * sizeof(float));
            }
        }
        double norm;
        if (r->mode == MODE_FSDP) {
            VFM_TRY(fsdp_grad_finish(&r->f));
            VFM_TRY(fsdp_grad_norm(&r->f, &norm));
            VFM_TRY(fsdp_optimizer_step(&r->f, &r->opt, OPT.lr, clip_scale(&OPT, norm)));
            if (r->f.gathered != 0) return vfm_fail(VFM_ERR_INTERNAL, "%d units still gathered after the step", r->f.gathered);
        } else {
            if (r->mode == MODE_ZERO1_PER_MICROBATCH) {
                memcpy(r->grads, r->acc, (size_t)total * sizeof(float));
                int n = comm ? comm->size : 1;
                Tensor g = TF32(r->grads + r->dp.own_begin, r->dp.own_end - r->dp.own_begin);
                if (n > 1 && r->dp.own_end > r->dp.own_begin) VFM_TRY(op_scale(&g, 1.0 / n));
            } else {
                VFM_TRY(dp_grad_sync_finish(&r->dp, r->grads));
            }
            VFM_TRY(dp_grad_norm(&r->dp, r->grads, &norm));
            VFM_TRY(dp_optimizer_step(&r->dp, &r->opt, r->params, r->grads, OPT.lr, clip_scale(&OPT, norm)));
        }
        VFM_TRY(dp_mean_f64(&r->dp, &loss, 1));
        tr->loss[k] = loss;
        tr->norm[k] = norm;
    }
    tr->params = malloc((size_t)total * sizeof(float));
    if (r->mode != MODE_FSDP) {
        memcpy(tr->params, r->params, (size_t)total * sizeof(float));
    } else {
        for (int u = 0; u < r->f.lay.n_units; u++)
            VFM_TRY(fsdp_get_unit_params(&r->f, u, tr->params + r->f.lay.units[u].begin));
    }
    return VFM_OK;
}

static vfm_status replica_init(Replica *r, Mode mode, const ParamTable *t, const int *block_first, int head,
                               const FsdpConfig *fc, Comm *comm, Comm *tp, const float *init) {
    memset(r, 0, sizeof *r);
    r->mode = mode;
    r->t = t;
    memcpy(r->block_first, block_first, sizeof r->block_first);
    r->head = head;
    r->prefetch = 1;
    PpBlocks blocks = {block_first, BLOCKS, head};
    if (mode == MODE_FSDP) {
        VFM_TRY(fsdp_init(&r->f, t, &blocks, fc, comm, tp, NULL, DEV_CPU));
        VFM_TRY(fsdp_set_params(&r->f, init));
        VFM_TRY(fsdp_optimizer_init(&r->f, &r->opt, &OPT));
        r->dp = r->f.dp; /* for dp_mean_f64 (the same group) */
        return VFM_OK;
    }
    DpConfig cfg = {1e-4, 1, 0, 0, 1};
    VFM_TRY(dp_init(&r->dp, t, &cfg, comm, tp, NULL));
    VFM_TRY(dp_optimizer_init(&r->dp, &r->opt, &OPT));
    r->params = malloc((size_t)t->total * sizeof(float));
    r->grads = calloc((size_t)t->total, sizeof(float));
    r->acc = calloc((size_t)t->total, sizeof(float));
    memcpy(r->params, init, (size_t)t->total * sizeof(float));
    return VFM_OK;
}

static void replica_free(Replica *r) {
    optimizer_free(&r->opt);
    if (r->mode == MODE_FSDP) {
        fsdp_free(&r->f);
    } else {
        dp_free(&r->dp);
        free(r->params), free(r->grads), free(r->acc);
    }
}

static void compare(const char *what, const Trace *got, const Trace *want, int64_t total) {
    char w[160];
    for (int k = 0; k < STEPS; k++) {
        snprintf(w, sizeof w, "%s: loss of step %d", what, k);
        CHECK_SAME_BITS(w, &got->loss[k], &want->loss[k], 1);
        snprintf(w, sizeof w, "%s: gradient norm of step %d", what, k);
        CHECK_SAME_BITS(w, &got->norm[k], &want->norm[k], 1);
    }
    snprintf(w, sizeof w, "%s: parameters after %d steps", what, STEPS);
    CHECK_SAME_BITS(w, got->params, want->params, total);
}

/* FSDP in `strategy` with accumulate_unsharded `acc` and M micro-batches against the ZeRO-1 run
 * `mode` (ZERO1 or ZERO1_PER_MICROBATCH): bit for bit, or (rtol > 0) parameters and norms within
 * rtol·max|ref|. */
static void fsdp_vs_zero1(DpSharding strategy, int acc, int M, Mode ref_mode, Comm *comm, Comm *tp, int data_rank,
                          double rtol) {
    ParamTable t;
    int block_first[BLOCKS], head;
    toy_table(&t, block_first, &head);
    float *init = malloc((size_t)t.total * sizeof(float));
    test_fill_uniform_f32(init, t.total, 11, -0.5f, 0.5f);
    FsdpConfig fc = {strategy, acc, 1, 0, 0};
    Replica z, f;
    Trace tz, tf;
    REQUIRE_OK(replica_init(&z, ref_mode, &t, block_first, head, NULL, comm, tp, init));
    REQUIRE_OK(replica_init(&f, MODE_FSDP, &t, block_first, head, &fc, comm, tp, init));
    REQUIRE_OK(train(&z, M, data_rank, comm, &tz));
    REQUIRE_OK(train(&f, M, data_rank, comm, &tf));
    char what[128];
    snprintf(what, sizeof what, "%s, %s accumulation, %d micro-batches, DP%d", dp_sharding_name(strategy),
             acc ? "unsharded" : "sharded", M, comm ? comm->size : 1);
    if (rtol > 0) {
        CHECK_CLOSE_F32(what, tf.params, tz.params, t.total, 0, rtol);
        CHECK_CLOSE_F64(what, tf.norm, tz.norm, STEPS, 0, rtol);
        goto out;
    }
    compare(what, &tf, &tz, t.total);
    if (strategy == DP_SHARD_OPTIM_GRADS_PARAMS) {
        CHECK_MSG(f.max_gathered <= 2 && f.f.peak_gathered <= 2, "%s: %d blocks gathered at once", what, f.f.peak_gathered);
        CHECK_MSG(f.f.peak_gathered >= 1, "%s: no block was ever gathered", what);
    }
    /* the moments are ZeRO-1's, element for element */
    CHECK(f.opt.begin == z.opt.begin && f.opt.end == z.opt.end);
    snprintf(what + strlen(what), sizeof what - strlen(what), ": Adam m");
    CHECK_SAME_BITS(what, f.opt.m, z.opt.m, f.opt.end - f.opt.begin);
out:
    free(tz.params), free(tf.params);
    replica_free(&z), replica_free(&f);
    free(init);
    param_table_free(&t);
}

TEST(fsdp_zero2_zero3_equal_zero1_bitwise) {
    Comm *w = mt_world_comm();
    for (int s = 0; s < 2; s++) {
        DpSharding st = s ? DP_SHARD_OPTIM_GRADS_PARAMS : DP_SHARD_OPTIM_GRADS;
        fsdp_vs_zero1(st, 1, 2, MODE_ZERO1, w, NULL, mt_rank(), 0); /* unsharded accumulation: ZeRO-1's order */
        fsdp_vs_zero1(st, 0, 1, MODE_ZERO1, w, NULL, mt_rank(), 0); /* one micro-batch: both orders agree */
        fsdp_vs_zero1(st, 0, 2, MODE_ZERO1_PER_MICROBATCH, w, NULL, mt_rank(), 0); /* per-micro-batch reduction */
        /* against ZeRO-1 itself the per-micro-batch sums differ in rounding only (observed ~1e-7) */
        fsdp_vs_zero1(st, 0, 2, MODE_ZERO1, w, NULL, mt_rank(), 1e-5);
    }
}

/* TP2 × DP2: the REDUCE_TP_HEADS entries are summed over TP before the DP reduction, as dp.c. */
TEST(fsdp_tp2_dp2_equals_zero1) {
    REQUIRE_WORLD(4);
    ParallelLayout l;
    REQUIRE_OK(layout_init(&l, 4, mt_rank(), 2, 1, 1));
    Comm dpc, tp;
    REQUIRE_OK(comm_create_group(&dpc, &l, GROUP_DP_CP, COMM_BACKEND_MPI));
    REQUIRE_OK(comm_create_group(&tp, &l, GROUP_TP, COMM_BACKEND_MPI));
    fsdp_vs_zero1(DP_SHARD_OPTIM_GRADS_PARAMS, 1, 2, MODE_ZERO1, &dpc, &tp, mt_rank(), 0);
    fsdp_vs_zero1(DP_SHARD_OPTIM_GRADS, 1, 2, MODE_ZERO1, &dpc, &tp, mt_rank(), 0);
    comm_free(&dpc), comm_free(&tp);
}

/* Units, pieces and padding; the per-unit gather/reshard; the re-layout round trip; optimizer files
 * written under ZeRO-3 read back under ZeRO-1. */
TEST(fsdp_units_and_files) {
    ParamTable t;
    int block_first[BLOCKS], head, n = mt_world();
    toy_table(&t, block_first, &head);
    PpBlocks blocks = {block_first, BLOCKS, head};
    FsdpLayout lay;
    REQUIRE_OK(fsdp_layout_init(&lay, &t, &blocks, n, 1));
    CHECK(lay.n_units == BLOCKS + 2);
    for (int u = 0; u < lay.n_units; u++) {
        const FsdpUnit *x = &lay.units[u];
        CHECK(x->block == (u >= 1 && u <= BLOCKS ? u - 1 : -1));
        CHECK(x->sharded_params == (x->block >= 0));
        if (x->block >= 0) CHECK(x->end - x->begin == 97 && x->shard == (97 + n - 1) / n);
        int64_t covered = 0, lo, hi;
        for (int j = 0; j < n; j++) {
            fsdp_unit_piece(x, j, &lo, &hi);
            CHECK(lo == (j == 0 ? x->begin : covered + x->begin) || hi == lo);
            covered += hi - lo;
        }
        CHECK(covered == x->end - x->begin);
    }
    CHECK(lay.unsharded_params == 6 * 3 + 6 + 2 * 6 + 2);
    fsdp_layout_free(&lay);

    float *init = malloc((size_t)t.total * sizeof(float)), *back = malloc((size_t)t.total * sizeof(float));
    test_fill_uniform_f32(init, t.total, 5, -1.0f, 1.0f);
    Fsdp f;
    FsdpConfig fc = {DP_SHARD_OPTIM_GRADS_PARAMS, 0, 1, 0, 0};
    REQUIRE_OK(fsdp_init(&f, &t, &blocks, &fc, mt_world_comm(), NULL, NULL, DEV_CPU));
    REQUIRE_OK(fsdp_set_params(&f, init));
    /* a block is readable only while gathered */
    Tensor v;
    CHECK(fsdp_param(&f, block_first[1], &v) == VFM_ERR_INTERNAL);
    CHECK_OK(fsdp_gather(&f, 2));
    CHECK_OK(fsdp_param(&f, block_first[1], &v));
    CHECK_SAME_BITS("gathered block 1", (float *)v.data, init + t.entries[block_first[1]].offset, 42);
    CHECK_OK(fsdp_release(&f, 2));
    CHECK(f.gathered == 0);
    for (int u = 0; u < f.lay.n_units; u++)
        CHECK_OK(fsdp_get_unit_params(&f, u, back + f.lay.units[u].begin));
    CHECK_SAME_BITS("every unit read back", back, init, t.total);
    /* a checkpoint's master shard goes to the pieces and the whole units */
    float *other = malloc((size_t)t.total * sizeof(float));
    test_fill_uniform_f32(other, t.total, 6, -1.0f, 1.0f);
    memcpy(f.master, other + f.dp.own_begin, (size_t)(f.dp.own_end - f.dp.own_begin) * sizeof(float));
    CHECK_OK(fsdp_distribute_master(&f));
    for (int u = 0; u < f.lay.n_units; u++)
        CHECK_OK(fsdp_get_unit_params(&f, u, back + f.lay.units[u].begin));
    CHECK_SAME_BITS("every unit from the master shard", back, other, t.total);
    free(other);
    /* ZeRO-3 writes ZeRO-1's optimizer files */
    Optimizer o;
    REQUIRE_OK(fsdp_optimizer_init(&f, &o, &OPT));
    for (int64_t i = 0; i < o.end - o.begin; i++) o.m[i] = (float)(o.begin + i), o.v[i] = (float)(2 * (o.begin + i));
    o.step = 4;
    CHECK_OK(dp_optim_save(&f.dp, &o, test_tmpdir(), mt_rank()));
    CHECK_OK(comm_barrier(mt_world_comm()));
    DataParallel dp;
    DpConfig cfg = {1, 1, 0, 0, 1};
    REQUIRE_OK(dp_init(&dp, &t, &cfg, mt_world_comm(), NULL, NULL));
    Optimizer z;
    REQUIRE_OK(dp_optimizer_init(&dp, &z, &OPT));
    CHECK_OK(dp_optim_load(&dp, &z, test_tmpdir()));
    CHECK_SAME_BITS("ZeRO-1 reads ZeRO-3's m", z.m, o.m, z.end - z.begin);
    CHECK_SAME_BITS("ZeRO-1 reads ZeRO-3's v", z.v, o.v, z.end - z.begin);
    optimizer_free(&z), optimizer_free(&o);
    dp_free(&dp);
    fsdp_free(&f);
    free(init), free(back);
    param_table_free(&t);
}
