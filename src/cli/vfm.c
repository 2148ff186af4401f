/* vfm: the command table, top-level help and dispatch. */
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "core/cuda_runtime_shim.h"
#include "core/error.h"
#include "core/log.h"
#include "data/media/av_util.h"
#include "data/media/video_encode.h"
#include "ops/ops.h"

#ifndef VFM_VERSION
#define VFM_VERSION "0.1.0"
#endif

static const Command g_commands[] = {
    {"train", "train a diffusion transformer (vfm train --config FILE [a.b=v ...])", cmd_train},
    {"sample", "generate latents / pictures from a checkpoint", cmd_sample},
    {"prepare", "build WebDataset shards (synthetic | images | videos)", cmd_prepare},
    {"data", "dataset tools: index, inspect, bench", cmd_data},
    {"model", "model information: parameters and FLOPs (vfm model info)", cmd_model},
    {"plan", "the parallel layout for a model and a number of GPUs: memory and step time per layout", cmd_plan},
    {"bench", "measure training throughput (tokens/s, TFLOP/s, MFU, memory)", cmd_bench},
    {"export", "export checkpoint weights to one safetensors file", cmd_export},
    {"import", "make a checkpoint from a state dict (the DiT reference's, safetensors)", cmd_import},
    {"checkpoint", "list a run's checkpoints; diff two checkpoints' weights", cmd_checkpoint},
    {"config", "show the merged configuration (vfm config show)", cmd_config},
    {"version", "print the version and build features", cmd_version},
};

const Command *vfm_commands(int *count) {
    *count = (int)(sizeof g_commands / sizeof g_commands[0]);
    return g_commands;
}

static void print_help(void) {
    printf("vfm %s — train image and video diffusion transformers\n\n", VFM_VERSION);
    printf("usage: vfm <command> [options]\n\ncommands:\n");
    int n;
    const Command *c = vfm_commands(&n);
    for (int i = 0; i < n; i++) printf("  %-9s %s\n", c[i].name, c[i].summary);
    printf("\n`vfm <command> --help` describes a command. Docs: README.md and docs/.\n");
}

int cmd_version(int argc, char **argv) {
    (void)argv;
    if (argc > 0) {
        fprintf(stderr, "vfm version: takes no arguments\n");
        return 2;
    }
    printf("vfm %s\n", VFM_VERSION);
#ifdef VFM_CUDA
    /* the GPU libraries are loaded at run time: say which were found (or why not) */
    printf("cuda: built in; device: %s\n", vfm_cuda_describe());
    fputs(ops_describe_libraries(), stdout);
#else
    printf("cuda: not built (nvcc was not found)\n");
#endif
    printf("pictures: PNG (libpng), JPEG (libjpeg)\n");
    if (av_api()) printf("video: FFmpeg (%s), MP4 with %s\n", av_api_libraries(), mp4_encoder_name() ? mp4_encoder_name() : "no encoder");
    else printf("video: unavailable: %s\n", vfm_last_error());
    return 0;
}

int vfm_main(int argc, char **argv) {
    if (argc < 2) {
        print_help();
        return 2;
    }
    const char *name = argv[1];
    if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0 || strcmp(name, "help") == 0) {
        print_help();
        return 0;
    }
    if (strcmp(name, "--version") == 0) return cmd_version(0, NULL);
    int n;
    const Command *c = vfm_commands(&n);
    for (int i = 0; i < n; i++)
        if (strcmp(c[i].name, name) == 0) return c[i].run(argc - 2, argv + 2);
    if (name[0] == '-') fprintf(stderr, "vfm: unknown option '%s' (see vfm --help)\n", name);
    else fprintf(stderr, "vfm: unknown command '%s' (see vfm --help)\n", name);
    return 2;
}
