/* What `vfm data inspect` learns by reading every sample of a dataset: per part name, how many
 * samples hold it, its format, dtypes and shapes (npy and safetensors headers, torch .pth / .pickle
 * tensors, json); and per sample its status under a config, found by the same encode_sample the
 * trainer uses, so a NaN latent or a value beyond DFM's bound is named here exactly as training
 * would skip it. Built on the length index (which shards, which samples, what a header says). */
#ifndef VFM_DATA_INSPECT_H
#define VFM_DATA_INSPECT_H

#include <stdint.h>

#include "core/error.h"
#include "data/loader/encode.h"
#include "data/loader/length_index.h"
#include "data/formats/tar.h"

/* One part as read. */
typedef struct {
    char format[16]; /* "npy", "safetensors", "torch.save", "pickle", "json", "bytes" */
    char dtype[16];  /* "float32", "bfloat16", ... ("" when not a tensor or unreadable) */
    int ndim;        /* -1 when not a tensor or unreadable */
    int refused;     /* a pickle naming a global off the allow-list (a security event; nothing run) */
    int64_t shape[16];
    char error[256]; /* why the header could not be read ("" when it could) */
} PartDesc;

/* Describes a part from its name and bytes (never fails: problems go to d->error). */
void inspect_describe_part(const TarPart *part, PartDesc *d);
/* "[3,1,16,24]" into buf. */
void inspect_shape_text(int ndim, const int64_t *shape, char *buf, size_t n);

typedef struct {
    char text[96];
    int64_t count;
} InspectCount;

/* The parts of one name over the whole dataset. */
typedef struct {
    char name[64];
    char format[16];
    int64_t count;       /* samples holding it */
    int64_t unreadable;  /* of those, whose header could not be read */
    int64_t refused;     /* of those, pickles refused for naming a global off the allow-list */
    InspectCount *dtypes, *shapes; /* most common first after inspect_dataset */
    int n_dtypes, n_shapes, cap_dtypes, cap_shapes;
} InspectPart;

typedef struct {
    InspectPart *parts; /* in order of first appearance */
    int n_parts, cap_parts;
    int32_t *skip;      /* [li->n_samples] EncodeSkip under the config (ENC_OK: usable) */
    char **reason;      /* [li->n_samples] why, or NULL */
    int64_t n_samples;
    int64_t samples_read;
} InspectReport;

/* Called after each shard (one call at a time, from any thread) with the samples of the shards
 * finished so far in shard order. */
typedef void (*InspectProgressFn)(void *ctx, int64_t samples_done, int64_t samples_total);

/* Reads every sample of every readable shard of li (threads shards at once). A sample the length
 * index already skips keeps that reason. Returns non-OK only when out of memory. */
vfm_status inspect_dataset(const LengthIndex *li, const EncodeConfig *ec, int threads, InspectProgressFn progress, void *ctx,
                           InspectReport *out);
void inspect_report_free(InspectReport *r);

#endif
