/* ZeRO-2 / ZeRO-3: units, gather and reshard, per-unit gradient reduce-scatter, the re-layout to
 * ZeRO-1's flat shard, and the update (see fsdp.h). */
#include "fsdp.h"

#include <stdlib.h>
#include <string.h>

#include "ops/ops.h"

/* ---- set-up ------------------------------------------------------------------------------- */

static int zero3(const Fsdp *f) { return f->cfg.strategy == DP_SHARD_OPTIM_GRADS_PARAMS; }

static vfm_status alloc_f32(Device d, int64_t n, float **out) {
    VFM_TRY(device_malloc(d, (size_t)(n > 0 ? n : 1) * sizeof(float), (void **)out));
    return device_memset0(d, *out, (size_t)(n > 0 ? n : 1) * sizeof(float));
}

static void free_f32(Device d, float **p) {
    if (*p) device_free(d, *p);
    *p = NULL;
}

vfm_status fsdp_init(Fsdp *f, const ParamTable *t, const PpBlocks *blocks, const FsdpConfig *cfg, Comm *comm,
                     Comm *tp_comm, Comm *pp_comm, Device device) {
    memset(f, 0, sizeof *f);
    if (cfg->strategy != DP_SHARD_OPTIM_GRADS && cfg->strategy != DP_SHARD_OPTIM_GRADS_PARAMS)
        return vfm_fail(VFM_ERR_INTERNAL, "fsdp: strategy %s is not optim_grads or optim_grads_params", dp_sharding_name(cfg->strategy));
    f->table = t;
    f->cfg = *cfg;
    f->comm = comm;
    f->tp_comm = tp_comm;
    f->pp_comm = pp_comm;
    f->device = device;
    f->n = comm ? comm->size : 1;
    f->rank = comm ? comm->rank : 0;
    VFM_TRY(fsdp_layout_init(&f->lay, t, blocks, f->n, zero3(f)));
    DpConfig dc = {1e9, 1, cfg->tp_rank, cfg->pp_rank, cfg->cp};
    vfm_status s = dp_init(&f->dp, t, &dc, comm, tp_comm, pp_comm);
    if (s == VFM_OK) dp_set_device(&f->dp, device, NULL); /* the flat shard, the norm and the moments live there too */
    int U = f->lay.n_units;
    f->unit_params = calloc((size_t)U + 1, sizeof *f->unit_params);
    f->unit_grads = calloc((size_t)U + 1, sizeof *f->unit_grads);
    f->owned = calloc((size_t)U + 1, 1);
    f->reduced = calloc((size_t)U + 1, 1);
    f->gather_req = calloc((size_t)U + 1, sizeof *f->gather_req);
    if (s == VFM_OK && (!f->unit_params || !f->unit_grads || !f->owned || !f->reduced || !f->gather_req))
        s = vfm_fail(VFM_ERR_NOMEM, "fsdp: unit tables");
    int64_t own = f->dp.own_end - f->dp.own_begin;
    if (s == VFM_OK) s = alloc_f32(device, f->lay.slots, &f->grad_slots);
    if (s == VFM_OK) s = alloc_f32(device, own, &f->flat_grads);
    if (s == VFM_OK && zero3(f)) {
        s = alloc_f32(device, f->lay.slots, &f->param_slots);
        if (s == VFM_OK) s = alloc_f32(device, own, &f->master);
        for (int u = 0; u < U && s == VFM_OK; u++) /* the unsharded units stay whole */
            if (!f->lay.units[u].sharded_params) {
                s = alloc_f32(device, f->lay.units[u].shard * f->n, &f->unit_params[u]);
                f->owned[u] = 1;
            }
    } else if (s == VFM_OK) {
        s = alloc_f32(device, t->total, &f->params);
        for (int u = 0; u < U && s == VFM_OK; u++) f->unit_params[u] = f->params + f->lay.units[u].begin;
        f->master = f->params ? f->params + f->dp.own_begin : NULL;
    }
    if (s != VFM_OK) fsdp_free(f);
    return s;
}

void fsdp_free(Fsdp *f) {
    for (int u = 0; u < f->lay.n_units; u++) {
        if (f->gather_req) comm_wait(&f->gather_req[u]);
        if (f->owned && f->owned[u]) free_f32(f->device, &f->unit_params[u]);
        if (f->unit_grads) free_f32(f->device, &f->unit_grads[u]);
    }
    free(f->unit_params), free(f->unit_grads), free(f->owned), free(f->reduced), free(f->gather_req);
    free_f32(f->device, &f->grad_slots);
    free_f32(f->device, &f->flat_grads);
    free_f32(f->device, &f->param_slots);
    if (zero3(f)) free_f32(f->device, &f->master);
    free_f32(f->device, &f->params);
    dp_free(&f->dp);
    fsdp_layout_free(&f->lay);
    memset(f, 0, sizeof *f);
}

void fsdp_set_expert_parallel(Fsdp *f, Comm *ep_comm) { dp_set_expert_parallel(&f->dp, ep_comm); }

void fsdp_set_host_comm(Fsdp *f, Comm *host_comm) {
    if (!host_comm || host_comm == f->comm) return;
    f->dp.grad_comm = host_comm;                /* the scalars: the loss's mean, the norm's partials */
    dp_set_device(&f->dp, f->device, f->comm);  /* the buffers keep going over f->comm */
}

void fsdp_set_sequence_parallel(Fsdp *f, int on) {
    f->sequence_parallel = on != 0;
    dp_set_sequence_parallel(&f->dp, on);
}

int fsdp_unit_of_block(const Fsdp *f, int block) {
    for (int u = 0; u < f->lay.n_units; u++)
        if (f->lay.units[u].block == block) return u;
    return -1;
}

int fsdp_unit_of_entry(const Fsdp *f, int entry) { return fsdp_layout_unit_of_entry(&f->lay, entry); }

static vfm_status check_unit(const Fsdp *f, int unit) {
    if (unit < 0 || unit >= f->lay.n_units) return vfm_fail(VFM_ERR_INTERNAL, "fsdp: unit %d of %d", unit, f->lay.n_units);
    return VFM_OK;
}

static vfm_status copy_f32(const Fsdp *f, float *dst, const float *src, int64_t n) {
    if (n <= 0 || dst == src) return VFM_OK;
    return device_memcpy(dst, f->device, src, f->device, (size_t)n * sizeof(float));
}

/* [a, b) ∩ [c, d) */
static int64_t overlap(int64_t a, int64_t b, int64_t c, int64_t d, int64_t *lo) {
    *lo = a > c ? a : c;
    int64_t hi = b < d ? b : d;
    return hi > *lo ? hi - *lo : 0;
}

/* ---- parameters ---------------------------------------------------------------------------- */

vfm_status fsdp_set_unit_params(Fsdp *f, int unit, const float *values) {
    VFM_TRY(check_unit(f, unit));
    const FsdpUnit *u = &f->lay.units[unit];
    f->params_version++;
    int64_t lo;
    /* the master's part of this unit */
    int64_t k = overlap(u->begin, u->end, f->dp.own_begin, f->dp.own_end, &lo);
    if (zero3(f)) VFM_TRY(copy_f32(f, f->master + (lo - f->dp.own_begin), values + (lo - u->begin), k));
    if (!u->sharded_params) return copy_f32(f, f->unit_params[unit], values, u->end - u->begin);
    int64_t a, b;
    fsdp_unit_piece(u, f->rank, &a, &b);
    return copy_f32(f, f->param_slots + u->slot, values + (a - u->begin), b - a);
}

vfm_status fsdp_set_params(Fsdp *f, const float *full) {
    for (int u = 0; u < f->lay.n_units; u++) VFM_TRY(fsdp_set_unit_params(f, u, full + f->lay.units[u].begin));
    return VFM_OK;
}

vfm_status fsdp_get_unit_params(Fsdp *f, int unit, float *values) {
    VFM_TRY(check_unit(f, unit));
    const FsdpUnit *u = &f->lay.units[unit];
    int was = f->unit_params[unit] != NULL;
    VFM_TRY(fsdp_gather(f, unit));
    vfm_status s = copy_f32(f, values, f->unit_params[unit], u->end - u->begin);
    if (!was) {
        vfm_status r = fsdp_release(f, unit);
        if (s == VFM_OK) s = r;
    }
    return s;
}

vfm_status fsdp_prefetch(Fsdp *f, int unit) {
    VFM_TRY(check_unit(f, unit));
    const FsdpUnit *u = &f->lay.units[unit];
    if (f->unit_params[unit]) return VFM_OK; /* whole, gathered or posted */
    VFM_TRY(alloc_f32(f->device, u->shard * f->n, &f->unit_params[unit]));
    f->owned[unit] = 1;
    if (++f->gathered > f->peak_gathered) f->peak_gathered = f->gathered;
    if (!f->comm) return copy_f32(f, f->unit_params[unit], f->param_slots + u->slot, u->shard);
    return comm_all_gather_start(f->comm, f->param_slots + u->slot, f->unit_params[unit], u->shard, DT_F32,
                                 &f->gather_req[unit]);
}

vfm_status fsdp_gather(Fsdp *f, int unit) {
    VFM_TRY(fsdp_prefetch(f, unit));
    return comm_wait(&f->gather_req[unit]);
}

vfm_status fsdp_release(Fsdp *f, int unit) {
    VFM_TRY(check_unit(f, unit));
    if (!f->lay.units[unit].sharded_params || !f->unit_params[unit]) return VFM_OK;
    VFM_TRY(comm_wait(&f->gather_req[unit]));
    free_f32(f->device, &f->unit_params[unit]);
    f->owned[unit] = 0;
    f->gathered--;
    return VFM_OK;
}

static vfm_status entry_view(const Fsdp *f, int entry, float *const *bufs, const char *what, Tensor *out) {
    int unit = fsdp_unit_of_entry(f, entry);
    if (unit < 0) return vfm_fail(VFM_ERR_INTERNAL, "fsdp: entry %d is in no unit", entry);
    const ParamEntry *e = &f->table->entries[entry];
    if (!bufs[unit])
        return vfm_fail(VFM_ERR_INTERNAL, "fsdp: %s of %s read while its unit %d is %s", what, e->name, unit,
                        bufs == f->unit_params ? "sharded (call fsdp_gather first)" : "not in backward (call fsdp_grad_begin)");
    *out = tensor_make(bufs[unit] + (e->offset - f->lay.units[unit].begin), DT_F32, f->device, e->ndim, e->shape);
    return VFM_OK;
}

vfm_status fsdp_param(const Fsdp *f, int entry, Tensor *out) { return entry_view(f, entry, f->unit_params, "parameters", out); }

/* ---- gradients ----------------------------------------------------------------------------- */

vfm_status fsdp_grad_begin(Fsdp *f, int unit) {
    VFM_TRY(check_unit(f, unit));
    if (f->unit_grads[unit]) {
        if (f->cfg.accumulate_unsharded) return VFM_OK; /* the running sum of this step */
        return vfm_fail(VFM_ERR_INTERNAL, "fsdp: unit %d's gradient buffer is already in use", unit);
    }
    return alloc_f32(f->device, f->lay.units[unit].shard * f->n, &f->unit_grads[unit]);
}

vfm_status fsdp_grad(const Fsdp *f, int entry, Tensor *out) { return entry_view(f, entry, f->unit_grads, "the gradient", out); }

vfm_status fsdp_reduce_grads(Fsdp *f, int unit, int last_microbatch) {
    VFM_TRY(check_unit(f, unit));
    const FsdpUnit *u = &f->lay.units[unit];
    float *g = f->unit_grads[unit];
    if (!g) return vfm_fail(VFM_ERR_INTERNAL, "fsdp: unit %d reduced without fsdp_grad_begin", unit);
    if (f->cfg.accumulate_unsharded && !last_microbatch) return VFM_OK;
    /* 1. model-parallel sums (dp.c's rules), then 2. the ordered reduce-scatter over DP×CP */
    if (f->tp_comm && f->tp_comm->size > 1)
        for (int i = u->first_entry; i < u->end_entry; i++) {
            const ParamEntry *e = &f->table->entries[i];
            if (dp_entry_reduces_over_tp(e, f->sequence_parallel))
                VFM_TRY(comm_all_reduce(f->tp_comm, g + (e->offset - u->begin), e->numel, DT_F32, COMM_SUM_ORDERED));
        }
    VFM_TRY(dp_ep_sum_dense(&f->dp, g, u->begin, u->first_entry, u->end_entry));
    VFM_TRY(pp_reduce_replicated_grads(f->pp_comm, f->table, g, u->begin, u->first_entry, u->end_entry, f->device));
    float *piece = g + (int64_t)f->rank * u->shard;
    if (f->comm) VFM_TRY(comm_reduce_scatter(f->comm, g, piece, u->shard, DT_F32, COMM_SUM_ORDERED));
    float *acc = f->grad_slots + u->slot;
    if (!f->reduced[unit]) {
        VFM_TRY(copy_f32(f, acc, piece, u->shard));
    } else {
        Tensor a = TF32(acc, u->shard), b = TF32(piece, u->shard);
        a.device = b.device = f->device;
        VFM_TRY(op_add(&a, &a, &b));
    }
    if (f->reduced[unit] < 255) f->reduced[unit]++;
    free_f32(f->device, &f->unit_grads[unit]);
    return VFM_OK;
}

/* Moves pieces between the unit layout (slots) and the flat ZeRO-1 shard with one all-to-all:
 * to_flat: slots → flat; else flat → slots. sharded_only: only the units whose parameters are
 * sharded (ZeRO-3 blocks), else every unit. Pieces go in unit order on both sides. */
static vfm_status relayout(Fsdp *f, float *slots, float *flat, int to_flat, int sharded_only) {
    int n = f->n, me = f->rank;
    const FsdpLayout *l = &f->lay;
    int64_t *cnt = calloc(4 * (size_t)n, sizeof *cnt);
    if (!cnt) return vfm_fail(VFM_ERR_NOMEM, "fsdp: re-layout counts");
    int64_t *sc = cnt, *sd = cnt + n, *rc = cnt + 2 * n, *rd = cnt + 3 * n, lo, flo, fhi;
    /* send side: my pieces ∩ rank q's flat shard (to_flat), or my flat shard ∩ q's pieces */
    for (int q = 0; q < n; q++)
        for (int k = 0; k < l->n_units; k++) {
            const FsdpUnit *u = &l->units[k];
            if (sharded_only && !u->sharded_params) continue;
            int64_t a, b;
            fsdp_unit_piece(u, to_flat ? me : q, &a, &b);
            zero_shard_range(f->table->total, n, to_flat ? q : me, &flo, &fhi);
            sc[q] += overlap(a, b, flo, fhi, &lo);
            fsdp_unit_piece(u, to_flat ? q : me, &a, &b);
            zero_shard_range(f->table->total, n, to_flat ? me : q, &flo, &fhi);
            rc[q] += overlap(a, b, flo, fhi, &lo);
        }
    int64_t st = 0, rt = 0;
    for (int q = 0; q < n; q++) sd[q] = st, st += sc[q], rd[q] = rt, rt += rc[q];
    float *sbuf = NULL, *rbuf = NULL;
    vfm_status s = alloc_f32(f->device, st, &sbuf);
    if (s == VFM_OK) s = alloc_f32(f->device, rt, &rbuf);
    /* pass 0 packs what goes to q, pass 1 unpacks what came from q, both in unit order */
    for (int pass = 0; pass < 2 && s == VFM_OK; pass++) {
        if (pass == 1) {
            if (f->comm) s = comm_all_to_all_v(f->comm, sbuf, sc, sd, rbuf, rc, rd, DT_F32);
            else s = copy_f32(f, rbuf, sbuf, st);
        }
        for (int q = 0; q < n && s == VFM_OK; q++) {
            int64_t at = pass ? rd[q] : sd[q];
            for (int k = 0; k < l->n_units && s == VFM_OK; k++) {
                const FsdpUnit *u = &l->units[k];
                if (sharded_only && !u->sharded_params) continue;
                int src_is_me = pass == 0;
                int piece_rank = to_flat ? (src_is_me ? me : q) : (src_is_me ? q : me);
                int flat_rank = to_flat ? (src_is_me ? q : me) : (src_is_me ? me : q);
                int64_t a, b;
                fsdp_unit_piece(u, piece_rank, &a, &b);
                zero_shard_range(f->table->total, n, flat_rank, &flo, &fhi);
                int64_t len = overlap(a, b, flo, fhi, &lo);
                if (!len) continue;
                float *in_slots = slots + u->slot + (lo - a), *in_flat = flat + (lo - flo);
                if (pass == 0) s = copy_f32(f, sbuf + at, to_flat ? in_slots : in_flat, len);
                else s = copy_f32(f, to_flat ? in_flat : in_slots, rbuf + at, len);
                at += len;
            }
        }
    }
    free_f32(f->device, &sbuf);
    free_f32(f->device, &rbuf);
    free(cnt);
    return s;
}

vfm_status fsdp_grad_finish(Fsdp *f) {
    for (int k = 0; k < f->lay.n_units; k++)
        if (!f->reduced[k] || f->unit_grads[k])
            return vfm_fail(VFM_ERR_INTERNAL, "fsdp: unit %d was not reduced in the last micro-batch", k);
    int replicas = dp_replicas(&f->dp);
    if (replicas > 1) { /* dp.c's mean: the ordered sum × (float)(1/replicas), on the real elements */
        for (int k = 0; k < f->lay.n_units; k++) {
            int64_t a, b;
            fsdp_unit_piece(&f->lay.units[k], f->rank, &a, &b);
            if (b <= a) continue;
            Tensor x = TF32(f->grad_slots + f->lay.units[k].slot, b - a);
            x.device = f->device;
            VFM_TRY(op_scale(&x, 1.0 / replicas));
        }
    }
    memset(f->reduced, 0, (size_t)f->lay.n_units);
    return relayout(f, f->grad_slots, f->flat_grads, 1, 0);
}

vfm_status fsdp_grad_norm(Fsdp *f, double *norm) { return dp_grad_norm_shard(&f->dp, f->flat_grads, norm); }

/* ---- optimizer ----------------------------------------------------------------------------- */

vfm_status fsdp_optimizer_init(const Fsdp *f, Optimizer *o, const OptimConfig *c) { return dp_optimizer_init(&f->dp, o, c); }

/* ZeRO-3: every rank gets the unsharded units' elements of every flat shard (one all-gather). */
static vfm_status gather_unsharded(Fsdp *f) {
    int n = f->n;
    int64_t *counts = calloc((size_t)n, sizeof *counts), lo, flo, fhi, total = 0;
    if (!counts) return vfm_fail(VFM_ERR_NOMEM, "fsdp: counts");
    for (int p = 0; p < n; p++) {
        zero_shard_range(f->table->total, n, p, &flo, &fhi);
        for (int k = 0; k < f->lay.n_units; k++)
            if (!f->lay.units[k].sharded_params) counts[p] += overlap(f->lay.units[k].begin, f->lay.units[k].end, flo, fhi, &lo);
        total += counts[p];
    }
    float *send = NULL, *recv = NULL;
    vfm_status s = alloc_f32(f->device, counts[f->rank], &send);
    if (s == VFM_OK) s = alloc_f32(f->device, total, &recv);
    int64_t at = 0;
    for (int k = 0; k < f->lay.n_units && s == VFM_OK; k++) { /* pack my flat shard's part */
        const FsdpUnit *u = &f->lay.units[k];
        if (u->sharded_params) continue;
        int64_t len = overlap(u->begin, u->end, f->dp.own_begin, f->dp.own_end, &lo);
        s = copy_f32(f, send + at, f->master + (lo - f->dp.own_begin), len);
        at += len;
    }
    if (s == VFM_OK) s = f->comm ? comm_all_gather_v(f->comm, send, recv, counts, DT_F32) : copy_f32(f, recv, send, total);
    at = 0;
    for (int p = 0; p < n && s == VFM_OK; p++) {
        zero_shard_range(f->table->total, n, p, &flo, &fhi);
        for (int k = 0; k < f->lay.n_units && s == VFM_OK; k++) {
            const FsdpUnit *u = &f->lay.units[k];
            if (u->sharded_params) continue;
            int64_t len = overlap(u->begin, u->end, flo, fhi, &lo);
            s = copy_f32(f, f->unit_params[k] + (lo - u->begin), recv + at, len);
            at += len;
        }
    }
    free_f32(f->device, &send);
    free_f32(f->device, &recv);
    free(counts);
    return s;
}

vfm_status fsdp_optimizer_step(Fsdp *f, Optimizer *o, double lr, double grad_scale) {
    if (o->begin != f->dp.own_begin || o->end != f->dp.own_end)
        return vfm_fail(VFM_ERR_INTERNAL, "fsdp: the optimizer holds [%lld, %lld), this rank's shard is [%lld, %lld)",
                        (long long)o->begin, (long long)o->end, (long long)f->dp.own_begin, (long long)f->dp.own_end);
    VFM_TRY(optimizer_step_range(o, f->master, f->flat_grads, lr, grad_scale));
    return fsdp_distribute_master(f);
}

vfm_status fsdp_distribute_master(Fsdp *f) {
    f->params_version++;
    if (!zero3(f)) { /* ZeRO-2: every parameter back to every rank, as ZeRO-1 */
        if (!f->comm || f->n == 1) return VFM_OK;
        int64_t *counts = malloc((size_t)f->n * sizeof *counts);
        if (!counts) return vfm_fail(VFM_ERR_NOMEM, "fsdp: counts");
        for (int j = 0; j < f->n; j++) {
            int64_t b, e;
            zero_shard_range(f->table->total, f->n, j, &b, &e);
            counts[j] = e - b;
        }
        vfm_status s = comm_all_gather_v(f->comm, f->params + f->dp.own_begin, f->params, counts, DT_F32);
        free(counts);
        return s;
    }
    for (int k = 0; k < f->lay.n_units; k++)
        if (f->lay.units[k].sharded_params && f->unit_params[k])
            return vfm_fail(VFM_ERR_INTERNAL, "fsdp: unit %d is still gathered at the update (release it after backward)", k);
    VFM_TRY(relayout(f, f->param_slots, f->master, 0, 1));
    return gather_unsharded(f);
}
