/* The DiT under pipeline parallelism against the single-rank model (issue 13 §4; docs/parallel.md
 * "Pipeline parallelism"). Every rank builds the same M packs (micro-batches of mixed sample
 * counts and sizes, each padded to one fixed pack length, padding masked) and the same random
 * weights, runs the single-rank model over them as the reference (gradients accumulated over the
 * micro-batches, averaged over the DP replicas), then its own stage of the layout: the schedule of
 * pp_schedule_build run by pp_run, each (micro-batch, chunk) in its own saved-activation slot,
 * dit_chunk_forward/backward as the callbacks, then dp.c's reduction (the REDUCE_PP embedders
 * summed over the stages first), the gradient norm and one clipped AdamW step.
 * Checked: every micro-batch's output on the last stage, every gradient, the norm and the
 * parameters after the step — bit for bit where the order of every sum is the single rank's (pure
 * PP: outputs and all gradients but the replicated embedders', which sum the stages' parts), and
 * within (1e-6 + 1e-5)·max|ref| otherwise (the TP/CP rule of test_dit_parallel.c); the replicated
 * embedders bit for bit equal on every stage after each of two steps; a broken variant (the
 * embedders' gradients not summed over PP) must fail. Layouts by world size: 2: PP2 1F1B with
 * M = P and 2P+1, PP2 interleaved V = 2 with M = P and 2P+1; 4: PP4 1F1B (M = P, 2P+1),
 * PP2 × TP2+SP, PP2 × DP2 with ZeRO-1, PP2 × CP2 of stdit with the hybrid (a 3-frame video padded
 * to 4 frames, its stages spatial + temporal | full + temporal); 8: CP2 × TP2+SP × PP2, and the same
 * with an MoE MLP and EP2 within DP×CP (tests/mpi/run.sh runs them alone); and
 * activation recomputation (full uniform, full block, selective) at PP2 1F1B and V = 2. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/dit.h"
#include "mpi_test.h"
#include "ops/ops.h"
#include "optim/optimizer.h"
#include "parallel/ckpt_shard.h"
#include "parallel/dp.h"
#include "parallel/groups.h"
#include "parallel/pp_exec.h"
#include "parallel/pp_schedule.h"
#include "parallel/pp_stage.h"
#include "train/train_parallel.h"

enum { MAXS = 3, S_FIX = 64, D_TEXT = 16, TEXT_PER = 2, MAX_M = 9, MAX_DP = 2 };

/* Micro-batch kinds: (frames, h, w) per sample, 0-terminated. */
static const int KINDS[3][MAXS][3] = {{{1, 3, 4}, {1, 4, 5}, {0}}, {{3, 3, 5}, {0}}, {{1, 1, 1}, {2, 2, 3}, {1, 2, 4}}};

typedef struct Pack {
    int n;
    int32_t cu[MAXS + 1], cu_pad[MAXS + 1], cu_text[MAXS + 1];
    float *x, *text, c_noise[MAXS], fps[MAXS], *dout;
    int32_t *t2s, *pos, cls[MAXS];
    Tensor tx, ttext, tcn, tfps, tt2s, tpos, tcls, tdout, tcu, tcup, tcut;
    DiTInputs in;
} Pack;

static void pack_make(Pack *p, const DiTConfig *c, int kind, uint64_t seed) {
    memset(p, 0, sizeof *p);
    int tok = dit_token_dim(c), out = dit_out_dim(c);
    for (int i = 0; i < MAXS && KINDS[kind][i][0]; i++) p->n++;
    for (int i = 0; i < p->n; i++) {
        const int *g = KINDS[kind][i];
        int len = g[0] * g[1] * g[2];
        p->cu[i + 1] = p->cu[i] + len;
        p->cu_pad[i + 1] = p->cu_pad[i] + (len + 3) / 4 * 4;
        p->cu_text[i + 1] = p->cu_text[i] + TEXT_PER;
    }
    p->cu_pad[p->n] = S_FIX; /* the fixed pack length: the last slot takes the padding */
    p->x = calloc((size_t)S_FIX * tok, sizeof(float));
    p->dout = calloc((size_t)S_FIX * out, sizeof(float));
    p->text = calloc((size_t)p->n * TEXT_PER * D_TEXT, sizeof(float));
    p->t2s = malloc(S_FIX * sizeof(int32_t)), p->pos = calloc(S_FIX * 3, sizeof(int32_t));
    for (int r = 0; r < S_FIX; r++) p->t2s[r] = -1;
    test_fill_uniform_f32(p->text, (int64_t)p->n * TEXT_PER * D_TEXT, seed + 7, -1, 1);
    for (int i = 0; i < p->n; i++) {
        const int *g = KINDS[kind][i];
        int len = p->cu[i + 1] - p->cu[i];
        test_fill_uniform_f32(p->x + (int64_t)p->cu_pad[i] * tok, (int64_t)len * tok, seed + 10 * i + 1, -1, 1);
        test_fill_uniform_f32(p->dout + (int64_t)p->cu_pad[i] * out, (int64_t)len * out, seed + 10 * i + 2, -1, 1);
        for (int r = 0; r < len; r++) {
            int64_t row = p->cu_pad[i] + r;
            p->t2s[row] = i;
            p->pos[row * 3] = r / (g[1] * g[2]), p->pos[row * 3 + 1] = r / g[2] % g[1], p->pos[row * 3 + 2] = r % g[2];
        }
        p->c_noise[i] = 0.37f * (float)i - 0.5f + 0.01f * (float)(seed % 7);
        p->fps[i] = g[0] > 1 ? 24.0f : 30.0f;
        p->cls[i] = (int32_t)((i + seed) % 3);
    }
    p->tx = TF32(p->x, S_FIX, tok), p->tdout = TF32(p->dout, S_FIX, out);
    p->ttext = TF32(p->text, p->n * TEXT_PER, D_TEXT);
    p->tcn = TF32(p->c_noise, p->n), p->tfps = TF32(p->fps, p->n), p->tt2s = TI32(p->t2s, S_FIX);
    p->tpos = TI32(p->pos, S_FIX, 3), p->tcls = TI32(p->cls, p->n);
    p->tcu = TI32(p->cu, p->n + 1), p->tcup = TI32(p->cu_pad, p->n + 1), p->tcut = TI32(p->cu_text, p->n + 1);
    int max_q = 0;
    for (int i = 0; i < p->n; i++)
        if (p->cu_pad[i + 1] - p->cu_pad[i] > max_q) max_q = p->cu_pad[i + 1] - p->cu_pad[i];
    DiTInputs *in = &p->in;
    in->x = &p->tx, in->c_noise = &p->tcn, in->fps = &p->tfps, in->text = &p->ttext, in->tok2sample = &p->tt2s;
    in->pos = &p->tpos, in->class_labels = c->num_classes > 0 ? &p->tcls : NULL;
    in->self_layout = (VarlenLayout){p->n, p->tcu, p->tcup, p->tcu, p->tcup, max_q, max_q};
    in->cross_layout = (VarlenLayout){p->n, p->tcu, p->tcup, p->tcut, p->tcut, max_q, TEXT_PER};
}

static void pack_free(Pack *p) { free(p->x), free(p->dout), free(p->text), free(p->t2s), free(p->pos); }

static DiTConfig model_config(DiTVariant v) {
    DiTConfig c;
    memset(&c, 0, sizeof c);
    c.variant = v;
    c.hidden = 32, c.layers = 4, c.heads = 4, c.kv_heads = v == DIT_VARIANT_DFM || v == DIT_VARIANT_MOVIEGEN ? 2 : 4;
    c.in_channels = 4, c.out_channels = 4, c.patch_spatial = 2, c.patch_temporal = 1;
    c.d_text = D_TEXT, c.adaln_lora = 8, c.fps_dim = 16, c.qk_norm = 1, c.ln_eps = 1e-5f, c.init_std = 0.02f;
    if (v == DIT_VARIANT_ADALN_ZERO) c.num_classes = 3, c.class_dropout_prob = 0.1f, c.learn_sigma = 1;
    if (v == DIT_VARIANT_STDIT) c.stdit_full_every = 2, c.kv_heads = 2; /* spatial, temporal | full, temporal */
    dit_config_resolve(&c);
    return c;
}

static const OptimConfig OPT = {.lr = 1e-3, .min_lr = 1e-3, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-5, .weight_decay = 0.033,
                                .clip_grad = 0.05, .warmup_init = 1e-3, .decay_iters = 10, .decay_style = LR_DECAY_CONSTANT};

/* ---- the single-rank reference ------------------------------------------------------------- */

typedef struct Ref {
    DiT m;
    float *init, *grads, *stepped, *out[MAX_M]; /* out: this replica's micro-batches */
    double norm;
} Ref;

static int ref_run(Ref *r, const DiTConfig *cfg, Pack packs[MAX_DP][MAX_M], int dp, int my_dp, int M) {
    memset(r, 0, sizeof *r);
    if (dit_create(&r->m, cfg, DEV_CPU) != VFM_OK || dit_reserve(&r->m, S_FIX, MAXS * TEXT_PER, MAXS) != VFM_OK) return 0;
    int64_t n = r->m.table.total, ow = (int64_t)S_FIX * dit_out_dim(cfg);
    r->init = malloc((size_t)n * sizeof(float)), r->grads = malloc((size_t)n * sizeof(float));
    r->stepped = malloc((size_t)n * sizeof(float));
    test_fill_uniform_f32(r->init, n, 77, -0.15f, 0.15f);
    memcpy(r->m.params, r->init, (size_t)n * sizeof(float));
    memset(r->m.grads, 0, (size_t)n * sizeof(float));
    float *scratch = malloc((size_t)ow * sizeof(float));
    for (int j = 0; j < dp; j++)
        for (int mb = 0; mb < M; mb++) {
            float *o = j == my_dp ? (r->out[mb] = malloc((size_t)ow * sizeof(float))) : scratch;
            Tensor to = TF32(o, S_FIX, dit_out_dim(cfg));
            if (dit_forward(&r->m, &packs[j][mb].in, &to) != VFM_OK ||
                dit_backward(&r->m, &packs[j][mb].in, &packs[j][mb].tdout) != VFM_OK)
                return 0;
        }
    free(scratch);
    Tensor g = TF32(r->m.grads, n);
    if (dp > 1) op_scale(&g, 1.0 / dp);
    memcpy(r->grads, r->m.grads, (size_t)n * sizeof(float));
    Optimizer o;
    if (optimizer_init(&o, &OPT, &r->m.table) != VFM_OK) return 0;
    grad_global_norm(r->grads, n, &r->norm);
    memcpy(r->stepped, r->init, (size_t)n * sizeof(float));
    optimizer_step(&o, r->stepped, r->grads, OPT.lr, clip_scale(&OPT, r->norm));
    optimizer_free(&o);
    return 1;
}

static void ref_free(Ref *r) {
    free(r->init), free(r->grads), free(r->stepped);
    for (int k = 0; k < MAX_M; k++) free(r->out[k]);
    dit_destroy(&r->m);
}

/* local (this rank's layout) = its part of a buffer laid out by the whole single-rank table. */
static void to_local(const DiT *m, float *local, const float *full) {
    if (!m->stage) {
        tp_shard_extract(m->shards, local, full);
        return;
    }
    const ParamTable *st = &m->stage->local;
    float *tmp = malloc((size_t)st->total * sizeof(float));
    for (int i = 0; i < st->count; i++)
        memcpy(tmp + st->entries[i].offset, full + m->full_table->entries[m->stage->full_entry[i]].offset,
               (size_t)st->entries[i].numel * sizeof(float));
    tp_shard_extract(m->shards, local, tmp);
    free(tmp);
}

/* ---- one layout ------------------------------------------------------------------------------ */

typedef struct Layout {
    const char *name;
    int tp, sp, cp, pp, vp, zero1;
    int hybrid; /* ST-DiT's model.cp_comm_type hybrid (its full attention p2p) */
} Layout;

typedef struct StageCtx {
    DiT *m;
    Pack *packs;           /* this replica's M */
    DiTSaved **slots;      /* [M·V] */
    float **out;           /* [M] the last stage's outputs */
    int V;
} StageCtx;

static Tensor hidden(const StageCtx *c, int mb, const void *buf) {
    int64_t rows = 0;
    dit_hidden_rows(c->m, &c->packs[mb].in, &rows);
    return TF32((float *)buf, rows, c->m->cfg.hidden);
}

static vfm_status stage_forward(void *ctx, int mb, int chunk, const void *x, void *y) {
    StageCtx *c = ctx;
    int b0, b1;
    dit_chunk_blocks(c->m, chunk, &b0, &b1);
    Tensor tx = hidden(c, mb, x), ty = hidden(c, mb, y), to = TF32(c->out[mb], S_FIX, dit_out_dim(&c->m->cfg));
    return dit_chunk_forward(c->m, c->slots[mb * c->V + chunk], &c->packs[mb].in, b0, b1, x ? &tx : NULL,
                             y ? &ty : NULL, y ? NULL : &to);
}

static vfm_status stage_backward(void *ctx, int mb, int chunk, const void *dy, void *dx) {
    StageCtx *c = ctx;
    int b0, b1;
    dit_chunk_blocks(c->m, chunk, &b0, &b1);
    Tensor tdy = hidden(c, mb, dy), tdx = hidden(c, mb, dx);
    return dit_chunk_backward(c->m, c->slots[mb * c->V + chunk], &c->packs[mb].in, b0, b1, dy ? &tdy : NULL,
                              dx ? &tdx : NULL, dy ? NULL : &c->packs[mb].tdout);
}

static int anywhere(int v) {
    int x = v != 0;
    comm_all_reduce(mt_world_comm(), &x, 1, DT_I32, COMM_MAX);
    return x;
}
static int everywhere(int v) { return !anywhere(!v); }

/* max over entries of max|a-b| / max|ref| (entries [lo, hi) of the buffer only); names the first
 * entry beyond tol, or (bitwise) the first non-REDUCE_PP entry that differs at all. */
static double compare(const ParamTable *t, const float *got, const float *want, int64_t lo, int64_t hi, double tol,
                      int bitwise, char *bad, size_t bad_n, const char *what) {
    double worst_all = 0;
    for (int i = 0; i < t->count; i++) {
        const ParamEntry *e = &t->entries[i];
        double scale = 0, worst = 0;
        for (int64_t k = e->offset; k < e->offset + e->numel; k++) {
            if (fabs(want[k]) > scale) scale = fabs(want[k]);
            if (k < lo || k >= hi) continue;
            double d = fabs((double)got[k] - want[k]);
            if (d != d) d = INFINITY;
            if (d > worst) worst = d;
        }
        double rel = scale > 0 ? worst / scale : worst;
        if (rel > worst_all) worst_all = rel;
        int must_match = bitwise && !(e->reduce_groups & REDUCE_PP);
        if (!bad[0] && (!(rel <= tol) || (must_match && worst != 0)))
            snprintf(bad, bad_n, "%s of %s (%.1e%s)", what, e->name, rel, must_match && worst != 0 ? ", not bitwise" : "");
    }
    return worst_all;
}

/* Runs the layout with M micro-batches; steps = 2 also checks the replicated entries after a
 * second step. no_pp_sum: the broken variant. Returns 1 when everything matched (collective). */
/* A failed precondition ends the layout on this rank with the reason (the others then fail or time
 * out in their next collective, which ends the job with the test's name). */
#define NEED_OK(expr)                                                                                 \
    do {                                                                                              \
        if ((expr) != 0) {                                                                            \
            snprintf(detail, dn, "%s failed: %s", #expr, vfm_last_error());                           \
            return 0;                                                                                 \
        }                                                                                             \
    } while (0)

/* Activation recomputation in the stage model (none unless dit_pp_world2_recompute sets it): the
 * single-rank reference runs without, so pure PP checks recomputation bit for bit too. */
static RecomputeConfig run_recompute;

static int run_layout(const Layout *L, const DiTConfig *cfg, int M, int no_pp_sum, char *detail, size_t dn) {
    detail[0] = 0;
    int dp = mt_world() / (L->tp * L->cp * L->pp);
    TrainLayout keys = {L->tp, L->pp, L->cp, L->sp, CP_COMM_P2P, 0, L->vp, L->hybrid, 1};
    TrainParallel p;
    NEED_OK(train_parallel_init(&p, &keys, mt_world(), mt_rank()));
    int V = L->vp > 1 ? L->vp : 1, my_dp = p.layout.dp_rank, stage = p.layout.pp_rank;
    int last = stage == L->pp - 1;
    static Pack packs[MAX_DP][MAX_M];
    for (int j = 0; j < dp; j++)
        for (int mb = 0; mb < M; mb++) pack_make(&packs[j][mb], cfg, (mb + j) % 3, 100 * (uint64_t)(j * MAX_M + mb + 1));
    Ref ref;
    NEED_OK(!ref_run(&ref, cfg, packs, dp, my_dp, M));
    DiT m;
    NEED_OK(dit_create_parallel(&m, cfg, DEV_CPU, &p.model));
    int64_t n = m.table.total, ow = (int64_t)S_FIX * dit_out_dim(cfg);
    to_local(&m, m.params, ref.init);
    memset(m.grads, 0, (size_t)n * sizeof(float));
    NEED_OK(dit_set_recompute(&m, &run_recompute));
    NEED_OK(dit_reserve(&m, S_FIX, MAXS * TEXT_PER, MAXS));
    DiTSaved *slots[MAX_M * 2];
    float *outs[MAX_M];
    for (int k = 0; k < M * V; k++) NEED_OK(dit_saved_create(&m, &slots[k]));
    for (int k = 0; k < M; k++) outs[k] = calloc((size_t)ow, sizeof(float));
    int64_t act = 0; /* the fixed pack length's hidden rows: the most any pack places here */
    for (int mb = 0; mb < M; mb++) {
        int64_t rows;
        NEED_OK(dit_hidden_rows(&m, &packs[my_dp][mb].in, &rows));
        if (rows > act) act = rows;
    }
    act *= cfg->hidden;
    PpSchedule sched;
    NEED_OK(pp_schedule_build(&sched, L->pp, M, V, stage));
    StageCtx sc = {&m, packs[my_dp], slots, outs, V};
    PpStage st = {&sc, stage_forward, stage_backward};
    DataParallel dpr;
    DpConfig dc = {1e-3, L->zero1, p.layout.tp_rank, stage, L->cp};
    NEED_OK(dp_init(&dpr, &m.table, &dc, &p.grad, L->tp > 1 ? &p.tp : NULL, no_pp_sum ? NULL : &p.pp));
    dp_set_sequence_parallel(&dpr, L->sp);
    Optimizer o;
    NEED_OK(dp_optimizer_init(&dpr, &o, &OPT));
    float *want = malloc((size_t)n * sizeof(float)), *rep = NULL, *rep0 = NULL;
    int64_t n_rep = 0;
    for (int i = 0; i < m.table.count; i++)
        if (m.table.entries[i].reduce_groups & REDUCE_PP) n_rep += m.table.entries[i].numel;
    rep = malloc((size_t)n_rep * sizeof(float)), rep0 = malloc((size_t)n_rep * sizeof(float));
    int ok = 1, replicated = 1;
    int pure = L->tp == 1 && L->cp == 1 && dp == 1; /* every sum in the single rank's order */
    char bad[200] = "";
    double e_out = 0, e_grad = 0, e_param = 0, e_norm = 0, out_max = 0;
    for (int step = 0; step < 2 && ok; step++) {
        memset(m.grads, 0, (size_t)n * sizeof(float));
        vfm_status s = pp_run(&sched, p.pp.size > 1 ? &p.pp : NULL, &st, act, DT_F32, DEV_CPU, NULL);
        double norm = 0;
        if (s == VFM_OK) s = dp_grad_sync_finish(&dpr, m.grads);
        if (s == VFM_OK) s = dp_grad_norm(&dpr, m.grads, &norm);
        if (s != VFM_OK) {
            snprintf(detail, dn, "failed: %s", vfm_last_error());
            ok = 0;
            break;
        }
        if (step == 0) {
            if (last)
                for (int mb = 0; mb < M; mb++) {
                    for (int64_t k = 0; k < ow; k++) {
                        int row = (int)(k / dit_out_dim(cfg));
                        if (packs[my_dp][mb].t2s[row] < 0) continue;
                        double d = fabs((double)outs[mb][k] - ref.out[mb][k]);
                        if (d != d) d = INFINITY;
                        if (d > e_out) e_out = d;
                        if (fabs(ref.out[mb][k]) > out_max) out_max = fabs(ref.out[mb][k]);
                        if (pure && d != 0 && !bad[0]) snprintf(bad, sizeof bad, "output of micro-batch %d not bitwise", mb);
                    }
                }
            if (out_max > 0) e_out /= out_max;
            to_local(&m, want, ref.grads);
            int64_t lo = L->zero1 ? dpr.own_begin : 0, hi = L->zero1 ? dpr.own_end : n;
            e_grad = compare(&m.table, m.grads, want, lo, hi, 1.1e-5, pure, bad, sizeof bad, "gradient");
            e_norm = fabs(norm - ref.norm) / ref.norm;
        }
        s = dp_optimizer_step(&dpr, &o, m.params, m.grads, OPT.lr, clip_scale(&OPT, norm));
        if (s != VFM_OK) {
            snprintf(detail, dn, "step failed: %s", vfm_last_error());
            ok = 0;
            break;
        }
        if (step == 0) {
            to_local(&m, want, ref.stepped);
            e_param = compare(&m.table, m.params, want, 0, n, 1.1e-5, 0, bad, sizeof bad, "parameter after a step");
        }
        /* the replicated embedders: the same bits on every stage */
        int64_t at = 0;
        for (int i = 0; i < m.table.count; i++) {
            const ParamEntry *e = &m.table.entries[i];
            if (!(e->reduce_groups & REDUCE_PP)) continue;
            memcpy(rep + at, m.params + e->offset, (size_t)e->numel * sizeof(float));
            at += e->numel;
        }
        memcpy(rep0, rep, (size_t)n_rep * sizeof(float));
        if (p.pp.size > 1) NEED_OK(comm_broadcast(&p.pp, rep0, n_rep, DT_F32, 0));
        if (memcmp(rep, rep0, (size_t)n_rep * sizeof(float)) != 0) replicated = 0;
    }
    replicated = everywhere(replicated); /* a differing stage differs from stage 0 */
    double errs[4] = {e_out, e_grad, e_norm, e_param}; /* the worst rank's, for the message */
    comm_all_reduce(mt_world_comm(), errs, 4, DT_F64, COMM_MAX);
    e_out = errs[0], e_grad = errs[1], e_norm = errs[2], e_param = errs[3];
    ok = ok && !bad[0] && e_out <= 1.1e-5 && e_norm <= 1e-5 && replicated;
    if (!detail[0])
        snprintf(detail, dn, "%s%s%serror/max|ref|: output %.1e, gradients %.1e, norm %.1e, parameters after a "
                 "step %.1e; embedders %s across stages after 2 steps", bad, bad[0] ? "; " : "", pure ? "bitwise checked; " : "",
                 e_out, e_grad, e_norm, e_param, replicated ? "identical" : "DIFFER");
    for (int k = 0; k < M * V; k++) dit_saved_destroy(&m, slots[k]);
    for (int k = 0; k < M; k++) free(outs[k]);
    free(want), free(rep), free(rep0);
    optimizer_free(&o);
    dp_free(&dpr);
    pp_schedule_free(&sched);
    dit_destroy(&m);
    ref_free(&ref);
    for (int j = 0; j < dp; j++)
        for (int mb = 0; mb < M; mb++) pack_free(&packs[j][mb]);
    train_parallel_free(&p);
    return everywhere(ok);
}

static void check(const Layout *L, DiTVariant v, int M) {
    DiTConfig cfg = model_config(v);
    char detail[400];
    int ok = run_layout(L, &cfg, M, 0, detail, sizeof detail);
    CHECK_MSG(ok, "%s, %s, M=%d: %s", L->name, dit_variant_name(v), M, detail);
    if (mt_rank() == 0) printf("      %s, %s, M=%d: %s\n", L->name, dit_variant_name(v), M, detail);
}

static void check_broken(const Layout *L, int M) {
    DiTConfig cfg = model_config(DIT_VARIANT_DFM);
    char detail[400];
    int ok = run_layout(L, &cfg, M, 1, detail, sizeof detail);
    CHECK_MSG(!ok, "%s without the PP sum of the embedder gradients still matched", L->name);
    if (mt_rank() == 0) printf("      %s, embedder gradients not summed over PP: %s\n", L->name, detail);
}

TEST(dit_pp_world2_1f1b_and_interleaved) {
    REQUIRE_WORLD(2);
    const Layout pp2 = {"PP2 1F1B", 1, 0, 1, 2, 1, 0, 0}, vp2 = {"PP2 interleaved V=2", 1, 0, 1, 2, 2, 0, 0};
    check(&pp2, DIT_VARIANT_DFM, 2);
    check(&pp2, DIT_VARIANT_DFM, 5);
    check(&pp2, DIT_VARIANT_ADALN_ZERO, 5);
    check(&pp2, DIT_VARIANT_MOVIEGEN, 5); /* its learned position on both stages, summed over PP */
    check(&vp2, DIT_VARIANT_DFM, 2);
    check(&vp2, DIT_VARIANT_ADALN_ZERO, 5);
    check_broken(&pp2, 2);
}

/* Recomputation per chunk, its scratch shared by the micro-batches in flight: PP2 1F1B with full
 * uniform 2 (a chunk's 2 blocks one group) and selective, PP2 V = 2 with full block 1 — bitwise
 * the single-rank model without recomputation (docs/parallel.md "Activation recomputation"). */
TEST(dit_pp_world2_recompute) {
    REQUIRE_WORLD(2);
    const Layout full = {"PP2 1F1B, full uniform 2", 1, 0, 1, 2, 1, 0, 0}, sel = {"PP2 1F1B, selective", 1, 0, 1, 2, 1, 0, 0},
                 blk = {"PP2 interleaved V=2, full block 1", 1, 0, 1, 2, 2, 0, 0};
    run_recompute = (RecomputeConfig){RECOMPUTE_FULL, RECOMPUTE_UNIFORM, 2};
    check(&full, DIT_VARIANT_DFM, 5);
    run_recompute = (RecomputeConfig){RECOMPUTE_SELECTIVE, RECOMPUTE_METHOD_NONE, 0};
    check(&sel, DIT_VARIANT_ADALN_ZERO, 2);
    run_recompute = (RecomputeConfig){RECOMPUTE_FULL, RECOMPUTE_BLOCK, 1};
    check(&blk, DIT_VARIANT_DFM, 5);
    run_recompute = (RecomputeConfig){RECOMPUTE_NONE, RECOMPUTE_METHOD_NONE, 0};
}

TEST(dit_pp_world4_layouts) {
    REQUIRE_WORLD(4);
    const Layout pp4 = {"PP4 1F1B", 1, 0, 1, 4, 1, 0, 0}, tp = {"PP2 x TP2+SP", 2, 1, 1, 2, 1, 0, 0},
                 dp = {"PP2 x DP2 ZeRO-1", 1, 0, 1, 2, 1, 1, 0}, st = {"PP2 x CP2 hybrid", 1, 0, 2, 2, 1, 0, 1};
    check(&pp4, DIT_VARIANT_DFM, 4);
    check(&pp4, DIT_VARIANT_DFM, 9);
    check(&tp, DIT_VARIANT_DFM, 3);
    check(&tp, DIT_VARIANT_ADALN_ZERO, 2);
    check(&tp, DIT_VARIANT_MOVIEGEN, 3);
    check(&dp, DIT_VARIANT_DFM, 3);
    check(&st, DIT_VARIANT_STDIT, 3);
    check_broken(&dp, 2);
}

TEST(dit_pp_world8_cp_tp_sp_pp) {
    REQUIRE_WORLD(8);
    const Layout l = {"CP2 x TP2+SP x PP2", 2, 1, 2, 2, 1, 1, 0};
    check(&l, DIT_VARIANT_DFM, 2);
}

/* The seeds' EP rows at model level, without ZeRO: CP2 × TP2+SP × PP2 × EP2 on 8 ranks, with
 * dfm's MLP an expert-choice MoE (4 experts, capacity factor 2: samples drop tokens). DP is 1, so
 * EP is formed within DP×CP (as Megatron-core does): the EP group is the CP pair, whose ranks hold
 * chunks of the same micro-batches and exchange their experts' slots; the expert-data-parallel
 * group is the rank alone. The reductions are the test's own (dp.c's expert-data-parallel
 * reduction, and so ZeRO-1/ZeRO-3 with EP, is the trainer's side): REDUCE_PP over the stages,
 * REDUCE_TP_* over TP, the experts not at all (each expert's gradient is whole on its owner), the
 * rest over DP×CP. Checked: every micro-batch's output, every gradient, and the parameters after
 * one AdamW step without clipping (the reference's too), within the TP/CP bound; the broken
 * variant (a dispatch all-to-all's rows permuted) must fail. */
static int run_layout_ep(const Layout *L, const DiTConfig *cfg, int M, int brk, char *detail, size_t dn) {
    detail[0] = 0;
    TrainLayout keys = {L->tp, L->pp, L->cp, L->sp, CP_COMM_P2P, 0, 1, 0, 1};
    TrainParallel p;
    NEED_OK(train_parallel_init(&p, &keys, mt_world(), mt_rank()));
    NEED_OK(p.layout.dp != 1); /* the EP group below is the CP pair */
    int stage = p.layout.pp_rank, last = stage == L->pp - 1;
    static Pack packs[MAX_DP][MAX_M];
    for (int mb = 0; mb < M; mb++) pack_make(&packs[0][mb], cfg, mb % 3, 100 * (uint64_t)(mb + 1));
    Ref ref;
    NEED_OK(!ref_run(&ref, cfg, packs, 1, 0, M));
    Comm ep;
    int members[8];
    int me = group_members(&p.layout, GROUP_DP_CP, p.layout.rank, members);
    NEED_OK(comm_create(&ep, "ep", COMM_BACKEND_MPI, members, 2));
    DiTParallel par = p.model;
    par.ep = 2, par.ep_rank = me, par.ep_comm = &ep, par.test_permute_ep_a2a = brk;
    DiT m;
    NEED_OK(dit_create_parallel(&m, cfg, DEV_CPU, &par));
    int64_t n = m.table.total, ow = (int64_t)S_FIX * dit_out_dim(cfg);
    to_local(&m, m.params, ref.init);
    memset(m.grads, 0, (size_t)n * sizeof(float));
    NEED_OK(dit_reserve(&m, S_FIX, MAXS * TEXT_PER, MAXS));
    DiTSaved *slots[MAX_M];
    float *outs[MAX_M];
    for (int k = 0; k < M; k++) NEED_OK(dit_saved_create(&m, &slots[k]));
    for (int k = 0; k < M; k++) outs[k] = calloc((size_t)ow, sizeof(float));
    int64_t act = 0;
    for (int mb = 0; mb < M; mb++) {
        int64_t rows;
        NEED_OK(dit_hidden_rows(&m, &packs[0][mb].in, &rows));
        if (rows > act) act = rows;
    }
    act *= cfg->hidden;
    PpSchedule sched;
    NEED_OK(pp_schedule_build(&sched, L->pp, M, 1, stage));
    StageCtx sc = {&m, packs[0], slots, outs, 1};
    PpStage st = {&sc, stage_forward, stage_backward};
    NEED_OK(pp_run(&sched, &p.pp, &st, act, DT_F32, DEV_CPU, NULL));
    for (int i = 0; i < m.table.count; i++) {
        const ParamEntry *e = &m.table.entries[i];
        float *g = m.grads + e->offset;
        unsigned rg = e->reduce_groups;
        if (rg & REDUCE_PP) NEED_OK(comm_all_reduce(&p.pp, g, e->numel, DT_F32, COMM_SUM_ORDERED));
        if ((rg & REDUCE_TP_HEADS) || (L->sp && (rg & REDUCE_TP_SP)))
            NEED_OK(comm_all_reduce(&p.tp, g, e->numel, DT_F32, COMM_SUM_ORDERED));
        if (!(rg & REDUCE_EXPERT)) NEED_OK(comm_all_reduce(&p.grad, g, e->numel, DT_F32, COMM_SUM_ORDERED));
    }
    char bad[200] = "";
    double e_out = 0, out_max = 0;
    if (last)
        for (int mb = 0; mb < M; mb++)
            for (int64_t k = 0; k < ow; k++) {
                if (packs[0][mb].t2s[k / dit_out_dim(cfg)] < 0) continue;
                double d = fabs((double)outs[mb][k] - ref.out[mb][k]);
                e_out = d != d ? INFINITY : d > e_out ? d : e_out;
                out_max = fabs(ref.out[mb][k]) > out_max ? fabs(ref.out[mb][k]) : out_max;
            }
    if (out_max > 0) e_out /= out_max;
    float *want = malloc((size_t)n * sizeof(float));
    to_local(&m, want, ref.grads);
    double e_grad = compare(&m.table, m.grads, want, 0, n, 1.1e-5, 0, bad, sizeof bad, "gradient");
    /* one AdamW step without clipping on both sides */
    Optimizer o, ro;
    NEED_OK(optimizer_init(&o, &OPT, &m.table));
    NEED_OK(optimizer_init(&ro, &OPT, &ref.m.table));
    memcpy(ref.stepped, ref.init, (size_t)ref.m.table.total * sizeof(float));
    optimizer_step(&ro, ref.stepped, ref.grads, OPT.lr, 1.0);
    optimizer_step(&o, m.params, m.grads, OPT.lr, 1.0);
    to_local(&m, want, ref.stepped);
    double e_param = compare(&m.table, m.params, want, 0, n, 1.1e-5, 0, bad, sizeof bad, "parameter after a step");
    double errs[3] = {e_out, e_grad, e_param};
    comm_all_reduce(mt_world_comm(), errs, 3, DT_F64, COMM_MAX);
    int ok = !bad[0] && errs[0] <= 1.1e-5;
    snprintf(detail, dn, "%s%serror/max|ref|: output %.1e, gradients %.1e, parameters after a step %.1e", bad,
             bad[0] ? "; " : "", errs[0], errs[1], errs[2]);
    optimizer_free(&o), optimizer_free(&ro);
    free(want);
    for (int k = 0; k < M; k++) dit_saved_destroy(&m, slots[k]), free(outs[k]);
    pp_schedule_free(&sched);
    dit_destroy(&m);
    comm_free(&ep);
    ref_free(&ref);
    for (int mb = 0; mb < M; mb++) pack_free(&packs[0][mb]);
    train_parallel_free(&p);
    return everywhere(ok);
}

TEST(dit_pp_world8_cp_tp_sp_pp_ep_moe) {
    REQUIRE_WORLD(8);
    const Layout l = {"CP2 x TP2+SP x PP2 x EP2 (EP over CP)", 2, 1, 2, 2, 1, 0, 0};
    DiTConfig cfg = model_config(DIT_VARIANT_DFM);
    cfg.moe = (MoeSpec){.experts = 4, .ffn = 16, .topk = 1, .capacity_factor = 2.f, .routing = MOE_EXPERT_CHOICE};
    REQUIRE_OK(dit_config_resolve(&cfg));
    char detail[400];
    int ok = run_layout_ep(&l, &cfg, 2, 0, detail, sizeof detail);
    CHECK_MSG(ok, "%s: %s", l.name, detail);
    if (mt_rank() == 0) printf("      %s, dfm with an expert-choice MoE, M=2: %s\n", l.name, detail);
    ok = run_layout_ep(&l, &cfg, 2, 1, detail, sizeof detail);
    CHECK_MSG(!ok, "%s with a dispatch all-to-all's rows permuted still matched", l.name);
    if (mt_rank() == 0) printf("      %s, a dispatch's rows permuted: %s\n", l.name, detail);
}

/* Checkpoints stay layout-independent under PP: weights written by the stages of PP2 × TP2 (each
 * its own entries, the replicated embedders by every stage with the same bytes) are the whole
 * single-rank tensors: read back at PP1 (one rank's model) and at PP2 × TP2, bit for bit. */
TEST(dit_pp_checkpoint_pp2_tp2_reads_at_pp1) {
    REQUIRE_WORLD(4);
    DiTConfig cfg = model_config(DIT_VARIANT_ADALN_ZERO);
    TrainLayout keys = {2, 2, 1, 1, CP_COMM_P2P, 0, 1, 0, 1};
    TrainParallel p;
    REQUIRE_OK(train_parallel_init(&p, &keys, mt_world(), mt_rank()));
    DiT one, m;
    REQUIRE_OK(dit_create(&one, &cfg, DEV_CPU));
    REQUIRE_OK(dit_create_parallel(&m, &cfg, DEV_CPU, &p.model));
    int64_t n1 = one.table.total;
    float *init = malloc((size_t)n1 * sizeof(float)), *back = malloc((size_t)m.table.total * sizeof(float));
    test_fill_uniform_f32(init, n1, 91, -1, 1);
    to_local(&m, m.params, init);
    int32_t pid = (int32_t)getpid(); /* rank 0's names the file */
    REQUIRE_OK(comm_broadcast(mt_world_comm(), &pid, 1, DT_I32, 0));
    char path[256];
    snprintf(path, sizeof path, "/tmp/vfm_pp_ckpt_%d.safetensors", (int)pid);
    REQUIRE_OK(ckpt_write_weights(path, &p.world, m.shards, m.params, p.layout.dp_rank == 0 && p.layout.cp_rank == 0));
    memset(one.params, 0, (size_t)n1 * sizeof(float));
    CHECK_OK(ckpt_read_weights(path, one.shards, one.params));
    CHECK_SAME_BITS("PP2 x TP2 checkpoint read at PP1", one.params, init, n1);
    CHECK_OK(ckpt_read_weights(path, m.shards, back));
    CHECK_SAME_BITS("PP2 x TP2 checkpoint read at PP2 x TP2", back, m.params, m.table.total);
    comm_barrier(mt_world_comm());
    if (mt_rank() == 0) remove(path);
    free(init), free(back);
    dit_destroy(&one), dit_destroy(&m);
    train_parallel_free(&p);
}
