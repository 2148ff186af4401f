/* Where a pack's rows live on one rank of a TP/SP/CP layout (dit.h "DiTParallel"): the layout
 * checks, the placement of the caller's whole pack (re-padded when its slots do not divide, this CP
 * rank's chunk of every sample, this TP rank's block of rows under SP), the gathers that give every
 * rank the whole output, the scatter of its gradient, and the self-attention through CP. */
#include <stdlib.h>
#include <string.h>

#include "model/dit_internal.h"
#include "parallel/tp.h"

vfm_status dit_check_parallel(const DiTConfig *c, int tp, int sequence_parallel, int cp, CpCommType cp_type,
                              int a2a_size) {
    (void)sequence_parallel;
    if (tp < 1 || cp < 1)
        return vfm_fail(VFM_ERR_USAGE, "model.tensor_model_parallel_size (%d) and model.context_parallel_size (%d) "
                        "must be at least 1", tp, cp);
    if (c->moe.experts > 0 && c->moe.ffn % tp != 0)
        return vfm_fail(VFM_ERR_USAGE, "model.moe_ffn_hidden_size (%lld) is not a multiple of "
                        "model.tensor_model_parallel_size (%d): tensor parallelism splits every expert's MLP",
                        (long long)c->moe.ffn, tp);
    if (c->moe.experts > 0 && c->f.factorised && cp > 1)
        return vfm_fail(VFM_ERR_USAGE, "model.num_moe_experts (%d) with model.context_parallel_size (%d): ST-DiT's "
                        "rows under CP are not in the chunk layout the MoE router gathers (docs/models.md)",
                        c->moe.experts, cp);
    if (c->heads % tp != 0)
        return vfm_fail(VFM_ERR_USAGE, "model.num_attention_heads (%d) is not a multiple of "
                        "model.tensor_model_parallel_size (%d): tensor parallelism splits the heads", c->heads, tp);
    if (c->kv_heads % tp != 0)
        return vfm_fail(VFM_ERR_USAGE, "model.num_query_groups (%d) is not a multiple of "
                        "model.tensor_model_parallel_size (%d): kv heads split over TP like the query heads (they are "
                        "never replicated); use a TP size that divides them, or context parallelism",
                        c->kv_heads, tp);
    if (c->ffn % tp != 0)
        return vfm_fail(VFM_ERR_USAGE, "model.ffn_hidden_size (%d) is not a multiple of "
                        "model.tensor_model_parallel_size (%d): tensor parallelism splits the MLP", c->ffn, tp);
    if (cp > 1) VFM_TRY(cp_check_config(cp_type, cp, a2a_size, c->heads / tp, c->kv_heads / tp));
    return VFM_OK;
}

TpContext dit_tp_context(const DiT *m) {
    TpContext c = {m->par.tp > 1 ? m->par.tp_comm : NULL, m->par.sequence_parallel && m->par.tp > 1};
    return c;
}

static int sp_on(const DiT *m) { return m->par.sequence_parallel && m->par.tp > 1; }

/* Rows of a sample slot: the CP·TP multiple (SP) or the CP one. */
static int slot_multiple(const DiT *m) { return m->par.cp * (sp_on(m) ? m->par.tp : 1); }

static int is_identity(const DiT *m) { return m->par.cp == 1 && !sp_on(m); }

void dit_place_free(Placement *pl) {
    free(pl->cu_real), free(pl->cu_in_pad), free(pl->cu_pad), free(pl->t2s_host);
    if (pl->have_chunks) cp_chunks_free(&pl->ch);
    if (pl->have_st) st_layout_free(&pl->st);
    memset(pl, 0, sizeof *pl);
}

void dit_place_bounds(const DiT *m, int64_t max_tokens, int max_samples, Placement *pl) {
    memset(pl, 0, sizeof *pl);
    int mult = slot_multiple(m);
    pl->identity = is_identity(m);
    pl->repacked = !pl->identity;
    int64_t S = max_tokens + (pl->identity ? 0 : (int64_t)max_samples * (mult - 1));
    S = (S + mult - 1) / mult * mult;
    pl->S_in = max_tokens, pl->S = S, pl->R = S / m->par.cp, pl->Rl = sp_on(m) ? pl->R / m->par.tp : pl->R;
}

void dit_place_packed(const DiT *m, int64_t rows, Placement *pl) {
    memset(pl, 0, sizeof *pl);
    int mult = slot_multiple(m);
    pl->identity = is_identity(m);
    pl->S_in = pl->S = (rows + mult - 1) / mult * mult; /* the encoder pads every slot to the multiple */
    pl->R = pl->S / m->par.cp, pl->Rl = sp_on(m) ? pl->R / m->par.tp : pl->R;
}

static vfm_status host_i32(int32_t **dst, const Tensor *t, int64_t n) {
    *dst = malloc((size_t)(n > 0 ? n : 1) * sizeof(int32_t));
    if (!*dst) return vfm_fail(VFM_ERR_NOMEM, "dit: %lld offsets", (long long)n);
    if (tensor_numel(t) < n || t->dtype != DT_I32)
        return vfm_fail(VFM_ERR_SHAPE, "dit: a layout holds %lld offsets, the pack needs %lld (i32)",
                        (long long)tensor_numel(t), (long long)n);
    return device_memcpy(*dst, DEV_CPU, t->data, t->device, (size_t)n * sizeof(int32_t));
}

/* The placement's rows once the caller's offsets are read; st_shape: ST-DiT's frames [n] and
 * tokens per frame [n] of every sample (NULL for other variants), whose slots hold whole frames. */
static vfm_status place_rows(const DiT *m, Placement *pl, const int *st_shape) {
    int n = pl->n, mult = slot_multiple(m), cp = m->par.cp;
    if (pl->identity) {
        pl->S = pl->R = pl->Rl = pl->S_in;
        return VFM_OK;
    }
    pl->cu_pad = malloc((size_t)(n + 1) * sizeof(int32_t));
    if (!pl->cu_pad) return vfm_fail(VFM_ERR_NOMEM, "dit: %d offsets", n + 1);
    pl->repacked = pl->cu_in_pad[n] != pl->S_in || pl->cu_in_pad[0] != 0;
    for (int i = 0; i < n; i++) {
        int32_t slot = pl->cu_in_pad[i + 1] - pl->cu_in_pad[i];
        if (st_shape ? slot != dit_st_slot(m, st_shape[i], st_shape[n + i]) : slot % mult != 0) pl->repacked = 1;
    }
    pl->cu_pad[0] = 0;
    for (int i = 0; i < n; i++) {
        int32_t len = pl->cu_real[i + 1] - pl->cu_real[i];
        int32_t slot = st_shape ? dit_st_slot(m, st_shape[i], st_shape[n + i])
                       : pl->repacked ? (len + mult - 1) / mult * mult : pl->cu_in_pad[i + 1] - pl->cu_in_pad[i];
        pl->cu_pad[i + 1] = pl->cu_pad[i] + slot;
    }
    pl->S = pl->cu_pad[n];
    pl->R = pl->S / cp;
    pl->Rl = sp_on(m) ? pl->R / m->par.tp : pl->R;
    VFM_TRY(cp_chunks_init(&pl->ch, n, pl->cu_real, pl->cu_pad, cp, m->device));
    pl->have_chunks = 1;
    /* tok2sample of this rank's rows: chunk cp_rank of every sample, then (SP) its row block */
    int32_t *t2s = malloc((size_t)(pl->R > 0 ? pl->R : 1) * sizeof *t2s);
    pl->t2s_host = malloc((size_t)(pl->Rl > 0 ? pl->Rl : 1) * sizeof *pl->t2s_host);
    if (!t2s || !pl->t2s_host) {
        free(t2s);
        return vfm_fail(VFM_ERR_NOMEM, "dit: token map of %lld rows", (long long)pl->R);
    }
    for (int i = 0; i < n; i++) {
        int32_t at = pl->ch.cu_padded[i], c = pl->ch.cu_padded[i + 1] - at, valid = cp_chunk_valid(&pl->ch, m->par.cp_rank, i);
        for (int32_t r = 0; r < c; r++) t2s[at + r] = r < valid ? i : -1;
    }
    int64_t first = sp_on(m) ? pl->Rl * m->par.tp_rank : 0;
    memcpy(pl->t2s_host, t2s + first, (size_t)pl->Rl * sizeof *t2s);
    free(t2s);
    return VFM_OK;
}

vfm_status dit_place_plan(const DiT *m, const DiTInputs *in, Placement *pl) {
    memset(pl, 0, sizeof *pl);
    pl->S_in = tensor_dim(in->x, 0);
    pl->identity = is_identity(m);
    int n = in->self_layout.n_samples;
    pl->n = n;
    VFM_TRY(host_i32(&pl->cu_real, &in->self_layout.cu_q, n + 1));
    VFM_TRY(host_i32(&pl->cu_in_pad, &in->self_layout.cu_q_padded, n + 1));
    if (!m->cfg.f.factorised) return place_rows(m, pl, NULL);
    int *shape = malloc(2 * (size_t)(n > 0 ? n : 1) * sizeof *shape); /* ST-DiT: frames, tokens per frame */
    if (!shape) return vfm_fail(VFM_ERR_NOMEM, "dit: %d sample shapes", n);
    vfm_status s = dit_st_shapes(m, in, pl, shape, shape + n);
    if (s == VFM_OK) s = place_rows(m, pl, shape);
    if (s == VFM_OK) s = dit_st_plan(m, pl, shape, shape + n);
    free(shape);
    return s;
}

/* [rows, w] view of a scratch tensor's memory as dtype dt (scratch is carved wide enough). */
static Tensor view(const Tensor *t, DType dt, int64_t rows, int64_t w) {
    return tensor_make(t->data, dt, t->device, 2, (int64_t[]){rows, w});
}

static Tensor row_block(const Tensor *t, int64_t r0, int64_t rows) {
    int64_t w = tensor_numel(t) / (t->shape[0] > 0 ? t->shape[0] : 1);
    return tensor_make((char *)t->data + (size_t)(r0 * w) * dtype_size(t->dtype), t->dtype, t->device, 2,
                       (int64_t[]){rows, w});
}

/* Every sample's real rows from src (slots src_pad) to dst (slots dst_pad). */
static vfm_status move_real_rows(Tensor *dst, const int32_t *dst_pad, const Tensor *src, const int32_t *src_pad,
                                 const int32_t *cu_real, int n) {
    for (int i = 0; i < n; i++) {
        int64_t len = cu_real[i + 1] - cu_real[i];
        if (len == 0) continue;
        Tensor d = row_block(dst, dst_pad[i], len), s = row_block(src, src_pad[i], len);
        VFM_TRY(op_copy(&d, &s));
    }
    return VFM_OK;
}

/* local[Rl, w] = this rank's rows of whole[S_in, w]; scratch whole_buf [S, w] and cp_buf [R, w]. */
static vfm_status take_rows(DiT *m, const Placement *pl, Tensor *local, const Tensor *whole, const Tensor *whole_buf,
                            const Tensor *cp_buf) {
    DType dt = whole->dtype;
    int64_t w = tensor_numel(whole) / (pl->S_in > 0 ? pl->S_in : 1);
    Tensor src = view(whole, dt, pl->S_in, w);
    if (pl->repacked) {
        Tensor inner = view(whole_buf, dt, pl->S, w);
        if (dt != DT_I32) VFM_TRY(op_fill(&inner, 0.0));
        VFM_TRY(move_real_rows(&inner, pl->cu_pad, &src, pl->cu_in_pad, pl->cu_real, pl->n));
        src = inner;
    }
    if (m->par.cp > 1) {
        Tensor chunk = view(cp_buf, dt, pl->R, w);
        VFM_TRY(cp_take_chunk(&chunk, &src, pl->ch.cu_padded, pl->n, m->par.cp, m->par.cp_rank));
        src = chunk;
    }
    TpContext tpc = dit_tp_context(m);
    Tensor dst = view(local, dt, pl->Rl, w);
    return tp_sp_scatter(&tpc, &dst, &src);
}

/* whole[S_in, w] on every rank from every rank's local[Rl, w]; scratch region [R, w], gather
 * [S, w] (CP > 1), inner [S, w]. real_only: write 0 to every row that is not a real token. */
static vfm_status give_rows(DiT *m, const Placement *pl, Tensor *whole, const Tensor *local, const Tensor *region_buf,
                            const Tensor *gather_buf, const Tensor *inner_buf, int real_only) {
    DType dt = local->dtype;
    int64_t w = tensor_numel(local) / (pl->Rl > 0 ? pl->Rl : 1);
    Tensor out = view(whole, dt, pl->S_in, w);
    int direct = !pl->repacked && !real_only; /* the internal whole pack is the caller's */
    Tensor inner = direct ? out : view(inner_buf, dt, pl->S, w);
    TpContext tpc = dit_tp_context(m);
    Tensor lv = view(local, dt, pl->Rl, w);
    if (m->par.cp == 1) {
        VFM_TRY(tp_sp_gather(&tpc, &inner, &lv));
    } else {
        Tensor region = lv;
        if (tpc.sequence_parallel) {
            region = view(region_buf, dt, pl->R, w);
            VFM_TRY(tp_sp_gather(&tpc, &region, &lv));
        }
        Tensor all = view(gather_buf, dt, pl->S, w);
        VFM_TRY(comm_all_gather(m->par.cp_comm, region.data, all.data, pl->R * w, dt));
        for (int r = 0; r < m->par.cp; r++) {
            Tensor part = row_block(&all, (int64_t)r * pl->R, pl->R);
            VFM_TRY(cp_put_chunk(&inner, &part, pl->ch.cu_padded, pl->n, m->par.cp, r));
        }
    }
    if (direct) return VFM_OK;
    VFM_TRY(op_fill(&out, 0.0));
    return move_real_rows(&out, pl->cu_in_pad, &inner, pl->cu_pad, pl->cu_real, pl->n);
}

vfm_status dit_place_inputs(DiT *m, Acts *a, const DiTInputs *in) {
    Placement *pl = &a->pl;
    if (pl->identity) {
        pl->x = *in->x;
        pl->t2s = *in->tok2sample;
        pl->pos = pl->pos_r = *in->pos;
        pl->self = in->self_layout;
        pl->cross = in->cross_layout;
        return VFM_OK;
    }
    VFM_TRY(take_rows(m, pl, &pl->x, in->x, &a->w_whole, &a->w_cp));
    VFM_TRY(take_rows(m, pl, &pl->pos, in->pos, &a->w_whole, &a->w_cp));
    if (sp_on(m)) { /* the region's rows: every TP rank's */
        TpContext tpc = dit_tp_context(m);
        VFM_TRY(tp_sp_gather(&tpc, &pl->pos_r, &pl->pos));
    } else {
        pl->pos_r = pl->pos;
    }
    VFM_TRY(device_memcpy(pl->t2s.data, pl->t2s.device, pl->t2s_host, DEV_CPU, (size_t)pl->Rl * sizeof(int32_t)));
    pl->self = cp_whole_layout(&pl->ch);
    pl->cross = cp_cross_layout(&pl->ch, m->par.cp_rank, &in->cross_layout);
    return VFM_OK;
}

vfm_status dit_gather_output(DiT *m, Acts *a, Tensor *whole_out) {
    if (a->pl.identity) return VFM_OK; /* the final layer wrote it */
    return give_rows(m, &a->pl, whole_out, &a->out_local, &a->w_cp, &a->w_gather, &a->w_whole, 0);
}

vfm_status dit_scatter_dout(DiT *m, Acts *a, const Tensor *dout) {
    if (a->pl.identity) return VFM_OK;
    return take_rows(m, &a->pl, &a->dout_local, dout, &a->w_whole, &a->w_cp);
}

vfm_status dit_gather_rows(DiT *m, const Tensor *rows, Tensor *whole) {
    DiTSaved *sv = m->running ? m->running : m->saved;
    if (!sv) return vfm_fail(VFM_ERR_INTERNAL, "dit_gather_rows before any forward");
    Acts *a = &sv->a;
    const Placement *pl = &a->pl;
    int64_t w = tensor_numel(rows) / (pl->Rl > 0 ? pl->Rl : 1);
    if (tensor_dim(rows, 0) != pl->Rl || tensor_numel(whole) != pl->S_in * w)
        return vfm_fail(VFM_ERR_SHAPE, "dit_gather_rows: %lld rows of this rank into a whole of %lld rows",
                        (long long)tensor_dim(rows, 0), (long long)tensor_dim(whole, 0));
    if (pl->identity) { /* the rows are the whole pack */
        Tensor out = view(whole, rows->dtype, pl->S_in, w);
        VFM_TRY(op_fill(&out, 0.0));
        return move_real_rows(&out, pl->cu_in_pad, rows, pl->cu_in_pad, pl->cu_real, pl->n);
    }
    Tensor region, gather, inner;
    vfm_status s = tensor_alloc(&region, rows->dtype, m->device, 2, (int64_t[]){pl->R, w});
    if (s == VFM_OK) s = tensor_alloc(&gather, rows->dtype, m->device, 2, (int64_t[]){pl->S, w});
    if (s == VFM_OK) s = tensor_alloc(&inner, rows->dtype, m->device, 2, (int64_t[]){pl->S, w});
    if (s == VFM_OK) s = give_rows(m, pl, whole, rows, &region, &gather, &inner, 1);
    tensor_free(&region), tensor_free(&gather), tensor_free(&inner);
    return s;
}

vfm_status dit_self_attention_forward(const DiT *m, const Acts *a, AttnSpan span, Tensor *o, Tensor *lse,
                                      const Tensor *q, const Tensor *k, const Tensor *v) {
    if (span != ATTN_SPAN_FULL) return dit_st_attention_forward(m, a, span, o, lse, q, k, v);
    if (m->par.cp > 1) return cp_attention_forward(&m->par.cpa, &a->pl.ch, o, lse, q, k, v);
    return op_attention_forward(o, lse, q, k, v, &a->pl.self);
}

vfm_status dit_self_attention_backward(const DiT *m, const Acts *a, AttnSpan span, Tensor *dq, Tensor *dk, Tensor *dv,
                                       const Tensor *dout, const Tensor *q, const Tensor *k, const Tensor *v,
                                       const Tensor *o, const Tensor *lse) {
    if (span != ATTN_SPAN_FULL) return dit_st_attention_backward(m, a, span, dq, dk, dv, dout, q, k, v, o, lse);
    if (m->par.cp > 1) return cp_attention_backward(&m->par.cpa, &a->pl.ch, dq, dk, dv, dout, q, k, v, o, lse);
    return op_attention_backward(dq, dk, dv, dout, q, k, v, o, lse, &a->pl.self);
}
