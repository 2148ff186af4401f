/* The trainer's step under pipeline parallelism (see train_pipeline.h). */
#include "train_pipeline.h"

#include <stdlib.h>
#include <string.h>

#include "parallel/pp_exec.h"

vfm_status train_pipeline_check(int layers, int P, int V, int64_t M) {
    if (V > 1 && P == 1)
        return vfm_fail_at(VFM_ERR_USAGE, NULL, "model.virtual_pipeline_model_parallel_size", NULL,
                           "%d chunks per stage need model.pipeline_model_parallel_size > 1", V);
    if (P == 1) return VFM_OK;
    VFM_TRY(pp_check_layers(layers, P, V));
    if (M < 1 || M > 1 << 20) return VFM_OK; /* the trainer's own check names train.global_batch_size */
    PpSchedule s;
    memset(&s, 0, sizeof s);
    vfm_status st = pp_schedule_build(&s, P, (int)M, V, 0);
    pp_schedule_free(&s);
    return st;
}

vfm_status train_pack_fixed(Pack *dst, const Pack *src, int64_t rows) {
    if (rows > 0 && src->n_tokens > rows)
        return vfm_fail_at(VFM_ERR_USAGE, NULL, "train.fixed_pack_length", NULL,
                           "a pack of %lld rows is longer than the fixed length %lld (it must be at least the pack "
                           "budget, dataset.task_encoder_seq_length)", (long long)src->n_tokens, (long long)rows);
    if (rows > 0 && src->n_samples > 0 && (rows - src->n_tokens) % src->pad_multiple != 0)
        return vfm_fail_at(VFM_ERR_USAGE, NULL, "train.fixed_pack_length", NULL,
                           "%lld is not a multiple of the packs' padding multiple %d (lcm of dataset.pad_multiple "
                           "and TP·CP)", (long long)rows, src->pad_multiple);
    pack_free(dst);
    VFM_TRY(pack_copy(dst, src));
    return rows > 0 && src->n_samples > 0 ? pack_pad_to(dst, rows) : VFM_OK;
}

vfm_status train_pipeline_init(TrainPipeline *tp, DiT *m, const Objective *o, Comm *pp, int P, int V, int M, int stage) {
    memset(tp, 0, sizeof *tp);
    tp->model = m, tp->objective = o, tp->pp = P > 1 ? pp : NULL;
    tp->P = P, tp->V = V > 1 ? V : 1, tp->M = M, tp->stage = stage;
    tp->micro = calloc((size_t)M, sizeof *tp->micro);
    if (!tp->micro) return vfm_fail(VFM_ERR_NOMEM, "pipeline: %d micro-batches", M);
    if (P == 1) return VFM_OK;
    VFM_TRY(pp_schedule_build(&tp->sched, P, M, tp->V, stage));
    VFM_TRY(pp_schedule_forward_only(&tp->fwd_sched, P, M, tp->V, stage));
    tp->n_slots = pp_schedule_in_flight(&tp->sched);
    tp->slots = calloc((size_t)tp->n_slots, sizeof *tp->slots);
    tp->free_slots = malloc((size_t)tp->n_slots * sizeof(int));
    tp->slot_of = malloc((size_t)M * tp->V * sizeof(int));
    if (!tp->slots || !tp->free_slots || !tp->slot_of) return vfm_fail(VFM_ERR_NOMEM, "pipeline: slot tables");
    for (int i = 0; i < tp->n_slots; i++) {
        VFM_TRY(dit_saved_create(m, &tp->slots[i]));
        tp->free_slots[tp->n_free++] = i;
    }
    return VFM_OK;
}

void train_pipeline_free(TrainPipeline *tp) {
    for (int k = 0; tp->micro && k < tp->M; k++) {
        objective_pass_end(tp->micro[k].pass);
        pack_free(&tp->micro[k].pack);
        objective_work_free(&tp->micro[k].work);
    }
    for (int i = 0; tp->slots && i < tp->n_slots; i++)
        if (tp->slots[i]) dit_saved_destroy(tp->model, tp->slots[i]);
    pp_schedule_free(&tp->sched);
    pp_schedule_free(&tp->fwd_sched);
    free(tp->micro), free(tp->slots), free(tp->free_slots), free(tp->slot_of);
    memset(tp, 0, sizeof *tp);
}

static int last_chunk(const TrainPipeline *tp, int chunk) { return tp->stage == tp->P - 1 && chunk == tp->V - 1; }

/* this rank's hidden rows of pack mb in a runner buffer */
static vfm_status hidden(const TrainPipeline *tp, int mb, const void *buf, Tensor *t) {
    int64_t rows = 0;
    VFM_TRY(dit_hidden_rows(tp->model, objective_pass_inputs(tp->micro[mb].pass), &rows));
    *t = TENSOR((void *)buf, tp->model->act_dtype, tp->model->device, rows, tp->model->cfg.hidden);
    return VFM_OK;
}

static vfm_status stage_forward(void *ctx, int mb, int chunk, const void *x, void *y) {
    TrainPipeline *tp = ctx;
    DiT *m = tp->model;
    PpMicro *u = &tp->micro[mb];
    if (tp->n_free == 0) return vfm_fail(VFM_ERR_INTERNAL, "pipeline: no free activation slot (micro-batch %d)", mb);
    int slot = tp->free_slots[--tp->n_free], b0, b1;
    tp->slot_of[mb * tp->V + chunk] = slot;
    dit_chunk_blocks(m, chunk, &b0, &b1);
    Tensor tx, ty;
    if (x) VFM_TRY(hidden(tp, mb, x, &tx));
    if (y) VFM_TRY(hidden(tp, mb, y, &ty));
    const DiTInputs *in = objective_pass_inputs(u->pass);
    VFM_TRY(dit_chunk_forward(m, tp->slots[slot], in, b0, b1, x ? &tx : NULL, y ? &ty : NULL,
                              y ? NULL : objective_pass_output(u->pass)));
    if (tp->forward_only) tp->free_slots[tp->n_free++] = slot; /* no backward will read it */
    if (!last_chunk(tp, chunk)) return VFM_OK;
    /* the last chunk: the loss of the pack and the gradient its backward starts from */
    ObjectiveResult r;
    memset(&r, 0, sizeof r);
    VFM_TRY(objective_pass_loss(u->pass, tp->grad_scale, &r));
    tp->loss_sum += r.loss;
    return VFM_OK;
}

static vfm_status stage_backward(void *ctx, int mb, int chunk, const void *dy, void *dx) {
    TrainPipeline *tp = ctx;
    DiT *m = tp->model;
    PpMicro *u = &tp->micro[mb];
    int slot = tp->slot_of[mb * tp->V + chunk], b0, b1;
    dit_chunk_blocks(m, chunk, &b0, &b1);
    Tensor tdy, tdx;
    if (dy) VFM_TRY(hidden(tp, mb, dy, &tdy));
    if (dx) VFM_TRY(hidden(tp, mb, dx, &tdx));
    m->loss_grad_scale = tp->grad_scale;
    VFM_TRY(dit_chunk_backward(m, tp->slots[slot], objective_pass_inputs(u->pass), b0, b1, dy ? &tdy : NULL,
                               dx ? &tdx : NULL, dy ? NULL : objective_pass_output_grad(u->pass)));
    tp->free_slots[tp->n_free++] = slot;
    return VFM_OK;
}

/* The schedule over the prepared micro-batches; the last stage's Σ pack losses into *loss_sum. */
static vfm_status run(TrainPipeline *tp, int forward_only, double *loss_sum) {
    int64_t rows = 0; /* the most rows any pack places on this rank (the same on every stage of the replica) */
    for (int k = 0; k < tp->M; k++) {
        int64_t r;
        VFM_TRY(dit_hidden_rows(tp->model, objective_pass_inputs(tp->micro[k].pass), &r));
        if (r > rows) rows = r;
    }
    tp->loss_sum = 0;
    tp->grad_scale = forward_only ? 0.0 : 1.0 / (double)tp->M;
    tp->forward_only = forward_only;
    PpStage st = {tp, stage_forward, forward_only ? NULL : stage_backward};
    vfm_status s = pp_run(forward_only ? &tp->fwd_sched : &tp->sched, tp->pp, &st, rows * tp->model->cfg.hidden,
                          tp->model->act_dtype, tp->model->device, NULL);
    tp->forward_only = 0;
    VFM_TRY(s);
    *loss_sum = tp->loss_sum;
    return VFM_OK;
}

vfm_status train_pipeline_run(TrainPipeline *tp, double *loss_sum) { return run(tp, 0, loss_sum); }

vfm_status train_pipeline_eval(TrainPipeline *tp, double *loss_sum) { return run(tp, 1, loss_sum); }

vfm_status train_pipeline_model_forward(void *ctx, DiT *m, const DiTInputs *in, Tensor *out) {
    TrainPipeline *tp = ctx;
    int P = tp->P, p = tp->stage;
    int64_t rows;
    VFM_TRY(dit_hidden_rows(m, in, &rows));
    size_t bytes = (size_t)(rows * m->cfg.hidden) * dtype_size(m->act_dtype);
    size_t out_bytes = (size_t)tensor_numel(out) * dtype_size(out->dtype);
    int staged = out->device != m->device; /* the comms move the model's device memory */
    void *buf[2] = {NULL, NULL}, *ob = NULL;
    vfm_status s = device_malloc(m->device, bytes ? bytes : 1, &buf[0]);
    if (s == VFM_OK) s = device_malloc(m->device, bytes ? bytes : 1, &buf[1]);
    if (s == VFM_OK && staged) s = device_malloc(m->device, out_bytes ? out_bytes : 1, &ob);
    for (int v = 0; v < tp->V && s == VFM_OK; v++) {
        int g = v * P + p, first = g == 0, last = g == P * tp->V - 1, b0, b1;
        dit_chunk_blocks(m, v, &b0, &b1);
        Tensor x = TENSOR(buf[0], m->act_dtype, m->device, rows, m->cfg.hidden);
        Tensor y = TENSOR(buf[1], m->act_dtype, m->device, rows, m->cfg.hidden);
        if (!first) s = comm_recv(tp->pp, buf[0], rows * m->cfg.hidden, m->act_dtype, (p + P - 1) % P);
        if (s == VFM_OK) s = dit_chunk_forward(m, NULL, in, b0, b1, first ? NULL : &x, last ? NULL : &y, last ? out : NULL);
        if (s == VFM_OK && !last) s = comm_send(tp->pp, buf[1], rows * m->cfg.hidden, m->act_dtype, (p + 1) % P);
    }
    if (s == VFM_OK && staged && p == P - 1) s = device_memcpy(ob, m->device, out->data, out->device, out_bytes);
    if (s == VFM_OK) s = comm_broadcast(tp->pp, staged ? ob : out->data, tensor_numel(out), out->dtype, P - 1);
    if (s == VFM_OK && staged) s = device_memcpy(out->data, out->device, ob, m->device, out_bytes);
    device_free(m->device, buf[0]);
    device_free(m->device, buf[1]);
    device_free(m->device, ob);
    return s;
}
