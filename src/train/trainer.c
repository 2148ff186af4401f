/* The training loop (see trainer.h). */
#include "trainer.h"

#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "core/config.h"
#include "core/fileutil.h"
#include "core/host_reads.h"
#include "core/log.h"
#include "core/timer.h"
#include "data/media/image_io.h"
#include "data/loader/pack_feed.h"
#include "data/loader/source.h"
#include "diffusion/objective.h"
#include "model/dit.h"
#include "ops/ops.h"
#include "parallel/comm.h"
#include "parallel/dp.h"
#include "parallel/fsdp.h"
#include "parallel/sharding.h"
#include "parallel/groups.h"
#include "parallel/launch.h"
#include "train/checkpoint.h"
#include "train/stop_signal.h"
#include "train/train_memory.h"
#include "train/train_parallel.h"
#include "train/train_pipeline.h"
#include "parallel/pp_stage.h"
#include "optim/optimizer.h"
#include "train/tensorboard.h"
#include "train/fault_hooks.h"
#include "train/resume_config.h"
#include "train/train_setup.h"
#include "train/run_device.h"
#include "train/validation.h"

typedef struct Trainer {
    Config *cfg;
    DiT model;
    Objective objective;
    Optimizer opt;
    PackSource *source;
    /* the job: ranks [DP][PP][CP][TP]; gradients reduce over the DP×CP group */
    LaunchInfo launch;
    TrainLayout layout;
    TrainParallel par;
    DataParallel dp;          /* no_shard and optim (ZeRO-1) */
    Fsdp fsdp;                /* optim_grads and optim_grads_params (ZeRO-2/3) */
    DataParallel *dpv;        /* the DP×CP means (loss, log, validation): &dp, or FSDP's flat view */
    DpSharding sharding;
    int rank, dp_rank, dp_size, have_comms, have_dp, have_fsdp;
    int buckets_issued;       /* buckets handed to DP during the current backward */
    vfm_status bucket_status; /* the first failure of a bucket reduction during backward */
    int overlap;              /* ddp.overlap_grad_reduce: issue buckets during backward */
    Device device;            /* train.device: where weights, gradients, Adam moments, EMA and activations live */
    float *ema;               /* [table.total] on `device`; ZeRO-2/3: [own_end - own_begin], the master shard's */
    double ema_decay;
    char run_dir[1024];       /* "" with checkpoint.save null: nothing is saved */
    FILE *metrics;
    TbWriter tb;              /* rank 0, when a TensorBoard directory is known */
    Validator val;
    int64_t step, train_iters, accum, consumed_samples;
    int save_interval, keep, log_interval, max_nonfinite;
    PackFeed feed;            /* the packs, one ahead on a GPU (data/loader/pack_feed.h) */
    const Pack *pack;         /* the current micro-batch's pack (the feed's) */
    ObjectiveWork work;       /* the objective's memory, kept for the run */
    int64_t fixed_len;        /* train.fixed_pack_length (under PP: the source's pack budget when 0); 0 = as packed */
    int padded;               /* packs are copied and padded to fixed_len (pipe.micro[k].pack) */
    TrainPipeline pipe;       /* PP: the step's micro-batches, schedule and activation slots */
    int have_pipe;
    char *data_info; /* JSON: kind, an example latent shape, pixel space, text encoder */
    /* The step's scalars on `device` (ops.h "the training step's scalars"): the loss, the norm, the
     * decision to apply or skip the update, AdamW's count, and one record (loss, norm, ok) per step
     * since the host last read them (read_counters: once per log interval, and before checkpoints) */
    Tensor step_state;
    int64_t unread;           /* steps recorded in step_state and not yet read */
    int64_t *unread_samples;  /* [log_interval] consumed_samples after each unread step */
    double *unread_seconds;   /* [log_interval] the host's time in each unread step */
    int consecutive_bad;      /* skipped steps in a row, as of the last read */
    int stop_run;             /* the run of skipped steps that stops training (0: none yet) */
    double seconds_per_step;  /* between the last two reads of the counters (waits for the device included) */
    double read_time;         /* when the counters were last read (0: not yet) */
} Trainer;

/* ---- set-up ----------------------------------------------------------------------------- */

/* Resume (same run: step, optimizer, data position) or fine-tune (weights only) from a checkpoint. */
static vfm_status restore(Trainer *t, const char *dir, int finetune, int with_optim) {
    CheckpointState st;
    VFM_TRY(checkpoint_read_meta(dir, &st));
    Optimizer *o = with_optim && !finetune ? &t->opt : NULL;
    /* the same run goes on: the same model and objective (fine-tuning starts a new one) */
    vfm_status s = finetune ? VFM_OK : resume_config_check(t->cfg, st.config_yaml, dir, t->rank == 0);
    if (s == VFM_OK)
        s = t->have_fsdp ? train_parallel_load_fsdp(&t->par, &t->model, &t->fsdp, t->ema, o, dir)
                                : train_parallel_load(&t->par, &t->model, t->ema, &t->dp, o, dir);
    if (s == VFM_OK && t->have_fsdp) s = dit_refresh_weights(&t->model); /* the whole units' bf16 copies */
    if (s == VFM_OK && !finetune) {
        t->step = st.step;
        t->opt.step = with_optim ? st.optimizer_step : 0;
        t->consumed_samples = st.consumed_samples;
        if (st.loader_state) s = t->source->set_state(t->source, st.loader_state);
    }
    if (s == VFM_OK)
        log_info("%s %s (step %lld)%s", finetune ? "fine-tuning from" : "resumed from", dir, (long long)st.step,
                 finetune ? ": weights only, step 0, fresh optimizer" : with_optim ? "" : " without optimizer state");
    checkpoint_state_free(&st);
    return s;
}

/* --resume DIR or checkpoint.load (`what`, named in messages) may name a run directory (its newest
 * checkpoint) or one iter_ directory. */
static vfm_status resolve_checkpoint(const char *path, const char *what, char *out, size_t n) {
    int found = 0;
    char done[1100];
    path_join(done, sizeof done, path, "DONE");
    if (path_exists(done)) {
        snprintf(out, n, "%s", path);
        return VFM_OK;
    }
    if (!path_exists(path)) return vfm_fail(VFM_ERR_USAGE, "%s %s: no such directory", what, path);
    VFM_TRY(checkpoint_find_latest(path, out, n, &found));
    if (!found) return vfm_fail(VFM_ERR_USAGE, "%s %s: holds no complete checkpoint", what, path);
    return VFM_OK;
}

/* Keeps only metrics lines of steps before `step` (a resumed run rewrites what came after). */
static void truncate_metrics(const char *path, int64_t step) {
    char *data;
    size_t size;
    if (read_file_all(path, &data, &size) != VFM_OK) return;
    char *keep = malloc(size + 1);
    size_t k = 0;
    for (char *line = data; *line;) {
        char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line + 1) : strlen(line);
        long long s = -1;
        const char *p = strstr(line, "\"step\":");
        if (p) s = atoll(p + 7);
        if (s >= 0 && s < step) {
            memcpy(keep + k, line, len);
            k += len;
        }
        line += len;
    }
    write_file_atomic(path, keep, k);
    free(keep);
    free(data);
}

static vfm_status trainer_setup(Trainer *t, const TrainOptions *opt) {
    memset(t, 0, sizeof *t);
    VFM_TRY(config_load(&t->cfg, opt->config_path, opt->overrides, opt->n_overrides));
    const Config *cfg = t->cfg;
    LaunchInfo early; /* the rank from the launcher's environment, before MPI starts */
    launch_detect(&early, NULL);
    /* every key the run reads, read once (train_setup.h); a key the user set that this run does not
     * use is named here — by rank 0, which speaks for the job */
    TrainSetup setup;
    LogLevel before = log_get_level();
    if (early.rank != 0) log_set_level(LOG_ERROR);
    vfm_status ss = train_setup_from_config(&setup, cfg, early.rank == 0);
    log_set_level(before);
    VFM_TRY(ss);
    const TrainSetup *su = &setup;
    if (su->log_level >= 0) log_set_level((LogLevel)su->log_level);
    DiTConfig mc = su->model;
    VFM_TRY(launch_init(&t->launch));
    t->rank = t->launch.rank;
    if (t->rank != 0 && log_get_level() == LOG_INFO) log_set_level(LOG_WARN); /* rank 0 speaks for the job */
    char launched[160];
    log_info("launch: %s", launch_describe(&t->launch, launched, sizeof launched));
    t->layout = su->layout;
    VFM_TRY(train_layout_check(&t->layout, &mc, t->launch.world_size));
    {
        int64_t gbs = su->global_batch_size;
        int dp = t->launch.world_size / (t->layout.tp * t->layout.pp * t->layout.cp);
        VFM_TRY(train_pipeline_check(mc.layers, t->layout.pp, t->layout.vp, gbs % dp == 0 ? gbs / dp : 0));
    }
    if (opt->failed_everywhere) *opt->failed_everywhere = 0; /* from here on a failure may be one rank's */
    t->have_comms = 1;
    VFM_TRY(train_parallel_init(&t->par, &t->layout, t->launch.world_size, t->rank));
    const char *why;
    char gpu[192] = "";
    VFM_TRY(run_select_device_named(su->device, &t->device, &why));
    if (t->device == DEV_CUDA) VFM_TRY(train_parallel_gpu(&t->par, &t->launch, gpu, sizeof gpu));
    log_info("device: %s (%s)%s%s", device_name(t->device), why, gpu[0] ? "; " : "", gpu);
    t->dp_rank = t->par.layout.dp_rank;
    t->dp_size = t->par.layout.dp;
    ops_set_threads(su->threads > 0 ? su->threads : (int)sysconf(_SC_NPROCESSORS_ONLN));

    t->objective = su->objective;
    OptimConfig oc = su->optim;
    t->train_iters = su->train_iters;
    int64_t gbs = su->global_batch_size; /* packs per step over the whole job */
    if (gbs % t->dp_size != 0)
        return vfm_fail(VFM_ERR_USAGE, "train.global_batch_size (%lld) must be a multiple of the data-parallel size (%d)",
                        (long long)gbs, t->dp_size);
    t->accum = gbs / t->dp_size; /* micro-batches (one pack each) per replica per step */
    t->save_interval = su->save_interval;
    t->keep = su->keep;
    t->log_interval = su->log_interval;
    t->max_nonfinite = su->max_nonfinite;
    t->overlap = su->overlap_grad_reduce;
    snprintf(t->run_dir, sizeof t->run_dir, "%s", su->run_dir);
    if (!t->run_dir[0] && opt->resume && strcmp(opt->resume, "auto") == 0)
        return vfm_fail_at(VFM_ERR_USAGE, NULL, "checkpoint.save", "null", "--resume auto needs a run directory");

    VFM_TRY(pack_source_from(&t->source, &su->data, t->dp_rank, t->dp_size));
    if (t->source->token_dim != dit_token_dim(&mc))
        return vfm_fail(VFM_ERR_USAGE, "the data has %d values per token but the model expects %d (in_channels·p²·pt)",
                        t->source->token_dim, dit_token_dim(&mc));
    if (mc.f.cross_attn && t->source->text_dim != mc.d_text)
        return vfm_fail(VFM_ERR_USAGE, "the data's text embeddings have width %d but model.crossattn_emb_size is %d",
                        t->source->text_dim, mc.d_text);
    VFM_TRY(pack_feed_init(&t->feed, t->source, t->device, ops_stream()));

    VFM_TRY(dit_create_parallel(&t->model, &mc, t->device, &t->par.model));
    VFM_TRY(dit_set_recompute(&t->model, &su->recompute));
    VFM_TRY(dit_init_weights(&t->model, su->seed));
    t->fixed_len = su->fixed_pack_length;
    if (t->fixed_len == 0 && t->layout.pp > 1) t->fixed_len = t->source->max_tokens; /* rounded at the first pack */
    t->padded = t->fixed_len > 0;
    t->sharding = su->sharding;
    int zero1 = t->sharding == DP_SHARD_OPTIM, fsdp = t->sharding >= DP_SHARD_OPTIM_GRADS;
    int64_t reserve = t->fixed_len > t->source->max_tokens ? t->fixed_len : t->source->max_tokens;
    VFM_TRY(dit_reserve(&t->model, reserve, t->source->max_text, t->source->max_samples));
    if (t->padded) {
        VFM_TRY(train_pipeline_init(&t->pipe, &t->model, &t->objective, &t->par.pp, t->layout.pp, t->layout.vp,
                                    t->layout.pp > 1 ? (int)t->accum : 1, t->par.layout.pp_rank));
        t->have_pipe = 1;
    }
    if (fsdp) {
        int unsharded = su->fsdp_unsharded_accumulation || t->accum == 1;
        VFM_TRY(train_parallel_fsdp_init(&t->par, &t->fsdp, &t->model, t->sharding, unsharded));
        t->have_fsdp = 1;
        t->dpv = &t->fsdp.dp;
        VFM_TRY(fsdp_optimizer_init(&t->fsdp, &t->opt, &oc));
    } else {
        VFM_TRY(train_parallel_dp_init(&t->par, &t->dp, &t->model, su->bucket_mb, zero1));
        t->have_dp = 1;
        t->dpv = &t->dp;
        VFM_TRY(dp_optimizer_init(&t->dp, &t->opt, &oc));
    }
    /* every rank of a replica generates the validation sample (the model's forward is collective over
     * TP, CP and PP: every stage gets the output, so holds the same sample); the ranks with
     * tp = cp = pp = 0 write it */
    int writes_samples = t->par.layout.tp_rank == 0 && t->par.layout.cp_rank == 0 && t->par.layout.pp_rank == 0;
    VFM_TRY(validator_init(&t->val, cfg, &t->objective, t->dp_rank, t->dp_size, t->accum, t->rank,
                           writes_samples ? t->run_dir : ""));
    validator_set_expert_parallel(&t->val, t->layout.ep > 1 ? &t->par.ep : NULL);
    if (su->ema) {
        t->ema_decay = su->ema_decay;
        int64_t n = t->have_fsdp ? t->fsdp.dp.own_end - t->fsdp.dp.own_begin : t->model.table.total;
        size_t bytes = (size_t)(n > 0 ? n : 1) * sizeof(float);
        VFM_TRY(device_malloc(t->device, bytes, (void **)&t->ema));
        VFM_TRY(device_memcpy(t->ema, t->device, t->have_fsdp ? t->fsdp.master : t->model.params, t->device,
                              (size_t)n * sizeof(float)));
    }

    /* where to start: --resume, then checkpoint.load */
    char dir[1200];
    int found = 0, resumed = 0;
    if (opt->resume && strcmp(opt->resume, "auto") == 0) {
        /* rank 0 chooses; every rank loads the same checkpoint */
        int64_t chosen = -1;
        if (t->rank == 0) {
            VFM_TRY(checkpoint_find_latest(t->run_dir, dir, sizeof dir, &found));
            CheckpointState st;
            if (found && checkpoint_read_meta(dir, &st) == VFM_OK) {
                chosen = st.step;
                checkpoint_state_free(&st);
            }
        }
        VFM_TRY(comm_broadcast(&t->par.world, &chosen, 1, DT_I64, 0));
        found = chosen >= 0;
        if (found) {
            char name[64];
            snprintf(name, sizeof name, "iter_%07lld", (long long)chosen);
            path_join(dir, sizeof dir, t->run_dir, name);
            VFM_TRY(restore(t, dir, 0, 1));
            resumed = 1;
        } else {
            log_info("--resume auto: no complete checkpoint in %s, starting fresh", t->run_dir);
        }
    } else if (opt->resume) {
        VFM_TRY(resolve_checkpoint(opt->resume, "--resume", dir, sizeof dir));
        VFM_TRY(restore(t, dir, 0, 1));
        resumed = 1;
    }
    if (!resumed && su->load[0]) {
        VFM_TRY(resolve_checkpoint(su->load, "checkpoint.load", dir, sizeof dir));
        VFM_TRY(restore(t, dir, su->finetune, su->finetune || su->load_optim));
    }

    /* the step state, with AdamW's count of the checkpoint (or 0) */
    int64_t slots = STEP_SLOTS + 3 * (int64_t)t->log_interval;
    void *state = NULL;
    VFM_TRY(device_malloc(t->device, (size_t)slots * sizeof(double), &state));
    t->step_state = TENSOR(state, DT_F64, t->device, slots);
    VFM_TRY(device_memset0(t->device, state, (size_t)slots * sizeof(double)));
    double adam_t = (double)t->opt.step;
    VFM_TRY(device_memcpy((double *)state + STEP_ADAM_T, t->device, &adam_t, DEV_CPU, sizeof adam_t));
    t->opt.gate = &t->step_state;
    t->unread_samples = calloc((size_t)t->log_interval, sizeof *t->unread_samples);
    t->unread_seconds = calloc((size_t)t->log_interval, sizeof *t->unread_seconds);
    if (!t->unread_samples || !t->unread_seconds) return vfm_fail(VFM_ERR_NOMEM, "trainer: step records");

    if (t->rank == 0 && !t->run_dir[0])
        log_warn("checkpoint.save is null: no checkpoints, metrics.jsonl or validation pictures are written");
    if (t->rank == 0 && t->run_dir[0]) { /* only rank 0 writes the run directory's shared files */
        VFM_TRY(mkdir_p(t->run_dir));
        char path[1200];
        char *yaml = NULL;
        VFM_TRY(config_to_yaml_string(cfg, &yaml));
        path_join(path, sizeof path, t->run_dir, "config.yaml");
        vfm_status s = write_file_atomic(path, yaml, strlen(yaml));
        log_info("config (also in %s):\n%s", path, yaml);
        free(yaml);
        VFM_TRY(s);
        path_join(path, sizeof path, t->run_dir, "metrics.jsonl");
        truncate_metrics(path, t->step);
        t->metrics = fopen(path, "a");
        if (!t->metrics) return vfm_fail(VFM_ERR_IO, "%s: cannot open for appending", path);
    }
    const char *tb_dir = su->tensorboard_dir;
    char tb_default[1100];
    if (!tb_dir[0] && t->run_dir[0]) {
        path_join(tb_default, sizeof tb_default, t->run_dir, "tb_logs");
        tb_dir = tb_default;
    }
    if (t->rank == 0 && tb_dir[0]) VFM_TRY(tb_open(&t->tb, tb_dir, tb_wall_time()));
    char layout[128];
    train_layout_describe(&t->layout, t->dp_size, layout, sizeof layout);
    char rc_text[64];
    recompute_describe(&t->model.recompute, rc_text, sizeof rc_text);
    log_info("model: DiT %s, %lld parameters (%d layers, hidden %d, %d heads); objective %s; data: %s; %d thread%s per "
             "rank; %d rank%s: %s%s, %lld micro-batch%s of one pack per replica and step; activation recomputation: %s",
             dit_variant_name(mc.variant), (long long)param_table_trainable(t->model.full_table), mc.layers, mc.hidden,
             mc.heads, objective_name(t->objective.kind), t->source->kind, ops_get_threads(),
             ops_get_threads() > 1 ? "s" : "", t->launch.world_size, t->launch.world_size > 1 ? "s" : "", layout,
             fsdp ? (t->sharding == DP_SHARD_OPTIM_GRADS ? " (ZeRO-2)" : " (ZeRO-3)")
             : zero1 && t->dp_size * t->layout.cp > 1 ? " (ZeRO-1)" : "",
             (long long)t->accum, t->accum > 1 ? "es" : "", rc_text);
    char resolved[256]; /* what the run really uses, for the tests (and a user) to read back */
    train_layout_state(&t->layout, t->launch.world_size, t->dp_size, t->sharding, &t->model.recompute, resolved,
                       sizeof resolved);
    log_info("layout: %s", resolved);
    return VFM_OK;
}

static void trainer_teardown(Trainer *t) {
    if (t->metrics) fclose(t->metrics);
    tb_close(&t->tb);
    validator_free(&t->val);
    if (t->have_dp) dp_free(&t->dp);
    if (t->have_fsdp) fsdp_free(&t->fsdp);
    if (t->have_comms) train_parallel_free(&t->par);
    if (t->have_pipe) train_pipeline_free(&t->pipe);
    pack_feed_free(&t->feed);
    objective_work_free(&t->work);
    pack_source_destroy(t->source);
    optimizer_free(&t->opt);
    device_free(t->device, t->ema);
    device_free(t->device, t->step_state.data);
    free(t->unread_samples);
    free(t->unread_seconds);
    free(t->data_info);
    dit_destroy(&t->model);
    config_free(t->cfg);
}

/* ---- checkpoints ---------------------------------------------------------------------- */

/* What `vfm sample` needs to know about the data, taken from the first pack. */
static void record_data_info(Trainer *t) {
    const PackSample *s = &t->pack->samples[0];
    json_error_t err;
    json_t *pixel = t->source->pixel_space_json ? json_loads(t->source->pixel_space_json, 0, &err) : NULL;
    json_t *info = json_pack("{s:s,s:[iiii],s:f,s:o,s:o}", "kind", t->source->kind, "example_latent_shape",
                             s->latent_shape[0], s->latent_shape[1], s->latent_shape[2], s->latent_shape[3], "fps",
                             (double)s->fps, "pixel_space", pixel ? pixel : json_null(), "text_encoder",
                             t->source->text_encoder ? json_string(t->source->text_encoder) : json_null());
    t->data_info = info ? json_dumps(info, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(info);
}

/* Every rank takes part: rank 0 stages and commits the directory and writes the weights and
 * meta.json; every rank writes its optimizer shard; barriers keep the phases in order. */
static vfm_status save_checkpoint(Trainer *t) {
    CheckpointState st;
    memset(&st, 0, sizeof st);
    double consumed = (double)t->consumed_samples;
    VFM_TRY(dp_mean_f64(t->dpv, &consumed, 1)); /* the mean over replicas × replicas = the job's total */
    st.step = t->step;
    st.optimizer_step = t->opt.step;
    st.consumed_samples = (int64_t)llround(consumed * t->dp_size);
    st.seed = (uint64_t)cfg_int(t->cfg, "rng.seed");
    st.world_size = t->launch.world_size;
    st.dp = t->dp_size;
    st.tp = t->layout.tp, st.pp = t->layout.pp, st.cp = t->layout.cp;
    double t0 = time_now();
    char stage[1536];
    checkpoint_stage_dir(t->run_dir, t->step, stage, sizeof stage);
    vfm_status s = pack_feed_get_state(&t->feed, &st.loader_state);
    st.data_info = t->data_info ? strdup(t->data_info) : NULL;
    if (s == VFM_OK) s = config_to_yaml_string(t->cfg, &st.config_yaml);
    if (s == VFM_OK && t->rank == 0) s = checkpoint_begin(t->run_dir, t->step);
    if (s == VFM_OK) s = comm_barrier(&t->par.world);
    /* every rank writes its slices of the full tensors; rank 0 the metadata */
    if (s == VFM_OK)
        s = t->have_fsdp ? train_parallel_save_fsdp(&t->par, &t->model, &t->fsdp, t->ema, &t->opt, stage)
                         : train_parallel_save(&t->par, &t->model, t->ema, &t->dp, &t->opt, stage);
    if (s == VFM_OK && t->rank == 0) s = checkpoint_write_meta(stage, &st, t->model.full_table);
    if (s == VFM_OK) s = comm_barrier(&t->par.world);
    if (s == VFM_OK && t->rank == 0) s = checkpoint_commit(t->run_dir, t->step, t->keep);
    if (s == VFM_OK) s = comm_barrier(&t->par.world);
    if (s == VFM_OK)
        log_info("saved checkpoint %s/iter_%07lld (%.2f s)", t->run_dir, (long long)t->step, time_now() - t0);
    checkpoint_state_free(&st);
    return s;
}

/* Test hooks (the test build only: fault_hooks.h): VFM_TEST_KILL_AFTER_STEP=k dies by SIGKILL after step k completes, k
 * counted from 0 — the log's step k + 1 (only rank VFM_TEST_KILL_RANK when that is set); VFM_TEST_INJECT_NAN=a,b,... poisons the gradient at
 * those steps. */
static int env_step_listed(const char *var, int64_t step) {
    const char *env = fault_hook_env(var);
    if (!env) return 0;
    for (const char *p = env; *p;) {
        char *end;
        long long v = strtoll(p, &end, 10);
        if (end == p) break;
        if (v == step) return 1;
        p = *end == ',' ? end + 1 : end;
    }
    return 0;
}

/* ---- the loop ------------------------------------------------------------------------- */

typedef struct Window {
    double loss_sum, grad_sum, flops, seconds, wait; /* loss and norm: of the applied steps read so far */
    int64_t steps, samples, tokens, capacity;        /* steps: applied steps read so far */
} Window;

/* The log line's memory: the most vfm held on the GPU, or the process's peak resident set; then
 * the activations' high-water mark (the model's arena, on its device: what recomputation lowers). */
static void memory_text(const Trainer *t, char *out, size_t n) {
    DeviceMemory m;
    size_t act_bytes = dit_activation_peak(&t->model); /* + the pipeline's slots under PP */
    for (int i = 0; t->have_pipe && i < t->pipe.n_slots; i++) act_bytes += dit_saved_peak(t->pipe.slots[i]);
    double act = (double)act_bytes / 1048576.0;
    if (device_memory(t->device, &m) != VFM_OK)
        snprintf(out, n, "? | act %.1f MiB", act);
    else if (t->device == DEV_CUDA)
        snprintf(out, n, "%.0f MiB GPU peak (%.0f of %.0f MiB in use) | act %.1f MiB", m.peak / 1048576.0,
                 (m.total - m.free) / 1048576.0, m.total / 1048576.0, act);
    else
        snprintf(out, n, "%.0f MiB | act %.1f MiB", m.peak / 1048576.0, act);
    if (t->model.recompute.granularity != RECOMPUTE_NONE) { /* that it ran: blocks recomputed so far */
        size_t k = strlen(out);
        snprintf(out + k, k < n ? n - k : 0, " | recomputed %lld", (long long)t->model.rc_replays);
    }
}

/* The log line of the last log_interval steps; throughput summed over the replicas (a collective:
 * every rank calls it at the same step). */
static vfm_status log_window(Trainer *t, Window *w, double lr) {
    double sums[5] = {(double)w->samples, (double)w->tokens, w->flops, (double)w->capacity, w->wait};
    VFM_TRY(dp_mean_f64(t->dpv, sums, 5));
    w->samples = llround(sums[0] * t->dp_size);
    w->tokens = llround(sums[1] * t->dp_size);
    w->flops = sums[2] * t->dp_size;
    w->capacity = llround(sums[3] * t->dp_size);
    w->wait = sums[4];
    if (w->steps == 0) return VFM_OK;
    double secs = w->seconds > 0 ? w->seconds : 1e-9;
    if (t->tb.f) {
        double now = tb_wall_time();
        VFM_TRY(tb_add_scalar(&t->tb, t->step, now, "train/samples_per_second", (float)(w->samples / secs)));
        VFM_TRY(tb_add_scalar(&t->tb, t->step, now, "train/tokens_per_second", (float)(w->tokens / secs)));
        VFM_TRY(tb_add_scalar(&t->tb, t->step, now, "train/tflops", (float)(w->flops / secs / 1e12)));
        VFM_TRY(tb_flush(&t->tb));
    }
    char mem[192];
    memory_text(t, mem, sizeof mem);
    char rate[3][32]; /* small rates keep their digits: 0.04 samples/s is not 0.0 */
    log_info("step %lld/%lld | loss %.4f | grad norm %.3f | lr %.3e | %s samples/s | %s tokens/s | %.1f ms/step | "
             "%s TFLOP/s | packs %.0f%% full | data wait %.1f ms | mem %s",
             (long long)t->step, (long long)t->train_iters, w->loss_sum / w->steps, w->grad_sum / w->steps, lr,
             log_rate_text(w->samples / secs, rate[0], sizeof rate[0]), log_rate_text(w->tokens / secs, rate[1], sizeof rate[1]),
             1e3 * secs / w->steps, log_rate_text(w->flops / secs / 1e12, rate[2], sizeof rate[2]),
             w->capacity ? 100.0 * (double)w->tokens / (double)w->capacity : 0.0, 1e3 * w->wait / w->steps, mem);
    memset(w, 0, sizeof *w);
    return VFM_OK;
}

/* During the last micro-batch's backward: hand every bucket whose entries are all final to data
 * parallelism, so its reduction is issued while backward goes on (buckets are in reverse table
 * order: bucket b holds entries first_entry..last_entry, bucket 0 the last ones). */
static void grads_final(void *ctx, int first_entry) {
    Trainer *t = ctx;
    while (t->bucket_status == VFM_OK && t->buckets_issued < t->dp.n_buckets &&
           t->dp.buckets[t->buckets_issued].first_entry >= first_entry)
        t->bucket_status = dp_grad_bucket_ready(&t->dp, t->model.grads, t->buckets_issued++);
}

/* The next pack of the step into t->pack (and its tensors into *pt: NULL when it was copied and
 * padded to the fixed length, the objective uploads it then), counted in the window. */
static vfm_status next_pack(Trainer *t, Window *w, int k, const PackTensors **pt) {
    const Pack *p;
    VFM_TRY(pack_feed_next(&t->feed, &p, pt, &w->wait));
    if (t->padded) {
        if (!cfg_int(t->cfg, "train.fixed_pack_length") && p->pad_multiple > 1 && t->fixed_len % p->pad_multiple)
            t->fixed_len -= t->fixed_len % p->pad_multiple; /* the budget's largest pack */
        VFM_TRY(train_pack_fixed(&t->pipe.micro[k].pack, p, t->fixed_len));
        p = &t->pipe.micro[k].pack;
        *pt = NULL;
    }
    t->pack = p;
    if (!t->data_info) record_data_info(t);
    w->samples += p->n_samples;
    w->tokens += p->cu_seqlens[p->n_samples];
    w->capacity += t->padded ? t->fixed_len : t->source->max_tokens;
    w->flops += 3.0 * dit_forward_flops(&t->model.cfg, p->n_samples, p->cu_seqlens, p->cu_text);
    t->consumed_samples += p->n_samples;
    return VFM_OK;
}

/* Under PP: read and prepare the step's M packs on every stage, run this stage's schedule, and
 * take the loss from the last stage (*loss_sum: Σ pack losses, the same on every stage). */
static vfm_status pipeline_step(Trainer *t, Window *w, double *loss_sum) {
    TrainPipeline *tp = &t->pipe;
    vfm_status s = VFM_OK;
    for (int k = 0; k < tp->M && s == VFM_OK; k++) {
        const PackTensors *pt;
        s = next_pack(t, w, k, &pt);
        if (s == VFM_OK)
            s = objective_pass_begin(&t->model, &t->objective, &tp->micro[k].pack, NULL, &tp->micro[k].work,
                                     (uint32_t)t->step, &tp->micro[k].pass);
    }
    if (s == VFM_OK) s = train_pipeline_run(tp, loss_sum);
    for (int k = 0; k < tp->M; k++) {
        objective_pass_end(tp->micro[k].pass);
        tp->micro[k].pass = NULL;
    }
    VFM_TRY(s);
    return comm_broadcast(&t->par.pp, loss_sum, 1, DT_F64, tp->P - 1);
}

/* After the micro-batches: the mean over replicas of the gradients (every rank sees the same
 * values, so a NaN step is skipped everywhere together) and their squared global norm into the
 * step state (on the device). */
static vfm_status finish_gradients(Trainer *t) {
    DiT *m = &t->model;
    /* test hook: every rank poisons its reduced gradient, so all skip together */
    int poison = env_step_listed("VFM_TEST_INJECT_NAN", t->step);
    if (t->have_fsdp) {
        VFM_TRY(fsdp_grad_finish(&t->fsdp));
        if (poison && t->fsdp.dp.own_end > t->fsdp.dp.own_begin) {
            Tensor first = TENSOR(t->fsdp.flat_grads, DT_F32, m->device, 1);
            VFM_TRY(op_fill(&first, NAN));
        }
        return dp_grad_sumsq_shard_into(&t->fsdp.dp, t->fsdp.flat_grads, &t->step_state);
    }
    VFM_TRY(dp_grad_sync_finish(&t->dp, m->grads));
    if (poison) { /* after the posted bucket reductions are complete */
        Tensor first = TENSOR(m->grads, DT_F32, m->device, 1);
        VFM_TRY(op_fill(&first, NAN));
    }
    return dp_grad_sumsq_into(&t->dp, m->grads, &t->step_state);
}

/* STEP_LOSS: the mean of the step's pack losses over its micro-batches, then over the replicas
 * (as dp_mean_f64 forms it: the replicas' host values go over the DP×CP comm, so several replicas
 * wait for the device here; one does not). */
static vfm_status loss_mean(Trainer *t) {
    VFM_TRY(op_f64_div(&t->step_state, STEP_LOSS, (double)t->accum));
    Comm *c = t->dpv->grad_comm, *ep = t->dpv->ep_comm; /* under EP the mean is over both */
    if ((!c || c->size == 1) && !ep) return VFM_OK;
    double *dev = (double *)t->step_state.data + STEP_LOSS, loss = 0;
    if (t->device == DEV_CPU) vfm_host_read("trainer: the loss's mean over replicas");
    VFM_TRY(device_memcpy(&loss, DEV_CPU, dev, t->device, sizeof loss));
    VFM_TRY(dp_mean_f64(t->dpv, &loss, 1));
    return device_memcpy(dev, t->device, &loss, DEV_CPU, sizeof loss);
}

/* AdamW with the step's clip factor, then the EMA of the new weights (ZeRO-2/3: on the master
 * shard); both gated by the step state, so a skipped step changes nothing (t->opt.gate). */
static vfm_status update_weights(Trainer *t, double lr) {
    DiT *m = &t->model;
    double scale = 1.0; /* unused: the state's STEP_SCALE applies */
    const float *master;
    int64_t n;
    if (t->have_fsdp) {
        VFM_TRY(fsdp_optimizer_step(&t->fsdp, &t->opt, lr, scale));
        VFM_TRY(dit_refresh_weights(m)); /* the whole units' bf16 copies (the blocks' are made at each gather) */
        master = t->fsdp.master, n = t->fsdp.dp.own_end - t->fsdp.dp.own_begin;
    } else {
        VFM_TRY(dp_optimizer_step(&t->dp, &t->opt, m->params, m->grads, lr, scale));
        VFM_TRY(dit_refresh_weights(m)); /* the bf16 weights the GPU ops read, from the new fp32 master */
        master = m->params, n = m->table.total;
    }
    if (!t->ema || n == 0) return VFM_OK;
    Tensor e = TENSOR(t->ema, DT_F32, m->device, n), p = TENSOR((float *)master, DT_F32, m->device, n);
    return op_ema_update_if(&e, &p, t->ema_decay, &t->step_state);
}

/* Reads the step state: one wait for the device for every step since the last read (issue "The
 * GPU path's defects …" §2: once per log interval, and before checkpoints). Each step's record goes
 * to metrics.jsonl, TensorBoard and the window; a skipped step is warned about; AdamW's count is
 * brought up to date; *stop when train.max_nonfinite_steps steps in a row were skipped (so a run
 * stops up to one log interval after the step that made it). */
static vfm_status read_counters(Trainer *t, Window *w, int *stop) {
    if (t->unread == 0) return VFM_OK;
    int64_t n = STEP_SLOTS + 3 * t->unread;
    double *h = malloc((size_t)n * sizeof *h);
    if (!h) return vfm_fail(VFM_ERR_NOMEM, "trainer: the step state");
    if (t->device == DEV_CPU) vfm_host_read("trainer: step counters"); /* on CUDA the copy waits (counted there) */
    vfm_status s = device_memcpy(h, DEV_CPU, t->step_state.data, t->device, (size_t)n * sizeof *h);
    for (int64_t i = 0; s == VFM_OK && i < t->unread; i++) {
        int64_t step = t->step - t->unread + i; /* 0-based, as metrics.jsonl counts */
        double loss = h[STEP_SLOTS + 3 * i], norm = h[STEP_SLOTS + 3 * i + 1], lr = lr_at_step(&t->opt.cfg, step);
        int ok = h[STEP_SLOTS + 3 * i + 2] != 0;
        if (ok) {
            t->consecutive_bad = 0;
            w->loss_sum += loss;
            w->grad_sum += norm;
            w->steps++;
        } else {
            t->consecutive_bad++;
            log_warn("step %lld: non-finite %s (loss %g, gradient norm %g): step skipped (%d in a row)", (long long)step,
                     isfinite(loss) ? "gradient" : "loss", loss, norm, t->consecutive_bad);
            if (t->consecutive_bad >= t->max_nonfinite && !t->stop_run) t->stop_run = t->consecutive_bad, *stop = 1;
        }
        if (t->metrics)
            fprintf(t->metrics,
                    "{\"step\": %lld, \"loss\": %.17g, \"grad_norm\": %.17g, \"lr\": %.17g, \"skipped\": %s, "
                    "\"samples\": %lld, \"seconds\": %.6f}\n",
                    (long long)step, loss, norm, lr, ok ? "false" : "true",
                    (long long)t->unread_samples[i] * t->dp_size, t->unread_seconds[i]);
        if (t->tb.f) { /* TensorBoard steps count completed iterations, as Megatron's */
            double now = tb_wall_time();
            s = tb_add_scalar(&t->tb, step + 1, now, "train/loss", (float)loss);
            if (s == VFM_OK) s = tb_add_scalar(&t->tb, step + 1, now, "train/grad_norm", (float)norm);
            if (s == VFM_OK) s = tb_add_scalar(&t->tb, step + 1, now, "train/lr", (float)lr);
        }
    }
    if (t->metrics) fflush(t->metrics);
    if (s == VFM_OK) t->opt.step = (int64_t)h[STEP_ADAM_T];
    double now = time_now(); /* the device has finished the steps read: their real time per step */
    if (t->read_time > 0) t->seconds_per_step = (now - t->read_time) / (double)t->unread;
    t->read_time = now;
    if (s == VFM_OK && t->device == DEV_CUDA) s = ops_check_index_errors(); /* found on the GPU meanwhile */
    free(h);
    t->unread = 0;
    return s;
}

/* One step. Nothing in it waits for the device (inside a step the host only issues work): the
 * loss, the norm and the decision to apply or skip the update stay on the device in the step
 * state, and read_counters reads them once per log interval. */
static vfm_status train_step(Trainer *t, Window *w, int *stop) {
    DiT *m = &t->model;
    double t0 = time_now();
    if (!t->have_fsdp) { /* FSDP: each unit's buffer starts at zero in the first micro-batch */
        Tensor all = TENSOR(m->grads, DT_F32, m->device, m->table.total);
        VFM_TRY(op_fill(&all, 0.0));
    }
    if (t->layout.pp > 1) { /* the pipeline's loss comes from its last stage over the PP comm (host values) */
        double loss_sum = 0;
        VFM_TRY(pipeline_step(t, w, &loss_sum));
        VFM_TRY(device_memcpy((double *)t->step_state.data + STEP_LOSS, t->device, &loss_sum, DEV_CPU, sizeof loss_sum));
    }
    for (int64_t k = 0; t->layout.pp == 1 && k < t->accum; k++) {
        const PackTensors *pt;
        VFM_TRY(next_pack(t, w, 0, &pt));
        ObjectiveResult r;
        memset(&r, 0, sizeof r);
        r.loss_into = &t->step_state; /* the pack's loss is added to STEP_LOSS on the device */
        int last = k == t->accum - 1;
        t->buckets_issued = 0;
        t->bucket_status = VFM_OK;
        m->on_grads_final = last && t->overlap && !t->have_fsdp ? grads_final : NULL;
        m->on_grads_final_ctx = t;
        m->fsdp_last_microbatch = last;
        vfm_status s = objective_loss_and_grad_on(m, &t->objective, t->pack, pt, &t->work, (uint32_t)t->step,
                                                  1.0 / (double)t->accum, &r);
        m->on_grads_final = NULL;
        VFM_TRY(s);
        VFM_TRY(t->bucket_status);
    }
    VFM_TRY(loss_mean(t));
    VFM_TRY(finish_gradients(t));
    double lr = lr_at_step(&t->opt.cfg, t->step);
    StepDecideHyper h = {t->opt.cfg.clip_grad, (float)lr, (float)t->opt.cfg.beta1, (float)t->opt.cfg.beta2, t->unread};
    VFM_TRY(op_step_decide(&t->step_state, &h));
    VFM_TRY(update_weights(t, lr));
    /* the replicated embedders stay bitwise identical on every stage (design §3's claim, asserted) */
    if (t->layout.pp > 1) VFM_TRY(pp_check_replicated_values(&t->par.pp, &m->table, m->params, m->device, t->step + 1));
    double dt = time_now() - t0; /* the host's time in the step (on a GPU: issuing it) */
    t->unread_samples[t->unread] = t->consumed_samples;
    t->unread_seconds[t->unread] = dt;
    t->unread++;
    t->step++;
    if (t->step % t->log_interval == 0 || t->step == t->train_iters) {
        VFM_TRY(read_counters(t, w, stop));
        w->seconds += time_now() - t0; /* with the wait for the GPU to finish the window's work */
        VFM_TRY(log_window(t, w, lr));
    } else {
        w->seconds += dt;
    }
    return VFM_OK;
}

/* Validation after `t->step` completed steps: loss (metrics.jsonl, TensorBoard, log) and this
 * rank's generated picture. */
static vfm_status validate(Trainer *t) {
    double t0 = time_now();
    ValidationResult r;
    vfm_status s = validator_run(&t->val, &t->model, &t->objective, t->dpv, t->layout.pp > 1 ? &t->pipe : NULL,
                                 t->fixed_len, t->step, &r);
    if (s == VFM_OK && t->rank == 0) {
        char kinds[160] = "";
        if (r.split && r.images && r.videos)
            snprintf(kinds, sizeof kinds, " (images %.4f over %lld, videos %.4f over %lld)", r.loss_images,
                     (long long)r.images, r.loss_videos, (long long)r.videos);
        else if (r.split)
            snprintf(kinds, sizeof kinds, " (all %s)", r.images ? "images" : "videos");
        log_info("validation after step %lld: loss %.4f over %lld samples (%lld packs)%s in %.1f s%s%s", (long long)t->step,
                 r.loss, (long long)r.samples, (long long)r.packs, kinds, time_now() - t0, r.file[0] ? "; sample " : "",
                 r.file);
        if (t->metrics) {
            fprintf(t->metrics, "{\"step\": %lld, \"val_loss\": %.17g, \"val_samples\": %lld", (long long)t->step - 1,
                    r.loss, (long long)r.samples);
            if (r.split && r.images) fprintf(t->metrics, ", \"val_loss_images\": %.17g", r.loss_images);
            if (r.split && r.videos) fprintf(t->metrics, ", \"val_loss_videos\": %.17g", r.loss_videos);
            fprintf(t->metrics, "}\n");
            fflush(t->metrics);
        }
    }
    if (s == VFM_OK && t->tb.f) {
        double now = tb_wall_time();
        s = tb_add_scalar(&t->tb, t->step, now, "val/loss", (float)r.loss);
        if (s == VFM_OK && r.picture.pixels) {
            uint8_t *png = NULL;
            size_t len = 0;
            s = png_encode_rgb(&r.picture, &png, &len);
            if (s == VFM_OK) s = tb_add_image(&t->tb, t->step, now, "val/generation", png, len, r.picture.height,
                                              r.picture.width);
            free(png);
        }
        if (s == VFM_OK) s = tb_flush(&t->tb);
    }
    validation_result_free(&r);
    return s;
}

/* The log's line of what the run held, by part, the most any rank held (a collective over the world):
 * what `vfm plan --gpu cpu` predicts (docs/plan.md "Checked against runs"). */
static vfm_status log_memory(Trainer *t) {
    size_t slots = 0;
    for (int i = 0; t->have_pipe && i < t->pipe.n_slots; i++) slots += dit_saved_peak(t->pipe.slots[i]);
    int64_t ema = !t->ema ? 0 : t->have_fsdp ? t->fsdp.dp.own_end - t->fsdp.dp.own_begin : t->model.table.total;
    TrainMemory mem;
    train_memory_held(&t->model, t->have_fsdp ? &t->fsdp : NULL, &t->opt, ema, slots, &mem);
    double v[5] = {(double)mem.params, (double)mem.grads, (double)mem.optimizer, (double)mem.ema, (double)mem.activations};
    if (t->launch.world_size > 1) VFM_TRY(comm_all_reduce(&t->par.world, v, 5, DT_F64, COMM_MAX));
    log_info("memory per rank (the most of any rank): parameters %.0f B, gradients %.0f B, optimizer state %.0f B, "
             "EMA %.0f B, activations' high-water mark %.0f B", v[0], v[1], v[2], v[3], v[4]);
    return VFM_OK;
}

/* *sig := the stop signal any rank has received (the same on every rank, see stop_signal.h). */
static vfm_status stop_agreed(Trainer *t, int *sig) {
    int32_t v = stop_signal_received();
    if (t->launch.world_size > 1) VFM_TRY(comm_all_reduce(&t->par.world, &v, 1, DT_I32, COMM_MAX));
    if (v) stop_signal_agreed();
    *sig = v;
    return VFM_OK;
}

vfm_status train_run(const TrainOptions *opt) {
    Trainer t;
    if (opt->failed_everywhere) *opt->failed_everywhere = 1; /* until the layout checks pass */
    vfm_status s = trainer_setup(&t, opt);
    if (s != VFM_OK) {
        s = run_memory_hint(s, t.cfg, t.dp_size * t.layout.cp);
        trainer_teardown(&t);
        return s;
    }
    if (t.step >= t.train_iters) log_info("nothing to do: step %lld of %lld", (long long)t.step, (long long)t.train_iters);
    if (opt->stopped_by_signal) *opt->stopped_by_signal = 0;
    stop_signal_install();
    Window w;
    memset(&w, 0, sizeof w);
    int stop = 0, saving = t.run_dir[0] != 0;
    double save_seconds = 0;
    while (s == VFM_OK && t.step < t.train_iters) {
        double t0 = time_now();
        s = train_step(&t, &w, &stop);
        /* on a GPU the host only issues a step: the time per step of the last window read is the real one */
        double step_seconds = time_now() - t0;
        if (step_seconds < t.seconds_per_step) step_seconds = t.seconds_per_step;
        int last = t.step == t.train_iters;
        int save = saving && ((t.save_interval > 0 && t.step % t.save_interval == 0) || last);
        if (s == VFM_OK && save) s = read_counters(&t, &w, &stop); /* the checkpoint holds AdamW's count */
        if (s != VFM_OK) break;
        if (stop) { /* skipped steps leave the weights: those saved are the last good ones */
            if (saving) s = save_checkpoint(&t);
            if (s == VFM_OK)
                s = vfm_fail(VFM_ERR_NUMERIC, "stopping: %d steps in a row had a non-finite loss or gradient%s%s/iter_%07lld",
                             t.stop_run, saving ? "; the last good weights are saved in " : "",
                             saving ? t.run_dir : "", saving ? (long long)t.step : 0LL);
            break;
        }
        if (validator_due(&t.val, t.step)) s = validate(&t);
        int saved = s == VFM_OK && save;
        if (saved) {
            double t1 = time_now();
            s = save_checkpoint(&t);
            save_seconds = time_now() - t1;
        }
        stop_signal_set_grace(step_seconds, save_seconds);
        int sig = 0;
        if (s == VFM_OK) s = stop_agreed(&t, &sig);
        if (s == VFM_OK && sig && !last) {
            if (saving && !saved) s = read_counters(&t, &w, &stop); /* AdamW's count, then the checkpoint */
            if (saving && !saved && s == VFM_OK) s = save_checkpoint(&t);
            if (s == VFM_OK && saving) {
                log_info("stopped by %s after step %lld: checkpoint %s/iter_%07lld; continue with --resume auto",
                         stop_signal_name(sig), (long long)t.step, t.run_dir, (long long)t.step);
                if (opt->stopped_by_signal) *opt->stopped_by_signal = sig;
            } else if (s == VFM_OK) {
                s = vfm_fail(VFM_ERR_IO, "stopped by %s after step %lld with no checkpoint.save: nothing was saved",
                             stop_signal_name(sig), (long long)t.step);
            }
            break;
        }
        const char *kill_rank = fault_hook_env("VFM_TEST_KILL_RANK"); /* multi-rank tests: only this rank dies */
        if (env_step_listed("VFM_TEST_KILL_AFTER_STEP", t.step - 1) && (!kill_rank || atoi(kill_rank) == t.rank))
            raise(SIGKILL);
    }
    stop_signal_restore();
    if (s == VFM_OK && t.step == t.train_iters && t.step > 0) s = log_memory(&t);
    if (s == VFM_OK && t.step == t.train_iters)
        log_info("training done: %lld steps, %lld samples", (long long)t.step, (long long)t.consumed_samples);
    s = run_memory_hint(s, t.cfg, t.dp_size * t.layout.cp); /* out of memory: the keys that reduce it */
    trainer_teardown(&t);
    return s;
}
