/* The DiT under tensor, sequence, context and data parallelism against the single-rank model
 * (issue 12 §4; docs/parallel.md). Every rank builds the same packs and the same random weights
 * (random, not the variant's init: zero gates would hide a broken backward), runs the single-rank
 * model as the reference, then its own rank of the layout (src/train/train_parallel.c makes the
 * groups as the trainer does) on the same packs:
 *   - per layer: the residual stream after every sub-layer (forward) and its gradient before it
 *     (backward), gathered to the whole pack (dit_gather_rows), so a failure names the layer;
 *   - the whole output, every parameter gradient after the DP×CP / TP reductions of dp.c, the
 *     global gradient norm, and the parameters after one clipped AdamW step.
 * Tolerance per tensor (design §3, context-parallel.md §7): max|a-b| <= (1e-6 + 1e-5)·max|ref|,
 * over real token rows. Layouts by world size: 2: TP2, TP2+SP, CP2 p2p, CP2 a2a, CP2 all_gather; 3: CP3 p2p (odd
 * ring); 4: TP4+SP, CP4 a2a+p2p (2×2), TP2+SP × CP2, DP2 × TP2+SP with ZeRO-1, DP2 × CP2. Each runs
 * dfm (GQA where TP allows, cross-attention, QK-norm), nemo-adaln, adaln-zero (fused qkv by
 * parts, biases, class labels, learned sigma, conv patch) and moviegen (RMSNorm blocks, the cross-
 * attention feeding the MLP, SwiGLU, the learned position; with the broken variants) on a pack that stresses the splits (a
 * 3-frame video of 45 tokens, 20 tokens in a 64-row slot: at CP4 two ranks hold none of its
 * queries, a 1-token sample, a 2-frame video), and dfm again on the same samples with no padding at
 * all (the model re-pads internally, as sampling packs need). Bitwise where the order of every sum
 * is the same: ZeRO-1 vs plain DP, and a layout run twice. Broken variants that must fail, naming the layer where it shows: a TP
 * reduction skipped (block 1's self-attention), a ring step dropped (block 0's self-attention), and
 * CP gradients averaged instead of summed. Bad layouts are refused before any work. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/dit.h"
#include "mpi_test.h"
#include "../unit/dit_pack.h"
#include "ops/ops.h"
#include "optim/optimizer.h"
#include "parallel/dp.h"
#include "train/train_parallel.h"

enum { NS = 4, D_TEXT = 16, MAX_PROBES = 64 };
static const int GRID[NS][3] = {{3, 3, 5}, {1, 4, 5}, {1, 1, 1}, {2, 2, 3}}; /* 45, 20, 1, 12 tokens (dit_pack.h) */
static const int TEXT_LEN[NS] = {3, 5, 1, 2};

/* ---- models ---------------------------------------------------------------------------------- */

static DiTConfig model_config(DiTVariant v, int tp) {
    DiTConfig c;
    memset(&c, 0, sizeof c);
    c.variant = v;
    c.hidden = 64, c.layers = 2, c.heads = 4;
    c.kv_heads = (v == DIT_VARIANT_DFM || v == DIT_VARIANT_MOVIEGEN) && tp <= 2 ? 2 : 4; /* GQA wherever TP divides them */
    c.in_channels = 4, c.out_channels = 4, c.patch_spatial = 2, c.patch_temporal = 1;
    c.d_text = D_TEXT, c.adaln_lora = 16, c.fps_dim = 16, c.qk_norm = 1, c.ln_eps = 1e-5f, c.init_std = 0.02f;
    if (v == DIT_VARIANT_ADALN_ZERO) c.num_classes = 3, c.class_dropout_prob = 0.1f, c.learn_sigma = 1;
    if (v == DIT_VARIANT_STDIT) /* 2 ST-DiT layers: spatial, temporal, full (every 2nd layer), temporal */
        c.layers = 4, c.stdit_full_every = 2, c.kv_heads = tp <= 2 ? 2 : 4;
    dit_config_resolve(&c);
    return c;
}

/* The trainer's defaults (eps 1e-5: at eps 1e-8 the first AdamW step, lr·g/(|g| + eps), turns the
 * rounding noise of gradients that are zero in exact arithmetic, such as a k bias's, into updates
 * of up to lr), with clipping active (the norm here is about 1) so the TP/ZeRO norm is tested. */
static const OptimConfig OPT = {.lr = 1e-3, .min_lr = 1e-3, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-5, .weight_decay = 0.033,
                                .clip_grad = 0.05, .warmup_init = 1e-3, .decay_iters = 10, .decay_style = LR_DECAY_CONSTANT};

/* ---- probes ---------------------------------------------------------------------------------- */

typedef struct Probes {
    int n;
    char site[MAX_PROBES][16];
    int layer[MAX_PROBES];
    float *rows[MAX_PROBES]; /* whole pack [S, D] */
} Probes;

typedef struct ProbeCtx {
    DiT *m;
    const DitPack *pack;
    Probes *record;          /* reference: keep every probe */
    const Probes *ref;       /* parallel: compare with these (in the same order) */
    int at;
    char first_bad[48];      /* "blocks.1 self_attn" of the first mismatch */
    double worst;
    Probes *keep;            /* parallel: also keep the gathered rows (bitwise TP vs TP+SP) */
} ProbeCtx;

static int real_row(const DitPack *p, int64_t r) {
    for (int i = 0; i < NS; i++)
        if (r >= p->cu_pad[i] && r < p->cu_pad[i] + p->cu[i + 1] - p->cu[i]) return 1;
    return 0;
}

/* max over real rows of |a-b| / max|ref| (inf on NaN). */
static double rows_err(const DitPack *p, const float *got, const float *want, int64_t w) {
    double e = 0, m = 0;
    for (int64_t r = 0; r < p->S; r++) {
        if (!real_row(p, r)) continue;
        for (int64_t k = 0; k < w; k++) {
            double d = fabs((double)got[r * w + k] - want[r * w + k]);
            if (d != d) d = INFINITY;
            if (d > e) e = d;
            if (fabs(want[r * w + k]) > m) m = fabs(want[r * w + k]);
        }
    }
    return m > 0 ? e / m : e;
}

static void probe_cb(void *vctx, const char *site, int layer, const Tensor *rows) {
    ProbeCtx *c = vctx;
    int64_t D = c->m->cfg.hidden;
    float *whole = calloc((size_t)(c->pack->S * D), sizeof(float));
    Tensor tw = TF32(whole, c->pack->S, D);
    if (dit_gather_rows(c->m, rows, &tw) != VFM_OK) test_fail(__FILE__, __LINE__, "gather: %s", vfm_last_error());
    if (c->record && c->record->n < MAX_PROBES) {
        Probes *r = c->record;
        snprintf(r->site[r->n], sizeof r->site[0], "%s", site);
        r->layer[r->n] = layer;
        r->rows[r->n++] = whole;
        return;
    }
    if (c->ref && c->at < c->ref->n) {
        double e = rows_err(c->pack, whole, c->ref->rows[c->at], D);
        if (e > c->worst) c->worst = e;
        if (!(e <= 1.1e-5) && !c->first_bad[0]) snprintf(c->first_bad, sizeof c->first_bad, "blocks.%d %s", layer, site);
    }
    c->at++;
    if (c->keep && c->keep->n < MAX_PROBES) c->keep->rows[c->keep->n++] = whole;
    else free(whole);
}

static void probes_free(Probes *p) {
    for (int i = 0; i < p->n; i++) free(p->rows[i]);
    p->n = 0;
}

/* ---- the single-rank reference ----------------------------------------------------------------- */

typedef struct Ref {
    DiTConfig cfg;
    DiT m;
    float *init;       /* [full] the random weights both runs start from */
    float *out;        /* [S, out] this replica's output */
    float *grads;      /* [full] mean over the replicas */
    float *stepped;    /* [full] parameters after one AdamW step */
    double norm;
    Probes probes;     /* this replica's */
} Ref;

static double entry_max(const float *x, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++)
        if (fabs(x[i]) > m) m = fabs(x[i]);
    return m;
}

/* The reference for replica my_dp of dp replicas (packs[j] is replica j's). */
static int ref_run(Ref *r, const DiTConfig *cfg, DitPack *packs, int dp, int my_dp) {
    memset(r, 0, sizeof *r);
    r->cfg = *cfg;
    if (dit_create(&r->m, cfg, DEV_CPU) != VFM_OK) return 0;
    int64_t n = r->m.table.total;
    r->init = malloc((size_t)n * sizeof(float)), r->grads = malloc((size_t)n * sizeof(float));
    r->stepped = malloc((size_t)n * sizeof(float));
    r->out = malloc((size_t)(packs[0].S * dit_out_dim(cfg)) * sizeof(float));
    test_fill_uniform_f32(r->init, n, 77, -0.15f, 0.15f);
    memcpy(r->m.params, r->init, (size_t)n * sizeof(float));
    memset(r->m.grads, 0, (size_t)n * sizeof(float));
    ProbeCtx pc = {.m = &r->m, .record = &r->probes};
    for (int j = 0; j < dp; j++) {
        int me = (my_dp + 1 + j) % dp; /* this replica's pack last, with the probes on */
        pc.pack = &packs[me];
        r->m.probe = me == my_dp ? probe_cb : NULL;
        r->m.probe_ctx = &pc;
        Tensor out = TF32(r->out, packs[me].S, dit_out_dim(cfg));
        if (dit_reserve(&r->m, packs[me].S, packs[me].L, NS) != VFM_OK || dit_forward(&r->m, &packs[me].in, &out) != VFM_OK ||
            dit_backward(&r->m, &packs[me].in, &packs[me].tdout) != VFM_OK)
            return 0;
    }
    r->m.probe = NULL;
    Tensor g = TF32(r->m.grads, n);
    if (dp > 1) op_scale(&g, 1.0 / dp);
    memcpy(r->grads, r->m.grads, (size_t)n * sizeof(float));
    for (int i = 0; i < r->m.table.count; i++) /* every gradient is non-zero, or a broken backward could hide */
        if (entry_max(r->grads + r->m.table.entries[i].offset, r->m.table.entries[i].numel) == 0)
            test_fail(__FILE__, __LINE__, "reference gradient of %s is zero", r->m.table.entries[i].name);
    Optimizer o;
    if (optimizer_init(&o, &OPT, &r->m.table) != VFM_OK) return 0;
    grad_global_norm(r->grads, n, &r->norm);
    memcpy(r->stepped, r->init, (size_t)n * sizeof(float));
    optimizer_step(&o, r->stepped, r->grads, OPT.lr, clip_scale(&OPT, r->norm));
    optimizer_free(&o);
    return 1;
}

static void ref_free(Ref *r) {
    probes_free(&r->probes);
    free(r->init), free(r->out), free(r->grads), free(r->stepped);
    dit_destroy(&r->m);
}

/* ---- one layout ------------------------------------------------------------------------------- */

typedef struct Layout {
    const char *name;
    int tp, sp, cp;
    CpCommType type;
    int a2a;
    int zero1;
} Layout;

enum { BREAK_NONE, BREAK_TP, BREAK_RING, BREAK_CP_MEAN, BREAK_ST };

/* The layout keys; type CP_COMM_HYBRID (ST-DiT) runs its full attention as p2p (a2a = 0), a2a
 * (a2a = cp) or a2a+p2p. */
static TrainLayout layout_keys(const Layout *L) {
    int hybrid = L->type == CP_COMM_HYBRID;
    CpCommType t = !hybrid ? L->type : L->a2a == 0 ? CP_COMM_P2P : L->a2a == L->cp ? CP_COMM_A2A : CP_COMM_A2A_P2P;
    TrainLayout k = {L->tp, 1, L->cp, L->sp, t, L->a2a, 1, hybrid, 1};
    return k;
}

/* ST-DiT: the bytes this rank sent over CP in each span's self-attentions against the formula
 * (dit_st_block_bytes, docs/parallel.md); "" when they agree, else what differs. */
static void st_bytes_check(const DiT *m, const double sent[3][2], char *bad, size_t n) {
    int t[NS], tokens[NS], count[3];
    for (int i = 0; i < NS; i++) t[i] = GRID[i][0], tokens[i] = GRID[i][1] * GRID[i][2];
    double per[3][2];
    dit_st_block_bytes(m, NS, t, tokens, m->par.cp_rank, 4, per);
    dit_st_span_blocks(m, count);
    static const char *const SPAN[] = {"full", "spatial", "temporal"};
    bad[0] = 0;
    for (int k = 0; k < 3 && !bad[0]; k++)
        for (int d = 0; d < 2 && !bad[0]; d++)
            if (fabs(sent[k][d] - count[k] * per[k][d]) > 0.5)
                snprintf(bad, n, "CP bytes of the %s attention (%s): sent %.0f, formula %d x %.0f", SPAN[k],
                         d ? "backward" : "forward", sent[k][d], count[k], per[k][d]);
}

typedef struct Outcome {
    int ok;             /* everything within the tolerance */
    char first_bad[48]; /* the first probe that differs ("" if none) */
    char detail[320];
} Outcome;

/* 1 when v holds on some rank (collective). */
static int anywhere(int v) {
    int x = v != 0;
    comm_all_reduce(mt_world_comm(), &x, 1, DT_I32, COMM_MAX);
    return x;
}
static int everywhere(int v) { return !anywhere(!v); }

/* What a run leaves for bitwise comparisons: the gathered probes, the output, the parameters after
 * the step (this rank's local table). */
typedef struct RunKeep {
    Probes probes;
    float *out, *params;
    int64_t n_params;
} RunKeep;

static void keep_free(RunKeep *k) {
    probes_free(&k->probes);
    free(k->out), free(k->params);
}

/* Runs the layout on this rank and compares it with ref (packs[dp_rank]); keep may be NULL. */
static Outcome run_layout(const Layout *L, const DiTConfig *cfg, DitPack *packs, const Ref *ref, int brk, RunKeep *keep) {
    Outcome res = {0, "", ""};
    TrainLayout keys = layout_keys(L);
    TrainParallel p;
    if (train_parallel_init(&p, &keys, mt_world(), mt_rank()) != VFM_OK) {
        snprintf(res.detail, sizeof res.detail, "train_parallel_init: %s", vfm_last_error());
        return res;
    }
    if (brk == BREAK_TP) p.model.test_skip_tp_reduce = 2;
    if (brk == BREAK_RING) p.model.cpa.test_drop_ring_step = 1;
    if (brk == BREAK_ST) p.model.test_skip_st_a2a = 2;
    DiT m;
    DitPack *pk = &packs[p.layout.dp_rank];
    int ok = dit_create_parallel(&m, cfg, DEV_CPU, &p.model) == VFM_OK;
    if (!ok) {
        snprintf(res.detail, sizeof res.detail, "dit_create_parallel: %s", vfm_last_error());
        train_parallel_free(&p);
        return res;
    }
    const ParamTable *lt = &m.table;
    int64_t n = lt->total, out_w = dit_out_dim(cfg);
    float *want = malloc((size_t)n * sizeof(float)), *out = calloc((size_t)(pk->S * out_w), sizeof(float));
    tp_shard_extract(m.shards, m.params, ref->init);
    memset(m.grads, 0, (size_t)n * sizeof(float));
    ProbeCtx pc = {.m = &m, .pack = pk, .ref = &ref->probes, .keep = keep ? &keep->probes : NULL};
    m.probe = probe_cb, m.probe_ctx = &pc;
    double sent[3][2] = {{0}};
    char bad_bytes[160] = "";
    if (cfg->f.factorised) m.cp_sent = sent;
    Tensor tout = TF32(out, pk->S, out_w);
    vfm_status s = dit_reserve(&m, pk->S, pk->L, NS);
    if (s == VFM_OK) s = dit_forward(&m, &pk->in, &tout);
    if (s == VFM_OK) s = dit_backward(&m, &pk->in, &pk->tdout);
    m.probe = NULL;
    if (s == VFM_OK && cfg->f.factorised) st_bytes_check(&m, (const double (*)[2])sent, bad_bytes, sizeof bad_bytes);
    double e_out = s == VFM_OK ? rows_err(pk, out, ref->out, out_w) : INFINITY;
    DataParallel dp;
    int have_dp = 0;
    double norm = 0;
    if (s == VFM_OK) s = train_parallel_dp_init(&p, &dp, &m, 1e-3, L->zero1);
    have_dp = s == VFM_OK;
    if (have_dp && brk == BREAK_CP_MEAN) dp.cfg.cp = 1; /* averaged over CP instead of summed */
    if (s == VFM_OK) s = dp_grad_sync_finish(&dp, m.grads);
    if (s == VFM_OK) s = dp_grad_norm(&dp, m.grads, &norm);
    /* gradients (ZeRO-1: only this rank's shard is reduced) and one AdamW step */
    char bad_entry[128] = "";
    double e_grad = 0, e_param = 0;
    if (s == VFM_OK) {
        tp_shard_extract(m.shards, want, ref->grads);
        int64_t lo = L->zero1 ? dp.own_begin : 0, hi = L->zero1 ? dp.own_end : n;
        for (int i = 0; i < lt->count; i++) {
            const ParamEntry *e = &lt->entries[i];
            double scale = entry_max(want + e->offset, e->numel), worst = 0;
            for (int64_t k = e->offset; k < e->offset + e->numel; k++) {
                if (k < lo || k >= hi) continue;
                double d = fabs((double)m.grads[k] - want[k]);
                if (d != d) d = INFINITY;
                if (d > worst) worst = d;
            }
            double rel = scale > 0 ? worst / scale : worst;
            if (rel > e_grad) e_grad = rel;
            if (!(rel <= 1.1e-5) && !bad_entry[0]) snprintf(bad_entry, sizeof bad_entry, "gradient of %s", e->name);
        }
        Optimizer o;
        s = dp_optimizer_init(&dp, &o, &OPT);
        if (s == VFM_OK) s = dp_optimizer_step(&dp, &o, m.params, m.grads, OPT.lr, clip_scale(&OPT, norm));
        if (s == VFM_OK) {
            tp_shard_extract(m.shards, want, ref->stepped);
            for (int i = 0; i < lt->count; i++) {
                const ParamEntry *e = &lt->entries[i];
                double scale = entry_max(want + e->offset, e->numel), worst = 0;
                for (int64_t k = e->offset; k < e->offset + e->numel; k++) {
                    double d = fabs((double)m.params[k] - want[k]);
                    if (d != d) d = INFINITY;
                    if (d > worst) worst = d;
                }
                double rel = scale > 0 ? worst / scale : worst;
                if (rel > e_param) e_param = rel;
                if (!(rel <= 1.1e-5) && !bad_entry[0]) snprintf(bad_entry, sizeof bad_entry, "parameter %s after one step", e->name);
            }
        }
        optimizer_free(&o);
    }
    double e_norm = fabs(norm - ref->norm) / ref->norm;
    res.ok = s == VFM_OK && !pc.first_bad[0] && e_out <= 1.1e-5 && !bad_entry[0] && e_norm <= 1e-5 && !bad_bytes[0];
    if (bad_bytes[0] && !bad_entry[0]) snprintf(bad_entry, sizeof bad_entry, "%s", bad_bytes);
    snprintf(res.first_bad, sizeof res.first_bad, "%s", pc.first_bad);
    if (s != VFM_OK) snprintf(res.detail, sizeof res.detail, "failed: %s", vfm_last_error());
    else
        snprintf(res.detail, sizeof res.detail, "%s%s%s%s%serror/max|ref|: layers %.1e, output %.1e, gradients %.1e, "
                 "norm %.1e, parameters after a step %.1e", pc.first_bad[0] ? "first difference at " : "", pc.first_bad,
                 pc.first_bad[0] ? "; " : "", bad_entry, bad_entry[0] ? " differs; " : "", pc.worst, e_out, e_grad,
                 e_norm, e_param);
    if (keep) {
        keep->out = out;
        keep->n_params = n;
        keep->params = malloc((size_t)n * sizeof(float));
        memcpy(keep->params, m.params, (size_t)n * sizeof(float));
    } else {
        free(out);
    }
    free(want);
    if (have_dp) dp_free(&dp);
    dit_destroy(&m);
    train_parallel_free(&p);
    return res;
}

static const char *variant_label(DiTVariant v) { return dit_variant_name(v); }

/* Every variant (and dfm without padding) at this layout, plus its broken variants. */
static void check_layout(const Layout *L) {
    int dp = mt_world() / (L->tp * L->cp);
    TrainLayout keys = layout_keys(L);
    ParallelLayout pl;
    REQUIRE_OK(layout_init(&pl, mt_world(), mt_rank(), keys.tp, 1, keys.cp));
    struct { DiTVariant v; int pad; } cases[] = {{DIT_VARIANT_DFM, 64}, {DIT_VARIANT_DFM, 1}, {DIT_VARIANT_NEMO_ADALN, 64},
                                                {DIT_VARIANT_ADALN_ZERO, 64}, {DIT_VARIANT_MOVIEGEN, 64}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        DiTConfig cfg = model_config(cases[k].v, L->tp);
        DitPack packs[2];
        for (int j = 0; j < dp; j++) dit_pack_make_shaped(&packs[j], &cfg, GRID, TEXT_LEN, cases[k].pad, 1000 * (uint64_t)(j + 1));
        Ref ref;
        REQUIRE(ref_run(&ref, &cfg, packs, dp, pl.dp_rank));
        Outcome o = run_layout(L, &cfg, packs, &ref, BREAK_NONE, NULL);
        int ok = everywhere(o.ok);
        CHECK_MSG(ok, "%s, %s%s: %s", L->name, variant_label(cases[k].v), cases[k].pad == 1 ? " (no padding)" : "",
                  o.detail);
        if (mt_rank() == 0 && k == 0) printf("      %s: %s\n", L->name, o.detail);
        if (k == 0 || cases[k].v == DIT_VARIANT_MOVIEGEN) { /* the broken variants must fail, where they break */
            if (L->tp > 1) {
                Outcome b = run_layout(L, &cfg, packs, &ref, BREAK_TP, NULL);
                CHECK_MSG(anywhere(!b.ok), "%s with a TP reduction skipped still matched", L->name);
                CHECK_MSG(strcmp(b.first_bad, "blocks.1 self_attn") == 0,
                          "%s, TP reduction of block 1's self-attention skipped: first difference at '%s'", L->name,
                          b.first_bad);
                if (mt_rank() == 0) printf("      %s, a TP reduction skipped: %s\n", L->name, b.detail);
            }
            if (L->cp > 1 && L->type != CP_COMM_A2A && L->type != CP_COMM_ALL_GATHER) {
                Outcome b = run_layout(L, &cfg, packs, &ref, BREAK_RING, NULL);
                CHECK_MSG(anywhere(!b.ok), "%s with a ring step dropped still matched", L->name);
                CHECK_MSG(strcmp(b.first_bad, "blocks.0 self_attn") == 0,
                          "%s, ring step dropped: first difference at '%s'", L->name, b.first_bad);
                if (mt_rank() == 0) printf("      %s, a ring step dropped: %s\n", L->name, b.detail);
            }
            if (L->cp > 1) {
                Outcome b = run_layout(L, &cfg, packs, &ref, BREAK_CP_MEAN, NULL);
                CHECK_MSG(anywhere(!b.ok), "%s with gradients averaged over CP still matched", L->name);
                if (mt_rank() == 0) printf("      %s, gradients averaged over CP: %s\n", L->name, b.detail);
            }
        }
        ref_free(&ref);
        for (int j = 0; j < dp; j++) dit_pack_free(&packs[j]);
    }
}

/* ST-DiT at a layout (hybrid, or plain p2p), with and without padding in the pack, and its broken
 * variants: an all-to-all skipped (hybrid) or a ring step dropped (p2p) at block 1's temporal
 * attention, and CP gradients averaged. */
static void check_stdit_layout(const Layout *L) {
    int dp = mt_world() / (L->tp * L->cp);
    TrainLayout keys = layout_keys(L);
    ParallelLayout pl;
    REQUIRE_OK(layout_init(&pl, mt_world(), mt_rank(), keys.tp, 1, keys.cp));
    DiTConfig cfg = model_config(DIT_VARIANT_STDIT, L->tp);
    for (int pad = 64; pad >= 1; pad -= 63) {
        DitPack packs[2];
        for (int j = 0; j < dp; j++) dit_pack_make_shaped(&packs[j], &cfg, GRID, TEXT_LEN, pad, 1000 * (uint64_t)(j + 1));
        Ref ref;
        REQUIRE(ref_run(&ref, &cfg, packs, dp, pl.dp_rank));
        Outcome o = run_layout(L, &cfg, packs, &ref, BREAK_NONE, NULL);
        CHECK_MSG(everywhere(o.ok), "%s, stdit%s: %s", L->name, pad == 1 ? " (no padding)" : "", o.detail);
        if (mt_rank() == 0 && pad == 64) printf("      %s, stdit: %s\n", L->name, o.detail);
        if (pad == 64 && L->cp > 1) {
            int hybrid = L->type == CP_COMM_HYBRID;
            Outcome b = run_layout(L, &cfg, packs, &ref, hybrid ? BREAK_ST : BREAK_RING, NULL);
            CHECK_MSG(anywhere(!b.ok), "%s with block 1's %s still matched", L->name,
                      hybrid ? "all-to-all skipped" : "ring step dropped");
            CHECK_MSG(strcmp(b.first_bad, "blocks.1 self_attn") == 0, "%s, block 1 broken: first difference at '%s'",
                      L->name, b.first_bad);
            if (mt_rank() == 0) printf("      %s, %s: %s\n", L->name, hybrid ? "an all-to-all skipped" : "a ring step dropped", b.detail);
            b = run_layout(L, &cfg, packs, &ref, BREAK_CP_MEAN, NULL);
            CHECK_MSG(anywhere(!b.ok), "%s (stdit) with gradients averaged over CP still matched", L->name);
        }
        ref_free(&ref);
        for (int j = 0; j < dp; j++) dit_pack_free(&packs[j]);
    }
}

TEST(dit_parallel_stdit_world1) {
    REQUIRE_WORLD(1);
    const Layout l = {"one rank", 1, 0, 1, CP_COMM_P2P, 0, 0};
    check_stdit_layout(&l);
}

TEST(dit_parallel_stdit_world2) {
    REQUIRE_WORLD(2);
    const Layout ls[] = {{"CP2 hybrid", 1, 0, 2, CP_COMM_HYBRID, 0, 0}, {"CP2 p2p", 1, 0, 2, CP_COMM_P2P, 0, 0},
                         {"TP2+SP", 2, 1, 1, CP_COMM_P2P, 0, 0}};
    for (size_t i = 0; i < sizeof ls / sizeof ls[0]; i++) check_stdit_layout(&ls[i]);
}

TEST(dit_parallel_stdit_world3) {
    REQUIRE_WORLD(3);
    const Layout l = {"CP3 hybrid", 1, 0, 3, CP_COMM_HYBRID, 0, 0};
    check_stdit_layout(&l);
}

TEST(dit_parallel_stdit_world4) {
    REQUIRE_WORLD(4);
    const Layout ls[] = {{"CP4 hybrid", 1, 0, 4, CP_COMM_HYBRID, 0, 0},
                         {"CP4 hybrid, full attention a2a+p2p 2x2", 1, 0, 4, CP_COMM_HYBRID, 2, 0},
                         {"TP2+SP x CP2 hybrid", 2, 1, 2, CP_COMM_HYBRID, 0, 0}};
    for (size_t i = 0; i < sizeof ls / sizeof ls[0]; i++) check_stdit_layout(&ls[i]);
}

/* The seeds' bandwidth claim (docs/parallel.md "ST-DiT's hybrid parallelism"): the bytes every
 * rank sends over CP in the spatial and temporal attentions of the same model and pack under hybrid
 * and under plain p2p, summed over the ranks (the counts are checked against the formula rank by
 * rank above), at two pack shapes; the p2p / hybrid ratios are printed beside hw/cp and t/cp. */
static void st_bytes_of(const Layout *L, const int grid[NS][3], double total[3]) {
    DiTConfig cfg = model_config(DIT_VARIANT_STDIT, 1);
    cfg.layers = 2, cfg.stdit_full_every = 0, cfg.kv_heads = cfg.heads; /* a spatial and a temporal block, MHA */
    TrainLayout keys = layout_keys(L);
    TrainParallel p;
    REQUIRE_OK(train_parallel_init(&p, &keys, mt_world(), mt_rank()));
    DiT m;
    REQUIRE_OK(dit_create_parallel(&m, &cfg, DEV_CPU, &p.model));
    int64_t n;
    float *w = dit_test_weights(&cfg, 5, &n);
    tp_shard_extract(m.shards, m.params, w);
    free(w);
    DitPack pk;
    dit_pack_make_shaped(&pk, &cfg, grid, TEXT_LEN, 1, 7);
    double sent[3][2] = {{0}};
    m.cp_sent = sent;
    float *out = calloc((size_t)(pk.S * dit_out_dim(&cfg)), sizeof(float));
    Tensor tout = TF32(out, pk.S, dit_out_dim(&cfg));
    CHECK_OK(dit_reserve(&m, pk.S, pk.L, NS));
    CHECK_OK(dit_forward(&m, &pk.in, &tout));
    CHECK_OK(dit_backward(&m, &pk.in, &pk.tdout));
    for (int k = 0; k < 3; k++) total[k] = sent[k][0] + sent[k][1];
    comm_all_reduce(mt_world_comm(), total, 3, DT_F64, COMM_SUM);
    free(out);
    dit_pack_free(&pk);
    dit_destroy(&m);
    train_parallel_free(&p);
}

TEST(dit_parallel_stdit_bandwidth_p2p_vs_hybrid) {
    REQUIRE_WORLD(4);
    static const int SHAPES[2][NS][3] = {{{4, 8, 8}, {4, 8, 8}, {4, 8, 8}, {4, 8, 8}},       /* t 4, hw 64 */
                                         {{16, 4, 4}, {16, 4, 4}, {16, 4, 4}, {16, 4, 4}}}; /* t 16, hw 16 */
    const Layout hybrid = {"CP4 hybrid", 1, 0, 4, CP_COMM_HYBRID, 0, 0}, p2p = {"CP4 p2p", 1, 0, 4, CP_COMM_P2P, 0, 0};
    for (int k = 0; k < 2; k++) {
        double h[3], r[3];
        st_bytes_of(&hybrid, SHAPES[k], h);
        st_bytes_of(&p2p, SHAPES[k], r);
        int t = SHAPES[k][0][0], hw = SHAPES[k][0][1] * SHAPES[k][0][2];
        CHECK_MSG(h[1] == 0 && r[1] > 0 && h[2] > 0 && r[2] > h[2],
                  "bytes: spatial %.0f (hybrid) vs %.0f (p2p), temporal %.0f vs %.0f", h[1], r[1], h[2], r[2]);
        if (mt_rank() == 0)
            printf("      CP4, 4 samples of t %d x hw %d, forward + backward over all ranks: temporal p2p %.0f B / "
                   "hybrid %.0f B = %.2f (hw/cp = %g); spatial p2p %.0f B / hybrid %.0f B (t/cp = %g)\n",
                   t, hw, r[2], h[2], r[2] / h[2], hw / 4.0, r[1], h[1], t / 4.0);
    }
}

TEST(dit_parallel_world1_identity) {
    REQUIRE_WORLD(1);
    const Layout l = {"one rank", 1, 0, 1, CP_COMM_P2P, 0, 0};
    check_layout(&l);
}

TEST(dit_parallel_world2_tp_sp_cp) {
    REQUIRE_WORLD(2);
    const Layout ls[] = {{"TP2", 2, 0, 1, CP_COMM_P2P, 0, 0},
                         {"TP2+SP", 2, 1, 1, CP_COMM_P2P, 0, 0},
                         {"CP2 p2p", 1, 0, 2, CP_COMM_P2P, 0, 0},
                         {"CP2 a2a", 1, 0, 2, CP_COMM_A2A, 2, 0},
                         {"CP2 all_gather", 1, 0, 2, CP_COMM_ALL_GATHER, 0, 0}};
    for (size_t i = 0; i < sizeof ls / sizeof ls[0]; i++) check_layout(&ls[i]);
}

TEST(dit_parallel_world3_cp3_ring) {
    REQUIRE_WORLD(3);
    const Layout l = {"CP3 p2p", 1, 0, 3, CP_COMM_P2P, 0, 0};
    check_layout(&l);
}

TEST(dit_parallel_world4_layouts) {
    REQUIRE_WORLD(4);
    const Layout ls[] = {{"TP4+SP", 4, 1, 1, CP_COMM_P2P, 0, 0},
                         {"CP4 a2a+p2p 2x2", 1, 0, 4, CP_COMM_A2A_P2P, 2, 0},
                         {"TP2+SP x CP2", 2, 1, 2, CP_COMM_P2P, 0, 0},
                         {"DP2 x TP2+SP ZeRO-1", 2, 1, 1, CP_COMM_P2P, 0, 1},
                         {"DP2 x CP2", 1, 0, 2, CP_COMM_P2P, 0, 1}};
    for (size_t i = 0; i < sizeof ls / sizeof ls[0]; i++) check_layout(&ls[i]);
}

/* Bitwise where the order of every sum is the same: ZeRO-1 and plain DP (the ordered reduce-scatter
 * is the ordered all-reduce restricted to the shard, and the norm's partials are the same), and
 * the same layout run twice (every activation, input gradient, the output and the stepped
 * parameters). Across layouts the bits differ: a rank sums over fewer tokens or heads, and
 * OpenBLAS may order a GEMM of fewer rows differently (so even TP and TP+SP, whose reductions
 * agree bit for bit in tests/mpi/test_tp.c, differ here in the patch embedding's last bits). */
TEST(dit_parallel_same_bits_where_the_order_is_the_same) {
    REQUIRE_WORLD(2, 4);
    int dp = mt_world() == 4 ? 2 : 1;
    DiTConfig cfg = model_config(DIT_VARIANT_DFM, 2);
    DitPack packs[2];
    for (int j = 0; j < dp; j++) dit_pack_make_shaped(&packs[j], &cfg, GRID, TEXT_LEN, 64, 1000 * (uint64_t)(j + 1));
    ParallelLayout pl;
    REQUIRE_OK(layout_init(&pl, mt_world(), mt_rank(), 2, 1, 1));
    Ref ref;
    REQUIRE(ref_run(&ref, &cfg, packs, dp, pl.dp_rank));
    Layout zero = {"TP2+SP ZeRO-1", 2, 1, 1, CP_COMM_P2P, 0, 1}, plain = {"TP2+SP", 2, 1, 1, CP_COMM_P2P, 0, 0};
    RunKeep a = {0}, b = {0}, c = {0};
    Outcome ra = run_layout(&zero, &cfg, packs, &ref, BREAK_NONE, &a);
    Outcome rb = run_layout(&zero, &cfg, packs, &ref, BREAK_NONE, &b);
    Outcome rc = run_layout(&plain, &cfg, packs, &ref, BREAK_NONE, &c);
    CHECK_MSG(ra.ok && rb.ok && rc.ok, "%s; %s; %s", ra.detail, rb.detail, rc.detail);
    REQUIRE(a.probes.n == b.probes.n && a.probes.n == ref.probes.n && a.params && b.params && c.params);
    for (int i = 0; i < a.probes.n; i++) {
        char what[64];
        snprintf(what, sizeof what, "run twice: blocks.%d %s", ref.probes.layer[i], ref.probes.site[i]);
        CHECK_SAME_BITS(what, b.probes.rows[i], a.probes.rows[i], packs[0].S * cfg.hidden);
    }
    CHECK_SAME_BITS("run twice: output", b.out, a.out, packs[0].S * dit_out_dim(&cfg));
    CHECK_SAME_BITS("run twice: parameters after a step", b.params, a.params, a.n_params);
    CHECK_SAME_BITS("ZeRO-1 vs plain DP: parameters after a step", c.params, a.params, a.n_params);
    keep_free(&a), keep_free(&b), keep_free(&c);
    ref_free(&ref);
    for (int j = 0; j < dp; j++) dit_pack_free(&packs[j]);
}

/* Layouts that cannot run are refused before any work, with one line naming the key. */
TEST(dit_parallel_bad_layouts_refused) {
    DiTConfig c = model_config(DIT_VARIANT_DFM, 2); /* 4 heads, 2 kv heads, ffn 256 */
    vfm_status s = dit_check_parallel(&c, 3, 0, 1, CP_COMM_P2P, 0);
    CHECK(s == VFM_ERR_USAGE && strstr(vfm_last_error(), "model.num_attention_heads (4)") &&
          strstr(vfm_last_error(), "model.tensor_model_parallel_size (3)"));
    s = dit_check_parallel(&c, 4, 1, 1, CP_COMM_P2P, 0);
    CHECK(s == VFM_ERR_USAGE && strstr(vfm_last_error(), "model.num_query_groups (2)"));
    s = dit_check_parallel(&c, 1, 0, 3, CP_COMM_A2A, 3);
    CHECK(s == VFM_ERR_USAGE && strstr(vfm_last_error(), "a2a"));
    CHECK_OK(dit_check_parallel(&c, 1, 0, 3, CP_COMM_P2P, 0));
    TrainLayout l = {2, 1, 1, 0, CP_COMM_P2P, 0, 1, 0, 1};
    s = train_layout_check(&l, &c, 3);
    CHECK(s == VFM_ERR_USAGE && strstr(vfm_last_error(), "world size 3 is not divisible by TP·PP·CP = 2"));
    DiT m;
    s = dit_create_parallel(&m, &c, DEV_CPU, &(DiTParallel){.tp = 4, .cp = 1});
    CHECK(s == VFM_ERR_USAGE);
}
