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
}

SubLayer *block_add(DiTBlock *b, MixerKind kind, float norm_eps) {
    SubLayer *s = &b->sub[b->n_sub];
    memset(s, 0, sizeof *s);
    s->kind = kind;
    s->norm_eps = norm_eps;
    s->shift = 3 * b->n_sub, s->scale = 3 * b->n_sub + 1, s->gate = 3 * b->n_sub + 2;
    s->norm_w = s->norm_b = -1;
    b->n_sub++;
    return s;
}

void block_affine_norm(SubLayer *s, ParamTable *t, const char *name, int64_t D) {
    char w[128], bias[128];
    snprintf(w, sizeof w, "%s.weight", name);
    snprintf(bias, sizeof bias, "%s.bias", name);
    s->norm_w = vector_add(t, INIT_ONE, D, 0, w);
    s->norm_b = vector_add(t, INIT_ZERO, D, 0, bias);
    s->shift = s->scale = s->gate = -1;
}

void block_handles(DiTBlock *b, const HandleVisitor *v) {
    modulation_handles(&b->mod, v);
    for (int k = 0; k < b->n_sub; k++) {
        visit_entry(v, &b->sub[k].norm_w), visit_entry(v, &b->sub[k].norm_b);
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
    VFM_TRY(vector_rows(m, &sa->aff_shift, s->norm_w, zeros)); /* w, for now */
    VFM_TRY(op_fill(&sa->aff_scale, -1.0));
    VFM_TRY(op_add(&sa->aff_scale, &sa->aff_scale, &sa->aff_shift));
    return vector_rows(m, &sa->aff_shift, s->norm_b, zeros);
}

static void probe(const DiT *m, const char *site, int layer, const Tensor *rows) {
    if (m->probe) m->probe(m->probe_ctx, site, layer, rows);
}

vfm_status block_forward(const DiT *m, int l, const DiTBlock *p, BlockActs *b, Acts *a, const DiTInputs *in,
                         Tensor *h_out) {
    const Tensor *t2s = &a->pl.t2s;
    VFM_TRY(modulation_forward(m, &p->mod, &b->mod, &a->cond));
    for (int k = 0; k < p->n_sub; k++) {
        const SubLayer *s = &p->sub[k];
        SubActs *sa = &b->sub[k];
        Tensor *h = &b->h[k], *out = k + 1 < p->n_sub ? &b->h[k + 1] : h_out;
        const Tensor *shift = chunk(b, s->shift), *scale = chunk(b, s->scale);
        if (s->norm_w >= 0) {
            VFM_TRY(affine_rows(m, s, sa, a));
            shift = &sa->aff_shift, scale = &sa->aff_scale;
        }
        VFM_TRY(op_layernorm_modulate_forward(&sa->xm, &sa->mean, &sa->rstd, h, shift, scale, t2s, s->norm_eps));
        if (s->kind == MIXER_MLP) {
            VFM_TRY(mlp_forward(m, &s->mlp, &sa->mlp, a, &sa->xm, &sa->out));
        } else { /* the tests' broken variant skips one self-attention's TP sum */
            int skip = s->kind == MIXER_SELF_ATTENTION && m->par.test_skip_tp_reduce == l + 1;
            VFM_TRY(attention_forward(m, &s->attn, &sa->attn, a, in, &sa->xm, &sa->out, skip));
        }
        VFM_TRY(op_gated_residual_forward(out, h, &sa->out, chunk(b, s->gate), t2s));
        probe(m, SITES[s->kind], l, out);
    }
    return VFM_OK;
}

vfm_status block_backward(const DiT *m, int l, const DiTBlock *p, const BlockActs *b, Acts *a, const DiTInputs *in) {
    const Tensor *t2s = &a->pl.t2s;
    for (int k = 0; k < p->mod.n_chunks; k++) VFM_TRY(op_fill(&a->mod.d_chunk[k], 0.0));
    for (int k = p->n_sub - 1; k >= 0; k--) {
        const SubLayer *s = &p->sub[k];
        const SubActs *sa = &b->sub[k];
        VFM_TRY(op_gated_residual_backward(NULL, &a->d_branch, d_chunk(a, s->gate), &a->d_res, &sa->out,
                                           chunk(b, s->gate), t2s));
        if (s->kind == MIXER_MLP) VFM_TRY(mlp_backward(m, &s->mlp, &sa->mlp, a, &sa->xm));
        else VFM_TRY(attention_backward(m, &s->attn, &sa->attn, a, in, &sa->xm));
        Tensor *dshift = d_chunk(a, s->shift), *dscale = d_chunk(a, s->scale), d_aff_shift = sa->d_aff_shift,
               d_aff_scale = sa->d_aff_scale;
        const Tensor *scale = chunk(b, s->scale);
        if (s->norm_w >= 0) { /* the affine norm's per-sample rows: summed into its weight and bias */
            dshift = &d_aff_shift, dscale = &d_aff_scale, scale = &sa->aff_scale;
            VFM_TRY(op_fill(dshift, 0.0));
            VFM_TRY(op_fill(dscale, 0.0));
        }
        VFM_TRY(op_layernorm_modulate_backward(&a->d_res, dshift, dscale, &a->d_xm, &b->h[k], &sa->mean, &sa->rstd,
                                               scale, t2s));
        if (s->norm_w >= 0) {
            VFM_TRY(vector_rows_backward(m, dshift, s->norm_b, &a->cond.zeros));
            VFM_TRY(vector_rows_backward(m, dscale, s->norm_w, &a->cond.zeros));
        }
        probe(m, DSITES[s->kind], l, &a->d_res);
    }
    return modulation_backward(m, &p->mod, &b->mod, &a->mod, &a->cond);
}

vfm_status block_carve(const DiT *m, const DiTBlock *p, ActCarver *cv, BlockActs *b, const Acts *a, int what,
                       int selective) {
    int64_t D = m->cfg.hidden, Rl = a->Rl;
    if (what & CARVE_INPUT) VFM_TRY(carve_act(cv, &b->h[0], Rl, D));
    if (!(what & CARVE_REST)) return VFM_OK;
    for (int k = 0; k < p->n_sub; k++) {
        const SubLayer *s = &p->sub[k];
        SubActs *sa = &b->sub[k];
        if (k > 0) VFM_TRY(carve_act(cv, &b->h[k], Rl, D));
        VFM_TRY(carve_f32(cv, &sa->mean, Rl, 0));
        VFM_TRY(carve_f32(cv, &sa->rstd, Rl, 0));
        VFM_TRY(carve_act(cv, &sa->xm, Rl, D));
        if (s->norm_w >= 0) {
            VFM_TRY(carve_act(cv, &sa->aff_shift, a->B, D));
            VFM_TRY(carve_act(cv, &sa->aff_scale, a->B, D));
            VFM_TRY(carve_act(cv, &sa->d_aff_shift, a->B, D));
            VFM_TRY(carve_act(cv, &sa->d_aff_scale, a->B, D));
        }
        if (s->kind == MIXER_MLP) VFM_TRY(mlp_carve(m, &s->mlp, cv, &sa->mlp, a));
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
