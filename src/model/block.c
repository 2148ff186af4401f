/* A transformer block (block.h): its sub-layers' forward and backward around their mixers. */
#include <stdio.h>
#include <string.h>

#include "model/dit_internal.h"

/* The probes' names of a mixer's residual stream (dit.h "probe"). */
static const char *const SITES[] = {"self_attn", "cross_attn", "mlp"};
static const char *const DSITES[] = {"d.self_attn", "d.cross_attn", "d.mlp"};

const char *block_name(int l, const char *part) {
    static _Thread_local char buf[4][128];
    static _Thread_local int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "blocks.%d.%s", l, part);
    return buf[k];
}

void block_begin(DiTBlock *b, const ParamTable *t) {
    memset(b, 0, sizeof *b);
    b->first_entry = t->count;
    b->norm_w = -1;
}

SubLayer *block_add(DiTBlock *b, MixerKind kind, float norm_eps) {
    SubLayer *s = &b->sub[b->n_sub];
    memset(s, 0, sizeof *s);
    s->kind = kind;
    s->norm = NORM_LAYER;
    s->norm_eps = norm_eps;
    s->residual = 1;
    s->shift = b->chunks, s->scale = b->chunks + 1, s->gate = b->chunks + 2;
    s->aff_w = s->aff_b = -1;
    b->chunks += 3;
    b->n_sub++;
    return s;
}

void block_affine_norm(SubLayer *s, ParamTable *t, const char *name, int64_t D) {
    char w[128], bias[128];
    snprintf(w, sizeof w, "%s.weight", name);
    snprintf(bias, sizeof bias, "%s.bias", name);
    s->norm = NORM_AFFINE;
    s->aff_w = vector_add(t, INIT_ONE, D, 0, w);
    s->aff_b = vector_add(t, INIT_ZERO, D, 0, bias);
    s->shift = s->scale = s->gate = -1;
}

SubLayer *block_add_rms(DiTBlock *b, MixerKind kind, float norm_eps) {
    SubLayer *s = block_add(b, kind, norm_eps);
    s->norm = NORM_RMS;
    return s;
}

SubLayer *block_add_feeding(DiTBlock *b, MixerKind kind) {
    SubLayer *s = &b->sub[b->n_sub++];
    memset(s, 0, sizeof *s);
    s->kind = kind;
    s->norm = NORM_NONE;
    s->residual = 0;
    s->shift = s->scale = s->gate = -1;
    s->aff_w = s->aff_b = -1;
    return s;
}

void block_norm_add(DiTBlock *b, ParamTable *t, const char *name, int64_t D) {
    param_table_set_group(t, DIT_GROUP_ADALN);
    b->norm_w = vector_add(t, INIT_ONE, D, REDUCE_TP_SP, name);
}

void block_handles(DiTBlock *b, const HandleVisitor *v) {
    visit_entry(v, &b->norm_w);
    modulation_handles(&b->mod, v);
    for (int k = 0; k < b->n_sub; k++) {
        visit_entry(v, &b->sub[k].aff_w), visit_entry(v, &b->sub[k].aff_b);
        if (b->sub[k].kind == MIXER_MLP) mlp_handles(&b->sub[k].mlp, v);
        else attention_handles(&b->sub[k].attn, v);
    }
}

int block_has(const DiTBlock *p, MixerKind kind) {
    for (int k = 0; k < p->n_sub; k++)
        if (p->sub[k].kind == kind) return 1;
    return 0;
}

const MlpLayer *block_mlp(const DiTBlock *p) {
    for (int k = 0; k < p->n_sub; k++)
        if (p->sub[k].kind == MIXER_MLP) return &p->sub[k].mlp;
    return NULL;
}

static const Tensor *chunk(const BlockActs *b, int k) { return k >= 0 ? &b->mod.chunk[k] : NULL; }
static Tensor *d_chunk(Acts *a, int k) { return k >= 0 ? &a->mod.d_chunk[k] : NULL; }

/* An affine norm's weight and bias as the LayerNorm-modulate op's per-sample (scale, shift):
 * LN(h)·w + b = LN(h)·(1 + (w − 1)) + b. */
static vfm_status affine_rows(const DiT *m, const SubLayer *s, SubActs *sa, const Acts *a) {
    const Tensor *zeros = &a->cond.zeros;
    VFM_TRY(vector_rows(m, &sa->aff_shift, s->aff_w, zeros)); /* w, for now */
    VFM_TRY(op_fill(&sa->aff_scale, -1.0));
    VFM_TRY(op_add(&sa->aff_scale, &sa->aff_scale, &sa->aff_shift));
    return vector_rows(m, &sa->aff_shift, s->aff_b, zeros);
}

static void probe(const DiT *m, const char *site, int layer, const Tensor *rows) {
    if (m->probe) m->probe(m->probe_ctx, site, layer, rows);
}

/* The residual stream entering sub-layer k: the block's input (with the position), or the output of
 * the last sub-layer before k that has a residual. */
static const Tensor *stream_in(const DiTBlock *p, const BlockActs *b, int k) {
    while (k > 0 && !p->sub[k - 1].residual) k--;
    return k > 0 ? &b->h[k] : p->add_pos ? &b->hp : &b->h[0];
}

/* 1 when sub-layer k normalises the output of the sub-layer before it (which has no residual). */
static int fed(const DiTBlock *p, int k) { return k > 0 && !p->sub[k - 1].residual; }

/* What sub-layer k normalises, and what its mixer reads. */
static const Tensor *norm_in(const DiTBlock *p, const BlockActs *b, int k) {
    return fed(p, k) ? &b->sub[k - 1].out : stream_in(p, b, k);
}
static const Tensor *mixer_in(const DiTBlock *p, const BlockActs *b, int k) {
    return p->sub[k].norm == NORM_NONE ? norm_in(p, b, k) : &b->sub[k].xm;
}

static vfm_status norm_forward(const DiT *m, const DiTBlock *p, const SubLayer *s, SubActs *sa, const BlockActs *b,
                               const Acts *a, const Tensor *x, const Tensor *t2s) {
    if (s->norm == NORM_AFFINE) {
        VFM_TRY(affine_rows(m, s, sa, a));
        return op_layernorm_modulate_forward(&sa->xm, &sa->mean, &sa->rstd, x, &sa->aff_shift, &sa->aff_scale, t2s,
                                             s->norm_eps);
    }
    if (s->norm == NORM_LAYER)
        return op_layernorm_modulate_forward(&sa->xm, &sa->mean, &sa->rstd, x, chunk(b, s->shift), chunk(b, s->scale),
                                             t2s, s->norm_eps);
    if (s->norm == NORM_NONE) return VFM_OK;
    Tensor w = layer_param(m, p->norm_w);
    return op_rmsnorm_modulate_forward(&sa->xm, &sa->rstd, x, &w, chunk(b, s->shift), chunk(b, s->scale), t2s,
                                       s->norm_eps);
}

/* dx += d(norm input) from a->d_xm = d(mixer input), and the modulation's and weight's gradients. */
static vfm_status norm_backward(const DiT *m, const DiTBlock *p, const SubLayer *s, const SubActs *sa,
                                const BlockActs *b, Acts *a, Tensor *dx, const Tensor *x, const Tensor *t2s) {
    if (s->norm == NORM_AFFINE) { /* the affine norm's per-sample rows: summed into its weight and bias */
        Tensor dshift = sa->d_aff_shift, dscale = sa->d_aff_scale;
        VFM_TRY(op_fill(&dshift, 0.0));
        VFM_TRY(op_fill(&dscale, 0.0));
        VFM_TRY(op_layernorm_modulate_backward(dx, &dshift, &dscale, &a->d_xm, x, &sa->mean, &sa->rstd, &sa->aff_scale,
                                               t2s));
        VFM_TRY(vector_rows_backward(m, &dshift, s->aff_b, &a->cond.zeros));
        return vector_rows_backward(m, &dscale, s->aff_w, &a->cond.zeros);
    }
    if (s->norm == NORM_LAYER)
        return op_layernorm_modulate_backward(dx, d_chunk(a, s->shift), d_chunk(a, s->scale), &a->d_xm, x, &sa->mean,
                                              &sa->rstd, chunk(b, s->scale), t2s);
    if (s->norm == NORM_NONE) return op_add(dx, dx, &a->d_xm);
    Tensor w = layer_param(m, p->norm_w), dw = layer_grad(m, p->norm_w);
    return op_rmsnorm_modulate_backward(dx, &dw, d_chunk(a, s->shift), d_chunk(a, s->scale), &a->d_xm, x, &sa->rstd,
                                        &w, chunk(b, s->scale), t2s);
}

vfm_status block_forward(const DiT *m, int l, const DiTBlock *p, BlockActs *b, Acts *a, const DiTInputs *in,
                         Tensor *h_out) {
    const Tensor *t2s = &a->pl.t2s;
    VFM_TRY(modulation_forward(m, &p->mod, &b->mod, &a->cond));
    if (p->add_pos) VFM_TRY(op_add(&b->hp, &b->h[0], &a->pos.pe));
    for (int k = 0; k < p->n_sub; k++) {
        const SubLayer *s = &p->sub[k];
        SubActs *sa = &b->sub[k];
        Tensor *out = k + 1 < p->n_sub ? &b->h[k + 1] : h_out;
        VFM_TRY(norm_forward(m, p, s, sa, b, a, norm_in(p, b, k), t2s));
        const Tensor *xm = mixer_in(p, b, k);
        if (s->kind == MIXER_MLP) {
            VFM_TRY(mlp_forward(m, &s->mlp, &sa->mlp, a, xm, &sa->out));
        } else { /* the tests' broken variants skip one self-attention's TP sum or all-to-all */
            int self = s->kind == MIXER_SELF_ATTENTION;
            int skip = (self && m->par.test_skip_tp_reduce == l + 1 ? ATTN_SKIP_TP : 0) |
                       (self && m->par.test_skip_st_a2a == l + 1 ? ATTN_SKIP_ST : 0);
            VFM_TRY(attention_forward(m, &s->attn, &sa->attn, a, in, xm, &sa->out, skip));
        }
        if (!s->residual) { /* what the next sub-layer reads: this output */
            probe(m, SITES[s->kind], l, &sa->out);
            continue;
        }
        VFM_TRY(op_gated_residual_forward(out, stream_in(p, b, k), &sa->out, chunk(b, s->gate), t2s));
        probe(m, SITES[s->kind], l, out);
    }
    return VFM_OK;
}

/* a->d_res: the residual stream's gradient; a->d_branch: d(out) of the sub-layer whose backward runs
 * next (a sub-layer without residual gets it from the next one's norm, which it fed). */
vfm_status block_backward(const DiT *m, int l, const DiTBlock *p, const BlockActs *b, Acts *a, const DiTInputs *in) {
    const Tensor *t2s = &a->pl.t2s;
    for (int k = 0; k < p->mod.n_chunks; k++) VFM_TRY(op_fill(&a->mod.d_chunk[k], 0.0));
    for (int k = p->n_sub - 1; k >= 0; k--) {
        const SubLayer *s = &p->sub[k];
        const SubActs *sa = &b->sub[k];
        if (s->residual)
            VFM_TRY(op_gated_residual_backward(NULL, &a->d_branch, d_chunk(a, s->gate), &a->d_res, &sa->out,
                                               chunk(b, s->gate), t2s));
        const Tensor *xm = mixer_in(p, b, k);
        if (s->kind == MIXER_MLP) VFM_TRY(mlp_backward(m, &s->mlp, &sa->mlp, a, xm));
        else VFM_TRY(attention_backward(m, &s->attn, &sa->attn, a, in, xm));
        Tensor *dx = &a->d_res;
        if (fed(p, k)) { /* the input's gradient is the feeding sub-layer's d(out) */
            dx = &a->d_branch;
            VFM_TRY(op_fill(dx, 0.0));
        }
        VFM_TRY(norm_backward(m, p, s, sa, b, a, dx, norm_in(p, b, k), t2s));
        probe(m, DSITES[s->kind], l, &a->d_res);
    }
    if (p->add_pos) VFM_TRY(op_add(&a->pos.d_pe, &a->pos.d_pe, &a->d_res)); /* d(h[0]) = d(hp) */
    return modulation_backward(m, &p->mod, &b->mod, &a->mod, &a->cond);
}

vfm_status block_carve(const DiT *m, const DiTBlock *p, ActCarver *cv, BlockActs *b, const Acts *a, int what,
                       int selective) {
    int64_t D = m->cfg.hidden, Rl = a->Rl;
    if (what & CARVE_INPUT) VFM_TRY(carve_act(cv, &b->h[0], Rl, D));
    for (int k = 0; k < p->n_sub && (what & CARVE_ROUTING); k++)
        if (p->sub[k].kind == MIXER_MLP && p->sub[k].mlp.moe.s.experts > 0)
            VFM_TRY(moe_carve_routing(m, &p->sub[k].mlp.moe, cv, &b->sub[k].mlp.moe, a));
    if (!(what & CARVE_REST)) return VFM_OK;
    if (p->add_pos) VFM_TRY(carve_act(cv, &b->hp, Rl, D));
    for (int k = 0; k < p->n_sub; k++) {
        const SubLayer *s = &p->sub[k];
        SubActs *sa = &b->sub[k];
        if (k > 0 && p->sub[k - 1].residual) VFM_TRY(carve_act(cv, &b->h[k], Rl, D));
        if (s->norm == NORM_LAYER || s->norm == NORM_AFFINE) VFM_TRY(carve_f32(cv, &sa->mean, Rl, 0));
        if (s->norm == NORM_AFFINE) {
            VFM_TRY(carve_act(cv, &sa->aff_shift, a->B, D));
            VFM_TRY(carve_act(cv, &sa->aff_scale, a->B, D));
            VFM_TRY(carve_act(cv, &sa->d_aff_shift, a->B, D));
            VFM_TRY(carve_act(cv, &sa->d_aff_scale, a->B, D));
        }
        if (s->norm != NORM_NONE) {
            VFM_TRY(carve_f32(cv, &sa->rstd, Rl, 0));
            VFM_TRY(carve_act(cv, &sa->xm, Rl, D));
        }
        if (s->kind == MIXER_MLP) VFM_TRY(mlp_carve_rest(m, &s->mlp, cv, &sa->mlp, a));
        else VFM_TRY(attention_carve(m, &s->attn, cv, &sa->attn, a, selective));
        VFM_TRY(carve_act(cv, &sa->out, Rl, D));
    }
    return modulation_carve(&p->mod, cv, &b->mod, a->B);
}

double block_flops(const DiT *m, const DiTBlock *p, const FlopShape *s) {
    double f = 0;
    for (int k = 0; k < p->n_sub; k++)
        f += p->sub[k].kind == MIXER_MLP ? mlp_flops(m, &p->sub[k].mlp, s) : attention_flops(m, &p->sub[k].attn, s);
    return f + modulation_flops(m, &p->mod, s);
}

void block_comm_bytes(const DiT *m, const DiTBlock *p, double r, double b, double *tp_fwd, double *tp_bwd,
                      double *cp_fwd, double *cp_bwd) {
    *tp_fwd = *tp_bwd = *cp_fwd = *cp_bwd = 0;
    for (int k = 0; k < p->n_sub; k++) {
        double f, bw;
        region_comm_bytes(m, r, b, &f, &bw); /* every mixer is one TP region */
        *tp_fwd += f, *tp_bwd += bw;
        if (p->sub[k].kind == MIXER_MLP) continue;
        attention_cp_bytes(m, &p->sub[k].attn, r, b, &f, &bw);
        *cp_fwd += f, *cp_bwd += bw;
    }
}
