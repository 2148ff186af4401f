/* Grow-only working memory of the objectives and the carving of tensors (objective_work.h). */
#include "diffusion/objective_work.h"

#include <stdlib.h>
#include <string.h>

vfm_status objective_work_slot(ObjectiveWork *w, Device dev, ObjectiveWorkSlot slot, size_t bytes, void **out) {
    if (w->device != dev) { /* another device: nothing kept is usable */
        for (int i = 0; i < OW_SLOTS; i++) {
            if (w->slot[i]) device_free(w->device, w->slot[i]);
            w->slot[i] = NULL;
            w->bytes[i] = 0;
        }
        w->device = dev;
    }
    if (bytes > w->bytes[slot] || !w->slot[slot]) {
        if (w->slot[slot]) {
            VFM_TRY(device_synchronize(dev)); /* queued kernels may still read it */
            device_free(dev, w->slot[slot]);
        }
        w->slot[slot] = NULL;
        w->bytes[slot] = 0;
        VFM_TRY(device_malloc(dev, bytes ? bytes : 1, &w->slot[slot]));
        w->bytes[slot] = bytes;
    }
    *out = w->slot[slot];
    return VFM_OK;
}

vfm_status objective_work_host(ObjectiveWork *w, size_t bytes, void **out) {
    if (bytes > w->host_bytes || !w->host) {
        void *q = realloc(w->host, bytes ? bytes : 1);
        if (!q) return vfm_fail(VFM_ERR_NOMEM, "objective: %zu bytes of host memory", bytes);
        w->host = q;
        w->host_bytes = bytes;
    }
    *out = w->host;
    return VFM_OK;
}

void objective_work_free(ObjectiveWork *w) {
    if (w->device == DEV_CUDA) device_synchronize(DEV_CUDA);
    for (int i = 0; i < OW_SLOTS; i++)
        if (w->slot[i]) device_free(w->device, w->slot[i]);
    pack_tensors_free(&w->pack);
    free(w->host);
    memset(w, 0, sizeof *w);
}

Tensor carve(Carver *c, DType dt, int ndim, const int64_t *shape) {
    Tensor t = tensor_make(c->base ? c->base + c->at : NULL, dt, c->device, ndim, shape);
    c->at += (tensor_bytes(&t) + 255) / 256 * 256;
    return t;
}

vfm_status carve_slot(ObjectiveWork *w, Device dev, ObjectiveWorkSlot slot, void (*layout)(Carver *c, void *ctx),
                      void *ctx) {
    Carver c = {NULL, 0, dev};
    layout(&c, ctx);
    void *base;
    VFM_TRY(objective_work_slot(w, dev, slot, c.at, &base));
    c = (Carver){base, 0, dev};
    layout(&c, ctx);
    return VFM_OK;
}
