/* One layout's memory and time, stage by stage (plan.h plan_evaluate): each pipeline stage is
 * described once (its TP shard of its blocks), its bytes and its micro-batch time computed on it;
 * the stage that holds the most is the layout's memory, the slowest its pace. */
#include <stdlib.h>
#include <string.h>

#include "parallel/pp_schedule.h"
#include "plan/plan_internal.h"

/* Middle stages p and q hold chunks of the same sizes. */
static int alike(const PlanLayout *pl, int layers, int p, int q) {
    int P = pl->l.pp, V = pl->l.vp > 1 ? pl->l.vp : 1;
    if (p == 0 || q == 0 || p == P - 1 || q == P - 1) return 0;
    for (int v = 0; v < V; v++) {
        int f, a, b;
        pp_chunk_blocks(layers, P, V, p, v, &f, &a);
        pp_chunk_blocks(layers, P, V, q, v, &f, &b);
        if (a != b) return 0;
    }
    return 1;
}

vfm_status plan_stages_describe(const PlanRequest *r, const PlanLayout *pl, PlanStages *out) {
    memset(out, 0, sizeof *out);
    int P = pl->l.pp > 1 ? pl->l.pp : 1;
    out->P = P;
    out->own = calloc((size_t)P, sizeof *out->own);
    out->of = calloc((size_t)P, sizeof *out->of);
    if (!out->own || !out->of) {
        plan_stages_free(out);
        return vfm_fail(VFM_ERR_NOMEM, "plan: %d stages", P);
    }
    if (P > 1) VFM_TRY(pp_check_layers(r->model.layers, P, pl->l.vp > 1 ? pl->l.vp : 1));
    for (int p = 0; p < P; p++) {
        for (int q = 0; q < p && !out->of[p]; q++)
            if (alike(pl, r->model.layers, p, q)) out->of[p] = out->of[q];
        if (out->of[p]) continue;
        vfm_status s = plan_describe(r, pl, p, &out->own[out->n_own]);
        if (s != VFM_OK) {
            plan_stages_free(out);
            return s;
        }
        out->of[p] = &out->own[out->n_own++];
    }
    return VFM_OK;
}

void plan_stages_relayout(const PlanLayout *pl, PlanStages *s) {
    for (int i = 0; i < s->n_own; i++) plan_relayout(pl, &s->own[i]);
}

void plan_stages_free(PlanStages *s) {
    for (int i = 0; s->own && i < s->n_own; i++) plan_stage_free(&s->own[i]);
    free(s->own);
    free(s->of);
    memset(s, 0, sizeof *s);
}

vfm_status plan_evaluate_on(const PlanRequest *r, const PlanLayout *pl, PlanStages *stages, PlanResult *out) {
    memset(out, 0, sizeof *out);
    out->layout = *pl;
    PlanStageTime worst = {0};
    for (int p = 0; p < stages->P; p++) {
        PlanMemory mem;
        PlanStageTime st;
        VFM_TRY(plan_stage_memory(r, pl, stages->of[p], p, &mem));
        VFM_TRY(plan_stage_time(r, pl, stages->of[p], &st));
        if (p == 0 || mem.total > out->mem.total) out->mem = mem;
        if (p == 0 || st.total > worst.total) worst = st;
    }
    plan_step_time(r, pl, &worst, &out->time);
    out->fits = r->dev.cpu || out->mem.total <= r->dev.memory_bytes;
    out->over_bytes = out->fits ? 0 : out->mem.total - r->dev.memory_bytes;
    return VFM_OK;
}

void plan_request_flops(PlanRequest *r) {
    int32_t cu_q[2] = {0, (int32_t)r->seq}, cu_t[2] = {0, (int32_t)r->text};
    r->sample_flops = dit_forward_flops(&r->model, 1, cu_q, cu_t);
}

vfm_status plan_evaluate(const PlanRequest *req, const PlanLayout *pl, PlanResult *out) {
    PlanRequest r = *req;
    plan_request_flops(&r);
    PlanStages st;
    VFM_TRY(plan_stages_describe(&r, pl, &st));
    vfm_status s = plan_evaluate_on(&r, pl, &st, out);
    plan_stages_free(&st);
    return s;
}
