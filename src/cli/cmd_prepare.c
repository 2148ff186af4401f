/* vfm prepare: builds pixel-space WebDataset shards. `synthetic` writes vfm's moving-shapes set
 * (data/prepare/prepare_synthetic.h); `images` and `videos` encode a folder of captioned pictures or clips
 * (data/prepare/prepare_media.h). */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <omp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "commands.h"
#include "data/prepare/prepare_media.h"
#include "data/prepare/prepare_synthetic.h"
#include "progress.h"

static const char *const k_prepare_usage = "prepare synthetic --out DIR [--images N] [--videos M] [options]\n"
                                           "       vfm prepare images DIR --out OUT [options]\n"
                                           "       vfm prepare videos DIR --out OUT [options]";
static const char *const k_prepare_about =
    "synthetic: render vfm's built-in moving-shapes set (one coloured shape on black, still or moving,\n"
    "           captioned \"a red circle\" / \"a blue cross moving left\") and write it as WebDataset shards\n"
    "           of pixel-space latents, caption embeddings and metadata. See docs/synthetic-dataset.md.\n"
    "images:    a folder of PNG / JPEG pictures, each with a caption beside it (NAME.txt, or \"caption\" in\n"
    "           NAME.json), centre-cropped and resized to the nearest aspect bucket, stored in pixel space\n"
    "           like the synthetic set. See docs/prepare.md.\n"
    "videos:    the same for video files (FFmpeg), sampled at --fps for up to --frames frames.\n"
    "`vfm prepare SUBCOMMAND --help` lists the options.";

/* A decimal integer in [lo, hi]; anything else is a usage error naming the flag. */
static vfm_status parse_int(const char *cmd, const char *flag, const char *text, int64_t lo, int64_t hi, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (!text[0] || *end || end == text)
        return vfm_fail(VFM_ERR_USAGE, "vfm prepare %s: %s '%s': expected an integer", cmd, flag, text);
    if (errno == ERANGE || v < lo || v > hi)
        return vfm_fail(VFM_ERR_USAGE, "vfm prepare %s: %s %s: want %" PRId64 "..%" PRId64, cmd, flag, text, lo, hi);
    *out = v;
    return VFM_OK;
}

/* The keys vfm train needs for what was written (vfm_dataset.json "train"): one line to copy. */
static void print_train_line(const char *out_dir) {
    char keys[16][160];
    int n = prepare_read_train_keys(out_dir, keys, 16);
    if (!n) return;
    printf("train on it with: vfm train --config configs/demo.yaml dataset.path=%s", out_dir);
    for (int i = 0; i < n; i++) printf(" %s", keys[i]);
    printf("\n(these keys, in vfm_dataset.json's \"train\", are also what vfm data inspect judges the set by)\n");
}

static void print_progress(void *ctx, const PrepareProgress *p) {
    char extra[64];
    snprintf(extra, sizeof extra, "%d shard%s", p->shards_done, p->shards_done == 1 ? "" : "s");
    cli_progress_update(ctx, p->samples_done, p->samples_total, extra);
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
        {.name = "--position-spread", .metavar = "P",
         .help = "where shapes start: the middle fraction P of the room a shape has, 0..1 (default 1: anywhere; 0: centred)"},
        {.name = "--force", .help = "replace the shards already in DIR"},
    };
    int nflags = (int)(sizeof flags / sizeof flags[0]), want_help;
    ArgList extra;
    vfm_status s = args_parse("prepare synthetic", argc, argv, flags, nflags, &extra, &want_help);
    if (s != VFM_OK) return cli_report(s);
    if (want_help) {
        args_print_help("prepare synthetic --out DIR [--images N] [--videos M] [--seed S] [--d-text D] [--factor F]\n"
                        "                         [--samples-per-shard K] [--supersample SS] [--position-spread P] [--force]",
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
        if (text && (s = parse_int("synthetic", ints[i].flag, text, 0, ints[i].max, &values[i])) != VFM_OK) return cli_report(s);
    }
    o.images = values[0];
    o.videos = values[1];
    o.d_text = (int)values[2];
    o.factor = (int)values[3];
    o.samples_per_shard = (int)values[4];
    o.supersample = (int)values[5];
    const char *spread_text = args_value(flags, nflags, "--position-spread", NULL);
    if (spread_text) {
        char *end;
        double v = strtod(spread_text, &end);
        if (!spread_text[0] || *end || !(v >= 0 && v <= 1)) {
            fprintf(stderr, "vfm prepare synthetic: --position-spread '%s': want a number in 0..1\n", spread_text);
            return 2;
        }
        o.position_spread = (float)v;
    }
    const char *seed_text = args_value(flags, nflags, "--seed", NULL);
    if (seed_text) {
        int64_t seed;
        if ((s = parse_int("synthetic", "--seed", seed_text, 0, INT64_MAX, &seed)) != VFM_OK) return cli_report(s);
        o.seed = (uint64_t)seed;
    }
    CliProgress printer;
    cli_progress_init(&printer, "prepare", "samples");
    o.progress = print_progress;
    o.progress_ctx = &printer;
    PrepareProgress done;
    s = prepare_synthetic(&o, &done);
    if (s != VFM_OK) return cli_report(s);
    printf("prepared %" PRId64 " samples (%" PRId64 " images, %" PRId64 " videos) in %d shard%s, %" PRId64 " bytes, %.2f s: %s\n",
           done.samples_done, o.images, o.videos, done.shards_done, done.shards_done == 1 ? "" : "s", done.bytes_written,
           done.seconds, o.out_dir);
    print_train_line(o.out_dir);
    return 0;
}

/* ---- images, videos ---- */

static volatile sig_atomic_t g_cancel;
static void on_signal(int sig) {
    (void)sig;
    g_cancel = 1;
}

static int prepare_media_command(MediaKind kind, int argc, char **argv) {
    const int video = kind == MEDIA_VIDEOS;
    const char *cmd = video ? "videos" : "images", *full = video ? "prepare videos" : "prepare images";
    ArgFlag flags[] = {
        {.name = "--out", .metavar = "OUT", .help = "output directory: new, empty, or (with --force) one vfm prepare wrote"},
        {.name = "--buckets", .metavar = "HxW,...", .help = "aspect buckets in pixels, height x width (default " BUCKETS_DEFAULT ")"},
        {.name = "--factor", .metavar = "F", .help = "pixel -> latent box-filter factor, 1..16; divides every bucket side (default 2)"},
        {.name = "--d-text", .metavar = "D", .help = "caption embedding width of the built-in encoder (default 64)"},
        {.name = "--text-npy", .help = "take NAME.npy beside each input as its text embedding (instead of the caption encoder)"},
        {.name = "--allow-uncaptioned", .help = "an input without caption gets the empty caption (the null prompt), not an error"},
        {.name = "--samples-per-shard", .metavar = "K", .help = "samples per shard (default 256)"},
        {.name = "--threads", .metavar = "N", .help = "inputs decoded at once (default: all cores)"},
        {.name = "--force", .help = "replace the dataset vfm prepare wrote in OUT"},
        {.name = "--fps", .metavar = "F", .help = "frames per second sampled from each video (default 8)"},
        {.name = "--frames", .metavar = "T", .help = "at most T frames per video, from its start (default 16)"},
    };
    int nflags = (int)(sizeof flags / sizeof flags[0]) - (video ? 0 : 2), want_help;
    ArgList pos;
    vfm_status s = args_parse(full, argc, argv, flags, nflags, &pos, &want_help);
    if (s != VFM_OK) return cli_report(s);
    if (want_help) {
        char about[2000];
        snprintf(about, sizeof about,
                 "Encodes every %s under DIR (recursively, in path order; extensions %s) with the\n"
                 "caption beside it (NAME.txt, or \"caption\" in NAME.json; NAME.json's other keys are kept) into a\n"
                 "pixel-space WebDataset in OUT, stored like `vfm prepare synthetic`: shard-000000.tar, ... (each with\n"
                 "its Energon .tar.idx) and vfm_dataset.json. Each input is centre-cropped to the aspect of the\n"
                 "nearest bucket and resized to it (area filter when shrinking, bicubic when enlarging), then\n"
                 "box-filtered by F into latent.npy float32 [3, %s, H/F, W/F]; text.npy is the caption through\n"
                 "vfm's caption encoder (or NAME.npy with --text-npy).%s Everything is written\n"
                 "into a hidden folder beside OUT and renamed at the end: an unreadable input stops the run with\n"
                 "its name and leaves nothing behind. See docs/prepare.md.",
                 video ? "video file" : "picture", video ? MEDIA_VIDEO_EXTENSIONS : MEDIA_IMAGE_EXTENSIONS, video ? "T" : "1",
                 video ? " Videos are decoded with FFmpeg and\nsampled at --fps from their first frame, at most --frames frames." : "");
        char usage[200];
        snprintf(usage, sizeof usage, "%s DIR --out OUT [--buckets HxW,...] [--factor F] [--d-text D | --text-npy] [options]", full);
        args_print_help(usage, about, flags, nflags);
        return 0;
    }
    PrepareMediaOptions o = prepare_media_defaults();
    for (int i = 0; i < pos.n; i++) {
        if (o.in_dir) {
            fprintf(stderr, "vfm %s: unexpected argument '%s'\n", full, pos.items[i]);
            return 2;
        }
        o.in_dir = pos.items[i];
    }
    o.out_dir = args_value(flags, nflags, "--out", NULL);
    if (!o.in_dir || !o.out_dir) {
        fprintf(stderr, "vfm %s: give the input folder DIR and --out OUT (see vfm %s --help)\n", full, full);
        return 2;
    }
    o.buckets = args_value(flags, nflags, "--buckets", NULL);
    o.text_npy = args_flag(flags, nflags, "--text-npy")->present;
    o.allow_uncaptioned = args_flag(flags, nflags, "--allow-uncaptioned")->present;
    o.force = args_flag(flags, nflags, "--force")->present;
    if (o.text_npy && args_value(flags, nflags, "--d-text", NULL)) {
        fprintf(stderr, "vfm %s: --d-text sets the caption encoder's width; with --text-npy the width is NAME.npy's\n", full);
        return 2;
    }
    struct {
        const char *flag;
        int64_t lo, hi;
        int *dst;
    } ints[] = {{"--factor", 1, 16, &o.factor},          {"--d-text", 1, 65536, &o.d_text},
                {"--samples-per-shard", 1, INT_MAX, &o.samples_per_shard}, {"--threads", 1, 4096, NULL},
                {"--frames", 1, PREPARE_MEDIA_MAX_FRAMES, &o.frames}};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        const char *text = args_value(flags, nflags, ints[i].flag, NULL);
        int64_t v;
        if (!text) continue;
        if ((s = parse_int(cmd, ints[i].flag, text, ints[i].lo, ints[i].hi, &v)) != VFM_OK) return cli_report(s);
        if (ints[i].dst) *ints[i].dst = (int)v;
        else omp_set_num_threads((int)v);
    }
    const char *fps = args_value(flags, nflags, "--fps", NULL);
    if (fps) {
        char *end;
        o.fps = strtod(fps, &end);
        if (!fps[0] || *end || !(o.fps > 0 && o.fps <= 1000)) {
            fprintf(stderr, "vfm %s: --fps %s: want a number in (0, 1000]\n", full, fps);
            return 2;
        }
    }
    CliProgress printer;
    cli_progress_init(&printer, "prepare", "samples");
    o.progress = print_progress;
    o.progress_ctx = &printer;
    g_cancel = 0;
    o.cancel = &g_cancel;
    struct sigaction sa, old_int, old_term;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    PrepareMediaResult r;
    s = video ? prepare_videos(&o, &r) : prepare_images(&o, &r);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    if (s != VFM_OK) {
        if (g_cancel) fprintf(stderr, "vfm %s: interrupted; nothing was written to %s\n", full, o.out_dir);
        return g_cancel ? 130 : cli_report(s);
    }
    char buckets[1600] = "";
    size_t k = 0;
    for (int i = 0; i < r.buckets.n && k < sizeof buckets; i++)
        if (r.bucket_counts[i])
            k += (size_t)snprintf(buckets + k, sizeof buckets - k, "%s%dx%d: %" PRId64, k ? ", " : "", r.buckets.b[i].height,
                                  r.buckets.b[i].width, r.bucket_counts[i]);
    const PrepareProgress *p = &r.progress;
    if (video)
        printf("prepared %" PRId64 " samples (%" PRId64 " videos, %" PRId64 " frames at %g fps; buckets %s) in %d shard%s, %" PRId64
               " bytes, %.2f s: %s\n",
               p->samples_done, p->samples_done, r.frames, o.fps, buckets, p->shards_done, p->shards_done == 1 ? "" : "s",
               p->bytes_written, p->seconds, o.out_dir);
    else
        printf("prepared %" PRId64 " samples (%" PRId64 " images; buckets %s) in %d shard%s, %" PRId64 " bytes, %.2f s: %s\n",
               p->samples_done, p->samples_done, buckets, p->shards_done, p->shards_done == 1 ? "" : "s", p->bytes_written,
               p->seconds, o.out_dir);
    if (r.uncaptioned) printf("%" PRId64 " input%s had no caption (the null prompt)\n", r.uncaptioned, r.uncaptioned == 1 ? "" : "s");
    if (r.other_files)
        printf("%" PRId64 " other file%s under %s ignored (not %s)\n", r.other_files, r.other_files == 1 ? "" : "s", o.in_dir,
               video ? MEDIA_VIDEO_EXTENSIONS : MEDIA_IMAGE_EXTENSIONS);
    print_train_line(o.out_dir);
    return 0;
}

int cmd_prepare(int argc, char **argv) {
    const char *sub = argc > 0 ? argv[0] : NULL;
    if (sub && strcmp(sub, "synthetic") == 0) return prepare_synthetic_command(argc - 1, argv + 1);
    if (sub && strcmp(sub, "images") == 0) return prepare_media_command(MEDIA_IMAGES, argc - 1, argv + 1);
    if (sub && strcmp(sub, "videos") == 0) return prepare_media_command(MEDIA_VIDEOS, argc - 1, argv + 1);
    if (sub && (strcmp(sub, "--help") == 0 || strcmp(sub, "-h") == 0 || strcmp(sub, "help") == 0)) {
        printf("usage: vfm %s\n\n%s\n", k_prepare_usage, k_prepare_about);
        return 0;
    }
    if (sub)
        fprintf(stderr, "vfm prepare: unknown subcommand '%s' (expected synthetic, images or videos; see vfm prepare --help)\n", sub);
    else fprintf(stderr, "vfm prepare: expected a subcommand: synthetic, images or videos (see vfm prepare --help)\n");
    return 2;
}
