/* vfm sample: generates latents from a checkpoint with the sampler of its objective (EDM Heun,
 * flow-matching Euler, DDPM/DDIM) and classifier-free guidance, and for checkpoints trained on a
 * pixel-space dataset also pictures (PNG for images, GIF and MP4 for videos) and a grid; optionally beside
 * real examples of the same captions and with the colour score of the synthetic set's judge. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "args.h"
#include "commands.h"
#include "core/config.h"
#include "core/fileutil.h"
#include "core/log.h"
#include "core/timer.h"
#include "data/prepare/caption_encoder.h"
#include "data/synthetic/colour_score.h"
#include "data/synthetic/shape_score.h"
#include "data/media/image_io.h"
#include "data/loader/encode.h"
#include "data/loader/length_index.h"
#include "data/formats/npy.h"
#include "data/synthetic/synthetic.h"
#include "data/formats/tar.h"
#include "diffusion/generate.h"
#include "diffusion/sample_picture.h"
#include "diffusion/sample_settings.h"
#include "model/dit.h"
#include "ops/ops.h"
#include "train/checkpoint.h"

#define MAX_PROMPTS 256

typedef struct SampleJob {
    char ckpt[1200], out[1024];
    Config *cfg;
    CheckpointState meta;
    Objective objective;
    DiT model;
    int has_pixels;
    PixelLatentMap map;
    char *prompts[MAX_PROMPTS];
    int n_prompts;
    int32_t shape[4];
    double data_fps; /* the training data example's fps (30 when unknown) */
} SampleJob;

static void progress_bar(void *ctx, int step, int total) {
    (void)ctx;
    int width = 30, done = step * width / total;
    fprintf(stderr, "\rsampling [");
    for (int i = 0; i < width; i++) fputc(i < done ? '#' : '-', stderr);
    fprintf(stderr, "] %d/%d steps", step, total);
    if (step == total) fputc('\n', stderr);
    fflush(stderr);
}

static vfm_status read_prompts(SampleJob *j, const char *file) {
    char *text;
    VFM_TRY(read_file_all(file, &text, NULL));
    for (char *line = strtok(text, "\n"); line && j->n_prompts < MAX_PROMPTS; line = strtok(NULL, "\n")) {
        while (*line == ' ' || *line == '\t') line++;
        if (*line == 0 || *line == '#') continue;
        j->prompts[j->n_prompts++] = strdup(line);
    }
    free(text);
    if (j->n_prompts == 0) return vfm_fail_at(VFM_ERR_USAGE, file, NULL, NULL, "no prompts in the file");
    return VFM_OK;
}

/* --device: auto (a GPU when present), cpu or cuda. */
static vfm_status sample_device(const char *name, Device *dev) {
    int gpus = device_cuda_count();
    if (strcmp(name, "cpu") == 0 || (strcmp(name, "auto") == 0 && gpus == 0)) *dev = DEV_CPU;
    else if (strcmp(name, "cuda") == 0 || strcmp(name, "auto") == 0) *dev = DEV_CUDA;
    else return vfm_fail_at(VFM_ERR_USAGE, NULL, "--device", name, "expected auto, cpu or cuda");
    if (*dev == DEV_CUDA && gpus == 0)
        return vfm_fail_at(VFM_ERR_USAGE, NULL, "--device", name, "no CUDA GPU here (see vfm version)");
    return VFM_OK;
}

static vfm_status load_checkpoint(SampleJob *j, int use_ema, Device dev) {
    char dir[1200];
    int found = 0;
    char done[1300];
    path_join(done, sizeof done, j->ckpt, "DONE");
    if (path_exists(done)) snprintf(dir, sizeof dir, "%s", j->ckpt);
    else {
        VFM_TRY(checkpoint_find_latest(j->ckpt, dir, sizeof dir, &found));
        if (!found) return vfm_fail_at(VFM_ERR_USAGE, NULL, "--checkpoint", j->ckpt, "holds no complete checkpoint");
    }
    snprintf(j->ckpt, sizeof j->ckpt, "%s", dir);
    VFM_TRY(checkpoint_read_meta(dir, &j->meta));
    log_set_level(LOG_ERROR); /* the saved config may name keys this build warns about */
    vfm_status s = config_from_yaml_string(&j->cfg, j->meta.config_yaml, "checkpoint config");
    log_set_level(LOG_INFO);
    VFM_TRY(s);
    DiTConfig mc;
    VFM_TRY(dit_config_from(&mc, j->cfg));
    VFM_TRY(objective_from_config(&j->objective, j->cfg, &mc));
    VFM_TRY(dit_create(&j->model, &mc, dev));
    char path[1400];
    path_join(path, sizeof path, dir, use_ema ? "ema.safetensors" : "model.safetensors");
    if (use_ema && !path_exists(path)) return vfm_fail(VFM_ERR_USAGE, "--ema: %s has no EMA weights", dir);
    /* the file holds fp32 master weights whatever device wrote it: read on the host, then copied up */
    float *host = malloc((size_t)(j->model.table.total > 0 ? j->model.table.total : 1) * sizeof(float));
    if (!host) return vfm_fail(VFM_ERR_NOMEM, "sample: %lld weights", (long long)j->model.table.total);
    vfm_status ls = load_named_tensors(path, &j->model.table, "", host);
    if (ls == VFM_OK) ls = dit_params_from_host(&j->model, host);
    free(host);
    VFM_TRY(ls);
    /* what the data looked like */
    j->shape[0] = mc.in_channels, j->shape[1] = 1, j->shape[2] = 16, j->shape[3] = 16;
    j->data_fps = 30;
    if (j->meta.data_info) {
        json_error_t err;
        json_t *info = json_loads(j->meta.data_info, 0, &err);
        json_t *shape = json_object_get(info, "example_latent_shape");
        for (int k = 1; k < 4 && json_is_array(shape); k++) j->shape[k] = (int32_t)json_integer_value(json_array_get(shape, (size_t)k));
        double fps = json_number_value(json_object_get(info, "fps"));
        if (fps > 0 && fps < 1e6) j->data_fps = fps;
        json_t *pix = json_object_get(info, "pixel_space");
        if (json_is_object(pix)) {
            char *text = json_dumps(pix, JSON_COMPACT);
            j->has_pixels = pixel_latent_map_from_json(text, &j->map) == VFM_OK;
            free(text);
        }
        json_decref(info);
    }
    return VFM_OK;
}

/* A real example of each caption from a dataset (the first sample whose json caption matches),
 * as pixels [3, T, H, W] in examples[i] (NULL when none). Shards come from the dataset's length
 * index, so any shard names work. */
static void find_real_examples(const char *dataset, char **prompts, int n, const PixelLatentMap *map, float **examples,
                               int32_t (*shapes)[4]) {
    LengthIndex *li;
    if (length_index_open(&li, dataset, 0, 1) != VFM_OK) {
        log_warn("--compare-dataset %s: %s", dataset, vfm_last_error());
        return;
    }
    for (int s = 0; s < li->n_shards; s++) {
        char path[2200];
        path_join(path, sizeof path, dataset, li->shards[s].rel);
        TarShard *shard;
        if (li->shards[s].error || tar_shard_open(&shard, path) != VFM_OK) continue;
        for (int64_t i = 0; i < tar_shard_num_samples(shard); i++) {
            TarSample smp;
            if (tar_shard_read_sample(shard, i, &smp) != VFM_OK) continue;
            const TarPart *js = tar_sample_part(&smp, "json"), *lat = tar_sample_part(&smp, "latent.npy");
            json_error_t err;
            json_t *meta = js ? json_loadb((const char *)js->data, js->size, 0, &err) : NULL;
            const char *cap = json_string_value(json_object_get(meta, "caption"));
            for (int p = 0; cap && lat && p < n; p++) {
                if (examples[p] || strcmp(cap, prompts[p]) != 0) continue;
                Tensor t;
                if (npy_load_f32(lat->data, lat->size, path, &t) != VFM_OK || t.ndim != 4) continue;
                int64_t numel = tensor_numel(&t);
                examples[p] = malloc((size_t)numel * sizeof(float));
                latent_to_pixel(map, t.data, (int)t.shape[1], (int)t.shape[2], (int)t.shape[3], examples[p]);
                for (int k = 0; k < 4; k++) shapes[p][k] = (int32_t)t.shape[k];
                tensor_free(&t);
            }
            json_decref(meta);
            tar_sample_free(&smp);
        }
        tar_shard_close(shard);
    }
    length_index_free(li);
}

/* The first frame of planar pixels [3, T, H, W] (a real example), upscaled. */
static void to_image(const float *pixels, const int32_t *shape, int zoom, RgbImage *out) {
    RgbImage small;
    memset(out, 0, sizeof *out);
    if (rgb_image_alloc(&small, shape[3], shape[2]) != VFM_OK) return;
    rgb_image_from_planar(&small, pixels, shape[1], 0);
    if (rgb_image_upscale(&small, zoom, out) != VFM_OK) memset(out, 0, sizeof *out);
    rgb_image_free(&small);
}

int cmd_sample(int argc, char **argv) {
    ArgFlag flags[] = {
        {"--checkpoint", "DIR", "a run directory (its newest checkpoint) or one iter_* directory", NULL, 0},
        {"--out", "DIR", "where to write the samples", NULL, 0},
        {"--prompt", "TEXT", "caption, embedded with vfm's built-in caption encoder", NULL, 0},
        {"--prompts", "FILE", "one caption per line (# comments allowed)", NULL, 0},
        {"--prompt-embedding", "FILE.npy", "text embedding [L, d_text] made elsewhere", NULL, 0},
        {"--num", "N", "samples per prompt (default 1)", NULL, 0},
        {"--frames", "T", "latent frames (default: the training data's example)", NULL, 0},
        {"--height", "H", "latent height (default: the training data's example)", NULL, 0},
        {"--width", "W", "latent width (default: the training data's example)", NULL, 0},
        {"--steps", "N", "sampler steps (default sampler.num_steps of the run)", NULL, 0},
        {"--guidance", "G", "classifier-free guidance g: c + g(c - u); DFM uses 7, DiT's scale s is g = s-1 (default sampler.guidance)", NULL, 0},
        {"--class", "K", "class label for class-conditional models (default: the null class, unguided)", NULL, 0},
        {"--seed", "S", "noise seed (default 1)", NULL, 0},
        {"--fps", "F", "frames per second given to the model, and the MP4's rate (default: the training data's)", NULL, 0},
        {"--s-churn", "X", "EDM stochasticity S_churn (default sampler.s_churn of the run)", NULL, 0},
        {"--dfm-heun", NULL, "EDM: reproduce DFM's Heun (second evaluation at x_hat, t_hat)", NULL, 0},
        {"--solver", "NAME", "flow: euler or unipc (Wan 2.1's UniPC multistep; default sampler.flow_solver of the run)",
         NULL, 0},
        {"--ddim", NULL, "DDPM: deterministic DDIM steps (default sampler.ddim of the run)", NULL, 0},
        {"--ema", NULL, "use the EMA weights", NULL, 0},
        {"--compare-dataset", "DIR",
         "put a real example of each caption (from this pixel-space dataset) in the grid, and sample each caption at "
         "its example's canvas unless --frames/--height/--width are given", NULL, 0},
        {"--score-colours", NULL, "judge each picture's dominant colour against its caption and print the score", NULL, 0},
        {"--score-shapes", NULL, "judge each picture's shape (the synthetic set's five) against its caption and print the score",
         NULL, 0},
        {"--threads", "N", "CPU threads (default: all cores)", NULL, 0},
        {"--device", "auto|cpu|cuda", "where the network runs (default auto: the GPU when there is one)", NULL, 0},
    };
    int nflags = (int)(sizeof flags / sizeof flags[0]), help;
    ArgList pos;
    vfm_status s = args_parse("sample", argc, argv, flags, nflags, &pos, &help);
    if (s != VFM_OK) return cli_report(s);
    if (help) {
        args_print_help("sample --checkpoint DIR --out DIR [--prompt TEXT | --prompts FILE | --prompt-embedding F.npy] ...",
                        "Generates samples with the sampler of the checkpoint's objective (EDM: Heun; flow: Euler on\n"
                        "the linear-quadratic schedule; ddpm: respaced DDPM or DDIM) and classifier-free guidance.\n"
                        "Writes each latent as sample_NNN.npy ([C,T,H,W], the data's latent units) and, when the run\n"
                        "trained on a pixel-space dataset, sample_NNN.png (images) or sample_NNN.gif and sample_NNN.mp4\n"
                        "(videos; the MP4 plays at --fps: H.264 from libx264, or MPEG-4 part 2 when this FFmpeg lacks\n"
                        "it) and grid.png. Without a prompt (or class) it samples unconditionally (the null prompt and\n"
                        "class).", flags, nflags);
        return 0;
    }
    if (pos.n > 0) {
        fprintf(stderr, "vfm sample: unexpected argument '%s'\n", pos.items[0]);
        return 2;
    }
    SampleJob j;
    memset(&j, 0, sizeof j);
    const char *ckpt = args_value(flags, nflags, "--checkpoint", NULL), *out = args_value(flags, nflags, "--out", NULL);
    if (!ckpt || !out) {
        fprintf(stderr, "vfm sample: --checkpoint and --out are required (see vfm sample --help)\n");
        return 2;
    }
    snprintf(j.ckpt, sizeof j.ckpt, "%s", ckpt);
    snprintf(j.out, sizeof j.out, "%s", out);
    /* the numbers first: a bad one is named before the checkpoint is read */
    int64_t threads, num64, frames, height, width, steps, class64, seed;
    double guidance, s_churn, fps_flag;
    struct {
        const char *flag;
        int64_t lo, hi, *dst;
    } ints[] = {{"--threads", 1, 4096, &threads},   {"--num", 1, 100000, &num64},          {"--frames", 1, 100000, &frames},
                {"--height", 1, 100000, &height},   {"--width", 1, 100000, &width},      {"--steps", 1, 100000, &steps},
                {"--class", 0, 10000000, &class64}, {"--seed", 0, INT64_MAX, &seed}};
    int64_t fallback[] = {0, 1, 0, 0, 0, 0, -1, 1};
    for (size_t i = 0; s == VFM_OK && i < sizeof ints / sizeof ints[0]; i++)
        s = args_int("sample", flags, nflags, ints[i].flag, fallback[i], ints[i].lo, ints[i].hi, ints[i].dst);
    if (s == VFM_OK) s = args_number("sample", flags, nflags, "--guidance", -1, 0, 1000, &guidance);
    if (s == VFM_OK) s = args_number("sample", flags, nflags, "--s-churn", -1, 0, 1000, &s_churn);
    if (s == VFM_OK) s = args_number("sample", flags, nflags, "--fps", 0, 1e-3, 1e6, &fps_flag);
    if (s != VFM_OK) return cli_report(s);
    const char *solver = args_value(flags, nflags, "--solver", NULL); /* default: the run's sampler.flow_solver */
    if (solver && strcmp(solver, "unipc") != 0 && strcmp(solver, "euler") != 0) {
        fprintf(stderr, "vfm sample: --solver '%s': expected euler or unipc\n", solver);
        return 2;
    }
    int num = (int)num64, class_label = (int)class64;
    ops_set_threads(threads > 0 ? (int)threads : (int)sysconf(_SC_NPROCESSORS_ONLN));
    Device dev;
    s = sample_device(args_value(flags, nflags, "--device", "auto"), &dev);
    if (s == VFM_OK) s = load_checkpoint(&j, args_flag(flags, nflags, "--ema")->present, dev);
    if (s != VFM_OK) return cli_report(s);
    const DiTConfig *mc = &j.model.cfg;

    /* prompts → text embeddings */
    const char *prompt = args_value(flags, nflags, "--prompt", NULL), *prompts = args_value(flags, nflags, "--prompts", NULL);
    const char *emb_file = args_value(flags, nflags, "--prompt-embedding", NULL);
    if (!!prompt + !!prompts + !!emb_file > 1) {
        fprintf(stderr, "vfm sample: give one of --prompt, --prompts and --prompt-embedding\n");
        return 2;
    }
    if (prompts && (s = read_prompts(&j, prompts)) != VFM_OK) return cli_report(s);
    if (prompt) j.prompts[j.n_prompts++] = strdup(prompt);
    int n_cond = j.n_prompts > 0 ? j.n_prompts : 1;
    float **texts = calloc((size_t)n_cond, sizeof *texts);
    int *rows = calloc((size_t)n_cond, sizeof *rows);
    CaptionEncoder enc = {mc->d_text};
    for (int p = 0; p < j.n_prompts; p++) {
        int cap = caption_token_count(j.prompts[p]);
        texts[p] = malloc((size_t)cap * mc->d_text * sizeof(float));
        if ((s = caption_encode(&enc, j.prompts[p], texts[p], cap, &rows[p])) != VFM_OK) return cli_report(s);
    }
    if (emb_file) {
        Tensor t;
        if ((s = npy_load_f32_file(emb_file, &t)) != VFM_OK) return cli_report(s);
        if (tensor_dim(&t, -1) != mc->d_text)
            return cli_report(vfm_fail_at(VFM_ERR_USAGE, emb_file, NULL, NULL, "rows have %lld values, the model expects %d",
                                          (long long)tensor_dim(&t, -1), mc->d_text));
        texts[0] = t.data;
        rows[0] = (int)tensor_rows(&t);
    }

    /* latent shape and sampler settings */
    int32_t shape[4] = {j.shape[0], frames ? (int32_t)frames : j.shape[1], height ? (int32_t)height : j.shape[2],
                        width ? (int32_t)width : j.shape[3]};
    GenerateOptions go;
    memset(&go, 0, sizeof go);
    SampleSettings defaults; /* the run's sampler keys for its objective */
    if ((s = sample_settings_from_config(&defaults, j.cfg, j.objective.kind, 0)) != VFM_OK) return cli_report(s);
    sample_settings_apply(&defaults, &go);
    if (s_churn >= 0) go.sampler.s_churn = s_churn;
    go.sampler.dfm_heun_parity = args_flag(flags, nflags, "--dfm-heun")->present;
    go.objective = &j.objective;
    if (args_flag(flags, nflags, "--ddim")->present) go.ddim = 1;
    if (solver && j.objective.kind == OBJECTIVE_FLOW) go.flow_unipc = strcmp(solver, "unipc") == 0;
    if (solver && j.objective.kind == OBJECTIVE_FLOW && go.flow_unipc != defaults.flow_unipc) { /* the other solver's key */
        if (go.flow_unipc) go.unipc_order = (int)cfg_int(j.cfg, "sampler.unipc_order");
        else go.flow_linear = strcmp(cfg_str(j.cfg, "sampler.flow_schedule"), "linear") == 0;
    }
    if (solver && j.objective.kind != OBJECTIVE_FLOW)
        fprintf(stderr, "vfm sample: --solver applies to flow; this checkpoint is %s (ignored)\n",
                objective_name(j.objective.kind));
    if (steps) go.sampler.num_steps = (int)steps;
    if (go.objective->kind == OBJECTIVE_DDPM && go.sampler.num_steps < 2)
        return cli_report(vfm_fail(VFM_ERR_USAGE, "vfm sample: --steps %d: ddpm sampling needs at least 2",
                                   go.sampler.num_steps));
    if (guidance >= 0) go.guidance = guidance;
    if (class_label >= 0 && (mc->num_classes <= 0 || class_label >= mc->num_classes)) {
        fprintf(stderr, "vfm sample: --class %d: the checkpoint's model has %d classes\n", class_label, mc->num_classes);
        return 2;
    }
    if (j.n_prompts == 0 && !emb_file && class_label < 0) go.guidance = 0; /* unconditional: nothing to guide towards */
    if (j.objective.kind != OBJECTIVE_EDM && (go.sampler.s_churn > 0 || go.sampler.dfm_heun_parity))
        fprintf(stderr, "vfm sample: --s-churn and --dfm-heun apply to EDM; this checkpoint is %s (ignored)\n",
                objective_name(j.objective.kind));
    if (go.ddim && j.objective.kind != OBJECTIVE_DDPM)
        fprintf(stderr, "vfm sample: --ddim applies to ddpm; this checkpoint is %s (ignored)\n", objective_name(j.objective.kind));
    go.seed = (uint64_t)seed;
    go.progress = progress_bar;
    float fps = fps_flag > 0 ? (float)fps_flag : (float)j.data_fps;

    int pad = encode_text_pad_rows(j.cfg); /* Wan: the prompt zero-padded to 512 rows, as it trained */
    for (int p = 0; p < n_cond && pad > 0; p++) {
        if (!texts[p] || rows[p] == pad) continue;
        float *padded = calloc((size_t)pad * mc->d_text, sizeof(float));
        if (!padded) return cli_report(vfm_fail(VFM_ERR_NOMEM, "sample: %d text rows", pad));
        memcpy(padded, texts[p], (size_t)(rows[p] < pad ? rows[p] : pad) * mc->d_text * sizeof(float));
        free(texts[p]);
        texts[p] = padded, rows[p] = pad;
    }

    /* a real example of each prompt; without --frames/--height/--width its canvas is the prompt's
     * (the set draws several canvases: each caption is sampled at the size it was seen at) */
    const char *compare = args_value(flags, nflags, "--compare-dataset", NULL);
    float **real = calloc((size_t)n_cond, sizeof *real);
    int32_t (*real_shape)[4] = calloc((size_t)n_cond, sizeof *real_shape);
    if (compare && j.has_pixels && j.n_prompts) find_real_examples(compare, j.prompts, j.n_prompts, &j.map, real, real_shape);
    int canvas_given = args_value(flags, nflags, "--frames", NULL) || args_value(flags, nflags, "--height", NULL) ||
                       args_value(flags, nflags, "--width", NULL);

    int n = n_cond * num;
    GenerateSample *gs = calloc((size_t)n, sizeof *gs);
    float **latents = calloc((size_t)n, sizeof *latents);
    int64_t max_numel = 0;
    for (int i = 0; i < n; i++) {
        const int32_t *own = real[i / num] && !canvas_given && real_shape[i / num][0] == shape[0] ? real_shape[i / num]
                                                                                                   : shape;
        memcpy(gs[i].latent_shape, own, sizeof shape);
        int64_t numel = (int64_t)own[0] * own[1] * own[2] * own[3];
        if (numel > max_numel) max_numel = numel;
        gs[i].text = texts[i / num];
        gs[i].text_rows = rows[i / num];
        gs[i].fps = fps;
        gs[i].uid = (uint64_t)i;
        gs[i].class_label = class_label;
        latents[i] = malloc((size_t)numel * sizeof(float));
    }
#define SHAPE_OF(i) gs[i].latent_shape
#define NUMEL_OF(i) ((int64_t)SHAPE_OF(i)[0] * SHAPE_OF(i)[1] * SHAPE_OF(i)[2] * SHAPE_OF(i)[3])
    double t0 = time_now();
    s = generate_latents(&j.model, &go, gs, n, latents);
    for (int i = 0; i < n && s == VFM_OK; i++) {
        Tensor lt = TF32(latents[i], NUMEL_OF(i));
        int64_t bad = 0;
        s = op_count_nonfinite(&bad, &lt);
        if (s == VFM_OK && bad)
            s = vfm_fail(VFM_ERR_NUMERIC, "sample %d has %lld NaN/Inf values: the checkpoint's weights are broken", i,
                         (long long)bad);
    }
    if (s != VFM_OK) return cli_report(s);
    int one_canvas = 1;
    for (int i = 1; i < n; i++) one_canvas &= !memcmp(SHAPE_OF(i), SHAPE_OF(0), sizeof shape);
    char dims[64];
    snprintf(dims, sizeof dims, one_canvas ? "%dx%dx%dx%d" : "the prompts' canvases (%dx%dx%dx%d ...)", SHAPE_OF(0)[0],
             SHAPE_OF(0)[1], SHAPE_OF(0)[2], SHAPE_OF(0)[3]);
    fprintf(stderr, "sampled %d latent%s of %s in %.1f s (%s, %d steps, guidance %g)\n", n, n > 1 ? "s" : "", dims,
            time_now() - t0, objective_name(j.objective.kind), go.sampler.num_steps, go.guidance);

    /* outputs */
    if ((s = mkdir_p(j.out)) != VFM_OK) return cli_report(s);
    float *pixels = malloc((size_t)max_numel * sizeof(float));
    int cols = num + (compare ? 1 : 0), zoom = 4;
    int groups_per_row = n_cond >= 10 ? 5 : 1; /* a wide grid: several prompts per row */
    RgbImage *tiles = calloc((size_t)n_cond * cols, sizeof *tiles);
    ColourJudge judge = colour_judge_defaults();
    int judged = 0, correct = 0, shapes_judged = 0, shapes_correct = 0;
    int score_shapes = args_flag(flags, nflags, "--score-shapes")->present && j.n_prompts && j.has_pixels;
    ShapeJudge shape_judge; /* fitted on the synthetic renderer's own pictures at the data's factor */
    if (score_shapes) s = shape_judge_fit(&shape_judge, SHAPE_JUDGE_FIT_SEED, SHAPE_JUDGE_FIT_RENDERS, j.map.factor);
    json_t *index = json_array();
    int n_mp4 = 0;
    const char *mp4_codec = NULL;
    for (int i = 0; i < n && s == VFM_OK; i++) {
        char name[64], path[1200];
        snprintf(name, sizeof name, "sample_%03d.npy", i);
        path_join(path, sizeof path, j.out, name);
        const int32_t *sh = SHAPE_OF(i);
        Tensor lt = TF32(latents[i], sh[0], sh[1], sh[2], sh[3]);
        s = npy_write_file(path, &lt);
        json_t *rec = json_pack("{s:s,s:[iiii]}", "latent", name, "shape", sh[0], sh[1], sh[2], sh[3]);
        if (j.n_prompts) json_object_set_new(rec, "prompt", json_string(j.prompts[i / num]));
        if (s == VFM_OK && j.has_pixels && sh[0] == 3) {
            latent_to_pixel(&j.map, latents[i], sh[1], sh[2], sh[3], pixels);
            RgbImage img;
            memset(&img, 0, sizeof img);
            char stem[64];
            snprintf(stem, sizeof stem, "sample_%03d", i);
            SamplePictureFiles files;
            s = sample_picture_write(j.out, stem, &j.map, latents[i], sh, zoom, fps, &img, &files);
            if (s == VFM_OK && files.video[0]) {
                json_object_set_new(rec, "video", json_pack("{s:s,s:s,s:f}", "file", files.video, "codec", files.codec,
                                                            "fps", (double)fps));
                mp4_codec = files.codec;
                n_mp4++;
            }
            json_object_set_new(rec, "picture", json_string(files.picture));
            tiles[(i / num) * cols + (compare ? 1 : 0) + i % num] = img;
            if (args_flag(flags, nflags, "--score-colours")->present && j.n_prompts) {
                int want = colour_from_caption(synthetic_palette, SYNTHETIC_N_COLOURS, j.prompts[i / num]);
                int got = colour_dominant_planar(&judge, synthetic_palette, SYNTHETIC_N_COLOURS, pixels,
                                                 (int64_t)sh[1] * sh[2] * sh[3], (int64_t)sh[1] * sh[2] * sh[3], NULL);
                if (want >= 0) {
                    judged++;
                    correct += got == want;
                    json_object_set_new(rec, "colour_asked", json_string(synthetic_palette[want].name));
                    json_object_set_new(rec, "colour_seen", json_string(got >= 0 ? synthetic_palette[got].name : "none"));
                }
            }
            int want_shape = score_shapes ? shape_from_caption(j.prompts[i / num]) : -1;
            if (want_shape >= 0) { /* the first frame of a video */
                int got = shape_judge_classify(&shape_judge, pixels, sh[2], sh[3], (int64_t)sh[1] * sh[2] * sh[3], NULL);
                shapes_judged++;
                shapes_correct += got == want_shape;
                json_object_set_new(rec, "shape_asked", json_string(synthetic_shape_name(want_shape)));
                json_object_set_new(rec, "shape_seen", json_string(got >= 0 ? synthetic_shape_name(got) : "none"));
                float sim = shape_judge_similarity(&shape_judge, pixels, sh[2], sh[3], (int64_t)sh[1] * sh[2] * sh[3],
                                                   want_shape);
                json_object_set_new(rec, "shape_similarity", json_real(sim));
            }
        }
        json_array_append_new(index, rec);
    }
    for (int p = 0; p < n_cond && compare; p++)
        if (real[p]) to_image(real[p], real_shape[p], zoom, &tiles[p * cols]);
    if (s == VFM_OK && j.has_pixels && shape[0] == 3) {
        RgbImage grid;
        const uint8_t gap[3] = {48, 48, 48};
        for (int k = 0; k < n_cond * cols; k++)
            if (!tiles[k].pixels) rgb_image_alloc(&tiles[k], shape[3] * zoom, shape[2] * zoom);
        char path[1200];
        path_join(path, sizeof path, j.out, "grid.png");
        s = rgb_image_grid(tiles, n_cond * cols, cols * groups_per_row, 4, gap, &grid);
        if (s == VFM_OK) s = png_write_rgb(path, &grid);
        if (s == VFM_OK) printf("wrote %s (per prompt: %s%d generated; %d prompt%s per row)\n", path,
                                compare ? "a real example, then " : "", num, groups_per_row, groups_per_row > 1 ? "s" : "");
        rgb_image_free(&grid);
    }
    if (s == VFM_OK) {
        char path[1200];
        path_join(path, sizeof path, j.out, "samples.json");
        json_t *doc = json_pack("{s:s,s:i,s:f,s:I,s:o}", "checkpoint", j.ckpt, "steps", go.sampler.num_steps, "guidance",
                                go.guidance, "seed", (json_int_t)go.seed, "samples", index);
        if (judged) json_object_set_new(doc, "colour_score", json_real((double)correct / judged));
        if (shapes_judged) json_object_set_new(doc, "shape_score", json_real((double)shapes_correct / shapes_judged));
        char *text = json_dumps(doc, JSON_INDENT(2));
        s = write_file_atomic(path, text, strlen(text));
        free(text);
        json_decref(doc);
        printf("wrote %d sample%s to %s\n", n, n > 1 ? "s" : "", j.out);
        if (n_mp4) printf("wrote %d MP4 video%s (%s, %g fps) beside the GIFs\n", n_mp4, n_mp4 > 1 ? "s" : "", mp4_codec, (double)fps);
    }
    if (s == VFM_OK && judged)
        printf("colour score: %d/%d = %.1f%% of the pictures show the colour their caption asks for\n", correct, judged,
               100.0 * correct / judged);
    if (s == VFM_OK && shapes_judged)
        printf("shape score: %d/%d = %.1f%% of the pictures show the shape their caption asks for\n", shapes_correct,
               shapes_judged, 100.0 * shapes_correct / shapes_judged);
    return cli_report(s);
}
