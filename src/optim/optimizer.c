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
    if (c->decay_style == LR_DECAY_WSD) {
        int64_t anneal_start = c->decay_iters - c->wsd_decay_iters;
        double r = step <= anneal_start ? 0.0 : (double)(step - anneal_start) / (double)c->wsd_decay_iters;
        coeff = c->wsd_style == WSD_LINEAR ? 1.0 - r
                : c->wsd_style == WSD_COSINE ? 0.5 * (cos(M_PI * r) + 1.0)
                : c->wsd_style == WSD_MINUS_SQRT ? 1.0 - sqrt(r)
                : 2.0 * pow(0.5, r) - 1.0;
    }
    return c->min_lr + coeff * (c->lr - c->min_lr);
}

vfm_status optimizer_init_range(Optimizer *o, const OptimConfig *c, const ParamTable *t, int64_t begin, int64_t end) {
    memset(o, 0, sizeof *o);
    o->cfg = *c;
    o->table = t;
    o->begin = begin;
    o->end = end;
    size_t n = (size_t)(end - begin) + 1; /* + 1: an empty shard still gets a valid pointer */
    o->m = calloc(n, sizeof(float));
    o->v = calloc(n, sizeof(float));
    if (!o->m || !o->v) {
        optimizer_free(o);
        return vfm_fail(VFM_ERR_NOMEM, "optimizer: Adam moments for %lld parameters", (long long)(end - begin));
    }
    return VFM_OK;
}

vfm_status optimizer_init(Optimizer *o, const OptimConfig *c, const ParamTable *t) {
    return optimizer_init_range(o, c, t, 0, t->total);
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
    /* each entry's piece inside [begin, end), with that entry's weight-decay flag */
    for (int i = 0; i < t->count; i++) {
        const ParamEntry *e = &t->entries[i];
        int64_t a = e->offset > o->begin ? e->offset : o->begin;
        int64_t b = e->offset + e->numel < o->end ? e->offset + e->numel : o->end;
        if (!e->trainable || a >= b) continue;
        Tensor p = TF32(params + a, b - a), g = TF32((float *)grads + a, b - a);
        Tensor m = TF32(o->m + (a - o->begin), b - a), v = TF32(o->v + (a - o->begin), b - a);
        h.weight_decay = e->weight_decay ? (float)o->cfg.weight_decay : 0.0f;
        VFM_TRY(op_adamw_step(&p, &m, &v, &g, &h));
    }
    o->step++;
    return VFM_OK;
}
