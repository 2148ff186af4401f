/* The activation memory of a DiT: what one forward keeps for its backward and the backward's
 * scratch, laid out for a pack's sizes (only the tensors the variant uses), and dit_reserve. */
#include <stdlib.h>
#include <string.h>

#include "model/dit_internal.h"

/* Carves tensors out of the arena, or only counts bytes (arena NULL). */
typedef struct Carver {
    Arena *arena;
    size_t bytes;
    Device device;
} Carver;

static vfm_status carve(Carver *cv, Tensor *t, int64_t d0, int64_t d1) {
    int64_t shape[2] = {d0, d1};
    *t = tensor_make(NULL, DT_F32, cv->device, d1 > 0 ? 2 : 1, shape);
    size_t bytes = (tensor_bytes(t) + 255) & ~(size_t)255;
    cv->bytes += bytes;
    if (!cv->arena) return VFM_OK;
    return arena_alloc(cv->arena, bytes, &t->data);
}

static vfm_status carve_block(const DiT *m, Carver *cv, BlockActs *b, int64_t S, int64_t L, int B) {
    const DiTConfig *c = &m->cfg;
    int64_t D = c->hidden, Dkv = (int64_t)c->kv_heads * c->head_dim;
    VFM_TRY(carve(cv, &b->h0, S, D));
    VFM_TRY(carve(cv, &b->h1, S, D));
    if (c->f.cross_attn) VFM_TRY(carve(cv, &b->h2, S, D));
    else b->h2 = b->h1;
    for (int k = 0; k < 3; k++) {
        if (k == 1 && !c->f.cross_attn) continue;
        VFM_TRY(carve(cv, &b->mean[k], S, 0));
        VFM_TRY(carve(cv, &b->rstd[k], S, 0));
        VFM_TRY(carve(cv, &b->xm[k], S, D));
    }
    VFM_TRY(carve(cv, &b->q, S, D));
    VFM_TRY(carve(cv, &b->k, S, Dkv));
    VFM_TRY(carve(cv, &b->v, S, Dkv));
    if (c->f.self_qk_norm) {
        VFM_TRY(carve(cv, &b->qn, S, D));
        VFM_TRY(carve(cv, &b->kn, S, Dkv));
        VFM_TRY(carve(cv, &b->q_rstd, S * c->heads, 0));
        VFM_TRY(carve(cv, &b->k_rstd, S * c->kv_heads, 0));
    } else {
        b->qn = b->q, b->kn = b->k;
    }
    VFM_TRY(carve(cv, &b->o, S, D));
    VFM_TRY(carve(cv, &b->lse, S, c->heads));
    VFM_TRY(carve(cv, &b->a, S, D));
    if (c->f.cross_attn) {
        VFM_TRY(carve(cv, &b->cq, S, D));
        VFM_TRY(carve(cv, &b->ck, L, D));
        VFM_TRY(carve(cv, &b->cv, L, D));
        if (c->f.cross_qk_norm) {
            VFM_TRY(carve(cv, &b->cqn, S, D));
            VFM_TRY(carve(cv, &b->ckn, L, D));
            VFM_TRY(carve(cv, &b->cq_rstd, S * c->heads, 0));
            VFM_TRY(carve(cv, &b->ck_rstd, L * c->heads, 0));
        } else {
            b->cqn = b->cq, b->ckn = b->ck;
        }
        VFM_TRY(carve(cv, &b->co, S, D));
        VFM_TRY(carve(cv, &b->clse, S, c->heads));
        VFM_TRY(carve(cv, &b->c, S, D));
    }
    VFM_TRY(carve(cv, &b->f_pre, S, c->ffn));
    VFM_TRY(carve(cv, &b->f, S, c->ffn));
    VFM_TRY(carve(cv, &b->mo, S, D));
    if (!c->f.adaln_full) VFM_TRY(carve(cv, &b->u, B, c->adaln_lora));
    VFM_TRY(carve(cv, &b->mod, B, (int64_t)c->f.n_chunks * D));
    for (int k = 0; k < c->f.n_chunks; k++) VFM_TRY(carve(cv, &b->chunk[k], B, D));
    return VFM_OK;
}

static vfm_status carve_conditioning(const DiT *m, Carver *cv, Acts *a, int64_t S, int B) {
    const DiTConfig *c = &m->cfg;
    int64_t D = c->hidden, F = c->fps_dim;
    if (c->f.conv_patch) VFM_TRY(carve(cv, &a->x_perm, S, dit_token_dim(c)));
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
        VFM_TRY(carve(cv, &a->cond_rstd, B, 0));
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

vfm_status dit_carve_acts(const DiT *m, Arena *arena, size_t *bytes, Acts *a, int64_t S, int64_t L, int B) {
    const DiTConfig *c = &m->cfg;
    int64_t D = c->hidden, Dkv = (int64_t)c->kv_heads * c->head_dim, nD = (int64_t)c->f.n_chunks * D;
    BlockActs *blocks = a->blocks;
    memset(a, 0, sizeof *a);
    a->blocks = blocks;
    memset(blocks, 0, (size_t)c->layers * sizeof *blocks);
    a->S = S, a->L = L, a->B = B;
    Carver cv = {arena, 0, m->device};
    VFM_TRY(carve_conditioning(m, &cv, a, S, B));
    for (int l = 0; l < c->layers; l++) VFM_TRY(carve_block(m, &cv, &a->blocks[l], S, L, B));
    VFM_TRY(carve(&cv, &a->h_final, S, D));
    if (c->f.final_adaln) {
        VFM_TRY(carve(&cv, &a->fmod, B, 2 * D));
        VFM_TRY(carve(&cv, &a->fshift, B, D));
        VFM_TRY(carve(&cv, &a->fscale, B, D));
        VFM_TRY(carve(&cv, &a->fmean, S, 0));
        VFM_TRY(carve(&cv, &a->frstd, S, 0));
        VFM_TRY(carve(&cv, &a->fxm, S, D));
    }
    VFM_TRY(carve(&cv, &a->d_res, S, D));
    VFM_TRY(carve(&cv, &a->d_branch, S, D));
    VFM_TRY(carve(&cv, &a->d_xm, S, D));
    VFM_TRY(carve(&cv, &a->d_attn_o, S, D));
    VFM_TRY(carve(&cv, &a->d_q, S, D));
    VFM_TRY(carve(&cv, &a->d_qn, S, D));
    VFM_TRY(carve(&cv, &a->d_k, S, Dkv > D ? Dkv : D));
    VFM_TRY(carve(&cv, &a->d_kn, S, Dkv > D ? Dkv : D));
    VFM_TRY(carve(&cv, &a->d_v, S, Dkv > D ? Dkv : D));
    VFM_TRY(carve(&cv, &a->d_ffn, S, c->ffn));
    if (c->f.cross_attn) {
        VFM_TRY(carve(&cv, &a->d_ck, L, D));
        VFM_TRY(carve(&cv, &a->d_ckn, L, D));
        VFM_TRY(carve(&cv, &a->d_cv, L, D));
    }
    VFM_TRY(carve(&cv, &a->d_mod, B, nD > 2 * D ? nD : 2 * D));
    for (int k = 0; k < c->f.n_chunks; k++) VFM_TRY(carve(&cv, &a->d_chunk[k], B, D));
    if (!c->f.adaln_full) VFM_TRY(carve(&cv, &a->d_u, B, c->adaln_lora));
    *bytes = cv.bytes;
    return VFM_OK;
}

vfm_status dit_reserve(DiT *m, int64_t max_tokens, int64_t max_text, int max_samples) {
    Acts probe;
    probe.blocks = calloc((size_t)m->cfg.layers, sizeof *probe.blocks);
    size_t bytes = 0;
    vfm_status s = dit_carve_acts(m, NULL, &bytes, &probe, max_tokens, max_text, max_samples);
    free(probe.blocks);
    VFM_TRY(s);
    if (!m->saved) {
        Acts *a = calloc(1, sizeof *a);
        a->blocks = calloc((size_t)m->cfg.layers, sizeof *a->blocks);
        m->saved = a;
    }
    if (m->arena.base && m->arena.size >= bytes) return VFM_OK;
    if (m->arena.base) arena_destroy(&m->arena);
    return arena_init(&m->arena, m->device, bytes);
}
