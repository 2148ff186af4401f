/* Construction of a DiT: the parameter table its architecture lists (arch.h), this rank's share
 * of it (the TP shards' rows, the pipeline stage's entries and blocks), allocation and weight
 * initialisation. */
#include <stdlib.h>
#include <string.h>

#include "model/arch.h"
#include "model/dit_internal.h"
#include "parallel/pp_schedule.h"
#include "parallel/pp_stage.h"

/* The architecture's layers (arch.h), then the reduce group every other replicated weight needs:
 * the patch embedding, conditioning, adaLN and final layer get their gradients as sums over this
 * rank's tokens, partial over TP under sequence parallelism. */
static void build_table(DiT *m) {
    const DiTArch *arch = dit_arch(m->cfg.variant);
    if (arch) arch->build(m); /* an unknown variant: an empty table (dit_config_resolve refuses it) */
    for (int i = 0; i < m->table.count; i++) {
        ParamEntry *e = &m->table.entries[i];
        if (e->tp_split_dim < 0 && !(e->reduce_groups & REDUCE_TP_HEADS)) e->reduce_groups |= REDUCE_TP_SP;
    }
}

/* Every parameter handle of the model's layers outside the blocks, then of blocks [0, n). */
static void visit_layers(DiT *m, int n, const HandleVisitor *v) {
    patch_embed_handles(&m->patch, v);
    pos_learned_handles(&m->pos, v);
    conditioning_handles(&m->cond, v);
    head_handles(&m->head, v);
    for (int k = 0; k < n; k++) block_handles(&m->blocks[k], v);
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

/* TP: a column-parallel linear's rows on this rank (the other entries keep their indices). */
static void localize_linear(void *m, Linear *l) { linear_localize(m, l); }

static int pp_on(const DiT *m) { return m->par.pp > 1; }
static int vp_of(const DiT *m) { return m->par.vp > 1 ? m->par.vp : 1; }

/* PP: an entry of the whole table to the stage's (-1 when another stage holds it). */
static void remap_linear(void *to, Linear *l) {
    l->w = ((const int *)to)[l->w];
    if (l->b >= 0) l->b = ((const int *)to)[l->b];
}
static void remap_entry(void *to, int *e) { *e = ((const int *)to)[*e]; }

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
    HandleVisitor remap = {remap_linear, remap_entry, to};
    visit_layers(m, 0, &remap);
    m->head_first = st->head_first;
    for (int l = 0; l < L; l++) m->block_local[l] = -1;
    for (int k = 0; k < st->n_blocks; k++) {
        int l = st->block_index[k];
        DiTBlock b = m->blocks[l];
        block_handles(&b, &remap);
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
    int ep = m->par.ep > 1 ? m->par.ep : 1;
    VFM_TRY(tp_shard_map_init_ep(m->shards, split, m->par.tp, m->par.tp_rank, ep, ep > 1 ? m->par.ep_rank : 0));
    if (pp_on(m)) m->shards->file = m->full_table, m->shards->file_entry = m->stage->full_entry;
    VFM_TRY(param_table_copy(&m->table, &m->shards->local));
    HandleVisitor localize = {localize_linear, NULL, m};
    visit_layers(m, m->n_blocks, &localize);
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
    if (par->ep > 1 && (resolved.moe.experts <= 0 || resolved.moe.experts % par->ep != 0))
        return vfm_fail(VFM_ERR_USAGE, "model.expert_model_parallel_size (%d) must divide model.num_moe_experts (%d): "
                        "each EP rank holds the same number of experts", par->ep, resolved.moe.experts);
    if (par->ep > 1 && !par->ep_comm)
        return vfm_fail(VFM_ERR_INTERNAL, "dit: expert parallelism over %d ranks without their comm", par->ep);
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
    VFM_TRY(dit_describe_parallel(m, cfg, par));
    m->device = device;
    m->act_dtype = device == DEV_CUDA ? DT_BF16 : DT_F32;
    size_t bytes = (size_t)m->table.total * sizeof(float);
    VFM_TRY(device_malloc(device, bytes, (void **)&m->params));
    VFM_TRY(device_malloc(device, bytes, (void **)&m->grads));
    VFM_TRY(device_memset0(device, m->params, bytes));
    VFM_TRY(device_memset0(device, m->grads, bytes));
    VFM_TRY(dit_set_act_dtype(m, m->act_dtype));
    return patch_embed_setup(&m->patch, &m->cfg, device);
}

vfm_status dit_create(DiT *m, const DiTConfig *cfg, Device device) { return dit_create_parallel(m, cfg, device, NULL); }

vfm_status dit_set_act_dtype(DiT *m, DType dt) {
    if (dt != DT_F32 && !(dt == DT_BF16 && m->device == DEV_CUDA))
        return vfm_fail(VFM_ERR_UNSUPPORTED, "dit: activations in %s on %s (the CPU runs f32; CUDA bf16 or f32)",
                        dtype_name(dt), device_name(m->device));
    if (m->saved) return vfm_fail(VFM_ERR_INTERNAL, "dit_set_act_dtype after dit_reserve");
    if (m->fsdp) return vfm_fail(VFM_ERR_INTERNAL, "dit_set_act_dtype after dit_fsdp_create");
    device_free(m->device, m->wcopy);
    m->wcopy = NULL;
    param_placement_free(&m->wplace);
    m->act_dtype = dt;
    if (dt != DT_F32) {
        VFM_TRY(param_placement(&m->table, dtype_size(dt), 256, &m->wplace));
        size_t bytes = (size_t)m->wplace.total * dtype_size(dt);
        VFM_TRY(device_malloc(m->device, bytes, &m->wcopy));
        VFM_TRY(device_memset0(m->device, m->wcopy, bytes)); /* the gaps between entries */
        VFM_TRY(dit_refresh_weights(m));
    }
    return VFM_OK;
}

vfm_status dit_refresh_weights(DiT *m) {
    if (m->fsdp) return dit_fsdp_refresh_weights(m);
    return m->wcopy ? dit_convert_placed(m, m->wcopy, 0, m->params, 0, m->table.total) : VFM_OK;
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
    vfm_status s = (m->par.tp > 1 || m->par.ep > 1) && m->shards ? tp_shard_init_values(m->shards, host, seed)
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
    param_placement_free(&m->wplace);
    device_free(m->device, m->grads);
    patch_embed_free(&m->patch, m->device);
    dit_fsdp_wcopy_free(m);
    free(m->fsdp_unit); /* the Fsdp itself is the caller's */
    dit_saved_destroy(m, m->saved);
    if (m->rc_scratch.base) arena_destroy(&m->rc_scratch);
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
