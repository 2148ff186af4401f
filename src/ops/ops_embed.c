/* Dispatchers of the embedding ops (sinusoidal timestep embedding, 3-D and 2-D sin-cos position
 * embeddings, row lookup), of the column gather and of patchify / unpatchify: argument checks,
 * then the backend (on CUDA t, dt and the class-table gradient are f32, the rest in the
 * activation dtype). */
#include "ops_check.h"

static vfm_status check_timestep_args(const char *op, const char *emb_name, const Tensor *emb, const Tensor *t, float shift,
                                      float max_period) {
    VFM_TRY(ops_float_dtype(op, t));
    OPS_EXPECT(op, "t", t, ops_f32_dtype(t), t->device, -1);
    OPS_EXPECT(op, emb_name, emb, ops_act_dtype(emb, t), t->device, t->shape[0], -1);
    int64_t dim = emb->shape[1];
    if (dim < 2 || dim % 2)
        return vfm_fail(VFM_ERR_SHAPE, "%s: embedding dim %lld must be even and >= 2", op, (long long)dim);
    if ((double)(dim / 2) - (double)shift == 0.0 || !(max_period > 0))
        return vfm_fail(VFM_ERR_SHAPE, "%s: half - shift must be non-zero and max_period > 0 (dim %lld, shift %g, "
                        "max_period %g)", op, (long long)dim, shift, max_period);
    return VFM_OK;
}

vfm_status op_timestep_embedding_forward(Tensor *out, const Tensor *t, int flip_sin_to_cos, float shift,
                                         float max_period) {
    VFM_TRY(check_timestep_args("timestep_embedding_forward", "out", out, t, shift, max_period));
    OPS_DISPATCH_WITH_CUDA(timestep_embedding_forward, t, out, t, flip_sin_to_cos, shift, max_period);
}

vfm_status op_timestep_embedding_backward(Tensor *dt, const Tensor *dout, const Tensor *t, int flip_sin_to_cos,
                                          float shift, float max_period) {
    const char *op = "timestep_embedding_backward";
    VFM_TRY(check_timestep_args(op, "dout", dout, t, shift, max_period));
    OPS_EXPECT(op, "dt", dt, ops_f32_dtype(t), t->device, t->shape[0]);
    OPS_DISPATCH_WITH_CUDA(timestep_embedding_backward, t, dt, dout, t, flip_sin_to_cos, shift, max_period);
}

vfm_status op_pos_embed_3d_add(Tensor *x, const Tensor *pos, const Tensor *tok2sample) {
    const char *op = "pos_embed_3d_add";
    VFM_TRY(ops_float_dtype(op, x));
    OPS_EXPECT(op, "x", x, x->dtype, x->device, -1, -1);
    int64_t S = x->shape[0], D = x->shape[1];
    if (D % 16)
        return vfm_fail(VFM_ERR_SHAPE, "%s: x has %lld columns; the 3-D embedding needs a multiple of 16", op,
                        (long long)D);
    OPS_EXPECT(op, "pos", pos, DT_I32, x->device, S, 3);
    OPS_EXPECT(op, "tok2sample", tok2sample, DT_I32, x->device, S);
    OPS_DISPATCH_WITH_CUDA(pos_embed_3d_add, x, x, pos, tok2sample);
}

vfm_status op_pos_embed_2d_add(Tensor *x, const Tensor *pos, const Tensor *tok2sample) {
    const char *op = "pos_embed_2d_add";
    VFM_TRY(ops_float_dtype(op, x));
    OPS_EXPECT(op, "x", x, x->dtype, x->device, -1, -1);
    int64_t S = x->shape[0], D = x->shape[1];
    if (D % 4)
        return vfm_fail(VFM_ERR_SHAPE, "%s: x has %lld columns; the 2-D embedding needs a multiple of 4", op, (long long)D);
    OPS_EXPECT(op, "pos", pos, DT_I32, x->device, S, 3);
    OPS_EXPECT(op, "tok2sample", tok2sample, DT_I32, x->device, S);
    OPS_DISPATCH_WITH_CUDA(pos_embed_2d_add, x, x, pos, tok2sample);
}

vfm_status op_embedding_forward(Tensor *out, const Tensor *table, const Tensor *idx) {
    const char *op = "embedding_forward";
    VFM_TRY(ops_float_dtype(op, table));
    OPS_EXPECT(op, "table", table, table->dtype, table->device, -1, -1);
    OPS_EXPECT(op, "idx", idx, DT_I32, table->device, -1);
    OPS_EXPECT(op, "out", out, table->dtype, table->device, idx->shape[0], table->shape[1]);
    OPS_DISPATCH_WITH_CUDA(embedding_forward, table, out, table, idx);
}

vfm_status op_embedding_backward(Tensor *dtable, const Tensor *dout, const Tensor *idx) {
    const char *op = "embedding_backward";
    VFM_TRY(ops_float_dtype(op, dtable));
    OPS_EXPECT(op, "dtable", dtable, ops_f32_dtype(dtable), dtable->device, -1, -1);
    OPS_EXPECT(op, "idx", idx, DT_I32, dtable->device, -1);
    OPS_EXPECT(op, "dout", dout, ops_act_dtype(dout, dtable), dtable->device, idx->shape[0], dtable->shape[1]);
    OPS_DISPATCH_WITH_CUDA(embedding_backward, dtable, dtable, dout, idx);
}

/* out [N,K], in [N,M], idx [K]. */
static vfm_status check_gather_args(const char *op, const Tensor *narrow, const Tensor *wide, const Tensor *idx) {
    VFM_TRY(ops_float_dtype(op, wide));
    OPS_EXPECT(op, "in", wide, wide->dtype, wide->device, -1, -1);
    OPS_EXPECT(op, "idx", idx, DT_I32, wide->device, -1);
    OPS_EXPECT(op, "out", narrow, wide->dtype, wide->device, wide->shape[0], idx->shape[0]);
    return VFM_OK;
}

vfm_status op_gather_columns(Tensor *out, const Tensor *in, const Tensor *idx) {
    VFM_TRY(check_gather_args("gather_columns", out, in, idx));
    OPS_DISPATCH_WITH_CUDA(gather_columns, in, out, in, idx);
}

vfm_status op_gather_columns_backward(Tensor *din, const Tensor *dout, const Tensor *idx) {
    VFM_TRY(check_gather_args("gather_columns_backward", dout, din, idx));
    OPS_DISPATCH_WITH_CUDA(gather_columns_backward, din, din, dout, idx);
}

/* latent [C, T'·pt, H'·ph, W'·pw] and tokens [T'·H'·W', ph·pw·pt·C] fit together. */
static vfm_status check_patchify_args(const char *op, const Tensor *tokens, const Tensor *latent, int pt, int ph,
                                      int pw) {
    VFM_TRY(ops_float_dtype(op, latent));
    OPS_EXPECT(op, "latent", latent, latent->dtype, latent->device, -1, -1, -1, -1);
    if (pt < 1 || ph < 1 || pw < 1)
        return vfm_fail(VFM_ERR_SHAPE, "%s: patch sizes (pt %d, ph %d, pw %d) must be >= 1", op, pt, ph, pw);
    int64_t C = latent->shape[0], T = latent->shape[1], H = latent->shape[2], W = latent->shape[3];
    if (T % pt || H % ph || W % pw) {
        char got[128];
        return vfm_fail(VFM_ERR_SHAPE, "%s: latent %s does not divide into patches (pt %d, ph %d, pw %d)", op,
                        tensor_describe(latent, got, sizeof got), pt, ph, pw);
    }
    OPS_EXPECT(op, "tokens", tokens, latent->dtype, latent->device, (T / pt) * (H / ph) * (W / pw),
               (int64_t)ph * pw * pt * C);
    return VFM_OK;
}

vfm_status op_patchify(Tensor *tokens, const Tensor *latent, int pt, int ph, int pw) {
    VFM_TRY(check_patchify_args("patchify", tokens, latent, pt, ph, pw));
    OPS_DISPATCH_WITH_CUDA(patchify, latent, tokens, latent, pt, ph, pw);
}

vfm_status op_unpatchify(Tensor *latent, const Tensor *tokens, int pt, int ph, int pw) {
    VFM_TRY(check_patchify_args("unpatchify", tokens, latent, pt, ph, pw));
    OPS_DISPATCH_WITH_CUDA(unpatchify, latent, latent, tokens, pt, ph, pw);
}
