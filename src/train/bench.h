/* `vfm bench`: the speed of full training steps (forward, backward, gradient clipping, AdamW) of a
 * configuration on mock data, with the model FLOP rate, MFU against the device's dense bf16 peak,
 * peak memory and, on request, the time per op. Also writes the fixed-input forward check that
 * bench/torch_peer.py compares itself with before it times the PyTorch peer (docs/bench.md). */
#ifndef VFM_BENCH_H
#define VFM_BENCH_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "model/dit.h"
#include "ops/ops_profile.h"

typedef struct BenchOptions {
    const char *config_path;        /* YAML file or NULL */
    const char *const *overrides;   /* a.b.c=value, applied after the file */
    int n_overrides;
    int seq;                        /* > 0: every pack is one mock sample of this many tokens */
    int text;                       /* with seq: text rows of that sample */
    int warmup, steps;              /* untimed and timed training steps */
    int profile;                    /* per-op time breakdown of the timed steps */
    const char *check_dir;          /* NULL, or where to write the forward check for the PyTorch peer */
    int check_only;                 /* write the check and time nothing (no optimizer, no big activations) */
    double peak_tflops;             /* > 0: the peak MFU is measured against (else the device table) */
    const char *attention;          /* NULL or "auto", "cudnn", "reference": the CUDA attention; figures
                                     * measured on the reference kernel are refused unless "reference" */
} BenchOptions;

#define BENCH_MAX_PROFILE 64

typedef struct BenchResult {
    char device[160];               /* "cpu, 16 threads" or the GPU's name */
    char precision[96];
    char peak_source[128];          /* where peak_tflops came from */
    char attention[64];             /* which attention served the timed steps (CUDA), "" on the CPU */
    double peak_tflops;
    DiTConfig model;
    int64_t params;                 /* trainable parameters */
    int64_t packs_per_step, samples_per_step, tokens_per_step, padded_tokens_per_step, text_rows_per_step;
    int warmup, steps;
    double seconds;                 /* the timed steps, together */
    double ms_per_step, tokens_per_s, samples_per_s;
    double flops_per_step, attn_flops_per_step; /* 3 × forward matmul FLOPs; the attention part of it */
    double tflops, mfu, mfu_no_attn;
    double data_ms_per_step;        /* making the mock packs (not in the timed steps) */
    double loss_first, loss_last;   /* of the timed steps */
    DeviceMemory mem;               /* the training device's memory at the end (peak over the run) */
    size_t host_peak;               /* the process's peak resident set */
    size_t weights_bytes, acts_bytes;
    int n_profile;
    OpsProfileEntry profile[BENCH_MAX_PROFILE]; /* summed over the timed steps, largest first */
} BenchResult;

vfm_status bench_run(const BenchOptions *o, BenchResult *r);

/* On CUDA, after the timed steps: which attention served them (into served[n]: "cuDNN",
 * "reference kernel" or "reference kernel (asked)") and whether their figures may be reported.
 * Figures the reference kernel measured (reference_calls > 0; tens of seconds per step at 8k
 * tokens) are not vfm's speed: VFM_ERR_UNSUPPORTED unless asked is "reference" (--attention). */
vfm_status bench_attention_verdict(const char *asked, int64_t reference_calls, char *served, size_t n);

/* Dense bf16 peak of a device by name (TFLOP/s) and which table row matched; a name the table does
 * not know gets the H100 SXM figure, said so in *source. */
double bench_peak_tflops(const char *device_name, const char **source);

#endif
