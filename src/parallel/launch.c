/* Launcher detection, MPI start-up and shut-down, job-wide abort (see launch.h). */
#include "launch.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/log.h"

#ifdef VFM_MPI
#include <mpi.h>
#endif

extern char **environ;

static LaunchInfo g_info;
static int g_initialised, g_mpi_owned;

static const char *env_get(char **envp, const char *name) {
    size_t n = strlen(name);
    for (char **e = envp; e && *e; e++)
        if (strncmp(*e, name, n) == 0 && (*e)[n] == '=') return *e + n + 1;
    return NULL;
}

/* A non-negative integer variable, or -1 when absent or malformed. */
static int env_int(char **envp, const char *name) {
    const char *v = env_get(envp, name);
    if (!v || !*v) return -1;
    char *end;
    long x = strtol(v, &end, 10);
    return *end == 0 && x >= 0 && x < (1L << 30) ? (int)x : -1;
}

static int pick(int value, int fallback) { return value >= 0 ? value : fallback; }

void launch_detect(LaunchInfo *out, char **envp) {
    if (!envp) envp = environ;
    memset(out, 0, sizeof *out);
    out->world_size = out->local_size = 1;
    snprintf(out->launcher, sizeof out->launcher, "none");
    int slurm_step = env_get(envp, "SLURM_STEP_ID") != NULL || env_get(envp, "SLURM_STEPID") != NULL;
    int slurm_size = slurm_step ? env_int(envp, "SLURM_NTASKS") : -1;
    int slurm_local = slurm_step ? env_int(envp, "SLURM_LOCALID") : -1;
    out->slurm_step = slurm_step;
    if (env_int(envp, "OMPI_COMM_WORLD_SIZE") > 0 && env_int(envp, "OMPI_COMM_WORLD_RANK") >= 0) {
        snprintf(out->launcher, sizeof out->launcher, "openmpi");
        out->world_size = env_int(envp, "OMPI_COMM_WORLD_SIZE");
        out->rank = env_int(envp, "OMPI_COMM_WORLD_RANK");
        out->local_rank = pick(env_int(envp, "OMPI_COMM_WORLD_LOCAL_RANK"), 0);
        out->local_size = pick(env_int(envp, "OMPI_COMM_WORLD_LOCAL_SIZE"), 0);
    } else if (env_int(envp, "PMIX_RANK") >= 0) {
        snprintf(out->launcher, sizeof out->launcher, "pmix");
        out->rank = env_int(envp, "PMIX_RANK");
        out->world_size = pick(slurm_size, 0);
        out->local_rank = pick(slurm_local, 0);
        out->local_size = 0;
    } else if (env_int(envp, "PMI_RANK") >= 0 && env_int(envp, "PMI_SIZE") > 0) {
        snprintf(out->launcher, sizeof out->launcher, "pmi");
        out->rank = env_int(envp, "PMI_RANK");
        out->world_size = env_int(envp, "PMI_SIZE");
        out->local_rank = pick(env_int(envp, "MPI_LOCALRANKID"), pick(slurm_local, 0));
        out->local_size = pick(env_int(envp, "MPI_LOCALNRANKS"), 0);
    } else if (slurm_step && env_int(envp, "SLURM_PROCID") >= 0 && slurm_size > 0) {
        snprintf(out->launcher, sizeof out->launcher, "slurm");
        out->rank = env_int(envp, "SLURM_PROCID");
        out->world_size = slurm_size;
        out->local_rank = pick(slurm_local, 0);
        out->local_size = 0;
    } else {
        return;
    }
    out->launched = 1;
}

const char *launch_describe(const LaunchInfo *i, char *buf, size_t size) {
    const char *who = !strcmp(i->launcher, "openmpi") ? "mpirun (Open MPI)"
                      : !strcmp(i->launcher, "pmix")  ? (i->slurm_step ? "srun with PMIx" : "a PMIx launcher")
                      : !strcmp(i->launcher, "pmi")   ? (i->slurm_step ? "srun with PMI-2" : "a PMI launcher")
                      : !strcmp(i->launcher, "slurm") ? "srun (Slurm's environment)"
                                                      : "none";
    if (!i->launched)
        snprintf(buf, size, "%s: a single process%s", who, strcmp(who, "none") ? ", MPI not used" : "");
    else
        snprintf(buf, size, "%s: rank %d of %d, local rank %d of %d", who, i->rank, i->world_size, i->local_rank,
                 i->local_size);
    return buf;
}

int launch_mpi_active(void) {
#ifdef VFM_MPI
    int init = 0, fini = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fini);
    return init && !fini;
#else
    return 0;
#endif
}

vfm_status launch_init(LaunchInfo *out) {
    if (g_initialised) {
        *out = g_info;
        return VFM_OK;
    }
    LaunchInfo info;
    launch_detect(&info, NULL);
#if defined(VFM_MPI) && defined(OPEN_MPI)
    /* Open MPI joins a Slurm step through PMIx only (Debian's build has no PMI-1/PMI-2 client):
     * MPI_Init under `srun --mpi=pmi2` or a plain `srun` would abort the process with a page of
     * MPI errors. One task needs no MPI at all; more are refused in one line. */
    if (info.launched && (!strcmp(info.launcher, "pmi") || !strcmp(info.launcher, "slurm"))) {
        if (info.world_size > 1)
            return vfm_fail(VFM_ERR_USAGE,
                            "started by srun %s (%d tasks): vfm's MPI (Open MPI) joins a Slurm step through PMIx "
                            "only; run `srun --mpi=pmix ...` (docs/parallel.md \"Slurm\")",
                            !strcmp(info.launcher, "pmi") ? "with a PMI-2 environment (--mpi=pmi2)" : "without --mpi",
                            info.world_size);
        info.launched = 0; /* one task: a plain single process */
    }
#endif
    if (info.launched) {
#ifdef VFM_MPI
        if (!launch_mpi_active()) {
            int provided = 0;
            if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
                return vfm_fail(VFM_ERR_IO, "MPI_Init_thread failed (launcher: %s)", info.launcher);
            g_mpi_owned = 1;
        }
        /* errors come back to the caller (and name the op); a dead peer still ends the job
         * through the runtime (see launch.h) */
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        int size = 0, rank = 0;
        MPI_Comm_size(MPI_COMM_WORLD, &size);
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        if ((info.world_size > 0 && info.world_size != size) || info.rank != rank)
            return vfm_fail(VFM_ERR_INTERNAL, "launcher %s says rank %d of %d but MPI says rank %d of %d", info.launcher,
                            info.rank, info.world_size, rank, size);
        info.world_size = size;
        MPI_Comm node;
        if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node) == MPI_SUCCESS) {
            MPI_Comm_rank(node, &info.local_rank);
            MPI_Comm_size(node, &info.local_size);
            MPI_Comm_free(&node);
        }
#else
        return vfm_fail(VFM_ERR_UNSUPPORTED,
                        "started by a launcher (%s, rank %d of %d) but this build has no MPI: install libopenmpi-dev and "
                        "rebuild", info.launcher, info.rank, info.world_size);
#endif
    }
    if (info.world_size > 1) log_set_rank(info.rank, info.world_size);
    g_info = info;
    g_initialised = 1;
    *out = info;
    return VFM_OK;
}

void launch_finalize(void) {
#ifdef VFM_MPI
    if (g_mpi_owned && launch_mpi_active()) MPI_Finalize();
#endif
    g_mpi_owned = 0;
}

int launch_gpu_for_local_rank(int local_rank, int device_count) {
    if (device_count <= 0) return -1;
    return (local_rank < 0 ? 0 : local_rank) % device_count;
}

void launch_abort(int code, const char *fmt, ...) {
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fflush(stdout);
#ifdef VFM_MPI
    if (launch_mpi_active()) {
        int rank = 0, size = 1;
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        MPI_Comm_size(MPI_COMM_WORLD, &size);
        fprintf(stderr, "vfm: rank %d of %d: fatal: %s\n", rank, size, msg);
        fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, code);
        _exit(code); /* MPI_Abort does not return; this is for a broken runtime */
    }
#endif
    fprintf(stderr, "vfm: %s\n", msg);
    fflush(stderr);
    exit(code);
}
