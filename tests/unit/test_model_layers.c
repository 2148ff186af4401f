/* Each layer of src/model on its own (layer.h): its forward and backward against central
 * differences of L = Σ out ⊙ r, for a sample of every parameter entry's elements and of the
 * input's. The MLP in its three kinds (erf-GELU, tanh-GELU, SwiGLU, the latter in no architecture
 * yet), attention (self-attention with grouped-query heads and QK-norm, the fused qkv of the DiT
 * reference, cross-attention to the text) and the modulation (adaLN-LoRA, full rank with bias).
 * A layer needs only a model's table, weights and widths and a pack's rows: the rig below, a pack
 * of two samples (5 and 3 tokens; 3 and 2 text rows). In f32 with the loss summed in double, the
 * differences are good to about 1e-3 of the largest gradient; a wrong gradient is off by far more. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/dit_internal.h"
#include "test.h"

enum { S = 8, B = 2, L = 5, D = 16, TEXT_W = 8 };

typedef struct Rig {
    DiT m;
    Acts a;
    Arena arena;
    DiTInputs in;
    int32_t t2s[S], cu[B + 1], cu_text[B + 1];
    float text[L * TEXT_W], x[S * D], r[S * D * 4];
    Tensor T2S, CU, CUT, TEXT, X, OUT;
    MlpActs mlp; /* the layer's activations */
    AttnActs attn;
    ModActs mod;
} Rig;

/* A one-rank model of width D with H heads (Hkv kv heads) and an empty table. */
static void rig_init(Rig *g, int H, int Hkv, int ffn) {
    memset(g, 0, sizeof *g);
    DiTConfig c = {.variant = DIT_VARIANT_DFM, .hidden = D, .layers = 1, .heads = H, .kv_heads = Hkv, .ffn = ffn,
                   .in_channels = 4, .out_channels = 4, .patch_spatial = 1, .patch_temporal = 1, .d_text = TEXT_W,
                   .adaln_lora = 4, .fps_dim = 8, .qk_norm = 1, .ln_eps = 1e-5f, .init_std = 0.02f};
    REQUIRE_OK(dit_config_resolve(&c));
    g->m.cfg = c;
    g->m.device = DEV_CPU;
    g->m.act_dtype = DT_F32;
    g->m.par.tp = g->m.par.cp = 1;
    g->m.heads_local = H, g->m.kv_heads_local = Hkv, g->m.ffn_local = ffn;
    param_table_init(&g->m.table);
    int32_t cu[B + 1] = {0, 5, 8}, cu_text[B + 1] = {0, 3, 5};
    memcpy(g->cu, cu, sizeof cu), memcpy(g->cu_text, cu_text, sizeof cu_text);
    for (int s = 0; s < S; s++) g->t2s[s] = s < 5 ? 0 : 1;
    test_fill_uniform_f32(g->text, L * TEXT_W, 11, -1, 1);
    test_fill_uniform_f32(g->x, S * D, 12, -1, 1);
    test_fill_uniform_f32(g->r, S * D * 4, 13, -1, 1);
    g->T2S = TI32(g->t2s, S), g->CU = TI32(g->cu, B + 1), g->CUT = TI32(g->cu_text, B + 1);
    g->TEXT = TF32(g->text, L, TEXT_W), g->X = TF32(g->x, S, D);
    Acts *a = &g->a;
    a->S = a->R = a->Rl = S, a->L = L, a->B = B;
    a->pl.identity = 1;
    a->pl.t2s = g->T2S;
    a->pl.self = (VarlenLayout){B, g->CU, g->CU, g->CU, g->CU, 5, 5};
    a->pl.cross = (VarlenLayout){B, g->CU, g->CU, g->CUT, g->CUT, 5, 3};
    g->in.text = &g->TEXT;
}

/* After the layer's entries are in the table: weights U(±0.5) (no zero-initialised layer hides a
 * term), zero gradients, and the arena for what carve (counting, then carving) lays out. */
typedef vfm_status (*CarveFn)(Rig *g, ActCarver *cv, const void *layer);
static void rig_weights(Rig *g, CarveFn carve, const void *layer) {
    int64_t n = g->m.table.total;
    g->m.params = malloc((size_t)n * sizeof(float));
    g->m.grads = calloc((size_t)n, sizeof(float));
    test_fill_uniform_f32(g->m.params, n, 14, -0.5f, 0.5f);
    ActCarver count = {NULL, 0, DEV_CPU, DT_F32, 0};
    REQUIRE_OK(carve(g, &count, layer));
    REQUIRE_OK(arena_init(&g->arena, DEV_CPU, count.bytes));
    ActCarver cv = {&g->arena, 0, DEV_CPU, DT_F32, 0};
    REQUIRE_OK(carve(g, &cv, layer));
    g->a.d_xm_full = g->a.d_xm, g->a.d_partial = g->a.d_branch;
}

static void rig_free(Rig *g) {
    free(g->m.params), free(g->m.grads);
    param_table_free(&g->m.table);
    arena_destroy(&g->arena);
}

/* The layer's loss Σ out ⊙ r (forward only), and its backward from d(out) = r. */
typedef double (*LossFn)(Rig *g, const void *layer);
typedef void (*BackwardFn)(Rig *g, const void *layer);

static double dot(const Tensor *t, const float *r) {
    double s = 0;
    for (int64_t i = 0; i < tensor_numel(t); i++) s += (double)((const float *)t->data)[i] * r[i];
    return s;
}

/* Central differences of a sample of the elements of x[n] against the analytic gradient g[n]. */
static void check_elements(Rig *g, const char *what, float *x, const float *grad, int64_t n, LossFn loss,
                           const void *layer, double scale) {
    const float h = 1e-2f;
    double worst = 0, at_num = 0, at_ana = 0;
    int64_t step = n > 12 ? n / 12 : 1;
    for (int64_t i = 0; i < n; i += step) {
        float keep = x[i];
        x[i] = keep + h;
        double lp = loss(g, layer);
        x[i] = keep - h;
        double lm = loss(g, layer);
        x[i] = keep;
        double num = (lp - lm) / (2.0 * h), err = fabs(num - grad[i]);
        if (err > worst) worst = err, at_num = num, at_ana = grad[i];
    }
    CHECK_MSG(worst <= 2e-3 * scale + 1e-4, "%s: |numeric - analytic| %.3g (numeric %.6g, analytic %.6g; largest %.3g)",
              what, worst, at_num, at_ana, scale);
}

/* Every entry of the table and the input x[nx] (its analytic gradient dx). */
static void check_layer(Rig *g, const char *name, LossFn loss, BackwardFn backward, const void *layer, float *x,
                        const Tensor *dx, int64_t nx) {
    loss(g, layer);
    backward(g, layer);
    float *dxs = malloc((size_t)nx * sizeof *dxs);
    memcpy(dxs, dx->data, (size_t)nx * sizeof *dxs);
    float *grads = malloc((size_t)g->m.table.total * sizeof *grads);
    memcpy(grads, g->m.grads, (size_t)g->m.table.total * sizeof *grads);
    for (int i = 0; i < g->m.table.count; i++) {
        const ParamEntry *e = &g->m.table.entries[i];
        double scale = 0;
        for (int64_t k = 0; k < e->numel; k++) scale = fmax(scale, fabs(grads[e->offset + k]));
        char what[160];
        snprintf(what, sizeof what, "%s: %s", name, e->name);
        CHECK_MSG(scale > 0, "%s: every gradient is zero", what);
        check_elements(g, what, g->m.params + e->offset, grads + e->offset, e->numel, loss, layer, scale);
    }
    double scale = 0;
    for (int64_t k = 0; k < nx; k++) scale = fmax(scale, fabs(dxs[k]));
    char what[160];
    snprintf(what, sizeof what, "%s: the input", name);
    CHECK_MSG(scale > 0, "%s: every gradient is zero", what);
    check_elements(g, what, x, dxs, nx, loss, layer, scale);
    free(dxs), free(grads);
}

/* ---- MLP --------------------------------------------------------------------------------------- */

/* out, d(out), d(input) and the layer's own: what every token mixer needs. */
static vfm_status carve_rows(Rig *g, ActCarver *cv) {
    VFM_TRY(carve_act(cv, &g->OUT, S, D));
    VFM_TRY(carve_act(cv, &g->a.d_branch, S, D));
    return carve_act(cv, &g->a.d_xm, S, D);
}

static vfm_status mlp_carve_all(Rig *g, ActCarver *cv, const void *layer) {
    VFM_TRY(carve_rows(g, cv));
    VFM_TRY(mlp_carve_scratch(&g->m, layer, cv, &g->a.mlp, &g->a));
    return mlp_carve(&g->m, layer, cv, &g->mlp, &g->a);
}

static double mlp_loss(Rig *g, const void *layer) {
    CHECK_OK(mlp_forward(&g->m, layer, &g->mlp, &g->a, &g->X, &g->OUT));
    return dot(&g->OUT, g->r);
}

static void mlp_back(Rig *g, const void *layer) {
    memcpy(g->a.d_branch.data, g->r, S * D * sizeof(float));
    REQUIRE_OK(mlp_backward(&g->m, layer, &g->mlp, &g->a, &g->X));
}

static void check_mlp(const char *name, int swiglu, Activation act) {
    Rig g;
    rig_init(&g, 2, 2, 24);
    MlpLayer ml;
    MlpSpec spec = {.ffn = 24, .swiglu = swiglu, .act = act, .in = linear_normal(0.3f, 1), .out = linear_normal(0.3f, 1)};
    mlp_add(&ml, &g.m.table, "mlp", D, &spec);
    CHECK(g.m.table.entries[ml.fc1.w].shape[0] == (swiglu ? 48 : 24));
    rig_weights(&g, mlp_carve_all, &ml);
    check_layer(&g, name, mlp_loss, mlp_back, &ml, g.x, &g.a.d_xm, S * D);
    rig_free(&g);
}

TEST(model_layer_mlp_gradients) {
    check_mlp("mlp erf-GELU", 0, ACT_GELU_ERF);
    check_mlp("mlp tanh-GELU", 0, ACT_GELU_TANH);
    check_mlp("mlp SwiGLU", 1, ACT_NONE);
}

/* ---- attention ----------------------------------------------------------------------------------- */

static vfm_status attn_carve_all(Rig *g, ActCarver *cv, const void *layer) {
    VFM_TRY(carve_rows(g, cv));
    VFM_TRY(attention_carve_scratch(&g->m, cv, &g->a.attn, &g->a, 1, 0));
    return attention_carve(&g->m, layer, cv, &g->attn, &g->a, 0);
}

static double attn_loss(Rig *g, const void *layer) {
    CHECK_OK(attention_forward(&g->m, layer, &g->attn, &g->a, &g->in, &g->X, &g->OUT, 0));
    return dot(&g->OUT, g->r);
}

static void attn_back(Rig *g, const void *layer) {
    memcpy(g->a.d_branch.data, g->r, S * D * sizeof(float));
    REQUIRE_OK(attention_backward(&g->m, layer, &g->attn, &g->a, &g->in, &g->X));
}

static void check_attention(const char *name, int heads, const AttentionSpec *spec) {
    Rig g;
    rig_init(&g, heads, spec->kv_heads, 24);
    AttentionLayer at;
    attention_add(&at, &g.m.table, "attn", D, D / heads, spec);
    rig_weights(&g, attn_carve_all, &at);
    check_layer(&g, name, attn_loss, attn_back, &at, g.x, &g.a.d_xm, S * D);
    rig_free(&g);
}

TEST(model_layer_attention_gradients) {
    AttentionSpec self = {.self = 1, .kv_in = D, .kv_heads = 2, .qk_norm = 1, .norm_eps = 1e-5f,
                          .in = linear_normal(0.3f, 0), .out = linear_normal(0.3f, 0)};
    check_attention("self-attention, 4 heads over 2 kv heads, QK-norm", 4, &self);
    AttentionSpec fused = {.self = 1, .fused_qkv = 1, .kv_in = D, .kv_heads = 4, .norm_eps = 1e-5f,
                           .in = linear_xavier(1), .out = linear_xavier(1)};
    check_attention("self-attention, fused qkv with biases", 4, &fused);
    AttentionSpec cross = self;
    cross.self = 0, cross.kv_in = TEXT_W, cross.kv_heads = 4;
    check_attention("cross-attention to the text, QK-norm", 4, &cross);
}

/* ---- modulation ------------------------------------------------------------------------------------ */

static vfm_status mod_carve_all(Rig *g, ActCarver *cv, const void *layer) {
    VFM_TRY(carve_act(cv, &g->a.cond.silu, B, D));
    VFM_TRY(carve_act(cv, &g->a.cond.d_silu, B, D));
    VFM_TRY(modulation_carve_scratch(layer, cv, &g->a.mod, B));
    return modulation_carve(layer, cv, &g->mod, B);
}

static double mod_loss(Rig *g, const void *layer) {
    const ModulationLayer *ml = layer;
    CHECK_OK(modulation_forward(&g->m, ml, &g->mod, &g->a.cond));
    double s = 0;
    for (int k = 0; k < ml->n_chunks; k++) s += dot(&g->mod.chunk[k], g->r + k * B * D);
    return s;
}

static void mod_back(Rig *g, const void *layer) {
    const ModulationLayer *ml = layer;
    for (int k = 0; k < ml->n_chunks; k++) memcpy(g->a.mod.d_chunk[k].data, g->r + k * B * D, B * D * sizeof(float));
    REQUIRE_OK(op_fill(&g->a.cond.d_silu, 0.0));
    REQUIRE_OK(modulation_backward(&g->m, ml, &g->mod, &g->a.mod, &g->a.cond));
}

TEST(model_layer_modulation_gradients) {
    for (int lora = 0; lora < 2; lora++) {
        Rig g;
        rig_init(&g, 2, 2, 24);
        ModulationLayer ml;
        if (lora) modulation_add_lora(&ml, &g.m.table, "adaln.linear_1", "adaln.linear_2", D, 3, 4);
        else modulation_add_full(&ml, &g.m.table, "adaln.linear", D, 3, 1);
        rig_weights(&g, mod_carve_all, &ml);
        test_fill_uniform_f32(g.a.cond.silu.data, B * D, 15, -1, 1);
        check_layer(&g, lora ? "adaLN-LoRA" : "adaLN, full rank with bias", mod_loss, mod_back, &ml,
                    g.a.cond.silu.data, &g.a.cond.d_silu, B * D);
        rig_free(&g);
    }
}

/* ---- mixture of experts (moe.h) -------------------------------------------------------------------
 * The loss adds the router's own terms: Σ out ⊙ r + aux·(load balancing) + z·(z loss). Routing is
 * piecewise constant: a difference whose two sides route differently (another slot table) is not
 * a derivative, so such elements are skipped (and counted: two thirds must be checked). */
static double moe_loss(Rig *g, const void *layer) {
    const MlpLayer *ml = layer;
    CHECK_OK(mlp_forward(&g->m, ml, &g->mlp, &g->a, &g->X, &g->OUT));
    const MoeSpec *s = &ml->moe.s;
    const float *lo = g->mlp.moe.losses.data;
    double aux = s->routing == MOE_TOKEN_AUX_LOSS ? s->aux_coeff * (double)lo[0] : 0;
    return dot(&g->OUT, g->r) + aux + (s->z_coeff != 0 ? s->z_coeff * (double)lo[1] : 0);
}

/* The routing of the last forward: slot_tok [E, C_used], as bytes. */
static size_t moe_routing(const Rig *g, const MlpLayer *ml, int32_t *buf) {
    size_t n = (size_t)(ml->moe.s.experts * g->mlp.moe.C_used);
    memcpy(buf, g->mlp.moe.slot_tok.data, n * sizeof *buf);
    return n;
}

static void check_moe_elements(Rig *g, const char *what, float *x, const float *grad, int64_t n, const MlpLayer *ml,
                               const int32_t *base, size_t nb, int *checked, int *skipped) {
    const float h = 1e-2f;
    double scale = 0, worst = 0;
    for (int64_t i = 0; i < n; i++) scale = fmax(scale, fabs(grad[i]));
    CHECK_MSG(scale > 0, "%s: every gradient is zero", what);
    int32_t now[256];
    int64_t step = n > 16 ? n / 16 : 1;
    for (int64_t i = 0; i < n; i += step) {
        float keep = x[i];
        x[i] = keep + h;
        double lp = moe_loss(g, ml);
        int same = moe_routing(g, ml, now) == nb && memcmp(now, base, nb * sizeof *now) == 0;
        x[i] = keep - h;
        double lm = moe_loss(g, ml);
        same = same && moe_routing(g, ml, now) == nb && memcmp(now, base, nb * sizeof *now) == 0;
        x[i] = keep;
        if (!same) {
            (*skipped)++;
            continue;
        }
        (*checked)++;
        worst = fmax(worst, fabs((lp - lm) / (2.0 * h) - grad[i]));
    }
    CHECK_MSG(worst <= 2e-3 * scale + 1e-4, "%s: |numeric - analytic| %.3g (largest %.3g)", what, worst, scale);
}

static void check_moe(const char *name, MoeRouting routing, int k, float cf, int swiglu) {
    Rig g;
    rig_init(&g, 2, 2, 24);
    int32_t cu_host[B + 1] = {0, 5, 8};
    g.a.pl.n = B, g.a.pl.cu_real = cu_host, g.a.pl.cu_pad = cu_host;
    MlpLayer ml;
    MlpSpec spec = {.ffn = 24, .act = ACT_GELU_ERF, .swiglu = swiglu, .in = linear_normal(0.3f, 0),
                    .out = linear_normal(0.3f, 0)};
    spec.moe = (MoeSpec){.experts = 4, .topk = k, .ffn = 6, .capacity_factor = cf, .routing = routing,
                         .aux_coeff = 0.5f, .z_coeff = 0.25f};
    mlp_add(&ml, &g.m.table, "mlp", D, &spec);
    CHECK(g.m.table.count == 3 && g.m.table.entries[ml.moe.fc1].shape[0] == (swiglu ? 48 : 24) &&
          g.m.table.entries[ml.moe.fc2].shape[0] == 64);
    rig_weights(&g, mlp_carve_all, &ml);
    double base_loss = moe_loss(&g, &ml);
    CHECK(isfinite(base_loss));
    int32_t base[256];
    size_t nb = moe_routing(&g, &ml, base);
    /* the capacities: expert choice fills every slot (2 + 1 per expert), token choice leaves room */
    int64_t want_c = routing == MOE_EXPERT_CHOICE ? 3 : cf == 0 ? 8 : moe_capacity(&ml.moe.s, 5) + moe_capacity(&ml.moe.s, 3);
    CHECK_MSG(g.mlp.moe.C_used == want_c, "%s: C %lld, want %lld", name, (long long)g.mlp.moe.C_used, (long long)want_c);
    if (routing == MOE_EXPERT_CHOICE)
        for (size_t i = 0; i < nb; i++) CHECK(base[i] >= 0 && (int)(i % 3 < 2 ? base[i] < 5 : base[i] >= 5));
    memcpy(g.a.d_branch.data, g.r, S * D * sizeof(float));
    REQUIRE_OK(mlp_backward(&g.m, &ml, &g.mlp, &g.a, &g.X));
    float dxs[S * D];
    memcpy(dxs, g.a.d_xm.data, sizeof dxs);
    float *grads = malloc((size_t)g.m.table.total * sizeof *grads);
    memcpy(grads, g.m.grads, (size_t)g.m.table.total * sizeof *grads);
    int checked = 0, skipped = 0;
    for (int i = 0; i < g.m.table.count; i++) {
        const ParamEntry *e = &g.m.table.entries[i];
        char what[160];
        snprintf(what, sizeof what, "%s: %s", name, e->name);
        check_moe_elements(&g, what, g.m.params + e->offset, grads + e->offset, e->numel, &ml, base, nb, &checked,
                           &skipped);
    }
    char what[160];
    snprintf(what, sizeof what, "%s: the input", name);
    check_moe_elements(&g, what, g.x, dxs, S * D, &ml, base, nb, &checked, &skipped);
    CHECK_MSG(checked >= 2 * skipped && checked > 40, "%s: %d elements checked, %d skipped (routing moved)", name,
              checked, skipped);
    free(grads);
    rig_free(&g);
}

TEST(model_layer_moe_gradients) {
    check_moe("moe expert choice", MOE_EXPERT_CHOICE, 1, 1.0f, 0);
    check_moe("moe token choice top-2 (drops)", MOE_TOKEN_AUX_LOSS, 2, 1.0f, 0);
    check_moe("moe token choice top-1 dropless", MOE_TOKEN_NONE, 1, 0.0f, 0);
    check_moe("moe expert choice, SwiGLU experts", MOE_EXPERT_CHOICE, 1, 1.0f, 1);
    check_moe("moe token choice top-2, SwiGLU experts", MOE_TOKEN_AUX_LOSS, 2, 1.0f, 1);
}
