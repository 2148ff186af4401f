/* The activation memory of a DiT: what one forward keeps for its backward and the backward's
 * scratch, laid out for a pack's sizes (only the tensors the variant uses), and dit_reserve.
 * Activations are carved in the model's act_dtype, statistics (LayerNorm/RMSNorm, log-sum-exp) in
 * f32; on CUDA the attention operands keep ATTN_SPARE_ROWS rows after their last row (ops.h) and
 * the host inputs' device copies are carved too. */
#include <stdlib.h>
#include <string.h>

#include "model/dit_internal.h"

/* Carves tensors out of the arena, or only counts bytes (arena NULL). */
typedef struct Carver {
    Arena *arena;
    size_t bytes;
    Device device;
    DType act;  /* the activations' dtype */
    int spare;  /* rows kept after each attention operand (CUDA: ATTN_SPARE_ROWS) */
} Carver;

/* [d0, d1] (d1 = 0: [d0]) of dtype dt, with `extra_rows` more rows of memory after it. */
static vfm_status carve_rows(Carver *cv, Tensor *t, DType dt, int64_t d0, int64_t d1, int64_t extra_rows) {
    int64_t shape[2] = {d0, d1};
    *t = tensor_make(NULL, dt, cv->device, d1 > 0 ? 2 : 1, shape);
    size_t bytes = tensor_bytes(t) + (size_t)extra_rows * (size_t)(d1 > 0 ? d1 : 1) * dtype_size(dt);
    bytes = (bytes + 255) & ~(size_t)255;
    cv->bytes += bytes;
    if (!cv->arena) return VFM_OK;
    return arena_alloc(cv->arena, bytes, &t->data);
}

static vfm_status carve_as(Carver *cv, Tensor *t, DType dt, int64_t d0, int64_t d1) {
    return carve_rows(cv, t, dt, d0, d1, 0);
}

/* An activation (the act dtype). */
static vfm_status carve(Carver *cv, Tensor *t, int64_t d0, int64_t d1) { return carve_as(cv, t, cv->act, d0, d1); }
/* A statistic: f32 whatever the activations are (ops.h's [f32] arguments). */
static vfm_status carve_f32(Carver *cv, Tensor *t, int64_t d0, int64_t d1) { return carve_as(cv, t, DT_F32, d0, d1); }
/* An attention operand or its gradient: spare rows after it (cuDNN may read a tile past the end). */
static vfm_status carve_attn(Carver *cv, Tensor *t, int64_t d0, int64_t d1) {
    return carve_rows(cv, t, cv->act, d0, d1, cv->spare);
}

static vfm_status carve_block(const DiT *m, Carver *cv, BlockActs *b, int64_t R, int64_t Rl, int64_t L, int B) {
    const DiTConfig *c = &m->cfg;
    int64_t D = c->hidden, hd = c->head_dim, H = m->heads_local, Hkv = m->kv_heads_local;
    int64_t Dq = H * hd, Dkv = Hkv * hd;
    VFM_TRY(carve(cv, &b->h0, Rl, D));
    VFM_TRY(carve(cv, &b->h1, Rl, D));
    if (c->f.cross_attn) VFM_TRY(carve(cv, &b->h2, Rl, D));
    else b->h2 = b->h1;
    for (int k = 0; k < 3; k++) {
        if (k == 1 && !c->f.cross_attn) continue;
        VFM_TRY(carve_f32(cv, &b->mean[k], Rl, 0));
        VFM_TRY(carve_f32(cv, &b->rstd[k], Rl, 0));
        VFM_TRY(carve(cv, &b->xm[k], Rl, D));
    }
    VFM_TRY(carve_attn(cv, &b->q, R, Dq));
    VFM_TRY(carve_attn(cv, &b->k, R, Dkv));
    VFM_TRY(carve_attn(cv, &b->v, R, Dkv));
    if (c->f.self_qk_norm) {
        VFM_TRY(carve_attn(cv, &b->qn, R, Dq));
        VFM_TRY(carve_attn(cv, &b->kn, R, Dkv));
        VFM_TRY(carve_f32(cv, &b->q_rstd, R * H, 0));
        VFM_TRY(carve_f32(cv, &b->k_rstd, R * Hkv, 0));
    } else {
        b->qn = b->q, b->kn = b->k;
    }
    VFM_TRY(carve_attn(cv, &b->o, R, Dq));
    VFM_TRY(carve_f32(cv, &b->lse, R, H));
    VFM_TRY(carve(cv, &b->a, Rl, D));
    if (c->f.cross_attn) {
        VFM_TRY(carve_attn(cv, &b->cq, R, Dq));
        VFM_TRY(carve_attn(cv, &b->ck, L, Dq));
        VFM_TRY(carve_attn(cv, &b->cv, L, Dq));
        if (c->f.cross_qk_norm) {
            VFM_TRY(carve_attn(cv, &b->cqn, R, Dq));
            VFM_TRY(carve_attn(cv, &b->ckn, L, Dq));
            VFM_TRY(carve_f32(cv, &b->cq_rstd, R * H, 0));
            VFM_TRY(carve_f32(cv, &b->ck_rstd, L * H, 0));
        } else {
            b->cqn = b->cq, b->ckn = b->ck;
        }
        VFM_TRY(carve_attn(cv, &b->co, R, Dq));
        VFM_TRY(carve_f32(cv, &b->clse, R, H));
        VFM_TRY(carve(cv, &b->c, Rl, D));
    }
    VFM_TRY(carve(cv, &b->f_pre, R, m->ffn_local));
    VFM_TRY(carve(cv, &b->f, R, m->ffn_local));
    VFM_TRY(carve(cv, &b->mo, Rl, D));
    if (!c->f.adaln_full) VFM_TRY(carve(cv, &b->u, B, c->adaln_lora));
    VFM_TRY(carve(cv, &b->mod, B, (int64_t)c->f.n_chunks * D));
    for (int k = 0; k < c->f.n_chunks; k++) VFM_TRY(carve(cv, &b->chunk[k], B, D));
    return VFM_OK;
}

/* The rows of this rank: inputs, output and the scratch of the TP regions and the CP gather. */
static vfm_status carve_parallel(const DiT *m, Carver *cv, Acts *a) {
    const Placement *pl = &a->pl;
    int64_t D = m->cfg.hidden, tok = dit_token_dim(&m->cfg), out = dit_out_dim(&m->cfg);
    int64_t wmax = tok > out ? tok : out;
    if (wmax < 3) wmax = 3;
    int sp = m->par.sequence_parallel && m->par.tp > 1;
    if (pl->identity) return VFM_OK;
    if (pl->repacked) VFM_TRY(carve_f32(cv, &a->w_whole, pl->S, wmax));
    if (m->par.cp > 1) {
        VFM_TRY(carve_f32(cv, &a->w_cp, pl->R, wmax));
        VFM_TRY(carve(cv, &a->w_gather, pl->S, out));
    }
    VFM_TRY(carve(cv, &a->out_local, pl->Rl, out));
    VFM_TRY(carve(cv, &a->dout_local, pl->Rl, out));
    VFM_TRY(carve(cv, &a->pl.x, pl->Rl, tok));
    VFM_TRY(carve_as(cv, &a->pl.t2s, DT_I32, pl->Rl, 0));
    VFM_TRY(carve_as(cv, &a->pl.pos, DT_I32, pl->Rl, 3));
    if (sp) {
        VFM_TRY(carve(cv, &a->xm_full, pl->R, D));
        VFM_TRY(carve(cv, &a->partial, pl->R, D));
        VFM_TRY(carve(cv, &a->d_xm_full, pl->R, D));
        VFM_TRY(carve(cv, &a->d_partial, pl->R, D));
    }
    return VFM_OK;
}

/* CUDA: the device copies of a pack given in host memory (dit.h "DiTInputs"): the network input
 * and text in the act dtype (and f32 for their upload), c_noise, fps, maps, labels, the layouts'
 * offsets; the output and its gradient. */
static vfm_status carve_staging(const DiT *m, Carver *cv, Acts *a, int64_t L, int B) {
    if (m->device != DEV_CUDA) return VFM_OK;
    Staging *g = &a->stage;
    int64_t S = a->pl.S_in, tok = dit_token_dim(&m->cfg), out = dit_out_dim(&m->cfg);
    int64_t Lt = m->cfg.f.cross_attn ? L : 1, dt = m->cfg.d_text > 0 ? m->cfg.d_text : 1;
    VFM_TRY(carve(cv, &g->x, S, tok));
    VFM_TRY(carve_f32(cv, &g->x32, S, tok));
    VFM_TRY(carve(cv, &g->text, Lt, dt));
    VFM_TRY(carve_f32(cv, &g->text32, Lt, dt));
    VFM_TRY(carve_f32(cv, &g->c_noise, B, 0));
    VFM_TRY(carve_f32(cv, &g->fps, B, 0));
    VFM_TRY(carve_as(cv, &g->t2s, DT_I32, S, 0));
    VFM_TRY(carve_as(cv, &g->pos, DT_I32, S, 3));
    VFM_TRY(carve_as(cv, &g->labels, DT_I32, B, 0));
    for (int k = 0; k < 8; k++) VFM_TRY(carve_as(cv, &g->cu[k], DT_I32, B + 1, 0));
    VFM_TRY(carve(cv, &g->out, S, out));
    VFM_TRY(carve_f32(cv, &g->out32, S, out));
    return carve(cv, &g->dout, S, out);
}

static vfm_status carve_conditioning(const DiT *m, Carver *cv, Acts *a, int64_t Rl, int B) {
    const DiTConfig *c = &m->cfg;
    int64_t D = c->hidden, F = c->fps_dim;
    if (c->f.conv_patch) VFM_TRY(carve(cv, &a->x_perm, Rl, dit_token_dim(c)));
    VFM_TRY(carve(cv, &a->t_in, B, c->f.t_freq_dim));
    VFM_TRY(carve(cv, &a->t1_pre, B, D));
    VFM_TRY(carve(cv, &a->t1, B, D));
    VFM_TRY(carve(cv, &a->t_emb, B, D));
    if (c->f.fps_embedder) {
        VFM_TRY(carve(cv, &a->f_in, B, F));
        VFM_TRY(carve(cv, &a->f1_pre, B, F));
        VFM_TRY(carve(cv, &a->f1, B, F));
        VFM_TRY(carve(cv, &a->f_emb, B, F));
        VFM_TRY(carve(cv, &a->d_f_emb, B, F));
        VFM_TRY(carve(cv, &a->d_f1, B, F));
    }
    if (c->num_classes > 0) VFM_TRY(carve(cv, &a->y_emb, B, D));
    VFM_TRY(carve(cv, &a->cond_raw, B, D));
    if (c->f.cond_norm) {
        VFM_TRY(carve_f32(cv, &a->cond_rstd, B, 0));
        VFM_TRY(carve(cv, &a->cond, B, D));
        VFM_TRY(carve(cv, &a->d_cond_raw, B, D));
    } else {
        a->cond = a->cond_raw;
    }
    VFM_TRY(carve(cv, &a->cond_silu, B, D));
    VFM_TRY(carve(cv, &a->d_cond_silu, B, D));
    VFM_TRY(carve(cv, &a->d_cond, B, D));
    if (!c->f.cond_norm) a->d_cond_raw = a->d_cond;
    return carve(cv, &a->d_t1, B, D);
}

vfm_status dit_carve_acts(const DiT *m, Arena *arena, size_t *bytes, Acts *a, int64_t L, int B, int b0, int b1) {
    const DiTConfig *c = &m->cfg;
    int64_t D = c->hidden, nD = (int64_t)c->f.n_chunks * D, hd = c->head_dim;
    int64_t Dq = (int64_t)m->heads_local * hd, Dkv = (int64_t)m->kv_heads_local * hd;
    int64_t R = a->pl.R, Rl = a->pl.Rl;
    BlockActs *blocks = a->blocks;
    Placement pl = a->pl;
    memset(a, 0, sizeof *a);
    a->blocks = blocks;
    a->pl = pl;
    memset(blocks, 0, (size_t)c->layers * sizeof *blocks);
    a->S = pl.S_in, a->R = R, a->Rl = Rl, a->L = L, a->B = B;
    Carver cv = {arena, 0, m->device, m->act_dtype, m->device == DEV_CUDA ? ATTN_SPARE_ROWS : 0};
    VFM_TRY(carve_staging(m, &cv, a, L, B));
    VFM_TRY(carve_parallel(m, &cv, a));
    VFM_TRY(carve_conditioning(m, &cv, a, Rl, B));
    for (int l = b0; l < b1; l++) VFM_TRY(carve_block(m, &cv, &a->blocks[l], R, Rl, L, B));
    VFM_TRY(carve(&cv, &a->h_final, Rl, D));
    if (c->f.final_adaln) {
        VFM_TRY(carve(&cv, &a->fmod, B, 2 * D));
        VFM_TRY(carve(&cv, &a->fshift, B, D));
        VFM_TRY(carve(&cv, &a->fscale, B, D));
        VFM_TRY(carve_f32(&cv, &a->fmean, Rl, 0));
        VFM_TRY(carve_f32(&cv, &a->frstd, Rl, 0));
        VFM_TRY(carve(&cv, &a->fxm, Rl, D));
    }
    VFM_TRY(carve(&cv, &a->d_res, Rl, D));
    VFM_TRY(carve(&cv, &a->d_branch, Rl, D));
    VFM_TRY(carve(&cv, &a->d_xm, Rl, D));
    if (!a->d_xm_full.data) a->d_xm_full = a->d_xm;      /* no SP: the region's rows are the local rows */
    if (!a->d_partial.data) a->d_partial = a->d_branch;
    VFM_TRY(carve_attn(&cv, &a->d_attn_o, R, Dq));
    VFM_TRY(carve_attn(&cv, &a->d_q, R, Dq));
    VFM_TRY(carve_attn(&cv, &a->d_qn, R, Dq));
    VFM_TRY(carve_attn(&cv, &a->d_k, R, Dkv > Dq ? Dkv : Dq));
    VFM_TRY(carve_attn(&cv, &a->d_kn, R, Dkv > Dq ? Dkv : Dq));
    VFM_TRY(carve_attn(&cv, &a->d_v, R, Dkv > Dq ? Dkv : Dq));
    VFM_TRY(carve(&cv, &a->d_ffn, R, m->ffn_local));
    if (c->f.cross_attn) {
        VFM_TRY(carve_attn(&cv, &a->d_ck, L, Dq));
        VFM_TRY(carve_attn(&cv, &a->d_ckn, L, Dq));
        VFM_TRY(carve_attn(&cv, &a->d_cv, L, Dq));
    }
    VFM_TRY(carve(&cv, &a->d_mod, B, nD > 2 * D ? nD : 2 * D));
    for (int k = 0; k < c->f.n_chunks; k++) VFM_TRY(carve(&cv, &a->d_chunk[k], B, D));
    if (!c->f.adaln_full) VFM_TRY(carve(&cv, &a->d_u, B, c->adaln_lora));
    *bytes = cv.bytes;
    return VFM_OK;
}

/* Bytes of one slot for packs of up to these sizes and chunks of up to max_blocks blocks. */
static vfm_status slot_bytes(const DiT *m, int64_t max_tokens, int64_t max_text, int max_samples, int max_blocks,
                             size_t *bytes) {
    Acts probe;
    memset(&probe, 0, sizeof probe);
    probe.blocks = calloc((size_t)m->cfg.layers, sizeof *probe.blocks);
    if (!probe.blocks) return vfm_fail(VFM_ERR_NOMEM, "dit: block activations");
    dit_place_bounds(m, max_tokens, max_samples, &probe.pl);
    *bytes = 0;
    vfm_status s = dit_carve_acts(m, NULL, bytes, &probe, max_text, max_samples, 0, max_blocks);
    free(probe.blocks);
    return s;
}

/* A fresh arena is zeroed: rows no op writes (the attention operands' spare rows) must be finite. */
vfm_status dit_saved_fit(DiT *m, DiTSaved *sv) {
    if (sv->arena.base && sv->arena.size >= m->slot_bytes) return VFM_OK;
    if (sv->arena.base) arena_destroy(&sv->arena);
    VFM_TRY(arena_init(&sv->arena, m->device, m->slot_bytes));
    return device_memset0(m->device, sv->arena.base, sv->arena.size);
}

vfm_status dit_saved_create(DiT *m, DiTSaved **out) {
    *out = NULL;
    if (!m->slot_bytes) return vfm_fail(VFM_ERR_INTERNAL, "dit_saved_create: call dit_reserve first");
    DiTSaved *sv = calloc(1, sizeof *sv);
    if (sv) sv->a.blocks = calloc((size_t)m->cfg.layers, sizeof *sv->a.blocks);
    if (!sv || !sv->a.blocks) {
        free(sv);
        return vfm_fail(VFM_ERR_NOMEM, "dit: saved activations");
    }
    vfm_status s = dit_saved_fit(m, sv);
    if (s != VFM_OK) {
        dit_saved_destroy(m, sv);
        return s;
    }
    *out = sv;
    return VFM_OK;
}

void dit_saved_destroy(DiT *m, DiTSaved *sv) {
    (void)m;
    if (!sv) return;
    if (sv->arena.base) arena_destroy(&sv->arena);
    dit_place_free(&sv->a.pl);
    free(sv->a.blocks);
    free(sv);
}

vfm_status dit_reserve(DiT *m, int64_t max_tokens, int64_t max_text, int max_samples) {
    size_t bytes;
    VFM_TRY(slot_bytes(m, max_tokens, max_text, max_samples, dit_max_chunk_blocks(m), &bytes));
    if (bytes > m->slot_bytes) m->slot_bytes = bytes;
    if (!m->saved) VFM_TRY(dit_saved_create(m, &m->saved));
    return dit_saved_fit(m, m->saved);
}

size_t dit_activation_bytes(const DiT *m, int64_t tokens, int64_t text, int samples) {
    size_t bytes = 0;
    if (slot_bytes(m, tokens, m->cfg.f.cross_attn ? text : 0, samples, dit_max_chunk_blocks(m), &bytes) != VFM_OK)
        bytes = 0;
    return bytes;
}
