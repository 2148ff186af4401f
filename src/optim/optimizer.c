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

vfm_status optimizer_init_on(Optimizer *o, const OptimConfig *c, const ParamTable *t, int64_t begin, int64_t end,
                             Device device) {
    memset(o, 0, sizeof *o);
    o->cfg = *c;
    o->table = t;
    o->begin = begin;
    o->end = end;
    o->device = device;
    size_t bytes = ((size_t)(end - begin) + 1) * sizeof(float); /* + 1: an empty shard still gets a valid pointer */
    vfm_status s = device_malloc(device, bytes, (void **)&o->m);
    if (s == VFM_OK) s = device_malloc(device, bytes, (void **)&o->v);
    if (s == VFM_OK) s = device_memset0(device, o->m, bytes);
    if (s == VFM_OK) s = device_memset0(device, o->v, bytes);
    if (s != VFM_OK) {
        optimizer_free(o);
        return vfm_fail_context(s, "optimizer: Adam moments for %lld parameters on %s", (long long)(end - begin),
                                device_name(device));
    }
    return VFM_OK;
}

vfm_status optimizer_init_range(Optimizer *o, const OptimConfig *c, const ParamTable *t, int64_t begin, int64_t end) {
    return optimizer_init_on(o, c, t, begin, end, DEV_CPU);
}

vfm_status optimizer_init(Optimizer *o, const OptimConfig *c, const ParamTable *t) {
    return optimizer_init_range(o, c, t, 0, t->total);
}

void optimizer_free(Optimizer *o) {
    device_free(o->device, o->m);
    device_free(o->device, o->v);
    o->m = o->v = NULL;
}

vfm_status optimizer_host_copy(const Optimizer *o, Optimizer *host) {
    VFM_TRY(optimizer_init_on(host, &o->cfg, o->table, o->begin, o->end, DEV_CPU));
    host->step = o->step;
    size_t bytes = (size_t)(o->end - o->begin) * sizeof(float);
    vfm_status s = device_memcpy(host->m, DEV_CPU, o->m, o->device, bytes);
    if (s == VFM_OK) s = device_memcpy(host->v, DEV_CPU, o->v, o->device, bytes);
    if (s != VFM_OK) optimizer_free(host);
    return s;
}

vfm_status optimizer_copy_from_host(Optimizer *o, const Optimizer *host) {
    if (host->begin != o->begin || host->end != o->end)
        return vfm_fail(VFM_ERR_INTERNAL, "optimizer: moments of [%lld, %lld) into [%lld, %lld)", (long long)host->begin,
                        (long long)host->end, (long long)o->begin, (long long)o->end);
    size_t bytes = (size_t)(o->end - o->begin) * sizeof(float);
    VFM_TRY(device_memcpy(o->m, o->device, host->m, DEV_CPU, bytes));
    VFM_TRY(device_memcpy(o->v, o->device, host->v, DEV_CPU, bytes));
    o->step = host->step;
    return VFM_OK;
}

vfm_status grad_global_norm_on(Device device, const float *grads, int64_t n, double *norm) {
    Tensor g = TENSOR((float *)grads, DT_F32, device, n);
    double sum = 0;
    VFM_TRY(op_sum_squares(&sum, &g));
    *norm = sqrt(sum);
    return VFM_OK;
}

vfm_status grad_global_norm(const float *grads, int64_t n, double *norm) {
    return grad_global_norm_on(DEV_CPU, grads, n, norm);
}

double clip_scale(const OptimConfig *c, double norm) {
    if (c->clip_grad <= 0) return 1.0;
    double coeff = c->clip_grad / (norm + 1e-6);
    return coeff < 1.0 ? coeff : 1.0;
}

vfm_status optimizer_step(Optimizer *o, float *params, const float *grads, double lr, double grad_scale) {
    return optimizer_step_range(o, params + o->begin, grads + o->begin, lr, grad_scale);
}

vfm_status optimizer_step_range(Optimizer *o, float *params, const float *grads, double lr, double grad_scale) {
    const ParamTable *t = o->table;
    AdamWHyper h = {(float)lr, (float)o->cfg.beta1, (float)o->cfg.beta2, (float)o->cfg.eps, 0.0f,
                    (int)(o->step + 1), (float)grad_scale, o->gate};
    /* each run of adjacent trainable entries with the same weight-decay flag, inside [begin, end):
     * one update per run (elementwise, so the bits do not depend on how runs are cut; on the GPU a
     * few launches instead of one per entry) */
    for (int i = 0; i < t->count;) {
        const ParamEntry *e = &t->entries[i];
        int j = i + 1;
        while (j < t->count && t->entries[j].trainable == e->trainable && t->entries[j].weight_decay == e->weight_decay &&
               t->entries[j].offset == t->entries[j - 1].offset + t->entries[j - 1].numel)
            j++;
        const ParamEntry *last = &t->entries[j - 1];
        int64_t a = e->offset > o->begin ? e->offset : o->begin;
        int64_t b = last->offset + last->numel < o->end ? last->offset + last->numel : o->end;
        i = j;
        if (!e->trainable || a >= b) continue;
        Tensor p = TENSOR(params + (a - o->begin), DT_F32, o->device, b - a);
        Tensor g = TENSOR((float *)grads + (a - o->begin), DT_F32, o->device, b - a);
        Tensor m = TENSOR(o->m + (a - o->begin), DT_F32, o->device, b - a);
        Tensor v = TENSOR(o->v + (a - o->begin), DT_F32, o->device, b - a);
        h.weight_decay = e->weight_decay ? (float)o->cfg.weight_decay : 0.0f;
        VFM_TRY(op_adamw_step(&p, &m, &v, &g, &h));
    }
    if (!o->gate) o->step++; /* gated: the count is the state's STEP_ADAM_T (read with the counters) */
    return VFM_OK;
}
