/* What a training run holds, by part (train_memory.h): the sizes of the buffers as they were
 * allocated (dit_create_parallel, fsdp_init, optimizer_init_on, the trainer's EMA), and the arenas'
 * high-water marks. */
#include "train_memory.h"

#include <string.h>

void train_memory_held(const DiT *m, const Fsdp *f, const Optimizer *o, int64_t ema_elems, size_t slots_peak,
                       TrainMemory *out) {
    memset(out, 0, sizeof *out);
    const int64_t w = (int64_t)sizeof(float);
    if (m->params) out->params += m->table.total * w;
    if (m->wcopy) out->params += m->table.total * (int64_t)dtype_size(m->act_dtype);
    out->params += (int64_t)dit_fsdp_wcopy_bytes(m); /* ZeRO-2/3's bf16 units (whole ones between steps) */
    if (m->grads) out->grads += m->table.total * w;
    if (f) {
        if (f->params) out->params += f->table->total * w;
        if (f->param_slots) out->params += f->lay.slots * w;
        for (int u = 0; u < f->lay.n_units; u++) /* ZeRO-3's whole units (between steps no block unit is gathered) */
            if (!f->params && f->owned[u] && f->unit_params[u]) out->params += f->lay.units[u].shard * f->n * w;
        if (f->grad_slots) out->grads += f->lay.slots * w;
        if (f->flat_grads) out->grads += (f->dp.own_end - f->dp.own_begin) * w;
        if (!f->params && f->master) out->optimizer += (f->dp.own_end - f->dp.own_begin) * w;
    }
    if (o->m) out->optimizer += (o->end - o->begin) * w;
    if (o->v) out->optimizer += (o->end - o->begin) * w;
    out->ema = ema_elems * w;
    out->activations = (int64_t)(dit_activation_peak(m) + slots_peak);
}
