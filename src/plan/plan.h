/* The layout planner behind `vfm plan` (docs/plan.md): for a model, a sequence length and a number of
 * GPUs, every parallel layout vfm can run (TP, SP, CP with each cp_comm_type, PP with V, DP with each
 * sharding strategy, recomputation plans), each with its peak memory per GPU and its step time, best
 * first.
 *
 * Memory comes from the code that holds it: the activations from the model's own arena layout
 * (dit_activation_plan: each layer carves its own), the training state from the sharding strategy's
 * bytes (dp_memory_bytes) as vfm's buffers hold them, the pipeline's micro-batches in flight from the
 * schedule itself (pp_schedule_build). Time comes from the model's FLOP count per layer
 * (dit_rank_forward_flops) and bytes sent per layer (dit_comm_bytes) over a device table of published
 * figures (plan_device.c, each with its source), or a calibration measured by `vfm bench --profile`.
 *
 * Floors: src/plan sits between cli and train (it reads train's layout checks). */
#ifndef VFM_PLAN_H
#define VFM_PLAN_H

#include <stdint.h>

#include "model/dit.h"
#include "parallel/recompute.h"
#include "parallel/sharding.h"
#include "train/train_parallel.h"

/* ---- devices (plan_device.c) ------------------------------------------------------------------- */
typedef struct PlanDevice {
    const char *name;            /* h100-80gb, h200-141gb, b200-180gb, a100-80gb, cpu */
    const char *label;           /* "NVIDIA H100 SXM 80GB" */
    int cpu;                     /* 1: vfm's CPU implementation (f32 everything, no workspaces): the memory check */
    double memory_bytes;         /* what the device has (nvidia-smi's total) */
    double peak_tflops;          /* dense bf16 tensor-core peak */
    double gemm_efficiency;      /* a large bf16 GEMM's share of the peak */
    double attn_fwd_tflops[2];   /* fused attention forward at head dim 64 and 128 */
    double attn_bwd_tflops[2];   /* backward (counted as 2.5 x the forward's FLOPs, FlashAttention's rule) */
    double hbm_gb_s;             /* memory bandwidth, GB/s */
    double intra_gb_s;           /* one GPU's NVLink bandwidth per direction, GB/s */
    double inter_gb_s;           /* one GPU's network bandwidth between nodes per direction, GB/s */
    const char *calibrated;      /* NULL, or the file the GEMM and attention rates were measured in */
} PlanDevice;

/* The table's row (VFM_ERR_USAGE naming the choices when there is none). */
vfm_status plan_device_find(const char *name, PlanDevice *out);
/* "h100-80gb | h200-141gb | ..." */
const char *plan_device_names(void);
/* Replaces the GEMM efficiency and the attention rates with those measured by `vfm bench --profile`
 * (its `bench-json:` line in `path`, with "profile" and the FLOPs per step): GEMM = the linear
 * layers' FLOPs over their ops' time; attention = its FLOPs over the attention ops' time. */
vfm_status plan_device_calibrate(PlanDevice *d, const char *path);

/* ---- a request ---------------------------------------------------------------------------------- */
/* Which keys the user fixed (the search keeps them), each with its value. */
typedef struct PlanFixed {
    int tp, sp, cp, cp_type, a2a_size, pp, vp; /* 0: free; otherwise the value (sp, cp_type: value + 1) */
    int sharding;                              /* 0: free; otherwise DpSharding + 1 */
    int recompute;                             /* 1: the three recompute keys as given */
    char rc_granularity[16], rc_method[16];
    int rc_layers;
    int overlap_grad_reduce;                   /* 0: free (the planner turns it on); 1: false; 2: true */
} PlanFixed;

typedef struct PlanRequest {
    DiTConfig model;
    int64_t seq;             /* tokens of one sample; a pack holds one sample */
    int64_t text;            /* its text rows (cross-attention) */
    int pad_multiple;        /* dataset.pad_multiple: every sample is padded to lcm(it, TP·CP) */
    int gpus, gpus_per_node;
    int64_t global_batch;    /* packs per step over the job */
    int ema;                 /* ema.enabled: an fp32 copy of the (sharded) weights */
    PlanDevice dev;
    double intra_gb_s, inter_gb_s; /* the bandwidth keys, or the device's */
    PlanFixed fixed;
    double sample_flops;     /* the whole model's forward over one sample (filled by the search) */
} PlanRequest;

/* ---- one layout ----------------------------------------------------------------------------------- */
typedef struct PlanLayout {
    TrainLayout l;           /* tp, sp, cp, cp_type, a2a_size, pp, vp */
    int dp;
    DpSharding sharding;
    RecomputeConfig rc;
    int64_t microbatches;    /* per replica and step: global_batch / dp */
    int overlap_grad_reduce; /* ddp.overlap_grad_reduce */
} PlanLayout;

/* Bytes per GPU, the stage that holds the most (under PP). */
typedef struct PlanMemory {
    int stage;               /* the pipeline stage these are of */
    double params, grads, optimizer, ema, transient; /* the training state (dp_memory_bytes, + the bf16 copy) */
    double activations;      /* the arenas allocated: slots (and the model's own under PP) + recomputation scratch */
    double activation_peak;  /* their high-water mark in a step: the slots in flight + the scratch */
    double slot, scratch;    /* one slot's bytes, the scratch's */
    int slots_in_flight;     /* the schedule's most micro-batch·chunk pairs held (1 without PP) */
    double buffers;          /* communication: NCCL's buffers per communicator, the pipeline's messages */
    double workspace;        /* cuBLASLt's and cuDNN's workspaces */
    double allowance;        /* the CUDA context and the allocator (stated, not measured) */
    double total;
} PlanMemory;

/* Seconds per step, by part (the bottleneck stage's micro-batch times M, plus what the step adds). */
typedef struct PlanTime {
    double gemm, attention, elementwise, recompute; /* compute (recompute: the replayed forward) */
    double tp, cp, pp_p2p;                          /* exposed communication inside the micro-batches */
    double bubble;                                  /* PP: (P-1)/V micro-batch times of idle stages */
    double dp;                                      /* exposed gradient reduction and parameter gathers */
    double optimizer;                               /* AdamW, the weight copy, the EMA */
    double step;
    double tokens_per_second_per_gpu, model_tflops_per_gpu;
    const char *dominant;                           /* the largest part's name */
} PlanTime;

/* The parts of a step time in a fixed order, with their names ("GEMMs", "PP bubble", ...). */
enum { PLAN_TIME_PARTS = 10 };
void plan_time_parts(const PlanTime *t, const char **names, double *seconds);

typedef struct PlanResult {
    PlanLayout layout;
    PlanMemory mem;
    PlanTime time;
    int fits;
    double over_bytes;       /* total − the device's memory when it does not fit */
} PlanResult;

/* Memory and time of one layout, and whether it fits (plan_evaluate.c). VFM_ERR_USAGE when the
 * layout does not build (the model's split rules, pp_check_layers, the schedule's M ≥ P with V > 1). */
vfm_status plan_evaluate(const PlanRequest *r, const PlanLayout *pl, PlanResult *out);

/* ---- the search (plan_search.c) --------------------------------------------------------------------- */
typedef struct PlanList {
    PlanResult *items;       /* those that fit, fastest first, then those that do not, closest first */
    int n, n_fit, cap;
    int64_t considered;      /* layouts evaluated */
} PlanList;
/* Every layout for the request. VFM_ERR_USAGE with one line when the world size admits none (the
 * global batch not divisible by any DP size, TP·PP·CP dividing nothing, the fixed keys). */
vfm_status plan_search(const PlanRequest *r, PlanList *out);
void plan_list_free(PlanList *l);

/* ---- describing a layout (plan_layout.c) ------------------------------------------------------------ */
/* "TP2+SP × CP4 (p2p) × DP32, ZeRO-1, recompute full uniform 1" */
void plan_layout_name(const PlanLayout *pl, char *out, size_t n);
/* The `vfm train` overrides of a layout: every parallel, sharding and recompute key, as key=value. */
typedef struct PlanOverride {
    char key[64];
    char value[64];
} PlanOverride;
enum { PLAN_MAX_OVERRIDES = 16 };
int plan_layout_overrides(const PlanLayout *pl, PlanOverride *out);

#endif
