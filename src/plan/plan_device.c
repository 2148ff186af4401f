/* The devices `vfm plan` knows (plan.h PlanDevice): published figures, each with its source, and the
 * calibration from a `vfm bench --profile` run on the user's own GPU. */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "plan/plan.h"

/* H100 SXM5 80GB (used as the reference for the rows below):
 *  - memory: 81559 MiB, what nvidia-smi reports as the board's total;
 *  - peak: 989.4 TFLOP/s dense bf16 (NVIDIA H100 datasheet: 1,979 with sparsity);
 *  - GEMM: 798 TFLOP/s, cuBLAS bf16 8192³ (public benchmarks, also measured on the H100 lent to this
 *    project: ../shared/research/perf-anchors.md), 80.7% of the peak;
 *  - attention: cuDNN's fused attention, non-causal, 8k tokens, as measured in the FlashAttention-3
 *    paper (arXiv 2407.08608 figs 5-6): forward 412 (head dim 64) / 600 (128), backward 432 / 518;
 *  - HBM3: 3.35 TB/s (datasheet);
 *  - NVLink 4: 900 GB/s per GPU both directions (datasheet), 450 each way;
 *  - network: DGX H100, eight ConnectX-7 at 400 Gb/s, one per GPU (DGX H100 user guide): 50 GB/s. */
#define H100_PEAK 989.4
#define GEMM_EFF (798.0 / H100_PEAK)

static const PlanDevice DEVICES[] = {
    {"h100-80gb", "NVIDIA H100 SXM 80GB", 0, 81559.0 * 1048576.0, H100_PEAK, GEMM_EFF, {412, 600}, {432, 518}, 3350,
     450, 50, NULL},
    /* H200 SXM 141GB: nvidia-smi's 143771 MiB; the H100's SMs and clocks (datasheet: the same 989.4
     * TFLOP/s), so the H100's GEMM and attention rates; HBM3e 4.8 TB/s (datasheet); NVLink 4 and the
     * DGX H200's ConnectX-7 as the H100's. */
    {"h200-141gb", "NVIDIA H200 SXM 141GB", 0, 143771.0 * 1048576.0, H100_PEAK, GEMM_EFF, {412, 600}, {432, 518},
     4800, 450, 50, NULL},
    /* B200 180GB: HGX B200 datasheet (1,440 GB for 8 GPUs; 2.25 PFLOP/s dense bf16 per GPU; HBM3e 8 TB/s;
     * NVLink 5 1.8 TB/s both directions); DGX B200 networks with eight 400 Gb/s ConnectX-7. No measured
     * GEMM or attention rates in research/: the H100's shares of the peak, scaled (an assumption). */
    {"b200-180gb", "NVIDIA B200 180GB", 0, 180e9, 2250, GEMM_EFF, {412 * 2250 / H100_PEAK, 600 * 2250 / H100_PEAK},
     {432 * 2250 / H100_PEAK, 518 * 2250 / H100_PEAK}, 8000, 900, 50, NULL},
    /* A100 SXM 80GB: nvidia-smi's 81920 MiB; 312 TFLOP/s dense bf16, HBM2e 2.039 TB/s, NVLink 3 600 GB/s
     * both directions (A100 datasheet); DGX A100: eight 200 Gb/s HDR adapters (25 GB/s per GPU). GEMM and
     * attention: the H100's shares of the peak (an assumption). */
    {"a100-80gb", "NVIDIA A100 SXM 80GB", 0, 81920.0 * 1048576.0, 312, GEMM_EFF, {412 * 312 / H100_PEAK, 600 * 312 / H100_PEAK},
     {432 * 312 / H100_PEAK, 518 * 312 / H100_PEAK}, 2039, 300, 25, NULL},
    /* vfm's CPU implementation: f32 weights, gradients, moments and activations, no workspaces, no
     * context; its memory is what tests/mpi/plan_memory.sh checks against runs. Its time is not a
     * model of any CPU (nominal rates, 1 TFLOP/s). */
    {"cpu", "vfm's CPU implementation (f32)", 1, 0, 1, 1, {1, 1}, {1, 1}, 100, 10, 10, NULL},
};
#define N_DEVICES ((int)(sizeof DEVICES / sizeof DEVICES[0]))

const char *plan_device_names(void) { return "h100-80gb, h200-141gb, b200-180gb, a100-80gb, cpu"; }

vfm_status plan_device_find(const char *name, PlanDevice *out) {
    for (int i = 0; i < N_DEVICES; i++)
        if (strcmp(DEVICES[i].name, name) == 0) {
            *out = DEVICES[i];
            return VFM_OK;
        }
    return vfm_fail(VFM_ERR_USAGE, "--gpu %s: not a device the planner knows (%s)", name, plan_device_names());
}

/* The seconds per step of the profile's rows named `op` (every device). */
static double op_seconds(json_t *profile, const char *op) {
    double s = 0;
    size_t i;
    json_t *row;
    json_array_foreach(profile, i, row) {
        const char *name = json_string_value(json_object_get(row, "op"));
        if (name && strcmp(name, op) == 0) s += json_number_value(json_object_get(row, "seconds_per_step"));
    }
    return s;
}

vfm_status plan_device_calibrate(PlanDevice *d, const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return vfm_fail(VFM_ERR_USAGE, "--calibrate %s: cannot open it", path);
    char line[1 << 16];
    json_t *j = NULL;
    while (!j && fgets(line, sizeof line, f))
        if (strncmp(line, "bench-json: ", 12) == 0) j = json_loads(line + 12, 0, NULL);
    fclose(f);
    if (!j) return vfm_fail(VFM_ERR_USAGE, "--calibrate %s: no `bench-json: {...}` line (the last line of vfm bench)", path);
    json_t *profile = json_object_get(j, "profile");
    double flops = json_number_value(json_object_get(j, "flops_per_step"));
    double attn = json_number_value(json_object_get(j, "attn_flops_per_step"));
    double lin = op_seconds(profile, "linear_forward") + op_seconds(profile, "linear_backward");
    double af = op_seconds(profile, "attention_forward"), ab = op_seconds(profile, "attention_backward");
    int has_profile = json_is_array(profile);
    json_decref(j);
    if (!has_profile || flops <= 0 || lin <= 0 || (attn > 0 && (af <= 0 || ab <= 0)))
        return vfm_fail(VFM_ERR_USAGE, "--calibrate %s: the bench-json line has no per-op profile (run vfm bench --profile) "
                        "or no FLOPs per step", path);
    /* flops_per_step is 3 x the forward's (bench.h): the linears do forward + backward of (flops - attn) */
    double gemm_tflops = (flops - attn) / lin / 1e12;
    d->gemm_efficiency = gemm_tflops / d->peak_tflops;
    if (attn > 0) { /* the forward's attention FLOPs are attn/3; the backward counts 2.5 x them */
        double fwd = attn / 3 / af / 1e12, bwd = 2.5 * attn / 3 / ab / 1e12;
        d->attn_fwd_tflops[0] = d->attn_fwd_tflops[1] = fwd;
        d->attn_bwd_tflops[0] = d->attn_bwd_tflops[1] = bwd;
    }
    d->calibrated = path;
    return VFM_OK;
}
