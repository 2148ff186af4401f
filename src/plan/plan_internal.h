/* What the planner's files share (plan.h is the interface). */
#ifndef VFM_PLAN_INTERNAL_H
#define VFM_PLAN_INTERNAL_H

#include "plan/plan.h"

/* Rows of the pack: one sample of r->seq tokens padded as the encoder pads it, to a multiple of
 * lcm(dataset.pad_multiple, TP·CP). */
int64_t plan_pack_rows(const PlanRequest *r, const PlanLayout *pl);
/* One pipeline stage of a structure (TP, PP, V), described once (no memory): the model of its
 * blocks, and the activation bytes already carved for it, by dtype and recomputation plan (the
 * search asks for the same ones for every strategy). */
typedef struct PlanStage {
    DiT m;
    int n_memo;
    struct {
        DType dt;
        RecomputeConfig rc;
        size_t slot, scratch;
    } memo[32];
} PlanStage;

/* Stage `stage` of the layout's structure on the request's device. Free with plan_stage_free. */
vfm_status plan_describe(const PlanRequest *r, const PlanLayout *pl, int stage, PlanStage *s);
void plan_stage_free(PlanStage *s);
/* Moves a described stage to the layout's SP and CP (its mode): the table and the blocks depend on
 * TP and PP alone, the rows each layer sees on these (dit_parallel.c reads them from m->par). The
 * caller has checked them (dit_check_parallel). */
void plan_relayout(const PlanLayout *pl, PlanStage *s);

/* Every stage of a structure (TP, PP, V). Middle stages whose chunks hold as many blocks each are
 * alike (neither the patch embedder nor the final layer; the same layers' shapes): one description
 * serves them all, and only their micro-batches in flight differ. */
typedef struct PlanStages {
    int P, n_own;
    PlanStage *own;   /* [n_own] the distinct descriptions */
    PlanStage **of;   /* [P] stage p's */
} PlanStages;
/* VFM_ERR_USAGE when the structure does not build (the model's TP rules, L < P·V). */
vfm_status plan_stages_describe(const PlanRequest *r, const PlanLayout *pl, PlanStages *out);
void plan_stages_relayout(const PlanLayout *pl, PlanStages *s);
void plan_stages_free(PlanStages *s);
/* The activation dtype on the request's device: f32 on the CPU, bf16 on the GPU (every sharding
 * strategy). */
DType plan_act_dtype(const PlanRequest *r);
/* One slot's and the recomputation scratch's bytes for the pack (dit_activation_plan) in dtype dt
 * with the recomputation plan rc (NULL: none). */
vfm_status plan_stage_acts(const PlanRequest *r, const PlanLayout *pl, PlanStage *s, DType dt, const RecomputeConfig *rc,
                           size_t *slot, size_t *scratch);
/* r->sample_flops: the whole model's forward over one sample (dit_forward_flops). */
void plan_request_flops(PlanRequest *r);
/* plan_evaluate on the structure's stages already described. */
vfm_status plan_evaluate_on(const PlanRequest *r, const PlanLayout *pl, PlanStages *stages, PlanResult *out);
/* The micro-batch·chunk pairs stage `stage` holds in flight (1 without PP). */
vfm_status plan_in_flight(const PlanLayout *pl, int stage, int *out);

/* Per pipeline stage: the memory (plan_memory.c), and the time of one micro-batch (plan_time.c). */
typedef struct PlanStageTime {
    double gemm, attention, elementwise, recompute, tp, cp, pp_p2p; /* seconds per micro-batch */
    double compute_bwd;   /* the backward's compute: what gradient reductions hide behind */
    double total;
    int64_t local_params, block_params, tp_summed; /* the stage's table; its blocks'; summed over TP */
} PlanStageTime;
vfm_status plan_stage_memory(const PlanRequest *r, const PlanLayout *pl, PlanStage *s, int stage, PlanMemory *out);
vfm_status plan_stage_time(const PlanRequest *r, const PlanLayout *pl, PlanStage *s, PlanStageTime *out);
/* The step from the slowest stage's micro-batch (bubble, data-parallel traffic, optimizer). */
void plan_step_time(const PlanRequest *r, const PlanLayout *pl, const PlanStageTime *worst, PlanTime *out);

#endif
