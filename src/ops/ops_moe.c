/* Dispatchers of the mixture-of-experts ops (ops.h "mixture of experts"): argument checks, then
 * the backend. The router's tensors (logits, probabilities, scores, gate weights and their
 * gradients) are [f32]; the token rows ACT. The grouped GEMM is the linear op per group over
 * views of the fixed-capacity slots and of the experts' stacked weight: no sizes are read back. */
#include "ops_check.h"

/* scores [S,E] float; tok2sample [S] i32 (rows -1 or >= 0). */
static vfm_status check_router(const char *op, const char *name, const Tensor *scores, const Tensor *tok2sample) {
    VFM_TRY(ops_float_arg(op, name, scores));
    OPS_EXPECT(op, name, scores, ops_f32_dtype(scores), scores->device, -1, -1);
    OPS_EXPECT(op, "tok2sample", tok2sample, DT_I32, scores->device, scores->shape[0]);
    return VFM_OK;
}

vfm_status op_moe_softmax(Tensor *probs, Tensor *lse, const Tensor *logits, const Tensor *tok2sample) {
    const char *op = "moe_softmax";
    VFM_TRY(check_router(op, "logits", logits, tok2sample));
    OPS_EXPECT(op, "probs", probs, logits->dtype, logits->device, logits->shape[0], logits->shape[1]);
    OPS_EXPECT(op, "lse", lse, logits->dtype, logits->device, logits->shape[0]);
    OPS_DISPATCH_WITH_CUDA(moe_softmax, logits, probs, lse, logits, tok2sample);
}

vfm_status op_moe_topk_mask(Tensor *masked, const Tensor *scores, const Tensor *tok2sample, int k) {
    const char *op = "moe_topk_mask";
    VFM_TRY(check_router(op, "scores", scores, tok2sample));
    OPS_EXPECT(op, "masked", masked, scores->dtype, scores->device, scores->shape[0], scores->shape[1]);
    if (k < 1 || k > scores->shape[1])
        return vfm_fail(VFM_ERR_SHAPE, "%s: k = %d is not in [1, %lld experts]", op, k, (long long)scores->shape[1]);
    OPS_DISPATCH_WITH_CUDA(moe_topk_mask, scores, masked, scores, tok2sample, k);
}

vfm_status op_moe_topc(Tensor *slot_tok, Tensor *slot_w, Tensor *tok_slot, const Tensor *scores, const Tensor *cu_tok,
                       const Tensor *cu_cap) {
    const char *op = "moe_topc";
    VFM_TRY(ops_float_arg(op, "scores", scores));
    Device dev = scores->device;
    OPS_EXPECT(op, "scores", scores, ops_f32_dtype(scores), dev, -1, -1);
    int64_t S = scores->shape[0], E = scores->shape[1];
    OPS_EXPECT(op, "cu_tok", cu_tok, DT_I32, dev, -1);
    OPS_EXPECT(op, "cu_cap", cu_cap, DT_I32, dev, cu_tok->shape[0]);
    OPS_EXPECT(op, "slot_tok", slot_tok, DT_I32, dev, E, -1);
    OPS_EXPECT(op, "slot_w", slot_w, scores->dtype, dev, E, slot_tok->shape[1]);
    OPS_EXPECT(op, "tok_slot", tok_slot, DT_I32, dev, S, E);
    if (cu_tok->shape[0] < 1) return vfm_fail(VFM_ERR_SHAPE, "%s: cu_tok needs B+1 >= 1 entries", op);
    if (dev == DEV_CPU) { /* the offsets the selection trusts (CUDA: the caller's, made on the host) */
        const int32_t *cu = cu_tok->data, *cc = cu_cap->data;
        int64_t B = cu_tok->shape[0] - 1;
        for (int64_t b = 0; b < B; b++)
            if (cu[b] < 0 || cu[b + 1] < cu[b] || cu[b + 1] > S || cc[b] < 0 || cc[b + 1] < cc[b] ||
                cc[b + 1] > slot_tok->shape[1])
                return vfm_fail(VFM_ERR_SHAPE, "%s: sample %lld: rows [%d, %d) of %lld or slots [%d, %d) of %lld", op,
                                (long long)b, cu[b], cu[b + 1], (long long)S, cc[b], cc[b + 1],
                                (long long)slot_tok->shape[1]);
    }
    OPS_DISPATCH_WITH_CUDA(moe_topc, scores, slot_tok, slot_w, tok_slot, scores, cu_tok, cu_cap);
}

vfm_status op_moe_permute(Tensor *xe, const Tensor *x, const Tensor *slot_tok) {
    const char *op = "moe_permute";
    VFM_TRY(ops_float_dtype(op, x));
    OPS_EXPECT(op, "x", x, x->dtype, x->device, -1, -1);
    OPS_EXPECT(op, "slot_tok", slot_tok, DT_I32, x->device, -1, -1);
    OPS_EXPECT(op, "xe", xe, x->dtype, x->device, tensor_numel(slot_tok), x->shape[1]);
    if (x->device == DEV_CPU) {
        const int32_t *st = slot_tok->data;
        for (int64_t s = 0; s < tensor_numel(slot_tok); s++)
            if (st[s] < -1 || st[s] >= x->shape[0])
                return vfm_fail(VFM_ERR_SHAPE, "%s: slot_tok[%lld] = %d is not -1 or a row below %lld", op,
                                (long long)s, st[s], (long long)x->shape[0]);
    }
    OPS_DISPATCH_WITH_CUDA(moe_permute, x, xe, x, slot_tok);
}

static vfm_status check_tok_slot(const char *op, const Tensor *tok_slot, int64_t S, int64_t slots, Device dev) {
    OPS_EXPECT(op, "tok_slot", tok_slot, DT_I32, dev, S, -1);
    if (dev != DEV_CPU) return VFM_OK;
    const int32_t *ts = tok_slot->data;
    for (int64_t i = 0; i < tensor_numel(tok_slot); i++)
        if (ts[i] < -1 || ts[i] >= slots)
            return vfm_fail(VFM_ERR_SHAPE, "%s: tok_slot[%lld] = %d is not -1 or a slot below %lld", op, (long long)i,
                            ts[i], (long long)slots);
    return VFM_OK;
}

/* A value per slot ([f32], any shape of ye's row count: [E·C] or [E, C]). */
static vfm_status check_slot_vector(const char *op, const char *arg, const Tensor *v, const Tensor *ye) {
    char got[128];
    if (!v || !v->data) return vfm_fail(VFM_ERR_SHAPE, "%s: argument %s is missing", op, arg);
    if (v->dtype != ops_f32_dtype(ye) || v->device != ye->device)
        return vfm_fail(VFM_ERR_SHAPE, "%s: %s is %s, expected %s on %s", op, arg, tensor_describe(v, got, sizeof got),
                        dtype_name(ops_f32_dtype(ye)), device_name(ye->device));
    if (tensor_numel(v) != ye->shape[0])
        return vfm_fail(VFM_ERR_SHAPE, "%s: %s has %lld values, ye %lld slots", op, arg, (long long)tensor_numel(v),
                        (long long)ye->shape[0]);
    return VFM_OK;
}

vfm_status op_moe_combine(Tensor *y, const Tensor *ye, const Tensor *w, const Tensor *tok_slot) {
    const char *op = "moe_combine";
    VFM_TRY(ops_float_dtype(op, ye));
    OPS_EXPECT(op, "ye", ye, ye->dtype, ye->device, -1, -1);
    OPS_EXPECT(op, "y", y, ye->dtype, ye->device, -1, ye->shape[1]);
    if (w) VFM_TRY(check_slot_vector(op, "w", w, ye));
    VFM_TRY(check_tok_slot(op, tok_slot, y->shape[0], ye->shape[0], ye->device));
    OPS_DISPATCH_WITH_CUDA(moe_combine, ye, y, ye, w, tok_slot);
}

vfm_status op_moe_combine_backward(Tensor *dye, Tensor *dw, const Tensor *dy, const Tensor *ye, const Tensor *w,
                                   const Tensor *slot_tok) {
    const char *op = "moe_combine_backward";
    VFM_TRY(ops_float_dtype(op, ye));
    OPS_EXPECT(op, "ye", ye, ye->dtype, ye->device, -1, -1);
    int64_t N = ye->shape[0], D = ye->shape[1];
    OPS_EXPECT(op, "dye", dye, ye->dtype, ye->device, N, D);
    OPS_EXPECT(op, "dy", dy, ye->dtype, ye->device, -1, D);
    VFM_TRY(check_slot_vector(op, "w", w, ye));
    VFM_TRY(check_slot_vector(op, "dw", dw, ye));
    OPS_EXPECT(op, "slot_tok", slot_tok, DT_I32, ye->device, -1, -1);
    if (tensor_numel(slot_tok) != N)
        return vfm_fail(VFM_ERR_SHAPE, "%s: slot_tok has %lld slots, ye %lld rows", op,
                        (long long)tensor_numel(slot_tok), (long long)N);
    OPS_DISPATCH_WITH_CUDA(moe_combine_backward, ye, dye, dw, dy, ye, w, slot_tok);
}

vfm_status op_moe_router_losses(Tensor *out, const Tensor *probs, const Tensor *lse, const Tensor *masked,
                                const Tensor *tok2sample, int k) {
    const char *op = "moe_router_losses";
    VFM_TRY(check_router(op, "probs", probs, tok2sample));
    OPS_EXPECT(op, "lse", lse, probs->dtype, probs->device, probs->shape[0]);
    OPS_EXPECT(op, "masked", masked, probs->dtype, probs->device, probs->shape[0], probs->shape[1]);
    OPS_EXPECT(op, "out", out, probs->dtype, probs->device, 2);
    if (k < 1) return vfm_fail(VFM_ERR_SHAPE, "%s: k = %d", op, k);
    OPS_DISPATCH_WITH_CUDA(moe_router_losses, probs, out, probs, lse, masked, tok2sample, k);
}

vfm_status op_moe_router_backward(Tensor *dlogits, const Tensor *dw, const Tensor *tok_slot, const Tensor *probs,
                                  const Tensor *lse, const Tensor *masked, const Tensor *tok2sample, int k, float aux,
                                  float z) {
    const char *op = "moe_router_backward";
    VFM_TRY(check_router(op, "probs", probs, tok2sample));
    int64_t S = probs->shape[0], E = probs->shape[1];
    OPS_EXPECT(op, "dlogits", dlogits, probs->dtype, probs->device, S, E);
    OPS_EXPECT(op, "lse", lse, probs->dtype, probs->device, S);
    OPS_EXPECT(op, "dw", dw, probs->dtype, probs->device, -1);
    VFM_TRY(check_tok_slot(op, tok_slot, S, dw->shape[0], probs->device));
    if (tok_slot->shape[1] != E) return vfm_fail(VFM_ERR_SHAPE, "%s: tok_slot has %lld experts, probs %lld", op,
                                                 (long long)tok_slot->shape[1], (long long)E);
    if (aux != 0) {
        if (!masked) return vfm_fail(VFM_ERR_SHAPE, "%s: the load-balancing term needs masked", op);
        OPS_EXPECT(op, "masked", masked, probs->dtype, probs->device, S, E);
    }
    if (k < 1) return vfm_fail(VFM_ERR_SHAPE, "%s: k = %d", op, k);
    OPS_DISPATCH_WITH_CUDA(moe_router_backward, probs, dlogits, dw, tok_slot, probs, lse, masked, tok2sample, k, aux, z);
}

/* Rows [g·n, (g+1)·n) of t [G·n, d] as a [n, d] view. */
static Tensor group_rows(const Tensor *t, int groups, int g) {
    int64_t n = t->shape[0] / groups, d = t->shape[1];
    return tensor_make((char *)t->data + (size_t)(g * n * d) * dtype_size(t->dtype), t->dtype, t->device, 2,
                       (int64_t[]){n, d});
}

static vfm_status check_grouped(const char *op, const Tensor *x, const Tensor *w, int groups) {
    OPS_EXPECT(op, "x", x, x->dtype, x->device, -1, -1);
    OPS_EXPECT(op, "w", w, w->dtype, x->device, -1, x->shape[1]);
    if (groups < 1 || x->shape[0] % groups || w->shape[0] % groups)
        return vfm_fail(VFM_ERR_SHAPE, "%s: %d groups do not divide x's %lld rows and w's %lld", op, groups,
                        (long long)x->shape[0], (long long)w->shape[0]);
    return VFM_OK;
}

vfm_status op_grouped_linear_forward(Tensor *y, Tensor *pre, const Tensor *x, const Tensor *w, int groups,
                                     Activation act) {
    const char *op = "grouped_linear_forward";
    VFM_TRY(check_grouped(op, x, w, groups));
    OPS_EXPECT(op, "y", y, y->dtype, x->device, x->shape[0], w->shape[0] / groups);
    if (pre) OPS_EXPECT(op, "pre", pre, pre->dtype, x->device, x->shape[0], w->shape[0] / groups);
    for (int g = 0; g < groups; g++) {
        Tensor yg = group_rows(y, groups, g), xg = group_rows(x, groups, g), wg = group_rows(w, groups, g), pg;
        if (pre) pg = group_rows(pre, groups, g);
        VFM_TRY(op_linear_forward(&yg, pre ? &pg : NULL, &xg, &wg, NULL, act));
    }
    return VFM_OK;
}

vfm_status op_grouped_linear_backward(Tensor *dx, Tensor *dw, Tensor *dy, const Tensor *x, const Tensor *w,
                                      const Tensor *pre, int groups, Activation act, int dx_accumulate) {
    const char *op = "grouped_linear_backward";
    VFM_TRY(check_grouped(op, x, w, groups));
    OPS_EXPECT(op, "dy", dy, dy->dtype, x->device, x->shape[0], w->shape[0] / groups);
    OPS_EXPECT(op, "dw", dw, dw->dtype, x->device, w->shape[0], w->shape[1]);
    if (dx) OPS_EXPECT(op, "dx", dx, dx->dtype, x->device, x->shape[0], x->shape[1]);
    if (pre) OPS_EXPECT(op, "pre", pre, pre->dtype, x->device, x->shape[0], w->shape[0] / groups);
    for (int g = 0; g < groups; g++) {
        Tensor dyg = group_rows(dy, groups, g), xg = group_rows(x, groups, g), wg = group_rows(w, groups, g);
        Tensor dwg = group_rows(dw, groups, g), dxg, pg;
        if (dx) dxg = group_rows(dx, groups, g);
        if (pre) pg = group_rows(pre, groups, g);
        VFM_TRY(op_linear_backward(dx ? &dxg : NULL, &dwg, NULL, &dyg, &xg, &wg, pre ? &pg : NULL, act, dx_accumulate));
    }
    return VFM_OK;
}
