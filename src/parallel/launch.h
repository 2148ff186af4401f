/* Process launch: whether a launcher (Open MPI's mpirun, Slurm's srun, a PMI/PMIx launcher)
 * started this process, its place in the job (world size, rank, local rank), MPI start-up and
 * shut-down, and the one way to stop a whole job on a fatal error.
 *
 * MPI is initialised only when a launcher's environment is present; a plain `vfm ...` never
 * calls into MPI (start-up stays fast and a machine without an MPI runtime works). How a dead
 * rank brings the job down, without a hang:
 *  - a rank that exits or crashes before launch_finalize: Open MPI's runtime (mpirun/orted, or
 *    srun with PMIx) sees a process end without MPI_Finalize and kills every other rank, so peers
 *    blocked in a collective die too; mpirun exits non-zero naming the process;
 *  - a rank whose own call fails (a vfm_status from any layer, a failed collective: communicators
 *    return MPI errors instead of aborting, so the message names the op and the group) reports
 *    the message and calls launch_abort(), which is MPI_Abort on the world: every rank stops. */
#ifndef VFM_LAUNCH_H
#define VFM_LAUNCH_H

#include <stddef.h>

#include "core/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct LaunchInfo {
    int launched;        /* 1: a launcher started this process (MPI is used) */
    int world_size, rank;
    int local_rank, local_size; /* among the ranks on this node */
    char launcher[16];   /* "none", "openmpi", "pmix", "pmi", "slurm" */
    int slurm_step;      /* inside a Slurm job step (srun): SLURM_STEP_ID set */
} LaunchInfo;

/* Reads the launcher's variables from envp (an environ-style NULL-terminated array; NULL means
 * this process's environment). Never touches MPI. In order of precedence:
 *   Open MPI: OMPI_COMM_WORLD_SIZE, _RANK, _LOCAL_RANK, _LOCAL_SIZE
 *   PMIx:     PMIX_RANK (size from SLURM_NTASKS when set, else known only after MPI_Init)
 *   PMI:      PMI_RANK, PMI_SIZE (MPICH hydra, srun --mpi=pmi2), local rank from MPI_LOCALRANKID
 *   Slurm:    SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, only inside an srun step (SLURM_STEP_ID
 *             set): the batch script itself, which also has SLURM_PROCID=0, is not a launch.
 * Without any: world 1, rank 0, launcher "none". Values unknown before MPI_Init are 0.
 * launch_init refuses "pmi" and "slurm" with more than one task when vfm's MPI is Open MPI (it joins
 * a Slurm step through PMIx only) and runs a single such task without MPI. */
void launch_detect(LaunchInfo *out, char **envp);

/* One line for the log: who started this process and its place, e.g. "srun with PMIx: rank 0 of
 * 8, local rank 0 of 4", "mpirun (Open MPI): ...", "none: a single process". */
const char *launch_describe(const LaunchInfo *info, char *buf, size_t size);

/* launch_detect, then, when launched, MPI_Init_thread (MPI_THREAD_FUNNELED: only the main thread
 * calls MPI) and the world size, rank and local rank from MPI itself (local rank: rank in the
 * node's shared-memory communicator). Sets the log prefix "[rank R] " when the world has more
 * than one rank. Errors: a launcher's environment in a build without MPI, MPI_Init failing, or
 * MPI disagreeing with the environment. Calling it twice returns the first result. */
vfm_status launch_init(LaunchInfo *out);
/* MPI_Finalize when launch_init initialised MPI; otherwise nothing. */
void launch_finalize(void);
/* 1 while MPI is initialised and not finalised (never 1 without a launcher). */
int launch_mpi_active(void);
/* The GPU for a local rank: local_rank mod device_count (with CUDA_VISIBLE_DEVICES narrowed to one
 * GPU per task, as `srun --gpus-per-task=1` does, that is device 0). -1 when there is no device. */
int launch_gpu_for_local_rank(int local_rank, int device_count);

/* Stops the whole job: prints "vfm: rank R of N: fatal: <message>" to stderr and calls MPI_Abort
 * on the world when MPI is active, so every rank ends (exit status `code`); without MPI it prints
 * "vfm: <message>" and exits with `code`. The only function in the library that ends the
 * process; for main and for fatal errors on one rank that the other ranks cannot know about. */
void launch_abort(int code, const char *fmt, ...) __attribute__((noreturn, format(printf, 2, 3)));

#ifdef __cplusplus
}
#endif
#endif
