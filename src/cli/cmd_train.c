/* vfm train: parses the command line and runs the trainer. */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "commands.h"
#include "core/error.h"
#include "parallel/launch.h"
#include "train/stop_signal.h"
#include "train/trainer.h"

int cmd_train(int argc, char **argv) {
    ArgFlag flags[] = {
        {"--config", "FILE", "YAML config (merged as preset -> file -> overrides)", NULL, 0},
        {"--resume", "auto|DIR", "continue from the newest complete checkpoint of checkpoint.save (auto), or from DIR", NULL, 0},
        {"--mock", NULL, "train on the built-in mock dataset (same as dataset.mock=true)", NULL, 0},
    };
    int nflags = (int)(sizeof flags / sizeof flags[0]), help;
    ArgList pos;
    vfm_status s = args_parse("train", argc, argv, flags, nflags, &pos, &help);
    if (s != VFM_OK) return cli_report(s);
    if (help) {
        args_print_help("train [--config FILE] [--resume auto|DIR] [--mock] [a.b.c=value ...]",
                        "Trains a diffusion transformer. Every key of the config (`vfm config keys`) can be overridden\n"
                        "on the command line, e.g. model.preset=dit-xl optimizer.lr=1e-4 train.train_iters=1000.\n"
                        "Checkpoints, metrics.jsonl, config.yaml, TensorBoard event files (tb_logs/) and validation\n"
                        "samples (validation_generation/) go to checkpoint.save, the run directory (null: save nothing).\n"
                        "diffusion.objective picks edm (default), flow or ddpm; train.eval_interval validates.\n"
                        "SIGTERM or SIGUSR1 (a cluster's preemption or time limit) stops the run after the current\n"
                        "step with a checkpoint, exit status 75: run again with --resume auto (scripts/train.sbatch).",
                        flags, nflags);
        return 0;
    }
    const char *overrides[258];
    int n = 0;
    for (int i = 0; i < pos.n; i++) {
        if (!strchr(pos.items[i], '=')) {
            fprintf(stderr, "vfm train: unexpected argument '%s' (overrides look like a.b.c=value)\n", pos.items[i]);
            return 2;
        }
        overrides[n++] = pos.items[i];
    }
    if (args_flag(flags, nflags, "--mock")->present) overrides[n++] = "dataset.mock=true";
    int everywhere = 0, stopped = 0;
    TrainOptions opt = {args_value(flags, nflags, "--config", NULL), overrides, n,
                        args_value(flags, nflags, "--resume", NULL), &everywhere, &stopped};
    s = train_run(&opt);
    if (s == VFM_OK && stopped) {
        launch_finalize();
        return TRAIN_EXIT_STOPPED; /* checkpointed on a signal: a job script requeues (stop_signal.h) */
    }
    if (s != VFM_OK && everywhere) {
        /* a config or layout check every rank failed alike, before any work: each rank ends
         * quietly with the same status and rank 0 alone prints the one line */
        LaunchInfo li;
        launch_detect(&li, NULL);
        if (li.launched && !launch_mpi_active()) launch_init(&li); /* (a config error comes before MPI starts) */
        int code = li.rank == 0 ? cli_report(s) : vfm_exit_code(s);
        launch_finalize(); /* a barrier: no rank ends (and makes the launcher end the job) before the line is out */
        return code;
    }
    /* Under a launcher a failure on one rank must stop them all (the others may wait in a
     * collective): MPI_Abort with the message. */
    if (s != VFM_OK && launch_mpi_active()) launch_abort(vfm_exit_code(s), "%s", vfm_last_error());
    launch_finalize();
    return cli_report(s);
}
