/* Multi-rank tests: the TEST/CHECK macros of tests/unit/test.h, run by mpi_main.c on every rank
 * of an mpirun job (or as one plain process). Every test runs on every rank; its verdict is
 * collective (it fails when it fails on any rank, skips when it skips on any). A test must make
 * the same collective calls on every rank, so REQUIRE is only for conditions that hold or fail
 * on all ranks alike; a rank stuck for 120 s aborts the job with the test's name. */
#ifndef VFM_MPI_TEST_H
#define VFM_MPI_TEST_H

#include "../unit/test.h"
#include "parallel/comm.h"
#include "parallel/launch.h"

const LaunchInfo *mt_launch(void);
int mt_world(void);
int mt_rank(void);
/* An MPI-backend comm over all ranks (named "world"), made once by the runner. */
Comm *mt_world_comm(void);
/* 1 when the world size is one of the zero-terminated list. */
int mt_world_in(const int *sizes);
/* Memory equality, reported with the first differing element index of elem-byte elements. */
int mt_same_bits(const char *what, const void *got, const void *want, int64_t n, size_t elem, const char *file, int line);

#define REQUIRE_WORLD(...)                                                                    \
    do {                                                                                      \
        if (!mt_world_in((const int[]){__VA_ARGS__, 0}))                                      \
            SKIP("runs at world sizes %s (this job has %d)", #__VA_ARGS__, mt_world());       \
    } while (0)
#define CHECK_SAME_BITS(what, got, want, n) \
    mt_same_bits((what), (got), (want), (n), sizeof *(got), __FILE__, __LINE__)

#endif
