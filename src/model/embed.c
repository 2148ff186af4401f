/* The patch embedding (embed.h). */
#include <stdlib.h>

#include "model/dit_internal.h"

void patch_embed_add_linear(PatchEmbedLayer *pe, ParamTable *t, const char *name, int64_t D, int64_t token_dim) {
    param_table_set_group(t, DIT_GROUP_PATCH);
    pe->conv = 0;
    pe->proj = linear_add(t, name, D, token_dim, linear_torch_default(token_dim, 0));
}

void patch_embed_add_conv(PatchEmbedLayer *pe, ParamTable *t, const char *name, int64_t D, int64_t C, int64_t pt,
                          int64_t p) {
    int64_t shape[5] = {D, C, pt, p, p};
    int nd = 5;
    if (pt == 1) shape[2] = p, shape[3] = p, nd = 4;
    param_table_set_group(t, DIT_GROUP_PATCH);
    pe->conv = 1;
    pe->proj = (Linear){-1, -1, 0, D};
    pe->proj.w = param_table_add(t, INIT_XAVIER_UNIFORM, 0, nd, shape, 0, -1, "%s.weight", name);
    pe->proj.b = param_table_add(t, INIT_ZERO, 0, 1, (int64_t[]){D}, 0, -1, "%s.bias", name);
}

void patch_embed_add_conv3d(PatchEmbedLayer *pe, ParamTable *t, const char *name, int64_t D, int64_t C, int64_t pt,
                            int64_t p) {
    float fan_in = (float)(C * pt * p * p);
    param_table_set_group(t, DIT_GROUP_PATCH);
    pe->conv = 1;
    pe->proj = (Linear){-1, -1, 0, D};
    pe->proj.w = param_table_add(t, INIT_UNIFORM_FANIN, fan_in, 5, (int64_t[]){D, C, pt, p, p}, 0, -1, "%s.weight", name);
    pe->proj.b = param_table_add(t, INIT_UNIFORM_FANIN, fan_in, 1, (int64_t[]){D}, 0, -1, "%s.bias", name);
}

void patch_embed_handles(PatchEmbedLayer *pe, const HandleVisitor *v) { visit_linear(v, &pe->proj); }

/* perm[k] for k over the conv weight's (C, pt, ph, pw) order: the token column (ph pw pt C) that
 * holds the same element. */
vfm_status patch_embed_setup(PatchEmbedLayer *pe, const DiTConfig *c, Device device) {
    if (!pe->conv) return VFM_OK;
    int n = dit_token_dim(c), C = c->in_channels, pt = c->patch_temporal, p = c->patch_spatial;
    int32_t *host = malloc((size_t)n * sizeof *host);
    if (!host) return vfm_fail(VFM_ERR_NOMEM, "dit: patch permutation of %d columns", n);
    int k = 0;
    for (int ch = 0; ch < C; ch++)
        for (int it = 0; it < pt; it++)
            for (int ih = 0; ih < p; ih++)
                for (int iw = 0; iw < p; iw++) host[k++] = ((ih * p + iw) * pt + it) * C + ch;
    vfm_status s = device_malloc(device, (size_t)n * sizeof *host, (void **)&pe->perm);
    if (s == VFM_OK) {
        Tensor src = TI32(host, n), dst = TENSOR(pe->perm, DT_I32, device, n);
        s = tensor_copy(&dst, &src);
    }
    free(host);
    return s;
}

void patch_embed_free(PatchEmbedLayer *pe, Device device) {
    device_free(device, pe->perm);
    pe->perm = NULL;
}

vfm_status patch_embed_forward(const DiT *m, const PatchEmbedLayer *pe, Tensor *x_perm, const Tensor *x,
                               const Tensor *pos, const Tensor *t2s, Tensor *h0) {
    if (pe->conv) {
        Tensor perm = TENSOR(pe->perm, DT_I32, m->device, tensor_dim(x, -1));
        VFM_TRY(op_gather_columns(x_perm, x, &perm));
        x = x_perm;
    }
    VFM_TRY(linear_forward(m, h0, NULL, x, &pe->proj, ACT_NONE));
    if (pe->pos == DIT_POS_ROPE_3D || pe->pos == DIT_POS_LEARNED_3D) return VFM_OK;
    if (pe->pos == DIT_POS_SINCOS_2D) return op_pos_embed_2d_add(h0, pos, t2s);
    return op_pos_embed_3d_add(h0, pos, t2s);
}

vfm_status patch_embed_backward(const DiT *m, const PatchEmbedLayer *pe, const Tensor *x_perm, const Tensor *x,
                                Tensor *d_h0) {
    return linear_backward(m, NULL, 0, d_h0, pe->conv ? x_perm : x, &pe->proj, NULL, ACT_NONE);
}

double patch_embed_flops(const DiT *m, const PatchEmbedLayer *pe, const FlopShape *s) {
    return linear_flops(m, &pe->proj, s->tokens);
}
