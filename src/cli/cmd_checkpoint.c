/* vfm checkpoint: look at checkpoints — `list` a run's checkpoints, `diff` two checkpoints'
 * weights (max |a-b| per tensor; exit 1 beyond --atol), the tool for reproducibility checks. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "checkpoint_dir.h"
#include "commands.h"
#include "core/fileutil.h"
#include "data/formats/safetensors.h"
#include "train/checkpoint.h"

static int diff(const char *a_path, const char *b_path, const char *file, double atol, int quiet) {
    char a_dir[1200], b_dir[1200], a_file[1400], b_file[1400];
    vfm_status s = cli_checkpoint_dir(a_path, NULL, a_dir, sizeof a_dir);
    if (s == VFM_OK) s = cli_checkpoint_dir(b_path, NULL, b_dir, sizeof b_dir);
    if (s != VFM_OK) return cli_report(s);
    path_join(a_file, sizeof a_file, a_dir, file);
    path_join(b_file, sizeof b_file, b_dir, file);
    SafetensorsFile *a, *b;
    if ((s = safetensors_open(&a, a_file)) != VFM_OK) return cli_report(s);
    if ((s = safetensors_open(&b, b_file)) != VFM_OK) {
        safetensors_close(a);
        return cli_report(s);
    }
    double worst = 0;
    int mismatched = 0;
    for (int i = 0; i < safetensors_count(a); i++) {
        const char *name = safetensors_name(a, i);
        int k = safetensors_find(b, name);
        DType da, db;
        int na, nb;
        int64_t sa[VFM_MAX_DIMS], sb[VFM_MAX_DIMS], numel = 1;
        safetensors_info(a, i, &da, &na, sa);
        int same = k >= 0 && safetensors_info(b, k, &db, &nb, sb) == VFM_OK && na == nb;
        for (int d = 0; same && d < na; d++) same = sa[d] == sb[d], numel *= sa[d];
        if (!same) {
            printf("%-48s missing or of another shape in %s\n", name, b_dir);
            mismatched++;
            continue;
        }
        float *x = malloc((size_t)numel * sizeof(float)), *y = malloc((size_t)numel * sizeof(float));
        double m = 0;
        if (safetensors_read_f32(a, i, x, numel) == VFM_OK && safetensors_read_f32(b, k, y, numel) == VFM_OK)
            for (int64_t e = 0; e < numel; e++) {
                double d = fabs((double)x[e] - (double)y[e]);
                if (!(d <= m)) m = d; /* NaN counts as the worst */
            }
        if (!quiet) printf("%-48s max|a-b| %.3g\n", name, m);
        if (!(m <= worst)) worst = m;
        free(x);
        free(y);
    }
    if (safetensors_count(b) != safetensors_count(a)) mismatched++;
    printf("%s vs %s: %d tensors, max|a-b| = %.3g%s\n", a_dir, b_dir, safetensors_count(a), worst,
           mismatched ? " (some tensors do not match up)" : "");
    safetensors_close(a);
    safetensors_close(b);
    return (mismatched || !(worst <= atol)) ? 1 : 0;
}

int cmd_checkpoint(int argc, char **argv) {
    ArgFlag flags[] = {
        {"--atol", "X", "diff: exit 1 when some weight differs by more than X (default 0: bitwise)", NULL, 0},
        {"--ema", NULL, "diff the EMA weights", NULL, 0},
        {"--quiet", NULL, "diff: only the summary line", NULL, 0},
    };
    int nflags = (int)(sizeof flags / sizeof flags[0]), help;
    ArgList pos;
    vfm_status s = args_parse("checkpoint", argc, argv, flags, nflags, &pos, &help);
    if (s != VFM_OK) return cli_report(s);
    if (help || pos.n == 0) {
        args_print_help("checkpoint list RUN_DIR | diff A B [--atol X] [--ema]",
                        "list: the newest complete checkpoint of a run directory (step, consumed samples).\n"
                        "diff: the largest absolute difference of every weight between two checkpoints (a run\n"
                        "directory means its newest checkpoint); exit 1 when above --atol.", flags, nflags);
        return help ? 0 : 2;
    }
    if (strcmp(pos.items[0], "diff") == 0 && pos.n == 3)
        return diff(pos.items[1], pos.items[2], args_flag(flags, nflags, "--ema")->present ? "ema.safetensors"
                                                                                          : "model.safetensors",
                    atof(args_value(flags, nflags, "--atol", "0")), args_flag(flags, nflags, "--quiet")->present);
    if (strcmp(pos.items[0], "list") == 0 && pos.n == 2) {
        char latest[1200];
        int found = 0;
        if ((s = checkpoint_find_latest(pos.items[1], latest, sizeof latest, &found)) != VFM_OK) return cli_report(s);
        if (!found) {
            printf("%s: no complete checkpoint\n", pos.items[1]);
            return 0;
        }
        CheckpointState st;
        if ((s = checkpoint_read_meta(latest, &st)) != VFM_OK) return cli_report(s);
        printf("newest: %s (step %lld, %lld samples, world %d)\n", latest, (long long)st.step,
               (long long)st.consumed_samples, st.world_size);
        checkpoint_state_free(&st);
        return 0;
    }
    fprintf(stderr, "vfm checkpoint: expected `list RUN_DIR` or `diff A B` (see vfm checkpoint --help)\n");
    return 2;
}
