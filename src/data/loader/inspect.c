/* Reading every sample for `vfm data inspect` (see inspect.h). Shards are read in parallel, each
 * into its own tally, and the tallies merged in shard order, so the report does not depend on the
 * thread count. */
#include "data/loader/inspect.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fileutil.h"
#include "data/formats/npy.h"
#include "data/formats/safetensors.h"
#include "data/formats/torch_tensor.h"

/* ---- one part ---- */

static int name_in(const char *name, const char *const *list) {
    for (; *list; list++)
        if (strcmp(name, *list) == 0) return 1;
    return 0;
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

void inspect_shape_text(int ndim, const int64_t *shape, char *buf, size_t n) {
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < ndim && k < n; d++) k += (size_t)snprintf(buf + k, n - k, "%s%lld", d ? "," : "", (long long)shape[d]);
    if (k < n) snprintf(buf + k, n - k, "]");
}

static const char *st_dtype_name(DType t) {
    switch (t) {
    case DT_F32: return "float32";
    case DT_F64: return "float64";
    case DT_BF16: return "bfloat16";
    case DT_I32: return "int32";
    case DT_I64: return "int64";
    }
    return "?";
}

static void describe_tensor_header(const TarPart *p, PartDesc *d) {
    if (strcmp(d->format, "npy") == 0) {
        NpyArray a;
        if (npy_parse(p->data, p->size, p->name, &a) != VFM_OK) {
            snprintf(d->error, sizeof d->error, "%s", vfm_last_error());
            return;
        }
        snprintf(d->dtype, sizeof d->dtype, "%s", npy_dtype_name(a.dtype));
        d->ndim = a.ndim > 16 ? 16 : a.ndim;
        memcpy(d->shape, a.shape, (size_t)d->ndim * sizeof *d->shape);
        return;
    }
    SafetensorsFile *f = NULL;
    if (safetensors_open_memory(&f, p->data, p->size, p->name) != VFM_OK) {
        snprintf(d->error, sizeof d->error, "%s", vfm_last_error());
        return;
    }
    if (safetensors_count(f) != 1) {
        snprintf(d->error, sizeof d->error, "%s holds %d tensors, expected one", p->name, safetensors_count(f));
    } else {
        DType dt;
        int ndim;
        int64_t shape[VFM_MAX_DIMS];
        safetensors_info(f, 0, &dt, &ndim, shape);
        snprintf(d->dtype, sizeof d->dtype, "%s", st_dtype_name(dt));
        d->ndim = ndim;
        memcpy(d->shape, shape, (size_t)ndim * sizeof *shape);
    }
    safetensors_close(f);
}

/* pth / pickle: the whitelist unpickler rebuilds the tensor (nothing can run). */
static void describe_torch(const TarPart *p, PartDesc *d) {
    TorchTensor t;
    vfm_status s = torch_tensor_decode(p->data, p->size, p->name, &t);
    if (s != VFM_OK) {
        snprintf(d->error, sizeof d->error, "%s", vfm_last_error());
        d->refused = s == VFM_ERR_REFUSED;
        return;
    }
    snprintf(d->dtype, sizeof d->dtype, "%s", torch_dtype_name(t.dtype));
    d->ndim = t.ndim > 16 ? 16 : t.ndim;
    memcpy(d->shape, t.shape, (size_t)d->ndim * sizeof *d->shape);
    torch_tensor_free(&t);
}

void inspect_describe_part(const TarPart *p, PartDesc *d) {
    static const char *const pth[] = {"pth", ".pth", "latent.pth", NULL}, *const pickle[] = {"pickle", ".pickle", "text.pickle", NULL},
                             *const json[] = {"json", ".json", NULL};
    memset(d, 0, sizeof *d);
    d->ndim = -1;
    const char *f = ends_with(p->name, "npy")           ? "npy"
                    : ends_with(p->name, "safetensors") ? "safetensors"
                    : name_in(p->name, pth)             ? "torch.save"
                    : name_in(p->name, pickle)          ? "pickle"
                    : name_in(p->name, json)            ? "json"
                                                        : "bytes";
    snprintf(d->format, sizeof d->format, "%s", f);
    if (strcmp(f, "npy") == 0 || strcmp(f, "safetensors") == 0) describe_tensor_header(p, d);
    else if (strcmp(f, "torch.save") == 0 || strcmp(f, "pickle") == 0) describe_torch(p, d);
}

/* ---- tallies ---- */

static int count_add(InspectCount **v, int *n, int *cap, const char *text, int64_t k) {
    for (int i = 0; i < *n; i++)
        if (strcmp((*v)[i].text, text) == 0) {
            (*v)[i].count += k;
            return 0;
        }
    if (*n == *cap) {
        int c = *cap ? 2 * *cap : 8;
        InspectCount *p = realloc(*v, (size_t)c * sizeof *p);
        if (!p) return -1;
        *v = p;
        *cap = c;
    }
    snprintf((*v)[*n].text, sizeof (*v)[*n].text, "%s", text);
    (*v)[(*n)++].count = k;
    return 0;
}

static InspectPart *part_get(InspectReport *r, const char *name, const char *format) {
    for (int i = 0; i < r->n_parts; i++)
        if (strcmp(r->parts[i].name, name) == 0) return &r->parts[i];
    if (r->n_parts == r->cap_parts) {
        int c = r->cap_parts ? 2 * r->cap_parts : 8;
        InspectPart *p = realloc(r->parts, (size_t)c * sizeof *p);
        if (!p) return NULL;
        r->parts = p;
        r->cap_parts = c;
    }
    InspectPart *p = &r->parts[r->n_parts++];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    snprintf(p->format, sizeof p->format, "%s", format);
    return p;
}

static int tally_part(InspectReport *r, const char *name, const PartDesc *d) {
    InspectPart *p = part_get(r, name, d->format);
    if (!p) return -1;
    p->count++;
    if (d->error[0]) {
        p->unreadable++;
        p->refused += d->refused;
        return 0;
    }
    if (d->ndim < 0) return 0;
    char shape[96];
    inspect_shape_text(d->ndim, d->shape, shape, sizeof shape);
    if (count_add(&p->dtypes, &p->n_dtypes, &p->cap_dtypes, d->dtype, 1) != 0) return -1;
    return count_add(&p->shapes, &p->n_shapes, &p->cap_shapes, shape, 1);
}

static int merge_into(InspectReport *dst, const InspectReport *src) {
    for (int i = 0; i < src->n_parts; i++) {
        const InspectPart *s = &src->parts[i];
        InspectPart *d = part_get(dst, s->name, s->format);
        if (!d) return -1;
        d->count += s->count;
        d->unreadable += s->unreadable;
        d->refused += s->refused;
        for (int k = 0; k < s->n_dtypes; k++)
            if (count_add(&d->dtypes, &d->n_dtypes, &d->cap_dtypes, s->dtypes[k].text, s->dtypes[k].count) != 0) return -1;
        for (int k = 0; k < s->n_shapes; k++)
            if (count_add(&d->shapes, &d->n_shapes, &d->cap_shapes, s->shapes[k].text, s->shapes[k].count) != 0) return -1;
    }
    return 0;
}

static void parts_free(InspectReport *r) {
    for (int i = 0; i < r->n_parts; i++) {
        free(r->parts[i].dtypes);
        free(r->parts[i].shapes);
    }
    free(r->parts);
    r->parts = NULL;
    r->n_parts = r->cap_parts = 0;
}

void inspect_report_free(InspectReport *r) {
    parts_free(r);
    free(r->skip);
    for (int64_t i = 0; r->reason && i < r->n_samples; i++) free(r->reason[i]);
    free(r->reason);
    memset(r, 0, sizeof *r);
}

static int by_count(const void *a, const void *b) {
    const InspectCount *x = a, *y = b;
    if (x->count != y->count) return x->count > y->count ? -1 : 1;
    return strcmp(x->text, y->text);
}

/* ---- one shard ---- */

typedef struct {
    InspectReport tally; /* parts only */
    int64_t read;
    int failed;          /* out of memory */
    int finished;
} ShardTally;

static void read_shard(const LengthIndex *li, const EncodeConfig *ec, int s, InspectReport *out, ShardTally *t) {
    const LengthShard *sh = &li->shards[s];
    char path[2200];
    path_join(path, sizeof path, li->root, sh->rel);
    TarShard *ts = NULL;
    if (tar_shard_open(&ts, path) != VFM_OK) {
        for (int64_t i = sh->first; i < sh->first + sh->count; i++)
            if (li->samples[i].status == ENC_OK) {
                out->skip[i] = ENC_SKIP_READ;
                out->reason[i] = strdup(vfm_last_error());
            }
        return;
    }
    for (int64_t e = sh->first; e < sh->first + sh->count && !t->failed; e++) {
        const LengthEntry *le = &li->samples[e];
        TarSample smp;
        if (tar_shard_read_sample(ts, le->index, &smp) != VFM_OK) {
            if (le->status == ENC_OK) {
                out->skip[e] = ENC_SKIP_READ;
                out->reason[e] = strdup(vfm_last_error());
            }
            continue;
        }
        t->read++;
        for (int k = 0; k < smp.num_parts; k++) {
            PartDesc d;
            inspect_describe_part(&smp.parts[k], &d);
            if (tally_part(&t->tally, smp.parts[k].name, &d) != 0) t->failed = 1;
        }
        if (le->status == ENC_OK && strcmp(smp.key, le->key) != 0) {
            out->skip[e] = ENC_SKIP_READ;
            char why[512];
            snprintf(why, sizeof why, "sample %d holds key %s: the shard changed; run vfm data index", le->index, smp.key);
            out->reason[e] = strdup(why);
        } else if (le->status == ENC_OK) {
            EncodedSample es;
            EncodeSkip skip;
            char reason[512];
            if (encode_sample(ec, &smp, sh->rel, 0, &es, NULL, &skip, reason, sizeof reason) != VFM_OK) t->failed = 1;
            else if (skip == ENC_OK) encoded_sample_free(&es);
            else {
                out->skip[e] = skip;
                out->reason[e] = strdup(reason);
            }
        }
        tar_sample_free(&smp);
    }
    tar_shard_close(ts);
}

vfm_status inspect_dataset(const LengthIndex *li, const EncodeConfig *ec, int threads, InspectProgressFn progress, void *ctx,
                           InspectReport *out) {
    memset(out, 0, sizeof *out);
    const int64_t ns = li->n_samples;
    out->n_samples = ns;
    out->skip = calloc((size_t)(ns ? ns : 1), sizeof *out->skip);
    out->reason = calloc((size_t)(ns ? ns : 1), sizeof *out->reason);
    ShardTally *t = calloc((size_t)(li->n_shards ? li->n_shards : 1), sizeof *t);
    if (!out->skip || !out->reason || !t) {
        free(t);
        inspect_report_free(out);
        return vfm_fail(VFM_ERR_NOMEM, "inspect: out of memory");
    }
    for (int64_t i = 0; i < ns; i++) {
        out->skip[i] = li->samples[i].status;
        if (li->samples[i].reason) out->reason[i] = strdup(li->samples[i].reason);
    }
    int64_t done = 0;
    int next = 0; /* shards reported to progress, in order */
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads > 0 ? threads : 1)
    for (int s = 0; s < li->n_shards; s++) {
        if (!li->shards[s].error) read_shard(li, ec, s, out, &t[s]);
#pragma omp critical(inspect_progress)
        {
            t[s].finished = 1;
            while (next < li->n_shards && t[next].finished) done += li->shards[next++].count;
            if (progress) progress(ctx, done, ns);
        }
    }
    vfm_status st = VFM_OK;
    for (int s = 0; s < li->n_shards; s++) {
        if (t[s].failed || merge_into(out, &t[s].tally) != 0) st = vfm_fail(VFM_ERR_NOMEM, "inspect: out of memory");
        out->samples_read += t[s].read;
        parts_free(&t[s].tally);
    }
    free(t);
    for (int i = 0; i < out->n_parts; i++) {
        InspectPart *p = &out->parts[i];
        if (p->n_dtypes > 1) qsort(p->dtypes, (size_t)p->n_dtypes, sizeof *p->dtypes, by_count);
        if (p->n_shapes > 1) qsort(p->shapes, (size_t)p->n_shapes, sizeof *p->shapes, by_count);
    }
    if (progress) progress(ctx, ns, ns);
    if (st != VFM_OK) inspect_report_free(out);
    return st;
}
