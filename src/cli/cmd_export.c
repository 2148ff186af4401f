/* vfm export: one checkpoint's weights (or EMA weights) as a single safetensors file. */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "commands.h"
#include "core/fileutil.h"
#include "train/checkpoint.h"

int cmd_export(int argc, char **argv) {
    ArgFlag flags[] = {
        {"--checkpoint", "DIR", "a run directory (its newest checkpoint) or one iter_* directory", NULL, 0},
        {"--to", "FILE", "the safetensors file to write", NULL, 0},
        {"--ema", NULL, "export the EMA weights", NULL, 0},
    };
    int nflags = (int)(sizeof flags / sizeof flags[0]), help;
    ArgList pos;
    vfm_status s = args_parse("export", argc, argv, flags, nflags, &pos, &help);
    if (s != VFM_OK) return cli_report(s);
    if (help) {
        args_print_help("export --checkpoint DIR --to FILE [--ema]",
                        "Writes the checkpoint's weights, named as reference/model_torch.py, to one safetensors\n"
                        "file that PyTorch loads with safetensors.torch.load_file.", flags, nflags);
        return 0;
    }
    const char *ckpt = args_value(flags, nflags, "--checkpoint", NULL), *to = args_value(flags, nflags, "--to", NULL);
    if (!ckpt || !to || pos.n) {
        fprintf(stderr, "vfm export: --checkpoint DIR and --to FILE are required (see vfm export --help)\n");
        return 2;
    }
    char dir[1200], done[1300], src[1400];
    path_join(done, sizeof done, ckpt, "DONE");
    int found = 1;
    if (path_exists(done)) snprintf(dir, sizeof dir, "%s", ckpt);
    else if ((s = checkpoint_find_latest(ckpt, dir, sizeof dir, &found)) != VFM_OK) return cli_report(s);
    if (!found) return cli_report(vfm_fail_at(VFM_ERR_USAGE, NULL, "--checkpoint", ckpt, "holds no complete checkpoint"));
    path_join(src, sizeof src, dir, args_flag(flags, nflags, "--ema")->present ? "ema.safetensors" : "model.safetensors");
    char *data;
    size_t size;
    if ((s = read_file_all(src, &data, &size)) != VFM_OK) return cli_report(s);
    s = write_file_atomic(to, data, size);
    if (s == VFM_OK) printf("wrote %s (%zu bytes) from %s\n", to, size, src);
    return cli_report(s);
}
