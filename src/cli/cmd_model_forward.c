/* vfm model forward: one call of a checkpoint's network on one latent — F(x; t, class, text, fps) —
 * written as a latent-shaped array, so another implementation (the DiT reference, the PyTorch twin)
 * can be compared with vfm on the same input (docs/models.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "commands.h"
#include "data/formats/npy.h"
#include "data/pack/pack.h"
#include "checkpoint_dir.h"
#include "train/checkpoint.h"

typedef struct ForwardJob {
    DiT model;
    Pack pack;
    Tensor latent, text;       /* [C,T,H,W], [L, d_text] (L = 0: the null prompt, one zero row) */
    float t, fps;
    int class_label;           /* -1: the null class */
} ForwardJob;

/* The latent as a one-sample pack (no padding). */
static vfm_status build_pack(ForwardJob *j) {
    const DiTConfig *c = &j->model.cfg;
    const int64_t *ls = j->latent.shape;
    if (ls[0] != c->in_channels || ls[1] % c->patch_temporal || ls[2] % c->patch_spatial || ls[3] % c->patch_spatial)
        return vfm_fail(VFM_ERR_USAGE, "--latent [%lld,%lld,%lld,%lld] does not fit the model (%d channels, patch %dx%dx%d)",
                        (long long)ls[0], (long long)ls[1], (long long)ls[2], (long long)ls[3], c->in_channels,
                        c->patch_temporal, c->patch_spatial, c->patch_spatial);
    if (j->text.data && j->text.shape[1] != c->d_text)
        return vfm_fail(VFM_ERR_USAGE, "--text rows have %lld values, the model's text width is %d",
                        (long long)j->text.shape[1], c->d_text);
    EncodedSample e;
    memset(&e, 0, sizeof e);
    for (int k = 0; k < 4; k++) e.info.latent_shape[k] = (int32_t)ls[k];
    e.info.grid[0] = (int32_t)(ls[1] / c->patch_temporal);
    e.info.grid[1] = (int32_t)(ls[2] / c->patch_spatial);
    e.info.grid[2] = (int32_t)(ls[3] / c->patch_spatial);
    e.info.tokens = e.info.grid[0] * e.info.grid[1] * e.info.grid[2];
    e.info.fps = j->fps;
    e.info.class_label = j->class_label;
    int d_text = c->d_text > 0 ? c->d_text : 1;
    float *zero = calloc((size_t)d_text, sizeof(float));
    float *tokens = malloc((size_t)e.info.tokens * dit_token_dim(c) * sizeof(float));
    vfm_status s = zero && tokens ? VFM_OK : vfm_fail(VFM_ERR_NOMEM, "model forward: %d tokens", e.info.tokens);
    Tensor tok = TF32(tokens, e.info.tokens, dit_token_dim(c));
    if (s == VFM_OK) s = op_patchify(&tok, &j->latent, c->patch_temporal, c->patch_spatial, c->patch_spatial);
    e.tokens = tokens;
    e.info.text_tokens = j->text.data ? (int32_t)j->text.shape[0] : 1;
    e.text = j->text.data ? j->text.data : zero;
    if (s == VFM_OK) s = pack_init(&j->pack, dit_token_dim(c), d_text, 1, 1);
    if (s == VFM_OK) s = pack_append(&j->pack, &e);
    free(zero);
    free(tokens);
    return s;
}

/* out [C_out', T, H, W] (C_out' = 2·C_out with learned sigma) = F(latent). */
static vfm_status run_forward(ForwardJob *j, float **out, int64_t *out_shape) {
    DiT *m = &j->model;
    const DiTConfig *c = &m->cfg;
    Pack *p = &j->pack;
    int64_t S = p->n_tokens;
    int od = dit_out_dim(c);
    float cn[1] = {j->t}, fps[1] = {j->fps};
    int null_class = j->class_label < 0 || j->class_label == c->num_classes; /* the reference's y = num_classes */
    int32_t cls[1] = {dit_class_row(c, j->class_label, null_class)};
    if (c->num_classes > 0 && cls[0] < 0)
        return vfm_fail(VFM_ERR_USAGE, "--class %d: the model has %d classes%s", j->class_label, c->num_classes,
                        c->class_dropout_prob > 0 ? "" : " and no null class");
    Tensor x = TF32(p->tokens, S, p->token_dim), t = TF32(cn, 1), f = TF32(fps, 1), text = TF32(p->text, p->n_text, p->text_dim);
    Tensor t2s = TI32(p->token_sample, S), pos = TI32(p->token_pos, S, 3), y = TI32(cls, 1);
    Tensor cu_q = TI32(p->cu_seqlens, 2), cu_t = TI32(p->cu_text, 2);
    DiTInputs in = {&x, &t, &f, &text, &t2s, &pos, {1, cu_q, cu_q, cu_q, cu_q, (int)S, (int)S},
                    {1, cu_q, cu_q, cu_t, cu_t, (int)S, (int)p->n_text}, c->num_classes > 0 ? &y : NULL};
    float *F = malloc((size_t)(S * od) * sizeof(float));
    if (!F) return vfm_fail(VFM_ERR_NOMEM, "model forward: output of %lld tokens", (long long)S);
    Tensor Ft = TF32(F, S, od);
    vfm_status s = dit_reserve(m, S, p->n_text, 1);
    if (s == VFM_OK) s = dit_forward(m, &in, &Ft);
    int64_t C_out = od / (c->patch_spatial * c->patch_spatial * c->patch_temporal);
    out_shape[0] = C_out;
    for (int k = 1; k < 4; k++) out_shape[k] = j->latent.shape[k];
    *out = malloc((size_t)(S * od) * sizeof(float));
    if (s == VFM_OK && !*out) s = vfm_fail(VFM_ERR_NOMEM, "model forward: output");
    Tensor o = TENSOR(*out, DT_F32, DEV_CPU, out_shape[0], out_shape[1], out_shape[2], out_shape[3]);
    if (s == VFM_OK) s = op_unpatchify(&o, &Ft, c->patch_temporal, c->patch_spatial, c->patch_spatial);
    free(F);
    return s;
}

static vfm_status load(ForwardJob *j, const char *ckpt, int ema, const char *latent, const char *text) {
    char dir[1200], path[1400];
    VFM_TRY(cli_checkpoint_dir(ckpt, "--checkpoint", dir, sizeof dir));
    Config *cfg;
    DiTConfig mc;
    VFM_TRY(cli_checkpoint_config(dir, &cfg, &mc));
    config_free(cfg);
    VFM_TRY(dit_create(&j->model, &mc, DEV_CPU));
    snprintf(path, sizeof path, "%s/%s", dir, ema ? "ema.safetensors" : "model.safetensors");
    VFM_TRY(load_named_tensors(path, &j->model.table, "", j->model.params));
    VFM_TRY(npy_load_f32_file(latent, &j->latent));
    if (j->latent.ndim == 3) { /* an image [C,H,W] */
        j->latent.shape[3] = j->latent.shape[2], j->latent.shape[2] = j->latent.shape[1], j->latent.shape[1] = 1;
        j->latent.ndim = 4;
    }
    if (j->latent.ndim != 4) return vfm_fail(VFM_ERR_USAGE, "--latent %s: expected [C,H,W] or [C,T,H,W]", latent);
    if (text) {
        VFM_TRY(npy_load_f32_file(text, &j->text));
        if (j->text.ndim != 2 || j->text.shape[0] < 1) return vfm_fail(VFM_ERR_USAGE, "--text %s: expected [L, d_text]", text);
    }
    return VFM_OK;
}

int cmd_model_forward(int argc, char **argv) {
    ArgFlag flags[] = {
        {"--checkpoint", "DIR", "a run directory (its newest checkpoint) or one iter_* directory", NULL, 0},
        {"--latent", "X.npy", "the network input, [C,H,W] or [C,T,H,W]", NULL, 0},
        {"--t", "T", "the timestep input (EDM: c_noise = ln(sigma)/4; DDPM: the step index)", NULL, 0},
        {"--out", "Y.npy", "where to write F, [C_out,H,W] or [C_out,T,H,W] (C_out doubles with learned sigma)", NULL, 0},
        {"--class", "K", "class label of a class-conditional model (-1 or num_classes: the null class, the default)",
         NULL, 0},
        {"--text", "E.npy", "text embedding [L, d_text] (default: the null prompt, one zero row)", NULL, 0},
        {"--fps", "F", "frames per second (default 30)", NULL, 0},
        {"--ema", NULL, "use the EMA weights", NULL, 0},
    };
    int nflags = (int)(sizeof flags / sizeof flags[0]), help;
    ArgList pos;
    vfm_status s = args_parse("model forward", argc, argv, flags, nflags, &pos, &help);
    if (s != VFM_OK) return cli_report(s);
    if (help) {
        args_print_help("model forward --checkpoint DIR --latent X.npy --t T --out Y.npy [--class K] [--text E.npy]",
                        "Runs the checkpoint's network once on one latent, as it is (no noise, no preconditioning),\n"
                        "and writes its output in the latent's layout: the way to compare vfm with another\n"
                        "implementation of the same model on the same input.", flags, nflags);
        return 0;
    }
    const char *ckpt = args_value(flags, nflags, "--checkpoint", NULL), *latent = args_value(flags, nflags, "--latent", NULL);
    const char *t = args_value(flags, nflags, "--t", NULL), *out = args_value(flags, nflags, "--out", NULL);
    if (!ckpt || !latent || !t || !out || pos.n) {
        fprintf(stderr, "vfm model forward: --checkpoint, --latent, --t and --out are required (see --help)\n");
        return 2;
    }
    ForwardJob j;
    memset(&j, 0, sizeof j);
    j.t = strtof(t, NULL);
    j.fps = strtof(args_value(flags, nflags, "--fps", "30"), NULL);
    j.class_label = atoi(args_value(flags, nflags, "--class", "-1"));
    float *y = NULL;
    int64_t shape[4] = {0};
    s = load(&j, ckpt, args_flag(flags, nflags, "--ema")->present, latent, args_value(flags, nflags, "--text", NULL));
    if (s == VFM_OK) s = build_pack(&j);
    if (s == VFM_OK) s = run_forward(&j, &y, shape);
    if (s == VFM_OK) {
        int image = j.latent.shape[1] == 1;
        Tensor o = image ? TF32(y, shape[0], shape[2], shape[3]) : TF32(y, shape[0], shape[1], shape[2], shape[3]);
        s = npy_write_file(out, &o);
        if (s == VFM_OK) printf("wrote %s: F of %s at t = %g\n", out, dit_variant_name(j.model.cfg.variant), j.t);
    }
    free(y);
    tensor_free(&j.latent);
    tensor_free(&j.text);
    pack_free(&j.pack);
    if (j.model.params) dit_destroy(&j.model);
    return cli_report(s);
}
