/* A count of the places where the host waits for the device: on CUDA every wait the runtime shim
 * makes (a blocking copy, a device, stream or event synchronisation: cuda_runtime_shim.cu) and the
 * CUDA ops that wait for a result themselves (a reduction returned to the host, an index check);
 * on the CPU, where nothing waits, the same places are counted where the code would wait on a GPU
 * (the objective's statistics read, a reduction returned to the host, a synchronisation). So a
 * CPU test holds the training step to its budget of round trips: none inside a step, one per log
 * interval (tests/unit/test_step_syncs.c). Waits inside the collectives of several ranks (NCCL,
 * MPI's staged buffers) are not counted. */
#ifndef VFM_HOST_READS_H
#define VFM_HOST_READS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Counts one wait; `what` (a string literal) names the place. Thread-safe. */
void vfm_host_read(const char *what);
/* Waits counted so far. */
uint64_t vfm_host_reads(void);
/* "name ×count, ..." of the places counted since the last reset, into buf; and the reset. */
void vfm_host_reads_report(char *buf, size_t n);
void vfm_host_reads_reset(void);

#ifdef __cplusplus
}
#endif
#endif
