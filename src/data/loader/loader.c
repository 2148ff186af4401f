/* The WebDataset pack source (design §3 "Data"): the samples of one split of dataset.path (a
 * dataset directory, or a metadataset blending several: selection.h), the endless plan over the
 * usable ones (one dataset, a blend drawn from the seed, or, for validation, the datasets one
 * after another unshuffled), and reader threads that build this replica's upcoming packs
 * into a bounded ring ahead of the trainer. Replica r of R takes global packs
 * origin + r, origin + r + R, ...; slot k of the ring holds its k-th pack, so packs come out in
 * stream order whichever thread built them. The state is the global pack count the whole job
 * consumed (origin + consumed·R), so a resume at any world size continues the same stream.
 * A sample that fails when read is dropped from its pack and named once; a pack left empty is
 * passed over for this replica's next one. */
#include <jansson.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "core/fileutil.h"
#include "core/hash.h"
#include "core/log.h"
#include "core/timer.h"
#include "data/loader/encode.h"
#include "data/loader/length_index.h"
#include "data/loader/loader.h"
#include "data/loader/plan.h"
#include "data/loader/selection.h"

#define SKIP_LOG_LINES 100         /* skip lines printed per source before a summary takes over */
#define LOADER_SKIP_SHARE_FROM 100 /* samples read before dataset.max_skip_fraction is checked */

enum { SLOT_FREE, SLOT_BUILDING, SLOT_READY };

typedef struct Slot {
    int state;
    int64_t k;          /* this replica's stream position the slot holds */
    int64_t epoch;
    Pack pack;
    int dropped;        /* samples that failed when read */
    vfm_status status;  /* a failure that is not the data's fault (out of memory) */
    char error[1024];
} Slot;

typedef struct OpenShard {
    TarShard *shard;
    int refs;
    uint64_t used;
    char *error;        /* the shard could not be opened: every read fails with this */
} OpenShard;

typedef struct Loader {
    PackSource *src;    /* the source this loader implements (its pin_packs) */
    EncodeConfig ec;
    EncodeConfig *leaf_ec; /* [n_leaves] ec with each leaf dataset's name (sample uids) */
    PlanConfig pc;
    Selection *sel;
    int validation;     /* datasets one after another, unshuffled (Energon's val mode) */
    int64_t n_usable;
    int64_t *usable;    /* [n_usable] global entry (selection.h) of each usable sample */
    int32_t *usable_leaf; /* [n_usable] its leaf */
    int32_t *lengths;   /* [n_usable] padded tokens */
    Plan *plan;
    int64_t epoch_packs; /* packs in epoch 0 */
    int rank, world;

    pthread_mutex_t shard_mu;
    OpenShard *open;    /* [sel->n_shards] by global shard number */
    int n_open, max_open;
    uint64_t shard_clock;

    pthread_mutex_t mu; /* guards everything below, and the plan */
    pthread_cond_t ready, space;
    int n_workers, depth, n_threads, stop;
    pthread_t *threads;
    Slot *slots;        /* [depth] ring: position k lives in slots[k % depth] */
    int64_t origin;     /* global pack of position 0 without the rank offset */
    int64_t consumed;   /* positions the trainer took */
    int64_t next_build; /* next position to hand to a reader */
    int64_t last_epoch;
    int64_t *ids;       /* the synchronous reader's sample list (num_workers = 0) */
    int64_t *id_epochs; /* and their epochs */
    int ids_cap;

    uint8_t *named;     /* [sel->n_entries] 1 once a sample was named as skipped */
    LoaderSkip *skips;
    int n_skips, cap_skips, log_left, log_suppressed;
    int64_t skips_unlisted; /* skipped samples the list could not hold (out of memory) */
    /* the trainer's side (wds_next): samples read and skipped when read, and positions in a row
     * that gave no sample (a whole pass of them stops the source: see loader_give_up) */
    double max_skip_fraction;
    int64_t tried, read_skips, empty_run;
    int64_t bytes_read; /* atomic */
    char text_encoder[64];
} Loader;

/* ---- skipped samples ---- */


/* Records entry id as skipped (once) and names it in the log. Caller holds L->mu or is alone. */
static void note_skip(Loader *L, int64_t id, const char *reason, int at_load, int print) {
    if (L->named[id]) return;
    L->named[id] = 1;
    int64_t local;
    const LengthIndex *li = L->sel->datasets[selection_dataset_of(L->sel, id, &local)].index;
    const LengthEntry *e = &li->samples[local];
    const char *rel = length_index_shard_of(li, local);
    if (L->n_skips == L->cap_skips) {
        int cap = L->cap_skips ? 2 * L->cap_skips : 16;
        LoaderSkip *q = realloc(L->skips, (size_t)cap * sizeof *q);
        if (q) {
            L->skips = q, L->cap_skips = cap;
        } else if (L->skips_unlisted++ == 0) {
            log_warn("loader: out of memory for the list of skipped samples: %s:%s and later skips are counted but "
                     "not listed (vfm data inspect lists them all)", rel, e->key);
        }
    }
    if (L->n_skips < L->cap_skips) {
        LoaderSkip *s = &L->skips[L->n_skips++];
        snprintf(s->source, sizeof s->source, "%s:%s", rel, e->key);
        snprintf(s->reason, sizeof s->reason, "%s", reason);
        s->at_load = at_load;
        s->entry = id;
    }
    if (!print) return;
    if (L->log_left > 0) {
        L->log_left--;
        log_warn("skipping %s:%s: %s", rel, e->key, reason);
    } else {
        L->log_suppressed++;
    }
}

/* ---- shards: opened on first use, at most max_open at once (least recently used closed) ---- */

/* i: global shard number (dataset d's shard j is shard_base + j). */
static int shard_acquire(Loader *L, int i, const char *root, const char *rel, TarShard **out, char *reason, size_t rn) {
    pthread_mutex_lock(&L->shard_mu);
    OpenShard *o = &L->open[i];
    if (!o->shard && !o->error) {
        if (L->n_open >= L->max_open) {
            int victim = -1;
            for (int j = 0; j < L->sel->n_shards; j++)
                if (L->open[j].shard && L->open[j].refs == 0 && (victim < 0 || L->open[j].used < L->open[victim].used))
                    victim = j;
            if (victim >= 0) {
                tar_shard_close(L->open[victim].shard);
                L->open[victim].shard = NULL;
                L->n_open--;
            }
        }
        char path[2200];
        snprintf(path, sizeof path, "%s/%s", root, rel);
        if (tar_shard_open(&o->shard, path) == VFM_OK) L->n_open++;
        else o->error = strdup(vfm_last_error());
    }
    int ok = o->shard != NULL;
    if (ok) {
        o->refs++;
        o->used = ++L->shard_clock;
        *out = o->shard;
    } else {
        snprintf(reason, rn, "%s", o->error ? o->error : "cannot open the shard");
    }
    pthread_mutex_unlock(&L->shard_mu);
    return ok;
}

static void shard_release(Loader *L, int i) {
    pthread_mutex_lock(&L->shard_mu);
    L->open[i].refs--;
    pthread_mutex_unlock(&L->shard_mu);
}

/* ---- building one pack ---- */

/* Reads and encodes usable sample u for epoch; ENC_OK and *es filled, or a skip with reason. */
static vfm_status load_sample(Loader *L, int64_t u, int64_t epoch, EncodedSample *es, EncodeSkip *skip, char *reason,
                              size_t rn) {
    int64_t local;
    const SelDataset *ds = &L->sel->datasets[selection_dataset_of(L->sel, L->usable[u], &local)];
    const LengthEntry *e = &ds->index->samples[local];
    const char *rel = length_index_shard_of(ds->index, local);
    TarShard *sh;
    *skip = ENC_SKIP_READ;
    if (!shard_acquire(L, ds->shard_base + e->shard, ds->root, rel, &sh, reason, rn)) return VFM_OK;
    TarSample ts;
    vfm_status s = tar_shard_read_sample(sh, e->index, &ts);
    shard_release(L, ds->shard_base + e->shard);
    if (s != VFM_OK) {
        snprintf(reason, rn, "%s", vfm_last_error());
        return VFM_OK;
    }
    int64_t bytes = 0;
    for (int i = 0; i < ts.num_parts; i++) bytes += (int64_t)ts.parts[i].size;
    __atomic_fetch_add(&L->bytes_read, bytes, __ATOMIC_RELAXED);
    s = VFM_OK;
    if (strcmp(ts.key, e->key) != 0) {
        snprintf(reason, rn, "the shard changed since the length index was built (sample %d is '%s'); "
                 "run vfm data index", e->index, ts.key);
    } else {
        s = encode_sample(&L->leaf_ec[L->usable_leaf[u]], &ts, rel, (uint64_t)epoch, es, NULL, skip, reason, rn);
        if (s == VFM_OK && *skip == ENC_OK && es->info.tokens_padded != L->lengths[u]) {
            snprintf(reason, rn, "%d tokens (padded) when read, %d in the length index; run vfm data index",
                     es->info.tokens_padded, L->lengths[u]);
            *skip = ENC_SKIP_READ;
            encoded_sample_free(es);
        }
    }
    tar_sample_free(&ts);
    return s;
}

static vfm_status build_pack(Loader *L, const int64_t *items, const int64_t *epochs, int n, Pack *p, int *dropped) {
    pack_clear(p);
    VFM_TRY(pack_set_pinned(p, pack_source_pinned(L->src))); /* a GPU run: page-locked, its copy overlaps compute */
    p->pad_multiple = L->ec.pad_multiple;
    p->text_pad_multiple = 1;
    *dropped = 0;
    for (int i = 0; i < n; i++) {
        EncodedSample es;
        EncodeSkip skip;
        char reason[512] = "";
        VFM_TRY(load_sample(L, items[i], epochs[i], &es, &skip, reason, sizeof reason));
        if (skip != ENC_OK) {
            (*dropped)++;
            pthread_mutex_lock(&L->mu);
            note_skip(L, L->usable[items[i]], reason, 1, 1);
            pthread_mutex_unlock(&L->mu);
            continue;
        }
        vfm_status s = pack_append(p, &es);
        encoded_sample_free(&es);
        VFM_TRY(s);
    }
    return VFM_OK;
}

/* The samples of this replica's position k and their epochs (copied into *ids, *epochs). Caller
 * holds L->mu. */
static vfm_status plan_lookup(Loader *L, int64_t k, int64_t **ids, int64_t **epochs, int *cap, int *n, int64_t *epoch) {
    const int64_t *items, *item_epochs;
    int64_t g = L->origin + k * L->world + L->rank;
    VFM_TRY(plan_pack(L->plan, g, epoch, NULL, &items, &item_epochs, n));
    if (*n > *cap) {
        int64_t *q = realloc(*ids, (size_t)*n * sizeof *q);
        if (q) *ids = q;
        int64_t *r = realloc(*epochs, (size_t)*n * sizeof *r);
        if (r) *epochs = r;
        if (!q || !r) return vfm_fail(VFM_ERR_NOMEM, "loader: out of memory");
        *cap = *n;
    }
    memcpy(*ids, items, (size_t)*n * sizeof *items);
    memcpy(*epochs, item_epochs, (size_t)*n * sizeof *item_epochs);
    return VFM_OK;
}

static void *reader_main(void *arg) {
    Loader *L = arg;
    int64_t *ids = NULL, *epochs = NULL;
    int cap = 0;
    omp_set_num_threads(1); /* readers run side by side: no OpenMP team inside each (patchify is a copy) */
    pthread_mutex_lock(&L->mu);
    while (!L->stop) {
        if (L->next_build >= L->consumed + L->depth) {
            pthread_cond_wait(&L->space, &L->mu);
            continue;
        }
        int64_t k = L->next_build++;
        Slot *slot = &L->slots[k % L->depth];
        slot->state = SLOT_BUILDING;
        slot->k = k;
        int n = 0;
        vfm_status s = plan_lookup(L, k, &ids, &epochs, &cap, &n, &slot->epoch);
        pthread_mutex_unlock(&L->mu);
        if (s == VFM_OK) s = build_pack(L, ids, epochs, n, &slot->pack, &slot->dropped);
        pthread_mutex_lock(&L->mu);
        slot->status = s;
        if (s != VFM_OK) snprintf(slot->error, sizeof slot->error, "%s", vfm_last_error());
        slot->state = SLOT_READY;
        pthread_cond_broadcast(&L->ready);
    }
    pthread_mutex_unlock(&L->mu);
    free(ids);
    free(epochs);
    return NULL;
}

static void stop_readers(Loader *L) {
    pthread_mutex_lock(&L->mu);
    L->stop = 1;
    pthread_cond_broadcast(&L->space);
    pthread_mutex_unlock(&L->mu);
    for (int i = 0; i < L->n_threads; i++) pthread_join(L->threads[i], NULL);
    L->n_threads = 0;
}

/* Empties the ring and starts the readers at position 0 of the current origin. */
static vfm_status start_readers(Loader *L) {
    for (int i = 0; i < L->depth; i++) {
        L->slots[i].state = SLOT_FREE;
        L->slots[i].status = VFM_OK;
        pack_clear(&L->slots[i].pack);
    }
    L->consumed = L->next_build = 0;
    L->stop = 0;
    for (int i = 0; i < L->n_workers; i++) {
        if (pthread_create(&L->threads[i], NULL, reader_main, L) != 0) {
            stop_readers(L);
            return vfm_fail(VFM_ERR_INTERNAL, "loader: cannot start reader thread %d", i);
        }
        L->n_threads++;
    }
    return VFM_OK;
}

/* ---- PackSource ---- */

static vfm_status take_pack(Pack *out, Pack *built) {
    if (out->cu_seqlens && out->token_dim == built->token_dim && out->text_dim == built->text_dim) {
        Pack t = *out; /* the slot reuses the caller's buffers next time */
        *out = *built;
        *built = t;
    } else {
        pack_free(out);
        *out = *built;
        return pack_init(built, out->token_dim, out->text_dim, out->pad_multiple, out->text_pad_multiple);
    }
    return VFM_OK;
}

/* The samples skipped when read, for a message: "N samples skipped when read (first: a.tar:k: why;
 * ...)", the first three in dataset order (readers find them in any order, the message is the same). */
static void read_skip_summary(Loader *L, char *out, size_t n) {
    pthread_mutex_lock(&L->mu);
    size_t k = (size_t)snprintf(out, n, "%lld sample%s skipped when read", (long long)L->read_skips,
                                L->read_skips == 1 ? "" : "s");
    int shown = 0;
    int64_t after = -1; /* the entry named last */
    while (shown < 3 && k < n) {
        int next = -1;
        for (int i = 0; i < L->n_skips; i++)
            if (L->skips[i].at_load && L->skips[i].entry > after && (next < 0 || L->skips[i].entry < L->skips[next].entry))
                next = i;
        if (next < 0) break;
        k += (size_t)snprintf(out + k, n - k, "%s%s: %s", shown ? "; " : " (first: ", L->skips[next].source,
                              L->skips[next].reason);
        after = L->skips[next].entry;
        shown++;
    }
    if (shown && k < n) k += (size_t)snprintf(out + k, n - k, "%s)", L->read_skips > shown ? "; ..." : "");
    pthread_mutex_unlock(&L->mu);
}

/* Stops a source that cannot feed the run (docs/data-loading.md "Skipped samples"): when a whole
 * pass over this replica's share of the data gave no usable sample (every sample fails when read:
 * it would otherwise spin for ever), or when the share of samples skipped when read passes
 * dataset.max_skip_fraction, counted over the samples this replica has read, from the
 * LOADER_SKIP_SHARE_FROM-th on (a share of a handful says little). */
static vfm_status loader_give_up(Loader *L) {
    int64_t pass = (L->epoch_packs + L->world - 1) / L->world; /* this replica's positions in a pass */
    int whole_pass = L->empty_run >= (pass > 0 ? pass : 1);
    int too_many = L->tried >= LOADER_SKIP_SHARE_FROM && (double)L->read_skips > L->max_skip_fraction * (double)L->tried;
    if (!whole_pass && !too_many) return VFM_OK;
    char summary[1024];
    read_skip_summary(L, summary, sizeof summary);
    if (whole_pass)
        return vfm_fail(VFM_ERR_USAGE, "dataset %s: a whole pass over the data gave no usable sample: %s; see vfm data "
                        "inspect", L->sel->spec->source, summary);
    return vfm_fail(VFM_ERR_USAGE, "dataset %s: %s of %lld read (%.1f%%), more than dataset.max_skip_fraction = %g; "
                    "see vfm data inspect", L->sel->spec->source, summary, (long long)L->tried,
                    100.0 * (double)L->read_skips / (double)L->tried, L->max_skip_fraction);
}

static vfm_status wds_next(PackSource *src, Pack *out) {
    Loader *L = src->impl;
    for (;;) {
        Slot *slot = &L->slots[L->consumed % L->depth];
        if (L->n_workers == 0) { /* built here: the trainer waits for all of it */
            int n = 0;
            double t0 = time_now();
            slot->k = L->consumed;
            slot->status = plan_lookup(L, slot->k, &L->ids, &L->id_epochs, &L->ids_cap, &n, &slot->epoch);
            if (slot->status == VFM_OK)
                slot->status = build_pack(L, L->ids, L->id_epochs, n, &slot->pack, &slot->dropped);
            if (slot->status != VFM_OK) snprintf(slot->error, sizeof slot->error, "%s", vfm_last_error());
            src->stats.wait_seconds += time_now() - t0;
        } else {
            pthread_mutex_lock(&L->mu);
            if (!(slot->state == SLOT_READY && slot->k == L->consumed)) {
                double t0 = time_now();
                while (!(slot->state == SLOT_READY && slot->k == L->consumed)) pthread_cond_wait(&L->ready, &L->mu);
                src->stats.wait_seconds += time_now() - t0;
            }
            pthread_mutex_unlock(&L->mu);
        }
        if (slot->status != VFM_OK) return vfm_fail(slot->status, "%s", slot->error);
        int empty = slot->pack.n_samples == 0;
        int dropped = slot->dropped;
        int64_t epoch = slot->epoch;
        vfm_status taken = empty ? VFM_OK : take_pack(out, &slot->pack);
        pthread_mutex_lock(&L->mu);
        slot->state = SLOT_FREE;
        L->consumed++;
        L->last_epoch = epoch;
        pthread_cond_broadcast(&L->space);
        pthread_mutex_unlock(&L->mu);
        VFM_TRY(taken); /* the slot's new empty pack could not be made: the source stops here */
        src->stats.skipped += dropped;
        L->tried += dropped + (empty ? 0 : out->n_samples);
        L->read_skips += dropped;
        L->empty_run = empty ? L->empty_run + 1 : 0;
        VFM_TRY(loader_give_up(L));
        if (empty) continue;
        src->stats.packs++;
        src->stats.samples += out->n_samples;
        src->stats.tokens_real += out->cu_seqlens[out->n_samples];
        src->stats.tokens_padded += out->n_tokens;
        src->stats.capacity += L->ec.budget;
        return VFM_OK;
    }
}

static vfm_status wds_get_state(PackSource *src, char **json) {
    Loader *L = src->impl;
    pthread_mutex_lock(&L->mu);
    int64_t g = L->origin + L->consumed * L->world;
    int64_t epoch = L->last_epoch;
    pthread_mutex_unlock(&L->mu);
    json_t *j = json_pack("{s:s,s:I,s:I,s:s,s:s,s:I}", "kind", "webdataset", "global_pack", (json_int_t)g, "epoch",
                          (json_int_t)epoch, "dataset", L->ec.dataset, "split", L->sel->leaves[0].split,
                          "usable_samples", (json_int_t)L->n_usable);
    *json = j ? json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(j);
    return *json ? VFM_OK : vfm_fail(VFM_ERR_NOMEM, "loader: state");
}

static vfm_status wds_set_state(PackSource *src, const char *text) {
    Loader *L = src->impl;
    json_error_t err;
    json_t *j = json_loads(text, 0, &err);
    json_t *gp = j ? json_object_get(j, "global_pack") : NULL;
    const char *kind = j ? json_string_value(json_object_get(j, "kind")) : NULL;
    if (!j || !json_is_integer(gp) || json_integer_value(gp) < 0 || !kind || strcmp(kind, "webdataset") != 0) {
        json_decref(j);
        return vfm_fail(VFM_ERR_FORMAT, "checkpoint: the data-loader state is not a WebDataset position: %.120s", text);
    }
    int64_t g = json_integer_value(gp);
    json_t *nu = json_object_get(j, "usable_samples");
    if (json_is_integer(nu) && json_integer_value(nu) != L->n_usable)
        log_warn("the dataset changed since the checkpoint (%lld usable samples then, %lld now): the stream continues "
                 "at pack %lld of the new plan", (long long)json_integer_value(nu), (long long)L->n_usable, (long long)g);
    json_decref(j);
    stop_readers(L);
    L->origin = g;
    return start_readers(L);
}

static void wds_destroy(PackSource *src) {
    Loader *L = src->impl;
    if (L) {
        stop_readers(L);
        for (int i = 0; L->slots && i < L->depth; i++) pack_free(&L->slots[i].pack);
        free(L->slots);
        free(L->threads);
        for (int i = 0; L->open && i < L->sel->n_shards; i++) {
            tar_shard_close(L->open[i].shard);
            free(L->open[i].error);
        }
        free(L->open);
        plan_free(L->plan);
        selection_free(L->sel);
        free(L->leaf_ec);
        free(L->usable);
        free(L->usable_leaf);
        free(L->lengths);
        free(L->named);
        free(L->skips);
        free(L->ids);
        free(L->id_epochs);
        pthread_mutex_destroy(&L->mu);
        pthread_mutex_destroy(&L->shard_mu);
        pthread_cond_destroy(&L->ready);
        pthread_cond_destroy(&L->space);
        free(L);
    }
    free(src);
}

static int cmp_i32_desc(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x < y) - (x > y);
}

/* Decides which samples of the selection are usable under the config, names the others, sets
 * the bounds; *leaf_usable[l] gets each leaf's usable count. */
static vfm_status select_samples(Loader *L, PackSource *src, int64_t *leaf_usable) {
    const Selection *sel = L->sel;
    int64_t n = 0;
    for (int l = 0; l < sel->n_leaves; l++) n += sel->leaves[l].n_entries;
    L->usable = malloc((size_t)(n ? n : 1) * sizeof *L->usable);
    L->usable_leaf = malloc((size_t)(n ? n : 1) * sizeof *L->usable_leaf);
    L->lengths = malloc((size_t)(n ? n : 1) * sizeof *L->lengths);
    int32_t *text_rows = malloc((size_t)(n ? n : 1) * sizeof *text_rows);
    L->named = calloc((size_t)(sel->n_entries ? sel->n_entries : 1), 1);
    if (!L->usable || !L->usable_leaf || !L->lengths || !text_rows || !L->named) {
        free(text_rows);
        return vfm_fail(VFM_ERR_NOMEM, "loader: out of memory for %lld samples", (long long)n);
    }
    int print = L->rank == 0;
    for (int d = 0; d < sel->n_datasets; d++) {
        const LengthIndex *li = sel->datasets[d].index;
        for (int i = 0; i < li->n_shards; i++)
            if (li->shards[i].error && print)
                log_warn("skipping shard %s%s%s: %s", sel->n_datasets > 1 ? li->root : "", sel->n_datasets > 1 ? "/" : "",
                         li->shards[i].rel, li->shards[i].error);
    }
    int64_t count[ENC_SKIP_COUNT] = {0};
    int32_t min_len = INT32_MAX;
    for (int l = 0; l < sel->n_leaves; l++) {
        const SelLeaf *leaf = &sel->leaves[l];
        const SelDataset *ds = &sel->datasets[leaf->dataset];
        int64_t before = L->n_usable;
        for (int64_t k = 0; k < leaf->n_entries; k++) {
            int64_t local = leaf->entries[k], id = ds->entry_base + local;
            const LengthEntry *e = &ds->index->samples[local];
            EncodeLengths len;
            char reason[512];
            EncodeSkip skip = (EncodeSkip)e->status;
            if (skip == ENC_OK)
                skip = encode_lengths(&L->ec, e->shape, e->text_width, e->text_len, e->text_real, &len, reason,
                                      sizeof reason);
            else
                snprintf(reason, sizeof reason, "%s", e->reason);
            if (skip != ENC_OK) {
                count[skip]++;
                note_skip(L, id, reason, 0, print);
                continue;
            }
            L->usable[L->n_usable] = id;
            L->usable_leaf[L->n_usable] = l;
            L->lengths[L->n_usable] = len.tokens_padded;
            text_rows[L->n_usable] = len.text_rows;
            if (len.tokens_padded < min_len) min_len = len.tokens_padded;
            L->n_usable++;
        }
        leaf_usable[l] = L->n_usable - before;
    }
    src->stats.skipped = n - L->n_usable;
    if (L->n_usable == 0) {
        char summary[512] = "";
        size_t k = 0;
        for (int r = 1; r < ENC_SKIP_COUNT; r++)
            if (count[r] && k < sizeof summary)
                k += (size_t)snprintf(summary + k, sizeof summary - k, "%s%lld %s", k ? ", " : "", (long long)count[r],
                                      encode_skip_name((EncodeSkip)r));
        free(text_rows);
        return vfm_fail_at(VFM_ERR_USAGE, NULL, "dataset.path", sel->spec->source, "has no usable samples in split "
                           "'%s' (%lld in %d shards; skipped: %s); see vfm data inspect", sel->leaves[0].split,
                           (long long)n, sel->n_shards, k ? summary : "none");
    }
    int64_t max_samples = L->ec.budget / min_len;
    if (max_samples > L->n_usable) max_samples = L->n_usable;
    if (max_samples > INT32_MAX) max_samples = INT32_MAX;
    qsort(text_rows, (size_t)L->n_usable, sizeof *text_rows, cmp_i32_desc);
    int64_t max_text = 0;
    for (int64_t i = 0; i < max_samples; i++) max_text += text_rows[i];
    free(text_rows);
    src->max_tokens = L->ec.budget;
    src->max_samples = (int)max_samples;
    src->max_text = max_text;
    return VFM_OK;
}

/* The plan: one dataset (or validation: all of them one after another, unshuffled), or a blend. */
static vfm_status make_plan(Loader *L, const int64_t *leaf_usable) {
    const Selection *sel = L->sel;
    if (L->validation) L->pc.shuffle = 0;
    if (L->validation || sel->spec->mode == BLEND_NONE) return plan_create(&L->plan, &L->pc, L->lengths, L->n_usable);
    PlanSource *sources = calloc((size_t)sel->n_leaves, sizeof *sources);
    if (!sources) return vfm_fail(VFM_ERR_NOMEM, "loader: out of memory");
    int n = 0;
    int64_t first = 0;
    for (int l = 0; l < sel->n_leaves; l++) {
        const SelLeaf *leaf = &sel->leaves[l];
        if (leaf_usable[l] == 0) {
            if (L->rank == 0)
                log_warn("blend: %s (split %s) has no usable samples; the blend goes on without it",
                         sel->datasets[leaf->dataset].root, leaf->split);
            continue;
        }
        char id[300];
        snprintf(id, sizeof id, "%d/%s", l, leaf->split); /* stable across machines: not a path */
        sources[n++] = (PlanSource){first, leaf_usable[l], leaf->weight, leaf->repetitions, hash_string64(id)};
        first += leaf_usable[l];
    }
    PlanBlend blend = {sel->spec->mode == BLEND_EPOCHIZED ? PLAN_BLEND_EPOCHIZED : PLAN_BLEND_WEIGHT, n, sources};
    vfm_status s = plan_create_blend(&L->plan, &L->pc, &blend, L->lengths, L->n_usable);
    free(sources);
    return s;
}

/* The caption encoder a vfm-prepared dataset names in vfm_dataset.json (NULL when none). */
static const char *dataset_text_encoder(Loader *L, const char *root) {
    char path[1200];
    path_join(path, sizeof path, root, "vfm_dataset.json");
    json_error_t err;
    json_t *meta = path_exists(path) ? json_load_file(path, 0, &err) : NULL;
    const char *enc = json_string_value(json_object_get(meta, "caption_encoder"));
    if (enc) snprintf(L->text_encoder, sizeof L->text_encoder, "%s", enc);
    json_decref(meta);
    return enc ? L->text_encoder : NULL;
}

static const char *selection_pixel_space(const Selection *sel) {
    for (int d = 0; d < sel->n_datasets; d++) {
        const char *ps = length_index_pixel_space(sel->datasets[d].index);
        if (ps) return ps;
    }
    return NULL;
}

/* Logs what the source reads (rank 0). */
static void log_selection(const Loader *L, const int64_t *leaf_usable, int64_t packs0) {
    const Selection *sel = L->sel;
    int64_t n = 0;
    for (int l = 0; l < sel->n_leaves; l++) n += sel->leaves[l].n_entries;
    const char *mode = L->validation ? "validation: one after another, unshuffled"
                       : sel->spec->mode == BLEND_WEIGHT ? "blend by weight"
                       : sel->spec->mode == BLEND_EPOCHIZED ? "epochized blend" : NULL;
    log_info("dataset %s split %s: %lld samples, %lld usable, %lld skipped; %lld packs per epoch (epoch 0) of at most "
             "%lld tokens%s%s", sel->spec->source, sel->leaves[0].split, (long long)n, (long long)L->n_usable,
             (long long)(n - L->n_usable), (long long)packs0, (long long)L->ec.budget, mode ? "; " : "",
             mode ? mode : "");
    for (int l = 0; sel->spec->is_metadataset && l < sel->n_leaves; l++) {
        const SelLeaf *leaf = &sel->leaves[l];
        char *sub = json_object_size(leaf->subflavors) ? json_dumps(leaf->subflavors, JSON_COMPACT) : NULL;
        char share[64] = "";
        if (!L->validation && sel->spec->mode == BLEND_WEIGHT) snprintf(share, sizeof share, ", weight %.4g", leaf->weight);
        if (!L->validation && sel->spec->mode == BLEND_EPOCHIZED) snprintf(share, sizeof share, ", repetitions %.4g", leaf->repetitions);
        log_info("  %s (split %s): %lld samples, %lld usable%s%s%s", sel->datasets[leaf->dataset].root, leaf->split,
                 (long long)leaf->n_entries, (long long)leaf_usable[l], share, sub ? ", subflavors " : "",
                 sub ? sub : "");
        free(sub);
    }
}

vfm_status loader_config_from(LoaderConfig *lc, const Config *cfg) {
    memset(lc, 0, sizeof *lc);
    VFM_TRY(encode_config_from(&lc->ec, cfg));
    lc->n_workers = (int)cfg_int(cfg, "dataset.num_workers");
    lc->pc.seed = (uint64_t)cfg_int(cfg, "rng.seed");
    lc->pc.shuffle = cfg_bool(cfg, "dataset.shuffle");
    lc->pc.buffer_size = cfg_int(cfg, "dataset.packing_buffer_size");
    lc->pc.budget = cfg_int(cfg, "dataset.task_encoder_seq_length");
    lc->max_skip_fraction = cfg_float(cfg, "dataset.max_skip_fraction");
    snprintf(lc->path, sizeof lc->path, "%s", cfg_str(cfg, "dataset.path"));
    snprintf(lc->split, sizeof lc->split, "%s", cfg_str(cfg, "dataset.split"));
    return VFM_OK;
}

vfm_status webdataset_source_open(PackSource **out, const Config *cfg, const char *split, int validation, int rank,
                                  int world) {
    LoaderConfig lc;
    VFM_TRY(loader_config_from(&lc, cfg));
    return webdataset_source_from(out, &lc, split, validation, rank, world);
}

vfm_status webdataset_source_from(PackSource **out, const LoaderConfig *lc, const char *split, int validation, int rank,
                                  int world) {
    *out = NULL;
    if (world < 1 || rank < 0 || rank >= world)
        return vfm_fail(VFM_ERR_INTERNAL, "loader: replica %d of %d", rank, world);
    PackSource *src = calloc(1, sizeof *src);
    Loader *L = calloc(1, sizeof *L);
    if (!src || !L) {
        free(src);
        free(L);
        return vfm_fail(VFM_ERR_NOMEM, "loader: out of memory");
    }
    pthread_mutex_init(&L->mu, NULL);
    pthread_mutex_init(&L->shard_mu, NULL);
    pthread_cond_init(&L->ready, NULL);
    pthread_cond_init(&L->space, NULL);
    src->impl = L;
    L->src = src;
    src->kind = "webdataset";
    src->next = wds_next;
    src->get_state = wds_get_state;
    src->set_state = wds_set_state;
    src->destroy = wds_destroy;
    L->rank = rank;
    L->world = world;
    L->validation = validation;
    L->log_left = SKIP_LOG_LINES;
    L->n_workers = lc->n_workers;
    L->depth = L->n_workers == 0 ? 1 : 2 * L->n_workers + 2;
    L->pc = lc->pc;
    L->max_skip_fraction = lc->max_skip_fraction;
    struct rlimit rl;
    L->max_open = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY ? (int)(rl.rlim_cur / 4) : 256;
    if (L->max_open < 8) L->max_open = 8;
    if (L->max_open > 1024) L->max_open = 1024;

    vfm_status s = VFM_OK;
    L->ec = lc->ec;
    src->token_dim = encode_token_dim(&L->ec);
    src->text_dim = L->ec.text_dim;
    const char *path = lc->path;
    int64_t *leaf_usable = NULL;
    if (s == VFM_OK)
        s = selection_open(&L->sel, path, split, L->ec.dataset, L->n_workers > 0 ? L->n_workers : 1, rank == 0);
    if (s == VFM_OK) {
        L->leaf_ec = malloc((size_t)L->sel->n_leaves * sizeof *L->leaf_ec);
        leaf_usable = calloc((size_t)L->sel->n_leaves, sizeof *leaf_usable);
        if (!L->leaf_ec || !leaf_usable) s = vfm_fail(VFM_ERR_NOMEM, "loader: out of memory");
        for (int l = 0; s == VFM_OK && l < L->sel->n_leaves; l++) {
            L->leaf_ec[l] = L->ec;
            snprintf(L->leaf_ec[l].dataset, sizeof L->leaf_ec[l].dataset, "%s", L->sel->leaves[l].name);
        }
    }
    if (s == VFM_OK) s = select_samples(L, src, leaf_usable);
    if (s == VFM_OK) s = make_plan(L, leaf_usable);
    if (s == VFM_OK) {
        L->open = calloc((size_t)(L->sel->n_shards ? L->sel->n_shards : 1), sizeof *L->open);
        L->slots = calloc((size_t)L->depth, sizeof *L->slots);
        L->threads = calloc((size_t)(L->n_workers ? L->n_workers : 1), sizeof *L->threads);
        if (!L->open || !L->slots || !L->threads) s = vfm_fail(VFM_ERR_NOMEM, "loader: out of memory");
    }
    if (s == VFM_OK) {
        pthread_mutex_lock(&L->mu);
        s = plan_epoch_packs(L->plan, 0, &L->epoch_packs);
        pthread_mutex_unlock(&L->mu);
        src->epoch_packs = L->epoch_packs;
    }
    if (s == VFM_OK) {
        for (int i = 0; i < L->depth; i++)
            if (s == VFM_OK) s = pack_init(&L->slots[i].pack, src->token_dim, src->text_dim, L->ec.pad_multiple, 1);
        s = start_readers(L);
    }
    if (s != VFM_OK) {
        free(leaf_usable);
        wds_destroy(src);
        return s;
    }
    if (L->log_suppressed > 0)
        log_warn("... and %d more skipped samples (vfm data inspect %s lists them all)", L->log_suppressed, path);
    src->pixel_space_json = selection_pixel_space(L->sel);
    src->text_encoder = dataset_text_encoder(L, L->sel->datasets[0].root);
    if (rank == 0) log_selection(L, leaf_usable, L->epoch_packs);
    free(leaf_usable);
    *out = src;
    return VFM_OK;
}

vfm_status webdataset_source_create(PackSource **out, const Config *cfg, int rank, int world) {
    LoaderConfig lc;
    VFM_TRY(loader_config_from(&lc, cfg));
    return webdataset_source_from(out, &lc, lc.split, 0, rank, world);
}

/* ---- extras (loader.h) ---- */

static Loader *as_loader(const PackSource *src) {
    return src && src->kind && strcmp(src->kind, "webdataset") == 0 ? src->impl : NULL;
}

const char *loader_pixel_space(const PackSource *src) {
    Loader *L = as_loader(src);
    return L ? selection_pixel_space(L->sel) : NULL;
}

int loader_skipped(const PackSource *src, LoaderSkip **out) {
    *out = NULL;
    Loader *L = as_loader(src);
    if (!L) return 0;
    pthread_mutex_lock(&L->mu);
    int n = L->n_skips;
    *out = malloc((size_t)(n ? n : 1) * sizeof **out);
    if (*out) memcpy(*out, L->skips, (size_t)n * sizeof **out);
    else n = 0;
    pthread_mutex_unlock(&L->mu);
    return n;
}

int loader_info(const PackSource *src, LoaderInfo *info) {
    memset(info, 0, sizeof *info);
    Loader *L = as_loader(src);
    if (!L) return 0;
    pthread_mutex_lock(&L->mu);
    info->n_shards = L->sel->n_shards;
    info->n_samples = L->sel->n_entries;
    info->n_usable = L->n_usable;
    info->skips_unlisted = L->skips_unlisted;
    info->bytes_read = __atomic_load_n(&L->bytes_read, __ATOMIC_RELAXED);
    info->epoch = L->last_epoch;
    info->epoch_packs = L->epoch_packs;
    info->n_datasets = L->sel->n_datasets;
    info->pad_multiple = L->ec.pad_multiple;
    info->num_workers = L->n_workers;
    info->index_path = L->sel->datasets[0].index->cache_path;
    info->index_origin = (int)L->sel->datasets[0].index->origin;
    pthread_mutex_unlock(&L->mu);
    return 1;
}

