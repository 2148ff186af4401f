/* Epoch plans and the endless pack stream (see plan.h): Philox shuffles, first-fit-decreasing
 * bins over a segment tree (O(n log n) per buffer), blended orders drawn from the seed, and a
 * small cache of epoch plans with the cumulative pack counts (and, for a weighted blend, each
 * dataset's position) that map a global pack number to its epoch. */
#include "data/loader/plan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/hash.h"
#include "core/philox.h"

/* Fisher–Yates over a[n], draws keyed (seed, RNG_STREAM_DATA), counter (i, uid): the same
 * (seed, uid, n) always gives the same permutation. */
static void philox_shuffle(int64_t *a, int64_t n, uint64_t seed, uint64_t uid) {
    uint32_t key[2];
    philox_key(seed, RNG_STREAM_DATA, key);
    for (int64_t i = n - 1; i > 0; i--) {
        uint32_t ctr[4], x[4];
        philox_counter((uint64_t)i & 0xffffffffu, (uint32_t)((uint64_t)i >> 32), uid, ctr);
        philox4x32_10(ctr, key, x);
        uint64_t r = ((uint64_t)x[0] << 32) | x[1];
        int64_t j = (int64_t)(r % (uint64_t)(i + 1)); /* bias <= n / 2^64 */
        int64_t t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

static uint64_t order_uid(int64_t epoch) { return hash_combine64(hash_string64("vfm.plan.order"), (uint64_t)epoch); }
static uint64_t bins_uid(int64_t epoch, int64_t buffer) {
    return hash_combine64(hash_combine64(hash_string64("vfm.plan.bins"), (uint64_t)epoch), (uint64_t)buffer);
}

static _Thread_local const int32_t *g_sort_len;

/* Longest first; ties by index. */
static int by_length_desc(const void *a, const void *b) {
    int64_t i = *(const int64_t *)a, j = *(const int64_t *)b;
    int32_t li = g_sort_len[i], lj = g_sort_len[j];
    if (li != lj) return li > lj ? -1 : 1;
    return (i > j) - (i < j);
}

/* First-fit-decreasing; order[n] gets the items longest first (the order they were placed in). */
static int64_t first_fit_decreasing(const int32_t *lengths, int64_t n, int64_t budget, int64_t *bin, int64_t *order) {
    if (n <= 0) return 0;
    int64_t leaves = 1;
    while (leaves < n) leaves *= 2;
    /* tree[v] = most room left in any bin under node v; bins not opened yet have all the room */
    int64_t *tree = malloc((size_t)(2 * leaves) * sizeof *tree);
    if (!tree) return -1;
    for (int64_t i = 0; i < n; i++) order[i] = i;
    g_sort_len = lengths;
    qsort(order, (size_t)n, sizeof *order, by_length_desc);
    for (int64_t v = 0; v < 2 * leaves; v++) tree[v] = budget;
    int64_t n_bins = 0;
    for (int64_t k = 0; k < n; k++) {
        int64_t i = order[k], need = lengths[i], v = 1;
        while (v < leaves) v = tree[2 * v] >= need ? 2 * v : 2 * v + 1; /* leftmost bin with room */
        int64_t b = v - leaves;
        bin[i] = b;
        if (b + 1 > n_bins) n_bins = b + 1;
        tree[v] -= need;
        for (v /= 2; v >= 1; v /= 2) tree[v] = tree[2 * v] > tree[2 * v + 1] ? tree[2 * v] : tree[2 * v + 1];
    }
    free(tree);
    return n_bins;
}

int64_t plan_first_fit_decreasing(const int32_t *lengths, int64_t n, int64_t budget, int64_t *bin) {
    int64_t *order = malloc((size_t)(n > 0 ? n : 1) * sizeof *order);
    if (!order) return -1;
    int64_t nb = first_fit_decreasing(lengths, n, budget, bin, order);
    free(order);
    return nb;
}

void epoch_plan_free(EpochPlan *p) {
    free(p->items);
    free(p->item_epoch);
    free(p->pack_start);
    memset(p, 0, sizeof *p);
}

/* Packs the stream order[m] (usable numbers; oepoch[m] their epochs) buffer by buffer into out. */
static vfm_status pack_order(const PlanConfig *pc, const int32_t *lengths, const int64_t *order, const int64_t *oepoch,
                             int64_t m_total, int64_t epoch, EpochPlan *out) {
    memset(out, 0, sizeof *out);
    out->epoch = epoch;
    out->n_items = m_total;
    int64_t n = m_total;
    int64_t buf = pc->buffer_size > 0 ? pc->buffer_size : 1;
    size_t scratch = (size_t)(buf < n ? buf : (n ? n : 1));
    int64_t *bin = malloc(scratch * sizeof *bin);
    int32_t *blen = malloc(scratch * sizeof *blen);
    out->items = malloc((size_t)(n ? n : 1) * sizeof *out->items);
    out->item_epoch = malloc((size_t)(n ? n : 1) * sizeof *out->item_epoch);
    out->pack_start = malloc((size_t)(n + 1) * sizeof *out->pack_start);
    int64_t *count = malloc(scratch * sizeof *count);
    int64_t *bin_order = malloc(scratch * sizeof *bin_order);
    int64_t *fill = malloc(scratch * sizeof *fill);
    int64_t *ffd_order = malloc(scratch * sizeof *ffd_order);
    vfm_status s = VFM_OK;
    if (!bin || !blen || !out->items || !out->item_epoch || !out->pack_start || !count || !bin_order || !fill ||
        !ffd_order) {
        s = vfm_fail(VFM_ERR_NOMEM, "plan: out of memory for %lld samples", (long long)n);
        goto done;
    }
    out->pack_start[0] = 0;
    int64_t at = 0, packs = 0;
    for (int64_t b0 = 0, buffer = 0; b0 < n; b0 += buf, buffer++) {
        int64_t m = n - b0 < buf ? n - b0 : buf;
        for (int64_t k = 0; k < m; k++) blen[k] = lengths[order[b0 + k]];
        int64_t nb = first_fit_decreasing(blen, m, pc->budget, bin, ffd_order);
        if (nb < 0) {
            s = vfm_fail(VFM_ERR_NOMEM, "plan: out of memory");
            goto done;
        }
        /* members of each bin in first-fit-decreasing order: longest first, ties in buffer order */
        for (int64_t k = 0; k < nb; k++) count[k] = 0, bin_order[k] = k;
        for (int64_t k = 0; k < m; k++) count[bin[k]]++;
        if (pc->shuffle) philox_shuffle(bin_order, nb, pc->seed, bins_uid(epoch, buffer));
        /* fill[b] = where bin b starts among this buffer's items, bins laid out in bin_order */
        int64_t pos = at;
        for (int64_t q = 0; q < nb; q++) {
            int64_t b = bin_order[q];
            fill[b] = pos;
            pos += count[b];
            out->pack_start[++packs] = pos;
        }
        for (int64_t q = 0; q < m; q++) {
            int64_t k = ffd_order[q], slot = fill[bin[k]]++;
            out->items[slot] = order[b0 + k];
            out->item_epoch[slot] = oepoch ? oepoch[b0 + k] : epoch;
        }
        at = pos;
    }
    out->n_packs = packs;
done:
    free(bin);
    free(blen);
    free(count);
    free(bin_order);
    free(fill);
    free(ffd_order);
    if (s != VFM_OK) epoch_plan_free(out);
    return s;
}

static vfm_status check_lengths(const PlanConfig *pc, const int32_t *lengths, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (lengths[i] < 1 || lengths[i] > pc->budget)
            return vfm_fail(VFM_ERR_INTERNAL, "plan: sample %lld has length %d outside [1, %lld]", (long long)i,
                            lengths[i], (long long)pc->budget);
    return VFM_OK;
}

vfm_status plan_epoch(const PlanConfig *pc, const int32_t *lengths, int64_t n, int64_t epoch, EpochPlan *out) {
    memset(out, 0, sizeof *out);
    VFM_TRY(check_lengths(pc, lengths, n));
    int64_t *order = malloc((size_t)(n ? n : 1) * sizeof *order);
    if (!order) return vfm_fail(VFM_ERR_NOMEM, "plan: out of memory for %lld samples", (long long)n);
    for (int64_t i = 0; i < n; i++) order[i] = i;
    if (pc->shuffle) philox_shuffle(order, n, pc->seed, order_uid(epoch));
    vfm_status s = pack_order(pc, lengths, order, NULL, n, epoch, out);
    free(order);
    return s;
}

/* ---- blends ---- */

static uint64_t blend_uid(int64_t chunk) { return hash_combine64(hash_string64("vfm.plan.blend"), (uint64_t)chunk); }
static uint64_t source_uid(uint64_t id, int64_t epoch) {
    return hash_combine64(hash_combine64(hash_string64("vfm.plan.source"), id), (uint64_t)epoch);
}

/* A uniform double in [0, 1) for position i of a chunk. */
static double blend_uniform(uint64_t seed, int64_t chunk, int64_t i) {
    uint32_t key[2], ctr[4], x[4];
    philox_key(seed, RNG_STREAM_DATA, key);
    philox_counter((uint64_t)i & 0xffffffffu, (uint32_t)((uint64_t)i >> 32), blend_uid(chunk), ctr);
    philox4x32_10(ctr, key, x);
    return (double)((((uint64_t)x[0] << 32) | x[1]) >> 11) * 0x1.0p-53;
}

/* Samples a source gives per chunk of an epochized blend: Energon's RepeatDataset length. */
static int64_t epochized_share(const PlanSource *src) {
    double whole = floor(src->repetitions);
    return (int64_t)whole * src->count + (int64_t)floor((double)src->count * (src->repetitions - whole));
}

/* Its own epochs a source starts per chunk of an epochized blend. */
static int64_t epochized_passes(const PlanSource *src) { return (int64_t)ceil(src->repetitions); }

typedef struct {
    int64_t *perm;    /* [count] the current epoch's order of the source */
    int64_t epoch;    /* whose order perm holds (-1: none) */
} SourceOrder;

/* Usable number and epoch of the j-th sample drawn from a source, its k-th own epoch being
 * (epoch_base + j / count). */
static void source_item(const PlanConfig *pc, const PlanSource *src, SourceOrder *so, int64_t j, int64_t epoch_base,
                        int64_t *item, int64_t *epoch) {
    int64_t e = epoch_base + j / src->count;
    if (so->epoch != e) {
        for (int64_t i = 0; i < src->count; i++) so->perm[i] = i;
        if (pc->shuffle) philox_shuffle(so->perm, src->count, pc->seed, source_uid(src->id, e));
        so->epoch = e;
    }
    *item = src->first + so->perm[j % src->count];
    *epoch = e;
}

/* The blended order of chunk c. counts[n_sources]: samples each source gave before this chunk
 * (a weighted blend; updated to the end of the chunk). */
static vfm_status blend_order(const PlanConfig *pc, const PlanBlend *bl, int64_t chunk, int64_t *counts,
                              int64_t **order_out, int64_t **epoch_out, int64_t *m_out) {
    int d_n = bl->n_sources;
    const PlanSource *src = bl->sources;
    int64_t m = 0;
    for (int d = 0; d < d_n; d++) m += bl->mode == PLAN_BLEND_EPOCHIZED ? epochized_share(&src[d]) : src[d].count;
    int64_t *order = malloc((size_t)(m ? m : 1) * sizeof *order), *oepoch = malloc((size_t)(m ? m : 1) * sizeof *oepoch);
    SourceOrder *so = calloc((size_t)d_n, sizeof *so);
    int64_t *taken = calloc((size_t)d_n, sizeof *taken), *share = calloc((size_t)d_n, sizeof *share);
    double *w = calloc((size_t)d_n, sizeof *w);
    vfm_status s = order && oepoch && so && taken && share && w ? VFM_OK : vfm_fail(VFM_ERR_NOMEM, "plan: out of memory");
    for (int d = 0; s == VFM_OK && d < d_n; d++) {
        so[d].perm = malloc((size_t)src[d].count * sizeof *so[d].perm);
        so[d].epoch = -1;
        if (!so[d].perm) s = vfm_fail(VFM_ERR_NOMEM, "plan: out of memory");
        if (bl->mode == PLAN_BLEND_EPOCHIZED) {
            share[d] = epochized_share(&src[d]);
            w[d] = (double)src[d].count * src[d].repetitions; /* Energon: len × repetitions, 0 once used up */
        } else {
            w[d] = src[d].weight;
        }
    }
    for (int64_t i = 0; s == VFM_OK && i < m; i++) {
        double total = 0;
        int last = -1;
        for (int d = 0; d < d_n; d++)
            if (bl->mode != PLAN_BLEND_EPOCHIZED || taken[d] < share[d]) total += w[d], last = d;
        double target = blend_uniform(pc->seed, chunk, i) * total, cum = 0;
        int pick = last;
        for (int d = 0; d < d_n; d++) {
            if (bl->mode == PLAN_BLEND_EPOCHIZED && taken[d] >= share[d]) continue;
            cum += w[d];
            if (target < cum) {
                pick = d;
                break;
            }
        }
        if (bl->mode == PLAN_BLEND_EPOCHIZED)
            source_item(pc, &src[pick], &so[pick], taken[pick], chunk * epochized_passes(&src[pick]), &order[i], &oepoch[i]);
        else
            source_item(pc, &src[pick], &so[pick], counts[pick] + taken[pick], 0, &order[i], &oepoch[i]);
        taken[pick]++;
    }
    if (s == VFM_OK && bl->mode == PLAN_BLEND_WEIGHT)
        for (int d = 0; d < d_n; d++) counts[d] += taken[d];
    for (int d = 0; so && d < d_n; d++) free(so[d].perm);
    free(so);
    free(taken);
    free(share);
    free(w);
    if (s != VFM_OK) {
        free(order);
        free(oepoch);
        return s;
    }
    *order_out = order;
    *epoch_out = oepoch;
    *m_out = m;
    return VFM_OK;
}

/* ---- the endless stream ---- */

#define PLAN_CACHE 3

struct Plan {
    PlanConfig pc;
    PlanBlend blend;     /* mode PLAN_SINGLE for one dataset */
    PlanSource *sources; /* blend.sources points here */
    int32_t *lengths;
    int64_t n;
    int64_t *first_pack; /* [known + 1]: first global pack of each epoch computed so far */
    int64_t *counts;     /* weighted blend: [(known + 1) · n_sources] samples each source gave before epoch e */
    int64_t known, cap;
    EpochPlan cache[PLAN_CACHE];
    int cache_valid[PLAN_CACHE];
    int64_t cache_clock[PLAN_CACHE], clock;
};

vfm_status plan_create(Plan **out, const PlanConfig *pc, const int32_t *lengths, int64_t n) {
    return plan_create_blend(out, pc, NULL, lengths, n);
}

vfm_status plan_create_blend(Plan **out, const PlanConfig *pc, const PlanBlend *blend, const int32_t *lengths, int64_t n) {
    *out = NULL;
    if (n <= 0) return vfm_fail(VFM_ERR_USAGE, "plan: no usable samples");
    VFM_TRY(check_lengths(pc, lengths, n));
    PlanBlend single = {PLAN_SINGLE, 0, NULL};
    const PlanBlend *bl = blend && blend->mode != PLAN_SINGLE ? blend : &single;
    if (bl->mode != PLAN_SINGLE) {
        int64_t covered = 0, chunk = 0;
        for (int d = 0; d < bl->n_sources; d++) {
            const PlanSource *src = &bl->sources[d];
            if (src->count <= 0 || src->first < 0 || src->first + src->count > n)
                return vfm_fail(VFM_ERR_INTERNAL, "plan: blend source %d covers [%lld, +%lld) of %lld samples", d,
                                (long long)src->first, (long long)src->count, (long long)n);
            if (!(bl->mode == PLAN_BLEND_WEIGHT ? src->weight > 0 : src->repetitions > 0))
                return vfm_fail(VFM_ERR_INTERNAL, "plan: blend source %d has no weight", d);
            if (src->first != covered)
                return vfm_fail(VFM_ERR_INTERNAL, "plan: blend source %d does not follow the one before", d);
            covered += src->count;
            chunk += bl->mode == PLAN_BLEND_EPOCHIZED ? epochized_share(src) : src->count;
        }
        if (bl->n_sources < 1 || covered != n)
            return vfm_fail(VFM_ERR_INTERNAL, "plan: the blend's sources cover %lld of %lld samples", (long long)covered,
                            (long long)n);
        if (chunk <= 0)
            return vfm_fail(VFM_ERR_USAGE, "blend_epochized: the repetitions give an epoch without samples");
    }
    Plan *p = calloc(1, sizeof *p);
    if (!p) return vfm_fail(VFM_ERR_NOMEM, "plan: out of memory");
    p->pc = *pc;
    p->n = n;
    p->lengths = malloc((size_t)n * sizeof *p->lengths);
    p->cap = 16;
    p->first_pack = malloc((size_t)p->cap * sizeof *p->first_pack);
    int d_n = bl->mode != PLAN_SINGLE ? bl->n_sources : 0;
    p->sources = malloc((size_t)(d_n ? d_n : 1) * sizeof *p->sources);
    p->counts = calloc((size_t)p->cap * (size_t)(d_n ? d_n : 1), sizeof *p->counts);
    if (!p->lengths || !p->first_pack || !p->sources || !p->counts) {
        plan_free(p);
        return vfm_fail(VFM_ERR_NOMEM, "plan: out of memory");
    }
    memcpy(p->lengths, lengths, (size_t)n * sizeof *lengths);
    if (d_n) memcpy(p->sources, bl->sources, (size_t)d_n * sizeof *p->sources);
    p->blend = (PlanBlend){bl->mode, d_n, p->sources};
    p->first_pack[0] = 0;
    *out = p;
    return VFM_OK;
}

void plan_free(Plan *p) {
    if (!p) return;
    for (int i = 0; i < PLAN_CACHE; i++) epoch_plan_free(&p->cache[i]);
    free(p->lengths);
    free(p->first_pack);
    free(p->sources);
    free(p->counts);
    free(p);
}

/* Computes epoch e's plan (e <= known: a weighted blend needs the sources' positions at its start,
 * and records those at its end when e == known). */
static vfm_status compute_epoch(Plan *p, int64_t epoch, EpochPlan *out) {
    if (p->blend.mode == PLAN_SINGLE) return plan_epoch(&p->pc, p->lengths, p->n, epoch, out);
    int d_n = p->blend.n_sources;
    int64_t *counts = malloc((size_t)d_n * sizeof *counts), *order = NULL, *oepoch = NULL, m = 0;
    if (!counts) return vfm_fail(VFM_ERR_NOMEM, "plan: out of memory");
    memcpy(counts, p->counts + epoch * d_n, (size_t)d_n * sizeof *counts);
    vfm_status s = blend_order(&p->pc, &p->blend, epoch, counts, &order, &oepoch, &m);
    if (s == VFM_OK) s = pack_order(&p->pc, p->lengths, order, oepoch, m, epoch, out);
    if (s == VFM_OK && epoch == p->known) memcpy(p->counts + (epoch + 1) * d_n, counts, (size_t)d_n * sizeof *counts);
    free(counts);
    free(order);
    free(oepoch);
    return s;
}

/* The cached plan of epoch e (computed when absent). */
static vfm_status epoch_plan_get(Plan *p, int64_t epoch, EpochPlan **out) {
    int slot = -1;
    for (int i = 0; i < PLAN_CACHE; i++)
        if (p->cache_valid[i] && p->cache[i].epoch == epoch) slot = i;
    if (slot < 0) {
        slot = 0;
        for (int i = 0; i < PLAN_CACHE; i++) {
            if (!p->cache_valid[i]) {
                slot = i;
                break;
            }
            if (p->cache_clock[i] < p->cache_clock[slot]) slot = i;
        }
        epoch_plan_free(&p->cache[slot]);
        p->cache_valid[slot] = 0;
        VFM_TRY(compute_epoch(p, epoch, &p->cache[slot]));
        p->cache_valid[slot] = 1;
    }
    p->cache_clock[slot] = ++p->clock;
    *out = &p->cache[slot];
    return VFM_OK;
}

/* Extends first_pack (and the sources' positions) until epoch `epoch` is known. */
static vfm_status know_epoch(Plan *p, int64_t epoch) {
    int d_n = p->blend.n_sources;
    while (p->known <= epoch) {
        if (p->known + 2 > p->cap) {
            int64_t cap = p->cap * 2;
            int64_t *q = realloc(p->first_pack, (size_t)cap * sizeof *q);
            if (!q) return vfm_fail(VFM_ERR_NOMEM, "plan: out of memory");
            p->first_pack = q;
            int64_t *c = realloc(p->counts, (size_t)cap * (size_t)(d_n ? d_n : 1) * sizeof *c);
            if (!c) return vfm_fail(VFM_ERR_NOMEM, "plan: out of memory");
            p->counts = c;
            p->cap = cap;
        }
        EpochPlan *ep;
        VFM_TRY(epoch_plan_get(p, p->known, &ep));
        p->first_pack[p->known + 1] = p->first_pack[p->known] + ep->n_packs;
        p->known++;
    }
    return VFM_OK;
}

vfm_status plan_epoch_packs(Plan *p, int64_t epoch, int64_t *n_packs) {
    VFM_TRY(know_epoch(p, epoch));
    *n_packs = p->first_pack[epoch + 1] - p->first_pack[epoch];
    return VFM_OK;
}

vfm_status plan_pack(Plan *p, int64_t g, int64_t *epoch, int64_t *pack_in_epoch, const int64_t **items,
                     const int64_t **item_epochs, int *n_items) {
    if (g < 0) return vfm_fail(VFM_ERR_INTERNAL, "plan: pack %lld", (long long)g);
    while (p->first_pack[p->known] <= g) VFM_TRY(know_epoch(p, p->known));
    int64_t lo = 0, hi = p->known - 1; /* the epoch e with first_pack[e] <= g < first_pack[e+1] */
    while (lo < hi) {
        int64_t mid = (lo + hi + 1) / 2;
        if (p->first_pack[mid] <= g) lo = mid;
        else hi = mid - 1;
    }
    EpochPlan *ep;
    VFM_TRY(epoch_plan_get(p, lo, &ep));
    int64_t k = g - p->first_pack[lo];
    *epoch = lo;
    if (pack_in_epoch) *pack_in_epoch = k;
    *items = ep->items + ep->pack_start[k];
    if (item_epochs) *item_epochs = ep->item_epoch + ep->pack_start[k];
    *n_items = (int)(ep->pack_start[k + 1] - ep->pack_start[k]);
    return VFM_OK;
}
