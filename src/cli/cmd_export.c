/* vfm export: one checkpoint's weights (or EMA weights) as a single safetensors file; for
 * adaln-zero with --input-size, plus the DiT reference's fixed pos_embed buffer, so its models.py
 * loads the file with load_state_dict(strict=True). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "commands.h"
#include "core/fileutil.h"
#include "data/formats/safetensors.h"
#include "diffusers_io.h"
#include "model/dit_interop.h"
#include "checkpoint_dir.h"
#include "train/checkpoint.h"

/* The weights of src (laid out by the model's table) into `to` as a PyTorch state dict — metadata
 * "format": "pt", which Hugging Face-style loaders require — and with input_size > 0 also pos_embed
 * [1, grid², D]. */
static vfm_status export_tensors(const char *dir, const char *src, const char *to, int input_size) {
    Config *cfg;
    DiTConfig c;
    VFM_TRY(cli_checkpoint_config(dir, &cfg, &c));
    config_free(cfg);
    if (input_size && c.variant != DIT_VARIANT_ADALN_ZERO)
        return vfm_fail_at(VFM_ERR_USAGE, NULL, "--input-size", "", "only model.variant=adaln-zero has the reference's "
                           "pos_embed buffer (this checkpoint is %s)", dit_variant_name(c.variant));
    if (input_size && (input_size < 1 || input_size % c.patch_spatial || c.patch_temporal != 1)) {
        char v[32];
        snprintf(v, sizeof v, "%d", input_size);
        return vfm_fail_at(VFM_ERR_USAGE, NULL, "--input-size", v, "must be a positive multiple of the patch size %d "
                           "(2-D models only)", c.patch_spatial);
    }
    int grid = input_size ? input_size / c.patch_spatial : 0;
    DiT m;
    dit_describe(&m, &c);
    const ParamTable *t = &m.table;
    int64_t n_pos = (int64_t)grid * grid * c.hidden;
    float *buf = malloc((size_t)(t->total + n_pos) * sizeof(float));
    SafetensorsEntry *e = calloc((size_t)t->count + 1, sizeof *e);
    vfm_status s = buf && e ? VFM_OK : vfm_fail(VFM_ERR_NOMEM, "export: %lld floats", (long long)(t->total + n_pos));
    if (s == VFM_OK) s = load_named_tensors(src, t, "", buf);
    if (s == VFM_OK && input_size) s = dit_reference_pos_embed(&c, grid, buf + t->total);
    if (s == VFM_OK) {
        for (int i = 0; i < t->count; i++) {
            const ParamEntry *p = &t->entries[i];
            e[i] = (SafetensorsEntry){p->name, DT_F32, p->ndim, {0}, buf + p->offset};
            memcpy(e[i].shape, p->shape, sizeof p->shape);
        }
        e[t->count] = (SafetensorsEntry){"pos_embed", DT_F32, 3, {1, (int64_t)grid * grid, c.hidden}, buf + t->total};
        const char *meta[] = {"format", "pt", NULL};
        s = safetensors_write(to, e, t->count + (input_size ? 1 : 0), meta);
    }
    if (s == VFM_OK && input_size)
        printf("wrote %s: %d tensors from %s and pos_embed [1, %d, %d] for input size %d\n", to, t->count, src,
               grid * grid, c.hidden, input_size);
    else if (s == VFM_OK)
        printf("wrote %s: %d tensors from %s\n", to, t->count, src);
    free(buf);
    free(e);
    dit_destroy(&m);
    return s;
}

int cmd_export(int argc, char **argv) {
    ArgFlag flags[] = {
        {"--checkpoint", "DIR", "a run directory (its newest checkpoint) or one iter_* directory", NULL, 0},
        {"--to", "FILE", "the safetensors file to write", NULL, 0},
        {"--ema", NULL, "export the EMA weights", NULL, 0},
        {"--input-size", "N", "adaln-zero: add the DiT reference's pos_embed for N x N latents", NULL, 0},
        {"--format", "F", "safetensors (one file, the default) or diffusers (wan: a folder that "
         "WanTransformer3DModel.from_pretrained loads)", NULL, 0},
    };
    int nflags = (int)(sizeof flags / sizeof flags[0]), help;
    ArgList pos;
    vfm_status s = args_parse("export", argc, argv, flags, nflags, &pos, &help);
    if (s != VFM_OK) return cli_report(s);
    if (help) {
        args_print_help("export --checkpoint DIR --to FILE|DIR [--ema] [--input-size N] [--format diffusers]",
                        "Writes the checkpoint's weights, named as reference/model_torch.py, to one safetensors\n"
                        "file that PyTorch loads with safetensors.torch.load_file. For model.variant=adaln-zero the\n"
                        "names are the DiT reference's (facebookresearch/DiT models.py); --input-size N adds its\n"
                        "fixed pos_embed buffer for N x N latents, so DiT(input_size=N, ...).load_state_dict(...,\n"
                        "strict=True) takes the file as it is. For model.variant=wan, --format diffusers writes\n"
                        "the folder diffusers' save_pretrained would (config.json, diffusion_pytorch_model.safetensors).",
                        flags, nflags);
        return 0;
    }
    const char *ckpt = args_value(flags, nflags, "--checkpoint", NULL), *to = args_value(flags, nflags, "--to", NULL);
    if (!ckpt || !to || pos.n) {
        fprintf(stderr, "vfm export: --checkpoint DIR and --to FILE are required (see vfm export --help)\n");
        return 2;
    }
    const char *size_text = args_value(flags, nflags, "--input-size", NULL);
    char *end = NULL;
    long input_size = size_text ? strtol(size_text, &end, 10) : 0;
    if (size_text && (!*size_text || *end || input_size < 1 || input_size > 1 << 20)) {
        fprintf(stderr, "vfm export: --input-size '%s': expected a positive integer\n", size_text);
        return 2;
    }
    char dir[1200], src[1400];
    if ((s = cli_checkpoint_dir(ckpt, "--checkpoint", dir, sizeof dir)) != VFM_OK) return cli_report(s);
    path_join(src, sizeof src, dir, args_flag(flags, nflags, "--ema")->present ? "ema.safetensors" : "model.safetensors");
    const char *format = args_value(flags, nflags, "--format", "safetensors");
    if (strcmp(format, "diffusers") != 0 && strcmp(format, "safetensors") != 0) {
        fprintf(stderr, "vfm export: --format '%s': expected safetensors or diffusers\n", format);
        return 2;
    }
    if (strcmp(format, "diffusers") == 0) {
        if (size_text) {
            fprintf(stderr, "vfm export: --input-size is for the DiT reference's safetensors file, not --format diffusers\n");
            return 2;
        }
        Config *cfg;
        DiTConfig c;
        if ((s = cli_checkpoint_config(dir, &cfg, &c)) != VFM_OK) return cli_report(s);
        config_free(cfg);
        return cli_report(diffusers_wan_export(&c, src, to));
    }
    return cli_report(export_tensors(dir, src, to, (int)input_size));
}
