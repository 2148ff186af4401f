/* The parallel layout of a training run: keys, checks, groups, comms and layout-independent
 * checkpoint files (see train_parallel.h). */
#include "train_parallel.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "core/fileutil.h"
#include "core/log.h"
#include "parallel/ckpt_shard.h"
#include "train/fault_hooks.h"

enum { MADE_WORLD = 1, MADE_GRAD = 2, MADE_TP = 4, MADE_CP = 8, MADE_A2A = 16, MADE_RING = 32, MADE_GRAD_GPU = 64,
       MADE_PP = 128, MADE_EP = 256, MADE_TP_GPU = 512, MADE_CP_GPU = 1024, MADE_A2A_GPU = 2048, MADE_RING_GPU = 4096,
       MADE_PP_GPU = 8192, MADE_EP_GPU = 16384 };

vfm_status train_layout_from(TrainLayout *l, const Config *cfg, int warn) {
    memset(l, 0, sizeof *l);
    l->tp = (int)cfg_int(cfg, "model.tensor_model_parallel_size");
    l->pp = (int)cfg_int(cfg, "model.pipeline_model_parallel_size");
    l->cp = (int)cfg_int(cfg, "model.context_parallel_size");
    l->sp = cfg_bool(cfg, "model.sequence_parallel");
    l->vp = (int)cfg_int(cfg, "model.virtual_pipeline_model_parallel_size");
    l->ep = 1; /* model.expert_model_parallel_size: train_setup.c reads it, with the model's experts */
    if (l->sp && l->tp == 1) {
        if (warn) log_warn("config: model.sequence_parallel=true has no effect with model.tensor_model_parallel_size=1 (ignored)");
        l->sp = 0;
    }
    const char *type = cfg_str(cfg, "model.cp_comm_type");
    VFM_TRY(st_layout_keys(l, cfg, &type));
    int n = cfg_list_len(cfg, "model.hierarchical_context_parallel_sizes");
    const char *hkey = "model.hierarchical_context_parallel_sizes";
    if (l->cp_type == CP_COMM_A2A_P2P) {
        if (n != 2)
            return vfm_fail_at(VFM_ERR_USAGE, NULL, hkey, NULL,
                               "model.cp_comm_type=a2a+p2p needs two sizes [all-to-all group, ring] whose product is "
                               "model.context_parallel_size (%d), e.g. [2, %d]", l->cp, l->cp / 2 > 0 ? l->cp / 2 : 1);
        int64_t a = cfg_list_int(cfg, hkey, 0), r = cfg_list_int(cfg, hkey, 1);
        if (a < 1 || r < 1 || a * r != l->cp)
            return vfm_fail(VFM_ERR_USAGE, "model.hierarchical_context_parallel_sizes [%lld, %lld]: the product must be "
                            "model.context_parallel_size (%d)", (long long)a, (long long)r, l->cp);
        l->a2a_size = (int)a;
    } else if (n > 0) {
        return vfm_fail_at(VFM_ERR_USAGE, NULL, hkey, NULL, "applies to model.cp_comm_type=a2a+p2p only (it is %s)", type);
    }
    if (warn && l->cp == 1 && cfg_is_set(cfg, "model.cp_comm_type") && l->cp_type != CP_COMM_P2P)
        log_warn("config: model.cp_comm_type=%s has no effect with model.context_parallel_size=1", type);
    return VFM_OK;
}

vfm_status train_layout_check(const TrainLayout *l, const DiTConfig *mc, int world_size) {
    ParallelLayout probe;
    VFM_TRY(layout_init(&probe, world_size, 0, l->tp, l->pp, l->cp));
    if (l->ep > 1 && (probe.dp * probe.cp) % l->ep != 0)
        return vfm_fail_at(VFM_ERR_USAGE, NULL, "model.expert_model_parallel_size", NULL,
                           "%d must divide DP·CP = %d (DP %d = world %d / TP·PP·CP %d; CP %d): the EP ranks are ranks "
                           "of the DP×CP group", l->ep, probe.dp * probe.cp, probe.dp, world_size,
                           l->tp * l->pp * l->cp, probe.cp);
    return dit_check_parallel(mc, l->tp, l->sp, l->cp, l->cp_type, l->a2a_size);
}

void train_layout_describe(const TrainLayout *l, int dp, char *out, size_t n) {
    size_t k = 0;
    out[0] = 0;
#define PUT(...) (k += (size_t)snprintf(out + k, k < n ? n - k : 0, __VA_ARGS__))
    if (l->tp > 1) PUT("TP%d%s", l->tp, l->sp ? "+SP" : "");
    if (l->pp > 1) {
        PUT("%sPP%d", k ? " × " : "", l->pp);
        if (l->vp > 1) PUT(" (V=%d)", l->vp);
    }
    if (l->cp > 1) {
        PUT("%sCP%d %s", k ? " × " : "", l->cp, l->hybrid ? "hybrid, full attention" : "");
        PUT("%s%s", l->hybrid ? " " : "", cp_comm_type_name(l->cp_type));
        if (l->cp_type == CP_COMM_A2A_P2P) PUT(" [%d, %d]", l->a2a_size, l->cp / l->a2a_size);
    }
    PUT("%sDP%d", k ? " × " : "", dp);
    if (l->ep > 1) PUT(" (EP%d within DP)", l->ep);
#undef PUT
}

void train_layout_state(const TrainLayout *l, int world, int dp, DpSharding sharding, const RecomputeConfig *rc,
                        char *out, size_t n) {
    char cp_type[48], plan[48];
    snprintf(cp_type, sizeof cp_type, "%s", cp_comm_type_name(l->cp_type));
    if (l->cp_type == CP_COMM_A2A_P2P)
        snprintf(cp_type + strlen(cp_type), sizeof cp_type - strlen(cp_type), "[%d,%d]", l->a2a_size, l->cp / l->a2a_size);
    if (rc->granularity == RECOMPUTE_FULL)
        snprintf(plan, sizeof plan, "full,%s,%d", rc->method == RECOMPUTE_BLOCK ? "block" : "uniform", rc->num_layers);
    else
        snprintf(plan, sizeof plan, "%s", rc->granularity == RECOMPUTE_SELECTIVE ? "selective" : "none");
    snprintf(out, n, "world=%d dp=%d pp=%d vp=%d cp=%d tp=%d sp=%d ep=%d cp_comm_type=%s sharding=%s recompute=%s", world,
             dp, l->pp, l->vp > 1 ? l->vp : 1, l->cp, l->tp, l->sp, l->ep > 1 ? l->ep : 1, cp_type,
             dp_sharding_name(sharding), plan);
}

void train_parallel_free(TrainParallel *p) {
    Comm *comms[] = {&p->world, &p->grad, &p->tp, &p->cp, &p->a2a, &p->ring, &p->grad_gpu, &p->pp, &p->ep,
                     &p->tp_gpu, &p->cp_gpu, &p->a2a_gpu, &p->ring_gpu, &p->pp_gpu, &p->ep_gpu};
    for (int i = 0; i < (int)(sizeof comms / sizeof comms[0]); i++)
        if (p->made & (1u << i)) comm_free(comms[i]);
    p->made = 0;
}

static vfm_status make_group(TrainParallel *p, Comm *c, unsigned bit, GroupKind kind, CommBackend backend) {
    VFM_TRY(comm_create_group(c, &p->layout, kind, backend));
    p->made |= bit;
    return VFM_OK;
}

static vfm_status make_cp_subgroup(TrainParallel *p, Comm *c, unsigned bit, int ring, CommBackend backend) {
    int members[4096];
    int n = ring ? p->layout.cp / p->keys.a2a_size : p->keys.a2a_size;
    cp_subgroup_members(&p->layout, p->keys.a2a_size, ring, p->layout.rank, members);
    VFM_TRY(comm_create(c, ring ? "cp-ring" : "cp-a2a", backend, members, n));
    p->made |= bit;
    return VFM_OK;
}

/* Expert parallelism: the EP group (edp = 0) or the expert-data-parallel group (edp = 1: CP included). */
static vfm_status make_ep_subgroup(TrainParallel *p, Comm *c, unsigned bit, int edp, CommBackend backend) {
    int members[4096];
    int n = edp ? p->layout.dp * p->layout.cp / p->keys.ep : p->keys.ep;
    ep_subgroup_members(&p->layout, p->keys.ep, edp, p->layout.rank, members);
    VFM_TRY(comm_create(c, edp ? "edp" : "ep", backend, members, n));
    p->made |= bit;
    return VFM_OK;
}

vfm_status train_parallel_init(TrainParallel *p, const TrainLayout *keys, int world_size, int rank) {
    memset(p, 0, sizeof *p);
    p->keys = *keys;
    VFM_TRY(layout_init(&p->layout, world_size, rank, keys->tp, keys->pp, keys->cp));
    /* every rank creates the same groups in the same order (creation is collective) */
    VFM_TRY(make_group(p, &p->world, MADE_WORLD, GROUP_WORLD, COMM_BACKEND_MPI));
    if (keys->ep > 1 && ((p->layout.dp * p->layout.cp) % keys->ep != 0 || p->layout.dp * p->layout.cp > 4096))
        return vfm_fail(VFM_ERR_INTERNAL, "train: EP %d over DP·CP %d", keys->ep, p->layout.dp * p->layout.cp);
    if (keys->ep > 1) VFM_TRY(make_ep_subgroup(p, &p->grad, MADE_GRAD, 1, COMM_BACKEND_MPI));
    else VFM_TRY(make_group(p, &p->grad, MADE_GRAD, GROUP_DP_CP, COMM_BACKEND_MPI));
    VFM_TRY(make_group(p, &p->tp, MADE_TP, GROUP_TP, COMM_BACKEND_MPI));
    VFM_TRY(make_group(p, &p->cp, MADE_CP, GROUP_CP, COMM_BACKEND_MPI));
    VFM_TRY(make_group(p, &p->pp, MADE_PP, GROUP_PP, COMM_BACKEND_MPI));
    if (keys->cp > 1 && keys->cp_type == CP_COMM_A2A_P2P) {
        VFM_TRY(make_cp_subgroup(p, &p->a2a, MADE_A2A, 0, COMM_BACKEND_MPI));
        VFM_TRY(make_cp_subgroup(p, &p->ring, MADE_RING, 1, COMM_BACKEND_MPI));
    }
    if (keys->ep > 1) VFM_TRY(make_ep_subgroup(p, &p->ep, MADE_EP, 0, COMM_BACKEND_MPI));
    DiTParallel *d = &p->model;
    d->tp = keys->tp, d->tp_rank = p->layout.tp_rank, d->sequence_parallel = keys->sp;
    d->tp_comm = keys->tp > 1 ? &p->tp : NULL;
    d->cp = keys->cp, d->cp_rank = p->layout.cp_rank;
    d->cp_comm = keys->cp > 1 ? &p->cp : NULL;
    d->cpa.type = keys->cp_type, d->cpa.A = keys->a2a_size;
    d->pp = keys->pp, d->pp_rank = p->layout.pp_rank, d->vp = keys->vp > 1 ? keys->vp : 1;
    d->pp_comm = keys->pp > 1 ? &p->pp : NULL;
    d->ep = keys->ep > 1 ? keys->ep : 1;
    d->ep_rank = keys->ep > 1 ? ep_index_in_dp_cp(&p->layout, p->layout.rank) % keys->ep : 0;
    d->ep_comm = keys->ep > 1 ? &p->ep : NULL;
    if (keys->cp > 1)
        VFM_TRY(cp_attention_init(&d->cpa, keys->cp_type, &p->cp, (p->made & MADE_A2A) ? &p->a2a : NULL,
                                  (p->made & MADE_RING) ? &p->ring : NULL));
    /* Test hook (the test build only: fault_hooks.h): VFM_TEST_BREAK=tp skips the TP reduction that
     * closes block 1's self-attention, =ring drops ring step 1, =qknorm leaves Wan's QK-norm statistic
     * unsummed over TP: broken runs the end-to-end tests must catch. */
    const char *brk = fault_hook_env("VFM_TEST_BREAK");
    if (brk && strcmp(brk, "tp") == 0) d->test_skip_tp_reduce = 2;
    if (brk && strcmp(brk, "qknorm") == 0) d->test_skip_qk_norm_sum = 1;
    if (brk && strcmp(brk, "ring") == 0) d->cpa.test_drop_ring_step = 1;
    if (brk && strcmp(brk, "ep") == 0) d->test_permute_ep_a2a = 1; /* =ep swaps two rows of one dispatch all-to-all */
    d->st_hybrid = keys->hybrid; /* ST-DiT: =st skips the all-to-all of block 1's temporal attention */
    if (brk && strcmp(brk, "st") == 0) d->test_skip_st_a2a = 2;
    return VFM_OK;
}

/* names += "+name" ("name" first): the groups of the log's device line */
static void add_name(char *names, size_t n, const char *name) {
    size_t k = strlen(names);
    snprintf(names + k, n - k, "%s%s", k ? "+" : "", name);
}

/* The model's TP, CP, PP and EP activations over NCCL: its comms become NCCL comms over the same
 * ranks in the same order (the MPI ones stay, for what moves host memory — checkpoints, validation's
 * sums — and for the gradients' TP, PP and EP sums, which the MPI backend stages). *names: which. */
static vfm_status model_groups_over_nccl(TrainParallel *p, char *names, size_t n) {
    DiTParallel *d = &p->model;
    names[0] = 0;
    if (p->keys.tp > 1) {
        VFM_TRY(make_group(p, &p->tp_gpu, MADE_TP_GPU, GROUP_TP, COMM_BACKEND_NCCL));
        d->tp_comm = &p->tp_gpu, add_name(names, n, "TP");
    }
    if (p->keys.cp > 1) {
        VFM_TRY(make_group(p, &p->cp_gpu, MADE_CP_GPU, GROUP_CP, COMM_BACKEND_NCCL));
        d->cp_comm = &p->cp_gpu, add_name(names, n, "CP");
        if (p->keys.cp_type == CP_COMM_A2A_P2P) {
            VFM_TRY(make_cp_subgroup(p, &p->a2a_gpu, MADE_A2A_GPU, 0, COMM_BACKEND_NCCL));
            VFM_TRY(make_cp_subgroup(p, &p->ring_gpu, MADE_RING_GPU, 1, COMM_BACKEND_NCCL));
        }
        int drop = d->cpa.test_drop_ring_step; /* the test hook survives the new comms */
        VFM_TRY(cp_attention_init(&d->cpa, p->keys.cp_type, &p->cp_gpu, (p->made & MADE_A2A_GPU) ? &p->a2a_gpu : NULL,
                                  (p->made & MADE_RING_GPU) ? &p->ring_gpu : NULL));
        d->cpa.test_drop_ring_step = drop;
    }
    if (p->keys.pp > 1) {
        VFM_TRY(make_group(p, &p->pp_gpu, MADE_PP_GPU, GROUP_PP, COMM_BACKEND_NCCL));
        d->pp_comm = &p->pp_gpu, add_name(names, n, "PP");
    }
    if (p->keys.ep > 1) { /* the experts' fixed-size token all-to-all (moe.c) */
        VFM_TRY(make_ep_subgroup(p, &p->ep_gpu, MADE_EP_GPU, 0, COMM_BACKEND_NCCL));
        d->ep_comm = &p->ep_gpu, add_name(names, n, "EP");
    }
    return VFM_OK;
}

vfm_status train_parallel_gpu(TrainParallel *p, const LaunchInfo *launch, char *how, size_t how_n) {
    int device = -1;
    VFM_TRY(comm_bind_gpu(launch->local_rank, &device));
    int n = p->grad.size;
    if (launch->world_size == 1) {
        snprintf(how, how_n, "GPU %d", device);
        return VFM_OK;
    }
    /* NCCL wants one GPU per rank: every rank must be able to, or none uses it */
    int can = comm_nccl_available() && device_cuda_count() >= launch->local_size, all = can;
    VFM_TRY(comm_all_reduce(&p->world, &all, 1, DT_I32, COMM_SUM));
    if (all != launch->world_size) {
        snprintf(how, how_n, "GPU %d; %s over MPI through host memory (%d ranks; NCCL %s)", device,
                 n > 1 ? "gradients" : "activations", launch->world_size,
                 !comm_nccl_available() ? "not loaded" : "needs a GPU per rank");
        return VFM_OK;
    }
    char groups[16];
    if (n > 1) {
        if (p->keys.ep > 1) VFM_TRY(make_ep_subgroup(p, &p->grad_gpu, MADE_GRAD_GPU, 1, COMM_BACKEND_NCCL));
        else VFM_TRY(make_group(p, &p->grad_gpu, MADE_GRAD_GPU, GROUP_DP_CP, COMM_BACKEND_NCCL));
        p->grad_dev = &p->grad_gpu;
    }
    VFM_TRY(model_groups_over_nccl(p, groups, sizeof groups));
    size_t k = (size_t)snprintf(how, how_n, "GPU %d", device);
    if (n > 1 && k < how_n) k += (size_t)snprintf(how + k, how_n - k, "; gradients over NCCL (%d ranks)", n);
    if (groups[0] && k < how_n) snprintf(how + k, how_n - k, "; %s activations over NCCL", groups);
    return VFM_OK;
}

vfm_status train_parallel_dp_init(TrainParallel *p, DataParallel *dp, const DiT *m, double bucket_mb, int zero1) {
    DpConfig dc = {bucket_mb, zero1, p->layout.tp_rank, p->layout.pp_rank, p->keys.cp};
    /* Test hook (the test build only: fault_hooks.h): VFM_TEST_BREAK=pp skips the sum of the replicated embedders' gradients over the
     * stages (the broken variant the end-to-end tests must catch). */
    const char *brk = fault_hook_env("VFM_TEST_BREAK");
    int pp_sum = p->keys.pp > 1 && !(brk && strcmp(brk, "pp") == 0);
    VFM_TRY(dp_init(dp, &m->table, &dc, &p->grad, p->keys.tp > 1 ? &p->tp : NULL, pp_sum ? &p->pp : NULL));
    dp_set_sequence_parallel(dp, p->keys.sp);
    dp_set_expert_parallel(dp, p->keys.ep > 1 ? &p->ep : NULL);
    dp_set_device(dp, m->device, p->grad_dev);
    return VFM_OK;
}

vfm_status train_parallel_fsdp_init(TrainParallel *p, Fsdp *f, DiT *m, DpSharding strategy, int accumulate_unsharded) {
    FsdpConfig fc = {strategy, accumulate_unsharded, p->keys.cp, p->layout.tp_rank, p->layout.pp_rank};
    Comm *grad = m->device != DEV_CPU && p->grad_dev ? p->grad_dev : &p->grad;
    VFM_TRY(dit_fsdp_create(m, f, &fc, grad, p->keys.tp > 1 ? &p->tp : NULL));
    fsdp_set_host_comm(f, &p->grad); /* NCCL takes device buffers only: host scalars go over MPI */
    fsdp_set_expert_parallel(f, p->keys.ep > 1 ? &p->ep : NULL);
    return VFM_OK;
}

/* ---- checkpoints ------------------------------------------------------------------------- */

static void file_in(char *out, size_t n, const char *dir, const char *name) { path_join(out, n, dir, name); }

/* Host copies of a GPU model's master weights and EMA (NULL for a CPU model: its own buffers). */
typedef struct HostWeights {
    float *params, *ema;
} HostWeights;

static void host_weights_free(HostWeights *h) {
    free(h->params);
    free(h->ema);
    memset(h, 0, sizeof *h);
}

static vfm_status host_weights(const DiT *m, int with_ema, HostWeights *h) {
    memset(h, 0, sizeof *h);
    size_t bytes = (size_t)(m->table.total > 0 ? m->table.total : 1) * sizeof(float);
    h->params = malloc(bytes);
    h->ema = with_ema ? malloc(bytes) : NULL;
    if (!h->params || (with_ema && !h->ema)) {
        host_weights_free(h);
        return vfm_fail(VFM_ERR_NOMEM, "checkpoint: host copies of %lld weights", (long long)m->table.total);
    }
    return VFM_OK;
}

vfm_status train_parallel_save(TrainParallel *p, const DiT *m, const float *ema, const DataParallel *dp,
                               const Optimizer *o, const char *stage) {
    char path[1700];
    /* one rank per (TP, PP) shard writes the weights (dp = cp = 0); under EP the first EP group of
     * the DP×CP group, each EP rank its experts */
    int writes = ep_index_in_dp_cp(&p->layout, p->layout.rank) < (p->keys.ep > 1 ? p->keys.ep : 1);
    const float *params = m->params;
    HostWeights h = {0};
    Optimizer ho;
    int have_ho = 0;
    vfm_status s = VFM_OK;
    if (m->device != DEV_CPU) { /* the files hold the fp32 master weights: copies from the GPU */
        s = host_weights(m, ema != NULL, &h);
        if (s == VFM_OK) s = dit_params_to_host(m, h.params);
        if (s == VFM_OK && ema)
            s = device_memcpy(h.ema, DEV_CPU, ema, m->device, (size_t)m->table.total * sizeof(float));
        if (s == VFM_OK && o && (s = optimizer_host_copy(o, &ho)) == VFM_OK) have_ho = 1, o = &ho;
        params = h.params, ema = ema ? h.ema : NULL;
    }
    file_in(path, sizeof path, stage, "model.safetensors");
    if (s == VFM_OK) s = ckpt_write_weights(path, &p->world, m->shards, params, writes);
    if (s == VFM_OK && ema) {
        file_in(path, sizeof path, stage, "ema.safetensors");
        s = ckpt_write_weights(path, &p->world, m->shards, ema, writes);
    }
    if (s == VFM_OK && o) {
        file_in(path, sizeof path, stage, "optim.safetensors");
        s = ckpt_write_optim(path, &p->world, m->shards, o, dp->own_begin, dp->own_end);
    }
    if (have_ho) optimizer_free(&ho);
    host_weights_free(&h);
    return s;
}

/* 1 when dir holds optim.<rank>.safetensors shards (checkpoints written before optim.safetensors). */
static int has_legacy_optim(const char *dir) {
    char path[1700];
    file_in(path, sizeof path, dir, "optim.0.safetensors");
    return path_exists(path);
}

static vfm_status load_host(TrainParallel *p, const DiT *m, float *params, float *ema, DataParallel *dp, Optimizer *o,
                            const char *dir) {
    char path[1700];
    file_in(path, sizeof path, dir, "model.safetensors");
    VFM_TRY(ckpt_read_weights(path, m->shards, params));
    if (ema) {
        file_in(path, sizeof path, dir, "ema.safetensors");
        if (path_exists(path)) VFM_TRY(ckpt_read_weights(path, m->shards, ema));
        else memcpy(ema, params, (size_t)m->table.total * sizeof(float));
    }
    if (!o) return VFM_OK;
    file_in(path, sizeof path, dir, "optim.safetensors");
    if (path_exists(path)) return ckpt_read_optim(path, m->shards, o);
    if (has_legacy_optim(dir) && p->keys.tp == 1 && p->keys.ep <= 1) return dp_optim_load(dp, o, dir);
    return vfm_fail(VFM_ERR_FORMAT, "%s: no optimizer state (optim.safetensors)%s", dir,
                    has_legacy_optim(dir) ? "; its optim.<rank>.safetensors shards load only at TP 1 without EP" : "");
}

vfm_status train_parallel_load(TrainParallel *p, DiT *m, float *ema, DataParallel *dp, Optimizer *o, const char *dir) {
    if (m->device == DEV_CPU) return load_host(p, m, m->params, ema, dp, o, dir);
    /* a GPU model: read into host copies (any checkpoint, written on either device), then copy up */
    HostWeights h;
    Optimizer ho;
    int have_ho = 0;
    vfm_status s = host_weights(m, ema != NULL, &h);
    if (s == VFM_OK && o && (s = optimizer_host_copy(o, &ho)) == VFM_OK) have_ho = 1;
    if (s == VFM_OK) s = load_host(p, m, h.params, h.ema, dp, have_ho ? &ho : NULL, dir);
    if (s == VFM_OK) s = dit_params_from_host(m, h.params);
    if (s == VFM_OK && ema) s = device_memcpy(ema, m->device, h.ema, DEV_CPU, (size_t)m->table.total * sizeof(float));
    if (s == VFM_OK && have_ho) s = optimizer_copy_from_host(o, &ho);
    if (have_ho) optimizer_free(&ho);
    host_weights_free(&h);
    return s;
}

/* ---- checkpoints of ZeRO-2/3: the master shard ----------------------------------------------- */

/* A host view of n floats of a buffer on `device`: the buffer itself on the CPU, else a copy
 * (from_device: filled from it). */
static vfm_status host_view(Device device, float *buf, int64_t n, int from_device, float **out) {
    if (device == DEV_CPU || !buf) {
        *out = buf;
        return VFM_OK;
    }
    *out = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    if (!*out) return vfm_fail(VFM_ERR_NOMEM, "checkpoint: a host copy of %lld values", (long long)n);
    return from_device ? device_memcpy(*out, DEV_CPU, buf, device, (size_t)n * sizeof(float)) : VFM_OK;
}

static void host_view_free(Device device, float *view) {
    if (device != DEV_CPU) free(view);
}

vfm_status train_parallel_save_fsdp(TrainParallel *p, const DiT *m, Fsdp *f, const float *ema_shard, const Optimizer *o,
                                    const char *stage) {
    char path[1700];
    int64_t lo = f->dp.own_begin, hi = f->dp.own_end;
    float *w = NULL, *e = NULL;
    Optimizer ho;
    int have_ho = 0;
    vfm_status s = host_view(f->device, f->master, hi - lo, 1, &w);
    if (s == VFM_OK) s = host_view(f->device, (float *)ema_shard, hi - lo, 1, &e);
    if (s == VFM_OK && o && f->device != DEV_CPU && (s = optimizer_host_copy(o, &ho)) == VFM_OK) have_ho = 1, o = &ho;
    file_in(path, sizeof path, stage, "model.safetensors");
    if (s == VFM_OK) s = ckpt_write_weights_range(path, &p->world, m->shards, w, lo, hi);
    if (s == VFM_OK && e) {
        file_in(path, sizeof path, stage, "ema.safetensors");
        s = ckpt_write_weights_range(path, &p->world, m->shards, e, lo, hi);
    }
    if (s == VFM_OK && o) {
        file_in(path, sizeof path, stage, "optim.safetensors");
        s = ckpt_write_optim(path, &p->world, m->shards, o, lo, hi);
    }
    if (have_ho) optimizer_free(&ho);
    if (w) host_view_free(f->device, w);
    if (e) host_view_free(f->device, e);
    return s;
}

vfm_status train_parallel_load_fsdp(TrainParallel *p, const DiT *m, Fsdp *f, float *ema_shard, Optimizer *o,
                                    const char *dir) {
    char path[1700];
    int64_t lo = f->dp.own_begin, hi = f->dp.own_end, n = hi - lo;
    float *w = NULL, *e = NULL;
    Optimizer ho;
    int have_ho = 0;
    vfm_status s = host_view(f->device, f->master, n, 0, &w);
    if (s == VFM_OK) s = host_view(f->device, ema_shard, n, 0, &e);
    if (s == VFM_OK && o && f->device != DEV_CPU && (s = optimizer_host_copy(o, &ho)) == VFM_OK) have_ho = 1;
    Optimizer *oh = have_ho ? &ho : o;
    file_in(path, sizeof path, dir, "model.safetensors");
    if (s == VFM_OK) s = ckpt_read_weights_range(path, m->shards, w, lo, hi);
    if (s == VFM_OK && e) {
        file_in(path, sizeof path, dir, "ema.safetensors");
        if (path_exists(path)) s = ckpt_read_weights_range(path, m->shards, e, lo, hi);
        else if (n > 0) memcpy(e, w, (size_t)n * sizeof(float));
    }
    if (s == VFM_OK && oh) {
        file_in(path, sizeof path, dir, "optim.safetensors");
        if (path_exists(path)) s = ckpt_read_optim(path, m->shards, oh);
        else if (has_legacy_optim(dir) && p->keys.tp == 1 && p->keys.ep <= 1) s = dp_optim_load(&f->dp, oh, dir);
        else s = vfm_fail(VFM_ERR_FORMAT, "%s: no optimizer state (optim.safetensors)", dir);
    }
    if (s == VFM_OK && f->device != DEV_CPU) {
        s = device_memcpy(f->master, f->device, w, DEV_CPU, (size_t)n * sizeof(float));
        if (s == VFM_OK && e) s = device_memcpy(ema_shard, f->device, e, DEV_CPU, (size_t)n * sizeof(float));
        if (s == VFM_OK && have_ho) s = optimizer_copy_from_host(o, &ho);
    }
    if (s == VFM_OK) s = fsdp_distribute_master(f);
    if (have_ho) optimizer_free(&ho);
    if (w) host_view_free(f->device, w);
    if (e) host_view_free(f->device, e);
    return s;
}
