/* Validation loss and validation generation during training (see validation.h). */
#include "validation.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "core/fileutil.h"
#include "core/log.h"
#include "data/formats/npy.h"
#include "data/media/video_encode.h"
#include "diffusion/sample_picture.h"
#include "diffusion/sample_settings.h"

vfm_status validation_config_from(ValidationConfig *vc, const Config *cfg, ObjectiveKind kind, int64_t train_iters) {
    memset(vc, 0, sizeof *vc);
    int64_t interval = cfg_int(cfg, "train.eval_interval");
    if (interval <= 0 || interval > train_iters) return VFM_OK; /* no validation: its other keys are not read */
    int64_t iters = cfg_int(cfg, "train.eval_iters");
    if (iters <= 0) return VFM_OK;
    vc->interval = interval;
    vc->iters = iters;
    vc->use_train_split = cfg_bool(cfg, "dataset.use_train_split_for_val");
    return sample_settings_from_config(&vc->gen, cfg, kind, 1);
}

vfm_status validator_init(Validator *v, const Config *cfg, const Objective *o, int dp_rank, int dp_size, int64_t accum,
                          int rank, const char *run_dir) {
    memset(v, 0, sizeof *v);
    ValidationConfig vc;
    VFM_TRY(validation_config_from(&vc, cfg, o->kind, cfg_int(cfg, "train.train_iters")));
    if (!vc.interval) return VFM_OK;
    v->interval = (int)vc.interval;
    v->packs = vc.iters * accum;
    v->rank = rank;
    v->dp_size = dp_size;
    /* the val split (the train split with dataset.use_train_split_for_val; the mock set's val samples) */
    VFM_TRY(pack_source_create_split(&v->source, cfg, "val", dp_rank, dp_size));
    VFM_TRY(v->source->get_state(v->source, &v->start));
    VFM_TRY(pack_init(&v->pack, v->source->token_dim, v->source->text_dim, 1, 1));
    GenerateOptions *g = &v->gen;
    g->objective = o;
    sample_settings_apply(&vc.gen, g);
    g->seed = (uint64_t)cfg_int(cfg, "rng.seed");
    if (run_dir[0]) path_join(v->out_dir, sizeof v->out_dir, run_dir, "validation_generation");
    v->has_pixels = v->source->pixel_space_json && pixel_latent_map_from_json(v->source->pixel_space_json, &v->map) == VFM_OK;
    return VFM_OK;
}

void validator_free(Validator *v) {
    if (v->source) pack_source_destroy(v->source);
    free(v->start);
    pack_free(&v->pack);
    memset(v, 0, sizeof *v);
}

int validator_due(const Validator *v, int64_t step) { return v->interval > 0 && step > 0 && step % v->interval == 0; }

void validator_set_expert_parallel(Validator *v, Comm *ep_comm) { v->ep_comm = ep_comm; }

/* The validation sample's forward under EP: the EP group's largest reserved pack first (the
 * all-to-alls' size), then dit_forward. */
static vfm_status ep_agreed_forward(void *ctx, DiT *model, const DiTInputs *in, Tensor *out) {
    Validator *v = ctx;
    int64_t bound[2] = {model->moe_ep_rows, model->moe_ep_samples};
    VFM_TRY(comm_all_reduce(v->ep_comm, bound, 2, DT_I64, COMM_MAX));
    if (bound[0] > model->moe_ep_rows || bound[1] > model->moe_ep_samples) {
        model->moe_ep_rows = bound[0], model->moe_ep_samples = (int)bound[1];
        VFM_TRY(dit_reserve(model, in->x->shape[0], in->text ? in->text->shape[0] : 0, (int)in->c_noise->shape[0]));
    }
    return dit_forward(model, in, out);
}

/* This rank's sample from the first validation sample's prompt, written to the output directory. */
static vfm_status generate(Validator *v, DiT *model, const Pack *first, int64_t step, ValidationResult *res) {
    const PackSample *ps = &first->samples[0];
    GenerateSample s;
    memset(&s, 0, sizeof s);
    memcpy(s.latent_shape, ps->latent_shape, sizeof s.latent_shape);
    s.text = first->text + (int64_t)first->cu_text_padded[0] * first->text_dim;
    s.text_rows = first->cu_text[1] - first->cu_text[0];
    s.fps = ps->fps;
    s.uid = ps->uid;
    s.class_label = ps->class_label;
    int64_t numel = (int64_t)s.latent_shape[0] * s.latent_shape[1] * s.latent_shape[2] * s.latent_shape[3];
    float *latent = malloc((size_t)numel * sizeof(float));
    if (!latent) return vfm_fail(VFM_ERR_NOMEM, "validation: a %lld-value sample", (long long)numel);
    if (v->ep_comm && !v->gen.forward) v->gen.forward = ep_agreed_forward, v->gen.forward_ctx = v;
    vfm_status st = generate_latents(model, &v->gen, &s, 1, &latent);
    char stem[128];
    snprintf(stem, sizeof stem, "step=%lld_rank=%d", (long long)step, v->rank);
    int picture = v->has_pixels && s.latent_shape[0] == 3;
    if (st == VFM_OK && v->out_dir[0]) st = mkdir_p(v->out_dir);
    if (st == VFM_OK && picture) {
        if (v->out_dir[0]) { /* DFM writes an MP4 per validation video: here beside the GIF, when FFmpeg is there */
            SamplePictureFiles files;
            st = sample_picture_write(v->out_dir, stem, &v->map, latent, s.latent_shape, 4,
                                      mp4_encoder_name() ? (double)s.fps : 0.0, &res->picture, &files);
            snprintf(res->file, sizeof res->file, "%s%s%s", files.picture, files.video[0] ? ", " : "", files.video);
        } else {
            st = sample_frame_image(&v->map, latent, s.latent_shape, 0, 4, &res->picture);
        }
    } else if (st == VFM_OK && v->out_dir[0]) {
        char path[1400];
        snprintf(res->file, sizeof res->file, "%s.npy", stem);
        path_join(path, sizeof path, v->out_dir, res->file);
        Tensor t = TF32(latent, s.latent_shape[0], s.latent_shape[1], s.latent_shape[2], s.latent_shape[3]);
        st = npy_write_file(path, &t);
    }
    free(latent);
    return st;
}

/* Under PP: rounds of M packs (eval_iters rounds), each padded to the fixed length, prepared on
 * every stage and run through the forward-only schedule; the last stage's Σ losses broadcast over
 * PP. The sample is generated from the first pack (every stage takes part in each forward). */
static vfm_status run_pipelined(Validator *v, TrainPipeline *tp, int64_t fixed_len, int64_t step, double *sum,
                                ValidationResult *res) {
    v->gen.forward = train_pipeline_model_forward;
    v->gen.forward_ctx = tp;
    for (int64_t done = 0; done < v->packs; done += tp->M) {
        vfm_status s = VFM_OK;
        for (int k = 0; k < tp->M && s == VFM_OK; k++) {
            s = v->source->next(v->source, &v->pack);
            if (s == VFM_OK && done + k == 0) s = generate(v, tp->model, &v->pack, step, res);
            if (s == VFM_OK) s = train_pack_fixed(&tp->micro[k].pack, &v->pack, fixed_len);
            if (s == VFM_OK) res->samples += v->pack.n_samples;
            if (s == VFM_OK)
                s = objective_pass_begin(tp->model, tp->objective, &tp->micro[k].pack, NULL, &tp->micro[k].work,
                                         VALIDATION_STEP, &tp->micro[k].pass);
        }
        double losses = 0;
        if (s == VFM_OK) s = train_pipeline_eval(tp, &losses);
        for (int k = 0; k < tp->M; k++) {
            objective_pass_end(tp->micro[k].pass);
            tp->micro[k].pass = NULL;
        }
        VFM_TRY(s);
        *sum += losses;
    }
    return comm_broadcast(tp->pp, sum, 1, DT_F64, tp->P - 1);
}

vfm_status validator_run(Validator *v, DiT *model, const Objective *o, DataParallel *dp, TrainPipeline *pipe,
                         int64_t fixed_len, int64_t step, ValidationResult *res) {
    memset(res, 0, sizeof *res);
    v->gen.objective = o;
    VFM_TRY(v->source->set_state(v->source, v->start));
    double sum = 0;
    if (pipe && pipe->P > 1) VFM_TRY(run_pipelined(v, pipe, fixed_len, step, &sum, res));
    /* [image loss sum, image count, video loss sum, video count] */
    double kinds[4] = {0, 0, 0, 0};
    res->split = !(pipe && pipe->P > 1);
    for (int64_t k = 0; res->split && k < v->packs; k++) {
        VFM_TRY(v->source->next(v->source, &v->pack));
        ObjectiveResult r;
        memset(&r, 0, sizeof r);
        double *sample_loss = malloc((size_t)(v->pack.n_samples > 0 ? v->pack.n_samples : 1) * sizeof *sample_loss);
        if (!sample_loss) return vfm_fail(VFM_ERR_NOMEM, "validation: no memory for %d sample losses", v->pack.n_samples);
        r.sample_loss = sample_loss;
        vfm_status s = objective_loss(model, o, &v->pack, VALIDATION_STEP, &r);
        for (int i = 0; s == VFM_OK && i < v->pack.n_samples; i++) {
            int video = v->pack.samples[i].latent_shape[1] > 1;
            kinds[2 * video] += sample_loss[i];
            kinds[2 * video + 1] += 1;
        }
        free(sample_loss);
        VFM_TRY(s);
        sum += r.loss;
        res->samples += v->pack.n_samples;
        if (k == 0) VFM_TRY(generate(v, model, &v->pack, step, res));
    }
    double stats[6] = {sum / (double)v->packs, (double)res->samples, kinds[0], kinds[1], kinds[2], kinds[3]};
    VFM_TRY(dp_mean_f64(dp, stats, 6));
    res->loss = stats[0];
    res->packs = v->packs * v->dp_size;
    res->samples = (int64_t)(stats[1] * v->dp_size + 0.5);
    res->images = (int64_t)(stats[3] * v->dp_size + 0.5);
    res->videos = (int64_t)(stats[5] * v->dp_size + 0.5);
    res->loss_images = res->images ? stats[2] / stats[3] : 0;
    res->loss_videos = res->videos ? stats[4] / stats[5] : 0;
    return VFM_OK;
}

void validation_result_free(ValidationResult *r) { rgb_image_free(&r->picture); }
