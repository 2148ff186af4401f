/* Data parallelism: gradient buckets, ZeRO-1, gradient norm, optimizer-state shards (see dp.h). */
#include "dp.h"

#include <dirent.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fileutil.h"
#include "core/hash.h"
#include "data/formats/safetensors.h"
#include "ops/ops.h"
#include "parallel/pp_stage.h"

static int group_n(const Comm *c) { return c ? c->size : 1; }
static int group_rank(const Comm *c) { return c ? c->rank : 0; }

void zero_shard_range(int64_t total, int n, int j, int64_t *begin, int64_t *end) {
    int64_t s = (total + n - 1) / n;
    int64_t b = s * j, e = s * (j + 1);
    *begin = b < total ? b : total;
    *end = e < total ? e : total;
}

vfm_status dp_init(DataParallel *dp, const ParamTable *t, const DpConfig *cfg, Comm *grad_comm, Comm *tp_comm,
                   Comm *pp_comm) {
    memset(dp, 0, sizeof *dp);
    dp->table = t;
    dp->cfg = *cfg;
    dp->grad_comm = grad_comm;
    dp->tp_comm = tp_comm;
    dp->pp_comm = pp_comm;
    int64_t at = 0;
    for (int i = 0; i < t->count; i++) {
        if (t->entries[i].offset != at)
            return vfm_fail(VFM_ERR_INTERNAL, "dp: table entry %s is at %lld, expected %lld (entries must be contiguous)",
                            t->entries[i].name, (long long)t->entries[i].offset, (long long)at);
        at += t->entries[i].numel;
    }
    if (at != t->total) return vfm_fail(VFM_ERR_INTERNAL, "dp: table entries hold %lld of %lld elements", (long long)at,
                                        (long long)t->total);
    int n = group_n(grad_comm);
    dp->shard_size = (t->total + n - 1) / n;
    zero_shard_range(t->total, n, group_rank(grad_comm), &dp->own_begin, &dp->own_end);

    int64_t limit = (int64_t)(cfg->bucket_size_mb * 1048576.0 / sizeof(float));
    if (limit < 1) limit = 1;
    dp->buckets = calloc((size_t)(t->count > 0 ? t->count : 1), sizeof *dp->buckets);
    dp->ready = calloc((size_t)(t->count > 0 ? t->count : 1), 1);
    if (!dp->buckets || !dp->ready) {
        dp_free(dp);
        return vfm_fail(VFM_ERR_NOMEM, "dp: buckets for %d entries", t->count);
    }
    for (int i = t->count - 1; i >= 0;) {
        DpBucket *b = &dp->buckets[dp->n_buckets++];
        b->last_entry = i;
        b->end = t->entries[i].offset + t->entries[i].numel;
        int64_t size = 0;
        while (i >= 0 && size < limit) size += t->entries[i--].numel;
        b->first_entry = i + 1;
        b->begin = t->entries[i + 1].offset;
    }
    return VFM_OK;
}

void dp_free(DataParallel *dp) {
    free(dp->buckets);
    free(dp->ready);
    device_free(dp->device, dp->norm_parts);
    dp->buckets = NULL;
    dp->ready = NULL;
    dp->norm_parts = NULL;
}

int dp_bucket_of_entry(const DataParallel *dp, int entry) {
    for (int b = 0; b < dp->n_buckets; b++)
        if (entry >= dp->buckets[b].first_entry && entry <= dp->buckets[b].last_entry) return b;
    return -1;
}

/* ---- gradient reduction ----------------------------------------------------------------- */

static vfm_status scale_range(const DataParallel *dp, float *x, int64_t n, double alpha) {
    if (n == 0 || alpha == 1.0) return VFM_OK;
    Tensor v = TENSOR(x, DT_F32, dp->device, n);
    return op_scale(&v, alpha);
}

int dp_entry_reduces_over_tp(const ParamEntry *e, int sequence_parallel) {
    return (e->reduce_groups & REDUCE_TP_HEADS) || (sequence_parallel && (e->reduce_groups & REDUCE_TP_SP));
}

void dp_set_sequence_parallel(DataParallel *dp, int on) { dp->sequence_parallel = on != 0; }

void dp_set_expert_parallel(DataParallel *dp, Comm *ep_comm) { dp->ep_comm = group_n(ep_comm) > 1 ? ep_comm : NULL; }

int dp_entry_reduces_over_ep(const DataParallel *dp, const ParamEntry *e) {
    return dp->ep_comm && !(e->reduce_groups & REDUCE_EXPERT);
}

int dp_replicas(const DataParallel *dp) {
    int cp = dp->cfg.cp > 1 ? dp->cfg.cp : 1;
    return group_n(dp->grad_comm) * group_n(dp->ep_comm) / cp;
}

vfm_status dp_ep_sum_dense(const DataParallel *dp, float *grads, int64_t base, int first_entry, int end_entry) {
    const ParamTable *t = dp->table;
    for (int i = first_entry; dp->ep_comm && i < end_entry;) {
        if (!dp_entry_reduces_over_ep(dp, &t->entries[i])) {
            i++;
            continue;
        }
        int j = i;
        while (j < end_entry && dp_entry_reduces_over_ep(dp, &t->entries[j])) j++;
        int64_t at = t->entries[i].offset, n = t->entries[j - 1].offset + t->entries[j - 1].numel - at;
        VFM_TRY(comm_all_reduce(dp->ep_comm, grads + (at - base), n, DT_F32, COMM_SUM_ORDERED));
        i = j;
    }
    return VFM_OK;
}

void dp_set_device(DataParallel *dp, Device device, Comm *dev_comm) {
    dp->device = device;
    dp->dev_comm = dev_comm;
}

/* The comm for gradient and parameter buffers. */
static Comm *buffers_comm(const DataParallel *dp) { return dp->dev_comm ? dp->dev_comm : dp->grad_comm; }

/* Completes bucket b's posted reduction and applies its 1/DP scaling (once). */
static vfm_status complete_bucket(DataParallel *dp, float *grads, DpBucket *b) {
    VFM_TRY(comm_wait(&b->req));
    int64_t at = b->scale_at, count = b->scale_n;
    b->scale_n = 0;
    return scale_range(dp, grads + at, count, 1.0 / dp_replicas(dp));
}

/* Posts bucket b's reduction (b->req); its 1/DP scaling is left to complete_bucket. */
static vfm_status reduce_bucket(DataParallel *dp, float *grads, DpBucket *b) {
    const ParamTable *t = dp->table;
    /* 1. model-parallel sums of the entries that need them: TP (design §3's two rules) per entry;
     * PP once for every REDUCE_PP entry of the table, at the first bucket holding one (stage tables
     * differ, so the buckets around the embedders differ from stage to stage) */
    int pp_here = 0;
    for (int i = b->first_entry; i <= b->last_entry; i++) {
        const ParamEntry *e = &t->entries[i];
        pp_here |= (e->reduce_groups & REDUCE_PP) != 0;
        if (group_n(dp->tp_comm) > 1 && dp_entry_reduces_over_tp(e, dp->sequence_parallel))
            VFM_TRY(comm_all_reduce(dp->tp_comm, grads + e->offset, e->numel, DT_F32, COMM_SUM_ORDERED));
    }
    VFM_TRY(dp_ep_sum_dense(dp, grads, 0, b->first_entry, b->last_entry + 1));
    if (pp_here && !dp->pp_summed) {
        /* the buckets before this one are done first (their DP mean before the PP sum, as always) */
        for (DpBucket *e = dp->buckets; e < b; e++) VFM_TRY(complete_bucket(dp, grads, e));
        VFM_TRY(pp_reduce_replicated_grads(dp->pp_comm, t, grads, 0, 0, t->count, dp->device));
        dp->pp_summed = 1;
    }
    /* 2. sum over CP, mean over DP */
    int n = group_n(dp->grad_comm);
    b->scale_n = 0;
    if (n == 1) { /* under EP the EP sum above was the whole reduction; the mean's 1/DP remains */
        b->scale_at = b->begin;
        b->scale_n = dp_replicas(dp) > 1 ? b->end - b->begin : 0;
        return VFM_OK;
    }
    if (!dp->cfg.zero1) {
        b->scale_at = b->begin;
        b->scale_n = b->end - b->begin;
        return comm_all_reduce_start(buffers_comm(dp), grads + b->begin, b->end - b->begin, DT_F32, COMM_SUM_ORDERED,
                                     &b->req);
    }
    int64_t *counts = malloc((size_t)n * sizeof *counts);
    if (!counts) return vfm_fail(VFM_ERR_NOMEM, "dp: counts");
    for (int j = 0; j < n; j++) {
        int64_t lo, hi;
        zero_shard_range(t->total, n, j, &lo, &hi);
        lo = lo > b->begin ? lo : b->begin;
        hi = hi < b->end ? hi : b->end;
        counts[j] = hi > lo ? hi - lo : 0;
    }
    int me = group_rank(dp->grad_comm);
    int64_t mine_at = dp->own_begin > b->begin ? dp->own_begin : b->begin, mine = counts[me];
    vfm_status s = comm_reduce_scatter_v_start(buffers_comm(dp), grads + b->begin, grads + mine_at, counts, DT_F32,
                                               COMM_SUM_ORDERED, &b->req);
    free(counts);
    b->scale_at = mine_at;
    b->scale_n = mine;
    return s;
}

static vfm_status issue_ready(DataParallel *dp, float *grads, int all) {
    while (dp->next_bucket < dp->n_buckets && (all || dp->ready[dp->next_bucket])) {
        VFM_TRY(reduce_bucket(dp, grads, &dp->buckets[dp->next_bucket]));
        dp->next_bucket++;
    }
    return VFM_OK;
}

vfm_status dp_grad_bucket_ready(DataParallel *dp, float *grads, int bucket) {
    if (bucket < 0 || bucket >= dp->n_buckets)
        return vfm_fail(VFM_ERR_INTERNAL, "dp: bucket %d of %d", bucket, dp->n_buckets);
    dp->ready[bucket] = 1;
    return issue_ready(dp, grads, 0);
}

vfm_status dp_grad_sync_finish(DataParallel *dp, float *grads) {
    vfm_status s = issue_ready(dp, grads, 1);
    /* every posted reduction completed and scaled (after a failure still waited for: nothing may stay
     * in flight) */
    for (int i = 0; i < dp->n_buckets; i++) {
        if (s == VFM_OK) {
            s = complete_bucket(dp, grads, &dp->buckets[i]);
        } else {
            comm_wait(&dp->buckets[i].req);
            dp->buckets[i].scale_n = 0;
        }
    }
    dp->next_bucket = 0;
    dp->pp_summed = 0;
    memset(dp->ready, 0, (size_t)dp->n_buckets);
    return s;
}

/* part[c] += Σ g² over the elements in [lo, hi) of the entries of class c: + 0 split over TP, + 1
 * replicated over TP; + 2 when the entry is on every pipeline stage (REDUCE_PP) and pp > 1; + 4
 * for an expert entry under EP (its rows differ from EP rank to EP rank).
 * Element x of the buffer is grads[x - base]. */
static vfm_status class_sum_squares(const DataParallel *dp, const float *grads, int64_t base, int64_t lo, int64_t hi,
                                    double *part) {
    const ParamTable *t = dp->table;
    int pp = group_n(dp->pp_comm) > 1;
    for (int i = 0; i < t->count; i++) {
        const ParamEntry *e = &t->entries[i];
        int64_t a = e->offset > lo ? e->offset : lo, b = e->offset + e->numel < hi ? e->offset + e->numel : hi;
        if (a >= b) continue;
        double sq = 0;
        Tensor g = TENSOR((float *)grads + (a - base), DT_F32, dp->device, b - a);
        VFM_TRY(op_sum_squares(&sq, &g));
        part[(e->tp_split_dim >= 0 ? 0 : 1) + (pp && (e->reduce_groups & REDUCE_PP) ? 2 : 0) +
             (dp->ep_comm && (e->reduce_groups & REDUCE_EXPERT) ? 4 : 0)] += sq;
    }
    return VFM_OK;
}

/* Σ g² of the norm (dp.h) with element x of the gradients at grads[x - base]: base = 0 for a whole
 * buffer, own_begin for a ZeRO-1 shard held on its own (only the own shard is read then). */
static vfm_status grad_sumsq(DataParallel *dp, const float *grads, int64_t base, double *sumsq) {
    int n = group_n(dp->grad_comm), tp = group_n(dp->tp_comm), pp = group_n(dp->pp_comm), ep = group_n(dp->ep_comm);
    int k = tp > 1 || pp > 1 || ep > 1 ? 8 : 1; /* values per shard: one sum, or the eight classes above */
    double *partial = calloc((size_t)(n * k), sizeof *partial);
    if (!partial) return vfm_fail(VFM_ERR_NOMEM, "dp: norm partials");
    vfm_status s = VFM_OK;
    for (int j = 0; j < n && s == VFM_OK; j++) {
        if (dp->cfg.zero1 && j != group_rank(dp->grad_comm)) continue;
        int64_t lo, hi;
        zero_shard_range(dp->table->total, n, j, &lo, &hi);
        if (hi <= lo) continue;
        if (k == 8) {
            s = class_sum_squares(dp, grads, base, lo, hi, &partial[8 * j]);
        } else {
            Tensor g = TENSOR((float *)grads + (lo - base), DT_F32, dp->device, hi - lo);
            s = op_sum_squares(&partial[j], &g);
        }
    }
    if (s == VFM_OK && dp->cfg.zero1 && n > 1) {
        double mine[8];
        memcpy(mine, &partial[k * group_rank(dp->grad_comm)], (size_t)k * sizeof *mine);
        s = comm_all_gather(dp->grad_comm, mine, partial, k, DT_F64);
    }
    double total = 0, cls[8] = {0};
    for (int j = 0; j < n; j++) {
        if (k == 1) total += partial[j];
        else
            for (int c = 0; c < 8; c++) cls[c] += partial[8 * j + c];
    }
    free(partial);
    if (s == VFM_OK && k == 8) {
        /* the TP-split classes over TP; the experts over EP; then what each stage holds alone over
         * PP; the entries every stage holds (identical after the PP sum) once. Without EP the expert
         * classes are empty and not added: the bits of TP and PP alone. */
        double split[4] = {cls[0], cls[2], cls[4], cls[6]};
        if (tp > 1) s = comm_all_reduce(dp->tp_comm, split, ep > 1 ? 4 : 2, DT_F64, COMM_SUM_ORDERED);
        double experts[2] = {split[2] + cls[5], split[3] + cls[7]};
        if (s == VFM_OK && ep > 1) s = comm_all_reduce(dp->ep_comm, experts, 2, DT_F64, COMM_SUM_ORDERED);
        double stage = split[0] + cls[1];
        if (ep > 1) stage += experts[0];
        if (s == VFM_OK && pp > 1) s = comm_all_reduce(dp->pp_comm, &stage, 1, DT_F64, COMM_SUM_ORDERED);
        total = stage + (split[1] + cls[3]);
        if (ep > 1) total += experts[1];
    }
    *sumsq = total;
    return s;
}

static vfm_status grad_norm(DataParallel *dp, const float *grads, int64_t base, double *norm) {
    double sumsq = 0;
    vfm_status s = grad_sumsq(dp, grads, base, &sumsq);
    *norm = sqrt(sumsq);
    return s;
}

vfm_status dp_grad_norm(DataParallel *dp, const float *grads, double *norm) { return grad_norm(dp, grads, 0, norm); }

vfm_status dp_grad_norm_shard(DataParallel *dp, const float *shard, double *norm) {
    if (!dp->cfg.zero1) return vfm_fail(VFM_ERR_INTERNAL, "dp: the norm of a shard needs the ZeRO-1 layout");
    return grad_norm(dp, shard, dp->own_begin, norm);
}

/* grad_sumsq's value into state[STEP_SUMSQ]. Without a collective (one rank, or plain DP, whose
 * gradients are already reduced: every rank sums every shard itself) the shards' sums are made and
 * added on the device, in grad_sumsq's order: no host wait. ZeRO shards over several ranks and the
 * TP/PP classes gather host values over the comms: that path reads the partial sums on the host. */
static vfm_status grad_sumsq_into(DataParallel *dp, const float *grads, int64_t base, Tensor *state) {
    int n = group_n(dp->grad_comm), tp = group_n(dp->tp_comm), pp = group_n(dp->pp_comm);
    if (tp > 1 || pp > 1 || dp->ep_comm || (dp->cfg.zero1 && n > 1)) {
        double sumsq = 0;
        VFM_TRY(grad_sumsq(dp, grads, base, &sumsq));
        return device_memcpy((double *)state->data + STEP_SUMSQ, state->device, &sumsq, DEV_CPU, sizeof sumsq);
    }
    if (!dp->norm_parts) VFM_TRY(device_malloc(dp->device, (size_t)n * sizeof(double), (void **)&dp->norm_parts));
    Tensor parts = TENSOR(dp->norm_parts, DT_F64, dp->device, n);
    for (int j = 0; j < n; j++) {
        int64_t lo, hi;
        zero_shard_range(dp->table->total, n, j, &lo, &hi);
        Tensor g = TENSOR((float *)grads + (lo - base), DT_F32, dp->device, hi > lo ? hi - lo : 0);
        VFM_TRY(op_sum_squares_into(&parts, j, &g));
    }
    return op_f64_sum_into(state, STEP_SUMSQ, &parts, n);
}

vfm_status dp_grad_sumsq_into(DataParallel *dp, const float *grads, Tensor *state) {
    return grad_sumsq_into(dp, grads, 0, state);
}

vfm_status dp_grad_sumsq_shard_into(DataParallel *dp, const float *shard, Tensor *state) {
    if (!dp->cfg.zero1) return vfm_fail(VFM_ERR_INTERNAL, "dp: the norm of a shard needs the ZeRO-1 layout");
    return grad_sumsq_into(dp, shard, dp->own_begin, state);
}

vfm_status dp_mean_f64(DataParallel *dp, double *values, int n) {
    int size = group_n(dp->grad_comm) * group_n(dp->ep_comm);
    if (size == 1) return VFM_OK;
    if (group_n(dp->grad_comm) > 1) VFM_TRY(comm_all_reduce(dp->grad_comm, values, n, DT_F64, COMM_SUM_ORDERED));
    if (dp->ep_comm) VFM_TRY(comm_all_reduce(dp->ep_comm, values, n, DT_F64, COMM_SUM_ORDERED));
    for (int i = 0; i < n; i++) values[i] /= size;
    return VFM_OK;
}

/* ---- the optimizer over this rank's elements ------------------------------------------------- */

/* Elements whose m and v this rank holds: all (plain DP) or its shard (ZeRO-1). */
static void held_range(const DataParallel *dp, int64_t *lo, int64_t *hi) {
    *lo = dp->cfg.zero1 ? dp->own_begin : 0;
    *hi = dp->cfg.zero1 ? dp->own_end : dp->table->total;
}

vfm_status dp_optimizer_init(const DataParallel *dp, Optimizer *o, const OptimConfig *c) {
    int64_t lo, hi;
    held_range(dp, &lo, &hi);
    return optimizer_init_on(o, c, dp->table, lo, hi, dp->device);
}

vfm_status dp_optimizer_step(DataParallel *dp, Optimizer *o, float *params, const float *grads, double lr,
                             double grad_scale) {
    const ParamTable *t = dp->table;
    VFM_TRY(optimizer_step(o, params, grads, lr, grad_scale)); /* this rank's elements */
    int n = group_n(dp->grad_comm);
    if (!dp->cfg.zero1 || n == 1) return VFM_OK;
    int64_t *counts = malloc((size_t)n * sizeof *counts);
    if (!counts) return vfm_fail(VFM_ERR_NOMEM, "dp: counts");
    for (int j = 0; j < n; j++) {
        int64_t b, e;
        zero_shard_range(t->total, n, j, &b, &e);
        counts[j] = e - b;
    }
    vfm_status s = comm_all_gather_v(buffers_comm(dp), params + dp->own_begin, params, counts, DT_F32);
    free(counts);
    return s;
}

/* ---- optimizer-state shards ------------------------------------------------------------- */

#define SHARD_FORMAT "vfm-optim-shard"

static uint64_t table_fingerprint(const ParamTable *t) {
    uint64_t h = hash_string64("vfm-param-table");
    for (int i = 0; i < t->count; i++) {
        const ParamEntry *e = &t->entries[i];
        int64_t v[3] = {e->numel, e->offset, e->ndim};
        h = hash_combine64(h, hash_string64(e->name));
        h = hash_combine64(h, hash_bytes64(v, sizeof v, 0));
        h = hash_combine64(h, hash_bytes64(e->shape, sizeof e->shape[0] * (size_t)e->ndim, 1));
    }
    return h;
}

vfm_status dp_optim_save(const DataParallel *dp, const Optimizer *o, const char *dir, int global_rank) {
    if (o->device != DEV_CPU) { /* written from a host copy of the moments */
        Optimizer host;
        VFM_TRY(optimizer_host_copy(o, &host));
        vfm_status s = dp_optim_save(dp, &host, dir, global_rank);
        optimizer_free(&host);
        return s;
    }
    int n = group_n(dp->grad_comm);
    int64_t lo, hi, len = dp->own_end - dp->own_begin;
    held_range(dp, &lo, &hi);
    char vals[10][32];
    snprintf(vals[0], sizeof vals[0], "%d", group_rank(dp->grad_comm));
    snprintf(vals[1], sizeof vals[1], "%d", n);
    snprintf(vals[2], sizeof vals[2], "%lld", (long long)dp->own_begin);
    snprintf(vals[3], sizeof vals[3], "%lld", (long long)dp->own_end);
    snprintf(vals[4], sizeof vals[4], "%lld", (long long)dp->table->total);
    snprintf(vals[5], sizeof vals[5], "%lld", (long long)o->step);
    snprintf(vals[6], sizeof vals[6], "%016" PRIx64, table_fingerprint(dp->table));
    snprintf(vals[7], sizeof vals[7], "%d", dp->cfg.tp_rank);
    snprintf(vals[8], sizeof vals[8], "%d", dp->cfg.pp_rank);
    const char *meta[] = {"format", SHARD_FORMAT, "version", "1", "shard_index", vals[0], "shard_count", vals[1],
                          "begin", vals[2], "end", vals[3], "total", vals[4], "step", vals[5], "table", vals[6],
                          "tp_rank", vals[7], "pp_rank", vals[8], NULL};
    SafetensorsEntry e[2];
    memset(e, 0, sizeof e);
    for (int k = 0; k < 2; k++) {
        e[k].name = k ? "exp_avg_sq" : "exp_avg";
        e[k].dtype = DT_F32;
        e[k].ndim = 1;
        e[k].shape[0] = len;
        e[k].data = (k ? o->v : o->m) + (dp->own_begin - lo);
    }
    char name[64], path[1600];
    snprintf(name, sizeof name, "optim.%d.safetensors", global_rank);
    path_join(path, sizeof path, dir, name);
    return safetensors_write(path, e, 2, meta);
}

typedef struct {
    char path[1600];
    int index, count;
    int64_t begin, end;
} ShardFile;

static int meta_ll(const SafetensorsFile *f, const char *key, long long *out) {
    const char *v = safetensors_metadata(f, key);
    char *end;
    if (!v || !*v) return 0;
    *out = strtoll(v, &end, 10);
    return *end == 0;
}

/* Reads one shard file's header into sf; *keep = 0 for a file of another model partition. */
static vfm_status scan_file(const DataParallel *dp, const char *path, ShardFile *sf, int *keep) {
    SafetensorsFile *f;
    VFM_TRY(safetensors_open(&f, path));
    memset(sf, 0, sizeof *sf);
    snprintf(sf->path, sizeof sf->path, "%s", path);
    *keep = 1;
    vfm_status s = VFM_OK;
    const char *format = safetensors_metadata(f, "format");
    const ParamTable *t = dp->table;
    if (format && strcmp(format, SHARD_FORMAT) == 0) {
        long long idx, cnt, b, e, total, tp, pp;
        char want[32];
        snprintf(want, sizeof want, "%016" PRIx64, table_fingerprint(t));
        const char *table = safetensors_metadata(f, "table");
        if (!meta_ll(f, "shard_index", &idx) || !meta_ll(f, "shard_count", &cnt) || !meta_ll(f, "begin", &b) ||
            !meta_ll(f, "end", &e) || !meta_ll(f, "total", &total) || !meta_ll(f, "tp_rank", &tp) ||
            !meta_ll(f, "pp_rank", &pp) || cnt < 1 || idx < 0 || idx >= cnt || b > e)
            s = vfm_fail(VFM_ERR_FORMAT, "%s: optimizer shard metadata is incomplete", path);
        else if (tp != dp->cfg.tp_rank || pp != dp->cfg.pp_rank)
            *keep = 0;
        else if (total != t->total || !table || strcmp(table, want) != 0)
            s = vfm_fail(VFM_ERR_FORMAT, "%s: optimizer state of another model (%lld parameters, table %s; this model has "
                         "%lld, table %s)", path, total, table ? table : "?", (long long)t->total, want);
        else {
            sf->index = (int)idx;
            sf->count = (int)cnt;
            sf->begin = b;
            sf->end = e;
        }
    } else {
        s = vfm_fail(VFM_ERR_FORMAT, "%s: not a vfm optimizer shard (metadata format '%s')", path, format ? format : "");
    }
    safetensors_close(f);
    return s;
}

/* dst[hi-lo] receives file elements [max(lo,begin), min(hi,end)) of one moment (k = 0: m, 1: v). */
static vfm_status read_overlap(const DataParallel *dp, const ShardFile *sf, int k, int64_t lo, int64_t hi, float *dst,
                               float **tmp, int64_t *tmp_n) {
    SafetensorsFile *f;
    VFM_TRY(safetensors_open(&f, sf->path));
    vfm_status s = VFM_OK;
    (void)dp;
    int64_t pb = sf->begin, pe = sf->end;
    int64_t a = pb > lo ? pb : lo, b = pe < hi ? pe : hi;
    do {
        if (a >= b) break;
        const char *name = k ? "exp_avg_sq" : "exp_avg";
        int idx = safetensors_find(f, name);
        if (idx < 0) {
            s = vfm_fail(VFM_ERR_FORMAT, "%s: tensor '%s' is missing", sf->path, name);
            break;
        }
        if (pe - pb > *tmp_n) {
            float *p = realloc(*tmp, (size_t)(pe - pb) * sizeof(float));
            if (!p) {
                s = vfm_fail(VFM_ERR_NOMEM, "optimizer load: %lld elements", (long long)(pe - pb));
                break;
            }
            *tmp = p;
            *tmp_n = pe - pb;
        }
        s = safetensors_read_f32(f, idx, *tmp, pe - pb);
        if (s == VFM_OK) memcpy(dst + (a - lo), *tmp + (a - pb), (size_t)(b - a) * sizeof(float));
    } while (0);
    safetensors_close(f);
    return s;
}

static int parse_optim_name(const char *name) {
    int rank;
    char tail[32];
    if (sscanf(name, "optim.%d.%31s", &rank, tail) == 2 && strcmp(tail, "safetensors") == 0 && rank >= 0) return rank;
    return -1;
}

vfm_status dp_optim_load(DataParallel *dp, Optimizer *o, const char *dir) {
    if (o->device != DEV_CPU) { /* read into a host copy of the moments, then copied to the device */
        Optimizer host;
        VFM_TRY(optimizer_host_copy(o, &host));
        vfm_status s = dp_optim_load(dp, &host, dir);
        if (s == VFM_OK) s = optimizer_copy_from_host(o, &host);
        optimizer_free(&host);
        return s;
    }
    DIR *d = opendir(dir);
    if (!d) return vfm_fail(VFM_ERR_IO, "%s: cannot open the checkpoint directory", dir);
    ShardFile *files = NULL;
    int n = 0, cap = 0;
    vfm_status s = VFM_OK;
    struct dirent *de;
    while (s == VFM_OK && (de = readdir(d))) {
        if (parse_optim_name(de->d_name) < 0) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            ShardFile *p = realloc(files, (size_t)cap * sizeof *files);
            if (!p) {
                s = vfm_fail(VFM_ERR_NOMEM, "optimizer load: file list");
                break;
            }
            files = p;
        }
        char path[1600];
        int keep;
        path_join(path, sizeof path, dir, de->d_name);
        s = scan_file(dp, path, &files[n], &keep);
        if (s == VFM_OK && keep) n++;
    }
    closedir(d);
    /* the files must come from one save and tile the buffer: shard i of count, each once */
    int count = n > 0 ? files[0].count : 0;
    unsigned char *seen = s == VFM_OK && count > 0 ? calloc((size_t)count, 1) : NULL;
    if (s == VFM_OK && n == 0)
        s = vfm_fail(VFM_ERR_FORMAT, "%s: no optimizer state (optim.<rank>.safetensors) for tp_rank %d, pp_rank %d", dir,
                     dp->cfg.tp_rank, dp->cfg.pp_rank);
    for (int i = 0; i < n && s == VFM_OK; i++) {
        int64_t b, e;
        zero_shard_range(dp->table->total, count, files[i].index, &b, &e);
        if (files[i].count != count)
            s = vfm_fail(VFM_ERR_FORMAT, "%s: optimizer shards from different saves (%d and %d shards)", dir, count,
                         files[i].count);
        else if (!seen || seen[files[i].index]++)
            s = vfm_fail(VFM_ERR_FORMAT, "%s: optimizer shard %d of %d appears twice", dir, files[i].index, count);
        else if (files[i].begin != b || files[i].end != e)
            s = vfm_fail(VFM_ERR_FORMAT, "%s: shard %d of %d covers [%lld, %lld), expected [%lld, %lld)", files[i].path,
                         files[i].index, count, (long long)files[i].begin, (long long)files[i].end, (long long)b,
                         (long long)e);
    }
    for (int j = 0; j < count && s == VFM_OK; j++)
        if (!seen[j]) s = vfm_fail(VFM_ERR_FORMAT, "%s: optimizer shard %d of %d is missing", dir, j, count);
    int64_t lo, hi, tmp_n = 0;
    float *tmp = NULL;
    held_range(dp, &lo, &hi);
    for (int i = 0; i < n && s == VFM_OK; i++)
        for (int k = 0; k < 2 && s == VFM_OK; k++)
            s = read_overlap(dp, &files[i], k, lo, hi, k ? o->v : o->m, &tmp, &tmp_n);
    free(tmp);
    free(seen);
    free(files);
    return s;
}
