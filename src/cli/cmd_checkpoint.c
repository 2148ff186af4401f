/* vfm checkpoint: look at checkpoints — `list` a run's checkpoints, `diff` two checkpoints'
 * weights (max |a-b| per tensor; exit 1 beyond --atol or when they cannot be compared), the tool
 * for reproducibility checks. */
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

/* Reads tensor i of f as f32 into a malloc'd buffer (*out); 0 when it cannot. */
static int read_tensor(SafetensorsFile *f, int i, int64_t numel, float **out) {
    *out = malloc((size_t)(numel > 0 ? numel : 1) * sizeof(float));
    if (!*out) vfm_fail(VFM_ERR_NOMEM, "no memory for its %lld values", (long long)numel);
    if (*out && safetensors_read_f32(f, i, *out, numel) == VFM_OK) return 1;
    free(*out);
    *out = NULL;
    return 0;
}

/* Every tensor of A against B: the largest |a-b|, and as failures (each named) a tensor that
 * cannot be read, one present in one file only, one of another shape; two checkpoints at other
 * steps are not compared unless any_step. Exit 1 on any failure or beyond atol. */
static int diff(const char *a_path, const char *b_path, const char *file, double atol, int quiet, int any_step) {
    char a_dir[1200], b_dir[1200], a_file[1400], b_file[1400];
    vfm_status s = cli_checkpoint_dir(a_path, NULL, a_dir, sizeof a_dir);
    if (s == VFM_OK) s = cli_checkpoint_dir(b_path, NULL, b_dir, sizeof b_dir);
    if (s != VFM_OK) return cli_report(s);
    CheckpointState sa, sb;
    if ((s = checkpoint_read_meta(a_dir, &sa)) != VFM_OK) return cli_report(s);
    if ((s = checkpoint_read_meta(b_dir, &sb)) != VFM_OK) {
        checkpoint_state_free(&sa);
        return cli_report(s);
    }
    int64_t step_a = sa.step, step_b = sb.step;
    checkpoint_state_free(&sa);
    checkpoint_state_free(&sb);
    if (step_a != step_b && !any_step) {
        printf("%s is at step %lld, %s at step %lld: not compared (--any-step compares them anyway)\n", a_dir,
               (long long)step_a, b_dir, (long long)step_b);
        return 1;
    }
    path_join(a_file, sizeof a_file, a_dir, file);
    path_join(b_file, sizeof b_file, b_dir, file);
    SafetensorsFile *a, *b;
    if ((s = safetensors_open(&a, a_file)) != VFM_OK) return cli_report(s);
    if ((s = safetensors_open(&b, b_file)) != VFM_OK) {
        safetensors_close(a);
        return cli_report(s);
    }
    double worst = 0;
    int unreadable = 0, one_side = 0, reshaped = 0;
    for (int i = 0; i < safetensors_count(a); i++) {
        const char *name = safetensors_name(a, i);
        int k = safetensors_find(b, name);
        if (k < 0) {
            printf("%-48s only in %s\n", name, a_dir);
            one_side++;
            continue;
        }
        DType da, db;
        int na, nb;
        int64_t ea[VFM_MAX_DIMS], eb[VFM_MAX_DIMS], numel = 1;
        safetensors_info(a, i, &da, &na, ea);
        safetensors_info(b, k, &db, &nb, eb);
        int same = na == nb;
        for (int d = 0; same && d < na; d++) same = ea[d] == eb[d], numel *= ea[d];
        if (!same) {
            char ta[160], tb[160];
            tensor_shape_text(ea, na, ta, sizeof ta);
            tensor_shape_text(eb, nb, tb, sizeof tb);
            printf("%-48s shape %s, %s in the other\n", name, ta, tb);
            reshaped++;
            continue;
        }
        float *x, *y = NULL;
        int ok = read_tensor(a, i, numel, &x) && read_tensor(b, k, numel, &y);
        if (!ok) {
            printf("%-48s cannot be read: %s\n", name, vfm_last_error());
            unreadable++;
            free(x);
            continue;
        }
        double m = 0;
        for (int64_t e = 0; e < numel; e++) {
            double d = fabs((double)x[e] - (double)y[e]);
            if (!(d <= m)) m = d; /* NaN counts as the worst */
        }
        if (!quiet) printf("%-48s max|a-b| %.3g\n", name, m);
        if (!(m <= worst)) worst = m;
        free(x);
        free(y);
    }
    for (int k = 0; k < safetensors_count(b); k++)
        if (safetensors_find(a, safetensors_name(b, k)) < 0) {
            printf("%-48s only in %s\n", safetensors_name(b, k), b_dir);
            one_side++;
        }
    int failures = unreadable + one_side + reshaped;
    printf("%s vs %s: %d tensors, max|a-b| = %.3g", a_dir, b_dir, safetensors_count(a), worst);
    if (failures)
        printf("; not comparable: %d unreadable, %d in one checkpoint only, %d of another shape", unreadable, one_side,
               reshaped);
    printf("\n");
    safetensors_close(a);
    safetensors_close(b);
    return (failures || !(worst <= atol)) ? 1 : 0;
}

int cmd_checkpoint(int argc, char **argv) {
    ArgFlag flags[] = {
        {"--atol", "X", "diff: exit 1 when some weight differs by more than X (default 0: bitwise)", NULL, 0},
        {"--ema", NULL, "diff the EMA weights", NULL, 0},
        {"--quiet", NULL, "diff: only the summary line", NULL, 0},
        {"--any-step", NULL, "diff: compare checkpoints of different steps too", NULL, 0},
    };
    int nflags = (int)(sizeof flags / sizeof flags[0]), help;
    ArgList pos;
    vfm_status s = args_parse("checkpoint", argc, argv, flags, nflags, &pos, &help);
    if (s != VFM_OK) return cli_report(s);
    if (help || pos.n == 0) {
        args_print_help("checkpoint list RUN_DIR | diff A B [--atol X] [--ema] [--any-step]",
                        "list: the newest complete checkpoint of a run directory (step, consumed samples).\n"
                        "diff: the largest absolute difference of every weight between two checkpoints (a run\n"
                        "directory means its newest checkpoint); exit 1 when above --atol, when a tensor cannot be\n"
                        "read, is in one checkpoint only or has another shape (each named), or when the two are\n"
                        "at different steps (unless --any-step).", flags, nflags);
        return help ? 0 : 2;
    }
    if (strcmp(pos.items[0], "diff") == 0 && pos.n == 3)
        return diff(pos.items[1], pos.items[2], args_flag(flags, nflags, "--ema")->present ? "ema.safetensors"
                                                                                          : "model.safetensors",
                    atof(args_value(flags, nflags, "--atol", "0")), args_flag(flags, nflags, "--quiet")->present,
                    args_flag(flags, nflags, "--any-step")->present);
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
