/* The memory of one layout per GPU (plan.h PlanMemory), part by part, from the code that holds it:
 *  - the training state: dp_memory_bytes for the rank's table (its TP shard, its pipeline stage)
 *    under the sharding strategy, with the element sizes vfm's buffers have — the fp32 weights are
 *    the master on every rank (dit_create_parallel; ZeRO-3 keeps its master shard apart), fp32
 *    gradients and Adam moments, and on the GPU the bf16 copy the ops read (dit_set_act_dtype);
 *    (ZeRO-2/3: a bf16 copy per unit, dit_fsdp.c — kept for the whole units, made at each gather
 *    for ZeRO-3's block units, whose fp32 gather is released once it is made);
 *  - the activations: one slot and the recomputation scratch as dit_reserve sizes them, carved by
 *    each layer for this rank's rows (dit_activation_plan), in the GPU's bf16 or the CPU's f32;
 *  - under PP the slots of the micro-batches in flight, counted on the stage's own schedule;
 *  - on the GPU, what vfm does not allocate itself: NCCL's buffers, the libraries' workspaces and the
 *    CUDA context (stated allowances below). */
#include <string.h>

#include "parallel/fsdp_layout.h"
#include "parallel/pp_schedule.h"
#include "plan/plan_internal.h"

/* NCCL's default NCCL_BUFFSIZE is 4 MiB per channel and peer and direction (NCCL's environment
 * documentation); an H100 ring runs up to 32 channels: 4 MiB x 32 x 2 = 256 MiB per communicator
 * of more than one rank. NVLink SHARP adds more where it is on (docs/parallel.md "NCCL environment"). */
#define NCCL_BYTES_PER_COMM (256.0 * 1048576.0)
/* cuBLASLt's workspace (GEMM_WORKSPACE_BYTES in src/ops/cuda/linear.cu), and an allowance of 64 MiB
 * for cuDNN's fused attention graphs (cudnn_attention.cpp asks each graph for its own; flash
 * attention's forward and backward on Hopper ask for none to a few MiB). */
#define GEMM_WORKSPACE (32.0 * 1048576.0)
#define ATTN_WORKSPACE (64.0 * 1048576.0)
/* The CUDA context with cuBLASLt's and cuDNN's handles and kernels: a stated allowance of 1 GiB
 * (not measured here: CUDA 12's lazy loading keeps it to a few hundred MiB on an H100; cuDNN's and
 * cuBLASLt's kernels loaded on first use add to it). vfm allocates its arenas and state in a few
 * large blocks, so no allowance is made for fragmentation. */
#define CONTEXT_ALLOWANCE (1024.0 * 1048576.0)

static int fsdp(DpSharding s) { return s >= DP_SHARD_OPTIM_GRADS; }

DType plan_act_dtype(const PlanRequest *r) { return r->dev.cpu ? DT_F32 : DT_BF16; }

static int64_t gcd64(int64_t a, int64_t b) { return b ? gcd64(b, a % b) : a; }

int64_t plan_pack_rows(const PlanRequest *r, const PlanLayout *pl) {
    int64_t m = r->pad_multiple > 0 ? r->pad_multiple : 1, tc = (int64_t)pl->l.tp * pl->l.cp;
    m = m / gcd64(m, tc) * tc; /* the encoder's lcm(dataset.pad_multiple, TP·CP) */
    return (r->seq + m - 1) / m * m;
}

vfm_status plan_describe(const PlanRequest *r, const PlanLayout *pl, int stage, PlanStage *s) {
    memset(s, 0, sizeof *s);
    DiTParallel par = {.tp = pl->l.tp, .sequence_parallel = pl->l.sp, .cp = pl->l.cp, .pp = pl->l.pp,
                       .pp_rank = stage, .vp = pl->l.vp};
    par.cpa.type = pl->l.cp_type;
    par.cpa.A = pl->l.cp_type == CP_COMM_A2A ? pl->l.cp : pl->l.a2a_size;
    VFM_TRY(dit_describe_parallel(&s->m, &r->model, &par));
    s->m.device = r->dev.cpu ? DEV_CPU : DEV_CUDA; /* only counted: the carver allocates nothing */
    return VFM_OK;
}

void plan_stage_free(PlanStage *s) { dit_destroy(&s->m); }

void plan_relayout(const PlanLayout *pl, PlanStage *s) {
    DiTParallel *p = &s->m.par;
    p->sequence_parallel = pl->l.sp;
    p->cp = pl->l.cp;
    p->cpa.type = pl->l.cp_type;
    p->cpa.A = pl->l.cp_type == CP_COMM_A2A ? pl->l.cp : pl->l.a2a_size;
    s->n_memo = 0; /* other rows: other bytes */
}

static int same_rc(const RecomputeConfig *a, const RecomputeConfig *b) {
    return a->granularity == b->granularity && a->method == b->method && a->num_layers == b->num_layers;
}

vfm_status plan_stage_acts(const PlanRequest *r, const PlanLayout *pl, PlanStage *s, DType dt, const RecomputeConfig *rc,
                           size_t *slot, size_t *scratch) {
    RecomputeConfig none = {RECOMPUTE_NONE, RECOMPUTE_METHOD_NONE, 0};
    if (!rc) rc = &none;
    for (int i = 0; i < s->n_memo; i++)
        if (s->memo[i].dt == dt && same_rc(&s->memo[i].rc, rc)) {
            *slot = s->memo[i].slot, *scratch = s->memo[i].scratch;
            return VFM_OK;
        }
    s->m.act_dtype = dt;
    VFM_TRY(dit_set_recompute(&s->m, rc));
    VFM_TRY(dit_activation_plan(&s->m, plan_pack_rows(r, pl), r->text, 1, slot, scratch));
    if (s->n_memo < (int)(sizeof s->memo / sizeof s->memo[0])) {
        int i = s->n_memo++;
        s->memo[i].dt = dt, s->memo[i].rc = *rc, s->memo[i].slot = *slot, s->memo[i].scratch = *scratch;
    }
    return VFM_OK;
}

vfm_status plan_in_flight(const PlanLayout *pl, int stage, int *out) {
    *out = 1;
    if (pl->l.pp <= 1) return VFM_OK;
    /* the search asks for the same (P, M, V, stage) many times: the schedules are remembered */
    static struct { int P, M, V, stage, n; } memo[512];
    int P = pl->l.pp, M = (int)pl->microbatches, V = pl->l.vp > 1 ? pl->l.vp : 1;
    unsigned h = ((unsigned)P * 31u + (unsigned)M * 131u + (unsigned)V * 17u + (unsigned)stage * 7u) % 512u;
    if (memo[h].P == P && memo[h].M == M && memo[h].V == V && memo[h].stage == stage) {
        *out = memo[h].n;
        return VFM_OK;
    }
    PpSchedule s;
    memset(&s, 0, sizeof s);
    VFM_TRY(pp_schedule_build(&s, P, M, V, stage));
    *out = pp_schedule_in_flight(&s);
    pp_schedule_free(&s);
    memo[h].P = P, memo[h].M = M, memo[h].V = V, memo[h].stage = stage, memo[h].n = *out;
    return VFM_OK;
}

/* The training state of a described stage: dp_memory_bytes with the element sizes of vfm's buffers
 * (DEV_CPU's: fp32 everything, the weights being the master but under ZeRO-3), plus the bf16 copy
 * the GPU ops read: the whole model's, or under ZeRO-3 the whole units' kept and one block unit's
 * made at its gather, whose fp32 gather is then released (dit_fsdp.c): of dp_memory_bytes' two
 * fp32 block gathers, one (the next block's, prefetched) stays beside that bf16 copy. */
static vfm_status state_bytes(const PlanRequest *r, const PlanLayout *pl, const DiT *m, DType dt, PlanMemory *out) {
    int first[4096], n_blocks = 0, head_first = 0;
    if (m->n_blocks > 4096) return vfm_fail(VFM_ERR_USAGE, "plan: %d blocks on one stage", m->n_blocks);
    dit_block_layout(m, first, &n_blocks, &head_first);
    PpBlocks blocks = {first, n_blocks, head_first};
    int n = pl->dp * pl->l.cp;
    DpMemory d;
    VFM_TRY(dp_memory_bytes(pl->sharding, &m->table, &blocks, n, DEV_CPU, &d));
    int64_t total = m->table.total, shard = (total + n - 1) / n;
    double copy = dt == DT_BF16 ? 2.0 * (double)total : 0, transient = (double)d.transient;
    if (dt == DT_BF16 && pl->sharding == DP_SHARD_OPTIM_GRADS_PARAMS) {
        FsdpLayout l;
        VFM_TRY(fsdp_layout_init(&l, &m->table, &blocks, n, 1));
        copy = 2.0 * (double)l.unsharded_params;
        transient += (2.0 - 4.0) * (double)l.max_block_padded;
        fsdp_layout_free(&l);
    }
    out->params = (double)d.params + copy;
    out->grads = (double)d.grads;
    out->optimizer = (double)d.optimizer;
    out->transient = transient;
    out->ema = r->ema ? 4.0 * (double)(fsdp(pl->sharding) ? shard : total) : 0; /* trainer.c: the master's copy */
    return VFM_OK;
}

vfm_status plan_stage_memory(const PlanRequest *r, const PlanLayout *pl, PlanStage *st, int stage, PlanMemory *out) {
    memset(out, 0, sizeof *out);
    out->stage = stage;
    int64_t rows = plan_pack_rows(r, pl);
    DType dt = plan_act_dtype(r);
    size_t slot = 0, scratch = 0;
    VFM_TRY(plan_stage_acts(r, pl, st, dt, &pl->rc, &slot, &scratch));
    VFM_TRY(state_bytes(r, pl, &st->m, dt, out));
    VFM_TRY(plan_in_flight(pl, stage, &out->slots_in_flight));
    int64_t Rl = rows / pl->l.cp / (pl->l.sp ? pl->l.tp : 1);
    double hidden = (double)Rl * st->m.cfg.hidden * dtype_size(dt);
    int pp = pl->l.pp > 1;
    out->slot = (double)slot, out->scratch = (double)scratch;
    /* under PP the model's own slot (dit_reserve) stays allocated beside the pipeline's */
    out->activations = out->slot * (out->slots_in_flight + pp) + out->scratch;
    out->activation_peak = out->slot * out->slots_in_flight + out->scratch;
    if (!r->dev.cpu) {
        int comms = (pl->l.tp > 1) + (pl->l.cp > 1) + pp + (pl->dp * pl->l.cp > 1);
        /* the pipeline runner's messages: each received input lives until its backward (one per
         * micro-batch·chunk in flight), plus an output and a gradient on their way */
        out->buffers = comms * NCCL_BYTES_PER_COMM + (pp ? (out->slots_in_flight + 2) * hidden : 0);
        out->workspace = GEMM_WORKSPACE + ATTN_WORKSPACE;
        out->allowance = CONTEXT_ALLOWANCE;
    }
    out->total = out->params + out->grads + out->optimizer + out->ema + out->transient + out->activations +
                 out->buffers + out->workspace + out->allowance;
    return VFM_OK;
}
