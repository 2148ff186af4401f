/* AdamW, clipping and the learning-rate schedule (see optimizer.h). */
#include "optimizer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops.h"

double lr_at_step(const OptimConfig *c, int64_t step) {
    if (c->warmup_iters > 0 && step <= c->warmup_iters)
        return c->warmup_init + (c->lr - c->warmup_init) * (double)step / (double)c->warmup_iters;
    if (c->decay_style == LR_DECAY_CONSTANT) return c->lr;
    if (step > c->decay_iters) return c->min_lr;
    double span = (double)(c->decay_iters - c->warmup_iters);
    double ratio = span > 0 ? (double)(step - c->warmup_iters) / span : 1.0;
    double coeff = c->decay_style == LR_DECAY_COSINE ? 0.5 * (cos(M_PI * ratio) + 1.0) : 1.0 - ratio;
    return c->min_lr + coeff * (c->lr - c->min_lr);
}

vfm_status optimizer_init(Optimizer *o, const OptimConfig *c, const ParamTable *t) {
    memset(o, 0, sizeof *o);
    o->cfg = *c;
    o->table = t;
    o->m = calloc((size_t)t->total, sizeof(float));
    o->v = calloc((size_t)t->total, sizeof(float));
    if (!o->m || !o->v) {
        optimizer_free(o);
        return vfm_fail(VFM_ERR_NOMEM, "optimizer: Adam moments for %lld parameters", (long long)t->total);
    }
    return VFM_OK;
}

void optimizer_free(Optimizer *o) {
    free(o->m);
    free(o->v);
    o->m = o->v = NULL;
}

vfm_status grad_global_norm(const float *grads, int64_t n, double *norm) {
    Tensor g = TF32((float *)grads, n);
    double sum = 0;
    VFM_TRY(op_sum_squares(&sum, &g));
    *norm = sqrt(sum);
    return VFM_OK;
}

double clip_scale(const OptimConfig *c, double norm) {
    if (c->clip_grad <= 0) return 1.0;
    double coeff = c->clip_grad / (norm + 1e-6);
    return coeff < 1.0 ? coeff : 1.0;
}

vfm_status optimizer_step(Optimizer *o, float *params, const float *grads, double lr, double grad_scale) {
    const ParamTable *t = o->table;
    AdamWHyper h = {(float)lr, (float)o->cfg.beta1, (float)o->cfg.beta2, (float)o->cfg.eps, 0.0f,
                    (int)(o->step + 1), (float)grad_scale};
    for (int i = 0; i < t->count; i++) {
        const ParamEntry *e = &t->entries[i];
        if (!e->trainable) continue;
        Tensor p = param_view(t, i, params, DT_F32, DEV_CPU), g = param_view(t, i, (void *)grads, DT_F32, DEV_CPU);
        Tensor m = param_view(t, i, o->m, DT_F32, DEV_CPU), v = param_view(t, i, o->v, DT_F32, DEV_CPU);
        h.weight_decay = e->weight_decay ? (float)o->cfg.weight_decay : 0.0f;
        VFM_TRY(op_adamw_step(&p, &m, &v, &g, &h));
    }
    o->step++;
    return VFM_OK;
}
