// The CPU harness, inside: what the block scheduler (launch.cpp) and the library stand-ins
// (cublaslt.cpp, cudnn_attention.cpp) ask of the host CUDA runtime (runtime.cpp).
#ifndef VFM_HARNESS_RUNTIME_H
#define VFM_HARNESS_RUNTIME_H

#include <cuda_runtime.h>
#include <stddef.h>

// A launch error (bad sizes, a bad stream): cudaGetLastError returns e once; cudaGetErrorString(e)
// names the kernel and what was wrong.
void runtime_launch_error(cudaError_t e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// A fault while a kernel or a library call ran: printed at once and sticky, as on the GPU (every
// later runtime call returns cudaErrorLaunchFailure, whose string is this message).
void runtime_kernel_fault(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
cudaError_t runtime_sticky_error(void);
// Whether s is a stream a launch may use (NULL, the legacy or per-thread stream, or a live one).
bool runtime_stream_ok(cudaStream_t s, const char *kernel);
// The dynamic shared memory a launch of kernel may ask for (48 KiB, or the opt-in of
// cudaFuncSetAttribute(cudaFuncAttributeMaxDynamicSharedMemorySize)).
size_t runtime_dynamic_shared_limit(const void *kernel);
// Bytes from p to the end of the device allocation holding p; 0 when p is not device memory.
size_t runtime_device_extent(const void *p);

#endif
