/* Dispatchers of the embedding ops (sinusoidal timestep embedding, 3-D sin-cos position
 * embedding) and of patchify / unpatchify: argument checks, then the backend (t and dt are f32 on
 * CUDA, the embedding in the activation dtype). */
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
