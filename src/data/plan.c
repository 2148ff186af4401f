/* Epoch plans and the endless pack stream (see plan.h): Philox shuffles, first-fit-decreasing
 * bins over a segment tree (O(n log n) per buffer), and a small cache of epoch plans with the
 * cumulative pack counts that map a global pack number to its epoch. */
#include "data/plan.h"

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
    free(p->pack_start);
    memset(p, 0, sizeof *p);
}

vfm_status plan_epoch(const PlanConfig *pc, const int32_t *lengths, int64_t n, int64_t epoch, EpochPlan *out) {
    memset(out, 0, sizeof *out);
    out->epoch = epoch;
    out->n_items = n;
    int64_t buf = pc->buffer_size > 0 ? pc->buffer_size : 1;
    int64_t *order = malloc((size_t)(n ? n : 1) * sizeof *order);
    int64_t *bin = malloc((size_t)(n ? n : 1) * sizeof *bin);
    int32_t *blen = malloc((size_t)(buf < n ? buf : (n ? n : 1)) * sizeof *blen);
    out->items = malloc((size_t)(n ? n : 1) * sizeof *out->items);
    out->pack_start = malloc((size_t)(n + 1) * sizeof *out->pack_start);
    int64_t *count = malloc((size_t)(buf < n ? buf : (n ? n : 1)) * sizeof *count);
    int64_t *bin_order = malloc((size_t)(buf < n ? buf : (n ? n : 1)) * sizeof *bin_order);
    int64_t *fill = malloc((size_t)(buf < n ? buf : (n ? n : 1)) * sizeof *fill);
    int64_t *ffd_order = malloc((size_t)(buf < n ? buf : (n ? n : 1)) * sizeof *ffd_order);
    vfm_status s = VFM_OK;
    if (!order || !bin || !blen || !out->items || !out->pack_start || !count || !bin_order || !fill || !ffd_order) {
        s = vfm_fail(VFM_ERR_NOMEM, "plan: out of memory for %lld samples", (long long)n);
        goto done;
    }
    for (int64_t i = 0; i < n; i++) {
        order[i] = i;
        if (lengths[i] < 1 || lengths[i] > pc->budget) {
            s = vfm_fail(VFM_ERR_INTERNAL, "plan: sample %lld has length %d outside [1, %lld]", (long long)i, lengths[i],
                         (long long)pc->budget);
            goto done;
        }
    }
    if (pc->shuffle) philox_shuffle(order, n, pc->seed, order_uid(epoch));
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
            int64_t k = ffd_order[q];
            out->items[fill[bin[k]]++] = order[b0 + k];
        }
        at = pos;
    }
    out->n_packs = packs;
done:
    free(order);
    free(bin);
    free(blen);
    free(count);
    free(bin_order);
    free(fill);
    free(ffd_order);
    if (s != VFM_OK) epoch_plan_free(out);
    return s;
}

/* ---- the endless stream ---- */

#define PLAN_CACHE 3

struct Plan {
    PlanConfig pc;
    int32_t *lengths;
    int64_t n;
    int64_t *first_pack; /* [known + 1]: first global pack of each epoch computed so far */
    int64_t known, cap;
    EpochPlan cache[PLAN_CACHE];
    int cache_valid[PLAN_CACHE];
    int64_t cache_clock[PLAN_CACHE], clock;
};

vfm_status plan_create(Plan **out, const PlanConfig *pc, const int32_t *lengths, int64_t n) {
    *out = NULL;
    if (n <= 0) return vfm_fail(VFM_ERR_USAGE, "plan: no usable samples");
    Plan *p = calloc(1, sizeof *p);
    if (!p) return vfm_fail(VFM_ERR_NOMEM, "plan: out of memory");
    p->pc = *pc;
    p->n = n;
    p->lengths = malloc((size_t)n * sizeof *p->lengths);
    p->cap = 16;
    p->first_pack = malloc((size_t)p->cap * sizeof *p->first_pack);
    if (!p->lengths || !p->first_pack) {
        plan_free(p);
        return vfm_fail(VFM_ERR_NOMEM, "plan: out of memory");
    }
    memcpy(p->lengths, lengths, (size_t)n * sizeof *lengths);
    p->first_pack[0] = 0;
    *out = p;
    return VFM_OK;
}

void plan_free(Plan *p) {
    if (!p) return;
    for (int i = 0; i < PLAN_CACHE; i++) epoch_plan_free(&p->cache[i]);
    free(p->lengths);
    free(p->first_pack);
    free(p);
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
        VFM_TRY(plan_epoch(&p->pc, p->lengths, p->n, epoch, &p->cache[slot]));
        p->cache_valid[slot] = 1;
    }
    p->cache_clock[slot] = ++p->clock;
    *out = &p->cache[slot];
    return VFM_OK;
}

/* Extends first_pack until epoch `epoch` is known. */
static vfm_status know_epoch(Plan *p, int64_t epoch) {
    while (p->known <= epoch) {
        EpochPlan *ep;
        VFM_TRY(epoch_plan_get(p, p->known, &ep));
        if (p->known + 2 > p->cap) {
            int64_t *q = realloc(p->first_pack, (size_t)(p->cap * 2) * sizeof *q);
            if (!q) return vfm_fail(VFM_ERR_NOMEM, "plan: out of memory");
            p->first_pack = q;
            p->cap *= 2;
        }
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

vfm_status plan_pack(Plan *p, int64_t g, int64_t *epoch, int64_t *pack_in_epoch, const int64_t **items, int *n_items) {
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
    *n_items = (int)(ep->pack_start[k + 1] - ep->pack_start[k]);
    return VFM_OK;
}
