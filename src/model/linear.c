/* The linear layer: its table entries, its views of the weights and gradients, forward and
 * backward over the op API, its TP rows and FLOPs (layer.h). */
#include "model/dit_internal.h"

LinearSpec linear_torch_default(int64_t fan_in, unsigned groups) {
    return (LinearSpec){INIT_UNIFORM_FANIN, (float)fan_in, 1, INIT_UNIFORM_FANIN, (float)fan_in, groups, -1};
}

LinearSpec linear_zeros(int bias, unsigned groups) { return (LinearSpec){INIT_ZERO, 0, bias, INIT_ZERO, 0, groups, -1}; }

LinearSpec linear_normal(float std, int bias) { return (LinearSpec){INIT_NORMAL, std, bias, INIT_ZERO, 0, 0, -1}; }

LinearSpec linear_xavier(int bias) { return (LinearSpec){INIT_XAVIER_UNIFORM, 0, bias, INIT_ZERO, 0, 0, -1}; }

Linear linear_add(ParamTable *t, const char *name, int64_t out, int64_t in, LinearSpec s) {
    int64_t wshape[2] = {out, in}, bshape[1] = {out};
    Linear l = {-1, -1, 0, out};
    l.w = param_table_add(t, s.w_init, s.w_scale, 2, wshape, s.groups, s.tp_dim, "%s.weight", name);
    unsigned bias_groups = s.groups | (s.tp_dim == 1 ? REDUCE_TP_HEADS : 0);
    if (s.bias)
        l.b = param_table_add(t, s.b_init, s.b_scale, 1, bshape, bias_groups, s.tp_dim == 0 ? 0 : -1, "%s.bias", name);
    return l;
}

Linear linear_rows(Linear l, int64_t row0, int64_t out) {
    l.row0 = row0;
    l.out = out;
    return l;
}

int vector_add(ParamTable *t, ParamInit init, int64_t n, unsigned groups, const char *name) {
    int64_t shape[1] = {n};
    return param_table_add(t, init, 0, 1, shape, groups, -1, "%s", name);
}

void visit_linear(const HandleVisitor *v, Linear *l) {
    if (l->w >= 0 && v->linear) v->linear(v->ctx, l);
}

void visit_entry(const HandleVisitor *v, int *e) {
    if (*e >= 0 && v->entry) v->entry(v->ctx, e);
}

/* ---- views ------------------------------------------------------------------------------------- */

/* Weights and gradients are read through dit_weight_ptr / dit_grad_ptr (weights.c): the model's
 * own buffers, or under ZeRO-2/3 its FSDP units. grad = 1: the fp32 gradient instead. */
static Tensor entry_rows(const DiT *m, int id, int64_t at, int grad, int ndim, const int64_t *shape) {
    DType dt = DT_F32;
    void *p = grad ? (void *)dit_grad_ptr(m, id, at) : dit_weight_ptr(m, id, at, &dt);
    return tensor_make(p, dt, m->device, ndim, shape);
}

Tensor layer_param(const DiT *m, int id) {
    const ParamEntry *e = &m->table.entries[id];
    return entry_rows(m, id, 0, 0, e->ndim, e->shape);
}

Tensor layer_grad(const DiT *m, int id) {
    const ParamEntry *e = &m->table.entries[id];
    return entry_rows(m, id, 0, 1, e->ndim, e->shape);
}

/* Rows [row0, row0 + out) of a linear's weight (any entry rank, viewed [rows, numel/rows]). */
static Tensor weight_rows(const DiT *m, const Linear *l, int grad) {
    const ParamEntry *e = &m->table.entries[l->w];
    int64_t in = e->numel / e->shape[0];
    return entry_rows(m, l->w, l->row0 * in, grad, 2, (int64_t[]){l->out, in});
}

static Tensor bias_rows(const DiT *m, const Linear *l, int grad) {
    return entry_rows(m, l->b, l->row0, grad, 1, (int64_t[]){l->out});
}

/* A row-parallel layer's (replicated) bias is added by TP rank 0 only, so the sum that closes the
 * region counts it once; its gradient lives on rank 0 and is summed over TP (REDUCE_TP_HEADS). */
static int bias_here(const DiT *m, const Linear *l) {
    if (l->b < 0) return 0;
    return !(m->par.tp > 1 && m->table.entries[l->w].tp_split_dim == 1 && m->par.tp_rank != 0);
}

/* ---- forward and backward ---------------------------------------------------------------------- */

vfm_status linear_forward(const DiT *m, Tensor *y, Tensor *pre, const Tensor *x, const Linear *l, Activation act) {
    Tensor w = weight_rows(m, l, 0), b;
    int with_bias = bias_here(m, l);
    if (with_bias) b = bias_rows(m, l, 0);
    return op_linear_forward(y, pre, x, &w, with_bias ? &b : NULL, act);
}

vfm_status linear_backward(const DiT *m, Tensor *dx, int accumulate, Tensor *dy, const Tensor *x, const Linear *l,
                           const Tensor *pre, Activation act) {
    Tensor w = weight_rows(m, l, 0), dw = weight_rows(m, l, 1), db;
    int with_bias = bias_here(m, l);
    if (with_bias) db = bias_rows(m, l, 1);
    return op_linear_backward(dx, &dw, with_bias ? &db : NULL, dy, x, &w, pre, act, accumulate);
}

/* ---- layout and cost ----------------------------------------------------------------------------- */

void linear_localize(const DiT *m, Linear *l) {
    if (l->w < 0 || m->table.entries[l->w].tp_split_dim != 0) return;
    l->out /= m->par.tp; /* a fused qkv's local weight is [q_t; k_t; v_t] (tp_shard.h) */
    l->row0 /= m->par.tp;
}

double linear_flops(const DiT *m, const Linear *l, double rows) {
    if (l->w < 0) return 0;
    const ParamEntry *e = &m->table.entries[l->w];
    return 2 * rows * (double)(e->numel / e->shape[0]) * (double)l->out;
}
