/* The MoE layer (moe.h) against its PyTorch twin (reference/moe_golden.py): a pack of three
 * samples of 7, 4 and 9 tokens in padded slots, expert choice and token choice top-2 with drops;
 * the same routing (every slot's token), the output, the router's loss terms, and the gradients
 * of every weight and of the input. Also: a forward gives the same bits twice; capacities and drops. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "golden.h"
#include "model/dit_internal.h"
#include "test.h"

typedef struct MoeRig {
    DiT m;
    Acts a;
    Arena arena;
    MlpLayer ml;
    MlpActs acts;
    Tensor X, OUT;
    int32_t cu_real[8], cu_pad[8];
    int64_t S;
} MoeRig;

static void copy_f32(float *dst, const Tensor *t) { memcpy(dst, t->data, (size_t)tensor_numel(t) * sizeof(float)); }

static vfm_status carve_all(MoeRig *g, ActCarver *cv) {
    int64_t S = g->S, D = g->m.cfg.hidden;
    VFM_TRY(carve_act(cv, &g->OUT, S, D));
    VFM_TRY(carve_act(cv, &g->a.d_branch, S, D));
    VFM_TRY(carve_act(cv, &g->a.d_xm, S, D));
    VFM_TRY(mlp_carve_scratch(&g->m, &g->ml, cv, &g->a.mlp, &g->a));
    return mlp_carve(&g->m, &g->ml, cv, &g->acts, &g->a);
}

static void rig_init(MoeRig *g, const Golden *gd) {
    memset(g, 0, sizeof *g);
    const int32_t *cfgv = golden_need(gd, "config")->data;
    const float *co = golden_need(gd, "coeffs")->data;
    const Tensor *x = golden_need(gd, "x"), *t2s = golden_need(gd, "tok2sample");
    const Tensor *cr = golden_need(gd, "cu_real"), *cp = golden_need(gd, "cu_pad");
    int64_t S = tensor_dim(x, 0), D = tensor_dim(x, 1);
    int B = (int)tensor_dim(cr, 0) - 1;
    g->S = S;
    DiTConfig c = {.variant = DIT_VARIANT_DFM, .hidden = (int)D, .layers = 1, .heads = 2, .ffn = 4 * (int)D,
                   .in_channels = 4, .out_channels = 4, .patch_spatial = 1, .patch_temporal = 1, .d_text = 8,
                   .adaln_lora = 4, .fps_dim = 8, .ln_eps = 1e-5f, .init_std = 0.02f};
    c.moe = (MoeSpec){.experts = cfgv[0], .ffn = cfgv[1], .topk = cfgv[2],
                      .routing = cfgv[3] ? MOE_TOKEN_AUX_LOSS : MOE_EXPERT_CHOICE, .capacity_factor = co[0],
                      .aux_coeff = co[1], .z_coeff = co[2]};
    REQUIRE_OK(dit_config_resolve(&c));
    g->m.cfg = c;
    g->m.device = DEV_CPU, g->m.act_dtype = DT_F32;
    g->m.par.tp = g->m.par.cp = 1;
    g->m.heads_local = g->m.kv_heads_local = 2, g->m.ffn_local = c.ffn;
    param_table_init(&g->m.table);
    MlpSpec spec = {.ffn = c.ffn, .act = ACT_GELU_ERF, .in = linear_normal(0.02f, 0), .out = linear_normal(0.02f, 0),
                    .moe = c.moe};
    mlp_add(&g->ml, &g->m.table, "mlp", D, &spec);
    int64_t n = g->m.table.total;
    g->m.params = malloc((size_t)n * sizeof(float));
    g->m.grads = calloc((size_t)n, sizeof(float));
    copy_f32(g->m.params + g->m.table.entries[g->ml.moe.router.w].offset, golden_need(gd, "router"));
    copy_f32(g->m.params + g->m.table.entries[g->ml.moe.fc1].offset, golden_need(gd, "fc1"));
    copy_f32(g->m.params + g->m.table.entries[g->ml.moe.fc2].offset, golden_need(gd, "fc2"));
    memcpy(g->cu_real, cr->data, (size_t)(B + 1) * sizeof(int32_t));
    memcpy(g->cu_pad, cp->data, (size_t)(B + 1) * sizeof(int32_t));
    Acts *a = &g->a;
    a->S = a->R = a->Rl = S, a->B = B;
    a->pl.identity = 1, a->pl.n = B;
    a->pl.cu_real = g->cu_real, a->pl.cu_pad = g->cu_pad;
    a->pl.t2s = *t2s;
    g->X = *x;
    ActCarver count = {NULL, 0, DEV_CPU, DT_F32, 0};
    REQUIRE_OK(carve_all(g, &count));
    REQUIRE_OK(arena_init(&g->arena, DEV_CPU, count.bytes));
    ActCarver cv = {&g->arena, 0, DEV_CPU, DT_F32, 0};
    REQUIRE_OK(carve_all(g, &cv));
    a->d_xm_full = a->d_xm, a->d_partial = a->d_branch;
}

static void rig_free(MoeRig *g) {
    free(g->m.params), free(g->m.grads);
    param_table_free(&g->m.table);
    arena_destroy(&g->arena);
}

static void golden_case(const char *name) {
    Golden *gd = golden_load(name);
    REQUIRE(gd != NULL);
    MoeRig g;
    rig_init(&g, gd);
    const MoeLayer *ml = &g.ml.moe;
    int64_t E = ml->s.experts, S = g.S, D = g.m.cfg.hidden;
    REQUIRE_OK(mlp_forward(&g.m, &g.ml, &g.acts, &g.a, &g.X, &g.OUT));
    /* the routing: every slot holds the twin's token */
    const Tensor *rows = golden_need(gd, "slot_rows");
    int64_t C = tensor_dim(rows, 1);
    CHECK_MSG(g.acts.moe.C_used == C, "%s: %lld slots per expert, the twin %lld", name, (long long)g.acts.moe.C_used,
              (long long)C);
    CHECK_MSG(memcmp(g.acts.moe.slot_tok.data, rows->data, (size_t)(E * C) * sizeof(int32_t)) == 0,
              "%s: the routing differs from the twin's", name);
    const Tensor *out = golden_need(gd, "out");
    CHECK_CLOSE_F32("out", g.OUT.data, out->data, S * D, 1e-6, 1e-5);
    const float *lo = g.acts.moe.losses.data, *want_lo = golden_need(gd, "losses")->data;
    CHECK_CLOSE_F32("router losses", lo, want_lo, 2, 1e-7, 1e-5);
    /* a second forward: the same bits */
    float *first = malloc((size_t)(S * D) * sizeof(float));
    memcpy(first, g.OUT.data, (size_t)(S * D) * sizeof(float));
    REQUIRE_OK(mlp_forward(&g.m, &g.ml, &g.acts, &g.a, &g.X, &g.OUT));
    CHECK(memcmp(first, g.OUT.data, (size_t)(S * D) * sizeof(float)) == 0);
    free(first);
    /* backward of Σ out ⊙ r (+ the router's losses, through their coefficients) */
    copy_f32(g.a.d_branch.data, golden_need(gd, "r"));
    REQUIRE_OK(mlp_backward(&g.m, &g.ml, &g.acts, &g.a, &g.X));
    CHECK_CLOSE_F32("d x", g.a.d_xm.data, golden_need(gd, "d_x")->data, S * D, 1e-6, 1e-5);
    struct { const char *name; int entry; } grads[3] = {{"d_router", ml->router.w}, {"d_fc1", ml->fc1}, {"d_fc2", ml->fc2}};
    for (int i = 0; i < 3; i++) {
        const ParamEntry *e = &g.m.table.entries[grads[i].entry];
        const Tensor *want = golden_need(gd, grads[i].name);
        REQUIRE(tensor_numel(want) == e->numel);
        double big = 0;
        for (int64_t j = 0; j < e->numel; j++) big = fmax(big, fabs(g.m.grads[e->offset + j]));
        CHECK_MSG(big > 0, "%s: %s is zero", name, grads[i].name);
        CHECK_CLOSE_F32(grads[i].name, g.m.grads + e->offset, want->data, e->numel, 1e-6, 1e-5);
    }
    rig_free(&g);
    golden_free(gd);
}

TEST(model_moe_expert_choice_matches_torch) { golden_case("moe_expert_choice.bin"); }
TEST(model_moe_token_choice_matches_torch) { golden_case("moe_token_choice.bin"); }

/* Every slot gets exactly C_b tokens of its own sample under expert choice; dropped tokens (token
 * choice) have no slot and an output row of 0 (the block's residual carries them). */
TEST(model_moe_capacity_and_drops) {
    Golden *gd = golden_load("moe_token_choice.bin");
    REQUIRE(gd != NULL);
    MoeRig g;
    rig_init(&g, gd);
    int64_t E = g.ml.moe.s.experts, S = g.S, D = g.m.cfg.hidden;
    REQUIRE_OK(mlp_forward(&g.m, &g.ml, &g.acts, &g.a, &g.X, &g.OUT));
    const int32_t *ts = g.acts.moe.tok_slot.data, *t2s = g.a.pl.t2s.data;
    int dropped = 0, short_of_k = 0;
    for (int64_t t = 0; t < S; t++) {
        int slots = 0;
        for (int64_t e = 0; e < E; e++) slots += ts[t * E + e] >= 0;
        CHECK(slots <= 2 && (t2s[t] >= 0 || slots == 0));
        short_of_k += t2s[t] >= 0 && slots < 2;
        if (t2s[t] >= 0 && slots == 0) {
            dropped++;
            for (int64_t d = 0; d < D; d++) CHECK(((float *)g.OUT.data)[t * D + d] == 0.f);
        }
    }
    CHECK_MSG(dropped > 0 && short_of_k > dropped, "the token-choice case drops %d tokens wholly, %d in part: it should "
              "drop some of each", dropped, short_of_k - dropped);
    rig_free(&g);
    golden_free(gd);
    gd = golden_load("moe_expert_choice.bin");
    REQUIRE(gd != NULL);
    rig_init(&g, gd);
    REQUIRE_OK(mlp_forward(&g.m, &g.ml, &g.acts, &g.a, &g.X, &g.OUT));
    int64_t C = g.acts.moe.C_used;
    t2s = g.a.pl.t2s.data;
    const int32_t *st = g.acts.moe.slot_tok.data;
    for (int64_t e = 0; e < E; e++)
        for (int b = 0; b < g.a.B; b++) {
            int64_t c0 = 0;
            for (int i = 0; i < b; i++) c0 += moe_capacity(&g.ml.moe.s, g.cu_real[i + 1] - g.cu_real[i]);
            int64_t Cb = moe_capacity(&g.ml.moe.s, g.cu_real[b + 1] - g.cu_real[b]);
            for (int64_t c = 0; c < Cb; c++) {
                int32_t t = st[e * C + c0 + c];
                CHECK_MSG(t >= 0 && t2s[t] == b, "expert %lld sample %d slot %lld: token %d", (long long)e, b,
                          (long long)c, t);
            }
        }
    rig_free(&g);
    golden_free(gd);
}

/* Layouts the layer cannot run are refused with the key's name, never run wrong: an expert width
 * TP does not split, ST-DiT under CP; TP, SP and CP themselves run (tests/mpi/test_moe_parallel.c). */
TEST(model_moe_parallel_checks) {
    DiTConfig c = {.variant = DIT_VARIANT_DFM, .hidden = 32, .layers = 2, .heads = 4, .in_channels = 4, .out_channels = 4,
                   .patch_spatial = 1, .patch_temporal = 1, .d_text = 8, .adaln_lora = 4, .fps_dim = 8,
                   .ln_eps = 1e-5f, .init_std = 0.02f};
    c.moe = (MoeSpec){.experts = 4, .capacity_factor = 1};
    REQUIRE_OK(dit_config_resolve(&c));
    CHECK(c.moe.ffn == c.ffn && c.moe.topk == 1);
    CHECK_OK(dit_check_parallel(&c, 1, 0, 1, CP_COMM_P2P, 1));
    CHECK_OK(dit_check_parallel(&c, 2, 1, 1, CP_COMM_P2P, 1));
    CHECK_OK(dit_check_parallel(&c, 1, 0, 2, CP_COMM_P2P, 1));
    c.moe.ffn = 6;
    CHECK(dit_check_parallel(&c, 4, 1, 1, CP_COMM_P2P, 1) == VFM_ERR_USAGE);
    CHECK(strstr(vfm_last_error(), "model.moe_ffn_hidden_size (6)") != NULL);
    c.moe.ffn = c.ffn;
    c.moe.routing = MOE_TOKEN_AUX_LOSS, c.moe.topk = 5;
    CHECK(dit_config_resolve(&c) == VFM_ERR_USAGE);
    /* moviegen's experts are SwiGLU MLPs like its dense MLP */
    c.moe.routing = MOE_EXPERT_CHOICE, c.moe.topk = 1, c.variant = DIT_VARIANT_MOVIEGEN;
    CHECK_OK(dit_config_resolve(&c));
    c.variant = DIT_VARIANT_STDIT;
    REQUIRE_OK(dit_config_resolve(&c));
    CHECK(dit_check_parallel(&c, 1, 0, 2, CP_COMM_P2P, 1) == VFM_ERR_USAGE);
    CHECK(strstr(vfm_last_error(), "model.num_moe_experts") != NULL);
}
