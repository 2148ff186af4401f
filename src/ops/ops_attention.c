/* Dispatchers of varlen (THD) attention and of the log-sum-exp merge of partial attentions:
 * checks of the q/k/v shapes and of the VarlenLayout (cu arrays, padded offsets within the
 * tensors, declared longest lengths), then the backend. lse is f32 on CUDA; there the offsets
 * live on the GPU and only their shapes are checked. */
#include "ops_check.h"

/* q[Sq,H,hd], k and v [Skv,Hkv,hd], Hkv dividing H. */
static vfm_status check_qkv(const char *op, const Tensor *q, const Tensor *k, const Tensor *v) {
    VFM_TRY(ops_float_dtype(op, q));
    OPS_EXPECT(op, "q", q, q->dtype, q->device, -1, -1, -1);
    OPS_EXPECT(op, "k", k, q->dtype, q->device, -1, -1, q->shape[2]);
    OPS_EXPECT(op, "v", v, q->dtype, q->device, k->shape[0], k->shape[1], q->shape[2]);
    int64_t H = q->shape[1], Hkv = k->shape[1], hd = q->shape[2];
    if (H < 1 || Hkv < 1 || hd < 1 || H % Hkv != 0)
        return vfm_fail(VFM_ERR_SHAPE, "%s: %lld kv heads must divide %lld query heads (head_dim %lld)", op,
                        (long long)Hkv, (long long)H, (long long)hd);
    return VFM_OK;
}

/* One side (q or kv) of the layout: cu[n+1] non-decreasing real offsets, cu_padded[n+1]
 * non-decreasing padded offsets in [0, rows] whose slots hold the real rows, and the declared
 * longest length at least the real longest. */
static vfm_status check_side(const char *op, const char *side, const Tensor *cu_t, const Tensor *cu_padded_t, int n,
                             int64_t rows, int declared_longest) {
    const int32_t *cu = cu_t->data, *cu_padded = cu_padded_t->data;
    int real_longest = 0;
    if (cu[0] < 0 || cu_padded[0] < 0)
        return vfm_fail(VFM_ERR_SHAPE, "%s: cu_%s[0] = %d and cu_%s_padded[0] = %d must be >= 0", op, side, cu[0], side,
                        cu_padded[0]);
    for (int i = 0; i < n; i++) {
        int64_t len = (int64_t)cu[i + 1] - cu[i];
        if (len < 0)
            return vfm_fail(VFM_ERR_SHAPE, "%s: cu_%s is not monotone: cu_%s[%d] = %d > cu_%s[%d] = %d", op, side, side,
                            i, cu[i], side, i + 1, cu[i + 1]);
        if ((int64_t)cu_padded[i] + len > cu_padded[i + 1])
            return vfm_fail(VFM_ERR_SHAPE,
                            "%s: sample %d has %lld real %s rows but its padded slot cu_%s_padded[%d..%d] = [%d, %d) "
                            "holds %lld",
                            op, i, (long long)len, side, side, i, i + 1, cu_padded[i], cu_padded[i + 1],
                            (long long)cu_padded[i + 1] - cu_padded[i]);
        if (len > real_longest) real_longest = (int)len;
    }
    if (cu_padded[n] > rows)
        return vfm_fail(VFM_ERR_SHAPE, "%s: cu_%s_padded[%d] = %d is past the %lld rows of the %s tensor", op, side, n,
                        cu_padded[n], (long long)rows, side);
    if (declared_longest < real_longest)
        return vfm_fail(VFM_ERR_SHAPE, "%s: layout max_%s = %d but sample lengths reach %d", op, side,
                        declared_longest, real_longest);
    return VFM_OK;
}

static vfm_status check_layout(const char *op, const VarlenLayout *layout, const Tensor *q, const Tensor *k) {
    if (!layout) return vfm_fail(VFM_ERR_SHAPE, "%s: layout is missing", op);
    int n = layout->n_samples;
    if (n < 0 || layout->max_q < 0 || layout->max_kv < 0)
        return vfm_fail(VFM_ERR_SHAPE, "%s: layout n_samples = %d, max_q = %d, max_kv = %d must be >= 0", op, n,
                        layout->max_q, layout->max_kv);
    OPS_EXPECT(op, "layout cu_q", &layout->cu_q, DT_I32, q->device, n + 1);
    OPS_EXPECT(op, "layout cu_q_padded", &layout->cu_q_padded, DT_I32, q->device, n + 1);
    OPS_EXPECT(op, "layout cu_kv", &layout->cu_kv, DT_I32, q->device, n + 1);
    OPS_EXPECT(op, "layout cu_kv_padded", &layout->cu_kv_padded, DT_I32, q->device, n + 1);
    if (q->device != DEV_CPU) return VFM_OK; /* offsets on the GPU are the kernel's to trust */
    VFM_TRY(check_side(op, "q", &layout->cu_q, &layout->cu_q_padded, n, q->shape[0], layout->max_q));
    VFM_TRY(check_side(op, "kv", &layout->cu_kv, &layout->cu_kv_padded, n, k->shape[0], layout->max_kv));
    return VFM_OK;
}

vfm_status op_attention_forward(Tensor *o, Tensor *lse, const Tensor *q, const Tensor *k, const Tensor *v,
                                const VarlenLayout *layout) {
    const char *op = "attention_forward";
    VFM_TRY(check_qkv(op, q, k, v));
    OPS_EXPECT(op, "o", o, q->dtype, q->device, q->shape[0], q->shape[1], q->shape[2]);
    OPS_EXPECT(op, "lse", lse, ops_f32_dtype(q), q->device, q->shape[0], q->shape[1]);
    VFM_TRY(check_layout(op, layout, q, k));
    OPS_DISPATCH_WITH_CUDA(attention_forward, q, o, lse, q, k, v, layout);
}

vfm_status op_attention_backward(Tensor *dq, Tensor *dk, Tensor *dv, const Tensor *dout, const Tensor *q,
                                 const Tensor *k, const Tensor *v, const Tensor *o, const Tensor *lse,
                                 const VarlenLayout *layout) {
    const char *op = "attention_backward";
    VFM_TRY(check_qkv(op, q, k, v));
    OPS_EXPECT(op, "dout", dout, q->dtype, q->device, q->shape[0], q->shape[1], q->shape[2]);
    OPS_EXPECT(op, "o", o, q->dtype, q->device, q->shape[0], q->shape[1], q->shape[2]);
    OPS_EXPECT(op, "lse", lse, ops_f32_dtype(q), q->device, q->shape[0], q->shape[1]);
    OPS_EXPECT(op, "dq", dq, q->dtype, q->device, q->shape[0], q->shape[1], q->shape[2]);
    OPS_EXPECT(op, "dk", dk, q->dtype, q->device, k->shape[0], k->shape[1], k->shape[2]);
    OPS_EXPECT(op, "dv", dv, q->dtype, q->device, k->shape[0], k->shape[1], k->shape[2]);
    VFM_TRY(check_layout(op, layout, q, k));
    OPS_DISPATCH_WITH_CUDA(attention_backward, q, dq, dk, dv, dout, q, k, v, o, lse, layout);
}

vfm_status op_attention_merge(Tensor *o, Tensor *lse, const Tensor *o_part, const Tensor *lse_part,
                              const VarlenLayout *layout) {
    const char *op = "attention_merge";
    VFM_TRY(ops_float_dtype(op, o));
    OPS_EXPECT(op, "o", o, o->dtype, o->device, -1, -1, -1);
    OPS_EXPECT(op, "o_part", o_part, o->dtype, o->device, o->shape[0], o->shape[1], o->shape[2]);
    OPS_EXPECT(op, "lse", lse, ops_f32_dtype(o), o->device, o->shape[0], o->shape[1]);
    OPS_EXPECT(op, "lse_part", lse_part, ops_f32_dtype(o), o->device, o->shape[0], o->shape[1]);
    if (!layout) return vfm_fail(VFM_ERR_SHAPE, "%s: layout is missing", op);
    int n = layout->n_samples;
    if (n < 0) return vfm_fail(VFM_ERR_SHAPE, "%s: layout n_samples = %d", op, n);
    OPS_EXPECT(op, "layout cu_q", &layout->cu_q, DT_I32, o->device, n + 1);
    OPS_EXPECT(op, "layout cu_q_padded", &layout->cu_q_padded, DT_I32, o->device, n + 1);
    if (o->device == DEV_CPU)
        VFM_TRY(check_side(op, "q", &layout->cu_q, &layout->cu_q_padded, n, o->shape[0], layout->max_q));
    OPS_DISPATCH_WITH_CUDA(attention_merge, o, o, lse, o_part, lse_part, layout);
}
