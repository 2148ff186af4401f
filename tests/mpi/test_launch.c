/* Launcher detection from the environment, and MPI left alone without a launcher. */
#include <string.h>

#include "mpi_test.h"

#ifdef VFM_MPI
#include <mpi.h>
#endif

static void check_detect(char **env, int launched, const char *launcher, int world, int rank, int local) {
    LaunchInfo l;
    launch_detect(&l, env);
    CHECK_MSG(l.launched == launched && strcmp(l.launcher, launcher) == 0 && l.world_size == world && l.rank == rank &&
                  l.local_rank == local,
              "%s: got launched %d, %s, world %d, rank %d, local %d", env[0] ? env[0] : "(empty)", l.launched, l.launcher,
              l.world_size, l.rank, l.local_rank);
}

TEST(launch_detect_launchers) {
    char *none[] = {"HOME=/root", NULL};
    check_detect(none, 0, "none", 1, 0, 0);
    char *ompi[] = {"OMPI_COMM_WORLD_SIZE=4", "OMPI_COMM_WORLD_RANK=2", "OMPI_COMM_WORLD_LOCAL_RANK=0",
                    "OMPI_COMM_WORLD_LOCAL_SIZE=2", "PMIX_RANK=2", NULL};
    check_detect(ompi, 1, "openmpi", 4, 2, 0);
    char *srun[] = {"SLURM_PROCID=3", "SLURM_NTASKS=8", "SLURM_LOCALID=1", "SLURM_STEP_ID=0", NULL};
    check_detect(srun, 1, "slurm", 8, 3, 1);
    /* an sbatch script has SLURM_PROCID=0 too, but no step: not a launch */
    char *batch[] = {"SLURM_PROCID=0", "SLURM_NTASKS=8", "SLURM_LOCALID=0", "SLURM_JOB_ID=77", NULL};
    check_detect(batch, 0, "none", 1, 0, 0);
    char *pmix[] = {"PMIX_RANK=5", "SLURM_PROCID=5", "SLURM_NTASKS=8", "SLURM_LOCALID=1", "SLURM_STEP_ID=2", NULL};
    check_detect(pmix, 1, "pmix", 8, 5, 1);
    char *pmi[] = {"PMI_RANK=1", "PMI_SIZE=2", "MPI_LOCALRANKID=1", NULL};
    check_detect(pmi, 1, "pmi", 2, 1, 1);
    char *bad[] = {"OMPI_COMM_WORLD_SIZE=four", "OMPI_COMM_WORLD_RANK=0", NULL};
    check_detect(bad, 0, "none", 1, 0, 0);
}

/* A plain process (no launcher variables) must not initialise MPI; under mpirun it must. */
TEST(launch_mpi_only_with_a_launcher) {
    const LaunchInfo *l = mt_launch();
    LaunchInfo env;
    launch_detect(&env, NULL);
    CHECK(env.launched == l->launched);
#ifdef VFM_MPI
    int init = -1;
    MPI_Initialized(&init);
    CHECK_MSG(init == l->launched, "MPI_Initialized = %d in a process %s a launcher", init,
              l->launched ? "started by" : "started without");
#endif
    CHECK(launch_mpi_active() == l->launched);
    if (!l->launched) CHECK(l->world_size == 1 && l->rank == 0 && strcmp(l->launcher, "none") == 0);
    else CHECK(l->world_size == env.world_size && l->rank == env.rank && l->local_rank >= 0 && l->local_size >= 1);
}

TEST(launch_gpu_mapping) {
    CHECK(launch_gpu_for_local_rank(5, 4) == 1);
    CHECK(launch_gpu_for_local_rank(0, 8) == 0);
    CHECK(launch_gpu_for_local_rank(3, 1) == 0);
    CHECK(launch_gpu_for_local_rank(3, 0) == -1);
}
