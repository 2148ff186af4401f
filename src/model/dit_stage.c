/* A pack in host memory for a model on CUDA (dit.h "DiTInputs"): the inputs copied into the
 * device tensors carved for them (dit_acts.c) — the network input and the text converted to the
 * activation dtype on the GPU, the rest as they are —, the output brought back as f32, and the
 * output's gradient taken to the GPU. So the objectives, validation and samplers, which build
 * their packs on the host, drive a GPU model unchanged — a TP, CP or PP one too: every rank stages
 * the whole pack, the model splits it on the device, and the whole output is gathered there
 * before it comes back. */
#include <string.h>

#include "model/dit_internal.h"

static int on_host(const Tensor *t) { return t && t->device == DEV_CPU; }

/* dst (device, any float dtype) = src (host f32) through the f32 device buffer mid. */
static vfm_status upload_as(Tensor *dst, Tensor *mid, const Tensor *src) {
    if (src->dtype != DT_F32)
        return vfm_fail(VFM_ERR_SHAPE, "dit: a host input must be f32 (got %s)", dtype_name(src->dtype));
    if (dst->dtype == DT_F32) return tensor_copy(dst, src);
    VFM_TRY(tensor_copy(mid, src));
    return op_convert(dst, mid);
}

/* The staged tensor t cut to the shape of src (same element count). */
static Tensor like(const Tensor *t, const Tensor *src) {
    Tensor v = *t;
    v.ndim = src->ndim;
    memcpy(v.shape, src->shape, sizeof v.shape);
    return v;
}

static vfm_status upload_i32(Tensor *dst, const Tensor *src, int64_t n) {
    if (src->dtype != DT_I32 || tensor_numel(src) < n)
        return vfm_fail(VFM_ERR_SHAPE, "dit: a host index input holds %lld %s values, %lld i32 expected",
                        (long long)tensor_numel(src), dtype_name(src->dtype), (long long)n);
    return device_memcpy(dst->data, DEV_CUDA, src->data, DEV_CPU, (size_t)n * sizeof(int32_t));
}

static vfm_status upload_layout(VarlenLayout *dst, Tensor *cu, const VarlenLayout *src) {
    *dst = *src;
    int64_t n = src->n_samples + 1;
    const Tensor *from[4] = {&src->cu_q, &src->cu_q_padded, &src->cu_kv, &src->cu_kv_padded};
    Tensor *to[4] = {&dst->cu_q, &dst->cu_q_padded, &dst->cu_kv, &dst->cu_kv_padded};
    for (int k = 0; k < 4; k++) {
        VFM_TRY(upload_i32(&cu[k], from[k], n));
        *to[k] = tensor_make(cu[k].data, DT_I32, DEV_CUDA, 1, &n);
    }
    return VFM_OK;
}

vfm_status dit_stage_inputs(DiT *m, Acts *a, const DiTInputs **in_p, const Tensor *out) {
    const DiTInputs *in = *in_p;
    Staging *g = &a->stage;
    g->on = m->device == DEV_CUDA && on_host(in->x);
    if (!g->on) return VFM_OK;
    /* out: the last pipeline stage's (every rank of TP and CP gets the whole output), NULL before it */
    if (out && (!on_host(out) || out->dtype != DT_F32))
        return vfm_fail(VFM_ERR_SHAPE, "dit_forward: with host inputs the output must be host f32 too");
    const DiTConfig *c = &m->cfg;
    DiTInputs *d = &g->in;
    memset(d, 0, sizeof *d);
    g->x = like(&g->x, in->x);
    g->x32 = like(&g->x32, in->x);
    VFM_TRY(upload_as(&g->x, &g->x32, in->x));
    d->x = &g->x;
    VFM_TRY(tensor_copy(&g->c_noise, in->c_noise));
    d->c_noise = &g->c_noise;
    if (c->f.fps_embedder) {
        VFM_TRY(tensor_copy(&g->fps, in->fps));
        d->fps = &g->fps;
    }
    if (c->f.cross_attn) {
        g->text = like(&g->text, in->text);
        g->text32 = like(&g->text32, in->text);
        VFM_TRY(upload_as(&g->text, &g->text32, in->text));
        d->text = &g->text;
    }
    int64_t S = tensor_dim(in->x, 0);
    VFM_TRY(upload_i32(&g->t2s, in->tok2sample, S));
    VFM_TRY(upload_i32(&g->pos, in->pos, 3 * S));
    d->tok2sample = &g->t2s;
    d->pos = &g->pos;
    if (in->class_labels) {
        VFM_TRY(upload_i32(&g->labels, in->class_labels, tensor_numel(in->class_labels)));
        d->class_labels = &g->labels;
    }
    VFM_TRY(upload_layout(&d->self_layout, &g->cu[0], &in->self_layout));
    if (c->f.cross_attn) VFM_TRY(upload_layout(&d->cross_layout, &g->cu[4], &in->cross_layout));
    *in_p = d;
    return VFM_OK;
}

Tensor *dit_stage_out(Acts *a, Tensor *out) {
    if (!a->stage.on) return out;
    a->stage.out = like(&a->stage.out, out);
    return &a->stage.out;
}

vfm_status dit_stage_output(DiT *m, Acts *a, Tensor *out) {
    (void)m;
    Staging *g = &a->stage;
    if (!g->on) return VFM_OK;
    if (g->out.dtype == DT_F32) return tensor_copy(out, &g->out);
    g->out32 = like(&g->out32, out);
    VFM_TRY(op_convert(&g->out32, &g->out));
    return tensor_copy(out, &g->out32);
}

vfm_status dit_stage_dout(DiT *m, Acts *a, const Tensor **dout) {
    (void)m;
    Staging *g = &a->stage;
    if (!g->on) return VFM_OK;
    if (!on_host(*dout))
        return vfm_fail(VFM_ERR_SHAPE, "dit_backward: the forward's inputs were in host memory, so dout must be too");
    g->dout = like(&g->dout, *dout);
    g->out32 = like(&g->out32, *dout);
    VFM_TRY(upload_as(&g->dout, &g->out32, *dout));
    *dout = &g->dout;
    return VFM_OK;
}
