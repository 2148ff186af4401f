/* vfm prepare: builds WebDataset shards. `synthetic` writes vfm's moving-shapes set
 * (data/prepare_synthetic.h); `images` and `videos` (from files) are not implemented yet. */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "commands.h"
#include "data/prepare_synthetic.h"

static const char *const k_prepare_usage = "prepare synthetic --out DIR [--images N] [--videos M] [options]\n"
                                           "       vfm prepare images|videos ...   (not implemented yet)";
static const char *const k_prepare_about =
    "synthetic: render vfm's built-in moving-shapes set (one coloured shape on black, still or moving,\n"
    "           captioned \"a red circle\" / \"a blue cross moving left\") and write it as WebDataset shards\n"
    "           of pixel-space latents, caption embeddings and metadata. See docs/synthetic-dataset.md.\n"
    "images, videos: encode a folder of pictures or clips (not implemented yet).\n"
    "`vfm prepare synthetic --help` lists the options.";

/* A decimal integer in [lo, hi]; anything else is a usage error naming the flag. */
static vfm_status parse_int(const char *flag, const char *text, int64_t lo, int64_t hi, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (!text[0] || *end || end == text)
        return vfm_fail(VFM_ERR_USAGE, "vfm prepare synthetic: %s '%s': expected an integer", flag, text);
    if (errno == ERANGE || v < lo || v > hi)
        return vfm_fail(VFM_ERR_USAGE, "vfm prepare synthetic: %s %s: want %" PRId64 "..%" PRId64, flag, text, lo, hi);
    *out = v;
    return VFM_OK;
}

typedef struct {
    int last_step; /* twentieths of the total already reported */
} ProgressPrinter;

static void print_progress(void *ctx, const PrepareProgress *p) {
    ProgressPrinter *pp = ctx;
    int step = (int)(p->samples_done * 20 / p->samples_total);
    if (step <= pp->last_step) return;
    pp->last_step = step;
    fprintf(stderr, "prepare: %" PRId64 "/%" PRId64 " samples, %d shard%s\n", p->samples_done, p->samples_total, p->shards_done,
            p->shards_done == 1 ? "" : "s");
}

static int prepare_synthetic_command(int argc, char **argv) {
    ArgFlag flags[] = {
        {.name = "--out", .metavar = "DIR", .help = "output directory (created when missing)"},
        {.name = "--images", .metavar = "N", .help = "number of still images (default 0)"},
        {.name = "--videos", .metavar = "M", .help = "number of videos, 4..8 frames (default 0)"},
        {.name = "--seed", .metavar = "S", .help = "seed of the generator (default 0)"},
        {.name = "--d-text", .metavar = "D", .help = "caption embedding width (default 64)"},
        {.name = "--factor", .metavar = "F", .help = "pixel -> latent box-filter factor: 1, 2, 4, 8 or 16 (default 2)"},
        {.name = "--samples-per-shard", .metavar = "K", .help = "samples per shard (default 256)"},
        {.name = "--supersample", .metavar = "SS", .help = "anti-aliasing samples per pixel side, 1..16 (default 4)"},
        {.name = "--force", .help = "replace the shards already in DIR"},
    };
    int nflags = (int)(sizeof flags / sizeof flags[0]), want_help;
    ArgList extra;
    vfm_status s = args_parse("prepare synthetic", argc, argv, flags, nflags, &extra, &want_help);
    if (s != VFM_OK) return cli_report(s);
    if (want_help) {
        args_print_help("prepare synthetic --out DIR [--images N] [--videos M] [--seed S] [--d-text D] [--factor F]\n"
                        "                         [--samples-per-shard K] [--supersample SS] [--force]",
                        "Renders vfm's moving-shapes set and writes it to DIR as WebDataset shards shard-000000.tar, ...\n"
                        "(each with its Energon .tar.idx) and a summary, vfm_dataset.json. Sample n (key %08d) is image n\n"
                        "for n < N, else video n - N; its parts are latent.npy (float32 [3, T, H/F, W/F]), text.npy\n"
                        "(float32 [L, D]) and json (caption, fps, pixel_space, shape, colour, motion, index).\n"
                        "The same options give byte-identical shards. A DIR that already holds shards is refused\n"
                        "unless --force. See docs/synthetic-dataset.md.",
                        flags, nflags);
        return 0;
    }
    if (extra.n > 0) {
        fprintf(stderr, "vfm prepare synthetic: unexpected argument '%s'\n", extra.items[0]);
        return 2;
    }
    PrepareSyntheticOptions o = prepare_synthetic_defaults();
    o.out_dir = args_value(flags, nflags, "--out", NULL);
    if (!o.out_dir) {
        fprintf(stderr, "vfm prepare synthetic: --out DIR is required\n");
        return 2;
    }
    o.force = args_flag(flags, nflags, "--force")->present;
    static const struct {
        const char *flag;
        int64_t max;
    } ints[] = {{"--images", INT64_MAX}, {"--videos", INT64_MAX}, {"--d-text", INT_MAX},
                {"--factor", INT_MAX},   {"--samples-per-shard", INT_MAX}, {"--supersample", INT_MAX}};
    int64_t values[6] = {o.images, o.videos, o.d_text, o.factor, o.samples_per_shard, o.supersample};
    for (int i = 0; i < 6; i++) {
        const char *text = args_value(flags, nflags, ints[i].flag, NULL);
        if (text && (s = parse_int(ints[i].flag, text, 0, ints[i].max, &values[i])) != VFM_OK) return cli_report(s);
    }
    o.images = values[0];
    o.videos = values[1];
    o.d_text = (int)values[2];
    o.factor = (int)values[3];
    o.samples_per_shard = (int)values[4];
    o.supersample = (int)values[5];
    const char *seed_text = args_value(flags, nflags, "--seed", NULL);
    if (seed_text) {
        int64_t seed;
        if ((s = parse_int("--seed", seed_text, 0, INT64_MAX, &seed)) != VFM_OK) return cli_report(s);
        o.seed = (uint64_t)seed;
    }
    ProgressPrinter printer = {0};
    o.progress = print_progress;
    o.progress_ctx = &printer;
    PrepareProgress done;
    s = prepare_synthetic(&o, &done);
    if (s != VFM_OK) return cli_report(s);
    printf("prepared %" PRId64 " samples (%" PRId64 " images, %" PRId64 " videos) in %d shard%s, %" PRId64 " bytes, %.2f s: %s\n",
           done.samples_done, o.images, o.videos, done.shards_done, done.shards_done == 1 ? "" : "s", done.bytes_written,
           done.seconds, o.out_dir);
    return 0;
}

int cmd_prepare(int argc, char **argv) {
    const char *sub = argc > 0 ? argv[0] : NULL;
    if (sub && strcmp(sub, "synthetic") == 0) return prepare_synthetic_command(argc - 1, argv + 1);
    if (sub && (strcmp(sub, "images") == 0 || strcmp(sub, "videos") == 0)) {
        for (int i = 1; i < argc; i++)
            if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
                printf("usage: vfm prepare %s ...\n\nnot implemented yet in this version of vfm.\n", sub);
                return 0;
            }
        return cli_not_implemented(strcmp(sub, "images") == 0 ? "prepare images" : "prepare videos");
    }
    if (sub && (strcmp(sub, "--help") == 0 || strcmp(sub, "-h") == 0 || strcmp(sub, "help") == 0)) {
        printf("usage: vfm %s\n\n%s\n", k_prepare_usage, k_prepare_about);
        return 0;
    }
    if (sub)
        fprintf(stderr, "vfm prepare: unknown subcommand '%s' (expected synthetic, images or videos; see vfm prepare --help)\n", sub);
    else fprintf(stderr, "vfm prepare: expected a subcommand: synthetic, images or videos (see vfm prepare --help)\n");
    return 2;
}
