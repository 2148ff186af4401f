/* DiT reference interop: the pos_embed buffer, settings from a state dict's shapes, and a strict
 * load of named tensors into the parameter table (see dit_interop.h). */
#include "model/dit_interop.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

vfm_status dit_reference_pos_embed(const DiTConfig *c, int grid, float *out) {
    int64_t S = (int64_t)grid * grid, D = c->hidden;
    int32_t *pos = calloc((size_t)S * 3, sizeof *pos), *map = calloc((size_t)S, sizeof *map);
    if (!pos || !map) {
        free(pos);
        free(map);
        return vfm_fail(VFM_ERR_NOMEM, "pos_embed: %lld positions", (long long)S);
    }
    for (int64_t r = 0; r < S; r++) pos[3 * r + 1] = (int32_t)(r / grid), pos[3 * r + 2] = (int32_t)(r % grid);
    Tensor x = TF32(out, S, D), P = TI32(pos, S, 3), M = TI32(map, S);
    vfm_status s = op_fill(&x, 0.0);
    if (s == VFM_OK) s = op_pos_embed_2d_add(&x, &P, &M);
    free(pos);
    free(map);
    return s;
}

static int find(const WeightSource *src, const char *name) {
    for (int i = 0; i < src->count; i++)
        if (strcmp(src->name(src->ctx, i), name) == 0) return i;
    return -1;
}

/* Shape of a required tensor, or a message naming it. */
static vfm_status need(const WeightSource *src, const char *name, int ndim, int64_t *shape) {
    int i = find(src, name);
    if (i < 0) return vfm_fail(VFM_ERR_FORMAT, "%s: no tensor '%s': not a DiT (adaln-zero) state dict", src->what, name);
    if (src->shape(src->ctx, i, shape) != ndim)
        return vfm_fail(VFM_ERR_FORMAT, "%s: tensor '%s' should have %d dimensions", src->what, name, ndim);
    return VFM_OK;
}

vfm_status dit_reference_settings(const WeightSource *src, char settings[16][96], int *n) {
    int64_t xs[VFM_MAX_DIMS], fs[VFM_MAX_DIMS], ms[VFM_MAX_DIMS], ys[VFM_MAX_DIMS], ks[VFM_MAX_DIMS];
    int i = find(src, "x_embedder.proj.weight");
    if (i < 0) return vfm_fail(VFM_ERR_FORMAT, "%s: no tensor 'x_embedder.proj.weight': not a DiT state dict", src->what);
    int xd = src->shape(src->ctx, i, xs);
    if (xd != 4 && xd != 5)
        return vfm_fail(VFM_ERR_FORMAT, "%s: x_embedder.proj.weight should be [D, C, p, p] or [D, C, pt, p, p]", src->what);
    int64_t D = xs[0], C = xs[1], p = xs[xd - 1], pt = xd == 5 ? xs[2] : 1;
    int layers = 0;
    char name[96];
    for (;; layers++) {
        snprintf(name, sizeof name, "blocks.%d.attn.qkv.weight", layers);
        if (find(src, name) < 0) break;
    }
    if (layers == 0) return vfm_fail(VFM_ERR_FORMAT, "%s: no 'blocks.0.attn.qkv.weight': not a DiT state dict", src->what);
    VFM_TRY(need(src, "final_layer.linear.weight", 2, fs));
    VFM_TRY(need(src, "blocks.0.mlp.fc1.weight", 2, ms));
    int64_t per_channel = p * p * pt;
    if (fs[0] % (C * per_channel) != 0 || (fs[0] / (C * per_channel) != 1 && fs[0] / (C * per_channel) != 2))
        return vfm_fail(VFM_ERR_FORMAT, "%s: final_layer.linear has %lld outputs: expected %lld or %lld (learned sigma)",
                        src->what, (long long)fs[0], (long long)(C * per_channel), (long long)(2 * C * per_channel));
    int k = 0;
    snprintf(settings[k++], 96, "model.variant=adaln-zero");
    snprintf(settings[k++], 96, "model.hidden_size=%lld", (long long)D);
    snprintf(settings[k++], 96, "model.num_layers=%d", layers);
    snprintf(settings[k++], 96, "model.in_channels=%lld", (long long)C);
    snprintf(settings[k++], 96, "model.out_channels=%lld", (long long)C);
    snprintf(settings[k++], 96, "model.patch_spatial=%lld", (long long)p);
    snprintf(settings[k++], 96, "model.patch_temporal=%lld", (long long)pt);
    snprintf(settings[k++], 96, "model.ffn_hidden_size=%lld", (long long)ms[0]);
    snprintf(settings[k++], 96, "model.learn_sigma=%s", fs[0] == 2 * C * per_channel ? "true" : "false");
    if (find(src, "y_embedder.embedding_table.weight") >= 0) {
        VFM_TRY(need(src, "y_embedder.embedding_table.weight", 2, ys));
        /* the reference's table has the null row whenever class_dropout_prob > 0 (its default 0.1) */
        snprintf(settings[k++], 96, "model.num_classes=%lld", (long long)(ys[0] - 1));
    } else {
        snprintf(settings[k++], 96, "model.num_classes=0");
    }
    if (find(src, "blocks.0.cross_attn.k.weight") >= 0) {
        VFM_TRY(need(src, "blocks.0.cross_attn.k.weight", 2, ks));
        snprintf(settings[k++], 96, "model.cross_attention=true");
        snprintf(settings[k++], 96, "model.crossattn_emb_size=%lld", (long long)ks[1]);
    } else {
        snprintf(settings[k++], 96, "model.cross_attention=false");
    }
    *n = k;
    return VFM_OK;
}

vfm_status dit_load_weights(DiT *m, const WeightSource *src, int *skipped) {
    const ParamTable *t = &m->table;
    char *used = calloc((size_t)src->count + 1, 1);
    if (!used) return vfm_fail(VFM_ERR_NOMEM, "import: %d tensors", src->count);
    vfm_status s = VFM_OK;
    for (int e = 0; e < t->count && s == VFM_OK; e++) {
        const ParamEntry *p = &t->entries[e];
        int i = find(src, p->name);
        if (i < 0) {
            s = vfm_fail(VFM_ERR_FORMAT, "%s: tensor '%s' of the model is missing (check the model.* settings)",
                         src->what, p->name);
            break;
        }
        int64_t shape[VFM_MAX_DIMS];
        int nd = src->shape(src->ctx, i, shape), same = nd == p->ndim;
        for (int d = 0; same && d < nd; d++) same = shape[d] == p->shape[d];
        if (!same) {
            char want[96] = "", got[96] = "";
            for (int d = 0; d < p->ndim; d++)
                snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", d ? "," : "", (long long)p->shape[d]);
            for (int d = 0; d < nd; d++)
                snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", d ? "," : "", (long long)shape[d]);
            s = vfm_fail(VFM_ERR_SHAPE, "%s: tensor '%s' is [%s], the model's is [%s] (check the model.* settings)",
                         src->what, p->name, got, want);
            break;
        }
        s = src->read_f32(src->ctx, i, m->params + p->offset, p->numel);
        used[i] = 1;
    }
    int n_skipped = 0;
    for (int i = 0; i < src->count && s == VFM_OK; i++) {
        if (used[i]) continue;
        if (strcmp(src->name(src->ctx, i), "pos_embed") == 0) {
            n_skipped++;
            continue;
        }
        s = vfm_fail(VFM_ERR_FORMAT, "%s: tensor '%s' is not part of the model (check the model.* settings)", src->what,
                     src->name(src->ctx, i));
    }
    free(used);
    if (skipped) *skipped = n_skipped;
    return s;
}
