/* Construction of a DiT: the parameter table of every variant (names, shapes, initialisation,
 * tensor-parallel split, reduce groups, report group), built by one function from the variant's
 * features; allocation, weight initialisation and the conv patch permutation. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/dit_internal.h"
#include "parallel/pp_schedule.h"
#include "parallel/pp_stage.h"

/* How one linear layer's weight and bias are initialised and distributed. */
typedef struct LinearSpec {
    ParamInit w_init;
    float w_scale;
    int bias;
    ParamInit b_init;
    float b_scale;
    unsigned groups; /* reduce groups besides DP×CP */
    int tp_dim;      /* 0 column-parallel (the bias splits too), 1 row-parallel, -1 replicated */
} LinearSpec;

/* PyTorch nn.Linear's default: U(±1/√fan_in) for weight and bias. */
static LinearSpec torch_default(int64_t fan_in, unsigned groups) {
    return (LinearSpec){INIT_UNIFORM_FANIN, (float)fan_in, 1, INIT_UNIFORM_FANIN, (float)fan_in, groups, -1};
}

static LinearSpec zeros(int bias, unsigned groups) { return (LinearSpec){INIT_ZERO, 0, bias, INIT_ZERO, 0, groups, -1}; }

/* A transformer linear: DiT's xavier-uniform with zero bias, or Megatron's N(0, std) (bias zero). */
static LinearSpec block_linear(const DiTConfig *c, float std, int tp_dim) {
    if (c->variant == DIT_VARIANT_ADALN_ZERO) return (LinearSpec){INIT_XAVIER_UNIFORM, 0, c->f.linear_bias, INIT_ZERO, 0, 0, tp_dim};
    return (LinearSpec){INIT_NORMAL, std, c->f.linear_bias, INIT_ZERO, 0, 0, tp_dim};
}

/* Adds "<name>.weight" [out, in] and, when the spec has one, "<name>.bias" [out]. A row-parallel
 * layer's bias is replicated and added by TP rank 0 only (dit.c): its gradient sums over TP. */
static DiTLinear add_linear(ParamTable *t, const char *name, int64_t out, int64_t in, LinearSpec s) {
    int64_t wshape[2] = {out, in}, bshape[1] = {out};
    DiTLinear l = {-1, -1, 0, out};
    l.w = param_table_add(t, s.w_init, s.w_scale, 2, wshape, s.groups, s.tp_dim, "%s.weight", name);
    unsigned bias_groups = s.groups | (s.tp_dim == 1 ? REDUCE_TP_HEADS : 0);
    if (s.bias)
        l.b = param_table_add(t, s.b_init, s.b_scale, 1, bshape, bias_groups, s.tp_dim == 0 ? 0 : -1, "%s.bias", name);
    return l;
}

/* The row block [row0, row0 + out) of a fused linear. */
static DiTLinear rows_of(DiTLinear l, int64_t row0, int64_t out) {
    l.row0 = row0;
    l.out = out;
    return l;
}

static int add_vector(ParamTable *t, ParamInit init, int64_t n, unsigned groups, const char *name) {
    int64_t shape[1] = {n};
    return param_table_add(t, init, 0, 1, shape, groups, -1, "%s", name);
}

/* Patch embedding: a linear over the (ph pw pt C) token (DFM), or the DiT reference's conv weight
 * [D, C, (pt,) p, p] applied to the token's columns permuted to (C pt ph pw). */
static void build_patch_embedding(DiT *m) {
    const DiTConfig *c = &m->cfg;
    ParamTable *t = &m->table;
    int64_t D = c->hidden, tok = dit_token_dim(c);
    param_table_set_group(t, DIT_GROUP_PATCH);
    if (!c->f.conv_patch) {
        m->x_embed = add_linear(t, "x_embedder", D, tok, torch_default(tok, 0));
        return;
    }
    int64_t p = c->patch_spatial, shape[5] = {D, c->in_channels, c->patch_temporal, p, p};
    int nd = 5;
    if (c->patch_temporal == 1) shape[2] = p, shape[3] = p, nd = 4;
    m->x_embed = (DiTLinear){-1, -1, 0, D};
    m->x_embed.w = param_table_add(t, INIT_XAVIER_UNIFORM, 0, nd, shape, 0, -1, "x_embedder.proj.weight");
    m->x_embed.b = add_vector(t, INIT_ZERO, D, 0, "x_embedder.proj.bias");
}

/* Conditioning: timestep embedder, class table, fps embedder, conditioning norm. Every pipeline
 * stage recomputes the conditioning, so these reduce over PP too. */
static void build_conditioning(DiT *m) {
    const DiTConfig *c = &m->cfg;
    ParamTable *t = &m->table;
    int64_t D = c->hidden, tf = c->f.t_freq_dim, F = c->fps_dim;
    param_table_set_group(t, DIT_GROUP_COND);
    if (c->variant == DIT_VARIANT_ADALN_ZERO) {
        LinearSpec s = {INIT_NORMAL, 0.02f, 1, INIT_ZERO, 0, REDUCE_PP, -1};
        m->t_l1 = add_linear(t, "t_embedder.mlp.0", D, tf, s);
        m->t_l2 = add_linear(t, "t_embedder.mlp.2", D, D, s);
    } else {
        m->t_l1 = add_linear(t, "t_embedder.linear_1", D, tf, torch_default(tf, REDUCE_PP));
        m->t_l2 = add_linear(t, "t_embedder.linear_2", D, D, torch_default(D, REDUCE_PP));
    }
    m->y_table = -1;
    if (c->num_classes > 0) {
        int64_t shape[2] = {c->num_classes + (c->class_dropout_prob > 0), D};
        float std = c->variant == DIT_VARIANT_ADALN_ZERO ? 0.02f : c->init_std;
        m->y_table = param_table_add(t, INIT_NORMAL, std, 2, shape, REDUCE_PP, -1, "y_embedder.embedding_table.weight");
    }
    m->f_l1 = m->f_l2 = (DiTLinear){-1, -1, 0, 0};
    if (c->f.fps_embedder) {
        m->f_l1 = add_linear(t, "fps_embedder.linear_1", F, F, torch_default(F, REDUCE_PP));
        m->f_l2 = add_linear(t, "fps_embedder.linear_2", F, F, torch_default(F, REDUCE_PP));
    }
    m->cond_norm_w = c->f.cond_norm ? add_vector(t, INIT_ONE, D, REDUCE_PP, "cond_norm.weight") : -1;
}

/* One attention's q, k, v, proj (and QK-norm weights) under "blocks.<l>.<prefix>". */
static void build_attention(DiT *m, int l, const char *prefix, int fused, int64_t kv_in, int64_t kv_heads, int qk_norm,
                            DiTLinear *q, DiTLinear *k, DiTLinear *v, DiTLinear *proj, int *qn, int *kn) {
    const DiTConfig *c = &m->cfg;
    ParamTable *t = &m->table;
    int64_t D = c->hidden, Dkv = kv_heads * c->head_dim;
    float std = c->init_std, out_std = c->init_std / sqrtf(2.0f * (float)c->layers);
    char name[96];
#define NAME(part) (snprintf(name, sizeof name, "blocks.%d.%s.%s", l, prefix, part), name)
    if (fused) { /* self-attention of the DiT reference: one qkv [3D, D] */
        DiTLinear qkv = add_linear(t, NAME("qkv"), 3 * D, D, block_linear(c, std, 0));
        t->entries[qkv.w].tp_parts = 3;
        if (qkv.b >= 0) t->entries[qkv.b].tp_parts = 3;
        *q = rows_of(qkv, 0, D), *k = rows_of(qkv, D, D), *v = rows_of(qkv, 2 * D, D);
    } else {
        *q = add_linear(t, NAME("q"), D, D, block_linear(c, std, 0));
        *k = add_linear(t, NAME("k"), Dkv, kv_in, block_linear(c, std, 0));
        *v = add_linear(t, NAME("v"), Dkv, kv_in, block_linear(c, std, 0));
    }
    /* QK-norm weights are shared by the heads TP splits: they reduce over TP */
    *qn = qk_norm ? add_vector(t, INIT_ONE, c->head_dim, REDUCE_TP_HEADS, NAME("q_norm.weight")) : -1;
    *kn = qk_norm ? add_vector(t, INIT_ONE, c->head_dim, REDUCE_TP_HEADS, NAME("k_norm.weight")) : -1;
    *proj = add_linear(t, NAME("proj"), D, D, block_linear(c, out_std, 1));
#undef NAME
}

static void build_block(DiT *m, int l) {
    const DiTConfig *c = &m->cfg;
    const DiTFeatures *f = &c->f;
    ParamTable *t = &m->table;
    DiTBlockParams *b = &m->blocks[l];
    int64_t D = c->hidden, nD = (int64_t)f->n_chunks * D, R = c->adaln_lora;
    float std = c->init_std, out_std = c->init_std / sqrtf(2.0f * (float)c->layers);
    char name[96];
    b->first_entry = t->count;
    /* modulation: its gradient is a sum over the sample's tokens, so under SP it reduces over TP */
    param_table_set_group(t, DIT_GROUP_ADALN);
    b->ada_down = (DiTLinear){-1, -1, 0, 0};
    if (c->variant == DIT_VARIANT_ADALN_ZERO) {
        snprintf(name, sizeof name, "blocks.%d.adaLN_modulation.1", l);
        b->ada_up = add_linear(t, name, nD, D, zeros(1, REDUCE_TP_SP));
    } else if (f->adaln_full) {
        snprintf(name, sizeof name, "blocks.%d.adaln.linear", l);
        b->ada_up = add_linear(t, name, nD, D, zeros(0, REDUCE_TP_SP));
    } else {
        LinearSpec down = torch_default(D, REDUCE_TP_SP);
        down.bias = 0;
        snprintf(name, sizeof name, "blocks.%d.adaln.linear_1", l);
        b->ada_down = add_linear(t, name, R, D, down);
        snprintf(name, sizeof name, "blocks.%d.adaln.linear_2", l);
        b->ada_up = add_linear(t, name, nD, R, zeros(0, REDUCE_TP_SP));
    }
    param_table_set_group(t, DIT_GROUP_SELF_ATTN);
    build_attention(m, l, c->variant == DIT_VARIANT_ADALN_ZERO ? "attn" : "self_attn", f->fused_qkv, D, c->kv_heads,
                    f->self_qk_norm, &b->sa_q, &b->sa_k, &b->sa_v, &b->sa_proj, &b->sa_qn, &b->sa_kn);
    b->ca_qn = b->ca_kn = -1;
    if (c->f.cross_attn) {
        param_table_set_group(t, DIT_GROUP_CROSS_ATTN);
        build_attention(m, l, "cross_attn", 0, c->d_text, c->heads, f->cross_qk_norm, &b->ca_q, &b->ca_k, &b->ca_v,
                        &b->ca_proj, &b->ca_qn, &b->ca_kn);
    }
    param_table_set_group(t, DIT_GROUP_MLP);
    snprintf(name, sizeof name, "blocks.%d.mlp.fc1", l);
    b->fc1 = add_linear(t, name, c->ffn, D, block_linear(c, std, 0));
    snprintf(name, sizeof name, "blocks.%d.mlp.fc2", l);
    b->fc2 = add_linear(t, name, D, c->ffn, block_linear(c, out_std, 1));
}

/* The output head: DFM's plain Linear, or the DiT reference's LayerNorm + shift/scale + Linear,
 * all zero-initialised. */
static void build_final_layer(DiT *m) {
    const DiTConfig *c = &m->cfg;
    ParamTable *t = &m->table;
    int64_t D = c->hidden, out = dit_out_dim(c);
    m->head_first = t->count;
    param_table_set_group(t, DIT_GROUP_FINAL);
    m->final_ada = (DiTLinear){-1, -1, 0, 0};
    if (c->f.final_adaln) {
        m->final_out = add_linear(t, "final_layer.linear", out, D, zeros(1, 0));
        m->final_ada = add_linear(t, "final_layer.adaLN_modulation.1", 2 * D, D, zeros(1, REDUCE_TP_SP));
    } else {
        m->final_out = add_linear(t, "final_linear", out, D, torch_default(D, 0));
    }
}

static void build_table(DiT *m) {
    build_patch_embedding(m);
    build_conditioning(m);
    for (int l = 0; l < m->cfg.layers; l++) build_block(m, l);
    build_final_layer(m);
    /* Every other replicated weight (patch embedding, conditioning, adaLN, final layer) gets its
     * gradient as a sum over this rank's tokens: partial over TP under sequence parallelism. */
    for (int i = 0; i < m->table.count; i++) {
        ParamEntry *e = &m->table.entries[i];
        if (e->tp_split_dim < 0 && !(e->reduce_groups & REDUCE_TP_HEADS)) e->reduce_groups |= REDUCE_TP_SP;
    }
}

void dit_describe(DiT *m, const DiTConfig *cfg) {
    memset(m, 0, sizeof *m);
    m->cfg = *cfg;
    if (!m->cfg.f.n_chunks) dit_config_resolve(&m->cfg); /* filled by hand: derive the features */
    m->blocks = calloc((size_t)cfg->layers, sizeof *m->blocks);
    m->block_ids = calloc((size_t)cfg->layers, sizeof *m->block_ids);
    m->block_local = calloc((size_t)cfg->layers, sizeof *m->block_local);
    m->n_blocks = cfg->layers;
    for (int l = 0; l < cfg->layers; l++) m->block_ids[l] = m->block_local[l] = l;
    param_table_init(&m->table);
    build_table(m);
    m->par.tp = m->par.cp = 1;
    m->heads_local = m->cfg.heads, m->kv_heads_local = m->cfg.kv_heads, m->ffn_local = m->cfg.ffn;
}

/* perm[k] for k over the conv weight's (C, pt, ph, pw) order: the token column (ph pw pt C) that
 * holds the same element. */
static vfm_status build_patch_perm(DiT *m) {
    const DiTConfig *c = &m->cfg;
    int n = dit_token_dim(c), C = c->in_channels, pt = c->patch_temporal, p = c->patch_spatial;
    int32_t *host = malloc((size_t)n * sizeof *host);
    if (!host) return vfm_fail(VFM_ERR_NOMEM, "dit: patch permutation of %d columns", n);
    int k = 0;
    for (int ch = 0; ch < C; ch++)
        for (int it = 0; it < pt; it++)
            for (int ih = 0; ih < p; ih++)
                for (int iw = 0; iw < p; iw++) host[k++] = ((ih * p + iw) * pt + it) * C + ch;
    vfm_status s = device_malloc(m->device, (size_t)n * sizeof *host, (void **)&m->patch_perm);
    if (s == VFM_OK) {
        Tensor src = TI32(host, n), dst = TENSOR(m->patch_perm, DT_I32, m->device, n);
        s = tensor_copy(&dst, &src);
    }
    free(host);
    return s;
}

/* A column-parallel linear's rows on this TP rank: out/TP rows from row0/TP (a fused qkv's local
 * weight is [q_t; k_t; v_t], tp_shard.h). */
static void localize(const DiT *m, DiTLinear *l) {
    if (l->w < 0 || m->table.entries[l->w].tp_split_dim != 0) return;
    l->out /= m->par.tp;
    l->row0 /= m->par.tp;
}

static int pp_on(const DiT *m) { return m->par.pp > 1; }
static int vp_of(const DiT *m) { return m->par.vp > 1 ? m->par.vp : 1; }

static void remap_linear(DiTLinear *l, const int *to) {
    if (l->w >= 0) l->w = to[l->w];
    if (l->b >= 0) l->b = to[l->b];
}
static void remap_entry(int *e, const int *to) {
    if (*e >= 0) *e = to[*e];
}

/* PP: this stage's entries of the whole table (pp_stage.h) and its blocks; every entry index the
 * model keeps moves to the stage table (-1 for what another stage holds). */
static vfm_status stage_table(DiT *m) {
    int L = m->cfg.layers;
    VFM_TRY(pp_check_layers(L, m->par.pp, vp_of(m)));
    int *first = malloc((size_t)L * sizeof *first), *to = malloc((size_t)m->full_table->count * sizeof *to);
    m->stage = calloc(1, sizeof *m->stage);
    if (!first || !to || !m->stage) {
        free(first), free(to);
        return vfm_fail(VFM_ERR_NOMEM, "dit: stage map");
    }
    for (int l = 0; l < L; l++) first[l] = m->blocks[l].first_entry;
    PpBlocks pb = {first, L, m->head_first};
    vfm_status s = pp_stage_map_init(m->stage, m->full_table, &pb, m->par.pp, vp_of(m), m->par.pp_rank);
    free(first);
    if (s != VFM_OK) {
        free(to);
        return s;
    }
    PpStageMap *st = m->stage;
    for (int i = 0; i < m->full_table->count; i++) to[i] = -1;
    for (int i = 0; i < st->local.count; i++) to[st->full_entry[i]] = i;
    DiTLinear *ls[] = {&m->x_embed, &m->t_l1, &m->t_l2, &m->f_l1, &m->f_l2, &m->final_ada, &m->final_out};
    for (size_t i = 0; i < sizeof ls / sizeof ls[0]; i++) remap_linear(ls[i], to);
    remap_entry(&m->y_table, to);
    remap_entry(&m->cond_norm_w, to);
    m->head_first = st->head_first;
    for (int l = 0; l < L; l++) m->block_local[l] = -1;
    for (int k = 0; k < st->n_blocks; k++) {
        int l = st->block_index[k];
        DiTBlockParams b = m->blocks[l];
        DiTLinear *bl[] = {&b.ada_down, &b.ada_up, &b.sa_q, &b.sa_k, &b.sa_v, &b.sa_proj,
                           &b.ca_q, &b.ca_k, &b.ca_v, &b.ca_proj, &b.fc1, &b.fc2};
        for (size_t i = 0; i < sizeof bl / sizeof bl[0]; i++) remap_linear(bl[i], to);
        int *ids[] = {&b.sa_qn, &b.sa_kn, &b.ca_qn, &b.ca_kn};
        for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) remap_entry(ids[i], to);
        b.first_entry = st->block_first[k];
        m->blocks[k] = b; /* k <= l: stage blocks in global order move down */
        m->block_ids[k] = l;
        m->block_local[l] = k;
    }
    m->n_blocks = st->n_blocks;
    free(to);
    return VFM_OK;
}

static vfm_status shard_table(DiT *m) {
    m->full_table = calloc(1, sizeof *m->full_table);
    m->shards = calloc(1, sizeof *m->shards);
    if (!m->full_table || !m->shards) return vfm_fail(VFM_ERR_NOMEM, "dit: shard map");
    *m->full_table = m->table; /* the single-rank table moves; the model's table becomes this rank's */
    param_table_init(&m->table);
    const ParamTable *split = m->full_table;
    if (pp_on(m)) {
        VFM_TRY(stage_table(m));
        split = &m->stage->local;
    }
    VFM_TRY(tp_shard_map_init(m->shards, split, m->par.tp, m->par.tp_rank));
    if (pp_on(m)) m->shards->file = m->full_table, m->shards->file_entry = m->stage->full_entry;
    VFM_TRY(param_table_copy(&m->table, &m->shards->local));
    DiTLinear *ls[] = {&m->x_embed, &m->t_l1, &m->t_l2, &m->f_l1, &m->f_l2, &m->final_ada, &m->final_out};
    for (size_t i = 0; i < sizeof ls / sizeof ls[0]; i++) localize(m, ls[i]);
    for (int l = 0; l < m->n_blocks; l++) {
        DiTBlockParams *b = &m->blocks[l];
        DiTLinear *bl[] = {&b->ada_down, &b->ada_up, &b->sa_q, &b->sa_k, &b->sa_v, &b->sa_proj,
                           &b->ca_q, &b->ca_k, &b->ca_v, &b->ca_proj, &b->fc1, &b->fc2};
        for (size_t i = 0; i < sizeof bl / sizeof bl[0]; i++)
            localize(m, bl[i]); /* unused ones (no cross-attention) are zero: entry 0 is replicated */
    }
    m->heads_local = m->cfg.heads / m->par.tp;
    m->kv_heads_local = m->cfg.kv_heads / m->par.tp;
    m->ffn_local = m->cfg.ffn / m->par.tp;
    return VFM_OK;
}

vfm_status dit_describe_parallel(DiT *m, const DiTConfig *cfg, const DiTParallel *par) {
    memset(m, 0, sizeof *m);
    DiTConfig resolved = *cfg;
    VFM_TRY(dit_config_resolve(&resolved));
    DiTParallel one = {.tp = 1, .cp = 1};
    if (!par) par = &one;
    VFM_TRY(dit_check_parallel(&resolved, par->tp, par->sequence_parallel, par->cp, par->cpa.type, par->cpa.A));
    if (par->pp > 1) VFM_TRY(pp_check_layers(resolved.layers, par->pp, par->vp > 1 ? par->vp : 1));
    else if (par->vp > 1)
        return vfm_fail(VFM_ERR_USAGE, "model.virtual_pipeline_model_parallel_size (%d) needs "
                        "model.pipeline_model_parallel_size > 1", par->vp);
    dit_describe(m, &resolved);
    m->par = *par;
    return shard_table(m);
}

vfm_status dit_create_parallel(DiT *m, const DiTConfig *cfg, Device device, const DiTParallel *par) {
    memset(m, 0, sizeof *m);
    if (device == DEV_CUDA && par && (par->tp > 1 || par->cp > 1))
        return vfm_fail(VFM_ERR_UNSUPPORTED, "tensor and context parallelism run on the CPU in this version "
                        "(model.tensor_model_parallel_size=%d, model.context_parallel_size=%d with train.device=cuda): "
                        "on the GPU use data parallelism, or train.device=cpu", par->tp, par->cp);
    VFM_TRY(dit_describe_parallel(m, cfg, par));
    m->device = device;
    m->act_dtype = device == DEV_CUDA ? DT_BF16 : DT_F32;
    size_t bytes = (size_t)m->table.total * sizeof(float);
    VFM_TRY(device_malloc(device, bytes, (void **)&m->params));
    VFM_TRY(device_malloc(device, bytes, (void **)&m->grads));
    VFM_TRY(device_memset0(device, m->params, bytes));
    VFM_TRY(device_memset0(device, m->grads, bytes));
    VFM_TRY(dit_set_act_dtype(m, m->act_dtype));
    return m->cfg.f.conv_patch ? build_patch_perm(m) : VFM_OK;
}

int dit_max_chunk_blocks(const DiT *m) {
    if (!pp_on(m)) return m->cfg.layers;
    int most = 0;
    for (int v = 0; v < vp_of(m); v++) {
        int first, count;
        pp_chunk_blocks(m->cfg.layers, m->par.pp, vp_of(m), m->par.pp_rank, v, &first, &count);
        if (count > most) most = count;
    }
    return most;
}

const DiTBlockParams *dit_block(const DiT *m, int l) { return &m->blocks[m->block_local[l]]; }

void dit_chunk_blocks(const DiT *m, int chunk, int *b0, int *b1) {
    int first = 0, count = m->cfg.layers;
    if (pp_on(m)) pp_chunk_blocks(m->cfg.layers, m->par.pp, vp_of(m), m->par.pp_rank, chunk, &first, &count);
    *b0 = first, *b1 = first + count;
}

vfm_status dit_create(DiT *m, const DiTConfig *cfg, Device device) { return dit_create_parallel(m, cfg, device, NULL); }

vfm_status dit_set_act_dtype(DiT *m, DType dt) {
    if (dt != DT_F32 && !(dt == DT_BF16 && m->device == DEV_CUDA))
        return vfm_fail(VFM_ERR_UNSUPPORTED, "dit: activations in %s on %s (the CPU runs f32; CUDA bf16 or f32)",
                        dtype_name(dt), device_name(m->device));
    if (m->saved) return vfm_fail(VFM_ERR_INTERNAL, "dit_set_act_dtype after dit_reserve");
    device_free(m->device, m->wcopy);
    m->wcopy = NULL;
    m->act_dtype = dt;
    if (dt != DT_F32) {
        VFM_TRY(device_malloc(m->device, (size_t)m->table.total * dtype_size(dt), &m->wcopy));
        VFM_TRY(dit_refresh_weights(m));
    }
    return VFM_OK;
}

vfm_status dit_refresh_weights(DiT *m) {
    if (!m->wcopy || m->table.total == 0) return VFM_OK;
    Tensor dst = TENSOR(m->wcopy, m->act_dtype, m->device, m->table.total);
    Tensor src = TENSOR(m->params, DT_F32, m->device, m->table.total);
    return op_convert(&dst, &src);
}

vfm_status dit_params_to_host(const DiT *m, float *host) {
    return device_memcpy(host, DEV_CPU, m->params, m->device, (size_t)m->table.total * sizeof(float));
}

vfm_status dit_params_from_host(DiT *m, const float *host) {
    VFM_TRY(device_memcpy(m->params, m->device, host, DEV_CPU, (size_t)m->table.total * sizeof(float)));
    return dit_refresh_weights(m);
}

vfm_status dit_init_weights(DiT *m, uint64_t seed) {
    float *host = m->params;
    if (m->device != DEV_CPU) {
        host = malloc((size_t)(m->table.total > 0 ? m->table.total : 1) * sizeof(float));
        if (!host) return vfm_fail(VFM_ERR_NOMEM, "dit: %lld initial weights", (long long)m->table.total);
    }
    vfm_status s = m->par.tp > 1 && m->shards ? tp_shard_init_values(m->shards, host, seed)
                                              : param_table_init_values(&m->table, host, seed);
    if (host != m->params) {
        if (s == VFM_OK) s = dit_params_from_host(m, host);
        free(host);
    }
    return s;
}

void dit_destroy(DiT *m) {
    device_free(m->device, m->params);
    device_free(m->device, m->wcopy);
    device_free(m->device, m->grads);
    device_free(m->device, m->patch_perm);
    free(m->fsdp_unit); /* the Fsdp itself is the caller's */
    dit_saved_destroy(m, m->saved);
    free(m->blocks);
    free(m->block_ids);
    free(m->block_local);
    if (m->stage) pp_stage_map_free(m->stage);
    free(m->stage);
    param_table_free(&m->table);
    if (m->shards) tp_shard_map_free(m->shards);
    free(m->shards);
    if (m->full_table) param_table_free(m->full_table);
    free(m->full_table);
    memset(m, 0, sizeof *m);
}
