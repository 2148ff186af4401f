/* Activation recomputation: key validation and per-block plans (see recompute.h). */
#include "recompute.h"

#include <stdio.h>
#include <string.h>

vfm_status recompute_resolve(const char *granularity, const char *method, int num_layers, int max_chunk_blocks,
                             RecomputeConfig *out) {
    memset(out, 0, sizeof *out);
    const char *g = granularity ? granularity : "", *m = method ? method : "";
    if (strcmp(g, "full") == 0) out->granularity = RECOMPUTE_FULL;
    else if (strcmp(g, "selective") == 0) out->granularity = RECOMPUTE_SELECTIVE;
    else if (*g) return vfm_fail(VFM_ERR_USAGE, "model.recompute_granularity: '%s' is not one of full, selective (or null)", g);
    if (strcmp(m, "uniform") == 0) out->method = RECOMPUTE_UNIFORM;
    else if (strcmp(m, "block") == 0) out->method = RECOMPUTE_BLOCK;
    else if (*m) return vfm_fail(VFM_ERR_USAGE, "model.recompute_method: '%s' is not one of uniform, block (or null)", m);
    if (num_layers < 0) return vfm_fail(VFM_ERR_USAGE, "model.recompute_num_layers: %d is negative", num_layers);
    out->num_layers = num_layers;
    switch (out->granularity) {
    case RECOMPUTE_NONE:
        if (*m || num_layers)
            return vfm_fail(VFM_ERR_USAGE, "model.%s is set but model.recompute_granularity is not: set it to full "
                            "(or drop the key)", *m ? "recompute_method" : "recompute_num_layers");
        return VFM_OK;
    case RECOMPUTE_SELECTIVE:
        if (*m)
            return vfm_fail(VFM_ERR_USAGE, "model.recompute_method: %s applies to model.recompute_granularity: full only "
                            "(selective recomputes the attention of every block)", m);
        if (num_layers)
            return vfm_fail(VFM_ERR_USAGE, "model.recompute_num_layers must be unset (0) with model.recompute_granularity: "
                            "selective (Megatron: None)");
        return VFM_OK;
    default:
        if (!*m)
            return vfm_fail(VFM_ERR_USAGE, "model.recompute_granularity: full needs model.recompute_method: uniform or "
                            "block");
        if (num_layers < 1 || num_layers > max_chunk_blocks)
            return vfm_fail(VFM_ERR_USAGE, "model.recompute_num_layers = %d: with model.recompute_granularity: full it must "
                            "be between 1 and the blocks of a pipeline chunk (%d)", num_layers, max_chunk_blocks);
        return VFM_OK;
    }
}

vfm_status recompute_from_config(const Config *cfg, RecomputeConfig *out) {
    int L = (int)cfg_int(cfg, "model.num_layers");
    long long chunks = cfg_int(cfg, "model.pipeline_model_parallel_size") * cfg_int(cfg, "model.virtual_pipeline_model_parallel_size");
    int largest = chunks > 0 ? (int)((L + chunks - 1) / chunks) : L;
    return recompute_resolve(cfg_str(cfg, "model.recompute_granularity"), cfg_str(cfg, "model.recompute_method"),
                             (int)cfg_int(cfg, "model.recompute_num_layers"), largest, out);
}

RecomputeBlock recompute_block(const RecomputeConfig *c, int n, int i) {
    RecomputeBlock b = {c->granularity, i, i + 1};
    if (c->granularity != RECOMPUTE_FULL) return b;
    int k = c->num_layers > 0 ? c->num_layers : 1;
    if (c->method == RECOMPUTE_UNIFORM) {
        int first = i / k * k, end = first + k < n ? first + k : n;
        return (RecomputeBlock){RECOMPUTE_FULL, first, end};
    }
    if (i >= k) b.mode = RECOMPUTE_NONE;
    return b;
}

void recompute_plan(const RecomputeConfig *c, int n, RecomputeBlock *plan) {
    for (int i = 0; i < n; i++) plan[i] = recompute_block(c, n, i);
}

void recompute_describe(const RecomputeConfig *c, char *out, size_t n) {
    if (c->granularity == RECOMPUTE_FULL)
        snprintf(out, n, "full, %s %d", c->method == RECOMPUTE_BLOCK ? "block" : "uniform", c->num_layers);
    else snprintf(out, n, "%s", c->granularity == RECOMPUTE_SELECTIVE ? "selective" : "none");
}
